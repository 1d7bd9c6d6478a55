//! What a plugin may touch. Every store gets a WASI context that denies the
//! filesystem, network, environment and real clocks unless the deployment
//! granted them by name, a memory budget summed over all its memories, and
//! metaclaw's host capabilities (`embed`, `clock`, `kv`), which deny an
//! ungranted call (a trap, or an error where the interface has one).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{
    FsPerms, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

use super::bindings::{clock, embed, kv, log, types};

/// Capabilities granted to one plugin (`plugins.grants.<name>` in the
/// config): `embed`, `clock`, `kv`, `network`, `env:NAME`, `fs:/dir`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    pub embed: bool,
    pub clock: bool,
    pub kv: bool,
    pub network: bool,
    pub env: Vec<String>,
    /// Directories the plugin may read (mounted at the same path).
    pub read_dirs: Vec<PathBuf>,
}

impl Grants {
    pub fn parse(items: &[String]) -> Result<Self, String> {
        let mut g = Grants::default();
        for item in items {
            match item.as_str() {
                "embed" => g.embed = true,
                "clock" => g.clock = true,
                "kv" => g.kv = true,
                "network" => g.network = true,
                other => {
                    if let Some(var) = other.strip_prefix("env:") {
                        g.env.push(var.to_string());
                    } else if let Some(dir) = other.strip_prefix("fs:") {
                        g.read_dirs.push(PathBuf::from(dir));
                    } else {
                        return Err(format!(
                            "unknown capability {other:?} (use embed, clock, kv, network, env:NAME or fs:/dir)"
                        ));
                    }
                }
            }
        }
        Ok(g)
    }

    /// The names, as written in the config.
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (on, name) in [
            (self.embed, "embed"),
            (self.clock, "clock"),
            (self.kv, "kv"),
            (self.network, "network"),
        ] {
            if on {
                out.push(name.to_string());
            }
        }
        out.extend(self.env.iter().map(|v| format!("env:{v}")));
        out.extend(self.read_dirs.iter().map(|d| format!("fs:{}", d.display())));
        out
    }
}

/// Embeddings for plugins that are granted `embed` (the host's embedding
/// backend, `crate::embeddings`).
pub trait Embedder: Send + Sync {
    /// One L2-normalised vector per text.
    fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, String>;
}

/// Why a plugin asks for embeddings: texts embedded while indexing the
/// library come back again and again (every instance indexes, every
/// restart too) and are worth keeping; a turn's query rarely is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedPurpose {
    Index,
    Query,
}

/// A plugin's private key-value cache, shared by its instances.
#[derive(Debug, Default)]
pub struct KvCache {
    entries: HashMap<String, Vec<u8>>,
    bytes: usize,
}

pub const KV_MAX_BYTES: usize = 1 << 20;

/// Per-store state: one per plugin instance.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryBudget,
    /// `name@version`, for logs and messages.
    pub label: Arc<str>,
    name: Arc<str>,
    grants: Arc<Grants>,
    embedder: Option<Arc<dyn Embedder>>,
    kv: Arc<Mutex<KvCache>>,
    /// What the plugin wrote to stderr (shown when a call fails).
    pub stderr: MemoryOutputPipe,
    /// Log lines left in the current call (a plugin cannot flood the log).
    pub log_budget: u32,
    /// Set while the host runs the retriever's `index()`.
    pub embed_purpose: EmbedPurpose,
    /// Deadline ticks spent waiting on the host's embedding backend in this
    /// call: the deadline bounds the plugin's own work, so they are given
    /// back when it expires (see `Loaded::instantiate`).
    pub host_ticks: u64,
    /// The last embedding failure in this call.
    pub embed_error: Option<String>,
}

pub const LOG_LINES_PER_CALL: u32 = 50;

impl PluginState {
    pub fn new(
        name: Arc<str>,
        label: Arc<str>,
        grants: Arc<Grants>,
        embedder: Option<Arc<dyn Embedder>>,
        kv: Arc<Mutex<KvCache>>,
        memory_limit: usize,
    ) -> Self {
        let stderr = MemoryOutputPipe::new(8 << 10);
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr.clone());
        if !grants.clock {
            b.wall_clock(FrozenClock);
            b.monotonic_clock(FrozenClock);
        }
        for var in &grants.env {
            if let Ok(value) = std::env::var(var) {
                b.env(var, value);
            }
        }
        for dir in &grants.read_dirs {
            let guest = dir.to_string_lossy().into_owned();
            if let Err(e) = b.preopened_dir(dir, &guest, FsPerms::ReadOnly) {
                tracing::warn!(plugin = %label, "cannot grant {}: {e}", dir.display());
            }
        }
        b.allow_tcp(grants.network);
        b.allow_udp(grants.network);
        b.allow_ip_name_lookup(grants.network);
        if grants.network {
            b.socket_addr_check(|_, _| Box::pin(async { true }));
        }
        Self {
            wasi: b.build(),
            table: ResourceTable::new(),
            limiter: MemoryBudget::new(memory_limit),
            label,
            name,
            grants,
            embedder,
            kv,
            stderr,
            log_budget: LOG_LINES_PER_CALL,
            embed_purpose: EmbedPurpose::Query,
            host_ticks: 0,
            embed_error: None,
        }
    }

    fn denied(&self, capability: &str) -> wasmtime::Error {
        wasmtime::Error::msg(format!(
            "capability `{capability}` is not granted to plugin {}; grant it with plugins.grants.{}: [{capability}]",
            self.label, self.name
        ))
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Time stands still for plugins without the `clock` grant.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// A memory budget for the whole store. `StoreLimits` caps each linear
/// memory separately, and Python or JS components have several; this sums
/// them (including the initial allocation at instantiation).
pub struct MemoryBudget {
    limit: usize,
    used: usize,
    /// A growth was refused: the call failed on the memory cap.
    pub hit: bool,
}

impl MemoryBudget {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            used: 0,
            hit: false,
        }
    }

    /// Bytes of linear memory (and tables' worth) the instance holds.
    pub fn used(&self) -> usize {
        self.used
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        if self.used.saturating_add(growth) > self.limit {
            self.hit = true;
            return Ok(false);
        }
        self.used += growth;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }

    fn instances(&self) -> usize {
        100
    }
    fn tables(&self) -> usize {
        100
    }
    fn memories(&self) -> usize {
        100
    }
}

impl types::Host for PluginState {}

impl log::Host for PluginState {
    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        if self.log_budget == 0 {
            return Ok(());
        }
        self.log_budget -= 1;
        let mut message: String = message.chars().take(1000).collect();
        if self.log_budget == 0 {
            message.push_str(" (further log lines from this call are dropped)");
        }
        let plugin = &*self.label;
        match level {
            types::LogLevel::Debug => {
                tracing::debug!(target: "metaclaw::plugin", plugin, "{message}")
            }
            types::LogLevel::Info => {
                tracing::info!(target: "metaclaw::plugin", plugin, "{message}")
            }
            types::LogLevel::Warn => {
                tracing::warn!(target: "metaclaw::plugin", plugin, "{message}")
            }
            types::LogLevel::Error => {
                tracing::error!(target: "metaclaw::plugin", plugin, "{message}")
            }
        }
        Ok(())
    }
}

impl embed::Host for PluginState {
    fn embed(&mut self, texts: Vec<String>) -> wasmtime::Result<Result<Vec<Vec<f32>>, String>> {
        if !self.grants.embed {
            return Ok(Err(self.denied("embed").to_string()));
        }
        let Some(embedder) = &self.embedder else {
            return Ok(Err(
                "no embedding backend is configured (see skills.embedding_backend)".into(),
            ));
        };
        let started = std::time::Instant::now();
        let result = embedder.embed(&texts, self.embed_purpose);
        self.host_ticks += (started.elapsed().as_micros() / super::engine::TICK.as_micros()) as u64;
        if let Err(e) = &result {
            self.embed_error = Some(e.clone());
        }
        Ok(result)
    }
}

impl clock::Host for PluginState {
    fn now_ms(&mut self) -> wasmtime::Result<u64> {
        if !self.grants.clock {
            return Err(self.denied("clock"));
        }
        Ok(crate::sessions::now_ms().max(0) as u64)
    }
}

impl kv::Host for PluginState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        if !self.grants.kv {
            return Err(self.denied("kv"));
        }
        let cache = self
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        Ok(cache.entries.get(&key).cloned())
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        if !self.grants.kv {
            return Ok(Err(self.denied("kv").to_string()));
        }
        let mut cache = self
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        let old = cache
            .entries
            .get(&key)
            .map(|v| key.len() + v.len())
            .unwrap_or(0);
        let new = key.len() + value.len();
        if cache.bytes - old + new > KV_MAX_BYTES {
            return Ok(Err(format!("the cache is full ({KV_MAX_BYTES} bytes)")));
        }
        cache.bytes = cache.bytes - old + new;
        cache.entries.insert(key, value);
        Ok(Ok(()))
    }

    fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        if !self.grants.kv {
            return Err(self.denied("kv"));
        }
        let mut cache = self
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        if let Some(v) = cache.entries.remove(&key) {
            cache.bytes -= key.len() + v.len();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_and_print_back() {
        let items: Vec<String> = ["clock", "env:HOME", "fs:/tmp/x", "network"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let g = Grants::parse(&items).unwrap();
        assert!(g.clock && g.network && !g.embed);
        assert_eq!(g.env, vec!["HOME"]);
        assert_eq!(g.names(), vec!["clock", "network", "env:HOME", "fs:/tmp/x"]);
        assert!(
            Grants::parse(&["root".to_string()])
                .unwrap_err()
                .contains("unknown capability")
        );
    }

    #[test]
    fn the_budget_sums_every_memory() {
        let mut b = MemoryBudget::new(10 << 20);
        assert!(b.memory_growing(0, 6 << 20, None).unwrap());
        assert!(
            !b.memory_growing(0, 6 << 20, None).unwrap(),
            "a second memory shares the budget"
        );
        assert!(b.hit);
        assert!(b.memory_growing(0, 4 << 20, None).unwrap());
    }
}
