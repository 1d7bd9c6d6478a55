//! A file-check round's command, run the way the reference harness runs it
//! (a POSIX shell, cwd the day's workspace, `python` meaning Python 3, 30 s,
//! pass iff the exit code is the expected one), with its checker scripts
//! evaluated natively so they never sit in the agent's workspace.
//!
//! The command is split at its top-level `&&` into parts. A part that
//! calls `python scripts/check_<name>.py ARGS` has its ARGS expanded by the
//! shell (`$(python -c …)` substitutions and word splitting, exactly as
//! before) and is then checked by [`super::checks`]; any other part (the
//! inline `python -c "…"` content checks) runs in the shell as it is. Every
//! part runs, so each rule's checker has its own verdict (per-rule
//! compliance); the round passes when all of them do, which is what `&&`
//! gives, since no part changes the workspace.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::checks::{self, Checker};

/// How long a command may run (the reference harness's limit).
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// What is kept of a part's output.
const MAX_OUTPUT: usize = 2000;

/// One `&&`-separated part of a check command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub text: String,
    /// The checker it calls, and the text of its arguments.
    pub checker: Option<(Checker, String)>,
}

/// Splits `command` at the `&&` outside quotes and `$(…)`.
pub fn parts(command: &str) -> Vec<Part> {
    let mut out = Vec::new();
    let (mut single, mut double, mut depth) = (false, false, 0usize);
    let bytes = command.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'\\' if !single => i += 1,
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'$' if !single && bytes.get(i + 1) == Some(&b'(') => {
                depth += 1;
                i += 1;
            }
            b')' if !single && depth > 0 && !double => depth -= 1,
            b'&' if !single && !double && depth == 0 && bytes.get(i + 1) == Some(&b'&') => {
                out.push(&command[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&command[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|text| Part {
            text: text.to_string(),
            checker: checker_call(text),
        })
        .collect()
}

/// `python scripts/check_<name>.py ARGS` → (checker, ARGS).
fn checker_call(part: &str) -> Option<(Checker, String)> {
    let rest = part.strip_prefix("python")?;
    let rest = rest.strip_prefix('3').unwrap_or(rest);
    let rest = rest.strip_prefix(char::is_whitespace)?.trim_start();
    let (script, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let script = script.strip_prefix("./").unwrap_or(script);
    if !script.starts_with("scripts/") {
        return None;
    }
    Some((Checker::from_script(script)?, args.trim().to_string()))
}

/// One part's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartResult {
    /// `None` for an inline check.
    pub checker: Option<Checker>,
    pub command: String,
    pub code: i32,
    pub output: String,
}

impl PartResult {
    pub fn passed(&self) -> bool {
        self.code == 0
    }
}

/// Where check commands run: a `python` on PATH that is Python 3.
#[derive(Debug, Clone)]
pub struct Shell {
    /// Prepended to PATH (holds a `python` → python3 link when the system
    /// has no `python`).
    path: String,
}

impl Shell {
    /// Finds Python 3; when `python` is missing or is not Python 3, links
    /// `python` to `python3` in `scratch/bin`.
    pub fn new(scratch: &Path) -> Result<Self> {
        let system =
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        let is_python3 = |exe: &str| {
            Command::new(exe)
                .args([
                    "-c",
                    "import sys; sys.exit(0 if sys.version_info[0] == 3 else 1)",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if is_python3("python") {
            return Ok(Self { path: system });
        }
        let python3 = find("python3", &system).filter(|p| is_python3(&p.to_string_lossy()));
        let Some(python3) = python3 else {
            bail!(
                "the bench's file checks run inline Python (`python -c …`), and there is no \
                 Python 3 on PATH: install python3"
            );
        };
        let bin = scratch.join("bin");
        std::fs::create_dir_all(&bin)
            .with_context(|| format!("cannot create {}", bin.display()))?;
        let link = bin.join("python");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&python3, &link)
            .with_context(|| format!("cannot link {} to {}", link.display(), python3.display()))?;
        Ok(Self {
            path: format!("{}:{system}", bin.display()),
        })
    }

    /// Runs every part of `command` in `workspace`.
    pub fn check(&self, command: &str, workspace: &Path) -> Vec<PartResult> {
        parts(command)
            .into_iter()
            .map(|part| match &part.checker {
                Some((checker, args)) => self.checker(*checker, args, &part.text, workspace),
                None => {
                    let (code, out, err) = self.sh(&part.text, workspace);
                    PartResult {
                        checker: None,
                        command: part.text,
                        code,
                        output: clip(&format!("{out}{err}")),
                    }
                }
            })
            .collect()
    }

    fn checker(&self, checker: Checker, args: &str, text: &str, workspace: &Path) -> PartResult {
        // The shell expands the arguments as it would for the script.
        let (code, expanded, err) = self.sh(&format!("printf '%s\\0' {args}"), workspace);
        let (code, output) = if code != 0 {
            (
                2,
                clip(&format!("the arguments could not be expanded: {err}")),
            )
        } else {
            let args: Vec<String> = expanded
                .split('\0')
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect();
            let outcome = checks::run(checker, &args, workspace);
            (outcome.code, outcome.message)
        };
        PartResult {
            checker: Some(checker),
            command: text.to_string(),
            code,
            output,
        }
    }

    /// `sh -c text` in `dir` within [`TIMEOUT`]: the exit code (124 on
    /// timeout, 127 if it could not start), its stdout and its stderr.
    fn sh(&self, text: &str, dir: &Path) -> (i32, String, String) {
        let child = Command::new("sh")
            .arg("-c")
            .arg(text)
            .current_dir(dir)
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => return (127, String::new(), format!("cannot run sh: {e}")),
        };
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(mut pipe) = child.stdout.take() {
            let _ = pipe.read_to_string(&mut out);
        }
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut err);
        }
        match status {
            Some(status) => (status.code().unwrap_or(128), out, err),
            None => (124, out, format!("timed out after {}s", TIMEOUT.as_secs())),
        }
    }
}

/// Output kept for the report.
pub fn clip(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_OUTPUT {
        return text.to_string();
    }
    let mut end = MAX_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn find(name: &str, path: &str) -> Option<PathBuf> {
    path.split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::cli::bench::data::{Bench, Kind, Set};

    #[test]
    fn commands_split_at_top_level_ands_only() {
        let command = r#"python -c "import sys; sys.exit(0 if 'a&&b' else 1)" && python scripts/check_metadata.py $(python -c "print('x' and 'y')") && python scripts/check_done_log.py done.log --min-entries 3"#;
        let p = parts(command);
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(p[0].checker, None);
        assert_eq!(
            p[1].checker,
            Some((
                Checker::Metadata,
                r#"$(python -c "print('x' and 'y')")"#.to_string()
            ))
        );
        assert_eq!(
            p[2].checker,
            Some((Checker::DoneLog, "done.log --min-entries 3".to_string()))
        );
    }

    /// Every checker call in both sets is recognised: the counts of
    /// references per script the bench README gives.
    #[test]
    fn every_script_call_in_the_data_is_recognised() {
        for (set, counts) in [
            (Set::Full, [48, 70, 79, 40, 75]),
            (Set::Small, [8, 14, 13, 3, 13]),
        ] {
            let bench = Bench::load(set).unwrap();
            let mut seen = [0; 5];
            for round in bench.days.iter().flat_map(|d| &d.rounds) {
                let Kind::FileCheck { command, .. } = &round.kind else {
                    continue;
                };
                for part in parts(command) {
                    if let Some((checker, _)) = part.checker {
                        seen[checker.rule() as usize - 1] += 1;
                    } else {
                        assert!(!part.text.contains("scripts/"), "{}", part.text);
                    }
                }
            }
            assert_eq!(
                seen, counts,
                "{set:?}: iso8601, filename, metadata, backup, done_log"
            );
        }
    }

    /// No file check passes on an untouched workspace (reference §8), and
    /// substitutions are expanded in the workspace before the checker runs.
    #[test]
    fn an_untouched_workspace_fails_every_check() {
        let bench = Bench::load(Set::Small).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let shell = Shell::new(scratch.path()).unwrap();
        for day in &bench.days {
            let dir = tempfile::tempdir().unwrap();
            bench.write_workspace(&day.id, dir.path()).unwrap();
            for round in &day.rounds {
                let Kind::FileCheck { command, .. } = &round.kind else {
                    continue;
                };
                let results = shell.check(command, dir.path());
                assert!(
                    results.iter().any(|r| !r.passed()),
                    "{} {} passed untouched: {results:?}",
                    day.id,
                    round.id
                );
            }
        }
    }

    #[test]
    fn a_substituted_path_reaches_the_checker() {
        let scratch = tempfile::tempdir().unwrap();
        let shell = Shell::new(scratch.path()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("day05")).unwrap();
        std::fs::write(
            dir.path().join("day05/20260330_notes.md"),
            "---\ncreated_at: 2026-03-30T09:00:00+08:00\nauthor: metaclaw_agent\nstatus: done\n---\n# Notes\n",
        )
        .unwrap();
        let command = r#"python -c "import glob,sys; files=sorted(glob.glob('day05/20260330_*.md')); sys.exit(0 if files else 1)" && python scripts/check_metadata.py $(python -c "import glob; print(sorted(glob.glob('day05/20260330_*.md'))[0])")"#;
        let results = shell.check(command, dir.path());
        assert!(results.iter().all(PartResult::passed), "{results:?}");
        assert_eq!(results[1].checker, Some(Checker::Metadata));
        std::fs::write(dir.path().join("day05/20260330_notes.md"), "# Notes\n").unwrap();
        let results = shell.check(command, dir.path());
        assert!(results[0].passed());
        assert_eq!(results[1].code, 1, "{results:?}");
    }
}
