//! W3-F's "types inside", counted in the product's code (every package the
//! binary is built from; test modules and files excluded):
//! - a `Result<_, String>` only where an API asks for a `String` error;
//! - nothing opens the SQLite database but the store's `Db`;
//! - `serde_json::Value` fields looked up by key (`v["key"]`,
//!   `.pointer(…)`) only in the wire crate's relays, file by file as the
//!   table below says. (`.get("key")` is not counted: maps and headers
//!   share it.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;

/// The packages of the binary (the test servers, `mock-*`, are not).
const ROOTS: &[&str] = &[
    "core/src",
    "bench/src",
    "src",
    "wire/src",
    "chat/src",
    "tinker/src",
];

/// `Result<_, String>` kept, and why: the API on the other side asks for
/// a `String`.
const STRING_ERRORS: &[(&str, usize, &str)] = &[
    (
        "core/src/plugins/sandbox/host.rs",
        2,
        "WIT host calls: the plugin ABI's result<_, string>",
    ),
    (
        "core/src/store/jobs.rs",
        1,
        "a job's failure, stored as text",
    ),
    ("src/cli/setup.rs", 1, "dialoguer's validator"),
];

/// Key lookups on `Value`: only in the wire crate, where JSON is relayed
/// between APIs rather than read for metaclaw's own use (an answer or a
/// stream passed on in the client's API shape, unknown fields kept), and
/// only as many as each file's row says. A row may only go down, and when
/// its file's count does, the row goes down with it (the test says so).
/// Everywhere else — the core, the binary, the bench, the chat and Tinker
/// crates, and the wire crate's request fronts — JSON is read into types.
const WIRE_RELAYS: &[(&str, usize, &str)] = &[
    (
        "wire/src/request/anthropic.rs",
        32,
        "from_chat: the chat request, as the turn pipeline made it, relayed to an Anthropic upstream",
    ),
    (
        "wire/src/response/anthropic.rs",
        27,
        "an Anthropic upstream's answer relayed as a chat completion, and back",
    ),
    (
        "wire/src/response/error_body.rs",
        9,
        "an upstream's error body relayed in the client's API shape",
    ),
    (
        "wire/src/response/responses.rs",
        21,
        "a chat completion relayed as a Responses answer",
    ),
    (
        "wire/src/stream/anthropic.rs",
        40,
        "SSE events relayed between Anthropic's and chat's streams",
    ),
    (
        "wire/src/stream/mod.rs",
        2,
        "a stream's error event relayed",
    ),
    (
        "wire/src/stream/replay.rs",
        18,
        "a recorded answer replayed as the client's stream",
    ),
    (
        "wire/src/stream/responses.rs",
        22,
        "SSE events relayed from chat's stream to Responses'",
    ),
    (
        "wire/src/text.rs",
        1,
        "a content part's text, of whichever API relayed it",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// `text` without the items under `#[cfg(test)]` (a module to its
/// closing brace, or an item to its `;`) and without comments.
fn product_code(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut kept = String::new();
    let mut at = 0;
    while let Some(found) = text[at..].find("#[cfg(test)]") {
        let start = at + found;
        kept.push_str(&text[at..start]);
        let after = start + "#[cfg(test)]".len();
        let brace = text[after..].find('{').map(|i| after + i);
        let semi = text[after..].find(';').map(|i| after + i);
        at = match (brace, semi) {
            (_, Some(s)) if brace.is_none_or(|b| s < b) => s + 1,
            (Some(b), _) => {
                let (mut depth, mut i) = (0usize, b);
                while i < bytes.len() {
                    match bytes[i] {
                        b'{' => depth += 1,
                        b'}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i = past_literal(bytes, i).unwrap_or(i + 1);
                }
                i + 1
            }
            _ => text.len(),
        }
        .min(text.len());
    }
    kept.push_str(&text[at..]);
    kept.lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l.split("//").next().unwrap_or(""),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a string, raw string, character literal or comment starting at
/// `i` ends (the index after it); none if none starts there. Braces and
/// quotes inside them are not code.
fn past_literal(bytes: &[u8], i: usize) -> Option<usize> {
    let at = |j: usize| bytes.get(j).copied();
    let end_of = |from: usize, stop: &[u8]| {
        (from..bytes.len())
            .find(|&j| bytes[j..].starts_with(stop))
            .map_or(bytes.len(), |j| j + stop.len())
    };
    match bytes[i] {
        b'"' => {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            Some(j + 1)
        }
        // r"…", r#"…"#, br#"…"#.
        b'r' => {
            let hashes = bytes[i + 1..].iter().take_while(|&&c| c == b'#').count();
            (at(i + 1 + hashes) == Some(b'"')).then(|| {
                let mut stop = vec![b'"'];
                stop.extend(std::iter::repeat_n(b'#', hashes));
                end_of(i + 2 + hashes, &stop)
            })
        }
        // '{', '\'', '"' (a lifetime `'a` has no closing quote two on).
        b'\'' if at(i + 1) == Some(b'\\') => Some(end_of(i + 3, b"'")),
        b'\'' if at(i + 2) == Some(b'\'') => Some(i + 3),
        b'/' if at(i + 1) == Some(b'/') => Some(end_of(i, b"\n")),
        b'/' if at(i + 1) == Some(b'*') => Some(end_of(i + 2, b"*/")),
        _ => None,
    }
}

/// How often `pattern` occurs in each product file's code (files with
/// none left out), by path relative to `host/`.
fn counts(pattern: &str) -> BTreeMap<String, usize> {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let re = Regex::new(pattern).unwrap();
    let mut found = BTreeMap::new();
    for root in ROOTS {
        let mut files = Vec::new();
        rust_files(&host.join(root), &mut files);
        for file in files {
            let code = product_code(&std::fs::read_to_string(&file).unwrap());
            // A key lookup indexes an expression (`v["k"]`, `f()["k"]`,
            // `v[0]["k"]`); `(["a"])` is an array.
            let n = re
                .find_iter(&code)
                .filter(|m| {
                    !m.as_str().starts_with('[')
                        || code[..m.start()]
                            .chars()
                            .next_back()
                            .is_some_and(|c| c.is_alphanumeric() || "_)]".contains(c))
                })
                .count();
            if n > 0 {
                let name = file.strip_prefix(host).unwrap().display().to_string();
                found.insert(name, n);
            }
        }
    }
    found
}

/// Where `found` differs from `allowed`, in words.
fn differences(found: &BTreeMap<String, usize>, allowed: &[(&str, usize)]) -> Vec<String> {
    let allowed: BTreeMap<&str, usize> = allowed.iter().copied().collect();
    let mut wrong = Vec::new();
    for (file, &n) in found {
        match allowed.get(file.as_str()) {
            None => wrong.push(format!("{file}: {n}, where none is allowed")),
            Some(&max) if n > max => wrong.push(format!("{file}: {n}, more than its {max}")),
            Some(&max) if n < max => wrong.push(format!(
                "{file}: {n}, fewer than the table's {max}: lower its row (the work left)"
            )),
            Some(_) => {}
        }
    }
    for (file, max) in allowed {
        if !found.contains_key(file) {
            wrong.push(format!("{file}: none left: remove its row ({max})"));
        }
    }
    wrong
}

#[test]
fn string_errors_only_where_an_api_asks_for_one() {
    let found = counts(r"Result<[^;{=]*?,\s*String>");
    let allowed: Vec<(&str, usize)> = STRING_ERRORS.iter().map(|(f, n, _)| (*f, *n)).collect();
    let wrong = differences(&found, &allowed);
    assert!(
        wrong.is_empty(),
        "Result<_, String> in product code (give the module an error enum):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn only_the_store_opens_the_database() {
    let found = counts(r"Connection::open");
    let wrong = differences(&found, &[("core/src/store/db.rs", 2)]);
    assert!(
        wrong.is_empty(),
        "SQLite opened outside the store (ask store::Db for a reader or a side writer):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn value_lookups_by_key_only_in_the_wire_crates_relays() {
    let found = counts(r#"\[\s*"[A-Za-z_0-9]+"\s*\]|\.pointer\("#);
    assert!(
        WIRE_RELAYS
            .iter()
            .all(|(f, _, _)| f.starts_with("wire/src/")
                && !f.starts_with("wire/src/request/chat")
                && !f.contains("/request/responses")),
        "a row outside the wire crate's relays"
    );
    let allowed: Vec<(&str, usize)> = WIRE_RELAYS.iter().map(|(f, n, _)| (*f, *n)).collect();
    let wrong = differences(&found, &allowed);
    let total: usize = found.values().sum();
    assert!(
        wrong.is_empty(),
        "serde_json::Value looked up by key ({total} in all; read it into a type instead):\n{}",
        wrong.join("\n")
    );
}

/// The scanner itself: test items are left out, code after them is not.
#[test]
fn test_items_are_left_out_and_code_after_them_counted() {
    let text = "fn a() { v[\"x\"]; }\n#[cfg(test)]\nmod tests { fn t() { v[\"y\"]; let s = \"}\"; let r = r#\"\\\"}\"#; let c = '}'; // }\n } }\n#[cfg(test)]\nuse foo;\nfn b() { w[\"z\"]; } // u[\"c\"]\n";
    let code = product_code(text);
    assert!(
        code.contains(r#"v["x"]"#) && code.contains(r#"w["z"]"#),
        "{code}"
    );
    assert!(
        !code.contains(r#"v["y"]"#) && !code.contains("use foo") && !code.contains(r#"u["c"]"#),
        "{code}"
    );
}
