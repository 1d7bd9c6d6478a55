//! Canaries of evolved skills, applied: a skill the publish stage writes
//! starts as a candidate (`start`), and after each judged session every
//! candidate's test is run again on the store's rewards (`decide_all`):
//! promoted, it serves everyone; rolled back, it leaves retrieval with
//! `retired: canary: …` in its SKILL.md and `retired:canary` in its
//! history; undecided past `canary.max_duration`, `canary.on_timeout`
//! says which. The rule: `canary::decide`; docs/learning.md "Canaries".

use anyhow::Result;
use rusqlite::Connection;

use crate::canary::decide::{self, Evidence, Rule, Verdict};
use crate::clock::now_ms;
use crate::config::{CanaryConfig, CanaryTimeout};
use crate::skills::Skills;
use crate::store::experiments::{self, Experiment};
use crate::store::skills::Attribution;

/// Who a canary's rollback is in a skill's history.
pub const WHO: &str = "retired:canary";

/// Starts the test of `version` of skill `id` (with `canary.skills` on and
/// a version to test) and tells the turn path; its id.
pub fn start(
    skills: &Skills,
    conn: &Connection,
    id: &str,
    version: Option<&str>,
    origin: &str,
) -> Result<Option<i64>> {
    let (Some(settings), Some(version)) = (&skills.settings.canary, version) else {
        return Ok(None);
    };
    let experiment = experiments::start_skill(conn, id, version, settings.share, origin, now_ms())?;
    skills.canaries.reload(conn)?;
    tracing::info!(skill = %id, version, experiment, "a candidate under test (canary)");
    Ok(Some(experiment))
}

/// The skill was not written after all: its test ends unstarted.
pub fn abandon(skills: &Skills, conn: &Connection, experiment: i64, why: &str) -> Result<()> {
    let why = format!("the skill was not written: {why}");
    experiments::decide(conn, experiment, "abandoned", "test", &why, now_ms())?;
    skills.canaries.reload(conn)?;
    Ok(())
}

fn rule(settings: &CanaryConfig) -> Rule {
    Rule {
        delta: settings.delta,
        min_sessions: settings.min_sessions as usize,
    }
}

/// The test's evidence for one experiment, from the store.
pub fn evidence(conn: &Connection, e: &Experiment, settings: &CanaryConfig) -> Result<Evidence> {
    let (candidate, control) = experiments::arm_rewards(conn, e.id)?;
    Ok(decide::decide(&candidate, &control, rule(settings)))
}

/// One experiment as the CLI and the dashboard show it: its record, the
/// sessions that met each arm (judged or not), and the test's evidence.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shown {
    pub experiment: Experiment,
    pub sessions: ArmSessions,
    pub evidence: Evidence,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ArmSessions {
    pub candidate: i64,
    pub control: i64,
}

pub fn shown(conn: &Connection, e: Experiment, settings: &CanaryConfig) -> Result<Shown> {
    let evidence = evidence(conn, &e, settings)?;
    let (candidate, control) = experiments::arm_sessions(conn, e.id)?;
    Ok(Shown {
        experiment: e,
        sessions: ArmSessions { candidate, control },
        evidence,
    })
}

/// What became of one candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub experiment: i64,
    pub skill: String,
    /// `promoted` or `rolled_back`.
    pub state: &'static str,
    pub reason: String,
}

/// Runs every skill candidate's test again and applies the decisions
/// (blocking: it may write SKILL.md files). A candidate whose file cannot
/// be retired stays under test (the next session tries again).
pub fn decide_all(skills: &Skills, conn: &Connection) -> Result<Vec<Decided>> {
    let Some(settings) = &skills.settings.canary else {
        return Ok(Vec::new());
    };
    let now = now_ms();
    let mut decided = Vec::new();
    for e in experiments::testing(conn, "skill")? {
        let evidence = evidence(conn, &e, settings)?;
        let Some((state, by, reason)) = verdict(&e, evidence, settings, now) else {
            continue;
        };
        if state == "rolled_back" && !retire(skills, &e, &reason)? {
            continue;
        }
        if experiments::decide(conn, e.id, state, by, &reason, now)? {
            tracing::warn!(skill = %e.subject, version = %e.version, "canary {state}: {reason}");
            decided.push(Decided {
                experiment: e.id,
                skill: e.subject.clone(),
                state,
                reason,
            });
        }
    }
    if !decided.is_empty() {
        skills.canaries.reload(conn)?;
    }
    Ok(decided)
}

/// What the test (and the clock) say of experiment `e` now: its end
/// (`promoted` or `rolled_back`), by whom (`test` or `timeout`) and why;
/// `None` while it keeps testing.
pub fn verdict(
    e: &Experiment,
    evidence: Evidence,
    settings: &CanaryConfig,
    now: i64,
) -> Option<(&'static str, &'static str, String)> {
    let timed_out = now - e.started_ms >= settings.max_duration.get().as_millis() as i64;
    Some(match evidence.verdict {
        Verdict::Promote => ("promoted", "test", evidence.reason),
        Verdict::RollBack => ("rolled_back", "test", evidence.reason),
        Verdict::KeepTesting if !timed_out => return None,
        Verdict::KeepTesting => match settings.on_timeout {
            CanaryTimeout::RollBack => (
                "rolled_back",
                "timeout",
                format!(
                    "undecided after canary.max_duration ({}): {}",
                    settings.max_duration, evidence.reason
                ),
            ),
            CanaryTimeout::Keep => (
                "promoted",
                "timeout",
                format!(
                    "kept after canary.max_duration ({}) without a decision (canary.on_timeout: keep): {}",
                    settings.max_duration, evidence.reason
                ),
            ),
        },
    })
}

/// The user's decision on a candidate under test (blocking): promoted, or
/// rolled back (retired) at once, whatever the test says so far. Errors
/// say why not: no such test, or not under test any more.
pub fn decide_by_user(
    skills: &Skills,
    conn: &Connection,
    id: i64,
    promote: bool,
    why: &str,
) -> Result<Experiment, UserDecision> {
    let e = experiments::get(conn, id)
        .map_err(|e| UserDecision::Failed(e.to_string()))?
        .ok_or(UserDecision::Unknown(id))?;
    if e.state != "testing" {
        return Err(UserDecision::Decided(e.id, e.state.clone()));
    }
    let (state, reason) = match promote {
        true => ("promoted", format!("promoted by hand: {why}")),
        false => ("rolled_back", format!("rolled back by hand: {why}")),
    };
    if !promote
        && !retire(skills, &e, &reason).map_err(|e| UserDecision::Failed(format!("{e:#}")))?
    {
        return Err(UserDecision::Failed(
            "the skill changed on disk meanwhile; try again".into(),
        ));
    }
    experiments::decide(conn, e.id, state, "user", &reason, now_ms())
        .map_err(|e| UserDecision::Failed(e.to_string()))?;
    skills
        .canaries
        .reload(conn)
        .map_err(|e| UserDecision::Failed(e.to_string()))?;
    tracing::warn!(skill = %e.subject, version = %e.version, "canary {state}: {reason}");
    experiments::get(conn, e.id)
        .map_err(|e| UserDecision::Failed(e.to_string()))?
        .ok_or(UserDecision::Unknown(id))
}

/// Why a decision by hand was not taken.
#[derive(Debug, thiserror::Error)]
pub enum UserDecision {
    #[error("no experiment {0} (see `metaclaw experiments list`)")]
    Unknown(i64),
    #[error("experiment {0} is not under test any more ({1})")]
    Decided(i64, String),
    #[error("{0}")]
    Failed(String),
}

/// Takes the candidate out of retrieval; whether it is out (a skill the
/// user removed or changed meanwhile is out of the test either way).
fn retire(skills: &Skills, e: &Experiment, reason: &str) -> Result<bool> {
    let snapshot = skills.library.snapshot();
    let Some(skill) = snapshot.get(&e.subject) else {
        return Ok(true);
    };
    if skill.version.to_string() != e.version || skill.retired.is_some() {
        return Ok(true);
    }
    let held = skills.library.lock_changes();
    let why = format!("canary: version {}: {reason}", e.version);
    match super::retire::set_retired(&skills.library.dir, skill, Some(why.clone()))? {
        None => {
            skills
                .library
                .rescan_holding(&held, Some(&Attribution::new(WHO, why).skill(&e.subject)));
            skills.warm();
            Ok(true)
        }
        Some(refused) => {
            tracing::warn!(skill = %e.subject, "canary rollback not written: {refused}");
            Ok(false)
        }
    }
}
