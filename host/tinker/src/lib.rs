//! The Tinker training API's wire, with no dependency on the host (the
//! protocol reference is `shared/reference/tinker-protocol.md`):
//!
//! - [`types`]: the JSON types a training step is made of (model inputs,
//!   datums, tensors, losses) and what comes back (sampled sequences with
//!   their exact tokens and logprobs, forward/backward outputs);
//! - [`proto`]: the protobuf messages (package `tinker_public`) current
//!   servers speak for `forward_backward` and for sample and
//!   forward/backward results;
//! - [`convert`]: between the two, with the packed-array conventions, and
//!   the zstd compression of `forward_backward` bodies.
//!
//! The client (sessions, heartbeat, futures, retries) builds on these.

pub mod convert;
pub mod proto;
pub mod types;
