//! metaclaw-core: everything the metaclaw daemon is — a learning proxy
//! between a personal AI agent and its LLM — as a library. The `metaclaw`
//! binary is its command line; `metaclaw-bench` runs MetaClaw-Bench and the
//! rollout agent on it.
//!
//! | module | job |
//! |---|---|
//! | [`proxy`] | the OpenAI-compatible routes; [`proxy::turn`] is one turn top to bottom |
//! | [`sessions`] | which conversation a turn belongs to, and when it ends |
//! | [`store`] | the SQLite file (or a team's Postgres), written off the hot path |
//! | [`team`] | this instance among others on a shared store: heartbeats, leases |
//! | [`tinker`] | the client of a Tinker-compatible training service (RL) |
//! | [`policy`] | the trainable model as served in rl/auto mode: render, sample, parse, capture |
//! | [`server`] | routes, auth, serving |
//! | [`ui`] | the dashboard at `/ui`: server-rendered pages behind the admin token |
//! | [`daemon`] | the long-running process: lock, wiring, shutdown |
//! | [`config`] | `config.yaml`: schema, validation, editing |
//! | [`admin`] | the client of a running daemon's admin routes |
//! | [`term`] | what a command-line front needs: stdout lines, a runtime |
//! | [`claws`] | wiring the user's agent to the proxy, and restoring its config |
//! | [`skills`] | the skill library, retrieval through plugins, injection |
//! | [`plugins`] | the WebAssembly plugin host |
//! | [`embeddings`] | host-side embedding backends for plugins |
//! | [`home`], [`clock`], [`digest`] | leaf helpers: home paths, wall-clock time, hex digests |
//! | [`untrusted`] | text from plugins and skills, made safe for logs and prompts |
//! | [`work`] | who owns each thread and task: every one starts there |

// Tests start threads and servers of their own and join them (or end with
// the test); product code starts its work through `crate::work`.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod admin;
pub mod agent_id;
pub mod app;
pub mod canary;
pub mod claws;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod digest;
pub mod embeddings;
pub mod error;
pub mod home;
pub mod http;
pub mod learn;
pub mod logging;
pub mod metrics;
pub mod plugins;
pub mod policy;
pub mod proxy;
pub mod redact;
pub mod scheduler;
pub mod server;
pub mod sessions;
pub mod skills;
pub mod store;
pub mod team;
pub mod term;
pub mod tinker;
pub mod ui;
pub mod untrusted;
pub mod work;
