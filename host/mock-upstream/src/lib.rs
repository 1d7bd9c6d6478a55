//! A real OpenAI-compatible server that stands in for a paid LLM API in
//! tests, benchmarks and `metaclaw start --demo`. The request's model name
//! picks the behaviour (a `provider/` prefix is ignored):
//!
//! | model | answer |
//! |---|---|
//! | `echo` | the last user message, verbatim; streamed one word per chunk |
//! | `echo-system` | the full system prompt it received |
//! | `echo-request` | the request it received (headers and body) as JSON text |
//! | `slow-<ms>` | waits `ms`, then answers like `echo` |
//! | `stream-<n>-<ms>` | `n` chunks `chunk-1 … chunk-n`, `ms` apart |
//! | `tool-call`, `tool-call-<k>` | `k` tool calls (arguments in pieces); after a tool result, a text answer |
//! | `agent` | a tool call when the user's message names an offered tool and gives its arguments as a JSON object (`read {"path": "a.txt"}`); after a tool result, a text answer; else like `echo` (a stand-in for a real agent's model) |
//! | `error-<status>` | that HTTP status with an OpenAI-style error body |
//! | `flaky` | 503 on every other call (the first fails), else like `echo` |
//! | `hang` | never answers |
//! | `reset` | reads the request, then drops the connection without a response |
//! | `reset-after-<n>` | starts the answer (streamed: `n` chunks `chunk-1 … chunk-n`; else half the JSON, or on `/v1/messages` nothing), then drops the connection mid-body |
//! | `judge` | a judge's verdict (`Score: N`) from the prompt's "What happened next" |
//! | `judge-split` | votes 1, -1, 0, 1, … in turn (a judge that cannot agree) |
//! | `judge-flaky` | 429 with `Retry-After: 1` on every other call, else like `judge` |
//! | `evolver` | skill drafts (JSON) from the prompt's transcript, plus a near-copy of an existing skill |
//! | `evolver-leaky` | like `evolver`, with an email, a home path and a token planted in the draft |
//! | `evolver-revise` | the lesson, and a revision (`updates`) of the first existing skill that adds it |
//! | `evolver-nothing` | no draft (`{"skills": []}`): a session with nothing to learn |
//! | `evolver-bad` | a reply with no JSON in it |
//! | `evolver-slow-<ms>` | waits `ms`, then answers like `evolver` |
//! | a name given to [`Dummy::with_scripted`] | that model's answer ([`Scripted`]): MetaClaw-Bench's oracle, null, all-options, planter and evolver models are registered so by metaclaw-bench for the tests that use them |
//!
//! `GET /v1/dummy/requests?model=NAME` lists the bodies of the last
//! requests for that model (what a judge or evolver was shown).
//!
//! `metaclaw dev upstream --require-key KEY` ([`Dummy::requiring_key`])
//! answers every other `/v1` route with 401 unless the request carries
//! `Authorization: Bearer KEY` or `x-api-key: KEY`, as a real provider
//! does for a wrong key (`doctor --online` is tested against it).
//!
//! OpenClaw's per-call internal-context message is not "the user's
//! message", so `echo` skips it.
//!
//! `POST /v1/completions` answers the model `teacher` only: a distillation
//! teacher that echoes the prompt (text or token ids) with a fixed logprob
//! per token ([`teacher_logprob`]), reading text with the tokenizer given
//! to [`Dummy::with_tokenizer`] (else one token per character).
//!
//! `POST /v1/embeddings` answers every model with a deterministic hashed
//! bag of words (256 dimensions: texts sharing words are similar), except
//! `error-<status>`, `slow-<ms>` and `hang`, which behave as above.
//!
//! Not part of the product: the `metaclaw` binary runs it for
//! `metaclaw dev upstream` and `start --demo` only with its `dev-tools`
//! feature (on by default); its tests and benches use it directly.
//!
//! | module | job |
//! |---|---|
//! | `routes` | the router, the required key, `/v1/dummy/*`, the error body |
//! | `behaviour` | model name → behaviour |
//! | `chat` | `/v1/chat/completions`: each behaviour's answer |
//! | `anthropic` | `/v1/messages`: the same answers in Anthropic's API |
//! | `embeddings` | `/v1/embeddings`: hashed bags of words |
//! | `completions` | `/v1/completions`: the distillation teacher |
//! | `request` | what the request says (user text, system prompt, tools) |
//! | `answer` | an answer as chat-completions JSON or SSE frames |
//! | `faults` | connections cut before or mid-answer |
//! | `learning` | the judge and the evolver |
//! | `scripted` | models registered by name from outside |

mod answer;
mod anthropic;
mod behaviour;
mod chat;
mod completions;
mod embeddings;
mod faults;
mod learning;
mod request;
mod routes;
mod scripted;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

pub use completions::teacher_logprob;
pub use embeddings::{EMBEDDING_DIM, hashed_embedding};
pub use learning::section;
pub use routes::{router, serve};
pub use scripted::{Scripted, ScriptedCall, ScriptedReply, ScriptedRequest};

/// What the dummy served (`GET /v1/dummy/stats`).
#[derive(Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub streams_completed: AtomicU64,
    pub streams_cancelled: AtomicU64,
    pub embedding_requests: AtomicU64,
    pub embedded_texts: AtomicU64,
    /// The `Authorization` header of the last embeddings request.
    pub embedding_auth: Mutex<Option<String>>,
    /// The last chat request bodies, with their model.
    pub recent: Mutex<std::collections::VecDeque<(String, Value)>>,
}

/// Chat requests `/v1/dummy/requests` keeps.
const RECENT_REQUESTS: usize = 256;

/// One dummy upstream: its counters and, with [`Dummy::requiring_key`],
/// the key it asks for.
#[derive(Default)]
pub struct Dummy {
    pub(crate) seq: AtomicU64,
    flaky_calls: Mutex<HashMap<String, u64>>,
    pub stats: Stats,
    /// When set, the API routes refuse requests without this key.
    required_key: Option<String>,
    /// How the `teacher` reads text (`/v1/completions`).
    pub(crate) tokenizer: Option<Arc<metaclaw_chat::render::Renderer>>,
    /// Models registered by name ([`Dummy::with_scripted`]).
    pub(crate) scripted: HashMap<String, Arc<dyn Scripted>>,
}

impl Dummy {
    /// A dummy that answers 401 to API requests without `key`.
    pub fn requiring_key(key: impl Into<String>) -> Self {
        Self {
            required_key: Some(key.into()),
            ..Self::default()
        }
    }

    /// The `teacher` reads text with `tokenizer`.
    pub fn with_tokenizer(mut self, tokenizer: Arc<metaclaw_chat::render::Renderer>) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// `name` (a model name, as requested without its `provider/` prefix)
    /// is answered by `model`, before any built-in behaviour of that name.
    pub fn with_scripted(mut self, name: impl Into<String>, model: Arc<dyn Scripted>) -> Self {
        self.scripted.insert(name.into(), model);
        self
    }

    /// This call's number (1, 2, …) among the calls for `model`.
    pub(crate) fn count_call(&self, model: &str) -> u64 {
        let Ok(mut calls) = self.flaky_calls.lock() else {
            return 1;
        };
        let c = calls.entry(model.to_string()).or_insert(0);
        *c += 1;
        *c
    }
}

/// A chat or messages request as received: counted, parsed and kept for
/// `/v1/dummy/requests`; a body that is not JSON is answered with 400.
pub(crate) fn receive(dummy: &Dummy, body: &[u8]) -> Result<Value, Box<Response>> {
    dummy.stats.requests.fetch_add(1, Ordering::Relaxed);
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Err(Box::new(routes::error(
            StatusCode::BAD_REQUEST,
            "the body is not JSON",
        )));
    };
    remember(dummy, &request);
    Ok(request)
}

fn remember(dummy: &Dummy, request: &Value) {
    let model = request["model"].as_str().unwrap_or("").to_string();
    if let Ok(mut recent) = dummy.stats.recent.lock() {
        if recent.len() == RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back((model, request.clone()));
    }
}
