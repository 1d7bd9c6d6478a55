//! Is an agent's gateway running, and running its commands with a time limit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Env, Service};

/// The argv of every process under `env.proc_dir` (this one excluded).
pub fn processes(env: &Env) -> Vec<(u32, Vec<String>)> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir(&env.proc_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !argv.is_empty() {
            out.push((pid, argv));
        }
    }
    out.sort_by_key(|(pid, _)| *pid);
    out
}

/// The working directory of a process, if it can be read.
pub fn cwd_of(env: &Env, pid: u32) -> Option<PathBuf> {
    std::fs::read_link(env.proc_dir.join(pid.to_string()).join("cwd")).ok()
}

/// Where in `argv` the program `name` is: argv[0], or the script a runtime
/// (node, python) runs, e.g. `node /usr/lib/node_modules/openclaw/openclaw.mjs`.
/// Returns the index of the first argument after it.
pub fn program_at(argv: &[String], name: &str) -> Option<usize> {
    let is_it = |arg: &str| {
        let base = Path::new(arg)
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or(arg);
        base == name
            || base.starts_with(&format!("{name}."))
            || base.starts_with(&format!("{name}-"))
            || base.starts_with(&format!("{name}_"))
            || arg.contains(&format!("/{name}/"))
    };
    argv.iter()
        .take(3)
        .position(|a| !a.starts_with('-') && is_it(a))
        .map(|i| i + 1)
}

/// `argv` runs `name` with the subcommand words `words` (in order, adjacent)
/// somewhere after the program.
pub fn runs(argv: &[String], name: &str, words: &[&str]) -> bool {
    let Some(start) = program_at(argv, name) else {
        return false;
    };
    let rest = &argv[start.min(argv.len())..];
    words.is_empty()
        || rest
            .windows(words.len())
            .any(|w| w.iter().zip(words).all(|(a, b)| a == b))
}

/// A command on `env.path`.
pub fn which(env: &Env, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    env.path.iter().map(|dir| dir.join(name)).find(|p| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

#[derive(Debug)]
pub enum Outcome {
    NotFound,
    Exited { code: Option<i32>, output: String },
    TimedOut,
    Failed(String),
}

impl Outcome {
    pub fn ok(&self) -> bool {
        matches!(self, Outcome::Exited { code: Some(0), .. })
    }
}

/// Runs `argv` (looked up on `env.path`, with the agent's variables) and
/// waits at most `timeout`, then kills it.
pub fn run(env: &Env, argv: &[String], timeout: Duration) -> Outcome {
    let Some(program) = argv.first().and_then(|p| which(env, p)) else {
        return Outcome::NotFound;
    };
    let mut command = Command::new(program);
    command
        .args(&argv[1..])
        .envs(env.command_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    // Readers on their own threads: a chatty command must not block on a
    // full pipe while we wait for it.
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .filter_map(|mut pipe| {
        // Joined below; a reader that cannot start leaves its output out.
        crate::work::thread("metaclaw-claw-pipe", move || {
            let mut text = Vec::new();
            let _ = pipe.by_ref().take(64 << 10).read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
        .ok()
    })
    .collect();
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(25));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    };
    let output: String = readers
        .into_iter()
        .filter_map(|r| r.join().ok())
        .collect::<Vec<_>>()
        .join("");
    match status {
        Some(status) => Outcome::Exited {
            code: status.code(),
            output: output.trim().to_string(),
        },
        None => Outcome::TimedOut,
    }
}

/// `systemctl --user is-active --quiet UNIT` succeeded.
pub fn systemd_user_active(env: &Env, unit: &str) -> bool {
    let argv = ["systemctl", "--user", "is-active", "--quiet", unit].map(String::from);
    run(env, &argv, Duration::from_secs(5)).ok()
}

/// Restarts `service` if it runs; says what happened either way.
pub fn restart_if_running(env: &Env, service: &Service) -> String {
    let by_unit = service
        .systemd_unit
        .filter(|unit| systemd_user_active(env, unit));
    let pids: Vec<u32> = match &service.process {
        Some(matches) => processes(env)
            .into_iter()
            .filter(|(pid, argv)| matches(*pid, argv))
            .map(|(pid, _)| pid)
            .collect(),
        None => Vec::new(),
    };
    let after = service.after.map(|a| format!(" {a}")).unwrap_or_default();
    if by_unit.is_none() && pids.is_empty() {
        return format!(
            "{} is not running; it picks up the new config when it next starts",
            service.name
        );
    }
    let shown = service.restart.join(" ");
    match run(env, &service.restart, service.timeout) {
        Outcome::Exited { code: Some(0), .. } => {
            format!("restarted {} (`{shown}`).{after}", service.name)
        }
        Outcome::NotFound => format!(
            "{} is running, but `{}` is not on PATH: restart it yourself to load the new config",
            service.name,
            service.restart.first().map(String::as_str).unwrap_or("?")
        ),
        Outcome::TimedOut => format!(
            "`{shown}` did not finish within {}s; check {}",
            service.timeout.as_secs(),
            service.name
        ),
        Outcome::Exited { code, output } => format!(
            "`{shown}` failed (exit {}){}; restart {} yourself",
            code.map(|c| c.to_string())
                .unwrap_or_else(|| "by signal".into()),
            last_line(&output)
                .map(|l| format!(": {l}"))
                .unwrap_or_default(),
            service.name
        ),
        Outcome::Failed(e) => format!("cannot run `{shown}`: {e}"),
    }
}

pub fn last_line(output: &str) -> Option<&str> {
    output.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn programs_are_found_directly_and_behind_a_runtime() {
        assert!(runs(
            &argv("openclaw gateway run --port 1"),
            "openclaw",
            &["gateway"]
        ));
        assert!(runs(
            &argv("node /usr/lib/node_modules/openclaw/openclaw.mjs gateway run"),
            "openclaw",
            &["gateway", "run"]
        ));
        assert!(runs(
            &argv("/home/u/.local/bin/hermes gateway run --replace"),
            "hermes",
            &["gateway", "run"]
        ));
        assert!(!runs(
            &argv("openclaw config set x"),
            "openclaw",
            &["gateway"]
        ));
        assert!(!runs(&argv("vim openclaw.json"), "openclaw", &["gateway"]));
        assert!(!runs(&argv("bash -c x"), "openclaw", &[]));
    }

    #[test]
    fn a_command_that_runs_too_long_is_killed() {
        let env =
            crate::claws::Env::isolated("/tmp").with_path(vec!["/bin".into(), "/usr/bin".into()]);
        let started = Instant::now();
        let out = run(&env, &argv("sleep 5"), Duration::from_millis(200));
        assert!(matches!(out, Outcome::TimedOut), "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        let out = run(
            &env,
            &argv("no-such-command-metaclaw"),
            Duration::from_secs(1),
        );
        assert!(matches!(out, Outcome::NotFound));
    }
}
