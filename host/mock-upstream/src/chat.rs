//! `POST /v1/chat/completions`: the answer the model name picks.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::answer::{Answer, Part};
use crate::behaviour::{self, Behaviour};
use crate::request::{
    last_message_role, last_message_text, last_user_text, names_a_tool_call, system_text,
    tool_calls, tool_names, words,
};
use crate::routes::error;
use crate::{Dummy, ScriptedReply, ScriptedRequest, faults, learning, receive};

pub(crate) async fn chat(
    State(dummy): State<Arc<Dummy>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = match receive(&dummy, &body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    answer(dummy, headers, request, body.len()).await
}

/// The answer to a chat request (already recorded).
pub(crate) async fn answer(
    dummy: Arc<Dummy>,
    headers: HeaderMap,
    request: Value,
    body_len: usize,
) -> Response {
    let model = request["model"].as_str().unwrap_or("").to_string();
    let Some(behaviour) = behaviour::of(&dummy, &model) else {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "unknown dummy model {model:?}; try one of: {}",
                behaviour::names(&dummy).join(", ")
            ),
        );
    };
    let stream = request["stream"].as_bool().unwrap_or(false);
    let include_usage = request["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let seq = dummy.seq.fetch_add(1, Ordering::Relaxed) + 1;
    let answer = Answer {
        id: format!("chatcmpl-dummy-{seq}"),
        model: model.clone(),
        seq,
        prompt_tokens: (body_len / 4) as u64,
    };

    let (parts, delay, finish): (Vec<Part>, u64, &str) = match behaviour {
        Behaviour::Echo => (words(&last_user_text(&request)), 0, "stop"),
        Behaviour::EchoSystem => (words(&system_text(&request)), 0, "stop"),
        Behaviour::EchoRequest => {
            let shown: serde_json::Map<String, Value> = headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        Value::String(v.to_str().unwrap_or("").to_string()),
                    )
                })
                .collect();
            let text = json!({ "headers": shown, "body": request }).to_string();
            (vec![Part::Text(text)], 0, "stop")
        }
        Behaviour::Slow(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            (words(&last_user_text(&request)), 0, "stop")
        }
        Behaviour::Stream { n, ms } => (
            (1..=n).map(|i| Part::Text(format!("chunk-{i} "))).collect(),
            ms,
            "stop",
        ),
        Behaviour::ToolCall(k) => {
            if last_message_role(&request) == Some("tool") {
                let result = last_message_text(&request);
                (words(&format!("The tool returned: {result}")), 0, "stop")
            } else {
                (tool_calls(&request, k, seq), 0, "tool_calls")
            }
        }
        Behaviour::Agent => {
            if last_message_role(&request) == Some("tool") {
                let result = last_message_text(&request);
                (words(&format!("The tool returned: {result}")), 0, "stop")
            } else if names_a_tool_call(&request) {
                (tool_calls(&request, 1, seq), 0, "tool_calls")
            } else {
                (words(&last_user_text(&request)), 0, "stop")
            }
        }
        Behaviour::Error(status) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, format!("dummy error {}", status.as_u16()));
        }
        Behaviour::Flaky => {
            let call = dummy.count_call(&model);
            if call % 2 == 1 {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("flaky: call {call} fails"),
                );
            }
            (words(&last_user_text(&request)), 0, "stop")
        }
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            return error(StatusCode::INTERNAL_SERVER_ERROR, "unreachable");
        }
        Behaviour::Reset => return faults::cut("application/json", Vec::new()),
        Behaviour::ResetAfter(n) => return faults::reset_after(&answer, n, stream),
        Behaviour::Judge => (
            vec![Part::Text(learning::judge_reply(
                &last_user_text(&request),
                None,
            ))],
            0,
            "stop",
        ),
        Behaviour::JudgeSplit | Behaviour::JudgeFlaky => {
            let call = dummy.count_call(&model);
            if behaviour == Behaviour::JudgeFlaky {
                if call % 2 == 1 {
                    return error(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!("judge-flaky: call {call} is rate limited"),
                    );
                }
                (
                    vec![Part::Text(learning::judge_reply(
                        &last_user_text(&request),
                        None,
                    ))],
                    0,
                    "stop",
                )
            } else {
                let text = learning::judge_reply("", Some(call - 1));
                (vec![Part::Text(text)], 0, "stop")
            }
        }
        Behaviour::Evolver(kind) => (
            vec![Part::Text(learning::evolver_reply(
                &last_user_text(&request),
                kind,
            ))],
            0,
            "stop",
        ),
        Behaviour::EvolverSlow(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let text = learning::evolver_reply(&last_user_text(&request), learning::Evolver::Plain);
            (vec![Part::Text(text)], 0, "stop")
        }
        Behaviour::Scripted(name) => {
            let Some(scripted) = dummy.scripted.get(&name) else {
                return error(StatusCode::NOT_FOUND, format!("no model {name:?}"));
            };
            let messages = request["messages"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let reply = scripted.reply(&ScriptedRequest {
                messages,
                tools: tool_names(&request),
                last_user_text: last_user_text(&request),
            });
            match reply {
                ScriptedReply::Text(text) => (vec![Part::Text(text)], 0, "stop"),
                ScriptedReply::Calls { text, calls } => (
                    std::iter::once(Part::Text(text))
                        .chain(calls.into_iter().enumerate().map(|(i, call)| Part::Tool {
                            id: format!("call_{seq}_{i}"),
                            name: call.name,
                            arguments: call.arguments.to_string(),
                        }))
                        .collect(),
                    0,
                    "tool_calls",
                ),
            }
        }
        Behaviour::EvolverBad => (
            vec![Part::Text(
                "Sorry, I would rather not write skills today.".into(),
            )],
            0,
            "stop",
        ),
    };

    answer
        .send(&dummy, &parts, delay, finish, stream, include_usage)
        .await
}
