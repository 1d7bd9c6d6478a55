//! Canaries of evolved skills, end to end: the real daemon, the dummy
//! upstream as the agent's model (`echo-system`: its answer shows the
//! skill injected), the judge (a correction next is −1, moving on +1) and
//! the evolver, the real BM25 plugin, a learning job per session.
//!
//! A session's correction makes the evolver write a lesson: a candidate
//! under test, given to half the sessions it fits (`canary.share: 0.5`)
//! and withheld from the other half. The simulated user then reacts to
//! what each session got: a lesson that helps (the user moves on when it
//! is there, corrects when it is not) is promoted and then serves every
//! session; one that hurts is rolled back: retired, with `retired:canary`
//! in its history, and no session gets it any more.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::{Value, json};

/// Learning writes the lesson (`evolver`); then, restarted with an
/// evolver that finds nothing to learn, only the judge learns (no second
/// candidate appears).
fn config(evolve: bool) -> String {
    let evolver = if evolve { "evolver" } else { "evolver-nothing" };
    format!(
        "llm:\n  api_base: {{upstream}}\n  model_id: echo-system\n  force_model: true\n\
         rl:\n  prm_model: judge\n  prm_m: 1\n  evolver_model: {evolver}\n\
         skills:\n  top_k: 1\n\
         canary:\n  share: 0.5\n  min_sessions: 5\n\
         sessions:\n  idle_timeout: 1h\n"
    )
}

const TASK: &str = "check the deploy pipeline before releasing the service";

/// One session about the task; `moves_on(got_the_lesson)` says whether the
/// user moves on (else corrects the answer). Returns whether the lesson
/// was injected.
async fn session(mc: &Metaclaw, id: &str, moves_on: impl Fn(bool) -> bool) -> bool {
    let mut messages = vec![
        json!({"role": "system", "content": "You are helpful."}),
        json!({"role": "user", "content": TASK}),
    ];
    let (said, _) = session_turn(mc, id, &messages).await;
    let got = said.contains("lesson-check-deploy-pipeline");
    let reaction = if moves_on(got) {
        "thanks, that worked; now the weather"
    } else {
        "No, that's wrong: it broke."
    };
    messages.push(json!({"role": "assistant", "content": said}));
    messages.push(json!({"role": "user", "content": reaction}));
    session_turn(mc, id, &messages).await;
    mc.learn_now(id);
    got
}

fn experiments(mc: &Metaclaw) -> Vec<Value> {
    let out = mc.cli(&["experiments", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// A daemon whose library holds one lesson, just written: under test.
async fn with_a_candidate(up: &Proc) -> Metaclaw {
    let mut mc = Metaclaw::start(&up.url, &config(true));
    session(&mc, "seed", |_| false).await;
    let list = experiments(&mc);
    assert_eq!(list.len(), 1, "{list:#?}");
    let e = &list[0]["experiment"];
    assert_eq!(e["state"], "testing", "{e:#}");
    assert_eq!(e["subject"], "lesson-check-deploy-pipeline", "{e:#}");
    assert_eq!(e["origin"], "evolved:seed", "{e:#}");
    std::fs::write(
        mc.home.path().join("config.yaml"),
        config(false).replace("{upstream}", &up.url),
    )
    .unwrap();
    // The test and its arms outlive a kill -9: they are in the store.
    mc.kill_and_restart();
    // Before the lesson is indexed a session gets no skill at all, and is
    // in neither arm: the sessions start once retrieval has it.
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 1) && retriever_ready(v, "bm25")
    });
    mc
}

/// Sessions until the test decides (at most `limit`); each session's
/// (injected, experiment state after it).
async fn run_until_decided(
    mc: &Metaclaw,
    limit: usize,
    moves_on: impl Fn(bool) -> bool + Copy,
) -> (Vec<bool>, Value) {
    let mut got = Vec::new();
    for i in 0..limit {
        got.push(session(mc, &format!("s-{i}"), moves_on).await);
        let list = experiments(mc);
        if list[0]["experiment"]["state"] != "testing" {
            eprintln!(
                "decided after {} sessions ({} with the lesson): {}",
                got.len(),
                got.iter().filter(|g| **g).count(),
                list[0]["experiment"]["reason"]
            );
            return (got, list[0].clone());
        }
    }
    panic!("undecided after {limit} sessions: {:#}", experiments(mc)[0]);
}

#[tokio::test]
async fn a_lesson_that_helps_is_promoted_and_then_serves_every_session() {
    let up = dummy();
    let mc = with_a_candidate(&up).await;
    // The user moves on exactly when the lesson was there.
    let (got, decided) = run_until_decided(&mc, 80, |got| got).await;
    let e = &decided["experiment"];
    assert_eq!(e["state"], "promoted", "{decided:#}");
    assert_eq!(e["decided_by"], "test", "{decided:#}");
    let ev = &decided["evidence"];
    assert!(ev["candidate_sessions"].as_u64().unwrap() >= 5, "{ev:#}");
    assert!(ev["control_sessions"].as_u64().unwrap() >= 5, "{ev:#}");
    assert!(ev["wealth_better"].as_f64().unwrap() >= 20.0, "{ev:#}");
    assert!(
        ev["candidate_mean"].as_f64().unwrap() > ev["control_mean"].as_f64().unwrap(),
        "{ev:#}"
    );
    // Both arms were served while it was tested: the lesson given to some
    // sessions and withheld from others, as the arms say.
    assert!(got.contains(&true) && got.contains(&false), "{got:?}");
    let sessions = &decided["sessions"];
    assert_eq!(
        sessions["candidate"].as_u64().unwrap() as usize,
        got.iter().filter(|g| **g).count(),
        "{decided:#}"
    );
    // Each turn records its arm: the first session's says what it got.
    let first = mc.turns("s-0", 2);
    let arm = if got[0] { "candidate" } else { "control" };
    assert_eq!(
        first["turns"][0]["arms"],
        json!([{"experiment": 1, "arm": arm}]),
        "{first:#}"
    );
    // Promoted: every session gets it now.
    for i in 0..6 {
        assert!(session(&mc, &format!("after-{i}"), |_| true).await);
    }
    let text = mc.cli(&["experiments", "show", "1"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("decided:   promoted by test") && text.contains("better than the control"),
        "{text}"
    );
}

#[tokio::test]
async fn a_lesson_that_hurts_is_rolled_back_retired_and_no_longer_served() {
    let up = dummy();
    let mc = with_a_candidate(&up).await;
    // The user corrects exactly the answers given with the lesson.
    let (got, decided) = run_until_decided(&mc, 80, |got| !got).await;
    let e = &decided["experiment"];
    assert_eq!(e["state"], "rolled_back", "{decided:#}");
    assert!(
        e["reason"]
            .as_str()
            .unwrap()
            .contains("worse than the control"),
        "{decided:#}"
    );
    assert!(got.contains(&true) && got.contains(&false), "{got:?}");
    // Out of retrieval, and the history says who took it out.
    let history = mc.cli(&[
        "skills",
        "history",
        "lesson-check-deploy-pipeline",
        "--json",
    ]);
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(history.contains("retired:canary"), "{history}");
    for i in 0..6 {
        assert!(!session(&mc, &format!("after-{i}"), |_| true).await);
    }
}

#[tokio::test]
async fn the_user_decides_by_hand_whatever_the_test_says_so_far() {
    let up = dummy();
    let mc = with_a_candidate(&up).await;
    let out = mc.cli(&["experiments", "rollback", "1", "--reason", "not for me"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e = &experiments(&mc)[0]["experiment"];
    assert_eq!(
        (&e["state"], &e["decided_by"], &e["reason"]),
        (
            &json!("rolled_back"),
            &json!("user"),
            &json!("rolled back by hand: not for me")
        ),
        "{e:#}"
    );
    for i in 0..4 {
        assert!(!session(&mc, &format!("after-{i}"), |_| true).await);
    }
    // Decided once: a second decision is refused, saying why.
    let out = mc.cli(&["experiments", "promote", "1"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("not under test any more (rolled_back)"),
        "{said}"
    );
    let out = mc.cli(&["experiments", "promote", "9"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no experiment 9"));
}

/// One single-turn session about `task`: whether skill `name` was injected.
async fn got(mc: &Metaclaw, session: &str, task: &str, name: &str) -> bool {
    let messages = [
        json!({"role": "system", "content": "You are helpful."}),
        json!({"role": "user", "content": task}),
    ];
    session_turn(mc, session, &messages).await.0.contains(name)
}

/// `metaclaw skills add` of a skill written by hand.
fn add_skill(mc: &Metaclaw, name: &str, description: &str) {
    let file = mc.home.path().join(format!("{name}.md"));
    let text = format!(
        "---\nname: {name}\ndescription: {description}\n---\n# {name}\n\n{description} Say so first.\n"
    );
    std::fs::write(&file, text).unwrap();
    let out = mc.cli(&["skills", "add", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until `experiments show ID --json` has the sessions that met each
/// arm as `(candidate, control)` (turns are stored behind the answers).
fn arms_recorded(mc: &Metaclaw, id: i64, arms: (i64, i64)) {
    poll_json(
        mc.home.path(),
        &["experiments", "show", &id.to_string(), "--json"],
        |v| {
            (
                v["sessions"]["candidate"].as_i64(),
                v["sessions"]["control"].as_i64(),
            ) == (Some(arms.0), Some(arms.1))
        },
    );
}

/// A skill the user writes serves every session it fits: nothing of theirs
/// is withheld until they opt it in, one skill at a time (`experiments
/// start`) or every skill they write from then on (`canary.user_skills`,
/// here by `skills add` in another process while the daemon serves). Opted
/// in, it is a candidate like an evolved skill: half the sessions it fits
/// get it, half go without, each session's arm on record.
#[tokio::test]
async fn a_skill_you_wrote_is_withheld_only_once_you_opt_it_in() {
    let up = dummy();
    let mut mc = Metaclaw::start(&up.url, &config(false));
    add_skill(
        &mc,
        "deploy-checklist",
        "Check the deploy pipeline before releasing the service.",
    );
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 1) && retriever_ready(v, "bm25")
    });
    for i in 0..6 {
        assert!(got(&mc, &format!("plain-{i}"), TASK, "deploy-checklist").await);
    }
    assert!(experiments(&mc).is_empty());

    // Opted in by name.
    let out = mc.cli(&["experiments", "start", "deploy-checklist"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("testing"), "{said}");
    let e = experiments(&mc)[0]["experiment"].clone();
    assert_eq!(
        (&e["subject"], &e["state"], &e["origin"]),
        (
            &json!("deploy-checklist"),
            &json!("testing"),
            &json!("user: metaclaw experiments start")
        ),
        "{e:#}"
    );
    let mut with = 0;
    for i in 0..12 {
        with += got(&mc, &format!("opted-{i}"), TASK, "deploy-checklist").await as i64;
    }
    // share 0.5: every session it fits is in an arm, by its id (fixed here,
    // so the split is the same every run).
    let id = e["id"].as_i64().unwrap();
    arms_recorded(&mc, id, (with, 12 - with));
    assert!((1..12).contains(&with), "{with} of 12 got it");
    // Asked again: the same test.
    let out = mc.cli(&["experiments", "start", "deploy-checklist"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("under test already"));
    // A skill that is not there: said so.
    let out = mc.cli(&["experiments", "start", "no-such-skill"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no skill \"no-such-skill\""));

    // Every skill written from now on.
    std::fs::write(
        mc.home.path().join("config.yaml"),
        config(false)
            .replace("{upstream}", &up.url)
            .replace("canary:\n", "canary:\n  user_skills: true\n"),
    )
    .unwrap();
    mc.kill_and_restart();
    add_skill(
        &mc,
        "forecast-first",
        "Give the weather forecast for the hike before the route.",
    );
    let list = experiments(&mc);
    assert_eq!(list.len(), 2, "{list:#?}");
    let e = list[0]["experiment"].clone();
    assert_eq!(
        (&e["subject"], &e["state"]),
        (&json!("forecast-first"), &json!("testing")),
        "{e:#}"
    );
    assert!(
        e["origin"]
            .as_str()
            .unwrap()
            .starts_with("user: metaclaw skills add"),
        "{e:#}"
    );
    // The daemon serves the other process's test once it has read the
    // library again.
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 2) && retriever_ready(v, "bm25")
    });
    let weather = "what is the weather forecast for the hike tomorrow";
    let mut with = 0;
    for i in 0..12 {
        with += got(&mc, &format!("written-{i}"), weather, "forecast-first").await as i64;
    }
    let id = e["id"].as_i64().unwrap();
    arms_recorded(&mc, id, (with, 12 - with));
    assert!((1..12).contains(&with), "{with} of 12 got it");
}
