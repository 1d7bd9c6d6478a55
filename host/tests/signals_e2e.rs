//! Learning signals you can trust, end to end (the real binary, the dummy
//! upstream as the agent's model, the judge and the evolver):
//!
//! - provenance per file: sessions that end together are learned by
//!   concurrent jobs, and each evolved skill's history names the session
//!   that drafted it, never another;
//! - only real answers are judged: a turn whose upstream answered 500 (its
//!   fallback too) and one whose stream was cut get no judgment, no
//!   reward, no scorer reward and move no skill's outcomes, while the
//!   session's answered turns are judged as usual; a fallback's answer is
//!   judged as the fallback model's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use common::*;
use serde_json::{Value, json};

/// Runs session `id`'s learning job now (ending it); `sessions show ID
/// --json` then.
fn learn_now(mc: &Metaclaw, id: &str) -> Value {
    mc.learn_now(id);
    mc.learned(id)
}

/// Tasks on unrelated topics, and the user's corrections: the evolver
/// drafts a lesson named after each task's first words
/// (`lesson-explain-tides-depend`…), distinct enough that none is a
/// near-duplicate of another.
const TOPICS: [(&str, &str); 6] = [
    (
        "Explain tides depend upon lunar gravity and ocean basin resonance",
        "No, that's wrong: spring tides follow syzygy, neap tides quadrature.",
    ),
    (
        "Describe photosynthesis inside chloroplast thylakoid membranes",
        "No, that's wrong: photosystem two splits water, releasing oxygen.",
    ),
    (
        "Summarize causes behind western Roman empire collapse",
        "No, that's wrong: Odoacer deposed Romulus Augustulus in 476.",
    ),
    (
        "Compare sorting algorithms quicksort heapsort mergesort stability",
        "No, that's wrong: mergesort is stable, heapsort never is.",
    ),
    (
        "Outline volcanic eruption warning signals seismology tremors",
        "No, that's wrong: harmonic tremor precedes magma ascent.",
    ),
    (
        "Recommend sourdough bread fermentation schedules hydration",
        "No, that's wrong: levain peaks near doubling, then bulk ferment.",
    ),
];

/// A session: its topic's task, a wrong answer, the user's correction
/// (the judge's -1 makes the evolver draft a lesson).
async fn corrected_session(base: String, id: String, n: usize) {
    let (task, correction) = TOPICS[n];
    let first = json!({"model": "echo", "messages": [{"role": "user", "content": task}]});
    let r = post_chat(&base, &first, &[("x-session-id", &id)]).await;
    assert_eq!(r.status(), 200);
    let second = json!({"model": "echo", "messages": [
        {"role": "user", "content": task},
        {"role": "assistant", "content": "Something unrelated."},
        {"role": "user", "content": correction},
    ]});
    let r = post_chat(&base, &second, &[("x-session-id", &id)]).await;
    assert_eq!(r.status(), 200);
}

/// The lesson the dummy evolver names after a task: its first three words
/// (none of them a stop word in `TOPICS`).
fn lesson(task: &str) -> String {
    let words: Vec<String> = task.split(' ').take(3).map(str::to_lowercase).collect();
    format!("lesson-{}", words.join("-"))
}

fn history(mc: &Metaclaw, skill: &str) -> Vec<Value> {
    let out = mc.cli(&["skills", "history", skill, "--json"]);
    assert!(
        out.status.success(),
        "{skill}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn concurrent_jobs_each_credit_only_the_skills_their_session_drafted() {
    const SESSIONS: usize = TOPICS.len();
    let (_up, mc) = with_bank(
        "llm:\n  api_base: {upstream}\n  model_id: echo\nrl:\n  prm_model: judge\n  prm_m: 1\n  evolver_model: evolver\n\
         sessions:\n  idle_timeout: 1s\nlearning:\n  concurrency: 4\n",
    );
    let base = format!("{}/v1", mc.url());
    // All at once: they end together, and their jobs run side by side.
    let sessions: Vec<_> = (0..SESSIONS)
        .map(|n| tokio::spawn(corrected_session(base.clone(), format!("chat-{n:03}"), n)))
        .collect();
    for s in sessions {
        s.await.unwrap();
    }
    // Which session drafted (and wrote) which skill.
    let mut drafted_by = std::collections::HashMap::new();
    for (n, (task, _)) in TOPICS.iter().enumerate() {
        let id = format!("chat-{n:03}");
        let s = mc.learned(&id);
        let written: Vec<String> = s["evolved"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["written_ms"].is_i64() && d["outcome"] != "rejected")
            .map(|d| d["skill_id"].as_str().unwrap().to_string())
            .collect();
        let lesson = lesson(task);
        assert!(
            written.contains(&lesson),
            "{id} wrote {written:?}, not {lesson}\n{}",
            mc.log()
        );
        for skill in written {
            drafted_by.insert(skill, id.clone());
        }
    }
    // Each skill's history credits the session that drafted it: its first
    // row (added) and every row that names a session.
    for (skill, session) in &drafted_by {
        let rows = history(&mc, skill);
        assert_eq!(rows[0]["change"], "added", "{skill}: {rows:#?}");
        assert_eq!(
            rows[0]["who"],
            format!("evolved:{session}"),
            "{skill}: {rows:#?}"
        );
        assert_eq!(rows[0]["why"], format!("learned from session {session}"));
        for row in &rows {
            let who = row["who"].as_str().unwrap();
            assert!(
                !who.starts_with("evolved:") || who == format!("evolved:{session}"),
                "{skill} was drafted by {session}, but its history credits {who}: {rows:#?}"
            );
        }
    }
    // And no other skill's history credits a session at all.
    let out = mc.cli(&["skills", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<String> = listed["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    for skill in ids.iter().filter(|id| !drafted_by.contains_key(*id)) {
        for row in history(&mc, skill) {
            assert!(
                !row["who"].as_str().unwrap().starts_with("evolved:"),
                "{skill}, drafted by no session, credits one: {row}"
            );
        }
    }
    // Every job wrote its files under names of its own: none is left over.
    for skill in drafted_by.keys() {
        let folder = mc.home.path().join("skills").join(skill);
        for entry in std::fs::read_dir(&folder).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(
                !name.to_string_lossy().ends_with(".tmp"),
                "left in {}: {name:?}",
                folder.display()
            );
        }
    }
}

/// One turn of session `id` asking `model`; the HTTP status.
async fn ask(mc: &Metaclaw, id: &str, model: &str, messages: &Value, stream: bool) -> u16 {
    let body = json!({"model": model, "stream": stream, "messages": messages});
    let r = post_chat(&format!("{}/v1", mc.url()), &body, &[("x-session-id", id)]).await;
    let status = r.status().as_u16();
    // A stream's end (or its cut) is read whole, as a client would.
    let _ = r.bytes().await;
    status
}

/// The injected skills' outcomes and every main turn's, from `skills stats`.
fn stats(mc: &Metaclaw) -> Value {
    let out = mc.cli(&["skills", "stats", "--json"]);
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn turns_whose_upstream_failed_are_neither_judged_nor_rewarded_nor_counted() {
    // The fallback asks the same upstream for the same model: a 500 is
    // the fallback's failure too.
    let (up, mc) = with_bank(
        "llm:\n  api_base: {upstream}\n  model_id: echo\n  fallbacks:\n    - api_base: {upstream}\n      model_id: \"\"\n\
         rl:\n  prm_model: judge\n  prm_m: 1\nskills:\n  auto_evolve: false\nsessions:\n  idle_timeout: 1h\n",
    );
    let task = "Before editing a config file, should I read the file first?";
    let mut messages = vec![json!({"role": "user", "content": task})];
    assert_eq!(
        ask(&mc, "outage", "echo", &json!(messages), false).await,
        200
    );
    messages.push(json!({"role": "assistant", "content": "Yes, read it first."}));
    messages.push(json!({"role": "user", "content": "Good. Now edit the file to add a line."}));
    assert_eq!(
        ask(&mc, "outage", "error-500", &json!(messages), false).await,
        500
    );
    messages.push(
        json!({"role": "user", "content": "Please edit the config file now, adding the line."}),
    );
    // The stream is cut after two chunks.
    ask(&mc, "outage", "reset-after-2", &json!(messages), true).await;
    messages.push(json!({"role": "user", "content": "Once more: edit the file, adding a line."}));
    assert_eq!(
        ask(&mc, "outage", "echo", &json!(messages), false).await,
        200
    );
    let before = stats(&mc);

    let s = learn_now(&mc, "outage");
    let turns = s["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 4, "{s:#}");
    let status: Vec<&str> = turns
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["ok", "error", "incomplete", "ok"], "{s:#}");
    assert!(turns.iter().all(|t| t["turn_type"] == "main"), "{s:#}");
    // Skills were injected into the failed turns too: what they must not
    // move is real.
    for t in &turns[1..3] {
        assert!(
            t["injected_skills"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "{s:#}"
        );
    }

    // The answered turns are judged as usual: the first with what came
    // next (the user moved on), the last with nothing yet.
    assert_eq!(turns[0]["judgment"]["value"], 1, "{s:#}");
    assert_eq!(turns[0]["judgment"]["answer_model"], "echo");
    assert_eq!(turns[3]["judgment"]["value"], 0, "{s:#}");
    assert!(turns[0]["reward"].is_f64() && turns[3]["reward"].is_f64());
    // The failed ones: no verdict, no reward, no scorer's, and why.
    for t in &turns[1..3] {
        assert!(t["judgment"].is_null(), "{t:#}");
        assert!(t["reward"].is_null(), "{t:#}");
        assert_eq!(t["rewards"], json!([]), "{t:#}");
    }
    let why = |t: &Value| t["no_reward"].as_str().unwrap_or_default().to_string();
    assert!(
        why(&turns[1]).starts_with("upstream failed: 500"),
        "{}",
        why(&turns[1])
    );
    assert!(
        why(&turns[2]).starts_with("answer incomplete"),
        "{}",
        why(&turns[2])
    );
    assert!(turns[0]["no_reward"].is_null());
    // The judge was asked about the two answers alone, and told that the
    // call after the first one failed.
    let judged = dummy_requests(&up.url, "judge").await;
    assert_eq!(judged.len(), 2, "{judged:#?}");
    assert!(
        judged.iter().any(|r| r
            .to_string()
            .contains("failed upstream (an outage, not the user)")),
        "{judged:#?}"
    );

    // The outcomes moved by the answered turns alone.
    let after = stats(&mc);
    let every = |v: &Value, k: &str| v["every_main_turn"][k].as_i64().unwrap();
    assert_eq!(every(&after, "injected"), 2, "{after:#}");
    assert_eq!(every(&after, "judged"), 2, "{after:#}");
    assert_eq!(every(&before, "judged"), 0, "{before:#}");
    let expected = turns[0]["reward"].as_f64().unwrap() + turns[3]["reward"].as_f64().unwrap();
    assert!((after["every_main_turn"]["reward_sum"].as_f64().unwrap() - expected).abs() < 1e-9);
    // Each skill injected into a failed turn counts only its answered turns.
    for skill in turns[1]["injected_skills"].as_array().unwrap() {
        let id = skill["id"].as_str().unwrap();
        let answered = [&turns[0], &turns[3]]
            .iter()
            .filter(|t| {
                t["injected_skills"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["id"] == id)
            })
            .count() as i64;
        let (_, current) = skill_stats(mc.home.path(), id);
        assert_eq!(current["injected"], answered, "{id}: {current:#}");
        assert_eq!(current["judged"], answered, "{id}: {current:#}");
    }

    // `sessions show` says why.
    let out = mc.cli(&["sessions", "show", "outage"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("reward:    none — upstream failed: 500"),
        "{shown}"
    );
    assert!(
        shown.contains("reward:    none — answer incomplete"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_fallbacks_answer_is_judged_as_the_fallback_models() {
    let (_up, mc) = with_bank(
        "llm:\n  api_base: {upstream}\n  model_id: echo\n  fallbacks:\n    - api_base: {upstream}\n      model_id: echo-system\n\
         rl:\n  prm_model: judge\n  prm_m: 1\nskills:\n  auto_evolve: false\nsessions:\n  idle_timeout: 1h\n",
    );
    let mut messages = vec![json!({"role": "user", "content": "What is a good commit message?"})];
    // The primary answers 503; the fallback's model answers.
    assert_eq!(
        ask(&mc, "fb", "error-503", &json!(messages), false).await,
        200
    );
    messages.push(json!({"role": "assistant", "content": "A short summary line."}));
    messages.push(json!({"role": "user", "content": "Thanks. Now something else."}));
    assert_eq!(ask(&mc, "fb", "echo", &json!(messages), false).await, 200);
    let s = learn_now(&mc, "fb");
    let first = &s["turns"][0];
    assert_eq!(first["status"], "ok", "{s:#}");
    assert_eq!(first["upstream_model"], "echo-system", "{s:#}");
    assert_eq!(first["judgment"]["answer_model"], "echo-system", "{s:#}");
    assert_eq!(first["judgment"]["value"], 1, "{s:#}");
    assert!(first["reward"].is_f64(), "{s:#}");
    let out = mc.cli(&["sessions", "show", "fb"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("the answer of echo-system"), "{shown}");
}
