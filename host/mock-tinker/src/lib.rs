//! A Tinker-compatible training server that stands in for hosted Tinker in
//! metaclaw's tests (`metaclaw dev tinker`). It speaks the protocol as the
//! reference describes it (`shared/reference/tinker-protocol.md`): sessions
//! and heartbeats, every operation a future polled with `retrieve_future`,
//! a model's training requests run strictly in `seq_id` order (a retry with
//! the same `seq_id` and body gets the same result; another body is a 409),
//! the JSON dialect, and the protobuf one for `forward_backward` bodies and
//! for results when the poll asks for them.
//!
//! Its model (`fake-bigram`) is a bigram table whose logprobs really move
//! when trained with the reference's losses, so a test can see a training
//! step take effect in the next sample.
//!
//! **Faults** are chosen by the base model's name, `fake-bigram@F=n,…`;
//! each is counted down on the polls of that model's training and
//! sampling futures, in this
//! order: `drop` (the connection is cut), `http500`, `http429` (with
//! `retry-after-ms: 20`), `http408` (still pending), `http410` (the promise
//! broke: the client must re-submit with the same `seq_id`), `try_again`;
//! `slow=MS` makes every future ready only after MS milliseconds.
//! `POST /api/v1/fake/expire_session {session_id}` ends a session as a
//! server does after missed heartbeats (its heartbeats then get 410).
//!
//! | module | job |
//! |---|---|
//! | `routes` | the HTTP routes and their error shapes |
//! | `state` | sessions, models and their `seq_id` order, futures, faults |
//! | `bigram` | the trainable model |

mod bigram;
mod routes;
mod state;

use std::sync::{Arc, Mutex};

pub use state::{BASE_MODEL, Faults};

/// The fake's router, on a fresh state.
pub fn router() -> axum::Router {
    routes::router(Arc::new(Mutex::new(state::State::default())))
}

/// Serves the fake on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router()).await
}
