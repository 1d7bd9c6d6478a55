//! Wiring the user's agent ("claw") to the proxy, and giving its config back.
//!
//! `metaclaw start` points the agent's LLM settings at the proxy; `metaclaw
//! stop --restore` (or `uninstall`) puts every file back byte for byte. The
//! rules every agent follows:
//!
//! - a file is backed up (its exact bytes, or "did not exist") before the
//!   first change, and the backup is kept until the file is restored: wiring
//!   again (new port, new model) updates the file and keeps the original;
//! - only the keys named in each agent's module are changed; everything else
//!   in the file is kept (values always; layout and comments where the
//!   format's editor allows it — the TOML and `.env` editors keep them);
//! - wiring that finds the file already pointing at the proxy writes nothing;
//! - restore never silently drops a change it did not make: a file edited
//!   after wiring is first copied beside itself as
//!   `<file>.metaclaw-replaced-<time>`;
//! - an agent's gateway or service is restarted only if it is running.
//!
//! State lives in `<home>/claws/state.json`, backups in `<home>/claws/backups/`.

mod copaw;
mod dotenv;
mod files;
mod hermes;
mod ironclaw;
mod nanoclaw;
mod nemoclaw;
mod openclaw;
mod picoclaw;
mod procs;
mod state;
mod zeroclaw;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::digest::sha256_hex;
use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::config::ClawType;
use crate::home::Home;

pub use files::{Finding, check_file};
pub use state::{AgentRecord, CommandRecord, FileRecord, State};

/// The API key written into agent configs when the proxy needs none.
pub const LOCAL_KEY: &str = "metaclaw-local";

/// Where the agent should send its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The proxy, `http://127.0.0.1:PORT`, without `/v1`.
    pub base_url: String,
    pub api_key: String,
    pub model: String,
    /// Advertised to agents that take one; 0 = the agent's default (or 128000).
    pub context_window: u64,
}

impl Target {
    fn base(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
    /// The OpenAI-compatible base URL.
    fn v1(&self) -> String {
        format!("{}/v1", self.base())
    }
    /// Identifies a target in the state without storing the key.
    fn fingerprint(&self) -> String {
        sha256_hex(
            format!(
                "{}\n{}\n{}\n{}",
                self.base(),
                self.api_key,
                self.model,
                self.context_window
            )
            .as_bytes(),
        )
    }
}

/// What the agents see: the user's home and the variables they honour. Tests
/// build one around a temporary home with no PATH, so nothing real is run.
#[derive(Debug, Clone)]
pub struct Env {
    pub home_dir: PathBuf,
    vars: BTreeMap<String, String>,
    /// Where commands are looked up (PATH).
    pub path: Vec<PathBuf>,
    /// Scanned for running gateways (`/proc`).
    pub proc_dir: PathBuf,
}

/// Variables that move an agent's files.
const AGENT_VARS: &[&str] = &[
    "OPENCLAW_CONFIG_PATH",
    "OPENCLAW_STATE_DIR",
    "HERMES_HOME",
    "COPAW_SECRET_DIR",
    "COPAW_WORKING_DIR",
    "XDG_CONFIG_HOME",
];

impl Env {
    /// This process's environment: `$HOME`, the agents' variables, `$PATH`.
    pub fn from_process() -> Result<Self> {
        let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) else {
            bail!("HOME is not set, so the agent's config cannot be found");
        };
        let vars = AGENT_VARS
            .iter()
            .filter_map(|k| {
                std::env::var(k)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .map(|v| (k.to_string(), v))
            })
            .collect();
        let path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        Ok(Self {
            home_dir: PathBuf::from(home),
            vars,
            path,
            proc_dir: PathBuf::from("/proc"),
        })
    }

    /// Only `home_dir`: no variables, no commands, no processes.
    pub fn isolated(home_dir: impl Into<PathBuf>) -> Self {
        let home_dir = home_dir.into();
        let proc_dir = home_dir.join(".metaclaw-no-proc");
        Self {
            home_dir,
            vars: BTreeMap::new(),
            path: Vec::new(),
            proc_dir,
        }
    }

    pub fn with_var(mut self, name: &str, value: impl Into<String>) -> Self {
        self.vars.insert(name.to_string(), value.into());
        self
    }

    pub fn with_path(mut self, dirs: Vec<PathBuf>) -> Self {
        self.path = dirs;
        self
    }

    pub fn with_proc_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.proc_dir = dir.into();
        self
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// `~/x` → `<home>/x`; other paths as they are.
    fn expand(&self, path: &str) -> PathBuf {
        match path.strip_prefix("~/") {
            Some(rest) => self.home_dir.join(rest),
            None if path == "~" => self.home_dir.clone(),
            None => PathBuf::from(path),
        }
    }

    /// The variables passed to the agents' own commands, so they act on the
    /// same files metaclaw edited.
    fn command_env(&self) -> Vec<(OsString, OsString)> {
        let mut out = vec![(OsString::from("HOME"), self.home_dir.clone().into())];
        out.extend(
            self.vars
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        out
    }
}

/// The name metaclaw (and the config) uses for an agent.
pub fn claw_name(claw: &ClawType) -> &'static str {
    match claw {
        ClawType::Openclaw => "openclaw",
        ClawType::Hermes => "hermes",
        ClawType::Copaw => "copaw",
        ClawType::Ironclaw => "ironclaw",
        ClawType::Zeroclaw => "zeroclaw",
        ClawType::Picoclaw => "picoclaw",
        ClawType::Nanoclaw => "nanoclaw",
        ClawType::Nemoclaw => "nemoclaw",
        ClawType::None => "none",
    }
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Wired; the file did not exist before.
    Created,
    /// Wired; the original is in the backup.
    Updated,
    /// Already pointing at the proxy: nothing written.
    Unchanged,
    /// The original bytes are back.
    Restored,
    /// The file did not exist before wiring, and is gone again.
    Removed,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileOutcome {
    pub claw: String,
    pub path: PathBuf,
    pub action: Action,
    /// Where the original is kept while wired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
    /// A version metaclaw did not write, copied here before it was replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<PathBuf>,
}

/// What `wire` or `restore` did, for people (`lines`) and for `--json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub files: Vec<FileOutcome>,
    /// Restarts, skipped steps, things that could not be undone.
    pub notes: Vec<String>,
    /// Set when nothing was attempted, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Report {
    /// Did anything change on disk?
    pub fn changed(&self) -> bool {
        self.files.iter().any(|f| f.action != Action::Unchanged)
    }

    /// One line per file and note; paths under `home_dir` as `~/…`.
    pub fn lines(&self, home_dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(why) = &self.skipped {
            out.push(why.clone());
        }
        for f in &self.files {
            let path = tilde(&f.path, home_dir);
            let line = match f.action {
                Action::Created => format!(
                    "wired {}: {path} (created; it did not exist, restore removes it)",
                    f.claw
                ),
                Action::Updated => match &f.backup {
                    Some(b) => format!("wired {}: {path} (backup {})", f.claw, tilde(b, home_dir)),
                    None => format!("wired {}: {path}", f.claw),
                },
                Action::Unchanged => format!("{}: {path} already points at metaclaw", f.claw),
                Action::Restored => format!("restored {}: {path}", f.claw),
                Action::Removed => format!(
                    "restored {}: removed {path} (metaclaw had created it)",
                    f.claw
                ),
            };
            out.push(line);
            if let Some(aside) = &f.set_aside {
                out.push(format!(
                    "  {path} had been changed since metaclaw wrote it; that version is kept at {}",
                    tilde(aside, home_dir)
                ));
            }
        }
        out.extend(self.notes.iter().cloned());
        out
    }
}

/// `path` with `home_dir` shown as `~`.
pub fn tilde(path: &Path, home_dir: &Path) -> String {
    match path.strip_prefix(home_dir) {
        Ok(rest) if !home_dir.as_os_str().is_empty() => format!("~/{}", rest.display()),
        _ => path.display().to_string(),
    }
}

/// The edit of one file: from its current bytes (`None`: it does not exist)
/// to the wired bytes, or `None` when it already says what it should.
type Edit = Box<dyn Fn(Option<&[u8]>) -> Result<Option<Vec<u8>>>>;

struct PlannedFile {
    path: PathBuf,
    edit: Edit,
    /// The file is metaclaw's alone (e.g. CoPaw's `providers/custom/metaclaw.json`):
    /// restore removes it even if the agent rewrote it.
    owned: bool,
}

type ProcessMatch = Box<dyn Fn(u32, &[String]) -> bool>;

/// How to tell whether an agent's long-running part is up, and restart it.
struct Service {
    /// For people: "the OpenClaw gateway".
    name: &'static str,
    /// Matches a running process by pid and argv.
    process: Option<ProcessMatch>,
    /// A systemd user unit that, when active, means it runs.
    systemd_unit: Option<&'static str>,
    restart: Vec<String>,
    timeout: Duration,
    /// Said after a restart (or instead of one) when the agent needs more.
    after: Option<&'static str>,
}

/// A command that changes the agent's state outside files (NemoClaw's
/// `openshell`); recorded so restore can say what it could not undo.
struct PlannedCommand {
    /// Alternatives: the first that succeeds counts (`create`, else `update`).
    argvs: Vec<Vec<String>>,
    /// The key in the argv, hidden in the state and the report.
    secret: Option<String>,
    timeout: Duration,
    undo_hint: String,
}

struct Plan {
    files: Vec<PlannedFile>,
    commands: Vec<PlannedCommand>,
    service: Option<Service>,
    notes: Vec<String>,
}

enum Located {
    Plan(Plan),
    /// The agent is not set up here; nothing to do.
    Skip(String),
}

fn plan_for(claw: &ClawType, target: &Target, env: &Env) -> Result<Located> {
    match claw {
        ClawType::Openclaw => openclaw::plan(target, env),
        ClawType::Hermes => hermes::plan(target, env),
        ClawType::Copaw => copaw::plan(target, env),
        ClawType::Ironclaw => ironclaw::plan(target, env),
        ClawType::Zeroclaw => zeroclaw::plan(target, env),
        ClawType::Picoclaw => picoclaw::plan(target, env),
        ClawType::Nanoclaw => nanoclaw::plan(target, env),
        ClawType::Nemoclaw => nemoclaw::plan(target, env),
        ClawType::None => Ok(Located::Skip(
            "claw_type is none: no agent to wire".to_string(),
        )),
    }
}

fn service_for(claw: &str, env: &Env) -> Option<Service> {
    match claw {
        "openclaw" | "nemoclaw" => Some(openclaw::service()),
        "hermes" => Some(hermes::service()),
        "copaw" => Some(copaw::service()),
        "ironclaw" => Some(ironclaw::service()),
        "zeroclaw" => Some(zeroclaw::service()),
        "picoclaw" => Some(picoclaw::service()),
        "nanoclaw" => Some(nanoclaw::service(env)),
        _ => None,
    }
}

/// Points `claw` at `target`. Idempotent; see the module docs for the rules.
/// On an error every file touched by this call is put back as it was.
pub fn wire(home: &Home, claw: &ClawType, target: &Target, env: &Env) -> Result<Report> {
    let name = claw_name(claw);
    if target.model.trim().is_empty() {
        bail!("no model to wire {name} to: set llm.model_id");
    }
    let plan = match plan_for(claw, target, env)? {
        Located::Skip(why) => {
            return Ok(Report {
                skipped: Some(why),
                ..Report::default()
            });
        }
        Located::Plan(plan) => plan,
    };
    state::wire(home, name, plan, target, env)
}

/// Puts back every file metaclaw wired, for every agent, and clears the state.
pub fn restore(home: &Home, env: &Env) -> Result<Report> {
    state::restore(home, env)
}

/// What is wired now, if anything.
pub fn state(home: &Home) -> Option<State> {
    State::load(home)
        .ok()
        .flatten()
        .filter(|s| !s.agents.is_empty())
}

/// Reads a file; `None` if it does not exist.
fn read_opt(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Text of a config file; `None` when it does not exist or is only whitespace.
fn text_of(current: Option<&[u8]>, path: &Path) -> Result<Option<String>> {
    let Some(bytes) = current else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes.to_vec())
        .with_context(|| format!("{} is not UTF-8 text", path.display()))?;
    Ok((!text.trim().is_empty()).then_some(text))
}

/// Sets `value` at `keys` in a JSON object tree, creating objects on the way.
/// Fails (naming the key) if something on the way is not an object.
fn json_set(
    root: &mut serde_json::Value,
    keys: &[&str],
    value: serde_json::Value,
    file: &Path,
) -> Result<()> {
    let mut node = root;
    for (i, key) in keys.iter().enumerate() {
        let Some(obj) = node.as_object_mut() else {
            bail!(
                "{}: `{}` is not an object, so metaclaw cannot set `{}`; fix the file or set claw_type: none",
                file.display(),
                if i == 0 {
                    "(top level)".to_string()
                } else {
                    keys[..i].join(".")
                },
                keys.join(".")
            );
        };
        if i + 1 == keys.len() {
            obj.insert((*key).to_string(), value);
            return Ok(());
        }
        node = obj
            .entry((*key).to_string())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
    }
    Ok(())
}

/// Pretty JSON as agents write it: two-space indent, final newline.
fn pretty_json(value: &serde_json::Value) -> Result<Vec<u8>> {
    let mut out = serde_json::to_vec_pretty(value)?;
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests;
