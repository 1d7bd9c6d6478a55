//! Canaries of new weights, end to end (W3-D): the real daemon in `mode:
//! rl` against the fake Tinker server and the dummy upstream, with
//! `canary.weights` on and half the sessions in each arm. A train step's
//! weights serve only the candidate arm while the incumbent serves the
//! control arm; no step trains meanwhile. The user's feedback judges each
//! session by the weights that answered it (the candidate's answers worse,
//! or better), and the sequential test decides: rolled back, the incumbent
//! serves everyone, the samples the candidate drew are never trained and
//! the run trains on from the state before its step; promoted, the
//! candidate serves everyone. Every turn is answered by the student: none
//! fails or falls back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::rl_daemon::{Setup, World};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Every session in an arm; a decision needs 4 judged sessions an arm.
const CANARY: &str = "  share: 0.5\n  min_sessions: 4\n";

async fn world() -> World {
    World::new(Setup::new("fake-bigram").weights_canary(CANARY)).await
}

/// A session judged worth a step (a corrected answer), then one step: its
/// weights go under test. The experiment's id.
async fn first_step(w: &World) -> i64 {
    w.session(
        "s0",
        "Where is Paris?",
        &["Paris is in Spain.", "Sorry: Paris is in France."],
        &["No, that's wrong. Paris is in France."],
    )
    .await;
    w.learn("s0").await;
    let stepped = w.json(&["train", "step", "--json"]).await;
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
    assert_eq!(stepped["policy_version"], 1, "{stepped}");
    let id = stepped["under_test"]
        .as_i64()
        .unwrap_or_else(|| panic!("the step's weights are not under test: {stepped}"));
    let status = w.json(&["status", "--json"]).await;
    let student = &status["student"];
    assert_eq!(
        student["policy_version"], 0,
        "the incumbent serves: {status}"
    );
    assert_eq!(student["under_test"]["policy_version"], 1, "{status}");
    assert_eq!(student["under_test"]["experiment"], id, "{status}");
    // No step while it is under test, asked for or not.
    let again = w.json(&["train", "step", "--json"]).await;
    assert_eq!(again["outcome"], "under_test", "{again}");
    assert_eq!(again["experiment"], id, "{again}");
    id
}

/// The policy version that answered session `s`'s (one) turn.
fn served_version(w: &World, s: &str) -> i64 {
    w.db()
        .query_row(
            "SELECT s.policy_version FROM turn_samples s JOIN turns t ON t.id = s.turn_id
             WHERE t.session_id = ?1",
            [s],
            |r| r.get(0),
        )
        .unwrap()
}

/// One-turn sessions, each rated by the user after the weights that
/// answered it (`candidate_better`: the candidate's answers up, the
/// incumbent's down; else the other way), learned from, until the test
/// ends the experiment. Its record, and the sessions each arm served.
async fn until_decided(w: &World, id: i64, candidate_better: bool) -> (Value, [usize; 2]) {
    let mut served = [0usize; 2];
    for i in 0..80 {
        let s = format!("c{i}");
        w.session(&s, "What is the capital of Peru?", &["Lima."], &[])
            .await;
        let version = served_version(w, &s);
        assert!(version == 0 || version == 1, "{version}");
        served[version as usize] += 1;
        let up = (version == 1) == candidate_better;
        let r = common::client()
            .post(format!("{}/v1/feedback", w.url()))
            .json(&json!({"session_id": s, "rating": if up { "up" } else { "down" }}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        w.learn(&s).await;
        let shown = w
            .json(&["experiments", "show", &id.to_string(), "--json"])
            .await;
        if shown["evidence"]["verdict"] == "keep_testing" {
            continue;
        }
        // The test has its answer: the trainer applies it (it looks every
        // 2 s).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let shown = w
                .json(&["experiments", "show", &id.to_string(), "--json"])
                .await;
            if shown["experiment"]["state"] != "testing" {
                eprintln!(
                    "decided after {} sessions (candidate {}, control {}): {} by {}: {}",
                    i + 1,
                    served[1],
                    served[0],
                    shown["experiment"]["state"],
                    shown["experiment"]["decided_by"],
                    shown["experiment"]["reason"]
                );
                return (shown, served);
            }
            assert!(
                Instant::now() < deadline,
                "not applied: {shown:#}\n{}",
                w.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    panic!("undecided after 80 sessions:\n{}", w.log());
}

#[tokio::test]
async fn weights_judged_worse_are_rolled_back_without_a_failed_request() {
    let w = world().await;
    let id = first_step(&w).await;
    let (shown, served) = until_decided(&w, id, false).await;
    let e = &shown["experiment"];
    assert_eq!(e["kind"], "weights", "{shown:#}");
    assert_eq!(e["state"], "rolled_back", "{shown:#}");
    assert!(
        e["decided_by"] == "test" || e["decided_by"] == "collapse",
        "{shown:#}"
    );
    assert!(served[0] >= 4 && served[1] >= 4, "{served:?}");

    // The incumbent serves everyone; nothing failed or fell back.
    let status = w.json(&["status", "--json"]).await;
    let student = &status["student"];
    assert_eq!(student["policy_version"], 0, "{status}");
    assert!(student["under_test"].is_null(), "{status}");
    assert_eq!(student["fallbacks"], 0, "{status}");
    let canary = status["training"]["canary"].as_str().unwrap_or_default();
    assert!(canary.contains("rolled back"), "{status}");
    for i in 0..4 {
        let s = format!("after{i}");
        w.session(&s, "What is the capital of Peru?", &["Lima."], &[])
            .await;
        assert_eq!(served_version(&w, &s), 0, "{s}");
    }

    // What the candidate sampled is never trained; what the incumbent
    // sampled is, from the state before the candidate's step (the run
    // numbers its steps on).
    let skipped: Vec<(String, Option<String>)> = {
        let conn = w.db();
        let mut stmt = conn
            .prepare(
                "SELECT s.train_state, s.train_note FROM turn_samples s
                 JOIN turns t ON t.id = s.turn_id
                 WHERE s.policy_version = 1 AND t.session_id LIKE 'c%'",
            )
            .unwrap();
        stmt.query_map((), |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<metaclaw_core::store::sql::Result<_>>()
            .unwrap()
    };
    assert_eq!(skipped.len(), served[1]);
    for (state, note) in &skipped {
        assert_eq!(state, "skipped");
        assert!(
            note.as_deref()
                .is_some_and(|n| n.contains("canary rolled back")),
            "{note:?}"
        );
    }
    let run: (Option<i64>, Option<String>) = w
        .db()
        .query_row(
            "SELECT state_step, state_path FROM training_runs",
            (),
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(run.0, Some(1), "the run counts on from step 1: {run:?}");
    assert!(
        run.1.as_deref().is_some_and(|p| p.contains("step000000")),
        "it trains on from the state before step 1: {run:?}"
    );
    let stepped = w.json(&["train", "step", "--json"]).await;
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
    assert_eq!(stepped["step"], 2, "{stepped}");
    assert!(
        stepped["under_test"].as_i64().is_some_and(|n| n != id),
        "a new canary: {stepped}"
    );
}

#[tokio::test]
async fn weights_judged_better_are_promoted_to_everyone() {
    let w = world().await;
    let id = first_step(&w).await;
    let (shown, served) = until_decided(&w, id, true).await;
    let e = &shown["experiment"];
    assert_eq!(e["state"], "promoted", "{shown:#}");
    assert_eq!(e["decided_by"], "test", "{shown:#}");
    assert!(served[0] >= 4 && served[1] >= 4, "{served:?}");
    let status = w.json(&["status", "--json"]).await;
    let student = &status["student"];
    assert_eq!(student["policy_version"], 1, "{status}");
    assert!(student["under_test"].is_null(), "{status}");
    assert_eq!(student["fallbacks"], 0, "{status}");
    for i in 0..4 {
        let s = format!("after{i}");
        w.session(&s, "What is the capital of Peru?", &["Lima."], &[])
            .await;
        assert_eq!(served_version(&w, &s), 1, "{s}");
    }
    // Training goes on from the promoted weights.
    let stepped = w.json(&["train", "step", "--json"]).await;
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
    assert_eq!(stepped["step"], 2, "{stepped}");
}

/// The user decides by hand (`experiments rollback`), whatever the test
/// says so far; a restart meanwhile tests on the same candidate.
#[tokio::test]
async fn a_restart_tests_on_and_the_user_can_roll_back_by_hand() {
    let mut w = world().await;
    let id = first_step(&w).await;
    w.kill();
    w.start().await;
    let status = w
        .until("the candidate under test again", |s| {
            s["student"]["under_test"]["experiment"] == id
        })
        .await;
    assert_eq!(status["student"]["policy_version"], 0, "{status}");
    let out = w
        .cli(&[
            "experiments",
            "rollback",
            &id.to_string(),
            "--reason",
            "not now",
        ])
        .await;
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = w
        .json(&["experiments", "show", &id.to_string(), "--json"])
        .await;
    assert_eq!(shown["experiment"]["state"], "rolled_back", "{shown:#}");
    assert_eq!(shown["experiment"]["decided_by"], "user", "{shown:#}");
    let status = w.json(&["status", "--json"]).await;
    assert!(status["student"]["under_test"].is_null(), "{status}");
    assert_eq!(status["student"]["policy_version"], 0, "{status}");
    // Decided once.
    let again = w.cli(&["experiments", "promote", &id.to_string()]).await;
    assert!(!again.status.success());
}

/// The collapse guard: the candidate's answers a third shorter than the
/// incumbent's, with no judged reward saying they are better, roll it back
/// as soon as each arm has answered 8 times, before any session is judged.
#[tokio::test]
async fn answers_that_collapse_roll_the_candidate_back_before_any_judgement() {
    use metaclaw_core::canary::{Arm, arm_for};
    let w = world().await;
    let id = first_step(&w).await;
    let long = "Lima is the capital of Peru, on the Pacific coast of South America.";
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut asked = 0;
    let shown = loop {
        let shown = w
            .json(&["experiments", "show", &id.to_string(), "--json"])
            .await;
        if shown["experiment"]["state"] != "testing" {
            break shown;
        }
        assert!(
            Instant::now() < deadline,
            "not decided: {shown:#}\n{}",
            w.log()
        );
        if asked < 60 {
            let s = format!("g{asked}");
            let answer = match arm_for(id, &s, 0.5) {
                Arm::Candidate => "Lima.",
                _ => long,
            };
            w.session(&s, "What is the capital of Peru?", &[answer], &[])
                .await;
            asked += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let e = &shown["experiment"];
    assert_eq!(e["state"], "rolled_back", "{shown:#}");
    assert_eq!(e["decided_by"], "collapse", "{shown:#}");
    let reason = e["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("a third shorter"), "{reason}");
    assert_eq!(
        shown["evidence"]["candidate_sessions"], 0,
        "nothing judged yet: {shown:#}"
    );
    let status = w.json(&["status", "--json"]).await;
    assert_eq!(status["student"]["policy_version"], 0, "{status}");
    assert_eq!(status["student"]["fallbacks"], 0, "{status}");
}
