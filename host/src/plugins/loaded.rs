//! One loaded plugin: its compiled component, an `InstancePre` for its
//! world, a small pool of ready instances, and the rules of a call (a
//! deadline, the memory budget, and what a failure does).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use semver::Version;
use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::Component;

use super::bindings::{evolver, retriever, scorer, skill, types};
use super::engine::PluginEngine;
use super::sandbox::{EmbedPurpose, Embedder, Grants, KvCache, PluginState};

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
    pub memory_bytes: usize,
    pub timeout: Duration,
    /// Consecutive failures before the plugin is disabled until reloaded.
    pub max_failures: u32,
    /// Ready instances kept for reuse.
    pub pool_size: usize,
    /// Instances are replaced after this many calls (bounds slow leaks in
    /// guest runtimes).
    pub recycle_after: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            timeout: Duration::from_millis(50),
            max_failures: 3,
            pool_size: 4,
            recycle_after: 10_000,
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
    #[error("cannot instantiate: {0}")]
    Instantiate(String),
    #[error("wrong kind: this plugin is a {0}")]
    WrongKind(&'static str),
    /// The host's embedding backend failed during the call: not the
    /// plugin's fault, so not counted against it.
    #[error("the embedding backend failed: {0}")]
    Embed(String),
    /// The retriever is indexing the current library (at start, after a
    /// change): this turn goes to the next retriever, or without skills,
    /// instead of starting another index beside it.
    #[error("still indexing the skills")]
    Indexing,
}

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

#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    pub consecutive_failures: AtomicU32,
    pub disabled: AtomicBool,
    pub busy_nanos: AtomicU64,
    #[serde(skip)]
    pub last_error: Mutex<Option<String>>,
}

pub struct Loaded {
    pub info: PluginInfo,
    pub grants: Arc<Grants>,
    pub limits: Limits,
    pub stats: Stats,
    engine: Arc<PluginEngine>,
    pre: Pre,
    pool: Mutex<Vec<Instance>>,
    /// Held while an instance indexes the library: one index at a time,
    /// however many turns arrive meanwhile.
    indexing: Mutex<()>,
    embedder: Option<Arc<dyn Embedder>>,
    kv: Arc<Mutex<KvCache>>,
    label: Arc<str>,
}

/// The plugin kind a component implements, and the package version it was
/// built for, read from its exports (`metaclaw:plugin/scorer-api@0.1.0`).
pub fn detect(
    engine: &PluginEngine,
    component: &Component,
) -> Result<(Kind, Version, Vec<String>), String> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(&engine.engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let imports: Vec<String> = ty
        .imports(&engine.engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let mut found = None;
    for name in &exports {
        let Some(rest) = name.strip_prefix(&format!("{PACKAGE}/")) else {
            continue;
        };
        let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if let Some(kind) = Kind::ALL.into_iter().find(|k| k.api() == iface) {
            let version = Version::parse(version)
                .map_err(|_| format!("it exports {name}, whose package version is not semver"))?;
            found = Some((kind, version));
        }
    }
    let Some((kind, version)) = found else {
        return Err(format!(
            "not a metaclaw plugin: it exports none of {PACKAGE}/{{retriever,scorer,evolver,skill}}-api (exports: {})",
            if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.join(", ")
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
    /// Compiles (or loads from cache), checks and instantiates a plugin,
    /// and reads its metadata.
    pub fn load(
        engine: &Arc<PluginEngine>,
        path: PathBuf,
        bytes: &[u8],
        sha256: String,
        grants_for: &dyn Fn(&str) -> Arc<Grants>,
        embedder: Option<Arc<dyn Embedder>>,
        limits_for: &dyn Fn(Kind) -> Limits,
    ) -> Result<Self, String> {
        let component = engine
            .compile(bytes, &sha256)
            .map_err(|e| format!("not a valid component: {e:#}"))?;
        let (kind, package, imports) = detect(engine, &component)?;
        let instance_pre = engine
            .linker
            .instantiate_pre(&component)
            .map_err(|e| format!("cannot link: {e}"))?;
        let link_err = |e: wasmtime::Error| format!("cannot link as a {}: {e}", kind.as_str());
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
        // Metadata is read under the deny-all sandbox and default limits:
        // grants depend on the name, which is not known yet.
        let mut probe = Self {
            info: PluginInfo {
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
            },
            grants: Arc::new(Grants::default()),
            limits: limits_for(kind),
            stats: Stats::default(),
            engine: engine.clone(),
            pre,
            pool: Mutex::new(Vec::new()),
            indexing: Mutex::new(()),
            embedder,
            kv: Arc::new(Mutex::new(KvCache::default())),
            label: "(loading)".into(),
        };
        let meta = probe
            .metadata()
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
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "invalid plugin name {name:?} (letters, digits, - and _)"
            ));
        }
        let version = Version::parse(meta.version.trim())
            .map_err(|e| format!("version {:?} is not semver: {e}", meta.version))?;
        probe.label = format!("{name}@{version}").into();
        probe.grants = grants_for(&name);
        probe.info.name = name;
        probe.info.version = version;
        probe.info.description = meta.description;
        probe.info.asks = meta.capabilities;
        // The probe instance ran with the default grants: start afresh.
        probe.pool = Mutex::new(Vec::new());
        probe.stats = Stats::default();
        Ok(probe)
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn is_disabled(&self) -> bool {
        self.stats.disabled.load(Ordering::Relaxed)
    }

    fn instantiate(&self) -> Result<Instance, CallError> {
        let state = PluginState::new(
            self.info.name.as_str().into(),
            self.label.clone(),
            self.grants.clone(),
            self.embedder.clone(),
            self.kv.clone(),
            self.limits.memory_bytes,
        );
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(self.engine.ticks(self.limits.timeout));
        // At the deadline, time the plugin spent waiting on the host's
        // embedding backend is given back once; past that it is stopped.
        store.epoch_deadline_callback(|mut ctx| {
            let owed = std::mem::take(&mut ctx.data_mut().host_ticks);
            if owed > 0 {
                Ok(wasmtime::UpdateDeadline::Continue(owed))
            } else {
                Err(wasmtime::Trap::Interrupt.into())
            }
        });
        let _ticking = self.engine.running();
        let err = |e: wasmtime::Error| CallError::Instantiate(format!("{e:#}"));
        let bindings = match &self.pre {
            Pre::Retriever(p) => Bindings::Retriever(p.instantiate(&mut store).map_err(err)?),
            Pre::Scorer(p) => Bindings::Scorer(p.instantiate(&mut store).map_err(err)?),
            Pre::Evolver(p) => Bindings::Evolver(p.instantiate(&mut store).map_err(err)?),
            Pre::Skill(p) => Bindings::Skill(p.instantiate(&mut store).map_err(err)?),
        };
        Ok(Instance {
            store,
            bindings,
            calls: 0,
            indexed: None,
        })
    }

    /// Runs `f` on a pooled (or fresh) instance under the deadline and the
    /// memory budget. A trap ends only this call: the instance is dropped,
    /// the failure counted, and the plugin disabled after too many in a row.
    fn call<R>(
        &self,
        f: impl FnOnce(&mut Instance) -> Result<wasmtime::Result<R>, CallError>,
    ) -> Result<R, CallError> {
        if self.is_disabled() {
            return Err(CallError::Disabled(self.limits.max_failures));
        }
        let started = Instant::now();
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        let mut instance = match pooled {
            Some(i) => i,
            None => match self.instantiate() {
                Ok(i) => i,
                Err(e) => return Err(self.failed(e)),
            },
        };
        instance
            .store
            .set_epoch_deadline(self.engine.ticks(self.limits.timeout));
        let state = instance.store.data_mut();
        state.log_budget = super::sandbox::LOG_LINES_PER_CALL;
        state.host_ticks = 0;
        state.embed_error = None;
        let outcome = {
            let _ticking = self.engine.running();
            f(&mut instance)
        };
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.stats
            .busy_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match outcome {
            Ok(Ok(value)) => {
                self.stats.consecutive_failures.store(0, Ordering::Relaxed);
                instance.calls += 1;
                if instance.calls < self.limits.recycle_after
                    && let Ok(mut pool) = self.pool.lock()
                    && pool.len() < self.limits.pool_size
                {
                    pool.push(instance);
                }
                Ok(value)
            }
            Ok(Err(trap)) => {
                let error = self.trapped(&instance, &trap, self.limits.timeout);
                // A trapped instance is poisoned: drop it.
                drop(instance);
                Err(self.failed(error))
            }
            // What the call reported itself (still indexing, the embedding
            // backend failed, wrong kind) is not the plugin's failure, so it
            // is not counted. The instance is dropped, not pooled: an
            // unindexed one must not take the place of those `warm` indexed.
            Err(e) => Err(e),
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
        CallError::Trap(msg)
    }

    /// The most linear memory one of the pooled instances holds.
    pub fn memory_in_use(&self) -> usize {
        self.pool
            .lock()
            .map(|p| {
                p.iter()
                    .map(|i| i.store.data().limiter.used())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    }

    fn failed(&self, error: CallError) -> CallError {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        let n = self
            .stats
            .consecutive_failures
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        tracing::warn!(plugin = %self.label, "plugin call failed: {error}");
        if let Ok(mut last) = self.stats.last_error.lock() {
            *last = Some(error.to_string());
        }
        if n >= self.limits.max_failures && !self.stats.disabled.swap(true, Ordering::Relaxed) {
            tracing::error!(plugin = %self.label, "disabled after {n} consecutive failures; replace the file or restart to retry");
        }
        error
    }

    pub fn metadata(&self) -> Result<types::PluginMetadata, CallError> {
        self.call(
            |Instance {
                 store, bindings, ..
             }| {
                Ok(match bindings {
                    Bindings::Retriever(b) => b.metaclaw_plugin_plugin().call_metadata(store),
                    Bindings::Scorer(b) => b.metaclaw_plugin_plugin().call_metadata(store),
                    Bindings::Evolver(b) => b.metaclaw_plugin_plugin().call_metadata(store),
                    Bindings::Skill(b) => b.metaclaw_plugin_plugin().call_metadata(store),
                })
            },
        )
    }

    pub fn score(&self, turn: &types::FinishedTurn) -> Result<Option<types::Reward>, CallError> {
        let reward = self.call(
            |Instance {
                 store, bindings, ..
             }| match bindings {
                Bindings::Scorer(b) => Ok(b.metaclaw_plugin_scorer_api().call_score(store, turn)),
                _ => Err(CallError::WrongKind(self.info.kind.as_str())),
            },
        )?;
        // Whatever the guest returns, what the host keeps is bounded.
        Ok(reward.map(|r| types::Reward {
            value: if r.value.is_finite() {
                r.value.clamp(-1.0, 1.0)
            } else {
                0.0
            },
            label: clip(&r.label, 64),
            rationale: clip(&r.rationale, 1000),
        }))
    }

    /// Retrieves the `k` best skills. The instance the call gets indexes
    /// `skills` first if it has not indexed `generation` yet (under
    /// `index_timeout` rather than the retrieval deadline).
    pub fn retrieve(
        &self,
        skills: &[types::Skill],
        generation: u64,
        context: &types::TurnContext,
        k: u32,
        index_timeout: Duration,
    ) -> Result<Vec<types::ScoredSkill>, CallError> {
        let timeout = self.engine.ticks(self.limits.timeout);
        let index_ticks = self.engine.ticks(index_timeout);
        let mut embed_failed = None;
        let mut ranked = self.call(|instance| {
            let Instance {
                store,
                bindings,
                indexed,
                ..
            } = instance;
            let Bindings::Retriever(b) = bindings else {
                return Err(CallError::WrongKind(self.info.kind.as_str()));
            };
            if *indexed != Some(generation) {
                // Another turn (or `warm`) is indexing: don't pile up a
                // second index of the same library beside it.
                let Ok(_indexing) = self.indexing.try_lock() else {
                    return Err(CallError::Indexing);
                };
                store.set_epoch_deadline(index_ticks);
                store.data_mut().embed_purpose = EmbedPurpose::Index;
                let outcome =
                    b.metaclaw_plugin_retriever_api()
                        .call_index(&mut *store, skills, generation);
                let state = store.data_mut();
                state.embed_purpose = EmbedPurpose::Query;
                state.host_ticks = 0;
                match outcome {
                    Ok(Ok(())) => *indexed = Some(generation),
                    Ok(Err(_)) if state.embed_error.is_some() => {
                        let error = state.embed_error.take().unwrap_or_default();
                        return Err(CallError::Embed(error));
                    }
                    Ok(Err(message)) => {
                        return Err(CallError::Trap(format!("index() refused: {message}")));
                    }
                    Err(trap) => return Ok(Err(trap)),
                }
                store.set_epoch_deadline(timeout);
            }
            let ranked = b
                .metaclaw_plugin_retriever_api()
                .call_retrieve(&mut *store, context, k);
            embed_failed = store.data_mut().embed_error.take();
            Ok(ranked)
        })?;
        // A ranking made without the query's embedding is no ranking: let
        // the next retriever answer.
        if let Some(error) = embed_failed {
            return Err(CallError::Embed(error));
        }
        ranked.truncate(k as usize);
        Ok(ranked)
    }

    /// Indexes `skills` on every pooled instance (creating one if the pool
    /// is empty), off the request path, so turns find warm indexes.
    pub fn warm(
        &self,
        skills: &[types::Skill],
        generation: u64,
        index_timeout: Duration,
    ) -> Result<(), CallError> {
        let _indexing = self
            .indexing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut held = Vec::new();
        while let Some(instance) = self.pool.lock().ok().and_then(|mut p| p.pop()) {
            held.push(instance);
        }
        if held.is_empty() {
            held.push(self.instantiate().map_err(|e| self.failed(e))?);
        }
        for mut instance in held {
            if instance.indexed != Some(generation) {
                let Bindings::Retriever(b) = &instance.bindings else {
                    return Err(CallError::WrongKind(self.info.kind.as_str()));
                };
                instance
                    .store
                    .set_epoch_deadline(self.engine.ticks(index_timeout));
                let state = instance.store.data_mut();
                state.embed_purpose = EmbedPurpose::Index;
                state.embed_error = None;
                let _ticking = self.engine.running();
                let outcome = b.metaclaw_plugin_retriever_api().call_index(
                    &mut instance.store,
                    skills,
                    generation,
                );
                let state = instance.store.data_mut();
                state.embed_purpose = EmbedPurpose::Query;
                state.host_ticks = 0;
                let embed_failed = state.embed_error.take();
                match outcome {
                    Ok(Ok(())) => instance.indexed = Some(generation),
                    // The host's embedding backend failed, not the plugin.
                    Ok(Err(_)) if embed_failed.is_some() => {
                        return Err(CallError::Embed(embed_failed.unwrap_or_default()));
                    }
                    Ok(Err(message)) => {
                        return Err(
                            self.failed(CallError::Trap(format!("index() refused: {message}")))
                        );
                    }
                    // A trapped instance is dropped.
                    Err(trap) => {
                        let error = match self.trapped(&instance, &trap, index_timeout) {
                            CallError::Trap(message) => {
                                CallError::Trap(format!("index() trapped: {message}"))
                            }
                            other => other,
                        };
                        return Err(self.failed(error));
                    }
                }
            }
            if let Ok(mut pool) = self.pool.lock()
                && pool.len() < self.limits.pool_size
            {
                pool.push(instance);
            }
        }
        Ok(())
    }

    pub fn process(
        &self,
        drafts: &[types::SkillDraft],
        library: &[types::Skill],
    ) -> Result<Vec<types::DraftOutcome>, CallError> {
        self.call(
            |Instance {
                 store, bindings, ..
             }| match bindings {
                Bindings::Evolver(b) => Ok(b
                    .metaclaw_plugin_evolver_api()
                    .call_process(store, drafts, library)),
                _ => Err(CallError::WrongKind(self.info.kind.as_str())),
            },
        )
    }

    pub fn applies(&self, context: &types::TurnContext) -> Result<f32, CallError> {
        let score = self.call(
            |Instance {
                 store, bindings, ..
             }| match bindings {
                Bindings::Skill(b) => {
                    Ok(b.metaclaw_plugin_skill_api().call_applies(store, context))
                }
                _ => Err(CallError::WrongKind(self.info.kind.as_str())),
            },
        )?;
        Ok(if score.is_finite() {
            score.clamp(0.0, 1.0)
        } else {
            0.0
        })
    }

    pub fn render(&self, context: &types::TurnContext) -> Result<String, CallError> {
        let text = self.call(
            |Instance {
                 store, bindings, ..
             }| match bindings {
                Bindings::Skill(b) => Ok(b.metaclaw_plugin_skill_api().call_render(store, context)),
                _ => Err(CallError::WrongKind(self.info.kind.as_str())),
            },
        )?;
        Ok(clip(&text, 16 << 10))
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
