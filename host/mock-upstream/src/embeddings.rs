//! `POST /v1/embeddings`: a deterministic hashed bag of words for every
//! model, so texts that share words are similar.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::Dummy;
use crate::behaviour::{Behaviour, behaviour};
use crate::routes::error;

/// Dimensions of the dummy's embeddings.
pub const EMBEDDING_DIM: usize = 256;

pub(crate) async fn embeddings(
    State(dummy): State<Arc<Dummy>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let s = &dummy.stats;
    s.embedding_requests.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut auth) = s.embedding_auth.lock() {
        *auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let model = request["model"].as_str().unwrap_or_default().to_string();
    let texts: Vec<String> = match &request["input"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|t| t.as_str().map(String::from))
            .collect(),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "input must be a string or a list of strings",
            );
        }
    };
    match behaviour(&model) {
        Some(Behaviour::Error(status)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            return error(status, format!("dummy error {}", status.as_u16()));
        }
        Some(Behaviour::Slow(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(Behaviour::Hang) => std::future::pending::<()>().await,
        _ => {}
    }
    s.embedded_texts
        .fetch_add(texts.len() as u64, Ordering::Relaxed);
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({ "object": "embedding", "index": i, "embedding": hashed_embedding(t, EMBEDDING_DIM) }))
        .collect();
    axum::Json(json!({
        "object": "list",
        "model": model,
        "data": data,
        "usage": { "prompt_tokens": 0, "total_tokens": 0 },
    }))
    .into_response()
}

/// Words hashed into `dim` signed buckets, L2-normalised.
pub fn hashed_embedding(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim.max(1)];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 2)
    {
        let word = word.to_lowercase();
        let word = word.strip_suffix('s').unwrap_or(&word);
        // FNV-1a: stable across runs and platforms.
        let h = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
        let slots = v.len() as u64;
        v[(h % slots) as usize] += sign;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}
