//! The WebAssembly plugin host.
//!
//! Plugins are components behind the WIT interfaces in `wit/` (one world per
//! kind: retriever, scorer, evolver, skill). They are compiled once (cached
//! on disk under a MAC), instantiated from an `InstancePre` into a small
//! pool, and called asynchronously on a runtime of their own under a
//! wall-clock deadline that holds whatever the guest does, within a memory
//! budget per plugin, inside a WASI context that grants nothing unless the
//! deployment grants it to that very file. A trap or a missed deadline ends
//! only that call; the caller falls back, and a plugin that keeps failing is
//! disabled until it is reloaded.
//!
//! Calls are `async`: await them from any runtime, or, from a thread that is
//! not running async tasks (the CLI, the scoring thread), run them with
//! `PluginEngine::block_on`.

pub mod bindings;
mod cache;
pub mod embedded;
mod engine;
pub mod files;
mod loaded;
mod lock;
pub mod pinning;
mod refused;
mod registry;
mod sandbox;
mod trust;
pub mod turn;
mod view;

pub use bindings::{outcomes, types};
pub use cache::{ArtifactState, CacheOptions};
pub use engine::{
    CompileTimedOut, EngineOptions, PluginEngine, Spawned, artifact_limit, code_bytes,
};
pub use loaded::{
    CallError, IndexState, Kind, Limits, LoadedPlugin, PACKAGE, PACKAGE_VERSION, PluginInfo,
    Probed, Source, compatible,
};
pub use lock::{LockEntry, LockFile};
pub use refused::LoadRefused;
pub use registry::{BuiltinSource, HostSettings, PluginHost, PluginSpec, Problem, Registry};
pub use sandbox::{
    Account, Charge, EmbedAllowance, EmbedBudget, EmbedError, EmbedFailed, EmbedLedger,
    EmbedPurpose, Embedder, Grants, MemoryPool, OutcomeSource, Spend, Unmetered,
};
pub use trust::{FIRST_PARTY, FileRef, Trust};
pub use view::{PluginView, RegistryView, view};
