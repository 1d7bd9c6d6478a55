//! A real Tinker-compatible training server for tests: skyrl 0.3.0 on CPU
//! with the tiny random Qwen3 (`scripts/skyrl-cpu`, cached under
//! `~/.cache/metaclaw/skyrl-0.3.0`; `scripts/test` installs both first).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The server started by `scripts/skyrl-cpu start`; stopped when dropped
/// (the kill takes the server and its engine down too: they get SIGTERM
/// from the kernel when the script dies, PDEATHSIG).
pub struct Skyrl {
    pub proc: super::Proc,
    _work: tempfile::TempDir,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("scripts/skyrl-cpu")
}

fn python() -> Option<String> {
    let python = std::env::var("SKYRL_PYTHON").unwrap_or_else(|_| "python3".into());
    let found = Command::new(&python)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    found.then_some(python)
}

/// Starts skyrl (installing it and generating the model the first time)
/// and waits for its one line of readiness. `None`, saying so, only where
/// there is no Python to run it.
pub fn start(test: &str) -> Option<Skyrl> {
    start_with(test, &[])
}

/// [`start`] with more arguments for `scripts/skyrl-cpu start`
/// (`--session-timeout S`).
pub fn start_with(test: &str, args: &[&str]) -> Option<Skyrl> {
    if python().is_none() {
        eprintln!(
            "SKIPPED {test}: no Python (python3 or $SKYRL_PYTHON) to run skyrl 0.3.0; \
             install Python 3.11 to run against a real training server"
        );
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(script());
    cmd.args(["start", "--work"])
        .arg(work.path())
        .args(args)
        .stderr(Stdio::inherit());
    let started = Instant::now();
    // A first run installs about 1 GB from PyPI; a cached one starts in
    // seconds. The script fails by itself (and closes stdout) on errors.
    let proc = super::spawn_and_wait_for(cmd, "skyrl listening on ", Duration::from_secs(1800));
    eprintln!(
        "skyrl ready at {} after {:.1} s",
        proc.url,
        started.elapsed().as_secs_f64()
    );
    Some(Skyrl { proc, _work: work })
}

impl Skyrl {
    /// The server's log so far (its engine's lines included).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._work.path().join("server.log")).unwrap_or_default()
    }
}

/// The tiny Qwen3's folder (skyrl's base model is named by it; its
/// tokenizer files are there).
pub fn model_dir() -> PathBuf {
    let out = Command::new(script())
        .arg("model")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "scripts/skyrl-cpu model failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The venv's Python (transformers, no torch), for renderings to compare
/// with.
pub fn venv_python() -> PathBuf {
    let home = std::env::var_os("METACLAW_SKYRL_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap()).join(".cache/metaclaw/skyrl-0.3.0")
        });
    home.join("venv/bin/python")
}
