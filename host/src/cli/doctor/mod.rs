//! `metaclaw doctor`: what a working setup needs, one check at a time, each
//! `ok`, `warning` or `error` with the fix in one sentence; the exit status
//! is non-zero when any check is an error. Every check reuses the code the
//! daemon runs (config loading, the plugin host, the skill loader, the
//! wiring state, the store), so doctor and the daemon cannot disagree.
//! The upstream is only contacted with `--online`.
//!
//! One file per group of checks; `report` holds the verdicts and prints them.

mod machine;
mod online;
mod plugins;
mod report;
mod settings;
mod skills;
mod wiring;

use super::DoctorArgs;
use anyhow::Result;
use machine::{check_disk, check_home, check_port, check_store};
use metaclaw_core::home::Home;
use online::check_upstream_online;
use plugins::{check_evolution, check_plugins, check_retrieval};
use report::{Report, Verdict, print};
use settings::{check_config, check_upstream_settings};
use skills::check_skills;
use std::path::Path;
use std::process::ExitCode;
use wiring::check_wiring;

pub fn run(home: &Home, config_path: &Path, args: DoctorArgs) -> Result<ExitCode> {
    let mut report = Report::default();
    let loaded = check_config(&mut report, config_path);
    check_home(&mut report, home);
    check_disk(&mut report, home);
    match &loaded {
        Some(loaded) => {
            let upstream_set = check_upstream_settings(&mut report, loaded);
            match (args.online, upstream_set) {
                (true, true) => check_upstream_online(&mut report, loaded)?,
                (true, false) => report.skipped(
                    "online",
                    "not contacted: the upstream settings above are not complete",
                ),
                (false, _) => report.skipped(
                    "online",
                    "not contacted (`metaclaw doctor --online` sends one small request with the key)",
                ),
            }
            check_store(&mut report, home, loaded);
            check_port(&mut report, home, loaded)?;
            let plugins = check_plugins(&mut report, home, loaded);
            check_retrieval(&mut report, plugins.as_deref(), loaded);
            check_evolution(&mut report, plugins.as_deref(), loaded);
            check_skills(&mut report, home, loaded);
            check_wiring(&mut report, home, loaded);
        }
        None => report.skipped(
            "other checks",
            "upstream, store, port, plugins, skills and wiring need a valid config",
        ),
    }
    print(&report, home, config_path, args.json)?;
    Ok(if report.count(Verdict::Error) > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
