//! What `plugins list` (and the daemon's `/admin/plugins`) shows.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::registry::{Problem, Registry, Settings};

/// A plugin as `plugins list` shows it (the daemon's `/admin/plugins`
/// answers with the same shape).
#[derive(Debug, Serialize, Deserialize)]
pub struct PluginView {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub description: String,
    pub sha256: String,
    pub path: PathBuf,
    pub source: String,
    pub status: String,
    pub granted: Vec<String>,
    pub asks: Vec<String>,
    pub package: String,
    pub calls: u64,
    pub failures: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RegistryView {
    pub plugins: Vec<PluginView>,
    pub problems: Vec<Problem>,
    pub locked: bool,
}

pub fn view(registry: &Registry, settings: &Settings) -> RegistryView {
    let source = |p: &Path| {
        if settings
            .builtin_dir
            .as_deref()
            .is_some_and(|b| p.starts_with(b))
        {
            "builtin"
        } else {
            "user"
        }
    };
    RegistryView {
        plugins: registry
            .plugins
            .iter()
            .map(|p| PluginView {
                name: p.info.name.clone(),
                version: p.info.version.to_string(),
                kind: p.info.kind.as_str().into(),
                description: p.info.description.clone(),
                sha256: p.info.sha256.clone(),
                path: p.info.path.clone(),
                source: source(&p.info.path).into(),
                status: p.status(),
                granted: p.grants.names(),
                asks: p.info.asks.clone(),
                package: p.info.package.clone(),
                calls: p.stats.calls.load(Ordering::Relaxed),
                failures: p.stats.failures.load(Ordering::Relaxed),
            })
            .collect(),
        problems: registry.problems.clone(),
        locked: registry.locked,
    }
}
