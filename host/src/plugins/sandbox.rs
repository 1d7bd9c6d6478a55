//! What a plugin may touch, and how much of it. Every store gets a WASI
//! context that denies the filesystem, network, environment and real clocks
//! unless the deployment granted them; a memory budget shared by all of the
//! plugin's instances (linear memories and tables alike); a cap on what one
//! call may copy into the host; metaclaw's host capabilities (`embed`,
//! `clock`, `kv`), which deny an ungranted call (a trap, or an error where
//! the interface has one), `embed` within a budget of its own; and a log
//! that is escaped to one line a message and rate-limited.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{
    FsPerms, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

use super::bindings::{clock, embed, kv, log, types};

/// Capabilities granted to one plugin: parsed with the config.
pub use crate::config::Grants;

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

/// What one plugin call may spend on `embed`: calls, texts, bytes of text,
/// and wall time. The call's own deadline stands still while the host
/// embeds, but only up to `wall`: a slow (or paid) backend cannot be driven
/// without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedBudget {
    pub calls: u32,
    pub texts: u32,
    pub bytes: u64,
    pub wall: Duration,
}

impl EmbedBudget {
    /// A turn's call (retrieval, and every other kind).
    pub const CALL: Self = Self {
        calls: 8,
        texts: 256,
        bytes: 512 << 10,
        wall: Duration::from_secs(2),
    };
    /// Indexing the library.
    pub const INDEX: Self = Self {
        calls: 4_000,
        texts: 200_000,
        bytes: 128 << 20,
        wall: Duration::from_secs(600),
    };

    pub fn for_purpose(purpose: EmbedPurpose) -> Self {
        match purpose {
            EmbedPurpose::Query => Self::CALL,
            EmbedPurpose::Index => Self::INDEX,
        }
    }
}

/// The point in time a call must end by. Shared by the call's waiter (who
/// drops the call when it passes), the epoch callback (which stops a
/// running guest), and `embed` (which moves it while the host works).
#[derive(Debug)]
pub struct Deadline {
    base: Instant,
    /// Nanoseconds after `base`.
    at: AtomicU64,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Arc<Self> {
        let base = Instant::now();
        Arc::new(Self {
            base,
            at: AtomicU64::new(timeout.as_nanos().min(u128::from(u64::MAX)) as u64),
        })
    }

    /// When it was set.
    pub fn started(&self) -> Instant {
        self.base
    }

    pub fn at(&self) -> Instant {
        self.base + Duration::from_nanos(self.at.load(Ordering::Acquire))
    }

    pub fn set(&self, at: Instant) {
        let nanos = at.saturating_duration_since(self.base).as_nanos();
        self.at
            .store(nanos.min(u128::from(u64::MAX)) as u64, Ordering::Release);
    }

    pub fn expired(&self) -> bool {
        Instant::now() >= self.at()
    }

    /// Awaits `future` until the deadline, following it if it moves.
    /// `None`: the deadline passed first (and `future` is dropped).
    pub async fn bound<F: std::future::Future>(&self, future: F) -> Option<F::Output> {
        let mut future = std::pin::pin!(future);
        loop {
            let at = self.at();
            match tokio::time::timeout_at(at.into(), &mut future).await {
                Ok(out) => return Some(out),
                Err(_) if self.at() > at => continue,
                Err(_) => return None,
            }
        }
    }
}

/// One plugin's memory budget, shared by all its instances: concurrent
/// calls cannot multiply it.
#[derive(Debug)]
pub struct MemoryPool {
    limit: usize,
    used: AtomicUsize,
}

impl MemoryPool {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held by the plugin's live instances.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn try_take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// Per-plugin log limits: a plugin cannot flood or forge metaclaw's log.
#[derive(Debug)]
pub struct LogLimiter {
    /// Tokens (lines) left, refilled at `PER_SEC` up to `BURST`.
    bucket: Mutex<(f64, Instant)>,
    /// Lines dropped so far (shown by `plugins list`).
    pub dropped: AtomicU64,
    /// When the last "lines dropped" notice was written.
    noticed: Mutex<Option<Instant>>,
}

impl LogLimiter {
    /// Lines a plugin may log per second, sustained, and in one burst.
    pub const PER_SEC: f64 = 20.0;
    pub const BURST: f64 = 100.0;
    /// Characters of one log message.
    pub const MAX_CHARS: usize = 1000;

    fn new() -> Self {
        Self {
            bucket: Mutex::new((Self::BURST, Instant::now())),
            dropped: AtomicU64::new(0),
            noticed: Mutex::new(None),
        }
    }

    fn admit(&self) -> bool {
        let Ok(mut bucket) = self.bucket.lock() else {
            return false;
        };
        let now = Instant::now();
        let (tokens, last) = *bucket;
        let tokens =
            (tokens + now.duration_since(last).as_secs_f64() * Self::PER_SEC).min(Self::BURST);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Whether to write a "lines were dropped" notice now (one every 10 s).
    fn notice_due(&self) -> bool {
        let Ok(mut noticed) = self.noticed.lock() else {
            return false;
        };
        let due = noticed.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if due {
            *noticed = Some(Instant::now());
        }
        due
    }
}

/// A plugin's private key-value cache, shared by its instances.
#[derive(Debug, Default)]
pub struct KvCache {
    entries: HashMap<String, Vec<u8>>,
    bytes: usize,
}

pub const KV_MAX_BYTES: usize = 1 << 20;
pub const KV_MAX_ENTRIES: usize = 4096;
/// What one entry costs beyond its key and value (the map's own keeping).
pub const KV_ENTRY_OVERHEAD: usize = 64;

fn kv_cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + KV_ENTRY_OVERHEAD
}

/// What all instances of one plugin share.
pub struct PluginShared {
    /// The name it declared (validated: letters, digits, `-`, `_`).
    pub name: Arc<str>,
    /// `name@version`, for logs and messages.
    pub label: Arc<str>,
    pub grants: Grants,
    pub embedder: Option<Arc<dyn Embedder>>,
    pub memory: Arc<MemoryPool>,
    pub log: LogLimiter,
    kv: Mutex<KvCache>,
    /// Embedding jobs in flight for this plugin; a job whose call was
    /// abandoned keeps its slot until the backend answers.
    embed_slots: Arc<tokio::sync::Semaphore>,
}

impl PluginShared {
    pub fn new(
        name: &str,
        label: &str,
        grants: Grants,
        embedder: Option<Arc<dyn Embedder>>,
        memory: Arc<MemoryPool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            label: label.into(),
            grants,
            embedder,
            memory,
            log: LogLimiter::new(),
            kv: Mutex::new(KvCache::default()),
            embed_slots: Arc::new(tokio::sync::Semaphore::new(2)),
        })
    }
}

/// Per-store state: one per plugin instance.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: MemoryBudget,
    pub shared: Arc<PluginShared>,
    /// What the plugin wrote to stderr (shown when a call fails).
    pub stderr: MemoryOutputPipe,
    /// The current call's deadline.
    pub deadline: Arc<Deadline>,
    /// Log lines left in the current call.
    pub log_budget: u32,
    /// Set while the host runs the retriever's `index()`.
    pub embed_purpose: EmbedPurpose,
    /// What the current call may still spend on `embed`.
    pub embed_left: EmbedBudget,
    /// The last failure of the host's embedding backend in this call (not
    /// the plugin's fault).
    pub embed_error: Option<String>,
}

pub const LOG_LINES_PER_CALL: u32 = 50;

impl PluginState {
    pub fn new(shared: Arc<PluginShared>) -> Self {
        let grants = &shared.grants;
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
                tracing::warn!(plugin = %shared.label, "cannot grant {}: {e}", dir.display());
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
            limiter: MemoryBudget::new(shared.memory.clone()),
            shared,
            stderr,
            deadline: Deadline::after(Duration::ZERO),
            log_budget: LOG_LINES_PER_CALL,
            embed_purpose: EmbedPurpose::Query,
            embed_left: EmbedBudget::CALL,
            embed_error: None,
        }
    }

    /// Ready for a new call ending at `deadline`.
    pub fn begin_call(&mut self, deadline: Arc<Deadline>, purpose: EmbedPurpose) {
        self.deadline = deadline;
        self.log_budget = LOG_LINES_PER_CALL;
        self.embed_purpose = purpose;
        self.embed_left = EmbedBudget::for_purpose(purpose);
        self.embed_error = None;
    }

    fn denied(&self, capability: &str) -> wasmtime::Error {
        wasmtime::Error::msg(format!(
            "capability `{capability}` is not granted to plugin {}; grant it with plugins.grants.{}: [{capability}]",
            self.shared.label, self.shared.name
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

/// One instance's share of its plugin's [`MemoryPool`]. `StoreLimits` caps
/// each linear memory separately, and Python or JS components have several;
/// this sums them, counts tables too (a table of a million function
/// references is 8 MiB of host memory), and gives the bytes back to the
/// pool when the instance goes.
pub struct MemoryBudget {
    pool: Arc<MemoryPool>,
    used: usize,
    /// A growth was refused: the call failed on the memory cap.
    pub hit: bool,
}

/// Host bytes per table element (a function reference is a pointer).
const TABLE_ELEMENT_BYTES: usize = 8;
/// Elements one table may have, whatever the budget.
const TABLE_MAX_ELEMENTS: usize = 1 << 20;

impl MemoryBudget {
    fn new(pool: Arc<MemoryPool>) -> Self {
        Self {
            pool,
            used: 0,
            hit: false,
        }
    }

    /// Bytes this instance holds.
    pub fn used(&self) -> usize {
        self.used
    }

    fn grow(&mut self, bytes: usize) -> bool {
        if self.pool.try_take(bytes) {
            self.used += bytes;
            true
        } else {
            self.hit = true;
            false
        }
    }
}

impl Drop for MemoryBudget {
    fn drop(&mut self) {
        self.pool.give_back(self.used);
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(desired.saturating_sub(current)))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > TABLE_MAX_ELEMENTS {
            self.hit = true;
            return Ok(false);
        }
        Ok(self.grow(
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT_BYTES),
        ))
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
        let log = &self.shared.log;
        if self.log_budget == 0 || !log.admit() {
            if self.log_budget == 0 {
                log.dropped.fetch_add(1, Ordering::Relaxed);
            }
            if log.notice_due() {
                tracing::warn!(
                    target: "metaclaw::plugin",
                    plugin = %self.shared.label,
                    "log lines dropped ({} so far): at most {LOG_LINES_PER_CALL} a call and {} a second",
                    log.dropped.load(Ordering::Relaxed),
                    LogLimiter::PER_SEC
                );
            }
            return Ok(());
        }
        self.log_budget -= 1;
        // One line, whatever the plugin sent: nothing it writes can pass
        // for a line of metaclaw's own.
        let message = crate::untrusted::log_line(&message, LogLimiter::MAX_CHARS);
        let plugin = &*self.shared.label;
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
    async fn embed(
        &mut self,
        texts: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<Vec<f32>>, String>> {
        if !self.shared.grants.embed {
            return Ok(Err(self.denied("embed").to_string()));
        }
        let Some(embedder) = self.shared.embedder.clone() else {
            return Ok(Err(
                "no embedding backend is configured (see skills.embedding_backend)".into(),
            ));
        };
        let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
        let left = &mut self.embed_left;
        if left.calls == 0
            || texts.len() as u64 > u64::from(left.texts)
            || bytes > left.bytes
            || left.wall.is_zero()
        {
            let full = EmbedBudget::for_purpose(self.embed_purpose);
            return Ok(Err(format!(
                "this call's embedding budget is spent (at most {} calls, {} texts, {} KiB of text and {:?} of waiting per call)",
                full.calls,
                full.texts,
                full.bytes >> 10,
                full.wall
            )));
        }
        left.calls -= 1;
        left.texts -= texts.len() as u32;
        left.bytes -= bytes;
        let allowed = left.wall;
        // The plugin's own clock stands still while the host works, up to
        // what is left of the budget.
        let before = self.deadline.at();
        self.deadline.set(before + allowed);
        let started = Instant::now();
        let purpose = self.embed_purpose;
        let slots = self.shared.embed_slots.clone();
        let job = async move {
            let slot = slots
                .acquire_owned()
                .await
                .map_err(|_| "the embedding backend is shutting down".to_string())?;
            tokio::task::spawn_blocking(move || {
                let _slot = slot;
                embedder.embed(&texts, purpose)
            })
            .await
            .map_err(|e| format!("the embedding backend failed: {e}"))?
        };
        let result = match tokio::time::timeout(allowed, job).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "the embedding backend did not answer within this call's budget ({allowed:?})"
            )),
        };
        let spent = started.elapsed().min(allowed);
        self.embed_left.wall = allowed.saturating_sub(spent);
        self.deadline.set(before + spent);
        if let Err(e) = &result {
            self.embed_error = Some(e.clone());
        }
        Ok(result)
    }
}

impl clock::Host for PluginState {
    fn now_ms(&mut self) -> wasmtime::Result<u64> {
        if !self.shared.grants.clock {
            return Err(self.denied("clock"));
        }
        Ok(crate::clock::now_ms().max(0) as u64)
    }
}

impl kv::Host for PluginState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        if !self.shared.grants.kv {
            return Err(self.denied("kv"));
        }
        let cache = self
            .shared
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        Ok(cache.entries.get(&key).cloned())
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        if !self.shared.grants.kv {
            return Ok(Err(self.denied("kv").to_string()));
        }
        let mut cache = self
            .shared
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        let old = cache.entries.get(&key).map(|v| kv_cost(&key, v));
        let new = kv_cost(&key, &value);
        if old.is_none() && cache.entries.len() >= KV_MAX_ENTRIES {
            return Ok(Err(format!("the cache is full ({KV_MAX_ENTRIES} entries)")));
        }
        let bytes = cache.bytes - old.unwrap_or(0) + new;
        if bytes > KV_MAX_BYTES {
            return Ok(Err(format!(
                "the cache is full ({KV_MAX_BYTES} bytes, {KV_ENTRY_OVERHEAD} of them per entry)"
            )));
        }
        cache.bytes = bytes;
        cache.entries.insert(key, value);
        Ok(Ok(()))
    }

    fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        if !self.shared.grants.kv {
            return Err(self.denied("kv"));
        }
        let mut cache = self
            .shared
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        if let Some(v) = cache.entries.remove(&key) {
            cache.bytes -= kv_cost(&key, &v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_by_every_memory_table_and_instance() {
        let pool = MemoryPool::new(10 << 20);
        let mut a = MemoryBudget::new(pool.clone());
        let mut b = MemoryBudget::new(pool.clone());
        assert!(a.memory_growing(0, 6 << 20, None).unwrap());
        assert!(
            !b.memory_growing(0, 6 << 20, None).unwrap(),
            "a second instance shares the budget"
        );
        assert!(b.hit);
        // A table of a million references is 8 MiB: past what is left.
        assert!(!a.table_growing(0, 1 << 20, None).unwrap());
        assert!(a.table_growing(0, 1000, None).unwrap());
        assert!(!a.table_growing(0, (1 << 20) + 1, None).unwrap());
        drop(a);
        assert_eq!(pool.used(), 0, "a dropped instance gives its bytes back");
        assert!(b.memory_growing(0, 6 << 20, None).unwrap());
    }

    #[test]
    fn kv_counts_entries_and_their_overhead() {
        let grants = Grants {
            kv: true,
            ..Grants::default()
        };
        let shared = PluginShared::new("p", "p@1.0.0", grants, None, MemoryPool::new(1 << 20));
        let mut state = PluginState::new(shared);
        // Empty values: without the per-entry cost 1 MiB would hold a
        // hundred thousand of them.
        let mut n = 0;
        while kv::Host::set(&mut state, format!("{n:05}"), Vec::new())
            .unwrap()
            .is_ok()
        {
            n += 1;
        }
        assert_eq!(n, KV_MAX_ENTRIES);
        // An existing entry may still change; a big value hits the bytes.
        assert!(
            kv::Host::set(&mut state, "00000".into(), vec![1; 100])
                .unwrap()
                .is_ok()
        );
        kv::Host::delete(&mut state, "00001".into()).unwrap();
        let err = kv::Host::set(&mut state, "big".into(), vec![0; KV_MAX_BYTES])
            .unwrap()
            .unwrap_err();
        assert!(err.contains("bytes"), "{err}");
    }

    #[test]
    fn the_log_limiter_admits_a_burst_then_a_trickle() {
        let l = LogLimiter::new();
        let admitted = (0..1000).filter(|_| l.admit()).count();
        assert!(
            (100..=110).contains(&admitted),
            "a burst of about {}: {admitted}",
            LogLimiter::BURST
        );
        assert!(l.dropped.load(Ordering::Relaxed) >= 890);
    }

    #[tokio::test]
    async fn a_deadline_that_moves_is_followed() {
        let d = Deadline::after(Duration::from_millis(20));
        let moved = d.clone();
        let out = d
            .bound(async move {
                moved.set(Instant::now() + Duration::from_millis(80));
                tokio::time::sleep(Duration::from_millis(50)).await;
                7
            })
            .await;
        assert_eq!(out, Some(7), "the deadline moved past the sleep");
        let d = Deadline::after(Duration::from_millis(10));
        assert_eq!(
            d.bound(tokio::time::sleep(Duration::from_secs(5))).await,
            None
        );
        assert!(d.expired());
    }
}
