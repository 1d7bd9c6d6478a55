//! The training scheduler in the real daemon (W2-G): `mode: auto` against
//! the fake Tinker server, with the window forced by config
//! (`scheduler.force`). Open: a judged batch trains on its own, in the
//! window. Shut: the samples stay queued while the scheduler keeps
//! looking, and nothing trains. `scheduler status` and `status` explain
//! both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::rl_daemon::{Setup, World};

/// A judged session of two student turns (rewards −1 and 0: a batch with
/// signal).
async fn judged_session(w: &World, id: &str) {
    w.session(
        id,
        "Where is Lyon?",
        &["It is in Spain.", "Sorry: it is in France."],
        &["No, that's wrong. It is in France."],
    )
    .await;
    w.learn(id).await;
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_auto_mode_a_window_forced_open_trains_a_batch_on_its_own() {
    let w = World::new(Setup::new("fake-bigram").auto_forced("open")).await;
    judged_session(&w, "s-open").await;
    // Nobody asks for the step: the trainer starts it in the window.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let samples = w.samples("s-open");
        if samples.iter().all(|s| s.state == "trained") {
            assert!(samples.iter().all(|s| s.step == Some(1)), "{samples:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch never trained: {samples:?}\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The samples are marked trained in the step's commit; the scheduler
    // records the step's end just after it: wait for that record.
    let deadline = Instant::now() + Duration::from_secs(60);
    let report = loop {
        let report = w.json(&["scheduler", "status", "--json"]).await;
        let ended = report["recent"]
            .as_array()
            .is_some_and(|r| r.iter().any(|t| t["from"] == "training"));
        if ended {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler never recorded the step's end: {report:#}\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(report["gated"], true, "{report:#}");
    assert_eq!(report["now"]["open"], true, "{report:#}");
    assert!(
        report["now"]["reason"]
            .as_str()
            .unwrap()
            .contains("scheduler.force: open"),
        "{report:#}"
    );
    // The daemon's transitions, stored with their reasons: the window
    // opened, a step started in it and ended.
    let recent: Vec<(String, String, String)> = report["recent"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|t| {
            (
                t["from"].as_str().unwrap().to_string(),
                t["to"].as_str().unwrap().to_string(),
                t["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let moves: Vec<(&str, &str)> = recent
        .iter()
        .map(|(a, b, _)| (a.as_str(), b.as_str()))
        .take(3)
        .collect();
    assert_eq!(
        moves,
        [
            ("closed", "open"),
            ("open", "training"),
            ("training", "open")
        ],
        "{recent:?}"
    );
    assert!(recent[0].2.contains("forced open"), "{recent:?}");
    assert!(recent[2].2.contains("step 1"), "{recent:?}");
    let status = text(&w.cli(&["status"]).await);
    assert!(
        status.contains("scheduler: window open (forced open (scheduler.force: open))"),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_auto_mode_a_window_forced_shut_keeps_samples_queued_and_trains_nothing() {
    let w = World::new(Setup::new("fake-bigram").auto_forced("shut")).await;
    judged_session(&w, "s-shut").await;
    let judged_at = metaclaw_core::clock::now_ms();
    // The scheduler looks again after the samples are judged (the trainer
    // asks it before every step it could start); its answer is no, and the
    // samples are queued ready for the next window.
    let status = w
        .until("the scheduler assessing the judged samples", |s| {
            s["training"]["scheduler"]["assessed_at_ms"]
                .as_i64()
                .is_some_and(|at| at > judged_at)
                && s["training"]["queue"]["ready"] == 2
        })
        .await;
    let scheduler = &status["training"]["scheduler"];
    assert_eq!(scheduler["open"], false, "{scheduler}");
    assert_eq!(scheduler["state"], "closed", "{scheduler}");
    let samples = w.samples("s-shut");
    assert!(
        samples
            .iter()
            .all(|s| s.state == "ready" && s.step.is_none()),
        "trained in a shut window: {samples:?}"
    );
    assert!(
        w.models().await.values().all(|m| m.steps == 0),
        "the service trained: {:?}",
        w.models().await
    );
    let said = text(&w.cli(&["scheduler", "status"]).await);
    assert!(
        said.contains("mode auto: training steps wait for windows")
            && said.contains("window: shut: forced shut (scheduler.force: shut)"),
        "{said}"
    );
    let status = text(&w.cli(&["status"]).await);
    assert!(
        status.contains("scheduler: window shut: forced shut (scheduler.force: shut)")
            && status.contains("2 ready"),
        "{status}"
    );
    // Asked for, a step still runs: the scheduler gates only the steps the
    // trainer starts on its own.
    let stepped = w.json(&["train", "step", "--json"]).await;
    assert_eq!(stepped["outcome"], "stepped", "{stepped}");
}
