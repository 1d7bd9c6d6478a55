//! `scheduler status`: the signals read now by this process (the same code
//! the daemon runs), the rule's decision, and what the daemon's scheduler
//! did (its transitions are in the database), daemon or not.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use serde_json::json;

use super::sessions_cmd::store_file;
use super::{load_config, local_time, runtime};
use metaclaw_core::clock::LastActivity;
use metaclaw_core::home::Home;
use metaclaw_core::scheduler::{gate, idle};
use metaclaw_core::store::scheduler as stored;

pub fn status(home: &Home, config_path: &Path, json: bool) -> Result<ExitCode> {
    let config = load_config(config_path)?.config;
    let gated = gate::gates(&config);
    let gating = match (gated, &config.mode) {
        (true, metaclaw_core::config::Mode::Auto) => "mode auto: training steps wait for windows",
        (true, _) => "scheduler.enabled: training steps wait for windows",
        (false, _) if config.rl.manual_train_trigger => {
            "rl.manual_train_trigger: steps run only when asked (`metaclaw train step`), windows or not"
        }
        (false, metaclaw_core::config::Mode::SkillsOnly) if !config.rl.enabled => {
            "mode skills_only: nothing trains"
        }
        (false, _) => "mode rl without scheduler.enabled: steps run whenever a batch is ready",
    };
    let conn = store_file(home, Some(&config)).read().ok();
    let last_main = conn
        .as_ref()
        .and_then(|c| stored::last_main_turn_ms(c).ok().flatten());
    let recent = conn
        .as_ref()
        .and_then(|c| stored::recent(c, 5).ok())
        .unwrap_or_default();
    let (windows, steps) = conn
        .as_ref()
        .and_then(|c| stored::window_totals(c).ok())
        .unwrap_or((0, 0));
    let report = match gate::Parts::from_config(&config, home) {
        Err(e) => Err(e),
        Ok(parts) => {
            let inputs = gate::Inputs {
                clock: Arc::new(metaclaw_core::clock::SystemClock),
                idle: Arc::new(idle::PlatformIdle),
                activity: LastActivity::since(last_main.unwrap_or(0)),
            };
            Ok(runtime()?.block_on(gate::assess(&parts, &inputs)))
        }
    };
    let state = recent.first().map(|t| t.to.clone());
    if json {
        let (report, error) = match &report {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        };
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "gated": gated,
                "gating": gating,
                "error": error,
                "now": report,
                "state": state,
                "recent": recent,
                "past_windows": {"windows": windows, "steps": steps},
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    say!("{gating}");
    match &report {
        Err(e) => say!("no step starts on its own: {e}"),
        Ok(r) => {
            match r.open {
                true => say!(
                    "window: open: {}{}",
                    r.reason,
                    r.until
                        .map(|u| format!(" (expected until {})", local_time(u.timestamp_millis())))
                        .unwrap_or_default()
                ),
                false => say!("window: shut: {}", r.reason),
            }
            if let Some((at, why)) = &r.next_opening {
                say!(
                    "next expected opening: {} ({why})",
                    local_time(at.timestamp_millis())
                );
            }
            for s in &r.signals {
                say!("  {:<12} {}  [{}]", s.name, s.value, s.source);
            }
        }
    }
    say!(
        "daemon's scheduler: {}; {windows} past window(s), {steps} step(s) in them",
        state.as_deref().unwrap_or("no transition recorded")
    );
    for t in &recent {
        say!(
            "  {}  {} → {}: {}",
            local_time(t.at_ms),
            t.from,
            t.to,
            t.reason
        );
    }
    Ok(ExitCode::SUCCESS)
}
