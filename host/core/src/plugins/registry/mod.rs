//! Which plugins are loaded, and which run in each role.
//!
//! Plugins come from two places: the first-party ones compiled into
//! metaclaw ([`super::embedded`]; or a folder of them, `plugins.builtin_dir`)
//! and the user's drop-in folder. The folders are scanned at start and then
//! watched: a new, replaced or removed file is picked up without a restart
//! (once it has stopped changing); a file that did not change is not read
//! again. A file that fails to load is reported and skipped; it
//! never takes the host down.
//!
//! Trust is bound to content, and decided before a plugin's code runs as
//! far as it can be: with a lock file, a file whose sha256 the lock does not
//! list is refused before it is compiled. Then, from the plugin's metadata
//! (read under the deny-all sandbox, within `plugins.timeouts.load`): a
//! drop-in may not take a first-party name unless that file is named
//! explicitly; two files claiming one name are both refused; grants attach
//! to file hashes and to the one file the lock pins under a name
//! ([`super::trust`]): a lock pinning several files under a name granted by
//! name loads none of them.
//!
//! The parts: `settings` (what the host takes from the config) and `scan`
//! (discovery, trust and loading); here, the registry a scan makes and the
//! host that keeps the current one and watches the folders.

mod scan;
mod settings;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use semver::Version;
use serde::Serialize;

use super::embedded::{self, EmbeddedPlugin};
use super::engine::PluginEngine;
use super::files::Stamp;
use super::loaded::{Kind, LoadedPlugin, Source};
use super::sandbox::{EmbedLedger, Embedder, MemoryPool};

pub use crate::config::PluginSpec;
use scan::{FileRecord, report_changes};
pub use settings::{BuiltinSource, HostSettings};

/// A file that could not be loaded (or something worth knowing about one),
/// and why.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Problem {
    pub path: PathBuf,
    pub error: String,
}

/// One scan's result.
#[derive(Default)]
pub struct Registry {
    pub plugins: Vec<Arc<LoadedPlugin>>,
    pub problems: Vec<Problem>,
    /// LoadedPlugin, but not quite as configured (a grant that does not apply, a
    /// first-party plugin replaced).
    pub notices: Vec<Problem>,
    pub locked: bool,
    /// Why a name granted by name is refused to every file: the lock pins
    /// more than one file under it (`status` shows these).
    pub pin_conflicts: Vec<String>,
    pub generation: u64,
    /// Only the first-party plugins: the first scan published them before
    /// it looked at the drop-ins, which it is still loading.
    first_party_only: bool,
    /// The first-party names: the static list and those of the first-party
    /// folder's files. A drop-in may not take one unless it is named.
    pub reserved: BTreeSet<String>,
    /// The plugins' process-wide memory budget (`plugins.total_memory_mb`).
    pub total_memory: Option<Arc<MemoryPool>>,
    files: HashMap<PathBuf, FileRecord>,
    /// What was scanned, to notice changes.
    fingerprint: Vec<(PathBuf, Option<Stamp>)>,
}

impl Registry {
    /// The first scan has not finished: nothing scanned yet, or only the
    /// first-party plugins. What it lists is not yet all there will be.
    pub fn loading(&self) -> bool {
        self.generation == 0 || self.first_party_only
    }

    /// The highest version of `name` that `req` allows, among `kind`.
    pub fn best(
        &self,
        kind: Kind,
        spec: &PluginSpec,
        include_disabled: bool,
    ) -> Option<Arc<LoadedPlugin>> {
        self.plugins
            .iter()
            .filter(|p| {
                p.info.kind == kind && p.info.name == spec.name && spec.req.matches(&p.info.version)
            })
            .filter(|p| include_disabled || !p.is_disabled())
            .max_by(|a, b| a.info.version.cmp(&b.info.version))
            .cloned()
    }

    /// The highest version of every plugin of `kind`, by name.
    fn latest_of(&self, kind: Kind) -> Vec<Arc<LoadedPlugin>> {
        let mut by_name: BTreeMap<&str, &Arc<LoadedPlugin>> = BTreeMap::new();
        for p in self
            .plugins
            .iter()
            .filter(|p| p.info.kind == kind && !p.is_disabled())
        {
            let better = by_name
                .get(p.info.name.as_str())
                .is_none_or(|q| p.info.version > q.info.version);
            if better {
                by_name.insert(&p.info.name, p);
            }
        }
        by_name.into_values().cloned().collect()
    }

    pub fn find(&self, name: &str, version: Option<&Version>) -> Option<Arc<LoadedPlugin>> {
        self.plugins
            .iter()
            .filter(|p| p.info.name == name && version.is_none_or(|v| *v == p.info.version))
            .max_by(|a, b| a.info.version.cmp(&b.info.version))
            .cloned()
    }
}

pub struct PluginHost {
    pub engine: Arc<PluginEngine>,
    pub settings: HostSettings,
    embedder: Option<Arc<dyn Embedder>>,
    /// Each plugin file's embedding spend over time: here, so that no
    /// instance, re-index or reload of the file starts it afresh.
    embed_ledger: Arc<EmbedLedger>,
    current: RwLock<Arc<Registry>>,
    /// One scan at a time.
    scanning: Mutex<()>,
    /// Told after each reload (retrievers then index the skill library, in
    /// the background).
    on_reload: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

impl PluginHost {
    pub fn new(
        settings: HostSettings,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> anyhow::Result<Arc<Self>> {
        let engine = PluginEngine::new(settings.engine_options())?;
        Ok(Arc::new(Self {
            engine,
            embed_ledger: EmbedLedger::new(settings.embed_allowance),
            settings,
            embedder,
            current: RwLock::new(Arc::new(Registry::default())),
            scanning: Mutex::new(()),
            on_reload: Mutex::new(None),
        }))
    }

    /// Compiles the embedded first-party plugins into the cache where it
    /// does not hold them yet (the first start after an install or an
    /// upgrade), calling `progress(done, total, name)` before each; the
    /// daemon then loads them from the cache. Returns how many it compiled.
    pub fn precompile_embedded(
        settings: &HostSettings,
        progress: &mut dyn FnMut(usize, usize, &str),
    ) -> anyhow::Result<usize> {
        if settings.builtin != BuiltinSource::Embedded {
            return Ok(0);
        }
        let engine = PluginEngine::new(settings.engine_options())?;
        let Some(cache) = engine.cache() else {
            return Ok(0);
        };
        let missing: Vec<&EmbeddedPlugin> = embedded::EMBEDDED
            .iter()
            .filter(|p| {
                let limit = super::engine::artifact_limit(p.bytes.len());
                cache.verify(p.sha256, &engine.compats(), limit)
                    != super::cache::ArtifactState::Valid
            })
            .collect();
        for (i, p) in missing.iter().enumerate() {
            progress(i, missing.len(), p.name);
            // A failure is the daemon's to report, with the plugin's name.
            let _ = engine.compile(p.bytes, p.sha256);
        }
        Ok(missing.len())
    }

    pub fn current(&self) -> Arc<Registry> {
        self.current.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// Scans the folders now and swaps in the result. The first scan
    /// publishes the first-party plugins before it looks at the drop-ins,
    /// so nothing a drop-in does at load delays them.
    pub fn reload(&self) -> Arc<Registry> {
        let Ok(_one_at_a_time) = self.scanning.lock() else {
            return self.current();
        };
        let previous = self.current();
        if previous.generation == 0 && self.settings.builtin != BuiltinSource::Off {
            let first = Arc::new(self.scan(&previous, Some(Source::Builtin)));
            self.publish(&previous, first.clone());
            let next = Arc::new(self.scan(&first, None));
            self.publish(&first, next.clone());
            return next;
        }
        let next = Arc::new(self.scan(&previous, None));
        self.publish(&previous, next.clone());
        next
    }

    fn publish(&self, previous: &Registry, next: Arc<Registry>) {
        report_changes(previous, &next);
        if let Ok(mut current) = self.current.write() {
            *current = next.clone();
        }
        if let (Some(max_age), Some(cache)) = (self.settings.evict_after, self.engine.cache()) {
            let keep: HashSet<String> = next.files.values().map(|f| f.sha256.clone()).collect();
            let removed = cache.evict(&keep, &self.engine.compats(), max_age);
            if removed > 0 {
                tracing::info!("removed {removed} unused compiled plugin file(s) from the cache");
            }
        }
        if let Ok(hook) = self.on_reload.lock()
            && let Some(hook) = hook.as_ref()
        {
            hook();
        }
    }

    /// Runs `hook` after every reload.
    pub fn on_reload(&self, hook: impl Fn() + Send + Sync + 'static) {
        if let Ok(mut slot) = self.on_reload.lock() {
            *slot = Some(Box::new(hook));
        }
    }

    /// Watches the folders (and the lock file) from a background thread.
    /// A change is loaded once the files have stopped changing for one
    /// interval, so a plugin being copied in is not read half-written.
    /// The thread belongs to `work` and ends when it stops.
    pub fn watch(self: &Arc<Self>, work: &crate::work::Work) {
        let host = Arc::downgrade(self);
        let interval = self.settings.watch_interval;
        let sleeper = work.clone();
        let spawned = work.thread("metaclaw-plugins", move || {
            let mut pending: Option<Vec<(PathBuf, Option<Stamp>)>> = None;
            while sleeper.nap(interval) {
                let Some(host) = host.upgrade() else { return };
                let now = host.fingerprint();
                if now == host.current().fingerprint {
                    pending = None;
                    continue;
                }
                if pending.as_ref() == Some(&now) {
                    host.reload();
                    pending = None;
                } else {
                    pending = Some(now);
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!("cannot watch the plugin folders ({e}); restart to pick up changes");
        }
    }

    /// The scorers that run on finished turns.
    pub fn scorers(&self) -> Vec<Arc<LoadedPlugin>> {
        self.role(Kind::Scorer, self.settings.scorers.as_deref())
    }

    /// The evolver post-processors, in order.
    pub fn evolvers(&self) -> Vec<Arc<LoadedPlugin>> {
        self.role(Kind::Evolver, self.settings.evolvers.as_deref())
    }

    /// Executable skills.
    pub fn skills(&self) -> Vec<Arc<LoadedPlugin>> {
        self.role(Kind::Skill, self.settings.skills.as_deref())
    }

    /// Retrievers in the order to try them (the next one is the fallback).
    pub fn retrievers(&self) -> Vec<Arc<LoadedPlugin>> {
        self.role(Kind::Retriever, Some(&self.settings.retriever))
    }

    fn role(&self, kind: Kind, specs: Option<&[PluginSpec]>) -> Vec<Arc<LoadedPlugin>> {
        let registry = self.current();
        match specs {
            None => registry.latest_of(kind),
            Some(specs) => specs
                .iter()
                .filter_map(|s| registry.best(kind, s, false))
                .collect(),
        }
    }
}
