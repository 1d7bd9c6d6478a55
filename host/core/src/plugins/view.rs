//! What `plugins list` (and the daemon's `/admin/plugins`) shows.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::registry::{Problem, Registry};

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
    /// Calls that found every instance busy until their deadline.
    #[serde(default)]
    pub busy: u64,
    /// Calls whose deadline passed while the machine ran other work (the
    /// call used less than half of it): not failures.
    #[serde(default)]
    pub starved: u64,
    /// Calls left out of a turn because `plugins.turn_budget` ran out
    /// (not failures).
    #[serde(default)]
    pub turn_cuts: u64,
    /// Log lines dropped by the per-plugin limits.
    #[serde(default)]
    pub log_dropped: u64,
    /// Memory its instances hold now (bytes), and its budget.
    #[serde(default)]
    pub memory: u64,
    #[serde(default)]
    pub memory_limit: u64,
    /// Requests and bytes of text its file sent to the embedding backend in
    /// the last hour (what caches served is not counted), and its budget.
    #[serde(default)]
    pub embed_requests: u64,
    #[serde(default)]
    pub embed_bytes: u64,
    #[serde(default)]
    pub embed_requests_limit: u64,
    #[serde(default)]
    pub embed_bytes_limit: u64,
    /// Host memory its compiled code takes (bytes), charged to the total.
    #[serde(default)]
    pub code: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RegistryView {
    pub plugins: Vec<PluginView>,
    pub problems: Vec<Problem>,
    #[serde(default)]
    pub notices: Vec<Problem>,
    pub locked: bool,
    /// The daemon's first scan has not finished (it has just started): the
    /// list is not yet all there will be.
    #[serde(default)]
    pub loading: bool,
    /// What all plugins hold together (bytes: every instance's memory and
    /// every loaded plugin's compiled code), and `plugins.total_memory_mb`.
    #[serde(default)]
    pub total_memory: u64,
    #[serde(default)]
    pub total_memory_limit: u64,
}

pub fn view(registry: &Registry) -> RegistryView {
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
                source: p.info.source.as_str().into(),
                status: p.status(),
                granted: p.grants().names(),
                asks: p.info.asks.clone(),
                package: p.info.package.clone(),
                calls: p.stats.calls.load(Ordering::Relaxed),
                failures: p.stats.failures.load(Ordering::Relaxed),
                busy: p.stats.busy.load(Ordering::Relaxed),
                starved: p.stats.starved.load(Ordering::Relaxed),
                turn_cuts: p.stats.turn_cuts.load(Ordering::Relaxed),
                log_dropped: p.log_dropped(),
                memory: p.memory_in_use() as u64,
                memory_limit: p.limits.memory_bytes as u64,
                embed_requests: p.embed_spent().0,
                embed_bytes: p.embed_spent().1,
                embed_requests_limit: p.embed_allowance().requests,
                embed_bytes_limit: p.embed_allowance().bytes,
                code: p.code_bytes() as u64,
            })
            .collect(),
        problems: registry.problems.clone(),
        notices: registry.notices.clone(),
        locked: registry.locked,
        loading: registry.loading(),
        total_memory: registry
            .total_memory
            .as_ref()
            .map_or(0, |m| m.used() as u64),
        total_memory_limit: registry
            .total_memory
            .as_ref()
            .map_or(0, |m| m.limit() as u64),
    }
}
