//! Support and query sets, end to end (W2-F, W3-A): the samples of a
//! session whose evolution bumped the skill generation are never in a
//! batch; those sampled under the generation before it are, as long as no
//! skill in their prompt changed since (`store::train_queue`'s rule; the
//! rule under many evolutions is measured in `sample_survival.rs`).
//!
//! The real `metaclaw` daemon in `mode: rl` (built-in plugins on, so
//! `guard` checks evolution), the fake Tinker server and the dummy
//! upstream (the judge and the evolver) in this process, steps only when
//! asked:
//!
//! - session A (the support set): an answer the user corrects, then the
//!   corrected one. Its learning job judges the first −1, so the evolver
//!   runs; it writes a skill from A, and the library's generation goes up.
//! - session B: sampled before that evolution was published, learned from
//!   after it: its samples are of the older generation, with no skill in
//!   their prompt (the library was empty), so nothing they depend on
//!   changed.
//! - session C (the query set): sampled after the bump, judged +1 then 0,
//!   nothing evolved from it (`skills.auto_evolve: false`).
//!
//! One step trains exactly B's and C's samples; A's are skipped as the
//! support set, in no run and no step. Then
//! C reopens: its new turn waits for C's next learning round (a step
//! before it neither trains nor skips it; it once was skipped for want of
//! a reward, the last round's job being `done`), and the step after it
//! trains that turn alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::rl_daemon::{Sample, Setup, World};
use serde_json::json;

/// Every sample skipped for `why`, in no run and no step.
fn assert_skipped(samples: &[Sample], why: &str) {
    assert_eq!(samples.len(), 2, "{samples:?}");
    for s in samples {
        assert_eq!(s.state, "skipped", "{samples:?}");
        assert!(
            s.note.as_deref().is_some_and(|n| n.contains(why)),
            "expected {why:?}: {samples:?}"
        );
        assert!(s.run.is_none() && s.step.is_none(), "{samples:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_support_set_never_trains_and_an_older_generation_still_does() {
    let started = Instant::now();
    // Skills on and built-in plugins on (evolution needs `guard`); a skill
    // is evolved only after a turn judged −1, so only A is learned into the
    // library. Sessions end only when told; steps only when asked, over
    // everything ready.
    let w = World::new(Setup::new("fake-bigram").batch_size(64).evolving()).await;
    let before = w.generation().await;

    // A: the user corrects the first answer.
    w.session(
        "s-support",
        "Where is Paris?",
        &["It is in Spain.", "Sorry: it is in France."],
        &["No, that's wrong. It is in France."],
    )
    .await;
    // B: sampled now, under the library as it is before A's evolution.
    w.session(
        "s-older",
        "What is the capital of Italy?",
        &["Rome.", "Madrid."],
        &["Thanks. And the capital of Spain?"],
    )
    .await;

    // A ends and is learned from: judged, a skill evolved from it and
    // published, the generation up by one.
    w.learn("s-support").await;
    let evolved = w.written_drafts("s-support");
    assert!(
        evolved.iter().any(|(_, outcome)| outcome == "created"),
        "no skill was evolved from A: {evolved:?}\n{}",
        w.log()
    );
    let lesson = &evolved[0].0;
    assert!(
        w.path()
            .join("skills")
            .join(lesson)
            .join("SKILL.md")
            .is_file(),
        "{lesson} was not written"
    );
    let after = w.generation().await;
    assert_eq!(
        after,
        before + 1,
        "the evolution did not bump the generation"
    );
    let a = w.samples("s-support");
    assert_eq!(a[0].reward, Some(-1.0), "{a:?}");

    // B ends only now: learned from under the new generation, nothing
    // evolved from it.
    w.learn("s-older").await;
    assert!(w.written_drafts("s-older").is_empty());

    // C: sampled under the new generation, judged +1 (the user moved on)
    // and 0 (the last turn), nothing evolved from it.
    w.session(
        "s-query",
        "What is the capital of Germany?",
        &["Berlin.", "Vienna."],
        &["Thanks. And the capital of Austria?"],
    )
    .await;
    w.learn("s-query").await;
    assert!(w.written_drafts("s-query").is_empty());
    assert_eq!(w.generation().await, after, "the generation moved again");

    let (a, b, c) = (
        w.samples("s-support"),
        w.samples("s-older"),
        w.samples("s-query"),
    );
    let generations = |s: &[Sample]| s.iter().map(|s| s.generation as u64).collect::<Vec<_>>();
    assert_eq!(generations(&a), [before, before], "{a:?}");
    assert_eq!(generations(&b), [before, before], "{b:?}");
    assert_eq!(generations(&c), [after, after], "{c:?}");
    // Every one judged (a reward), none decided yet: a step decides.
    for s in a.iter().chain(&b).chain(&c) {
        assert!(s.reward.is_some() && s.state == "waiting", "{s:?}");
    }
    let rewards: Vec<Option<f64>> = c.iter().map(|s| s.reward).collect();
    assert_eq!(rewards, [Some(1.0), Some(0.0)], "{c:?}");
    let queue = w.json(&["train", "status", "--json"]).await["queue"].clone();
    assert_eq!(queue["waiting"], 6, "{queue}");

    // One step, over everything ready: B's and C's samples.
    let step = w.json(&["train", "step", "--json"]).await;
    assert_eq!(step["outcome"], "stepped", "{step}\n{}", w.log());
    assert_eq!(
        (step["step"].as_i64(), step["samples"].as_i64()),
        (Some(1), Some(4)),
        "{step}"
    );
    let run = step["run"].as_str().unwrap();

    let (a, b, c) = (
        w.samples("s-support"),
        w.samples("s-older"),
        w.samples("s-query"),
    );
    assert_skipped(&a, "support set");
    assert_eq!((b.len(), c.len()), (2, 2), "{b:?} {c:?}");
    for s in b.iter().chain(&c) {
        assert!(
            s.state == "trained"
                && s.note.is_none()
                && s.run.as_deref() == Some(run)
                && s.step == Some(1),
            "{b:?} {c:?}"
        );
    }
    // No sample of A is in any step of any run.
    let conn = w.db();
    let stepped: Vec<String> = conn
        .prepare("SELECT turn_id FROM turn_samples WHERE run_id IS NOT NULL OR train_step IS NOT NULL ORDER BY turn_id")
        .unwrap()
        .query_map((), |r| r.get(0))
        .unwrap()
        .collect::<metaclaw_core::store::sql::Result<_>>()
        .unwrap();
    let mut expected: Vec<String> = b.iter().chain(&c).map(|s| s.turn.clone()).collect();
    expected.sort();
    assert_eq!(stepped, expected);

    // `train status` and `status` count the same.
    let queue = w.json(&["train", "status", "--json"]).await["queue"].clone();
    assert_eq!(
        queue,
        json!({"waiting": 0, "ready": 0, "in_step": 0, "trained": 4, "skipped": 2}),
        "{queue}"
    );
    let status = w.json(&["status", "--json"]).await;
    assert_eq!(status["training"]["queue"], queue, "{}", status["training"]);

    // Nothing is left to train: A's samples stay out.
    let again = w.json(&["train", "step", "--json"]).await;
    assert_eq!(again["outcome"], "waiting", "{again}");
    assert_eq!(again["ready"], 0, "{again}");

    // C reopens (the agent comes back to it): its new turn waits for the
    // learning job of C's next round, even though the last round's is
    // done; a step meanwhile neither trains it nor skips it.
    w.turns(
        "s-query",
        "What is the capital of Germany?",
        &["Berlin.", "Vienna.", "Paris."],
        &[
            "Thanks. And the capital of Austria?",
            "Thanks. And the capital of France?",
        ],
        2,
    )
    .await;
    let early = w.json(&["train", "step", "--json"]).await;
    assert_eq!(early["outcome"], "waiting", "{early}");
    let reopened = w.samples("s-query");
    assert_eq!(reopened.len(), 3, "{reopened:?}");
    assert_eq!(
        (reopened[2].state.as_str(), reopened[2].generation as u64),
        ("waiting", after),
        "{reopened:?}"
    );
    // Ended and learned from again: the next step trains it, alone.
    w.learn("s-query").await;
    let next = w.json(&["train", "step", "--json"]).await;
    assert_eq!(next["outcome"], "stepped", "{next}\n{}", w.log());
    assert_eq!(
        (next["step"].as_i64(), next["samples"].as_i64()),
        (Some(2), Some(1)),
        "{next}"
    );
    let c = w.samples("s-query");
    assert!(c[2].state == "trained" && c[2].step == Some(2), "{c:?}");
    assert_skipped(&w.samples("s-support"), "support set");
    assert!(w.samples("s-older").iter().all(|s| s.state == "trained"));
    eprintln!("support_query: {:.1}s", started.elapsed().as_secs_f64());
}
