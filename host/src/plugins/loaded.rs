//! One loaded plugin: its compiled component, an `InstancePre` for its
//! world, a small pool of ready instances, and the rules of a call.
//!
//! A call has a wall-clock deadline that holds whatever the guest does:
//! calls are futures (wasmtime async), a running guest checks the deadline
//! at every epoch tick and yields to the runtime, and the caller stops
//! waiting when it passes — a guest asleep in WASI, or waiting on the host,
//! is dropped there. A plugin runs at most `pool_size` calls at once; a call
//! that cannot start before its deadline goes to the fallback without
//! counting against the plugin. A call that runs past its deadline fails at
//! that moment, its instance is discarded, and a plugin that keeps failing
//! is disabled until it is reloaded.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use semver::Version;
use serde::Serialize;
use wasmtime::component::Component;
use wasmtime::{Store, UpdateDeadline};

use super::bindings::{evolver, retriever, scorer, skill, types};
use super::engine::{FlavorId, PluginEngine};
use super::sandbox::{
    Deadline, EmbedPurpose, Embedder, Grants, MemoryPool, PluginShared, PluginState,
};

/// The WIT package version this host implements.
pub const PACKAGE: &str = "metaclaw:plugin";
pub const PACKAGE_VERSION: Version = Version::new(0, 1, 0);

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Retriever,
    Scorer,
    Evolver,
    Skill,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Retriever => "retriever",
            Kind::Scorer => "scorer",
            Kind::Evolver => "evolver",
            Kind::Skill => "skill",
        }
    }

    fn api(self) -> &'static str {
        match self {
            Kind::Retriever => "retriever-api",
            Kind::Scorer => "scorer-api",
            Kind::Evolver => "evolver-api",
            Kind::Skill => "skill-api",
        }
    }

    const ALL: [Kind; 4] = [Kind::Retriever, Kind::Scorer, Kind::Evolver, Kind::Skill];
}

impl From<types::PluginKind> for Kind {
    fn from(k: types::PluginKind) -> Self {
        match k {
            types::PluginKind::Retriever => Kind::Retriever,
            types::PluginKind::Scorer => Kind::Scorer,
            types::PluginKind::Evolver => Kind::Evolver,
            types::PluginKind::Skill => Kind::Skill,
        }
    }
}

/// Budgets for one plugin.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Memory of all the plugin's instances together (linear memories and
    /// tables).
    pub memory_bytes: usize,
    /// A call's deadline.
    pub timeout: Duration,
    /// A retriever's `index()` of the library (time spent waiting on the
    /// host's embedding backend is not counted, within its own budget).
    pub index_timeout: Duration,
    /// Instantiating and reading `metadata()` when the file is loaded.
    pub load_timeout: Duration,
    /// Consecutive failures before the plugin is disabled until reloaded.
    pub max_failures: u32,
    /// Ready instances kept for reuse, and calls running at once.
    pub pool_size: usize,
    /// Instances are replaced after this many calls (bounds slow leaks in
    /// guest runtimes).
    pub recycle_after: u32,
    /// Bytes one call may copy from the guest into the host (arguments of
    /// host functions, the results it returns).
    pub max_copy_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 128 << 20,
            timeout: Duration::from_millis(50),
            index_timeout: Duration::from_secs(30),
            load_timeout: Duration::from_secs(2),
            max_failures: 3,
            pool_size: 4,
            recycle_after: 10_000,
            max_copy_bytes: 4 << 20,
        }
    }
}

/// Where a plugin file came from: shipped with metaclaw, or dropped in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Builtin,
    User,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Builtin => "builtin",
            Source::User => "user",
        }
    }
}

/// What `plugins inspect` and `plugins list` show.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: Version,
    pub kind: Kind,
    pub description: String,
    /// Capabilities the plugin asks for (its metadata).
    pub asks: Vec<String>,
    /// The WIT package version it was built against.
    pub package: String,
    /// Interfaces it imports from the host (`metaclaw:plugin/clock`, `wasi:…`).
    pub imports: Vec<String>,
    pub sha256: String,
    pub path: PathBuf,
    pub size: u64,
    pub source: Source,
}

impl PluginInfo {
    /// Compiled into the binary (not a file: the lock does not pin it).
    pub fn embedded(&self) -> bool {
        self.path.starts_with(super::embedded::EMBEDDED_DIR)
    }
}

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error(
        "disabled after {0} consecutive failures (fix the plugin, then replace its file or restart)"
    )]
    Disabled(u32),
    #[error("deadline of {0:?} exceeded")]
    Deadline(Duration),
    #[error("memory cap of {} MiB reached", .0 >> 20)]
    Memory(usize),
    #[error("trapped: {0}")]
    Trap(String),
    /// More data than `plugins.max_call_mb` crossed into the host in one
    /// call (a huge result, a huge host-call argument).
    #[error("copied more than plugins.max_call_mb ({} MiB) into the host in one call", .0 >> 20)]
    TooLarge(usize),
    #[error("cannot instantiate: {0}")]
    Instantiate(String),
    #[error("wrong kind: this plugin is a {0}")]
    WrongKind(&'static str),
    /// The host's embedding backend failed during the call: not the
    /// plugin's fault, so not counted against it.
    #[error("the embedding backend failed: {0}")]
    Embed(String),
    /// The retriever has no index of the library yet (at start, after a
    /// change): this turn goes to the next retriever, or without skills,
    /// while the index is built in the background.
    #[error("still indexing the skills")]
    Indexing,
    /// Every instance was busy until the deadline: the call never started,
    /// so it is not counted against the plugin.
    #[error("busy: {0} calls already running, none ended before the deadline")]
    Busy(usize),
}

impl CallError {
    /// Failures the plugin is blamed for (counted toward disabling it).
    fn counts(&self) -> bool {
        matches!(
            self,
            CallError::Deadline(_)
                | CallError::Memory(_)
                | CallError::Trap(_)
                | CallError::TooLarge(_)
                | CallError::Instantiate(_)
        )
    }
}

#[derive(Clone)]
enum Pre {
    Retriever(retriever::RetrieverPre<PluginState>),
    Scorer(scorer::ScorerPre<PluginState>),
    Evolver(evolver::EvolverPre<PluginState>),
    Skill(skill::SkillPre<PluginState>),
}

enum Bindings {
    Retriever(retriever::Retriever),
    Scorer(scorer::Scorer),
    Evolver(evolver::Evolver),
    Skill(skill::Skill),
}

struct Instance {
    store: Store<PluginState>,
    bindings: Bindings,
    calls: u32,
    /// For a retriever: the library generation this instance has indexed
    /// (each instance has its own memory, so each needs the index).
    indexed: Option<u64>,
}

/// Which pooled instance a call wants.
#[derive(Clone, Copy)]
enum Want {
    /// Any (a new one if none is ready).
    Any,
    /// A retriever instance with an index, of `generation` by preference
    /// (an older index serves while the new one is built); never a new one.
    Indexed(u64),
    /// One whose index is older than `generation`, or none (a new one if
    /// none is ready).
    Unindexed(u64),
}

#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    /// Calls that found every instance busy until their deadline.
    pub busy: AtomicU64,
    pub consecutive_failures: AtomicU32,
    pub disabled: AtomicBool,
    pub busy_nanos: AtomicU64,
    #[serde(skip)]
    pub last_error: Mutex<Option<String>>,
}

/// A retriever's index of the current skill library, as `status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexState {
    /// Turns are answered from it.
    Ready,
    /// Being built; meanwhile turns go to the next retriever.
    Indexing,
    /// The last attempt failed; a later turn tries again.
    Failed,
    /// Not started for this library yet (it starts with the next turn or
    /// change).
    NotStarted,
}

pub struct Loaded {
    pub info: PluginInfo,
    pub limits: Limits,
    pub stats: Stats,
    shared: Arc<PluginShared>,
    engine: Arc<PluginEngine>,
    /// Which of the engine's wasmtime engines it was compiled for.
    flavor: FlavorId,
    pre: Pre,
    pool: Mutex<Vec<Instance>>,
    /// One per call that may run at once.
    permits: tokio::sync::Semaphore,
    /// Held while the library is indexed: one index at a time.
    indexing: tokio::sync::Mutex<()>,
    /// The generation a background index was last started for.
    warming: AtomicU64,
    /// The newest library generation an instance has indexed (`u64::MAX`:
    /// none yet).
    indexed: AtomicU64,
    /// The library generation whose last index failed (`u64::MAX`: none).
    /// An older index serves while a newer one is built, not once building
    /// it has failed: then its answers are stale, and the next retriever
    /// (one that could index the library) answers instead.
    index_failed: AtomicU64,
}

/// A compiled, checked plugin whose metadata has been read, before the
/// host decides what it is granted.
pub struct Probed {
    pub info: PluginInfo,
    limits: Limits,
    engine: Arc<PluginEngine>,
    flavor: FlavorId,
    pre: Pre,
}

/// The plugin kind a component implements, and the package version it was
/// built for, read from its exports (`metaclaw:plugin/scorer-api@0.1.0`).
pub fn detect(
    engine: &wasmtime::Engine,
    component: &Component,
) -> Result<(Kind, Version, Vec<String>), String> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let mut found = None;
    for name in &exports {
        let Some(rest) = name.strip_prefix(&format!("{PACKAGE}/")) else {
            continue;
        };
        let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if let Some(kind) = Kind::ALL.into_iter().find(|k| k.api() == iface) {
            let version = Version::parse(version).map_err(|_| {
                format!(
                    "it exports {}, whose package version is not semver",
                    crate::untrusted::log_line(name, 200)
                )
            })?;
            found = Some((kind, version));
        }
    }
    let Some((kind, version)) = found else {
        return Err(format!(
            "not a metaclaw plugin: it exports none of {PACKAGE}/{{retriever,scorer,evolver,skill}}-api (exports: {})",
            if exports.is_empty() {
                "nothing".to_string()
            } else {
                crate::untrusted::log_line(&exports.join(", "), 500)
            }
        ));
    };
    if !compatible(&version) {
        return Err(format!(
            "built for {PACKAGE}@{version}; this metaclaw loads plugins built for {PACKAGE}@{}.{}.x",
            PACKAGE_VERSION.major, PACKAGE_VERSION.minor
        ));
    }
    if !exports
        .iter()
        .any(|e| e.starts_with(&format!("{PACKAGE}/plugin@")))
    {
        return Err(format!(
            "it does not export {PACKAGE}/plugin (its metadata)"
        ));
    }
    Ok((kind, version, imports))
}

/// Same major version; for 0.x, the same minor.
pub fn compatible(v: &Version) -> bool {
    if PACKAGE_VERSION.major == 0 {
        v.major == 0 && v.minor == PACKAGE_VERSION.minor
    } else {
        v.major == PACKAGE_VERSION.major
    }
}

impl Loaded {
    /// Compiles (or loads from the cache), checks the component's world,
    /// and reads its metadata under the deny-all sandbox within
    /// `limits.load_timeout`. Blocks: call it from a thread of its own (the
    /// plugin scanner, the CLI), never from an async task.
    pub fn probe(
        engine: &Arc<PluginEngine>,
        path: PathBuf,
        bytes: &[u8],
        sha256: String,
        source: Source,
        limits_for: &dyn Fn(Kind) -> Limits,
    ) -> Result<Probed, String> {
        let (component, flavor) = engine.compile(bytes, &sha256).map_err(|e| {
            format!(
                "not a valid component: {}",
                crate::untrusted::log_line(&format!("{e:#}"), 1000)
            )
        })?;
        let (kind, package, imports) = detect(&engine.flavor(flavor).engine, &component)?;
        let instance_pre = engine
            .flavor(flavor)
            .linker
            .instantiate_pre(&component)
            .map_err(|e| {
                format!(
                    "cannot link: {}",
                    crate::untrusted::log_line(&e.to_string(), 500)
                )
            })?;
        let link_err = |e: wasmtime::Error| {
            format!(
                "cannot link as a {}: {}",
                kind.as_str(),
                crate::untrusted::log_line(&e.to_string(), 500)
            )
        };
        let pre = match kind {
            Kind::Retriever => {
                Pre::Retriever(retriever::RetrieverPre::new(instance_pre).map_err(link_err)?)
            }
            Kind::Scorer => Pre::Scorer(scorer::ScorerPre::new(instance_pre).map_err(link_err)?),
            Kind::Evolver => {
                Pre::Evolver(evolver::EvolverPre::new(instance_pre).map_err(link_err)?)
            }
            Kind::Skill => Pre::Skill(skill::SkillPre::new(instance_pre).map_err(link_err)?),
        };
        let limits = limits_for(kind);
        // Metadata is read under the deny-all sandbox: what a plugin is
        // granted depends on what it is, which is not known yet.
        let probe = Self::new(
            PluginInfo {
                name: String::new(),
                version: Version::new(0, 0, 0),
                kind,
                description: String::new(),
                asks: Vec::new(),
                package: format!("{PACKAGE}@{package}"),
                imports,
                sha256,
                size: bytes.len() as u64,
                path,
                source,
            },
            Limits {
                timeout: limits.load_timeout,
                pool_size: 1,
                max_failures: u32::MAX,
                ..limits.clone()
            },
            engine.clone(),
            flavor,
            pre,
            "(loading)",
            Grants::default(),
            None,
        );
        let meta = engine
            .block_on(probe.metadata())
            .map_err(|e| format!("metadata() failed: {e}"))?;
        let declared = Kind::from(meta.kind);
        if declared != kind {
            return Err(format!(
                "its metadata says {} but it implements the {} world",
                declared.as_str(),
                kind.as_str()
            ));
        }
        let name = meta.name.trim().to_string();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "invalid plugin name {:?} (1 to 64 letters, digits, - and _)",
                crate::untrusted::log_line(&name, 80)
            ));
        }
        let version = Version::parse(meta.version.trim()).map_err(|e| {
            format!(
                "version {:?} is not semver: {e}",
                crate::untrusted::log_line(&meta.version, 80)
            )
        })?;
        let Self { mut info, pre, .. } = probe;
        info.name = name;
        info.version = version;
        info.description = crate::untrusted::log_line(&meta.description, 500);
        info.asks = meta
            .capabilities
            .iter()
            .take(32)
            .map(|c| crate::untrusted::log_line(c, 100))
            .collect();
        Ok(Probed {
            info,
            limits,
            engine: engine.clone(),
            flavor,
            pre,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        info: PluginInfo,
        limits: Limits,
        engine: Arc<PluginEngine>,
        flavor: FlavorId,
        pre: Pre,
        label: &str,
        grants: Grants,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Self {
        let shared = PluginShared::new(
            &info.name,
            label,
            grants,
            embedder,
            MemoryPool::new(limits.memory_bytes),
        );
        Self {
            permits: tokio::sync::Semaphore::new(limits.pool_size.max(1)),
            info,
            limits,
            stats: Stats::default(),
            shared,
            engine,
            flavor,
            pre,
            pool: Mutex::new(Vec::new()),
            indexing: tokio::sync::Mutex::new(()),
            warming: AtomicU64::new(u64::MAX),
            indexed: AtomicU64::new(u64::MAX),
            index_failed: AtomicU64::new(u64::MAX),
        }
    }

    /// The newest library generation one of its instances has indexed: a
    /// retriever answers turns once it has one.
    pub fn indexed_generation(&self) -> Option<u64> {
        match self.indexed.load(Ordering::Acquire) {
            u64::MAX => None,
            generation => Some(generation),
        }
    }

    /// Where this retriever's index of library `generation` stands (for
    /// `status`: tests and tools wait for the retriever they need).
    pub fn index_state(&self, generation: u64) -> IndexState {
        if self.indexed_generation().is_some_and(|g| g >= generation) {
            IndexState::Ready
        } else if self.index_failed.load(Ordering::Acquire) == generation {
            IndexState::Failed
        } else if self.warming.load(Ordering::Acquire) == generation {
            IndexState::Indexing
        } else {
            IndexState::NotStarted
        }
    }

    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// The engine it runs on (`engine().block_on(plugin.score(..))` from a
    /// thread that is not running async tasks).
    pub fn engine(&self) -> &Arc<PluginEngine> {
        &self.engine
    }

    /// What this plugin is granted.
    pub fn grants(&self) -> &Grants {
        &self.shared.grants
    }

    /// Log lines of this plugin dropped by the rate limits.
    pub fn log_dropped(&self) -> u64 {
        self.shared.log.dropped.load(Ordering::Relaxed)
    }

    pub fn is_disabled(&self) -> bool {
        self.stats.disabled.load(Ordering::Relaxed)
    }

    async fn instantiate(
        &self,
        deadline: &Arc<Deadline>,
        purpose: EmbedPurpose,
    ) -> Result<Instance, CallError> {
        let mut state = PluginState::new(self.shared.clone());
        state.begin_call(deadline.clone(), purpose);
        let mut store = Store::new(&self.engine.flavor(self.flavor).engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(self.limits.max_copy_bytes);
        // Every tick: stop at the deadline, else let the runtime run
        // others (and the caller notice a deadline of its own).
        store.epoch_deadline_callback(|ctx| {
            Ok(if ctx.data().deadline.expired() {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        store.set_epoch_deadline(1);
        let bindings = match &self.pre {
            Pre::Retriever(p) => p
                .instantiate_async(&mut store)
                .await
                .map(Bindings::Retriever),
            Pre::Scorer(p) => p.instantiate_async(&mut store).await.map(Bindings::Scorer),
            Pre::Evolver(p) => p.instantiate_async(&mut store).await.map(Bindings::Evolver),
            Pre::Skill(p) => p.instantiate_async(&mut store).await.map(Bindings::Skill),
        };
        let bindings = match bindings {
            Ok(b) => b,
            Err(e) if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) => {
                return Err(CallError::Deadline(self.limits.timeout));
            }
            Err(_) if store.data().limiter.hit => {
                return Err(CallError::Memory(self.limits.memory_bytes));
            }
            Err(e) => {
                return Err(CallError::Instantiate(crate::untrusted::log_line(
                    &format!("{e:#}"),
                    1000,
                )));
            }
        };
        Ok(Instance {
            store,
            bindings,
            calls: 0,
            indexed: None,
        })
    }

    /// An instance from the pool as `want` asks, or a new one.
    fn take_pooled(&self, want: Want) -> Result<Option<Instance>, CallError> {
        let Ok(mut pool) = self.pool.lock() else {
            return Ok(None);
        };
        let pick = match want {
            Want::Any => pool.len().checked_sub(1),
            Want::Indexed(generation) => pool
                .iter()
                .position(|i| i.indexed == Some(generation))
                .or_else(|| {
                    pool.iter()
                        .enumerate()
                        .filter(|(_, i)| i.indexed.is_some())
                        .max_by_key(|(_, i)| i.indexed)
                        .map(|(n, _)| n)
                }),
            // Never one holding a newer library than asked.
            Want::Unindexed(generation) => pool
                .iter()
                .position(|i| i.indexed.is_none_or(|g| g < generation)),
        };
        match (pick, want) {
            (Some(n), _) => Ok(Some(pool.swap_remove(n))),
            (None, Want::Indexed(_)) => Err(CallError::Indexing),
            (None, _) => Ok(None),
        }
    }

    /// Runs `f` on an instance under the deadline and the budgets. A trap
    /// or a missed deadline ends only this call: the instance is dropped,
    /// the failure counted, and the plugin disabled after too many in a
    /// row.
    async fn call<R>(
        &self,
        timeout: Duration,
        want: Want,
        purpose: EmbedPurpose,
        f: impl AsyncFnOnce(&mut Instance) -> Result<wasmtime::Result<R>, CallError>,
    ) -> Result<R, CallError> {
        if self.is_disabled() {
            return Err(CallError::Disabled(self.limits.max_failures));
        }
        let deadline = Deadline::after(timeout);
        let started = deadline.started();
        // When the call got its turn to run (None: it never did).
        let mut running = None;
        let outcome = deadline
            .bound(async {
                let _permit = self
                    .permits
                    .acquire()
                    .await
                    .map_err(|_| CallError::Busy(self.limits.pool_size))?;
                running = Some(Instant::now());
                let _ticking = self.engine.flavor(self.flavor).running();
                let mut instance = match self.take_pooled(want)? {
                    Some(instance) => instance,
                    // The deadline covers instantiation (the guest's
                    // start-up code runs there).
                    None => self
                        .instantiate(&deadline, purpose)
                        .await
                        .map_err(|e| self.classify_start(e))?,
                };
                instance
                    .store
                    .data_mut()
                    .begin_call(deadline.clone(), purpose);
                // The next tick from now (a pooled instance's deadline is
                // from its last call: without this every call would start
                // by yielding).
                instance.store.set_epoch_deadline(1);
                let result = f(&mut instance).await;
                Ok::<_, CallError>((instance, result))
            })
            .await;
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.stats
            .busy_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        // A call that waited for its turn most of its deadline and then ran
        // out of time was crowded out, not slow: the plugin is blamed for a
        // deadline only when it had at least half of it.
        let had_its_time = || running.is_some_and(|ran: Instant| ran.elapsed() >= timeout / 2);
        let (instance, result) = match outcome {
            None if had_its_time() => return Err(self.failed(CallError::Deadline(timeout))),
            None => {
                self.stats.busy.fetch_add(1, Ordering::Relaxed);
                return Err(CallError::Busy(self.limits.pool_size));
            }
            Some(Err(CallError::Deadline(_))) if !had_its_time() => {
                self.stats.busy.fetch_add(1, Ordering::Relaxed);
                return Err(CallError::Busy(self.limits.pool_size));
            }
            Some(Err(e)) => return Err(if e.counts() { self.failed(e) } else { e }),
            Some(Ok(done)) => done,
        };
        match result {
            Ok(Ok(value)) => {
                self.stats.consecutive_failures.store(0, Ordering::Relaxed);
                self.give_back(instance);
                Ok(value)
            }
            Ok(Err(trap)) => {
                let error = self.trapped(&instance, &trap, timeout);
                // A trapped instance is poisoned: drop it.
                drop(instance);
                if matches!(error, CallError::Deadline(_)) && !had_its_time() {
                    self.stats.busy.fetch_add(1, Ordering::Relaxed);
                    return Err(CallError::Busy(self.limits.pool_size));
                }
                Err(self.failed(error))
            }
            // What the call reported itself (the embedding backend failed,
            // index() refused, wrong kind). Only the plugin's own failures
            // count; the instance is dropped either way.
            Err(e) => Err(if e.counts() { self.failed(e) } else { e }),
        }
    }

    /// A failed instantiation. The memory budget is shared by the plugin's
    /// instances: with others running, no room for one more only means
    /// busy.
    fn classify_start(&self, error: CallError) -> CallError {
        let others = self
            .limits
            .pool_size
            .saturating_sub(self.permits.available_permits() + 1);
        match error {
            CallError::Memory(_) if others > 0 => CallError::Busy(self.limits.pool_size),
            error => error,
        }
    }

    fn give_back(&self, mut instance: Instance) {
        instance.calls += 1;
        if instance.calls < self.limits.recycle_after
            && let Ok(mut pool) = self.pool.lock()
            && pool.len() < self.limits.pool_size
        {
            pool.push(instance);
        }
    }

    /// What a trap means: the deadline, the memory cap, or the plugin's own
    /// failure (with the tail of what it wrote to stderr).
    fn trapped(&self, instance: &Instance, trap: &wasmtime::Error, timeout: Duration) -> CallError {
        let state = instance.store.data();
        if trap.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
            return CallError::Deadline(timeout);
        }
        if state.limiter.hit {
            return CallError::Memory(self.limits.memory_bytes);
        }
        // wasmtime's own words when the copy limit (hostcall fuel) is hit.
        if format!("{trap:#}").contains("fuel allocated for hostcalls has been exhausted") {
            return CallError::TooLarge(self.limits.max_copy_bytes);
        }
        let stderr = String::from_utf8_lossy(&state.stderr.contents())
            .trim()
            .to_string();
        let tail: String = stderr
            .chars()
            .rev()
            .take(300)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let mut msg = format!("{trap:#}");
        if !tail.is_empty() {
            msg.push_str(&format!(" (stderr: {tail})"));
        }
        // Function names in the backtrace and stderr are the guest's words.
        CallError::Trap(crate::untrusted::log_line(&msg, 2000))
    }

    /// Linear memory and tables held by all of the plugin's instances.
    pub fn memory_in_use(&self) -> usize {
        self.shared.memory.used()
    }

    fn failed(&self, error: CallError) -> CallError {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        let n = self
            .stats
            .consecutive_failures
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        tracing::warn!(plugin = %self.label(), "plugin call failed: {error}");
        if let Ok(mut last) = self.stats.last_error.lock() {
            *last = Some(error.to_string());
        }
        if n >= self.limits.max_failures && !self.stats.disabled.swap(true, Ordering::Relaxed) {
            tracing::error!(plugin = %self.label(), "disabled after {n} consecutive failures; replace the file or restart to retry");
        }
        error
    }

    /// One export called on any instance under the call's deadline: `f`
    /// picks it from the bindings (`None`: this plugin is of another kind).
    async fn call_export<R>(
        &self,
        f: impl AsyncFnOnce(&mut Store<PluginState>, &Bindings) -> Option<wasmtime::Result<R>>,
    ) -> Result<R, CallError> {
        self.call(
            self.limits.timeout,
            Want::Any,
            EmbedPurpose::Query,
            async |Instance {
                       store, bindings, ..
                   }| {
                f(store, bindings)
                    .await
                    .ok_or(CallError::WrongKind(self.info.kind.as_str()))
            },
        )
        .await
    }

    pub async fn metadata(&self) -> Result<types::PluginMetadata, CallError> {
        self.call_export(async |store: &mut Store<PluginState>, b: &Bindings| {
            Some(match b {
                Bindings::Retriever(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
                Bindings::Scorer(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
                Bindings::Evolver(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
                Bindings::Skill(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
            })
        })
        .await
    }

    pub async fn score(
        &self,
        turn: &types::FinishedTurn,
    ) -> Result<Option<types::Reward>, CallError> {
        let reward = self
            .call_export(
                async |store: &mut Store<PluginState>, b: &Bindings| match b {
                    Bindings::Scorer(b) => {
                        Some(b.metaclaw_plugin_scorer_api().call_score(store, turn).await)
                    }
                    _ => None,
                },
            )
            .await?;
        // Whatever the guest returns, what the host keeps is bounded.
        Ok(reward.map(|r| types::Reward {
            value: if r.value.is_finite() {
                r.value.clamp(-1.0, 1.0)
            } else {
                0.0
            },
            label: clip(&crate::untrusted::prompt_text(&r.label), 64),
            rationale: clip(&crate::untrusted::prompt_text(&r.rationale), 1000),
        }))
    }

    /// Retrieves the `k` best skills, from an instance that has indexed the
    /// library. None has yet (at start, after a change): `Indexing`, and
    /// the index is built in the background — a turn never waits for one.
    pub async fn retrieve(
        self: &Arc<Self>,
        skills: &Arc<Vec<types::Skill>>,
        generation: u64,
        context: &types::TurnContext,
        k: u32,
    ) -> Result<Vec<types::ScoredSkill>, CallError> {
        let mut embed_failed = None;
        let ranked = self
            .call(
                self.limits.timeout,
                Want::Indexed(generation),
                EmbedPurpose::Query,
                async |Instance {
                           store,
                           bindings,
                           indexed,
                           ..
                       }| {
                    let Bindings::Retriever(b) = bindings else {
                        return Err(CallError::WrongKind(self.info.kind.as_str()));
                    };
                    let stale = *indexed != Some(generation);
                    let ranked = b
                        .metaclaw_plugin_retriever_api()
                        .call_retrieve(&mut *store, context, k)
                        .await;
                    embed_failed = store.data_mut().embed_error.take();
                    Ok(ranked.map(|r| (r, stale)))
                },
            )
            .await;
        let (mut ranked, stale) = match ranked {
            Err(CallError::Indexing) => {
                self.refresh(skills, generation);
                return Err(CallError::Indexing);
            }
            other => other?,
        };
        if stale {
            self.refresh(skills, generation);
            if self.index_failed.load(Ordering::Acquire) == generation {
                return Err(CallError::Indexing);
            }
        }
        // A ranking made without the query's embedding is no ranking: let
        // the next retriever answer.
        if let Some(error) = embed_failed {
            return Err(CallError::Embed(error));
        }
        ranked.truncate(k as usize);
        Ok(ranked)
    }

    /// No indexed instance was left (never made, or dropped after a
    /// failure), or the one a turn got was of an older library: index,
    /// unless an index is under way.
    fn refresh(self: &Arc<Self>, skills: &Arc<Vec<types::Skill>>, generation: u64) {
        if self.indexing.try_lock().is_ok() {
            self.warming.store(u64::MAX, Ordering::Release);
        }
        self.warm_in_background(skills, generation);
    }

    /// Starts indexing `generation` unless that was already started (one
    /// background index at a time). One that fails lets a later turn try
    /// again: a plugin that keeps failing is disabled by then, and a
    /// failing embedding backend backs off by itself.
    fn warm_in_background(self: &Arc<Self>, skills: &Arc<Vec<types::Skill>>, generation: u64) {
        if self.warming.swap(generation, Ordering::AcqRel) == generation {
            return;
        }
        let (this, skills) = (self.clone(), skills.clone());
        self.engine.detach(async move {
            if let Err(e) = this.warm(&skills, generation).await {
                tracing::warn!(retriever = this.label(), "cannot index the skills: {e}");
                let _ = this.warming.compare_exchange(
                    generation,
                    u64::MAX,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        });
    }

    /// Indexes `skills` on up to `pool_size` instances (reusing pooled ones,
    /// creating the rest), so that turns find ready indexes. One index at a
    /// time; each `index()` has `limits.index_timeout` of its own time.
    pub async fn warm(&self, skills: &[types::Skill], generation: u64) -> Result<(), CallError> {
        let outcome = self.index_instances(skills, generation).await;
        if outcome.is_ok() {
            let _ = self.index_failed.compare_exchange(
                generation,
                u64::MAX,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        } else {
            // Indexes may end in any order: the newest failure counts.
            let _ = self
                .index_failed
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                    (now == u64::MAX || now < generation).then_some(generation)
                });
        }
        outcome
    }

    async fn index_instances(
        &self,
        skills: &[types::Skill],
        generation: u64,
    ) -> Result<(), CallError> {
        let _one_at_a_time = self.indexing.lock().await;
        // Background indexes may run in any order: an older library's
        // index is not wanted once a newer one is ready.
        if self.indexed_generation().is_some_and(|g| g > generation) {
            return Ok(());
        }
        for _ in 0..self.limits.pool_size.max(1) {
            // Enough indexed instances, counting those busy in calls (each
            // index of a large library is seconds of work).
            let ready = self.pool.lock().map_or(0, |p| {
                p.iter().filter(|i| i.indexed == Some(generation)).count()
            });
            let busy = self
                .limits
                .pool_size
                .saturating_sub(self.permits.available_permits());
            if ready + busy >= self.limits.pool_size {
                break;
            }
            let done = self
                .call(
                    self.limits.index_timeout,
                    Want::Unindexed(generation),
                    EmbedPurpose::Index,
                    async |Instance {
                               store,
                               bindings,
                               indexed,
                               ..
                           }| {
                        let Bindings::Retriever(b) = bindings else {
                            return Err(CallError::WrongKind(self.info.kind.as_str()));
                        };
                        let outcome = b
                            .metaclaw_plugin_retriever_api()
                            .call_index(&mut *store, skills, generation)
                            .await;
                        let state = store.data_mut();
                        match outcome {
                            Ok(Ok(())) => {
                                *indexed = Some(generation);
                                let _ = self.indexed.fetch_update(
                                    Ordering::AcqRel,
                                    Ordering::Acquire,
                                    |now| {
                                        (now == u64::MAX || now < generation).then_some(generation)
                                    },
                                );
                                Ok(Ok(()))
                            }
                            // The host's embedding backend failed, not the
                            // plugin.
                            Ok(Err(_)) if state.embed_error.is_some() => Err(CallError::Embed(
                                state.embed_error.take().unwrap_or_default(),
                            )),
                            Ok(Err(message)) => Err(CallError::Trap(format!(
                                "index() refused: {}",
                                crate::untrusted::log_line(&message, 500)
                            ))),
                            Err(trap) => Ok(Err(trap)),
                        }
                    },
                )
                .await;
            match done {
                Ok(()) => {}
                // The memory budget has room for fewer instances.
                Err(CallError::Busy(_)) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub async fn process(
        &self,
        drafts: &[types::SkillDraft],
        library: &[types::Skill],
    ) -> Result<Vec<types::DraftOutcome>, CallError> {
        self.call_export(
            async |store: &mut Store<PluginState>, b: &Bindings| match b {
                Bindings::Evolver(b) => Some(
                    b.metaclaw_plugin_evolver_api()
                        .call_process(store, drafts, library)
                        .await,
                ),
                _ => None,
            },
        )
        .await
    }

    pub async fn applies(&self, context: &types::TurnContext) -> Result<f32, CallError> {
        let score = self
            .call_export(
                async |store: &mut Store<PluginState>, b: &Bindings| match b {
                    Bindings::Skill(b) => Some(
                        b.metaclaw_plugin_skill_api()
                            .call_applies(store, context)
                            .await,
                    ),
                    _ => None,
                },
            )
            .await?;
        Ok(if score.is_finite() {
            score.clamp(0.0, 1.0)
        } else {
            0.0
        })
    }

    pub async fn render(&self, context: &types::TurnContext) -> Result<String, CallError> {
        let text = self
            .call_export(
                async |store: &mut Store<PluginState>, b: &Bindings| match b {
                    Bindings::Skill(b) => Some(
                        b.metaclaw_plugin_skill_api()
                            .call_render(store, context)
                            .await,
                    ),
                    _ => None,
                },
            )
            .await?;
        Ok(clip(&crate::untrusted::prompt_text(&text), 16 << 10))
    }

    pub fn status(&self) -> String {
        if self.is_disabled() {
            let last = self
                .stats
                .last_error
                .lock()
                .ok()
                .and_then(|l| l.clone())
                .unwrap_or_default();
            format!("disabled: {last}")
        } else {
            "ok".into()
        }
    }

    /// The same compiled plugin with other grants, and none of this one's
    /// state (instances, statistics).
    pub fn regranted(&self, grants: Grants, embedder: Option<Arc<dyn Embedder>>) -> Loaded {
        Loaded::new(
            self.info.clone(),
            self.limits.clone(),
            self.engine.clone(),
            self.flavor,
            self.pre.clone(),
            self.label(),
            grants,
            embedder,
        )
    }
}

impl Probed {
    /// The plugin ready to be called, with what it is granted.
    pub fn ready(self, grants: Grants, embedder: Option<Arc<dyn Embedder>>) -> Loaded {
        let label = format!("{}@{}", self.info.name, self.info.version);
        Loaded::new(
            self.info,
            self.limits,
            self.engine,
            self.flavor,
            self.pre,
            &label,
            grants,
            embedder,
        )
    }
}

fn clip(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max_chars).collect();
        cut.push('…');
        cut
    }
}
