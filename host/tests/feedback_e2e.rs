//! The user's feedback outranks the judge, end to end: the real daemon, the
//! dummy upstream as the agent's model (`echo-system`: its answer shows
//! the skill injected) and as the judge (moving on after an answer is +1),
//! the real BM25 plugin, the learning job per session.
//!
//! A thumbs-down from `metaclaw feedback` on a turn the judge called +1
//! turns its reward and its skill's outcome to −1; a thumbs-down sent to
//! `POST /v1/feedback` before the session is learned is still the reward
//! after the judge has judged it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::{Value, json};

const CONFIG: &str = "llm:\n  api_base: {upstream}\n  model_id: echo-system\n  force_model: true\n\
rl:\n  prm_model: judge\n  prm_m: 1\n\
skills:\n  top_k: 1\n  auto_evolve: false\n\
sessions:\n  idle_timeout: 1h\n";

const QUERY: &str = "check the deploy pipeline before releasing the service";

/// A session whose first answer the judge will call good (the user moves
/// on); the first turn's id.
async fn good_session(mc: &Metaclaw, id: &str) -> String {
    let mut messages = vec![
        json!({"role": "system", "content": "You are helpful."}),
        json!({"role": "user", "content": QUERY}),
    ];
    let (said, first) = session_turn(mc, id, &messages).await;
    assert!(said.contains("deploy-check"), "no skill injected: {said}");
    messages.push(json!({"role": "assistant", "content": said}));
    messages.push(json!({"role": "user", "content": "thanks, that worked; now the weather"}));
    session_turn(mc, id, &messages).await;
    first
}

fn reward_of(session: &Value, turn: &str) -> Option<f64> {
    session["turns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == turn)
        .and_then(|t| t["reward"].as_f64())
}

#[tokio::test]
async fn a_thumbs_down_outranks_the_judges_plus_one_in_the_reward_and_the_skills_outcome() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, CONFIG);
    let folder = mc.home.path().join("skills").join("deploy-check");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        "---\nname: deploy-check\ndescription: Check the deploy pipeline before releasing a service.\n\
         category: general\nversion: 1.0.0\ncreated_by: evolved:seed\n---\n\
         # Deploy check\n\nRun the deploy pipeline's checks before releasing.\n",
    )
    .unwrap();
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 1)
    });

    // Judged first, then the user disagrees (the CLI).
    let first = good_session(&mc, "fb-after").await;
    mc.learn_now("fb-after");
    let judged = mc.learned("fb-after");
    assert_eq!(reward_of(&judged, &first), Some(1.0), "{judged:#}");
    let (_, skill) = skill_stats(mc.home.path(), "deploy-check");
    assert_eq!(skill["mean_reward"].as_f64(), Some(1.0), "{skill:#}");

    let out = mc.cli(&[
        "feedback",
        "--turn",
        &first,
        "--down",
        "--comment",
        "it skipped the canary",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("ahead of the judge"), "{said}");
    let after = mc.learned("fb-after");
    assert_eq!(reward_of(&after, &first), Some(-1.0), "{after:#}");
    let turn = after["turns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == first.as_str())
        .unwrap();
    assert_eq!(turn["judgment"]["value"], 1, "the judge's verdict is kept");
    assert_eq!(turn["feedback"][0]["comment"], "it skipped the canary");
    let (_, skill) = skill_stats(mc.home.path(), "deploy-check");
    assert_eq!(skill["judged"], 1, "{skill:#}");
    assert_eq!(skill["mean_reward"].as_f64(), Some(-1.0), "{skill:#}");
    let text = mc.cli(&["sessions", "show", "fb-after"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("feedback:  thumbs down (-1) (cli")
            && text.contains("your feedback, ahead of the judge"),
        "{text}"
    );

    // The user first (the HTTP route, on the whole session), the judge
    // after: the user's word stays.
    let first = good_session(&mc, "fb-before").await;
    let r = client()
        .post(format!("{}/v1/feedback", mc.url()))
        .json(&json!({"session_id": "fb-before", "rating": "down"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["rewarded_turns"].as_array().unwrap().len(),
        2,
        "{body}"
    );
    mc.learn_now("fb-before");
    let learned = mc.learned("fb-before");
    let turn = learned["turns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == first.as_str())
        .unwrap();
    assert_eq!(turn["judgment"]["value"], 1, "{learned:#}");
    assert_eq!(reward_of(&learned, &first), Some(-1.0), "{learned:#}");
    let (_, skill) = skill_stats(mc.home.path(), "deploy-check");
    assert_eq!(skill["judged"], 2, "{skill:#}");
    assert_eq!(skill["mean_reward"].as_f64(), Some(-1.0), "{skill:#}");
}
