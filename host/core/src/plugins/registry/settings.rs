//! What the plugin host takes from the config: where plugins come from,
//! their budgets per kind, and the engine's options.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::PluginSpec;
use crate::plugins::cache::CacheOptions;
use crate::plugins::engine::EngineOptions;
use crate::plugins::loaded::{Kind, Limits, Source};
use crate::plugins::sandbox::EmbedAllowance;
use crate::plugins::trust::Trust;

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
pub struct HostSettings {
    pub builtin: BuiltinSource,
    pub user_dir: PathBuf,
    pub lock_path: PathBuf,
    pub cache: Option<CacheOptions>,
    /// Compiled artifacts no plugin used for this long are deleted (the
    /// daemon only: a one-off CLI command sees only its own plugins).
    pub evict_after: Option<Duration>,
    pub trust: Trust,
    pub memory_bytes: usize,
    pub total_memory_bytes: usize,
    pub max_compiles: usize,
    pub compile_timeout: Duration,
    pub max_failures: u32,
    /// Calls of the failure-rate window, and the share of them that may
    /// fail before the plugin is disabled.
    pub failure_window: usize,
    pub max_failure_rate: f64,
    /// What each plugin file may send to the embedding backend per hour.
    pub embed_allowance: EmbedAllowance,
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

impl HostSettings {
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
            total_memory_bytes: (p.total_memory_mb as usize) << 20,
            max_compiles: p.max_compiles,
            compile_timeout: p.timeouts.compile.get(),
            max_failures: p.max_failures.max(1),
            failure_window: p.failure_window.max(1) as usize,
            max_failure_rate: p.max_failure_rate,
            embed_allowance: EmbedAllowance {
                requests: p.embed_requests_per_hour,
                bytes: p.embed_mb_per_hour << 20,
                window: Duration::from_secs(3600),
            },
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
            failure_window: self.failure_window,
            max_failure_rate: self.max_failure_rate,
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

    pub(super) fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            cache: self.cache.clone(),
            threads: self.threads,
            total_memory: self.total_memory_bytes,
            max_compiles: self.max_compiles,
            compile_timeout: Some(self.compile_timeout),
        }
    }
}
