//! What one plugin may spend: embedding calls, time (its deadline), memory
//! (shared by its instances), log lines and its key-value cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

use super::EmbedPurpose;

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
    pub(super) base: Instant,
    /// Nanoseconds after `base`.
    pub(super) at: AtomicU64,
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

/// A memory budget: one plugin's, shared by all its instances (concurrent
/// calls cannot multiply it), or the process-wide one
/// (`plugins.total_memory_mb`) that every plugin's budget draws from as
/// well, and that each loaded plugin's compiled code is charged to.
#[derive(Debug)]
pub struct MemoryPool {
    pub(super) limit: usize,
    pub(super) used: AtomicUsize,
    /// The most it ever held.
    peak: AtomicUsize,
    /// The process-wide budget this one also draws from.
    parent: Option<Arc<MemoryPool>>,
}

/// Which budget refused a growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The plugin's own (`plugins.memory_mb`).
    Plugin,
    /// All plugins' together (`plugins.total_memory_mb`).
    Total,
}

impl MemoryPool {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            parent: None,
        })
    }

    /// A plugin's budget of `limit` that also draws from `total`.
    pub fn within(limit: usize, total: Option<Arc<MemoryPool>>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            parent: total,
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held: by the plugin's live instances; for the process-wide
    /// budget, by every plugin's instances and compiled code.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The most it ever held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Bytes left.
    pub fn available(&self) -> usize {
        self.limit.saturating_sub(self.used())
    }

    fn take_own(&self, bytes: usize) -> bool {
        match self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            }) {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    fn give_back_own(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Takes `bytes` from this budget and the process-wide one, or from
    /// neither, saying which refused.
    pub(super) fn try_take(&self, bytes: usize) -> Result<(), Cap> {
        if !self.take_own(bytes) {
            return Err(Cap::Plugin);
        }
        if let Some(parent) = &self.parent
            && !parent.take_own(bytes)
        {
            self.give_back_own(bytes);
            return Err(Cap::Total);
        }
        Ok(())
    }

    pub(super) fn give_back(&self, bytes: usize) {
        self.give_back_own(bytes);
        if let Some(parent) = &self.parent {
            parent.give_back_own(bytes);
        }
    }

    /// Charges `bytes` (a plugin's compiled code) to this budget for as
    /// long as the returned charge lives; `None` if they do not fit.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Option<Charge> {
        self.take_own(bytes).then(|| Charge {
            pool: self.clone(),
            bytes,
        })
    }

    /// More than half of the budget is held: a finished call's instance is
    /// then dropped rather than kept for the next call, so that idle
    /// instances do not hold memory that running calls need.
    pub fn pressed(&self) -> bool {
        self.used() > self.limit / 2
    }
}

/// Bytes held against a [`MemoryPool`] until dropped (a loaded plugin's
/// compiled code, shared by the copies of it a regrant makes).
#[derive(Debug)]
pub struct Charge {
    pool: Arc<MemoryPool>,
    bytes: usize,
}

impl Charge {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pool.give_back_own(self.bytes);
    }
}

/// Per-plugin log limits: a plugin cannot flood or forge metaclaw's log.
#[derive(Debug)]
pub struct LogLimiter {
    /// Tokens (lines) left, refilled at `PER_SEC` up to `BURST`.
    pub(super) bucket: Mutex<(f64, Instant)>,
    /// Lines dropped so far (shown by `plugins list`).
    pub dropped: AtomicU64,
    /// When the last "lines dropped" notice was written.
    pub(super) noticed: Mutex<Option<Instant>>,
}

impl LogLimiter {
    /// Lines a plugin may log per second, sustained, and in one burst.
    pub const PER_SEC: f64 = 20.0;
    pub const BURST: f64 = 100.0;
    /// Characters of one log message.
    pub const MAX_CHARS: usize = 1000;

    pub(super) fn new() -> Self {
        Self {
            bucket: Mutex::new((Self::BURST, Instant::now())),
            dropped: AtomicU64::new(0),
            noticed: Mutex::new(None),
        }
    }

    pub(super) fn admit(&self) -> bool {
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
    pub(super) fn notice_due(&self) -> bool {
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
    pub(super) entries: HashMap<String, Vec<u8>>,
    pub(super) bytes: usize,
}

pub const KV_MAX_BYTES: usize = 1 << 20;
pub const KV_MAX_ENTRIES: usize = 4096;
/// What one entry costs beyond its key and value (the map's own keeping).
pub const KV_ENTRY_OVERHEAD: usize = 64;

pub(super) fn kv_cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + KV_ENTRY_OVERHEAD
}

/// One instance's share of its plugin's [`MemoryPool`] (and so of the
/// process-wide one). `StoreLimits` caps each linear memory separately, and
/// Python or JS components have several; this sums them, counts tables too
/// (a table of a million function references is 8 MiB of host memory), and
/// gives the bytes back to the pools when the instance goes.
pub struct MemoryBudget {
    pub(super) pool: Arc<MemoryPool>,
    pub(super) used: usize,
    /// A growth was refused: the call failed on a memory cap.
    pub hit: bool,
    /// ...and it was the process-wide one (`plugins.total_memory_mb`).
    pub total_hit: bool,
}

/// Host bytes per table element (a function reference is a pointer).
const TABLE_ELEMENT_BYTES: usize = 8;
/// Elements one table may have, whatever the budget.
const TABLE_MAX_ELEMENTS: usize = 1 << 20;

impl MemoryBudget {
    pub(super) fn new(pool: Arc<MemoryPool>) -> Self {
        Self {
            pool,
            used: 0,
            hit: false,
            total_hit: false,
        }
    }

    /// Bytes this instance holds.
    pub fn used(&self) -> usize {
        self.used
    }

    pub(super) fn grow(&mut self, bytes: usize) -> bool {
        match self.pool.try_take(bytes) {
            Ok(()) => {
                self.used += bytes;
                true
            }
            Err(cap) => {
                self.hit = true;
                self.total_hit |= cap == Cap::Total;
                false
            }
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
