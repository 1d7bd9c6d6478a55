//! Which plugins are loaded, and which run in each role.
//!
//! Plugins come from two folders: the first-party ones shipped with
//! metaclaw and the user's drop-in folder. Both are scanned at start and
//! then watched: a new, replaced or removed file is picked up without a
//! restart (once it has stopped changing). A file that fails to load is
//! reported and skipped; it never takes the host down. With a lock file,
//! only files whose sha256 the lock lists are loaded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use semver::{Version, VersionReq};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::engine::PluginEngine;
use super::loaded::{Kind, Limits, Loaded};
use super::lock::LockFile;
use super::sandbox::{Embedder, Grants};
use crate::proxy::request::hex;

/// `name` or `name@<semver requirement>` (e.g. `tool-error@^0.1`).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSpec {
    pub name: String,
    pub req: VersionReq,
}

impl PluginSpec {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, req) = match text.split_once('@') {
            Some((n, r)) => (n.trim(), r.trim()),
            None => (text.trim(), "*"),
        };
        if name.is_empty() {
            return Err(format!(
                "{text:?}: a plugin name is required (name or name@version-requirement)"
            ));
        }
        let req =
            VersionReq::parse(req).map_err(|e| format!("{text:?}: {e} (e.g. tool-error@^0.1)"))?;
        Ok(Self {
            name: name.to_string(),
            req,
        })
    }
}

/// Everything the host needs to know from the config.
#[derive(Debug, Clone)]
pub struct Settings {
    pub builtin_dir: Option<PathBuf>,
    pub user_dir: PathBuf,
    pub lock_path: PathBuf,
    pub cache_dir: Option<PathBuf>,
    pub grants: BTreeMap<String, Vec<String>>,
    pub memory_bytes: usize,
    pub max_failures: u32,
    pub pool_size: usize,
    pub timeouts: BTreeMap<Kind, Duration>,
    pub retriever: Vec<PluginSpec>,
    pub scorers: Option<Vec<PluginSpec>>,
    pub evolvers: Option<Vec<PluginSpec>>,
    pub skills: Option<Vec<PluginSpec>>,
    pub watch_interval: Duration,
}

impl Settings {
    pub fn from_config(config: &crate::config::Config, home: &crate::home::Home) -> Self {
        let p = &config.plugins;
        let specs = |v: &[String]| {
            v.iter()
                .filter_map(|s| PluginSpec::parse(s).ok())
                .collect::<Vec<_>>()
        };
        let builtin_dir = if p.builtin {
            p.builtin_dir
                .as_deref()
                .map(crate::daemon::expand_home)
                .or_else(default_builtin_dir)
        } else {
            None
        };
        let mut timeouts = BTreeMap::new();
        timeouts.insert(Kind::Retriever, p.timeouts.retriever.get());
        timeouts.insert(Kind::Scorer, p.timeouts.scorer.get());
        timeouts.insert(Kind::Evolver, p.timeouts.evolver.get());
        timeouts.insert(Kind::Skill, p.timeouts.skill.get());
        Self {
            builtin_dir,
            user_dir: p
                .dir
                .as_deref()
                .map(crate::daemon::expand_home)
                .unwrap_or_else(|| home.plugins_dir()),
            lock_path: home.plugin_lock_file(),
            cache_dir: Some(home.cache_dir().join("plugins")),
            grants: {
                let mut grants = p.grants.clone();
                // Embedding retrieval needs the first-party retriever to
                // have embeddings; a grant written in the config wins.
                if config.skills.embedding_retrieval() {
                    grants
                        .entry("embedding".to_string())
                        .or_insert_with(|| vec!["embed".to_string()]);
                }
                grants
            },
            memory_bytes: (p.memory_mb as usize) << 20,
            max_failures: p.max_failures.max(1),
            pool_size: p.pool_size.max(1),
            timeouts,
            retriever: if p.retriever.is_empty() {
                if config.skills.embedding_retrieval() {
                    specs(&["embedding".to_string(), "bm25".to_string()])
                } else {
                    specs(&["bm25".to_string()])
                }
            } else {
                specs(&p.retriever)
            },
            scorers: p.scorers.as_deref().map(specs),
            evolvers: p.evolvers.as_deref().map(specs),
            skills: p.skills.as_deref().map(specs),
            watch_interval: p.watch_interval.get(),
        }
    }

    pub fn grants_for(&self, name: &str) -> Arc<Grants> {
        Arc::new(
            self.grants
                .get(name)
                .and_then(|g| Grants::parse(g).ok())
                .unwrap_or_default(),
        )
    }

    pub fn limits_for(&self, kind: Kind) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes,
            timeout: self
                .timeouts
                .get(&kind)
                .copied()
                .unwrap_or(Duration::from_millis(50)),
            max_failures: self.max_failures,
            pool_size: self.pool_size,
            ..Limits::default()
        }
    }

    /// The folders scanned, first-party first.
    pub fn dirs(&self) -> Vec<(&'static str, PathBuf)> {
        let mut out = Vec::new();
        if let Some(b) = &self.builtin_dir {
            out.push(("builtin", b.clone()));
        }
        out.push(("user", self.user_dir.clone()));
        out
    }
}

/// First-party plugins sit in `plugins/builtin` next to the folder holding
/// the executable: `target/plugins/builtin` for `target/release/metaclaw`,
/// which is where scripts/build-plugins writes them.
pub fn default_builtin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("METACLAW_BUILTIN_PLUGINS").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().ok()?;
    let bin_dir = exe.parent()?;
    // `deps/` when running from a test binary.
    let bin_dir = if bin_dir.ends_with("deps") {
        bin_dir.parent()?
    } else {
        bin_dir
    };
    let candidate = bin_dir.parent()?.join("plugins").join("builtin");
    candidate.is_dir().then_some(candidate)
}

/// A file that could not be loaded, and why.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Problem {
    pub path: PathBuf,
    pub error: String,
}

/// One scan's result.
#[derive(Default)]
pub struct Registry {
    pub plugins: Vec<Arc<Loaded>>,
    pub problems: Vec<Problem>,
    pub locked: bool,
    pub generation: u64,
    /// What was scanned, to notice changes.
    fingerprint: Vec<(PathBuf, u64, SystemTime)>,
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
    /// Told after each reload (retrievers then index the skill library).
    on_reload: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

impl PluginHost {
    pub fn new(
        settings: Settings,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> anyhow::Result<Arc<Self>> {
        let engine = PluginEngine::new(settings.cache_dir.clone())?;
        Ok(Arc::new(Self {
            engine,
            settings,
            embedder,
            current: RwLock::new(Arc::new(Registry::default())),
            scanning: Mutex::new(()),
            on_reload: Mutex::new(None),
        }))
    }

    pub fn current(&self) -> Arc<Registry> {
        self.current.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// Scans the folders now and swaps in the result.
    pub fn reload(&self) -> Arc<Registry> {
        let Ok(_one_at_a_time) = self.scanning.lock() else {
            return self.current();
        };
        let previous = self.current();
        let next = Arc::new(self.scan(&previous));
        report_changes(&previous, &next);
        if let Ok(mut current) = self.current.write() {
            *current = next.clone();
        }
        if let Ok(hook) = self.on_reload.lock()
            && let Some(hook) = hook.as_ref()
        {
            hook();
        }
        next
    }

    /// Runs `hook` after every reload.
    pub fn on_reload(&self, hook: impl Fn() + Send + Sync + 'static) {
        if let Ok(mut slot) = self.on_reload.lock() {
            *slot = Some(Box::new(hook));
        }
    }

    fn scan(&self, previous: &Registry) -> Registry {
        // Taken before anything is read: a change made during the scan then
        // differs from it, and the watcher scans again.
        let fingerprint = self.fingerprint();
        let mut registry = Registry {
            generation: previous.generation + 1,
            fingerprint,
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
        for (_, dir) in self.settings.dirs() {
            for path in wasm_files(&dir) {
                match self.load_one(&path, previous, lock.as_ref()) {
                    Ok(plugin) => {
                        let duplicate = registry.plugins.iter().find(|p| {
                            p.info.name == plugin.info.name && p.info.version == plugin.info.version
                        });
                        if let Some(first) = duplicate {
                            registry.problems.push(Problem {
                                path: path.clone(),
                                error: format!(
                                    "{} is already loaded from {}; this copy is ignored",
                                    plugin.label(),
                                    first.info.path.display()
                                ),
                            });
                        } else {
                            registry.plugins.push(plugin);
                        }
                    }
                    Err(error) => registry.problems.push(Problem { path, error }),
                }
            }
        }
        registry
    }

    fn load_one(
        &self,
        path: &Path,
        previous: &Registry,
        lock: Option<&LockFile>,
    ) -> Result<Arc<Loaded>, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
        let sha256 = hex(&Sha256::digest(&bytes));
        // Unchanged since the last scan: keep the loaded plugin (and its
        // state: pool, statistics, a disabled flag).
        if let Some(same) = previous
            .plugins
            .iter()
            .find(|p| p.info.path == path && p.info.sha256 == sha256)
        {
            return Ok(same.clone());
        }
        let pinned = lock.map(|l| l.by_hash(&sha256).is_some());
        let plugin = Loaded::load(
            &self.engine,
            path.to_path_buf(),
            &bytes,
            sha256.clone(),
            &|name| self.settings.grants_for(name),
            self.embedder.clone(),
            &|kind| self.settings.limits_for(kind),
        )?;
        if let (Some(lock), Some(false)) = (lock, pinned) {
            let version = plugin.info.version.to_string();
            return Err(match lock.by_name_version(&plugin.info.name, &version) {
                Some(entry) => format!(
                    "refused: {} has sha256 {sha256}, but metaclaw.lock pins {}@{version} to sha256 {} (run `metaclaw plugins lock` if this build is intended)",
                    plugin.label(),
                    plugin.info.name,
                    entry.sha256
                ),
                None => format!(
                    "refused: {} is not pinned in metaclaw.lock (sha256 {sha256}); run `metaclaw plugins lock` to pin it",
                    plugin.label()
                ),
            });
        }
        Ok(Arc::new(plugin))
    }

    /// Paths, sizes and modification times of everything a scan reads.
    fn fingerprint(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let mut out = Vec::new();
        for (_, dir) in self.settings.dirs() {
            for path in wasm_files(&dir) {
                if let Ok(m) = std::fs::metadata(&path) {
                    out.push((
                        path,
                        m.len(),
                        m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    ));
                }
            }
        }
        if let Ok(m) = std::fs::metadata(&self.settings.lock_path) {
            out.push((
                self.settings.lock_path.clone(),
                m.len(),
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ));
        }
        out
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
                let mut pending: Option<Vec<(PathBuf, u64, SystemTime)>> = None;
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

fn wasm_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    files.sort();
    files
}

fn report_changes(previous: &Registry, next: &Registry) {
    for p in &next.plugins {
        if !previous.plugins.iter().any(|q| Arc::ptr_eq(p, q)) {
            tracing::info!(
                "plugin loaded: {} ({}, {}, sha256 {})",
                p.label(),
                p.info.kind.as_str(),
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
        if !previous
            .problems
            .iter()
            .any(|q| q.path == problem.path && q.error == problem.error)
        {
            tracing::warn!("plugin {}: {}", problem.path.display(), problem.error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_and_without_requirements() {
        let s = PluginSpec::parse("tool-error@^0.1").unwrap();
        assert_eq!(s.name, "tool-error");
        assert!(s.req.matches(&Version::new(0, 1, 7)));
        assert!(!s.req.matches(&Version::new(0, 2, 0)));
        assert!(
            PluginSpec::parse("bm25")
                .unwrap()
                .req
                .matches(&Version::new(9, 0, 0))
        );
        assert!(
            PluginSpec::parse("x@not-a-req")
                .unwrap_err()
                .contains("x@not-a-req")
        );
        assert!(PluginSpec::parse("@1").is_err());
    }
}
