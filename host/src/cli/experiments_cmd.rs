//! `experiments list | show`: the canaries, read straight from the store
//! (daemon or not): each candidate, its arms' sessions and rewards, the
//! estimate with its interval, and the decision or why there is none yet.
//! `experiments promote | rollback ID`: the user's decision, and
//! `experiments start SKILL`: a skill the user opts in, taken by the
//! running daemon (it serves the skills and holds the library).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::sessions_cmd::db_path;
use super::{ExperimentsCommand, load_config, local_time, runtime};
use metaclaw_core::admin::AdminClient;
use metaclaw_core::home::Home;
use metaclaw_core::store::experiments;

pub fn run(home: &Home, config_path: &Path, command: ExperimentsCommand) -> Result<ExitCode> {
    match command {
        // The daemon starts and decides: the turn path serves the arms, and
        // it holds the library.
        ExperimentsCommand::Start { skill } => start(home, &skill),
        ExperimentsCommand::Promote { id, reason } => decide(home, id, "promote", reason),
        ExperimentsCommand::Rollback { id, reason } => decide(home, id, "rollback", reason),
        ExperimentsCommand::List { agent, json, limit } => {
            let Some(store) = Recorded::open(home, config_path)? else {
                say!(
                    "{}",
                    if json {
                        "[]"
                    } else {
                        "no canaries yet (nothing recorded)"
                    }
                );
                return Ok(ExitCode::SUCCESS);
            };
            list(&store, agent, json, limit)
        }
        ExperimentsCommand::Show { id, json } => {
            let Some(store) = Recorded::open(home, config_path)? else {
                bail!("no experiment {id}: nothing recorded yet")
            };
            show(&store, id, json)
        }
    }
}

/// What the daemon answers about an experiment it started or decided.
#[derive(serde::Deserialize)]
struct Answered {
    experiment: Brief,
    /// `start`: it was under test already.
    #[serde(default)]
    already: bool,
}

#[derive(serde::Deserialize)]
struct Brief {
    id: i64,
    subject: Option<String>,
    version: Option<String>,
    state: Option<String>,
    reason: Option<String>,
}

fn answered(reply: serde_json::Value) -> Result<Answered> {
    serde_json::from_value(reply).context("the daemon's answer is not an experiment")
}

/// `experiments start SKILL`.
fn start(home: &Home, skill: &str) -> Result<ExitCode> {
    let admin = AdminClient::connect(home)?;
    let body = json!({ "skill": skill });
    let reply = answered(runtime()?.block_on(admin.post_json("/admin/experiments/start", &body))?)?;
    let e = &reply.experiment;
    say!(
        "experiment {} ({}@{}): {}{}",
        e.id,
        e.subject.as_deref().unwrap_or("?"),
        e.version.as_deref().unwrap_or("?"),
        e.state.as_deref().unwrap_or("?"),
        if reply.already {
            " (it was under test already)"
        } else {
            ""
        }
    );
    say!("see it with `metaclaw experiments show {}`", e.id);
    Ok(ExitCode::SUCCESS)
}

/// `experiments promote | rollback ID`.
fn decide(home: &Home, id: i64, decision: &str, reason: Option<String>) -> Result<ExitCode> {
    let admin = AdminClient::connect(home)?;
    let body = json!({ "decision": decision, "reason": reason });
    let reply = answered(
        runtime()?.block_on(admin.post_json(&format!("/admin/experiments/{id}/decide"), &body))?,
    )?;
    let e = &reply.experiment;
    say!(
        "experiment {id} ({}@{}): {} — {}",
        e.subject.as_deref().unwrap_or("?"),
        e.version.as_deref().unwrap_or("?"),
        e.state.as_deref().unwrap_or("?"),
        e.reason.as_deref().unwrap_or("")
    );
    Ok(ExitCode::SUCCESS)
}

/// The canaries as recorded, read straight from the store.
struct Recorded {
    conn: metaclaw_core::store::sql::Conn,
    settings: metaclaw_core::config::CanaryConfig,
}

impl Recorded {
    /// `None` when nothing is recorded yet. Says which canaries are off.
    fn open(home: &Home, config_path: &Path) -> Result<Option<Self>> {
        let loaded = load_config(config_path)?;
        let settings = loaded.config.canary.clone();
        if !settings.skills {
            eprintln!("note: canary.skills is off: evolved skills serve every session at once");
        }
        if !settings.weights && loaded.config.serves_student() {
            eprintln!(
                "note: canary.weights is off: a train step's weights serve every session at once"
            );
        }
        let db = db_path(home, config_path);
        if !db.exists() {
            return Ok(None);
        }
        Ok(Some(Self {
            conn: db.read()?,
            settings,
        }))
    }

    fn view(&self, e: &experiments::Experiment) -> Result<metaclaw_core::learn::canary::Shown> {
        metaclaw_core::learn::canary::shown(&self.conn, e.clone(), &self.settings)
    }
}

/// `experiments list`.
fn list(
    store: &Recorded,
    agent: Option<metaclaw_core::agent_id::AgentId>,
    json: bool,
    limit: u32,
) -> Result<ExitCode> {
    let rows = match agent {
        None => experiments::list(&store.conn, limit)?,
        Some(agent) => experiments::list_of_agent(&store.conn, agent.as_str(), limit)?,
    };
    if json {
        let views: Vec<_> = rows.iter().map(|e| store.view(e)).collect::<Result<_>>()?;
        say!("{}", serde_json::to_string_pretty(&views)?);
    } else if rows.is_empty() {
        say!("no canaries yet: an evolved skill becomes one when it is written");
    } else {
        say!(
            "{:>4}  {:<11} {:<32} {:>9}  {:>7}  {:>8}  decision or state",
            "id",
            "state",
            "what is tested",
            "judged",
            "effect",
            "started"
        );
        for e in &rows {
            let ev = store.view(e)?.evidence;
            let effect = ev
                .effect
                .map(|x| format!("{x:+.2}"))
                .unwrap_or_else(|| "-".into());
            say!(
                "{:>4}  {:<11} {:<32} {:>4}/{:<4}  {:>7}  {}  {}",
                e.id,
                e.state,
                e.label(),
                ev.candidate_sessions,
                ev.control_sessions,
                effect,
                local_time(e.started_ms),
                e.reason.as_deref().unwrap_or(&ev.reason)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `experiments show ID`.
fn show(store: &Recorded, id: i64, json: bool) -> Result<ExitCode> {
    let Some(e) = experiments::get(&store.conn, id)? else {
        bail!("no experiment {id} (see `metaclaw experiments list`)");
    };
    let shown = store.view(&e)?;
    if json {
        say!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    say!("experiment {}: {} {}", e.id, e.kind, e.label());
    say!("  state:     {}", e.state);
    say!("  from:      {} at {}", e.origin, local_time(e.started_ms));
    say!(
        "  arms:      {:.0} % of sessions get it, {:.0} % go without (the control)",
        e.share * 100.0,
        e.share * 100.0
    );
    let (ev, met_candidate, met_control) = (
        &shown.evidence,
        shown.sessions.candidate,
        shown.sessions.control,
    );
    let mean = |m: Option<f64>| m.map(|x| format!("{x:+.2}")).unwrap_or_else(|| "-".into());
    say!(
        "  with:      {met_candidate} session(s), {} judged, mean reward {}",
        ev.candidate_sessions,
        mean(ev.candidate_mean)
    );
    say!(
        "  without:   {met_control} session(s), {} judged, mean reward {}",
        ev.control_sessions,
        mean(ev.control_mean)
    );
    if let (Some(effect), Some((lo, hi))) = (ev.effect, ev.interval) {
        say!(
            "  effect:    {effect:+.2} over {} pairs (95 % interval {lo:+.2} to {hi:+.2})",
            ev.pairs
        );
    }
    say!(
        "  evidence:  better {:.2}, worse {:.2}; a decision at {:.0} (1/δ)",
        ev.wealth_better,
        ev.wealth_worse,
        ev.threshold
    );
    match (&e.decided_ms, &e.reason) {
        (Some(at), Some(reason)) => say!(
            "  decided:   {} by {} at {}: {reason}",
            e.state,
            e.decided_by.as_deref().unwrap_or("?"),
            local_time(*at)
        ),
        _ => say!("  now:       {}", ev.reason),
    }
    Ok(ExitCode::SUCCESS)
}
