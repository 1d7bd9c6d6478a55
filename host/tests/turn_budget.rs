//! The turn's plugin budget (`plugins.turn_budget`), against a running
//! metaclaw over real HTTP: forty executable skills, each slow but within
//! its deadline, add at most the budget (and a scheduling margin) to a
//! turn; the turn is answered with the skills that did answer, and those
//! cut are counted (not as failures) and named in the log and the metrics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use serde_json::Value;

use common::*;

#[path = "../benches/support/slow_skills.rs"]
mod slow_skills;
use slow_skills::{BUDGET_MS, MARGIN_MS, SKILLS, is_slow_skill};

/// One non-streamed turn in a session of its own; its latency, and the
/// upstream's answer.
async fn timed_turn(base: &str, session: &str, text: &str) -> (Duration, Value) {
    let started = Instant::now();
    let response = post_chat(
        base,
        &chat("echo", text, false),
        &[("x-session-id", session)],
    )
    .await;
    assert_eq!(response.status(), 200, "the turn is answered");
    let body: Value = response.json().await.unwrap();
    (started.elapsed(), body)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test]
async fn forty_slow_skills_add_at_most_the_turn_budget() {
    let up = dummy();
    let drop_ins = tempfile::tempdir().unwrap();
    slow_skills::place(&built_plugin("testing/hostile-skill.wasm"), drop_ins.path());
    let mc = Metaclaw::start(&up.url, &slow_skills::config(&up.url, drop_ins.path()));
    // Every copy compiled and loaded (the first scan may take a while on a
    // busy machine: forty components).
    let home = mc.home.path();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let out = cli_in(home, &["plugins", "list", "--json"]);
        if let Ok(v) = serde_json::from_slice::<Value>(&out.stdout)
            && slow_skills::all_loaded(&v)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the {SKILLS} slow skills never all loaded: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            mc.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let base = format!("{}/v1", mc.url());

    // Ordinary turns: every skill is asked and none applies.
    timed_turn(&base, "warm", "hello there").await;
    let mut ordinary = Vec::new();
    for i in 0..5 {
        ordinary.push(
            timed_turn(&base, &format!("ordinary-{i}"), "hello there")
                .await
                .0,
        );
    }
    let ordinary = median(ordinary);

    // Slow turns: every skill sleeps in applies(), then applies.
    let text = slow_skills::query();
    let mut slow = Vec::new();
    for i in 0..3 {
        let (took, body) = timed_turn(&base, &format!("slow-{i}"), &text).await;
        // The dummy upstream echoes the user's message: the turn was
        // answered, not failed.
        assert_eq!(body["choices"][0]["message"]["content"], text, "{body}");
        slow.push(took);
    }
    let slow = median(slow);
    let added = slow.saturating_sub(ordinary);
    let bound = Duration::from_millis(BUDGET_MS + MARGIN_MS);
    eprintln!(
        "ordinary turn p50 {ordinary:?}, woken p50 {slow:?}: added {added:?} (bound {bound:?})"
    );
    assert!(
        added <= bound,
        "{SKILLS} slow skills added {added:?} to a turn ({slow:?} against {ordinary:?}); the budget is {BUDGET_MS} ms, the bound {bound:?}"
    );

    // The skills that answered were injected (at most skills.top_k); the
    // upstream got their text.
    let sent = dummy_requests(&up.url, "echo").await;
    let last = sent.last().unwrap().to_string();
    assert!(
        last.contains("Slow skill slow-skill-"),
        "no slow skill's text reached the upstream: {last}"
    );
    let session = mc.turns("slow-2", 1);
    let injected = session["turns"][0]["injected_skills"].as_array().unwrap();
    assert!(
        !injected.is_empty()
            && injected.len() <= 6
            && injected
                .iter()
                .all(|s| is_slow_skill(s["id"].as_str().unwrap())),
        "{session:#}"
    );

    // Those cut are counted, not failed, and said so.
    let list: Value =
        serde_json::from_slice(&cli_in(home, &["plugins", "list", "--json"]).stdout).unwrap();
    let slow_ones: Vec<&Value> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| is_slow_skill(p["name"].as_str().unwrap()))
        .collect();
    let cuts: u64 = slow_ones
        .iter()
        .map(|p| p["turn_cuts"].as_u64().unwrap())
        .sum();
    assert!(cuts >= 3, "three slow turns, each cut: {list:#}");
    for p in &slow_ones {
        assert_eq!(p["status"], "ok", "a cut is not a failure: {p}");
    }
    let text = String::from_utf8(cli_in(home, &["plugins", "list"]).stdout).unwrap();
    assert!(
        text.contains("by plugins.turn_budget)"),
        "plugins list shows the cuts: {text}"
    );
    assert!(
        mc.log().contains("plugins.turn_budget (250ms) ran out"),
        "{}",
        mc.log()
    );
    let metrics = metrics_text(mc.url()).await;
    assert!(
        metrics.contains("metaclaw_plugin_turn_budget_cuts_total{plugin=\"slow-skill-"),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(
            |l| l.starts_with("metaclaw_turns_over_plugin_budget_total ") && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
}
