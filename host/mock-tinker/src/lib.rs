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
//! sampling futures, in this order: `drop` (the connection is cut),
//! `http500`, `http429` (with `retry-after-ms: 20`), `http402` (billing:
//! the client pauses and tries again; also counted down on the direct
//! calls about the model, `get_info` and `weights_info`), `http408`
//! (still pending), `http410` (the promise broke: the client must
//! re-submit with the same `seq_id`), `try_again`; then `metadata` (a
//! ready result is first answered `complete_metadata` when the poll allows
//! a metadata-only answer); `slow=MS` makes every future ready only after
//! MS milliseconds; `stall_fwdbwd=N` runs the Nth `forward_backward` of
//! the base model but never completes its future (a client can be killed
//! mid-step); `stall_save=N` does the same to the Nth save
//! (`save_weights` and `save_weights_for_sampler` counted together): the
//! checkpoint is written, its path never reaches the client (a client can
//! be killed mid-save); `fail_save=N` refuses the Nth save instead (its
//! future answers a failure, nothing is written). They count over all the
//! base model's models, for the server's life, so a restarted client is
//! not stalled again.
//! `GET /api/v1/fake/models` reports each training model: its session,
//! the optimiser steps in its weights (counting those of the
//! checkpoint it loaded), that checkpoint, and whether it holds gradients
//! no step applied. `POST /api/v1/fake/expire_session {session_id}` ends a
//! session as a server does after missed heartbeats (its heartbeats then
//! get 410, and its models are unloaded: samples of their checkpoints fail
//! with skyrl's `Model … not loaded`). `POST /api/v1/fake/script {"sequences": [[ids], …]}` makes
//! the next samples return those tokens (with the logprobs the weights
//! give them): a test chooses what the "model" says, tool calls included.
//!
//! **Options** are per server ([`router_with`], [`serve_with`]): what its
//! `client/config` says — `compress` (`proto_compress_fwdbwd`: clients
//! send zstd bodies, which it decompresses as any server does) and
//! `json_only` (`proto_write_fwdbwd: false`, and protobuf bodies refused
//! with 422). `GET /api/v1/fake/seen` tells a test what the fake saw
//! ([`Seen`]: body kinds, `complete_metadata` answers, futures stalled:
//! what a test waits for before it kills a client).
//!
//! Its tokenizer spells each token as one character ([`detokenize`]), so
//! stop strings stop sampling; `prompt_logprobs` are the bigram's.
//!
//! | module | job |
//! |---|---|
//! | `routes` | the HTTP routes and their error shapes |
//! | `state` | sessions, models and their `seq_id` order, futures, faults, options, what it saw |
//! | `bigram` | the trainable model and its one-character tokenizer |

mod bigram;
mod routes;
mod state;

use std::sync::{Arc, Mutex};

pub use bigram::detokenize;
pub use state::{BASE_MODEL, Faults, ModelReport, Options, Seen};

/// The fake's router, on a fresh state, with the default options.
pub fn router() -> axum::Router {
    router_with(Options::default())
}

/// The fake's router, on a fresh state, with `options`.
pub fn router_with(options: Options) -> axum::Router {
    routes::router(Arc::new(Mutex::new(state::State::new(options))))
}

/// Serves the fake on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    serve_with(listener, Options::default()).await
}

/// Serves the fake with `options` on `listener` until the task is dropped.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    options: Options,
) -> std::io::Result<()> {
    axum::serve(listener, router_with(options)).await
}
