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
//!
//! The parts, one job each: what a plugin is and the world it implements
//! (`info`), the instance pool and the rules of a call (`pool`), the calls
//! of each kind (`calls`), and a retriever's index of the skill library
//! (`index`).

mod calls;
mod index;
mod info;
mod pool;

use crate::plugins::LoadRefused;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use semver::Version;

use super::bindings::{evolver, retriever, scorer, skill};
use super::engine::{CompileTimedOut, FlavorId, PluginEngine, code_bytes};
use super::sandbox::{
    Account, Charge, EmbedAllowance, EmbedLedger, Embedder, Grants, MemoryPool, PluginShared,
};

pub use index::IndexState;
pub use info::{Kind, Limits, PACKAGE, PACKAGE_VERSION, PluginInfo, Source, compatible, detect};
pub use pool::{CallError, Stats};
use pool::{Instance, Pre};

pub struct LoadedPlugin {
    pub info: PluginInfo,
    pub limits: Limits,
    pub stats: Stats,
    shared: Arc<PluginShared>,
    engine: Arc<PluginEngine>,
    /// Which of the engine's wasmtime engines it was compiled for.
    flavor: FlavorId,
    pre: Pre,
    /// Its compiled code, charged to `plugins.total_memory_mb` while any
    /// copy of it (a regrant shares the code) is loaded.
    code: Arc<Charge>,
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
    code: Arc<Charge>,
}

impl LoadedPlugin {
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
    ) -> Result<Probed, LoadRefused> {
        let (component, flavor, code) = compile_charged(engine, bytes, &sha256)?;
        let total = engine.memory();
        let (kind, package, imports) = detect(&engine.flavor(flavor).engine, &component)?;
        let pre = pre_of(engine, flavor, &component, kind)?;
        let limits = limits_for(kind);
        // Metadata is read under the deny-all sandbox: what a plugin is
        // granted depends on what it is, which is not known yet.
        let info = PluginInfo {
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
        };
        let probe = Self::loading(info, &limits, engine, flavor, pre, &code);
        let meta = engine
            .block_on(probe.metadata())
            .map_err(|e| metadata_refused(e, &probe, &code, total))?;
        // What one instance needs (its memories and tables as instantiated,
        // and what metadata() grew): with its code, it must fit in what the
        // other plugins leave, or it could never run.
        let one_instance = probe.shared.memory.peak();
        let (name, version) = identity(&meta, kind)?;
        let Self { mut info, pre, .. } = probe;
        if one_instance > total.available() {
            return Err(LoadRefused::InstanceTooLarge {
                code: mib(code.bytes()),
                instance: mib(one_instance),
                used: mib(total.used()),
                limit: mib(total.limit()),
            });
        }
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
            code,
        })
    }

    /// The plugin as its metadata is read: one instance, under the load
    /// timeout, never retired for failures, granted nothing.
    fn loading(
        info: PluginInfo,
        limits: &Limits,
        engine: &Arc<PluginEngine>,
        flavor: FlavorId,
        pre: Pre,
        code: &Arc<Charge>,
    ) -> Self {
        Self::new(
            info,
            Limits {
                timeout: limits.load_timeout,
                pool_size: 1,
                max_failures: u32::MAX,
                ..limits.clone()
            },
            engine.clone(),
            flavor,
            pre,
            code.clone(),
            "(loading)",
            Grants::default(),
            None,
            Arc::new(Account {
                ledger: EmbedLedger::new(EmbedAllowance::DEFAULT),
                file: "".into(),
            }),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        info: PluginInfo,
        limits: Limits,
        engine: Arc<PluginEngine>,
        flavor: FlavorId,
        pre: Pre,
        code: Arc<Charge>,
        label: &str,
        grants: Grants,
        embedder: Option<Arc<dyn Embedder>>,
        embed_account: Arc<Account>,
    ) -> Self {
        let shared = PluginShared::new(
            &info.name,
            label,
            grants,
            embedder,
            embed_account,
            MemoryPool::within(limits.memory_bytes, Some(engine.memory().clone())),
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
            code,
            pool: Mutex::new(Vec::new()),
            indexing: tokio::sync::Mutex::new(()),
            warming: AtomicU64::new(u64::MAX),
            indexed: AtomicU64::new(u64::MAX),
            index_failed: AtomicU64::new(u64::MAX),
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

    /// Host memory its compiled code takes (charged to
    /// `plugins.total_memory_mb`).
    pub fn code_bytes(&self) -> usize {
        self.code.bytes()
    }

    /// Log lines of this plugin dropped by the rate limits.
    pub fn log_dropped(&self) -> u64 {
        self.shared.log.dropped.load(Ordering::Relaxed)
    }

    pub fn is_disabled(&self) -> bool {
        self.stats.disabled.load(Ordering::Relaxed)
    }

    /// Disables the plugin by hand, saying `why` (its calls then fail over
    /// as when it keeps failing), or enables it again with `None`, its
    /// failures forgotten.
    pub fn set_disabled(&self, why: Option<&str>) {
        match why {
            Some(why) => {
                if let Ok(mut last) = self.stats.last_error.lock() {
                    *last = Some(why.to_string());
                }
                self.stats.disabled.store(true, Ordering::Relaxed);
            }
            None => {
                self.stats.consecutive_failures.store(0, Ordering::Relaxed);
                if let Ok(mut recent) = self.stats.recent.lock() {
                    recent.clear();
                }
                self.stats.disabled.store(false, Ordering::Relaxed);
            }
        }
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

    /// Requests and bytes of text its file sent to the embedding backend
    /// in the current window (all its instances and loads together).
    pub fn embed_spent(&self) -> (u64, u64) {
        let account = &self.shared.embed_account;
        account.ledger.spent(&account.file)
    }

    /// What its file may send to the embedding backend per window.
    pub fn embed_allowance(&self) -> EmbedAllowance {
        self.shared.embed_account.ledger.allowance()
    }

    /// The same compiled plugin with other grants, and none of this one's
    /// state (instances, statistics) but its embedding spend, which is its
    /// file's.
    pub fn regranted(&self, grants: Grants, embedder: Option<Arc<dyn Embedder>>) -> LoadedPlugin {
        LoadedPlugin::new(
            self.info.clone(),
            self.limits.clone(),
            self.engine.clone(),
            self.flavor,
            self.pre.clone(),
            self.code.clone(),
            self.label(),
            grants,
            embedder,
            self.shared.embed_account.clone(),
        )
    }
}

impl Probed {
    /// The plugin ready to be called, with what it is granted, its
    /// embedding spend in a ledger of its own (`plugins call`, tests).
    pub fn ready(self, grants: Grants, embedder: Option<Arc<dyn Embedder>>) -> LoadedPlugin {
        let ledger = EmbedLedger::new(EmbedAllowance::DEFAULT);
        self.ready_on(grants, embedder, &ledger)
    }

    /// The plugin ready to be called, its embedding spend charged to its
    /// file in `ledger` (the host's, which outlives every load).
    pub fn ready_on(
        self,
        grants: Grants,
        embedder: Option<Arc<dyn Embedder>>,
        ledger: &Arc<EmbedLedger>,
    ) -> LoadedPlugin {
        let label = format!("{}@{}", self.info.name, self.info.version);
        let account = Arc::new(Account {
            ledger: ledger.clone(),
            file: self.info.sha256.as_str().into(),
        });
        LoadedPlugin::new(
            self.info,
            self.limits,
            self.engine,
            self.flavor,
            self.pre,
            self.code,
            &label,
            grants,
            embedder,
            account,
        )
    }
}

/// The component compiled (or loaded from the cache), and its code
/// charged to the plugins' total.
fn compile_charged(
    engine: &PluginEngine,
    bytes: &[u8],
    sha256: &str,
) -> Result<(wasmtime::component::Component, FlavorId, Arc<Charge>), LoadRefused> {
    let (component, flavor) = engine.compile(bytes, sha256).map_err(|e| {
        if let Some(late) = e.downcast_ref::<CompileTimedOut>() {
            return LoadRefused::CompileTimedOut(late.to_string());
        }
        LoadRefused::NotAComponent(crate::untrusted::log_line(&format!("{e:#}"), 1000))
    })?;
    // Compiled code is host memory: charged to the plugins' total
    // before anything of the plugin runs.
    let total = engine.memory();
    let code = Arc::new(total.charge(code_bytes(&component)).ok_or_else(|| {
        LoadRefused::CodeTooLarge {
            code: mib(code_bytes(&component)),
            used: mib(total.used()),
            limit: mib(total.limit()),
        }
    })?);
    Ok((component, flavor, code))
}

/// The component linked, and typed as the world it exports.
fn pre_of(
    engine: &PluginEngine,
    flavor: FlavorId,
    component: &wasmtime::component::Component,
    kind: Kind,
) -> Result<Pre, LoadRefused> {
    let instance_pre = engine
        .flavor(flavor)
        .linker
        .instantiate_pre(component)
        .map_err(|e| LoadRefused::Link(crate::untrusted::log_line(&e.to_string(), 500)))?;
    let link_err = |e: wasmtime::Error| LoadRefused::LinkAs {
        kind: kind.as_str(),
        error: crate::untrusted::log_line(&e.to_string(), 500),
    };
    Ok(match kind {
        Kind::Retriever => {
            Pre::Retriever(retriever::RetrieverPre::new(instance_pre).map_err(link_err)?)
        }
        Kind::Scorer => Pre::Scorer(scorer::ScorerPre::new(instance_pre).map_err(link_err)?),
        Kind::Evolver => Pre::Evolver(evolver::EvolverPre::new(instance_pre).map_err(link_err)?),
        Kind::Skill => Pre::Skill(skill::SkillPre::new(instance_pre).map_err(link_err)?),
    })
}

/// Why reading a plugin's metadata refused it.
fn metadata_refused(
    e: CallError,
    probe: &LoadedPlugin,
    code: &Charge,
    total: &MemoryPool,
) -> LoadRefused {
    match e {
        // Its first instance did not fit beside the other plugins: the
        // same refusal as an instance measured too large below.
        CallError::TotalMemory(_) => LoadRefused::InstanceTooLarge {
            code: mib(code.bytes()),
            instance: format!("more than {}", mib(probe.shared.memory.peak())),
            used: mib(total.used()),
            limit: mib(total.limit()),
        },
        e => LoadRefused::MetadataFailed(e.to_string()),
    }
}

/// The name and version the metadata gives, checked (and that it declares
/// the world the component exports).
fn identity(
    meta: &crate::plugins::bindings::types::PluginMetadata,
    kind: Kind,
) -> Result<(String, Version), LoadRefused> {
    let declared = Kind::from(meta.kind);
    if declared != kind {
        return Err(LoadRefused::WrongWorld {
            declared: declared.as_str(),
            world: kind.as_str(),
        });
    }
    let name = meta.name.trim().to_string();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(LoadRefused::BadName(crate::untrusted::log_line(&name, 80)));
    }
    let version =
        Version::parse(meta.version.trim()).map_err(|e| LoadRefused::VersionNotSemver {
            version: crate::untrusted::log_line(&meta.version, 80),
            error: e.to_string(),
        })?;
    Ok((name, version))
}

/// `bytes` in MiB, for messages.
fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
