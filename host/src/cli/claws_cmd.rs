//! The agent-wiring side of `start`, `stop --restore`, `status` and `uninstall`.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};

use metaclaw_core::claws::{self, Env, LOCAL_KEY, Target};
use metaclaw_core::config::{ClawType, LoadedConfig};
use metaclaw_core::home::Home;

/// The target `start` wires, or why it wires nothing (`Err(None)`: silently).
fn target_for(loaded: &LoadedConfig, url: &str, demo: bool) -> Result<Target, Option<String>> {
    let config = &loaded.config;
    if config.claw_type == ClawType::None || !config.configure_openclaw {
        return Err(None);
    }
    if demo {
        // The demo answers from an echo model: an agent pointed at it would
        // stop working until `stop --restore`.
        return Err(Some(format!(
            "demo: {} is not wired (the demo answers from an echo model); `metaclaw start` wires it",
            claws::claw_name(&config.claw_type)
        )));
    }
    let model = match config.llm.model_id.trim() {
        "" => {
            return Err(Some(format!(
                "not wiring {}: no model to name. Set llm.model_id (`metaclaw config set llm.model_id <id>`), then start again",
                claws::claw_name(&config.claw_type)
            )));
        }
        id => id.to_string(),
    };
    Ok(Target {
        base_url: url.to_string(),
        api_key: config
            .proxy
            .api_key
            .clone()
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| LOCAL_KEY.to_string()),
        model,
        context_window: config.context_window,
    })
}

/// Wires `claw_type` to the running daemon at `url` and prints one line per
/// file. `Err` only when wiring was attempted and failed (files put back).
pub fn wire_after_start(home: &Home, loaded: &LoadedConfig, url: &str, demo: bool) -> Result<()> {
    for line in wire_lines(home, loaded, url, demo)? {
        say!("{line}");
    }
    Ok(())
}

/// What wiring did, one line per file and note.
fn wire_lines(home: &Home, loaded: &LoadedConfig, url: &str, demo: bool) -> Result<Vec<String>> {
    let target = match target_for(loaded, url, demo) {
        Ok(t) => t,
        Err(Some(why)) => return Ok(vec![why]),
        Err(None) => return Ok(Vec::new()),
    };
    let env = Env::from_process()?;
    let report = claws::wire(home, &loaded.config.claw_type, &target, &env)?;
    Ok(report.lines(&env.home_dir))
}

/// `start --foreground`: waits (on its own thread) until this process
/// answers `/healthz`, then wires, so serving is never held up.
pub fn wire_when_healthy(home: Home, loaded: LoadedConfig, demo: bool) {
    if target_for(&loaded, "http://127.0.0.1:0", demo) == Err(None) {
        return;
    }
    // Ends once wired, or at its 60 s deadline.
    let spawned = metaclaw_core::work::unjoined("metaclaw-wire", move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            if let Some(info) = home.read_pid_file().filter(|p| p.pid == std::process::id())
                && rt.block_on(metaclaw_core::admin::healthy(&info.url))
            {
                break info.url;
            }
            if Instant::now() > deadline {
                eprintln!("warning: metaclaw did not become healthy; the agent is not wired");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // Not `say!`: a closed stdout must not take the daemon down.
        match wire_lines(&home, &loaded, &url, demo) {
            Ok(lines) => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                for line in lines {
                    let _ = writeln!(out, "{line}");
                }
            }
            Err(e) => eprintln!("error: {e:#}"),
        }
    });
    if let Err(e) = spawned {
        eprintln!("error: cannot start the wiring thread: {e}; the agent is not wired");
    }
}

/// After a plain `stop`: one line if an agent still points at metaclaw.
pub fn note_still_wired(home: &Home) {
    if claws::state(home).is_some() {
        say!("agent still wired; `metaclaw stop --restore` puts its config back");
    }
}

/// Puts every wired config back and prints what was restored.
pub fn restore_and_print(home: &Home) -> Result<()> {
    let env = Env::from_process()?;
    let report = claws::restore(home, &env)?;
    for line in report.lines(&env.home_dir) {
        say!("{line}");
    }
    Ok(())
}

/// `status --json`'s `"wiring"`: `null`, or what is wired.
pub fn wiring_json(home: &Home) -> Value {
    match claws::state(home) {
        Some(state) => json!({
            "agents": state.agents.iter().map(|a| json!({
                "claw": a.claw,
                "wired_at": a.wired_at,
                "updated_at": a.updated_at,
                "base_url": a.base_url,
                "model": a.model,
                "files": a.files.iter().map(|f| json!({
                    "path": f.path,
                    "existed": f.existed,
                    "backup": f.backup,
                })).collect::<Vec<_>>(),
                "commands": a.commands.iter().map(|c| json!({
                    "command": c.argv.join(" "),
                    "ok": c.ok,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        None => Value::Null,
    }
}

/// `status`'s wiring lines.
pub fn print_wiring(home: &Home) {
    let home_dir = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    let Some(state) = claws::state(home) else {
        say!("  wiring:    no agent wired by metaclaw");
        return;
    };
    for agent in &state.agents {
        say!(
            "  wiring:    {} → {} (model {}), since {}",
            agent.claw,
            agent.base_url,
            agent.model,
            agent.wired_at
        );
        for f in &agent.files {
            let origin = match &f.backup {
                Some(b) => format!("backup {}", claws::tilde(b, &home_dir)),
                None => "created by metaclaw".to_string(),
            };
            say!(
                "             {} ({origin})",
                claws::tilde(&f.path, &home_dir)
            );
        }
    }
}
