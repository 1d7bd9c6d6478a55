//! The skills library as the daemon would load it.

use super::machine::is_missing;
use super::report::Report;
use metaclaw_core::config::LoadedConfig;
use metaclaw_core::home::Home;
use metaclaw_core::untrusted::log_line;
use std::fs;

pub(super) fn check_skills(report: &mut Report, home: &Home, loaded: &LoadedConfig) {
    if !loaded.config.skills.enabled {
        report.ok("skills", "skills are off (skills.enabled: false)");
        return;
    }
    let dir = metaclaw_core::skills::library_dir(home, &loaded.config);
    let install = "`metaclaw skills install-builtin` installs the built-in skills";
    match fs::read_dir(&dir) {
        Err(e) if is_missing(&e) => {
            report.warning(
                "skills",
                format!("{} does not exist: no skill is injected", dir.display()),
                install,
            );
            return;
        }
        Err(e) => {
            report.error(
                "skills",
                format!("{} cannot be read: {e}", dir.display()),
                "give your user read access to it, or set skills.dir",
            );
            return;
        }
        Ok(_) => {}
    }
    let (skills, problems) = metaclaw_core::skills::library::scan(&dir);
    if skills.is_empty() {
        report.warning(
            "skills",
            format!("{} holds no skills: none is injected", dir.display()),
            install,
        );
    } else {
        report.ok(
            "skills",
            format!("{} skill(s) in {}", skills.len(), dir.display()),
        );
    }
    for problem in &problems {
        report.warning(
            "skills",
            format!(
                "{} is skipped: {}",
                problem.path.display(),
                log_line(&problem.error, 300)
            ),
            format!(
                "fix the file (`metaclaw skills show {}` shows it), or `metaclaw skills remove {}`",
                problem.id, problem.id
            ),
        );
    }
}
