//! What metaclaw has wired, the backups, and the two operations on them.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::files::{
    ensure_private_dir, missing_dirs, resolve, restore_file, set_aside, stamp, write_atomic,
};
use super::{
    Action, Env, FileOutcome, Plan, PlannedCommand, Report, Target, procs, read_opt, service_for,
};
use crate::digest::sha256_hex;
use crate::home::{Home, write_private};

const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct State {
    pub version: u32,
    pub agents: Vec<AgentRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentRecord {
    pub claw: String,
    /// RFC 3339, UTC.
    pub wired_at: String,
    pub updated_at: String,
    pub base_url: String,
    pub model: String,
    /// sha256 of the target (key included), to tell a re-wire from a no-op.
    pub target_sha256: String,
    pub files: Vec<FileRecord>,
    #[serde(default)]
    pub commands: Vec<CommandRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileRecord {
    /// The real file (a symlink is followed when wiring).
    pub path: PathBuf,
    /// Did the file exist before metaclaw first wrote it?
    pub existed: bool,
    /// Its original bytes, while wired.
    pub backup: Option<PathBuf>,
    pub original_sha256: Option<String>,
    /// Its original permission bits.
    pub mode: Option<u32>,
    /// What metaclaw last wrote: anything else is someone else's edit.
    pub written_sha256: String,
    /// Directories metaclaw created for it (removed on restore if empty).
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
    /// The file is metaclaw's alone; restore removes it whatever is in it.
    #[serde(default)]
    pub owned: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CommandRecord {
    /// The command as run, with the key replaced by `***`.
    pub argv: Vec<String>,
    pub ok: bool,
    /// How to undo it by hand (metaclaw cannot know the previous value).
    pub undo_hint: String,
}

fn dir(home: &Home) -> PathBuf {
    home.root.join("claws")
}
fn state_file(home: &Home) -> PathBuf {
    dir(home).join("state.json")
}
fn backups_dir(home: &Home) -> PathBuf {
    dir(home).join("backups")
}

impl State {
    /// `Ok(None)` when nothing has been wired.
    pub fn load(home: &Home) -> Result<Option<State>> {
        let path = state_file(home);
        let Some(bytes) = read_opt(&path)? else {
            return Ok(None);
        };
        let state: State = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{} is damaged; its backups are in {}",
                path.display(),
                backups_dir(home).display()
            )
        })?;
        Ok(Some(state))
    }

    fn save(&self, home: &Home) -> Result<()> {
        ensure_private_dir(&dir(home))?;
        let json = serde_json::to_vec_pretty(self)?;
        write_private(&state_file(home), &json)
    }

    /// The record of `claw`, if it has one.
    fn agent_mut(&mut self, claw: &str) -> Option<&mut AgentRecord> {
        self.agents.iter_mut().find(|a| a.claw == claw)
    }

    /// Adds a record for `claw` when it has none, wired now to `target`
    /// (its fingerprint left empty until its commands have run).
    fn add_agent(&mut self, claw: &str, target: &Target, now: &str) {
        if self.agents.iter().any(|a| a.claw == claw) {
            return;
        }
        self.agents.push(AgentRecord {
            claw: claw.to_string(),
            wired_at: now.to_string(),
            updated_at: now.to_string(),
            base_url: target.base_url.clone(),
            model: target.model.clone(),
            target_sha256: String::new(),
            files: Vec::new(),
            commands: Vec::new(),
        });
    }

    fn file_mut(&mut self, path: &Path) -> Option<&mut FileRecord> {
        self.agents
            .iter_mut()
            .flat_map(|a| a.files.iter_mut())
            .find(|f| f.path == path)
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

struct Pending {
    path: PathBuf,
    before: Option<Vec<u8>>,
    mode: Option<u32>,
    after: Option<Vec<u8>>,
    owned: bool,
    /// Directories writing it would create, outermost first.
    created_dirs: Vec<PathBuf>,
}

/// What recording the files leaves to do: the files to write, and the
/// backups made for them (removed again if writing fails).
struct Recorded<'a> {
    to_write: Vec<&'a Pending>,
    new_backups: Vec<PathBuf>,
}

pub(super) fn wire(
    home: &Home,
    claw: &str,
    plan: Plan,
    target: &Target,
    env: &Env,
) -> Result<Report> {
    let mut report = Report {
        notes: plan.notes,
        ..Report::default()
    };
    // Work out every new content before anything is written.
    let pending = contents(claw, plan.files)?;

    let previous = State::load(home)?;
    let mut state = previous.clone().unwrap_or(State {
        version: VERSION,
        agents: Vec::new(),
    });
    let now = now_rfc3339();
    let fingerprint = target.fingerprint();
    state.add_agent(claw, target, &now);
    let run_commands = state
        .agents
        .iter()
        .find(|a| a.claw == claw)
        .is_some_and(|a| a.target_sha256 != fingerprint)
        && !plan.commands.is_empty();

    // Back up first, and record the backups before touching the agent's
    // files: a crash in between leaves a state that restore understands.
    let recorded = record_files(home, claw, &pending, &mut state, &mut report)?;
    if !recorded.to_write.is_empty() || run_commands {
        if let Some(agent) = state.agent_mut(claw) {
            agent.updated_at = now.clone();
            agent.base_url = target.base_url.clone();
            agent.model = target.model.clone();
        }
        state.save(home)?;
    }

    // Write; on any failure put back what this call wrote.
    let (done, failure) = write_all(&recorded.to_write);
    if let Some(e) = failure {
        rollback(home, &done, previous, &recorded.new_backups);
        return Err(e.context(format!("wiring {claw} failed; its files are as they were")));
    }

    let (ran_any, all_ran) = if run_commands {
        run_planned(env, claw, &plan.commands, &mut state, &mut report)
    } else {
        (false, true)
    };
    // A failed command is tried again on the next start.
    if all_ran && let Some(agent) = state.agent_mut(claw) {
        agent.target_sha256 = fingerprint;
    }
    settle(home, &mut state)?;

    if (!done.is_empty() || ran_any)
        && let Some(service) = plan.service
    {
        report.notes.push(format!(
            "{claw}: {}",
            procs::restart_if_running(env, &service)
        ));
    }
    Ok(report)
}

/// Backs up and records each file wiring changes (a file wired before
/// keeps its first backup), and reports every file: what is left to write.
fn record_files<'a>(
    home: &Home,
    claw: &str,
    pending: &'a [Pending],
    state: &mut State,
    report: &mut Report,
) -> Result<Recorded<'a>> {
    let mut recorded = Recorded {
        to_write: Vec::new(),
        new_backups: Vec::new(),
    };
    for p in pending {
        let Some(after) = &p.after else {
            report.files.push(FileOutcome {
                claw: claw.to_string(),
                path: p.path.clone(),
                action: Action::Unchanged,
                backup: state.file_mut(&p.path).and_then(|r| r.backup.clone()),
                set_aside: None,
            });
            continue;
        };
        let written = sha256_hex(after);
        let outcome = match state.file_mut(&p.path) {
            Some(record) => rewire_file(claw, p, record, written)?,
            None => {
                let (record, outcome) = first_wire(home, claw, p, written)?;
                recorded.new_backups.extend(record.backup.clone());
                if let Some(agent) = state.agent_mut(claw) {
                    agent.files.push(record);
                }
                outcome
            }
        };
        report.files.push(outcome);
        recorded.to_write.push(p);
    }
    Ok(recorded)
}

/// Re-wiring a file already recorded (new port or model): the original
/// backup stays, and a version metaclaw did not write is kept beside it.
fn rewire_file(
    claw: &str,
    p: &Pending,
    record: &mut FileRecord,
    written: String,
) -> Result<FileOutcome> {
    let aside = match &p.before {
        Some(b) if sha256_hex(b) != record.written_sha256 && !record.owned => {
            Some(set_aside(&p.path, b)?)
        }
        _ => None,
    };
    record.written_sha256 = written;
    Ok(FileOutcome {
        claw: claw.to_string(),
        path: p.path.clone(),
        action: if record.existed {
            Action::Updated
        } else {
            Action::Created
        },
        backup: record.backup.clone(),
        set_aside: aside,
    })
}

/// Wiring a file for the first time: backs up its own version, if any,
/// and makes its record.
fn first_wire(
    home: &Home,
    claw: &str,
    p: &Pending,
    written: String,
) -> Result<(FileRecord, FileOutcome)> {
    let backup = match &p.before {
        Some(bytes) => Some(back_up(home, claw, &p.path, bytes)?),
        None => None,
    };
    let record = FileRecord {
        path: p.path.clone(),
        existed: p.before.is_some(),
        backup: backup.clone(),
        original_sha256: p.before.as_deref().map(sha256_hex),
        mode: p.mode,
        written_sha256: written,
        created_dirs: p.created_dirs.clone(),
        owned: p.owned,
    };
    let outcome = FileOutcome {
        claw: claw.to_string(),
        path: p.path.clone(),
        action: if p.before.is_some() {
            Action::Updated
        } else {
            Action::Created
        },
        backup,
        set_aside: None,
    };
    Ok((record, outcome))
}

/// Runs the planned commands, noting each and recording them on the
/// agent: whether any ran, and whether all did.
fn run_planned(
    env: &Env,
    claw: &str,
    commands: &[PlannedCommand],
    state: &mut State,
    report: &mut Report,
) -> (bool, bool) {
    let mut ran_any = false;
    let mut all_ran = true;
    let mut records = Vec::new();
    for command in commands {
        let (record, note) = run_command(env, command);
        ran_any |= record.ok;
        all_ran &= record.ok;
        report.notes.push(note);
        records.push(record);
    }
    if let Some(agent) = state.agent_mut(claw) {
        agent.commands = records;
    }
    (ran_any, all_ran)
}

/// Saves the state without agent entries that wired nothing (all files
/// already right); with none left, forgets the wiring.
fn settle(home: &Home, state: &mut State) -> Result<()> {
    state
        .agents
        .retain(|a| !a.files.is_empty() || !a.commands.is_empty());
    if state.agents.is_empty() {
        clear(home);
        Ok(())
    } else {
        state.save(home)
    }
}

/// Each planned file with its content now, the content wiring gives it
/// (`None`: already right), its mode and the folders writing it creates.
fn contents(claw: &str, files: Vec<super::PlannedFile>) -> Result<Vec<Pending>> {
    let mut pending = Vec::new();
    for file in files {
        let path = resolve(&file.path)?;
        let before = read_opt(&path)?;
        let after = (file.edit)(before.as_deref())
            .with_context(|| format!("cannot wire {claw} in {}", path.display()))?;
        let mode = match &before {
            Some(_) => Some(
                fs::metadata(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?
                    .permissions()
                    .mode()
                    & 0o7777,
            ),
            None => None,
        };
        let created_dirs = path.parent().map(missing_dirs).unwrap_or_default();
        pending.push(Pending {
            path,
            before,
            mode,
            after,
            owned: file.owned,
            created_dirs,
        });
    }
    Ok(pending)
}

/// A private copy of `bytes`, the agent's own version of `path`, in the
/// home's backups (a new name each time).
fn back_up(home: &Home, claw: &str, path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let dir = backups_dir(home).join(claw);
    ensure_private_dir(&backups_dir(home))?;
    let mut backup = dir.join(format!("{}-{name}", stamp()));
    let mut n = 2;
    while backup.exists() {
        backup = dir.join(format!("{}-{n}-{name}", stamp()));
        n += 1;
    }
    write_private(&backup, bytes).with_context(|| format!("cannot back up {}", path.display()))?;
    Ok(backup)
}

/// Writes each file's new content (owner only: it now holds a key for the
/// proxy), stopping at the first failure: what was written, and it.
fn write_all<'a>(to_write: &[&'a Pending]) -> (Vec<&'a Pending>, Option<anyhow::Error>) {
    let mut done = Vec::new();
    for p in to_write {
        let Some(after) = &p.after else { continue };
        let step = (|| -> Result<()> {
            if let Some(parent) = p.path.parent() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            write_atomic(&p.path, after, 0o600)
        })();
        if let Err(e) = step {
            return (done, Some(e));
        }
        done.push(*p);
    }
    (done, None)
}

fn rollback(home: &Home, done: &[&Pending], previous: Option<State>, new_backups: &[PathBuf]) {
    for p in done.iter().rev() {
        match &p.before {
            Some(bytes) => {
                let _ = write_atomic(&p.path, bytes, p.mode.unwrap_or(0o600));
            }
            None => {
                let _ = fs::remove_file(&p.path);
                for d in p.created_dirs.iter().rev() {
                    let _ = fs::remove_dir(d);
                }
            }
        }
    }
    for b in new_backups {
        let _ = fs::remove_file(b);
    }
    match previous {
        Some(state) => {
            let _ = state.save(home);
        }
        None => clear(home),
    }
}

fn run_command(env: &Env, command: &PlannedCommand) -> (CommandRecord, String) {
    let mask = |argv: &[String]| -> Vec<String> {
        argv.iter()
            .map(|a| match &command.secret {
                Some(s) if !s.is_empty() && a.contains(s.as_str()) => a.replace(s.as_str(), "***"),
                _ => a.clone(),
            })
            .collect()
    };
    let mut last = None;
    for argv in &command.argvs {
        let shown = mask(argv);
        let outcome = procs::run(env, argv, command.timeout);
        if outcome.ok() {
            return (
                CommandRecord {
                    argv: shown.clone(),
                    ok: true,
                    undo_hint: command.undo_hint.clone(),
                },
                format!("ran `{}`", shown.join(" ")),
            );
        }
        let why = match outcome {
            procs::Outcome::NotFound => "not on PATH".to_string(),
            procs::Outcome::TimedOut => {
                format!("no answer within {}s", command.timeout.as_secs())
            }
            procs::Outcome::Failed(e) => e,
            procs::Outcome::Exited { code, output } => format!(
                "exit {}{}",
                code.map(|c| c.to_string())
                    .unwrap_or_else(|| "by signal".into()),
                procs::last_line(&output)
                    .map(|l| format!(": {l}"))
                    .unwrap_or_default()
            ),
        };
        last = Some((shown, why));
    }
    let (shown, why) = last.unwrap_or_default();
    (
        CommandRecord {
            argv: shown.clone(),
            ok: false,
            undo_hint: command.undo_hint.clone(),
        },
        format!("`{}` failed ({why})", shown.join(" ")),
    )
}

/// Forgets the wiring: the state file and the backups.
fn clear(home: &Home) {
    let _ = fs::remove_file(state_file(home));
    let _ = fs::remove_dir_all(backups_dir(home));
    let _ = fs::remove_dir(dir(home));
}

pub(super) fn restore(home: &Home, env: &Env) -> Result<Report> {
    let mut report = Report::default();
    let Some(mut state) = State::load(home)? else {
        report.skipped = Some("nothing to restore: metaclaw has not wired any agent".into());
        return Ok(report);
    };
    let mut failures = Vec::new();
    for agent in state.agents.iter_mut().rev() {
        let mut kept = Vec::new();
        let mut changed = false;
        for file in agent.files.iter().rev() {
            match restore_file(file) {
                Ok(outcome) => {
                    changed = true;
                    report.files.push(FileOutcome {
                        claw: agent.claw.clone(),
                        ..outcome
                    });
                }
                Err(e) => {
                    failures.push(format!("{}: {e:#}", file.path.display()));
                    kept.push(file.clone());
                }
            }
        }
        kept.reverse();
        agent.files = kept;
        for command in agent.commands.iter().filter(|c| c.ok) {
            report.notes.push(format!(
                "{}: metaclaw ran `{}`, which it cannot undo exactly: {}",
                agent.claw,
                command.argv.join(" "),
                command.undo_hint
            ));
        }
        if (changed || agent.commands.iter().any(|c| c.ok))
            && let Some(service) = service_for(&agent.claw, env)
        {
            report.notes.push(format!(
                "{}: {}",
                agent.claw,
                procs::restart_if_running(env, &service)
            ));
        }
        agent.commands.clear();
    }
    state.agents.retain(|a| !a.files.is_empty());
    if state.agents.is_empty() {
        clear(home);
    } else {
        state.save(home)?;
    }
    if !failures.is_empty() {
        bail!(
            "could not restore {}; its backup is kept (see `metaclaw status`)",
            failures.join("; ")
        );
    }
    Ok(report)
}
