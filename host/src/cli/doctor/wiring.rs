//! The agent's wiring: whether the claw the config names points at this
//! proxy.

use super::report::Report;
use metaclaw_core::claws::{self, Finding};
use metaclaw_core::config::{ClawType, LoadedConfig};
use metaclaw_core::home::Home;
use std::path::PathBuf;

pub(super) fn check_wiring(report: &mut Report, home: &Home, loaded: &LoadedConfig) {
    let config = &loaded.config;
    let claw = claws::claw_name(&config.claw_type);
    let state = match claws::State::load(home) {
        Ok(state) => state.unwrap_or_default(),
        Err(e) => {
            report.error(
                "wiring",
                format!("{e:#}"),
                "`metaclaw stop --restore` puts back what it can; the backups are kept",
            );
            return;
        }
    };
    let wired_claw = |name: &str| state.agents.iter().find(|a| a.claw == name);
    if config.claw_type == ClawType::None || !config.configure_openclaw {
        let why = if config.claw_type == ClawType::None {
            "claw_type: none"
        } else {
            "configure_openclaw: false"
        };
        report.ok("wiring", format!("not wired ({why})"));
    } else {
        match wired_claw(claw) {
            None => report.ok(
                "wiring",
                format!("{claw} is not wired yet: `metaclaw start` points it at the proxy"),
            ),
            Some(agent) => {
                let mut broken = 0;
                let home_dir = std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_default();
                for file in &agent.files {
                    for finding in claws::check_file(file, &agent.base_url) {
                        let shown = claws::tilde(&file.path, &home_dir);
                        match finding {
                            Finding::Broken(what) => {
                                broken += 1;
                                report.error(
                                    "wiring",
                                    format!("{claw}: {shown}: {what}"),
                                    "`metaclaw stop --restore` then `metaclaw start` wires it again (an edited file is kept beside it)",
                                );
                            }
                            Finding::Changed(what) => report.warning(
                                "wiring",
                                format!("{claw}: {shown}: {what}"),
                                "nothing to do if the edit is yours; `metaclaw stop --restore` keeps it beside the original",
                            ),
                        }
                    }
                }
                if broken == 0 {
                    report.ok(
                        "wiring",
                        format!(
                            "{claw} → {} ({} file(s) as metaclaw wrote them, backups present)",
                            agent.base_url,
                            agent.files.len()
                        ),
                    );
                }
            }
        }
    }
    for agent in state.agents.iter().filter(|a| a.claw != claw) {
        report.warning(
            "wiring",
            format!(
                "{} is still wired to {} although claw_type is now {claw}",
                agent.claw, agent.base_url
            ),
            "`metaclaw stop --restore` puts its config back",
        );
    }
}
