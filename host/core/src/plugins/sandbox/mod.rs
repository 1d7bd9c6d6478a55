//! What a plugin may touch, and how much of it. Every store gets a WASI
//! context that denies the filesystem, network, environment and real clocks
//! unless the deployment granted them; a memory budget shared by all of the
//! plugin's instances (linear memories and tables alike); a cap on what one
//! call may copy into the host; metaclaw's host capabilities (`embed`,
//! `clock`, `kv`, `outcomes`), which deny an ungranted call (a trap, or an
//! error where the interface has one), `embed` within a budget of its own;
//! and a log that is escaped to one line a message and rate-limited.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{
    FsPerms, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

use super::bindings::{clock, embed, kv, log, outcomes, types};

mod host;
mod limits;
pub mod outer;
mod spend;

pub use limits::*;
pub use spend::{Account, EmbedAllowance, EmbedLedger, Spend, Unmetered};

/// Capabilities granted to one plugin: parsed with the config.
pub use crate::config::Grants;

/// Why an `embed` call for a plugin got no vectors (the plugin is handed
/// its text).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedFailed {
    #[error("the embedding ledger is unavailable")]
    LedgerUnavailable,
    #[error(
        "this plugin's embedding budget is spent: {requests} requests and {} KiB of text to the backend in the last {window_min} min (at most {max_requests} and {} KiB: plugins.embed_requests_per_hour, plugins.embed_mb_per_hour); what the cache holds is still served",
        .bytes >> 10,
        .max_bytes >> 10
    )]
    BudgetSpent {
        requests: u64,
        bytes: u64,
        window_min: u64,
        max_requests: u64,
        max_bytes: u64,
    },
    /// The backend failed lately and is left alone for a while.
    #[error("{last} (not retried for another {secs}s)")]
    Resting { last: String, secs: u64 },
    #[error(transparent)]
    Backend(#[from] EmbedError),
}

/// Why a backend could not embed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct EmbedError {
    pub message: String,
    /// How long the server asked to be left alone (its `Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

impl From<String> for EmbedError {
    fn from(message: String) -> Self {
        Self {
            message,
            retry_after: None,
        }
    }
}

impl From<&str> for EmbedError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

/// Embeddings for plugins that are granted `embed` (the host's embedding
/// backend, `crate::embeddings`).
pub trait Embedder: Send + Sync {
    /// One L2-normalised vector per text.
    fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedFailed>;

    /// [`Embedder::embed`], with what goes to the backend approved by
    /// `spend` first. A backend with a cache charges only for what it does
    /// not hold; this default counts every call as one request of all its
    /// text.
    fn embed_within(
        &self,
        texts: &[String],
        purpose: EmbedPurpose,
        spend: &dyn Spend,
    ) -> Result<Vec<Vec<f32>>, EmbedFailed> {
        spend.charge(1, texts.iter().map(|t| t.len() as u64).sum())?;
        self.embed(texts, purpose)
    }
}

/// Each skill's outcomes as a retriever granted `outcomes` sees them during
/// one `retrieve()`: those of the library that call is about (the skills
/// layer provides them; `plugins call` takes them from its input).
pub trait OutcomeSource: Send + Sync {
    /// The outcomes of skill `id`'s current version; none for an id that is
    /// not in the library.
    fn outcome(&self, id: &str) -> Option<outcomes::SkillOutcome>;
}

/// Outcomes given by id (`plugins call`, tests).
impl OutcomeSource for std::collections::HashMap<String, outcomes::SkillOutcome> {
    fn outcome(&self, id: &str) -> Option<outcomes::SkillOutcome> {
        self.get(id).cloned()
    }
}

/// The most ids one `outcomes()` call may ask about (a library of 10,000
/// skills fits six times over).
pub const MAX_OUTCOME_IDS: usize = 65_536;

/// Why a plugin asks for embeddings: texts embedded while indexing the
/// library come back again and again (every instance indexes, every
/// restart too) and are worth keeping; a turn's query rarely is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedPurpose {
    Index,
    Query,
}

/// What all instances of one plugin share.
pub struct PluginShared {
    /// The name it declared (validated: letters, digits, `-`, `_`).
    pub name: Arc<str>,
    /// `name@version`, for logs and messages.
    pub label: Arc<str>,
    pub grants: Grants,
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Its file's account of embedding spend over time, shared with every
    /// other instance and load of the same file.
    pub embed_account: Arc<Account>,
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
        embed_account: Arc<Account>,
        memory: Arc<MemoryPool>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            label: label.into(),
            grants,
            embedder,
            embed_account,
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
    /// What `outcomes()` answers from in this call (a retriever's
    /// `retrieve()`); none otherwise, and every id then has none.
    pub outcomes: Option<Arc<dyn OutcomeSource>>,
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
            outcomes: None,
        }
    }

    /// Ready for a new call ending at `deadline`.
    pub fn begin_call(&mut self, deadline: Arc<Deadline>, purpose: EmbedPurpose) {
        self.deadline = deadline;
        self.log_budget = LOG_LINES_PER_CALL;
        self.embed_purpose = purpose;
        self.embed_left = EmbedBudget::for_purpose(purpose);
        self.embed_error = None;
        self.outcomes = None;
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

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

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

    /// Two plugins, each within its own budget, together past the total:
    /// the growth that would pass it is refused (and said to be the
    /// total's), compiled code counts, and everything is given back.
    #[test]
    fn plugins_draw_from_one_total_that_code_is_charged_to() {
        let total = MemoryPool::new(20 << 20);
        let one = MemoryPool::within(16 << 20, Some(total.clone()));
        let two = MemoryPool::within(16 << 20, Some(total.clone()));
        let code = total.charge(4 << 20).unwrap();
        assert_eq!(total.used(), 4 << 20);
        let mut a = MemoryBudget::new(one.clone());
        let mut b = MemoryBudget::new(two.clone());
        assert!(a.memory_growing(0, 10 << 20, None).unwrap());
        assert_eq!(total.used(), 14 << 20);
        // b is 8 MiB under its own 16, but the total has 6 left.
        assert!(!b.memory_growing(0, 8 << 20, None).unwrap());
        assert!(b.hit && b.total_hit, "refused by the total");
        assert_eq!(two.used(), 0, "a refused growth takes nothing");
        assert_eq!(total.used(), 14 << 20);
        assert!(b.memory_growing(0, 6 << 20, None).unwrap());
        assert_eq!(total.used(), 20 << 20);
        // A plugin's own cap still says it is its own.
        let mut c = MemoryBudget::new(one.clone());
        assert!(!c.memory_growing(0, 7 << 20, None).unwrap());
        assert!(c.hit && !c.total_hit);
        // Tables draw from the total too.
        assert!(!b.table_growing(0, 1000, None).unwrap());
        assert!(b.total_hit);
        // Code charged beyond the total is refused.
        assert!(total.charge(1).is_none());
        assert!(total.pressed());
        drop(a);
        drop(code);
        assert_eq!(total.used(), 6 << 20);
        assert_eq!(one.used(), 0);
        drop(b);
        assert_eq!(total.used(), 0, "every byte is given back");
        assert_eq!(total.peak(), 20 << 20);
        assert!(!total.pressed());
    }

    /// Many instances of many plugins growing at once, wanting 120 MiB
    /// together, never hold more than the total between them — and fill it.
    #[test]
    fn concurrent_growth_never_passes_the_total() {
        let total = MemoryPool::new(64 << 20);
        let all_grown = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let plugin = MemoryPool::within(32 << 20, Some(total.clone()));
                let all_grown = all_grown.clone();
                std::thread::spawn(move || {
                    let held: Vec<MemoryBudget> = (0..5)
                        .map(|_| {
                            let mut budget = MemoryBudget::new(plugin.clone());
                            let _ = budget.memory_growing(0, 3 << 20, None);
                            budget
                        })
                        .collect();
                    // Every thread holds what it got at once.
                    all_grown.wait();
                    drop(held);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(total.peak() <= 64 << 20, "peak {}", total.peak());
        // 40 growths of 3 MiB were asked for: 21 fit.
        assert_eq!(total.peak(), 63 << 20);
        assert_eq!(total.used(), 0);
    }

    #[test]
    fn kv_counts_entries_and_their_overhead() {
        let grants = Grants {
            kv: true,
            ..Grants::default()
        };
        let account = Arc::new(Account {
            ledger: EmbedLedger::new(EmbedAllowance::DEFAULT),
            file: "p".into(),
        });
        let shared = PluginShared::new(
            "p",
            "p@1.0.0",
            grants,
            None,
            account,
            MemoryPool::new(1 << 20),
        );
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
