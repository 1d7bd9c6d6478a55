//! A file-check round's command, run the way the reference harness runs it
//! (a POSIX shell, cwd the workspace, `python` meaning Python 3, 30 s,
//! pass iff the exit code is the expected one), with its checker scripts
//! evaluated natively so they never sit in the agent's workspace, and
//! nothing of it run outside the sandbox.
//!
//! The command is split at its top-level `&&` into parts. A part that
//! calls `python scripts/check_<name>.py ARGS` has its ARGS expanded by the
//! shell (`$(python -c …)` substitutions and word splitting) and is then
//! checked by [`super::checks`], which reads the workspace and runs
//! nothing; any other part (the inline `python -c "…"` content checks)
//! runs in the shell as it is. Every part runs, so each rule's checker has
//! its own verdict (per-rule compliance); the round passes when all of
//! them do, which is what `&&` gives, since no part changes the workspace.
//!
//! Every process a check starts (the inline parts, the expansion of a
//! checker's arguments) runs in the rollout's sandbox with
//! [`Purpose::Check`] ([`crate::rollout::sandbox`]): no network, an
//! environment of its own, nothing of the host but the read-only system
//! folders (metaclaw's binary hidden), on a scratch copy of the workspace
//! that is thrown away after the check, with `python` the system's
//! Python 3 in isolated mode, so a `glob.py` (or `sitecustomize.py`, a
//! `.pth`, a `__pycache__`) the agent wrote is never imported. If the
//! sandbox cannot be set up, nothing runs: [`Checks::probe`] and
//! [`Checks::check`] say why, and `bench run` stops rather than score.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::checks::{self, Checker};
use crate::rollout::sandbox::{self, CopyError, Ended, Purpose, Sandbox, SplitOutput};
use crate::rollout::taskdir::TaskDir;

/// How long a command may run (the reference harness's limit).
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// What is kept of a part's output.
const MAX_OUTPUT: usize = 2000;
/// What is read of a part's stdout (a checker's expanded arguments can be
/// long) and stderr.
const MAX_READ: usize = 1024 * 1024;

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

/// Why a check could not be run: the sandbox, or the host (never the
/// agent: what the agent did makes a check fail, not this).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct Unchecked(pub String);

/// The bench's file checks, confined: a sandbox probed once, a scratch
/// folder for the copies.
#[derive(Debug)]
pub struct Checks {
    sandbox: Sandbox,
    scratch: PathBuf,
}

impl Checks {
    /// Sets the check sandbox up with `exe` (metaclaw's binary) as its
    /// helper, scratch copies under `scratch`: `Err` says why checks
    /// cannot run confined (and so do not run at all).
    pub fn probe(exe: PathBuf, scratch: &Path) -> Result<Self, Unchecked> {
        std::fs::create_dir_all(scratch)
            .map_err(|e| Unchecked(format!("cannot create {}: {e}", scratch.display())))?;
        let sandbox = Sandbox::probe_with(
            exe,
            Purpose::Check,
            scratch,
            TIMEOUT,
            MAX_READ,
            sandbox::Limits::default(),
        );
        if let Some(why) = sandbox.disabled() {
            return Err(Unchecked(why.to_string()));
        }
        Ok(Self {
            sandbox,
            scratch: scratch.to_path_buf(),
        })
    }

    /// What confines the checks, in words.
    pub fn describe(&self) -> &str {
        self.sandbox.enforced().unwrap_or("")
    }

    /// Runs every part of `command` against a scratch copy of
    /// `workspace` (the checkers read `workspace` itself, which nothing
    /// here changes). `Err`: the check could not run confined.
    pub fn check(&self, command: &str, workspace: &Path) -> Result<Vec<PartResult>, Unchecked> {
        let name = format!("check-{}", uuid::Uuid::new_v4().simple());
        let dir = TaskDir::create(&self.scratch, &name)
            .map_err(|e| Unchecked(format!("cannot create a scratch workspace: {e:#}")))?;
        let results = match sandbox::copy_workspace(workspace, &dir.work()) {
            Ok(()) => self.parts(command, workspace, &dir),
            // What the agent left is too large to check: the check fails.
            Err(CopyError::TooLarge(why)) => Ok(parts(command)
                .into_iter()
                .map(|part| PartResult {
                    checker: part.checker.map(|(c, _)| c),
                    command: part.text,
                    code: 2,
                    output: format!("not checked: {why}"),
                })
                .collect()),
            Err(e @ CopyError::Io(_)) => Err(Unchecked(e.to_string())),
        };
        dir.remove();
        results
    }

    fn parts(
        &self,
        command: &str,
        workspace: &Path,
        dir: &TaskDir,
    ) -> Result<Vec<PartResult>, Unchecked> {
        parts(command)
            .into_iter()
            .map(|part| match &part.checker {
                Some((checker, args)) => self.checker(*checker, args, &part.text, workspace, dir),
                None => {
                    let out = self.run(dir, &part.text)?;
                    let (code, note) = ended(&out.ended);
                    Ok(PartResult {
                        checker: None,
                        command: part.text,
                        code,
                        output: clip(&format!("{}{}{note}", out.stdout, out.stderr)),
                    })
                }
            })
            .collect()
    }

    fn checker(
        &self,
        checker: Checker,
        args: &str,
        text: &str,
        workspace: &Path,
        dir: &TaskDir,
    ) -> Result<PartResult, Unchecked> {
        // The shell expands the arguments as it would for the script.
        let out = self.run(dir, &format!("printf '%s\\0' {args}"))?;
        let (code, note) = ended(&out.ended);
        let (code, output) = if code != 0 {
            (
                2,
                clip(&format!(
                    "the arguments could not be expanded: {}{note}",
                    out.stderr
                )),
            )
        } else {
            let args: Vec<String> = out
                .stdout
                .split('\0')
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect();
            let outcome = checks::run(checker, &args, workspace);
            (outcome.code, outcome.message)
        };
        Ok(PartResult {
            checker: Some(checker),
            command: text.to_string(),
            code,
            output,
        })
    }

    fn run(&self, dir: &TaskDir, text: &str) -> Result<SplitOutput, Unchecked> {
        self.sandbox
            .run_split(dir, text)
            .map_err(|e| Unchecked(e.to_string()))
    }
}

/// A part's exit code (124 when it was stopped at [`TIMEOUT`]) and a note
/// for its output.
fn ended(ended: &Ended) -> (i32, String) {
    match ended {
        Ended::Exited(code) => (*code, String::new()),
        Ended::TimedOut => (124, format!("\ntimed out after {}s", TIMEOUT.as_secs())),
    }
}

/// Whether a round passed on its parts' verdicts: every part (the
/// command's `&&`), or, should a round expect a failure, the command as a
/// whole (as the reference runs it).
pub fn passed(results: &[PartResult], expect_exit: i32) -> bool {
    if expect_exit == 0 {
        results.iter().all(PartResult::passed)
    } else {
        results.iter().any(|c| c.code == expect_exit)
    }
}

/// One round checked by `bench check-round`.
#[derive(Debug, Serialize)]
pub struct Checked {
    pub day: String,
    pub round: String,
    pub passed: bool,
    pub parts: Vec<PartResult>,
}

/// `bench check-round`: the file-check rounds of `day` (or only `round`),
/// or `command`, checked as `bench run` checks them, against `workspace`
/// (default: the day's starting workspace).
pub fn check_rounds(
    bench: &super::data::Bench,
    day: Option<&str>,
    round: Option<&str>,
    command: Option<&str>,
    workspace: Option<&Path>,
) -> anyhow::Result<Vec<Checked>> {
    use anyhow::{Context, anyhow, bail};
    let day = match day {
        Some(id) => Some(
            bench
                .days
                .iter()
                .find(|d| d.id == id)
                .ok_or_else(|| anyhow!("no day {id} in the {} set", bench.set.as_str()))?,
        ),
        None => None,
    };
    let mut todo: Vec<(String, String, String, i32)> = Vec::new();
    match (command, day) {
        (Some(command), _) => todo.push((
            day.map(|d| d.id.clone()).unwrap_or_default(),
            round.unwrap_or_default().to_string(),
            command.to_string(),
            0,
        )),
        (None, None) => bail!("name a --day (and optionally a --round), or a --command"),
        (None, Some(day)) => {
            for r in &day.rounds {
                if round.is_some_and(|id| id != r.id) {
                    continue;
                }
                if let super::data::Kind::FileCheck {
                    command,
                    expect_exit,
                } = &r.kind
                {
                    todo.push((day.id.clone(), r.id.clone(), command.clone(), *expect_exit));
                }
            }
            if todo.is_empty() {
                bail!(
                    "{} has no file-check round{}",
                    day.id,
                    round.map(|r| format!(" {r}")).unwrap_or_default()
                );
            }
        }
    }
    let scratch =
        std::env::temp_dir().join(format!("metaclaw-checks-{}", uuid::Uuid::new_v4().simple()));
    let result = (|| -> anyhow::Result<Vec<Checked>> {
        let exe = std::env::current_exe()
            .context("cannot find metaclaw's own binary (the checks' sandbox runs it)")?;
        let checks = Checks::probe(exe, &scratch)
            .map_err(|why| anyhow!("the checks cannot run confined, so none was run: {why}"))?;
        let workspace = match (workspace, day) {
            (Some(dir), _) => dir.to_path_buf(),
            (None, Some(day)) => {
                let dir = scratch.join("start");
                bench.write_workspace(&day.id, &dir)?;
                dir
            }
            (None, None) => bail!("--command needs a --workspace (or a --day to start from)"),
        };
        let mut out = Vec::new();
        for (day, round, command, expect_exit) in todo {
            let parts = checks
                .check(&command, &workspace)
                .map_err(|e| anyhow!("the check could not run confined: {e}"))?;
            out.push(Checked {
                day,
                round,
                passed: passed(&parts, expect_exit),
                parts,
            });
        }
        Ok(out)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::data::{Bench, Kind, Set};

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

    // Running checks needs metaclaw's binary (the sandbox's helper):
    // host/tests/bench_checks.rs runs them, planted modules included.
}
