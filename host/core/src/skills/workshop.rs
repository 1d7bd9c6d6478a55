//! Offer, don't impose (`skills.deliver`): an evolved skill becomes a
//! proposal in OpenClaw's Skill Workshop, in OpenClaw's own format and
//! place, made by OpenClaw's own CLI (`openclaw skills workshop
//! propose-create|propose-update --json`), pending its owner's review. The
//! owner's verdict (`applied`, `rejected`, `quarantined`, `stale`) is read
//! back (`list --json`, `inspect --json` for the reason), kept in the
//! skill's history, and decides whether metaclaw injects the skill:
//!
//! - `inject`: nothing is offered (metaclaw's behaviour before this).
//! - `workshop`: an offered skill is held from turns until applied (the
//!   owner decides; no canary).
//! - `both`: injected from the start, and offered; held once rejected or
//!   quarantined.
//!
//! A skill of agent `a`'s layer goes to OpenClaw agent `a`'s Workshop, a
//! shared one to `skills.workshop.agent`'s. What is offered is recorded
//! (`store::proposals`) before its file is written, so a crash never
//! leaves a written skill unoffered, nor injects one that should wait.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use metaclaw_wire::Obj;
use metaclaw_wire::recorded::{ErrorBody, lenient};
use serde::Deserialize;
use serde_json::Value;

use super::skill::Skill;
use crate::clock::now_ms;
use crate::config::{Deliver, WorkshopConfig};
use crate::store::proposals::{self, Proposal};
use crate::store::skills::SkillChange;

/// How long one OpenClaw command may take (it starts node; 4–12 s on a
/// quiet machine).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// Why an offer could not be made to, or read back from, OpenClaw's
/// Skill Workshop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkshopError {
    #[error("the offered SKILL.md does not parse: {0}")]
    OfferUnparsed(super::skill::SkillError),
    #[error("cannot write the proposal: {0}")]
    Unwritten(String),
    #[error("OpenClaw's answer has no record id and status: {0}")]
    NoRecord(String),
    #[error("`{0}` took over {COMMAND_TIMEOUT:?}")]
    TimedOut(String),
    #[error("cannot run `{command}` (skills.workshop.command): {error}")]
    CannotRun { command: String, error: String },
    /// OpenClaw answered `{"ok": false, "error": {"message"}}`.
    #[error("`{command}`: {message}")]
    Refused { command: String, message: String },
    #[error("`{command}` exited {status}: {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{0}")]
    Store(String),
}

/// OpenClaw's states that end a proposal.
const DECIDED: &[&str] = &["applied", "rejected", "quarantined", "stale"];

pub struct Delivery {
    pub mode: Deliver,
    settings: WorkshopConfig,
    db: crate::store::Db,
    /// Each offered text's state, by its sha256 (the skill's
    /// `content_hash` once written).
    states: RwLock<HashMap<String, String>>,
    last_error: RwLock<Option<String>>,
    wake: tokio::sync::Notify,
}

/// `skills.deliver` in `status`: the mode, the offers by state, the last
/// error.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DeliveryStatus {
    pub mode: String,
    pub workshop_agent: Option<String>,
    pub proposals: Option<std::collections::BTreeMap<String, u64>>,
    pub last_error: Option<String>,
}

impl Delivery {
    /// The delivery `mode`, with the offers the store at `db` holds.
    pub fn new(mode: Deliver, settings: WorkshopConfig, db: crate::store::Db) -> Arc<Self> {
        let this = Arc::new(Self {
            mode,
            settings,
            db,
            states: RwLock::new(HashMap::new()),
            last_error: RwLock::new(None),
            wake: tokio::sync::Notify::new(),
        });
        if this.offers() {
            this.reload();
        }
        this
    }

    /// Whether evolved skills are offered to the Workshop.
    pub fn offers(&self) -> bool {
        self.mode != Deliver::Inject
    }

    /// Reads the offers' states again (after a publish, or another
    /// process's change).
    pub fn reload(&self) {
        if !self.db.exists() {
            return;
        }
        match self
            .db
            .read()
            .map_err(|e| format!("{e:#}"))
            .and_then(|c| proposals::all(&c).map_err(|e| e.to_string()))
        {
            Ok(all) => {
                if let Ok(mut states) = self.states.write() {
                    *states = all.into_iter().map(|p| (p.sha256, p.state)).collect();
                }
            }
            Err(e) => tracing::debug!("the Workshop offers were not read: {e}"),
        }
    }

    /// Whether turns may get `skill`: always, unless metaclaw offered this
    /// text and the mode waits for (`workshop`) or heeds (`both`) the
    /// owner's verdict.
    pub fn usable(&self, skill: &Skill) -> bool {
        if !self.offers() {
            return true;
        }
        let Ok(states) = self.states.read() else {
            return false;
        };
        match (
            self.mode,
            states.get(&skill.content_hash).map(String::as_str),
        ) {
            (_, None) | (Deliver::Inject, _) => true,
            (Deliver::Workshop, Some(state)) => state == "applied",
            (Deliver::Both, Some(state)) => !matches!(state, "rejected" | "quarantined"),
        }
    }

    /// Why `skill` is held by its delivery, if it is (for `skills list`).
    pub fn hold(&self, skill: &Skill) -> Option<String> {
        if self.usable(skill) {
            return None;
        }
        let state = self
            .states
            .read()
            .ok()
            .and_then(|s| s.get(&skill.content_hash).cloned())
            .unwrap_or_default();
        Some(format!(
            "held: offered to OpenClaw's Skill Workshop, {state}"
        ))
    }

    /// The OpenClaw agent whose Workshop gets skill `id`: its layer's agent
    /// (a team's agent by its name in the team: OpenClaw's ids have no
    /// team), else `skills.workshop.agent`.
    pub fn openclaw_agent(&self, id: &str) -> String {
        match super::layer::split(id).0.agent() {
            Some(agent) => agent.name().to_string(),
            None => self.settings.agent.clone(),
        }
    }

    /// Asks the daemon's task to propose what waits, now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// For `status`: the mode, the offers by state, the last error.
    pub fn status(&self) -> DeliveryStatus {
        let mut counts: std::collections::BTreeMap<String, u64> = proposals::STATES
            .iter()
            .map(|s| (s.to_string(), 0))
            .collect();
        if let Ok(states) = self.states.read() {
            for state in states.values() {
                if let Some(n) = counts.get_mut(state.as_str()) {
                    *n += 1;
                }
            }
        }
        DeliveryStatus {
            mode: self.mode.as_str().to_string(),
            workshop_agent: self.offers().then(|| self.settings.agent.clone()),
            proposals: self.offers().then_some(counts),
            last_error: self.last_error.read().ok().and_then(|e| e.clone()),
        }
    }

    /// Proposes what waits and reads the owner's verdicts, until
    /// cancelled: proposes when woken (a publish), reads verdicts every
    /// `skills.workshop.poll_every`.
    pub async fn run(self: Arc<Self>) {
        if !self.offers() {
            return;
        }
        let every = self.settings.poll_every.get();
        let mut next_poll = Instant::now();
        loop {
            let mut changed = self.propose_waiting().await;
            if Instant::now() >= next_poll {
                let decided = self.read_verdicts().await;
                next_poll = Instant::now() + every;
                if decided > 0 {
                    changed = true;
                    tracing::info!("{decided} Workshop proposal(s) decided by their owner");
                }
            }
            // Retrieval reads `usable` per turn: no new library generation
            // is needed for a state to take effect.
            if changed {
                self.reload();
            }
            let wait = next_poll.saturating_duration_since(Instant::now());
            let _ = tokio::time::timeout(wait, self.wake.notified()).await;
        }
    }

    /// Proposes every `to_offer` text; true if any moved.
    async fn propose_waiting(&self) -> bool {
        let waiting: Vec<Proposal> = match self.offers_in(&["to_offer"]) {
            Ok(all) => all,
            Err(e) => {
                self.set_error(Some(e.to_string()));
                return false;
            }
        };
        let mut moved = false;
        for offer in waiting {
            let result = self.propose(&offer).await;
            let at = now_ms();
            let recorded = self.with_store(|conn| match &result {
                Ok((id, state)) => {
                    proposals::set_state(conn, &offer.sha256, state, Some(id), None, at)?;
                    note(
                        conn,
                        &offer,
                        "offered",
                        &format!(
                            "proposed to OpenClaw agent {}'s Skill Workshop as {id} ({state})",
                            offer.openclaw_agent
                        ),
                    )?;
                    Ok(())
                }
                Err(why) => {
                    let state = proposals::failed_try(conn, &offer.sha256, &why.to_string(), at)?;
                    if state == "failed" {
                        note(
                            conn,
                            &offer,
                            "offer-failed",
                            &format!("OpenClaw refused the proposal: {why}"),
                        )?;
                    }
                    Ok(())
                }
            });
            match (&result, recorded) {
                (_, Err(e)) => self.set_error(Some(e.to_string())),
                (Ok((id, _)), Ok(())) => {
                    moved = true;
                    tracing::info!(skill = %offer.skill_id, proposal = %id, "offered to OpenClaw's Skill Workshop");
                    self.set_error(None);
                }
                (Err(why), Ok(())) => {
                    moved = true;
                    tracing::warn!(skill = %offer.skill_id, "OpenClaw's Skill Workshop did not take the proposal: {why}");
                    self.set_error(Some(why.to_string()));
                }
            }
        }
        moved
    }

    /// One `propose-create` (or `propose-update`, when an earlier text was
    /// applied there): OpenClaw's proposal id and state.
    async fn propose(&self, offer: &Proposal) -> Result<(String, String), WorkshopError> {
        let (_, name) = super::layer::split(&offer.skill_id);
        let parsed =
            super::skill::parse_text(&offer.content).map_err(WorkshopError::OfferUnparsed)?;
        let update = self
            .with_store(|c| {
                Ok(proposals::applied_before(
                    c,
                    &offer.skill_id,
                    &offer.openclaw_agent,
                )?)
            })
            .unwrap_or(false);
        let folder = std::env::temp_dir().join(format!(
            "metaclaw-proposal-{}-{}",
            std::process::id(),
            &offer.sha256[..16]
        ));
        let unwritten = |e: std::io::Error| WorkshopError::Unwritten(e.to_string());
        std::fs::create_dir_all(&folder).map_err(unwritten)?;
        let file = folder.join("PROPOSAL.md");
        std::fs::write(&file, &offer.content).map_err(unwritten)?;
        let file_arg = file.to_string_lossy().into_owned();
        let mut args: Vec<String> = vec!["skills".into(), "workshop".into()];
        if update {
            args.extend(["propose-update".into(), name.to_string()]);
        } else {
            args.extend(["propose-create".into(), "--name".into(), name.to_string()]);
        }
        args.extend([
            "--agent".into(),
            offer.openclaw_agent.clone(),
            "--description".into(),
            parsed.description.clone(),
            "--evidence".into(),
            format!(
                "Learned by metaclaw from this agent's sessions ({}, version {}).",
                offer.skill_id,
                offer.version.as_deref().unwrap_or("?")
            ),
            "--proposal".into(),
            file_arg,
            "--json".into(),
        ]);
        let out = self.openclaw(&args).await;
        let _ = std::fs::remove_dir_all(&folder);
        let json = out?;
        match Record::of(&json) {
            Record {
                id: Some(id),
                status: Some(state),
                ..
            } => Ok((id, state)),
            _ => Err(WorkshopError::NoRecord(crate::untrusted::log_line(
                &json.to_string(),
                300,
            ))),
        }
    }

    /// Reads the state of every pending proposal, agent by agent; records
    /// each decided one. Returns how many were decided.
    async fn read_verdicts(&self) -> usize {
        let pending = match self.offers_in(&["pending"]) {
            Ok(p) => p,
            Err(e) => {
                self.set_error(Some(e.to_string()));
                return 0;
            }
        };
        let mut agents: Vec<&str> = pending.iter().map(|p| p.openclaw_agent.as_str()).collect();
        agents.sort_unstable();
        agents.dedup();
        let mut decided = 0;
        for agent in agents {
            let args = ["skills", "workshop", "list", "--agent", agent, "--json"].map(String::from);
            let listed = match self.openclaw(&args).await {
                Ok(json) => json,
                Err(why) => {
                    self.set_error(Some(why.to_string()));
                    continue;
                }
            };
            let states: HashMap<String, String> = Listed::of(&listed)
                .proposals
                .into_iter()
                .filter_map(|p| {
                    let record = p.0?;
                    Some((record.id?, record.status?))
                })
                .collect();
            for offer in pending.iter().filter(|p| p.openclaw_agent == agent) {
                let Some(id) = offer.proposal_id.as_deref() else {
                    continue;
                };
                let Some(state) = states.get(id).map(String::as_str) else {
                    continue;
                };
                if !DECIDED.contains(&state) {
                    continue;
                }
                let reason = match state {
                    "applied" => None,
                    _ => self.reason_of(agent, id).await,
                };
                let at = now_ms();
                let why = match (&reason, state) {
                    (Some(r), _) => format!("the owner {state} OpenClaw proposal {id}: {r}"),
                    (None, "stale") => {
                        format!("OpenClaw marked proposal {id} stale (its skill changed there)")
                    }
                    (None, _) => format!("the owner {state} OpenClaw proposal {id}"),
                };
                let recorded = self.with_store(|conn| {
                    if proposals::set_state(
                        conn,
                        &offer.sha256,
                        state,
                        None,
                        reason.as_deref(),
                        at,
                    )? {
                        note(conn, offer, &format!("workshop:{state}"), &why)?;
                    }
                    Ok(())
                });
                match recorded {
                    Ok(()) => {
                        decided += 1;
                        tracing::info!(skill = %offer.skill_id, proposal = %id, "{why}");
                    }
                    Err(e) => self.set_error(Some(e.to_string())),
                }
            }
        }
        decided
    }

    /// The owner's reason for a rejection or quarantine (`inspect`).
    async fn reason_of(&self, agent: &str, id: &str) -> Option<String> {
        let args = [
            "skills", "workshop", "inspect", id, "--agent", agent, "--json",
        ]
        .map(String::from);
        let json = self.openclaw(&args).await.ok()?;
        Record::of(&json)
            .status_reason
            .map(|r| crate::untrusted::log_line(&r, 500))
    }

    /// Runs OpenClaw's CLI with `args`; its JSON answer, or why there is
    /// none (OpenClaw's own `{"ok": false, "error": {"message"}}` read).
    async fn openclaw(&self, args: &[String]) -> Result<Value, WorkshopError> {
        let mut command = tokio::process::Command::new(&self.settings.command);
        command
            .args(args)
            .env("OPENCLAW_NO_AUTO_UPDATE", "1")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(dir) = &self.settings.state_dir {
            command.env("OPENCLAW_STATE_DIR", crate::home::expand_home(dir));
        }
        let shown = format!("{} {}", self.settings.command, args[..3].join(" "));
        let out = tokio::time::timeout(COMMAND_TIMEOUT, command.output())
            .await
            .map_err(|_| WorkshopError::TimedOut(shown.clone()))?
            .map_err(|e| WorkshopError::CannotRun {
                command: shown.clone(),
                error: e.to_string(),
            })?;
        let json: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        let said = json
            .as_ref()
            .and_then(Obj::<Said>::read)
            .unwrap_or_default();
        let refused = said.error.0.and_then(|e| e.message);
        match (json, refused) {
            (Some(json), _) if out.status.success() && said.ok != Some(false) => Ok(json),
            (Some(_), Some(message)) => Err(WorkshopError::Refused {
                command: shown,
                message: crate::untrusted::log_line(&message, 300),
            }),
            _ => Err(WorkshopError::Failed {
                command: shown,
                status: out.status.to_string(),
                stderr: crate::untrusted::log_line(&String::from_utf8_lossy(&out.stderr), 300),
            }),
        }
    }

    fn offers_in(&self, states: &[&str]) -> Result<Vec<Proposal>, WorkshopError> {
        self.with_store(|c| {
            Ok(proposals::all(c)?
                .into_iter()
                .filter(|p| states.contains(&p.state.as_str()))
                .collect())
        })
    }

    fn with_store<T>(
        &self,
        f: impl FnOnce(&crate::store::sql::Conn) -> anyhow::Result<T>,
    ) -> Result<T, WorkshopError> {
        let store = |e: anyhow::Error| WorkshopError::Store(format!("{e:#}"));
        let conn = self.db.side_writer().map_err(store)?;
        f(&conn).map_err(store)
    }

    fn set_error(&self, error: Option<String>) {
        if let Ok(mut last) = self.last_error.write() {
            *last = error;
        }
    }
}

/// An entry in the skill's history (`skills history`).
fn note(
    conn: &crate::store::sql::Conn,
    offer: &Proposal,
    change: &str,
    why: &str,
) -> crate::store::sql::Result<()> {
    crate::store::skills::note(
        conn,
        &SkillChange {
            skill_id: offer.skill_id.clone(),
            change: change.into(),
            version: offer.version.clone(),
            content_hash: Some(offer.sha256.clone()),
            who: format!("openclaw-workshop:{}", offer.openclaw_agent),
            why: why.into(),
            generation: 0,
            at_ms: now_ms(),
        },
    )
}

/// What metaclaw reads of an OpenClaw `--json` answer: whether it says
/// it failed (`ok: false`), and why.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Said {
    #[serde(deserialize_with = "lenient")]
    ok: Option<bool>,
    error: Obj<ErrorBody>,
}

/// A proposal's record (`propose-* --json`, `inspect --json`): each field
/// none when absent or not a string.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Record {
    #[serde(deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    status: Option<String>,
    #[serde(rename = "statusReason", deserialize_with = "lenient")]
    status_reason: Option<String>,
}

impl Record {
    /// `answer.record`.
    fn of(answer: &Value) -> Self {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Answer {
            record: Obj<Record>,
        }
        Obj::<Answer>::read(answer)
            .and_then(|a| a.record.0)
            .unwrap_or_default()
    }
}

/// `list --json`: the agent's proposals (one that is not an object: none).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Listed {
    #[serde(deserialize_with = "lenient")]
    proposals: Vec<Obj<Record>>,
}

impl Listed {
    fn of(answer: &Value) -> Self {
        Obj::read(answer).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openclaw_answers_are_read_as_the_key_lookups_read_them() {
        let r = Record::of(
            &json!({"record": {"id": "p1", "status": "pending", "statusReason": "dup"}}),
        );
        assert_eq!(
            (
                r.id.as_deref(),
                r.status.as_deref(),
                r.status_reason.as_deref()
            ),
            (Some("p1"), Some("pending"), Some("dup"))
        );
        // A field of another shape is none, the others still read.
        let odd = Record::of(&json!({"record": {"id": 7, "status": "applied"}}));
        assert_eq!((odd.id, odd.status.as_deref()), (None, Some("applied")));
        // A list is not a record, nor is a list of them an answer.
        assert!(
            Record::of(&json!({"record": ["p1", "pending"]}))
                .status
                .is_none()
        );
        assert!(Record::of(&json!([{"record": {"id": "p1"}}])).id.is_none());

        let listed = Listed::of(
            &json!({"proposals": [{"id": "a", "status": "applied"}, 3, ["b", "x"], {"id": "c"}]}),
        );
        let read: Vec<(Option<String>, Option<String>)> = listed
            .proposals
            .into_iter()
            .map(|p| p.0.map_or((None, None), |r| (r.id, r.status)))
            .collect();
        assert_eq!(
            read,
            [
                (Some("a".into()), Some("applied".into())),
                (None, None),
                (None, None),
                (Some("c".into()), None)
            ]
        );
        assert!(
            Listed::of(&json!({"proposals": {"id": "a"}}))
                .proposals
                .is_empty()
        );

        let said = Obj::<Said>::read(&json!({"ok": false, "error": {"message": "no such agent"}}))
            .unwrap_or_default();
        assert_eq!(said.ok, Some(false));
        assert_eq!(
            said.error.0.and_then(|e| e.message).as_deref(),
            Some("no such agent")
        );
        let said = Obj::<Said>::read(&json!({"ok": "false", "error": "x"})).unwrap_or_default();
        assert_eq!(said.ok, None);
        assert!(said.error.0.is_none());
    }
}
