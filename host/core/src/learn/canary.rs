//! Canaries of evolved skills, applied: a skill the publish stage writes
//! starts as a candidate (`start`), and after each judged session every
//! candidate's test is run again on the store's rewards (`decide_all`):
//! promoted, it serves everyone; rolled back, it leaves retrieval with
//! `retired: canary: …` in its SKILL.md and `retired:canary` in its
//! history; undecided past `canary.max_duration`, `canary.on_timeout`
//! says which. The rule: `canary::decide`; docs/learning.md "Canaries".

use crate::store::sql::Conn;
use anyhow::Result;

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
    conn: &Conn,
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
pub fn abandon(skills: &Skills, conn: &Conn, experiment: i64, why: &str) -> Result<()> {
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
pub fn evidence(conn: &Conn, e: &Experiment, settings: &CanaryConfig) -> Result<Evidence> {
    let (candidate, control) = experiments::arm_rewards(conn, e.id)?;
    Ok(evidence_of(&candidate, &control, settings))
}

/// The test's evidence from the arms' session rewards already read.
pub fn evidence_of(candidate: &[f64], control: &[f64], settings: &CanaryConfig) -> Evidence {
    decide::decide(candidate, control, rule(settings))
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

pub fn shown(conn: &Conn, e: Experiment, settings: &CanaryConfig) -> Result<Shown> {
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
pub fn decide_all(skills: &Skills, conn: &Conn) -> Result<Vec<Decided>> {
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
    conn: &Conn,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::decide::sim::Rng;
    use crate::canary::{Arm, arm_for};
    use crate::store::experiments::ArmRecord;
    use crate::store::sql::params;

    /// Time between the sessions a candidate is relevant to.
    const EVERY_MS: i64 = 30 * 60_000;

    struct Outcome {
        state: &'static str,
        by: &'static str,
        /// Sessions the candidate was relevant to until the decision.
        sessions: usize,
    }

    /// One candidate's test through the store, as the daemon runs it:
    /// sessions it is relevant to arrive every 30 minutes, each in the arm
    /// `arm_for` gives it (`canary.share`), judged like the dummy judge
    /// (+1, 0 or −1 with the arm's mean); its turn and arm are stored, and
    /// after each judged session the test runs on the store's rewards with
    /// the clock at that session (`verdict`, with `canary.max_duration`
    /// and `on_timeout`).
    fn simulate(
        conn: &mut Conn,
        seed: u64,
        (candidate, control): (f64, f64),
        settings: &CanaryConfig,
    ) -> Outcome {
        let started = 1_000_000;
        let id = experiments::start_skill(
            conn,
            &format!("skill-{seed}"),
            "1.0.0",
            settings.share,
            "simulated",
            started,
        )
        .unwrap();
        let e = experiments::get(conn, id).unwrap().unwrap();
        let mut rng = Rng(seed.wrapping_mul(7919).wrapping_add(1));
        for i in 0.. {
            let now = started + (i as i64 + 1) * EVERY_MS;
            let session = format!("{seed}-{i}");
            let arm = arm_for(id, &session, settings.share);
            let timed_out = now - started >= settings.max_duration.get().as_millis() as i64;
            let mean = match arm {
                Arm::Candidate => candidate,
                Arm::Control => control,
                // Not counted: nothing changes unless time is up.
                Arm::Outside if !timed_out => continue,
                Arm::Outside => candidate,
            };
            if arm != Arm::Outside {
                let tx = conn.transaction().unwrap();
                tx.execute(
                    "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
                     VALUES (?1, ?1, 'header', ?2, ?2)",
                    params![session, now],
                )
                .unwrap();
                tx.execute(
                    "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status,
                                        request_messages, request_params, started_at_ms,
                                        finished_at_ms, total_ms, reward)
                     VALUES (?1, ?1, 1, 'main', 'chat', 0, 'ok', '[]', '{}', ?2, ?2, 1.0, ?3)",
                    params![session, now, rng.reward(mean)],
                )
                .unwrap();
                let record = ArmRecord {
                    experiment: id,
                    arm: arm.as_str(),
                };
                experiments::record_arms(&tx, &session, &[record], now).unwrap();
                tx.commit().unwrap();
            }
            let evidence = evidence(conn, &e, settings).unwrap();
            if let Some((state, by, _)) = verdict(&e, evidence, settings, now) {
                return Outcome {
                    state,
                    by,
                    sessions: i + 1,
                };
            }
        }
        unreachable!()
    }

    struct Tally {
        promoted: usize,
        rolled_back: usize,
        by_timeout: usize,
        /// Of those, rolled back.
        rolled_back_by_timeout: usize,
        median_sessions: usize,
    }

    fn tally(runs: u64, means: (f64, f64), settings: &CanaryConfig) -> Tally {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::store::test_db(dir.path().join("metaclaw.db"))
            .side_writer()
            .unwrap();
        // A simulation's store needs no durability.
        let no_sync = match conn.backend() {
            crate::store::sql::Backend::Sqlite => "PRAGMA synchronous = OFF",
            crate::store::sql::Backend::Postgres => "SET synchronous_commit = off",
        };
        conn.execute_batch(no_sync).unwrap();
        let (mut promoted, mut rolled_back, mut by_timeout, mut rolled_back_by_timeout) =
            (0, 0, 0, 0);
        let mut sessions = Vec::new();
        for seed in 0..runs {
            let o = simulate(&mut conn, seed, means, settings);
            match o.state {
                "promoted" => promoted += 1,
                _ => rolled_back += 1,
            }
            by_timeout += usize::from(o.by == "timeout");
            rolled_back_by_timeout += usize::from(o.by == "timeout" && o.state == "rolled_back");
            sessions.push(o.sessions);
        }
        sessions.sort_unstable();
        let t = Tally {
            promoted,
            rolled_back,
            by_timeout,
            rolled_back_by_timeout,
            median_sessions: sessions[sessions.len() / 2],
        };
        eprintln!(
            "candidate {:+.2} vs control {:+.2}, {runs} runs (share {}, max_duration {}, on_timeout {:?}): \
             promoted {}, rolled back {} ({} at the timeout), median {} sessions it was relevant to",
            means.0,
            means.1,
            settings.share,
            settings.max_duration,
            settings.on_timeout,
            t.promoted,
            t.rolled_back,
            t.by_timeout,
            t.median_sessions
        );
        t
    }

    fn settings(on_timeout: CanaryTimeout) -> CanaryConfig {
        // The defaults: share 0.25, δ 0.05, 10 sessions, 30 days.
        CanaryConfig {
            on_timeout,
            ..CanaryConfig::default()
        }
    }

    /// Through the store, with the clock: a harmful candidate (−0.20
    /// against +0.10) is rolled back and a helpful one (+0.40 against
    /// +0.10) promoted, each by the test; a wrong promotion stays under δ.
    #[test]
    fn simulated_harmful_and_helpful_candidates_are_decided_by_the_test() {
        let s = settings(CanaryTimeout::RollBack);
        let harmful = tally(200, (-0.2, 0.1), &s);
        assert!(
            harmful.promoted as f64 <= 200.0 * s.delta,
            "{}",
            harmful.promoted
        );
        assert!(
            harmful.rolled_back - harmful.by_timeout >= 190,
            "{}",
            harmful.by_timeout
        );
        let helpful = tally(200, (0.4, 0.1), &s);
        assert!(helpful.promoted >= 190, "{}", helpful.promoted);
        assert!(helpful.by_timeout <= 5, "{}", helpful.by_timeout);
    }

    /// A neutral candidate (+0.10 in both arms) is promoted by the test in
    /// at most δ of runs; the rest stay undecided until
    /// `canary.max_duration`, then `on_timeout` decides: rolled back, or
    /// kept.
    #[test]
    fn simulated_neutral_candidates_wait_for_the_timeout_and_go_as_configured() {
        let s = settings(CanaryTimeout::RollBack);
        let rolled = tally(100, (0.1, 0.1), &s);
        let by_test = rolled.promoted;
        assert!(by_test as f64 <= 100.0 * s.delta, "{by_test}");
        assert!(rolled.by_timeout >= 75, "{}", rolled.by_timeout);
        assert_eq!(rolled.rolled_back_by_timeout, rolled.by_timeout);
        // With `keep`, those the timeout decides are kept instead.
        let kept = tally(20, (0.1, 0.1), &settings(CanaryTimeout::Keep));
        assert!(kept.by_timeout >= 15, "{}", kept.by_timeout);
        assert_eq!(kept.rolled_back_by_timeout, 0);
    }
}
