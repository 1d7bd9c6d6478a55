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
//! to file hashes and lock entries ([`super::trust`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use semver::Version;
use serde::Serialize;

use super::cache::CacheOptions;
use super::embedded::{self, EmbeddedPlugin};
use super::engine::{EngineOptions, PluginEngine};
use super::files::{self, Stamp};
use super::loaded::{Kind, Limits, Loaded, Probed, Source};
use super::lock::LockFile;
use super::sandbox::{Embedder, Grants};
use super::trust::{FIRST_PARTY, Trust};
use crate::digest::sha256_hex;

pub use crate::config::PluginSpec;

/// Where the first-party plugins come from.
#[derive(Debug, Clone, PartialEq)]
pub enum BuiltinSource {
    /// `plugins.builtin: false`: none (their names stay reserved).
    Off,
    /// Compiled into the binary: the default.
    Embedded,
    /// `plugins.builtin_dir`: a folder of first-party builds instead (for
    /// developing them). Its files are files: the lock checks them.
    Folder(PathBuf),
}

/// Everything the host needs to know from the config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub builtin: BuiltinSource,
    pub user_dir: PathBuf,
    pub lock_path: PathBuf,
    pub cache: Option<CacheOptions>,
    /// Compiled artifacts no plugin used for this long are deleted (the
    /// daemon only: a one-off CLI command sees only its own plugins).
    pub evict_after: Option<Duration>,
    pub trust: Trust,
    pub memory_bytes: usize,
    pub max_failures: u32,
    pub pool_size: usize,
    pub timeouts: BTreeMap<Kind, Duration>,
    pub index_timeout: Duration,
    pub load_timeout: Duration,
    pub max_file_bytes: u64,
    pub max_copy_bytes: usize,
    pub threads: usize,
    pub retriever: Vec<PluginSpec>,
    pub scorers: Option<Vec<PluginSpec>>,
    pub evolvers: Option<Vec<PluginSpec>>,
    pub skills: Option<Vec<PluginSpec>>,
    pub watch_interval: Duration,
    /// `metaclaw plugins lock`: the user vouches for the folder as it is,
    /// so the lock is not checked and files sharing a name are kept (and
    /// reported); which drop-ins may take a first-party name is in `trust`
    /// (`--override NAME`).
    pub pinning: bool,
}

impl Settings {
    pub fn from_config(config: &crate::config::Config, home: &crate::home::Home) -> Self {
        let p = &config.plugins;
        let builtin = match (&p.builtin, p.builtin_dir.as_deref()) {
            (false, _) => BuiltinSource::Off,
            (true, Some(dir)) => BuiltinSource::Folder(crate::home::expand_home(dir)),
            (true, None) => BuiltinSource::Embedded,
        };
        let mut timeouts = BTreeMap::new();
        timeouts.insert(Kind::Retriever, p.timeouts.retriever.get());
        timeouts.insert(Kind::Scorer, p.timeouts.scorer.get());
        timeouts.insert(Kind::Evolver, p.timeouts.evolver.get());
        timeouts.insert(Kind::Skill, p.timeouts.skill.get());
        let trust = Trust::new(&p.grants, &p.overrides, config.skills.embedding_retrieval());
        Self {
            builtin,
            user_dir: p
                .dir
                .as_deref()
                .map(crate::home::expand_home)
                .unwrap_or_else(|| home.plugins_dir()),
            lock_path: home.plugin_lock_file(),
            cache: Some(CacheOptions {
                dir: home.cache_dir().join("plugins"),
                key_file: home.plugin_cache_key_file(),
            }),
            evict_after: None,
            trust,
            memory_bytes: (p.memory_mb as usize) << 20,
            max_failures: p.max_failures.max(1),
            pool_size: p.pool_size.max(1),
            timeouts,
            index_timeout: p.timeouts.index.get(),
            load_timeout: p.timeouts.load.get(),
            max_file_bytes: p.max_file_mb << 20,
            max_copy_bytes: (p.max_call_mb as usize) << 20,
            threads: p.threads,
            retriever: if p.retriever.is_empty() {
                if config.skills.embedding_retrieval() {
                    vec![PluginSpec::any("embedding"), PluginSpec::any("bm25")]
                } else {
                    vec![PluginSpec::any("bm25")]
                }
            } else {
                p.retriever.clone()
            },
            scorers: p.scorers.clone(),
            evolvers: p.evolvers.clone(),
            skills: p.skills.clone(),
            watch_interval: p.watch_interval.get(),
            pinning: false,
        }
    }

    pub fn limits_for(&self, kind: Kind) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes,
            timeout: self
                .timeouts
                .get(&kind)
                .copied()
                .unwrap_or(Duration::from_millis(50)),
            index_timeout: self.index_timeout,
            load_timeout: self.load_timeout,
            max_failures: self.max_failures,
            pool_size: self.pool_size,
            max_copy_bytes: self.max_copy_bytes,
            ..Limits::default()
        }
    }

    /// The folders scanned, first-party first.
    pub fn dirs(&self) -> Vec<(Source, PathBuf)> {
        let mut out = Vec::new();
        if let BuiltinSource::Folder(b) = &self.builtin {
            out.push((Source::Builtin, b.clone()));
        }
        out.push((Source::User, self.user_dir.clone()));
        out
    }

    fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            cache: self.cache.clone(),
            threads: self.threads,
        }
    }
}

/// A file that could not be loaded (or something worth knowing about one),
/// and why.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Problem {
    pub path: PathBuf,
    pub error: String,
}

/// What the last scan learnt of one file, kept so that an unchanged file is
/// not read, compiled or run again.
#[derive(Clone)]
struct FileRecord {
    stamp: Stamp,
    sha256: String,
    probe: ProbeState,
}

#[derive(Clone)]
enum ProbeState {
    /// Compiled and probed (loaded, or refused for what it is).
    Ready(Arc<Loaded>),
    Failed(String),
    /// Refused before compiling (the lock does not list it).
    NotYet,
}

/// One scan's result.
#[derive(Default)]
pub struct Registry {
    pub plugins: Vec<Arc<Loaded>>,
    pub problems: Vec<Problem>,
    /// Loaded, but not quite as configured (a grant that does not apply, a
    /// first-party plugin replaced).
    pub notices: Vec<Problem>,
    pub locked: bool,
    pub generation: u64,
    /// The first-party names: the static list and those of the first-party
    /// folder's files. A drop-in may not take one unless it is named.
    pub reserved: BTreeSet<String>,
    files: HashMap<PathBuf, FileRecord>,
    /// What was scanned, to notice changes.
    fingerprint: Vec<(PathBuf, Option<Stamp>)>,
}

impl Registry {
    /// The highest version of `name` that `req` allows, among `kind`.
    pub fn best(
        &self,
        kind: Kind,
        spec: &PluginSpec,
        include_disabled: bool,
    ) -> Option<Arc<Loaded>> {
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
    fn latest_of(&self, kind: Kind) -> Vec<Arc<Loaded>> {
        let mut by_name: BTreeMap<&str, &Arc<Loaded>> = BTreeMap::new();
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

    pub fn find(&self, name: &str, version: Option<&Version>) -> Option<Arc<Loaded>> {
        self.plugins
            .iter()
            .filter(|p| p.info.name == name && version.is_none_or(|v| *v == p.info.version))
            .max_by(|a, b| a.info.version.cmp(&b.info.version))
            .cloned()
    }
}

pub struct PluginHost {
    pub engine: Arc<PluginEngine>,
    pub settings: Settings,
    embedder: Option<Arc<dyn Embedder>>,
    current: RwLock<Arc<Registry>>,
    /// One scan at a time.
    scanning: Mutex<()>,
    /// Told after each reload (retrievers then index the skill library, in
    /// the background).
    on_reload: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

/// Files probed at once (compiling is itself parallel; this bounds how
/// long slow `metadata()` calls can hold a scan to about one deadline).
const PROBES_AT_ONCE: usize = 4;

/// A scan's view of one loadable file.
struct Candidate {
    source: Source,
    path: PathBuf,
    record: FileRecord,
    /// The file's bytes when this scan read them (to hash a new or changed
    /// file): the probe uses them rather than reading it again.
    bytes: Option<Cow<'static, [u8]>>,
    /// Compiled into the binary: not a file, so not the lock's to check.
    embedded: Option<&'static EmbeddedPlugin>,
}

impl PluginHost {
    pub fn new(
        settings: Settings,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> anyhow::Result<Arc<Self>> {
        let engine = PluginEngine::new(settings.engine_options())?;
        Ok(Arc::new(Self {
            engine,
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
        settings: &Settings,
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

    /// The `.wasm` entries of the folders (`only`: of one source), checked
    /// without reading them.
    fn entries(&self, only: Option<Source>) -> Vec<(Source, files::Entry)> {
        self.settings
            .dirs()
            .into_iter()
            .filter(|(source, _)| only.is_none_or(|o| o == *source))
            .flat_map(|(source, dir)| {
                files::list(&dir, self.settings.max_file_bytes)
                    .into_iter()
                    .map(move |e| (source, e))
            })
            .collect()
    }

    fn scan(&self, previous: &Registry, only: Option<Source>) -> Registry {
        // Taken before anything is read: a change made during the scan then
        // differs from it, and the watcher scans again.
        let entries = self.entries(only);
        let mut registry = Registry {
            generation: previous.generation + 1,
            fingerprint: self.fingerprint_of(&entries),
            ..Registry::default()
        };
        let lock = match LockFile::read(&self.settings.lock_path) {
            Ok(lock) => lock,
            Err(e) => {
                // A lock we cannot read must not become "no lock".
                registry.problems.push(Problem {
                    path: self.settings.lock_path.clone(),
                    error: format!("{e:#}; no plugin is loaded until it is fixed or removed"),
                });
                return registry;
            }
        };
        registry.locked = lock.is_some();
        let lock = lock.as_ref();

        // Files: refused unread, reused unchanged, or read and hashed.
        let mut candidates = Vec::new();
        for (source, entry) in entries {
            let stamp = match entry.stamp {
                Ok(stamp) => stamp,
                Err(error) => {
                    registry.problems.push(Problem {
                        path: entry.path,
                        error,
                    });
                    continue;
                }
            };
            let (record, bytes) = match previous.files.get(&entry.path) {
                Some(known) if known.stamp == stamp => (known.clone(), None),
                _ => match files::read(&entry.path, &stamp, self.settings.max_file_bytes) {
                    Ok(bytes) => (
                        FileRecord {
                            stamp,
                            sha256: sha256_hex(&bytes),
                            probe: ProbeState::NotYet,
                        },
                        Some(Cow::Owned(bytes)),
                    ),
                    Err(error) => {
                        registry.problems.push(Problem {
                            path: entry.path,
                            error,
                        });
                        continue;
                    }
                },
            };
            candidates.push(Candidate {
                source,
                path: entry.path,
                record,
                bytes,
                embedded: None,
            });
        }
        if self.settings.builtin == BuiltinSource::Embedded
            && only.is_none_or(|o| o == Source::Builtin)
        {
            candidates.extend(embedded::EMBEDDED.iter().map(|p| {
                let path = p.path();
                let (record, bytes) = match previous.files.get(&path) {
                    Some(known) => (known.clone(), None),
                    None => (
                        FileRecord {
                            stamp: Stamp::embedded(p.bytes.len() as u64),
                            sha256: p.sha256.to_string(),
                            probe: ProbeState::NotYet,
                        },
                        Some(Cow::Borrowed(p.bytes)),
                    ),
                };
                Candidate {
                    source: Source::Builtin,
                    path,
                    record,
                    bytes,
                    embedded: Some(p),
                }
            }));
        }

        // The lock, before any code is compiled or run.
        let mut admitted = Vec::new();
        for c in candidates {
            if let Some(lock) = lock
                && c.embedded.is_none()
                && lock.by_hash(&c.record.sha256).is_none()
                && !self.settings.pinning
            {
                registry.problems.push(Problem {
                    error: unpinned(lock, &c.path, &c.record.sha256),
                    path: c.path.clone(),
                });
                registry.files.insert(c.path, c.record);
                continue;
            }
            admitted.push(c);
        }

        // Compile and read metadata, a few files at once.
        self.probe_all(&mut admitted);

        // What each one is, and whether it may be what it says.
        registry.reserved = FIRST_PARTY
            .iter()
            .map(|s| s.to_string())
            .chain(
                admitted
                    .iter()
                    .filter(|c| c.source == Source::Builtin)
                    .filter_map(|c| match &c.record.probe {
                        ProbeState::Ready(p) => Some(p.info.name.clone()),
                        _ => None,
                    }),
            )
            .collect();
        let mut accepted: Vec<Arc<Loaded>> = Vec::new();
        for c in admitted {
            registry.files.insert(c.path.clone(), c.record.clone());
            let plugin = match &c.record.probe {
                ProbeState::Ready(p) => p.clone(),
                ProbeState::Failed(error) => {
                    registry.problems.push(Problem {
                        path: c.path,
                        error: error.clone(),
                    });
                    continue;
                }
                ProbeState::NotYet => continue,
            };
            if let Err(error) = self.admit(&plugin, lock, &registry.reserved) {
                registry.problems.push(Problem {
                    path: c.path,
                    error,
                });
                continue;
            }
            accepted.push(plugin);
        }

        // One name, one file — unless the deployment said otherwise.
        let mut by_name: BTreeMap<String, Vec<Arc<Loaded>>> = BTreeMap::new();
        for p in accepted {
            by_name.entry(p.info.name.clone()).or_default().push(p);
        }
        for (name, mut claimants) in by_name {
            if claimants.len() > 1 {
                let trust = &self.settings.trust;
                let replacing = claimants.iter().any(|p| trust.overrides(&p.info, lock));
                if replacing {
                    claimants.retain(|p| {
                        let replaced = p.info.source == Source::Builtin;
                        if replaced {
                            registry.notices.push(Problem {
                                path: p.info.path.clone(),
                                error: format!(
                                    "first-party {} is replaced by a drop-in the deployment named (plugins.overrides or metaclaw.lock)",
                                    p.label()
                                ),
                            });
                        }
                        !replaced
                    });
                }
            }
            if claimants.len() > 1 {
                let all_pinned = lock.is_some_and(|l| {
                    claimants.iter().all(|p| {
                        l.by_hash(&p.info.sha256)
                            .is_some_and(|e| e.name == p.info.name)
                    })
                });
                let listed = claimants
                    .iter()
                    .map(|p| format!("{} ({})", p.info.path.display(), p.info.version))
                    .collect::<Vec<_>>()
                    .join(", ");
                if self.settings.pinning || all_pinned {
                    registry.notices.push(Problem {
                        path: claimants[0].info.path.clone(),
                        error: format!(
                            "{} files claim the name {name:?}: {listed}; all are pinned",
                            claimants.len()
                        ),
                    });
                } else {
                    for p in &claimants {
                        registry.problems.push(Problem {
                            path: p.info.path.clone(),
                            error: format!(
                                "refused: {} files claim the name {name:?} ({listed}); none is loaded until all but one are removed (or `metaclaw plugins lock` pins them all)",
                                claimants.len()
                            ),
                        });
                    }
                    continue;
                }
            }
            for p in claimants {
                let plugin = self.granted(p, lock, &mut registry);
                registry.plugins.push(plugin);
            }
        }
        registry
            .plugins
            .sort_by(|a, b| a.info.path.cmp(&b.info.path));
        registry
    }

    /// Compiles and probes every candidate not probed before, a few at a
    /// time, each on a thread of its own (a probe blocks on its deadline).
    fn probe_all(&self, candidates: &mut [Candidate]) {
        let mut todo: Vec<&mut Candidate> = candidates
            .iter_mut()
            .filter(|c| matches!(c.record.probe, ProbeState::NotYet))
            .collect();
        for batch in todo.chunks_mut(PROBES_AT_ONCE) {
            std::thread::scope(|scope| {
                for c in batch.iter_mut() {
                    scope.spawn(|| {
                        c.record.probe = self.probe_one(c);
                    });
                }
            });
        }
    }

    fn probe_one(&self, c: &mut Candidate) -> ProbeState {
        // A file the lock refused in an earlier scan was not kept in memory.
        let bytes = match (c.bytes.take(), c.embedded) {
            (Some(bytes), _) => bytes,
            (None, Some(p)) => Cow::Borrowed(p.bytes),
            (None, None) => {
                match files::read(&c.path, &c.record.stamp, self.settings.max_file_bytes) {
                    Ok(bytes) if sha256_hex(&bytes) == c.record.sha256 => Cow::Owned(bytes),
                    Ok(_) => return ProbeState::Failed("changed while being read".into()),
                    Err(e) => return ProbeState::Failed(e),
                }
            }
        };
        match Loaded::probe(
            &self.engine,
            c.path.clone(),
            &bytes,
            c.record.sha256.clone(),
            c.source,
            &|kind| self.settings.limits_for(kind),
        ) {
            Ok(probed) => ProbeState::Ready(Arc::new(self.ready(probed))),
            Err(e) => ProbeState::Failed(e),
        }
    }

    /// A probed plugin with no grants yet (`granted` decides them).
    fn ready(&self, probed: Probed) -> Loaded {
        probed.ready(Grants::default(), self.embedder.clone())
    }

    /// Whether `plugin` may be loaded as what it says it is.
    fn admit(
        &self,
        plugin: &Loaded,
        lock: Option<&LockFile>,
        reserved: &BTreeSet<String>,
    ) -> Result<(), String> {
        let info = &plugin.info;
        if let Some(entry) = lock.and_then(|l| l.by_hash(&info.sha256))
            && (entry.name != info.name || entry.version != info.version.to_string())
        {
            return Err(format!(
                "refused: metaclaw.lock pins this file as {}@{}, but it now calls itself {}",
                entry.name,
                entry.version,
                plugin.label()
            ));
        }
        self.settings.trust.may_use_name(info, lock, reserved)
    }

    /// `plugin` with what its file is granted: the loaded one itself when
    /// that has not changed (keeping its pool, statistics, a disabled flag).
    fn granted(
        &self,
        plugin: Arc<Loaded>,
        lock: Option<&LockFile>,
        registry: &mut Registry,
    ) -> Arc<Loaded> {
        let (grants, notes) = self.settings.trust.grants_for(&plugin.info, lock);
        for error in notes {
            registry.notices.push(Problem {
                path: plugin.info.path.clone(),
                error,
            });
        }
        if *plugin.grants() == grants {
            return plugin;
        }
        let regranted = Arc::new(plugin.regranted(grants, self.embedder.clone()));
        if let Some(record) = registry.files.get_mut(&plugin.info.path) {
            record.probe = ProbeState::Ready(regranted.clone());
        }
        regranted
    }

    /// Paths and stamps of everything a scan reads.
    fn fingerprint_of(&self, entries: &[(Source, files::Entry)]) -> Vec<(PathBuf, Option<Stamp>)> {
        let mut out: Vec<(PathBuf, Option<Stamp>)> = entries
            .iter()
            .map(|(_, e)| (e.path.clone(), e.stamp.as_ref().ok().copied()))
            .collect();
        out.push((
            self.settings.lock_path.clone(),
            files::stamp_of(&self.settings.lock_path),
        ));
        out
    }

    fn fingerprint(&self) -> Vec<(PathBuf, Option<Stamp>)> {
        self.fingerprint_of(&self.entries(None))
    }

    /// Watches the folders (and the lock file) from a background thread.
    /// A change is loaded once the files have stopped changing for one
    /// interval, so a plugin being copied in is not read half-written.
    pub fn watch(self: &Arc<Self>) {
        let host = Arc::downgrade(self);
        let interval = self.settings.watch_interval;
        let spawned = std::thread::Builder::new()
            .name("metaclaw-plugins".into())
            .spawn(move || {
                let mut pending: Option<Vec<(PathBuf, Option<Stamp>)>> = None;
                loop {
                    std::thread::sleep(interval);
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
    pub fn scorers(&self) -> Vec<Arc<Loaded>> {
        self.role(Kind::Scorer, self.settings.scorers.as_deref())
    }

    /// The evolver post-processors, in order.
    pub fn evolvers(&self) -> Vec<Arc<Loaded>> {
        self.role(Kind::Evolver, self.settings.evolvers.as_deref())
    }

    /// Executable skills.
    pub fn skills(&self) -> Vec<Arc<Loaded>> {
        self.role(Kind::Skill, self.settings.skills.as_deref())
    }

    /// Retrievers in the order to try them (the next one is the fallback).
    pub fn retrievers(&self) -> Vec<Arc<Loaded>> {
        self.role(Kind::Retriever, Some(&self.settings.retriever))
    }

    fn role(&self, kind: Kind, specs: Option<&[PluginSpec]>) -> Vec<Arc<Loaded>> {
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

/// Why a file the lock does not list is refused (said without running it:
/// what the lock recorded for that path, if anything).
fn unpinned(lock: &LockFile, path: &Path, sha256: &str) -> String {
    match lock.by_file(path) {
        Some(entry) => format!(
            "refused: {} has sha256 {sha256}, but metaclaw.lock pins {}@{} at this path to sha256 {} (run `metaclaw plugins lock` if this build is intended); it was not compiled or run",
            path.display(),
            entry.name,
            entry.version,
            entry.sha256
        ),
        None => format!(
            "refused: {} (sha256 {sha256}) is not pinned in metaclaw.lock; run `metaclaw plugins lock` to pin it. It was not compiled or run",
            path.display()
        ),
    }
}

fn report_changes(previous: &Registry, next: &Registry) {
    for p in &next.plugins {
        if !previous.plugins.iter().any(|q| Arc::ptr_eq(p, q)) {
            tracing::info!(
                "plugin loaded: {} ({}, {}, {}, sha256 {})",
                p.label(),
                p.info.kind.as_str(),
                p.info.source.as_str(),
                p.info.path.display(),
                &p.info.sha256[..12]
            );
        }
    }
    for p in &previous.plugins {
        if !next.plugins.iter().any(|q| Arc::ptr_eq(p, q)) {
            tracing::info!("plugin unloaded: {} ({})", p.label(), p.info.path.display());
        }
    }
    for problem in &next.problems {
        if !previous.problems.contains(problem) {
            tracing::warn!("plugin {}: {}", problem.path.display(), problem.error);
        }
    }
    for notice in &next.notices {
        if !previous.notices.contains(notice) {
            tracing::warn!("plugin {}: {}", notice.path.display(), notice.error);
        }
    }
}
