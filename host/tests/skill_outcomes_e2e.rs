//! Skills that prove themselves, end to end: the real daemon, the dummy
//! upstream as the agent's model (`echo-system`, whose answer shows the
//! skills injected) and as the judge (`judge`: a correction next is −1,
//! moving on +1), the real BM25 plugin, the learning job per session.
//!
//! Two evolved skills about the same task, one skill injected a turn.
//! Each query leans towards one of them or neither (as users' words do);
//! the simulated user corrects every answer given with `alpha` and moves
//! on after every answer given with `bravo`. After the sessions are
//! learned, `bravo` is injected for the neutral query, `alpha` is flagged
//! and (with `skills.auto_retire`) retired, and a new skill is still tried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::json;

const CONFIG: &str = "llm:\n  api_base: {upstream}\n  model_id: echo-system\n  force_model: true\n\
rl:\n  prm_model: judge\n  prm_m: 1\n\
skills:\n  top_k: 1\n  outcome_weight: 0.3\n  auto_retire: true\n  auto_evolve: false\n\
sessions:\n  idle_timeout: 1h\n";

/// A skill about checking a deploy, with its own distinctive words.
fn write_skill(home: &std::path::Path, name: &str, words: &str) {
    let folder = home.join("skills").join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: Check the deploy pipeline before releasing a service; {words}.\n\
             category: general\nversion: 1.0.0\ncreated_by: evolved:seed\n---\n\
             # Deploy check\n\nRun the deploy pipeline's checks before releasing; {words}.\n"
        ),
    )
    .unwrap();
}

const NEUTRAL: &str = "check the deploy pipeline before releasing the service";

/// Both fit it, alpha a little better (one more of its words).
const LEANING: &str = "check the deploy pipeline before releasing the service, and the canary";

/// The queries, in turn: one only alpha fits, one only bravo fits, one
/// both fit (alpha a little better). Where both fit, outcomes soon keep
/// alpha out: the turns where it alone fits are its evidence.
fn query(i: usize) -> String {
    match i % 3 {
        0 => "watch the canary metrics dashboards".to_string(),
        1 => "read the changelog entries".to_string(),
        _ => LEANING.to_string(),
    }
}

/// One session: the query, and the user's reaction to the skill it got.
/// Returns the skill injected (from the answer, which echoes the system
/// prompt), if any.
async fn session(mc: &Metaclaw, id: &str, text: &str) -> Option<String> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are helpful."}),
        json!({"role": "user", "content": text}),
    ];
    let (said, _) = session_turn(mc, id, &messages).await;
    let skill = [
        "deploy-check-alpha",
        "deploy-check-bravo",
        "deploy-check-charlie",
    ]
    .into_iter()
    .find(|s| said.contains(s))
    .map(str::to_string);
    let reaction = match skill.as_deref() {
        Some("deploy-check-alpha") => "No, that's wrong: it broke.",
        _ => "thanks, that worked; now the weather",
    };
    messages.push(json!({"role": "assistant", "content": said}));
    messages.push(json!({"role": "user", "content": reaction}));
    session_turn(mc, id, &messages).await;
    // The session's learning job: judged, outcomes moved, retirement.
    mc.learn_now(id);
    skill
}

/// Writes a skill into the daemon's library and waits until the daemon
/// has read and indexed `loaded` skills (it watches the folder).
fn add_skill(mc: &Metaclaw, name: &str, words: &str, loaded: u64) {
    write_skill(mc.home.path(), name, words);
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, loaded)
    });
}

#[tokio::test]
async fn the_skill_that_helps_wins_the_one_that_hurts_is_retired_and_a_new_one_is_tried() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, CONFIG);
    add_skill(
        &mc,
        "deploy-check-alpha",
        "watch the canary metrics dashboards",
        1,
    );
    add_skill(&mc, "deploy-check-bravo", "read the changelog entries", 2);

    let mut got = Vec::new();
    for i in 0..36 {
        got.push(session(&mc, &format!("sim-{i}"), &query(i)).await);
        if skill_stats(mc.home.path(), "deploy-check-alpha").1["retired"].is_string() {
            break;
        }
    }
    // Where both fit: alpha first, by relevance; bravo once the outcomes
    // are in, before alpha was retired.
    let both: Vec<Option<&str>> = got
        .iter()
        .skip(2)
        .step_by(3)
        .map(|s| s.as_deref())
        .collect();
    assert_eq!(both.first(), Some(&Some("deploy-check-alpha")), "{got:?}");
    assert_eq!(both.last(), Some(&Some("deploy-check-bravo")), "{got:?}");
    let (s, alpha) = skill_stats(mc.home.path(), "deploy-check-alpha");
    let (_, bravo) = skill_stats(mc.home.path(), "deploy-check-bravo");
    assert!(alpha["judged"].as_i64().unwrap() >= 10, "{s:#}\n{got:?}");
    assert!(alpha["flag"].is_object(), "{s:#}");
    assert!(alpha["retired"].is_string(), "{s:#}");
    assert!(alpha["mean_reward"].as_f64().unwrap() < -0.9, "{s:#}");
    assert!(bravo["mean_reward"].as_f64().unwrap() > 0.9, "{s:#}");
    assert!(bravo["flag"].is_null(), "{s:#}");
    assert!(
        bravo["success"]["mean"].as_f64().unwrap() > alpha["success"]["mean"].as_f64().unwrap()
    );

    // Retired: the query alpha alone fits now gets nothing.
    assert_eq!(session(&mc, "after", &query(0)).await, None);

    // A new skill about the same is tried, though bravo has proved itself.
    add_skill(&mc, "deploy-check-charlie", "confirm the rollback works", 3);
    let mut tried = false;
    for i in 0..6 {
        let text = match i % 2 {
            0 => format!("{NEUTRAL}, and confirm the rollback"),
            _ => NEUTRAL.to_string(),
        };
        if session(&mc, &format!("new-{i}"), &text).await.as_deref() == Some("deploy-check-charlie")
        {
            tried = true;
            break;
        }
    }
    assert!(
        tried,
        "{:#}",
        skill_stats(mc.home.path(), "deploy-check-charlie").0
    );
}
