//! `POST /v1/completions` for the model `teacher`: a distillation teacher
//! (`opd`), answering `echo: true` with a logprob for every token of the
//! prompt (text or token ids) and one generated token. Text is tokenized by
//! the model's tokenizer given to [`Dummy::with_tokenizer`] (one token per
//! character, id = its code, without one), so a test chooses whether the
//! teacher shares the student's tokenizer. The logprob of token id `t`
//! after the first is `−0.5 · (1 + t mod 4)`: fixed, so a test can compute
//! what the teacher says.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::routes::error;
use crate::{Dummy, receive};

/// The teacher's logprob of token `id` (not the first of a sequence).
pub fn teacher_logprob(id: i32) -> f64 {
    -0.5 * (1.0 + f64::from(id.rem_euclid(4)))
}

pub(crate) async fn completions(State(dummy): State<Arc<Dummy>>, body: Bytes) -> Response {
    let request = match receive(&dummy, &body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let model = request["model"].as_str().unwrap_or_default();
    if model.rsplit('/').next() != Some("teacher") {
        return error(
            StatusCode::NOT_FOUND,
            "the dummy answers /v1/completions for the model `teacher` only",
        );
    }
    let ids: Vec<i32> = match &request["prompt"] {
        Value::String(text) => match &dummy.tokenizer {
            Some(t) => t.encode(text).unwrap_or_default(),
            None => text.chars().map(|c| c as i32).collect(),
        },
        Value::Array(items) => {
            let ids: Option<Vec<i32>> = items
                .iter()
                .map(|v| v.as_i64().and_then(|n| i32::try_from(n).ok()))
                .collect();
            match ids {
                Some(ids) if !ids.is_empty() => ids,
                _ => return error(StatusCode::BAD_REQUEST, "prompt: a string or token ids"),
            }
        }
        _ => return error(StatusCode::BAD_REQUEST, "prompt: a string or token ids"),
    };
    if request["echo"] != json!(true) || request["logprobs"].is_null() {
        return error(
            StatusCode::BAD_REQUEST,
            "the dummy teacher answers echo: true with logprobs only",
        );
    }
    let piece = |id: i32| match &dummy.tokenizer {
        Some(t) => t.decode(&[id], false).unwrap_or_default(),
        None => char::from_u32(id as u32)
            .map(String::from)
            .unwrap_or_default(),
    };
    // The prompt echoed, then one generated token (the first id again).
    let mut tokens: Vec<String> = ids.iter().map(|&id| piece(id)).collect();
    let mut logprobs: Vec<Value> = std::iter::once(Value::Null)
        .chain(ids[1..].iter().map(|&id| json!(teacher_logprob(id))))
        .collect();
    tokens.push(piece(ids[0]));
    logprobs.push(json!(teacher_logprob(ids[0])));
    let text: String = tokens.concat();
    axum::Json(json!({
        "id": "cmpl-dummy", "object": "text_completion", "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": "length",
                     "logprobs": {"tokens": tokens, "token_logprobs": logprobs}}],
        "usage": {"prompt_tokens": ids.len(), "completion_tokens": 1, "total_tokens": ids.len() + 1},
    }))
    .into_response()
}
