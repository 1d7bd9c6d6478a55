//! HTTP helpers shared by the proxy, the admin routes and every client metaclaw
//! runs (upstream, judge and evolver LLMs, embeddings, the CLI).

/// A `Content-Type`'s media type without parameters, lowercase
/// (`Text/Plain; charset=utf-8` → `text/plain`).
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}
