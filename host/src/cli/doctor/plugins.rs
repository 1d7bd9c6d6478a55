//! The plugins as the daemon would load them, the lock against the files
//! it pins, and the retrievers and evolver the config names.

use super::report::Report;
use metaclaw_core::config::LoadedConfig;
use metaclaw_core::digest::sha256_hex;
use metaclaw_core::home::Home;
use metaclaw_core::plugins::{
    FIRST_PARTY, HostSettings, LockFile, PluginHost, Registry, Source, files,
};
use metaclaw_core::untrusted::log_line;
use std::path::PathBuf;
use std::sync::Arc;

/// The plugins as the daemon would load them (the lock in force), and the
/// lock checked against the files it pins.
pub(super) fn check_plugins(
    report: &mut Report,
    home: &Home,
    loaded: &LoadedConfig,
) -> Option<Arc<PluginHost>> {
    let host = start_host(report, home, loaded)?;
    let registry = host.reload();
    let reported = check_pins(report, home, &host, registry.locked);
    report_loaded(report, &registry, loaded.config.plugins.builtin);
    report_problems(report, &registry, &reported);
    Some(host)
}

/// The plugin host as the daemon would start it, or `None` (reported) if it
/// cannot start.
fn start_host(report: &mut Report, home: &Home, loaded: &LoadedConfig) -> Option<Arc<PluginHost>> {
    let mut settings = HostSettings::from_config(&loaded.config, home);
    // Doctor leaves a missing home missing: it compiles without the cache
    // (which lives in the home) rather than create it.
    if !home.root.is_dir() {
        settings.cache = None;
    }
    match PluginHost::new(settings, None) {
        Ok(host) => Some(host),
        Err(e) => {
            report.error(
                "plugins",
                format!("the plugin host cannot start: {e:#}"),
                "see `metaclaw plugins list`",
            );
            None
        }
    }
}

/// The lock against the files it pins: one line for each pinned file whose
/// bytes changed (or are gone). Returns those files, so that the host's own
/// "refused" problem for the same file is not repeated.
fn check_pins(report: &mut Report, home: &Home, host: &PluginHost, locked: bool) -> Vec<PathBuf> {
    let lock_path = home.plugin_lock_file();
    let mut reported: Vec<PathBuf> = Vec::new();
    if let Ok(Some(lock)) = LockFile::read(&lock_path) {
        let mut changed = 0;
        for entry in &lock.plugins {
            let file = PathBuf::from(&entry.file);
            let fix = "`metaclaw plugins verify` lists every difference; `metaclaw plugins lock` pins the files as they are now, if they are meant to be";
            match files::read_named(&file, host.settings.max_file_bytes) {
                Ok(bytes) => {
                    let sha = sha256_hex(&bytes);
                    if sha != entry.sha256 {
                        report.error(
                            "plugin pins",
                            format!(
                                "{} changed since it was pinned ({}@{}: sha256 {}…, metaclaw.lock pins {}…): it is refused",
                                file.display(),
                                entry.name,
                                entry.version,
                                &sha[..12],
                                &entry.sha256[..12.min(entry.sha256.len())]
                            ),
                            fix,
                        );
                        reported.push(file);
                        changed += 1;
                    }
                }
                Err(e) => {
                    report.error(
                        "plugin pins",
                        format!(
                            "{}@{}, pinned in metaclaw.lock, cannot be read: {e}",
                            entry.name, entry.version
                        ),
                        fix,
                    );
                    changed += 1;
                }
            }
        }
        if changed == 0 {
            report.ok(
                "plugin pins",
                format!(
                    "the {} files pinned by {} are unchanged",
                    lock.plugins.len(),
                    lock_path.display()
                ),
            );
        }
    } else if !locked {
        report.ok(
            "plugin pins",
            "no metaclaw.lock: any plugin in the folders loads (`metaclaw plugins lock` pins them by sha256)",
        );
    }
    // A lock that cannot be read is among the host's problems.
    reported
}

/// How many plugins loaded, of which kind, and any first-party plugin that
/// should have (with `plugins.builtin` on) but did not.
fn report_loaded(report: &mut Report, registry: &Registry, builtin_on: bool) {
    let builtin = registry
        .plugins
        .iter()
        .filter(|p| p.info.source == Source::Builtin)
        .count();
    let drop_ins = registry.plugins.len() - builtin;
    let missing: Vec<&str> = if builtin_on {
        FIRST_PARTY
            .iter()
            .copied()
            .filter(|name| !registry.plugins.iter().any(|p| p.info.name == *name))
            .collect()
    } else {
        Vec::new()
    };
    let summary = format!(
        "{} loaded ({builtin} first-party, {drop_ins} drop-in){}",
        registry.plugins.len(),
        if registry.locked {
            ", pinned by metaclaw.lock"
        } else {
            ""
        }
    );
    if missing.is_empty() {
        let off = if builtin_on {
            ""
        } else {
            " (plugins.builtin: false)"
        };
        report.ok("plugins", format!("{summary}{off}"));
    } else {
        report.error(
            "plugins",
            format!(
                "{summary}; first-party plugin(s) not loaded: {}",
                missing.join(", ")
            ),
            "`metaclaw plugins list` shows what was found and why a file was refused",
        );
    }
}

/// The files the host refused (less those `reported` already) and its
/// notices about the ones it loaded.
fn report_problems(report: &mut Report, registry: &Registry, reported: &[PathBuf]) {
    for problem in &registry.problems {
        if reported.contains(&problem.path) {
            continue;
        }
        report.error(
            "plugins",
            format!(
                "{}: {}",
                problem.path.display(),
                log_line(&problem.error, 400)
            ),
            if registry.locked {
                "`metaclaw plugins verify` compares the files with metaclaw.lock; fix or remove the file, or pin it with `metaclaw plugins lock`"
            } else {
                "fix or remove the file (`metaclaw plugins remove NAME`)"
            },
        );
    }
    for notice in &registry.notices {
        report.warning(
            "plugins",
            format!(
                "{}: {}",
                notice.path.display(),
                log_line(&notice.error, 400)
            ),
            "see `metaclaw plugins list`; docs/plugins.md explains grants and overrides",
        );
    }
}

pub(super) fn check_retrieval(
    report: &mut Report,
    plugins: Option<&PluginHost>,
    loaded: &LoadedConfig,
) {
    let config = &loaded.config;
    if !config.skills.enabled {
        report.ok("retrieval", "skills are off (skills.enabled: false)");
        return;
    }
    match metaclaw_core::skills::answering(plugins, config.plugins.builtin) {
        Ok(list) => report.ok("retrieval", format!("answered by {}", list.join(", then "))),
        Err(why) => report.error(
            "retrieval",
            format!("none answers: no skill is injected ({why})"),
            "load a retriever: `plugins.builtin: true` (the default) or a drop-in (`metaclaw plugins add FILE`)",
        ),
    }
}

pub(super) fn check_evolution(
    report: &mut Report,
    plugins: Option<&PluginHost>,
    loaded: &LoadedConfig,
) {
    let config = &loaded.config;
    if !config.learning.enabled {
        report.ok("evolution", metaclaw_core::learn::OFF);
        return;
    }
    if !config.skills.enabled || !config.skills.auto_evolve {
        report.ok(
            "evolution",
            "skills are not evolved (skills.enabled or skills.auto_evolve is false)",
        );
        return;
    }
    match metaclaw_core::learn::evolver_chain(plugins) {
        Ok(chain) if let Some(why) = metaclaw_core::learn::evolution_unguarded(&chain) => report.warning(
            "evolution",
            why,
            "add guard to plugins.evolvers (or remove the key: every loaded evolver runs, guard first)",
        ),
        Ok(chain) => {
            let names: Vec<&str> = chain.iter().map(|p| p.info.name.as_str()).collect();
            report.ok(
                "evolution",
                format!("evolved skills pass {}", names.join(" → ")),
            );
        }
        Err(e) => report.error(
            "evolution",
            format!("{e}; learning jobs wait"),
            "load the guard evolver (first-party, or pinned with `metaclaw plugins lock --override guard`); `metaclaw plugins list` shows it",
        ),
    }
}
