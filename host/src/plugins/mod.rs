//! The WebAssembly plugin host.
//!
//! Plugins are components behind the WIT interfaces in `wit/` (one world per
//! kind: retriever, scorer, evolver, skill). They are compiled once (cached
//! on disk by sha256), instantiated from an `InstancePre` into a small pool,
//! and called under a deadline (epoch interruption) and a memory budget,
//! inside a WASI context that grants nothing unless the deployment says so.
//! A trap or a missed deadline ends only that call; the caller falls back,
//! and a plugin that keeps failing is disabled until it is reloaded.
//!
//! Calls are synchronous and may touch WASI, which blocks on the tokio
//! runtime: make them from a blocking thread (`spawn_blocking`), never on an
//! async worker.

pub mod bindings;
mod engine;
mod loaded;
mod lock;
mod registry;
mod sandbox;
mod view;

pub use bindings::types;
pub use engine::PluginEngine;
pub use loaded::{
    CallError, Kind, Limits, Loaded, PACKAGE, PACKAGE_VERSION, PluginInfo, compatible,
};
pub use lock::{LockEntry, LockFile};
pub use registry::{PluginHost, PluginSpec, Problem, Registry, Settings, default_builtin_dir};
pub use sandbox::{EmbedPurpose, Embedder, Grants};
pub use view::{PluginView, RegistryView, view};
