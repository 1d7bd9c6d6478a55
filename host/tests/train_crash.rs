//! Training from the student's turns survives a kill -9 (W2-F): the real
//! `metaclaw` daemon in `mode: rl`, the fake Tinker server and the dummy
//! upstream in this process (so they outlive the daemon), one home kept
//! across the restart.
//!
//! Each test trains step 1 on a judged session's two turns, then asks for
//! step 2 on a second session's and kills the daemon with SIGKILL while
//! the fake holds one of that step's calls unanswered: its
//! `forward_backward` (`stall_fwdbwd=2`: run on the service, its result
//! never sent), or the save of its training state after the optimiser
//! step (`stall_save=3`: step 1 saved its state and its sampler weights;
//! the checkpoint is written on the service, its path never reaches
//! metaclaw). After the restart on the same home the run goes on from step
//! 1's saved state: the second session's samples are `ready` again at
//! once, the next step trains them as step 2 on a new model loaded from
//! that state, and every sample is trained exactly once (the fake's
//! weights hold exactly the two steps; the queue has each sample trained
//! in its own step, none left ready or in a step). A third test does the
//! same without a kill: the service refuses step 2's save
//! (`fail_save=3`), and the step is trained again from step 1's state.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rl_daemon::{Sample, Setup, World};
use metaclaw_mock_tinker::Seen;

/// What cuts step 2 short.
#[derive(Clone, Copy, PartialEq)]
enum Crash {
    /// Step 2's `forward_backward` is run by the service, never answered.
    Step,
    /// Step 2's optimiser step is applied, the save of its training state
    /// written by the service, never answered.
    Save,
    /// Not a kill: step 2's optimiser step is applied, the save of its
    /// training state refused by the service.
    FailedSave,
}

/// A judged session of two student turns: an answer the user corrects
/// (reward −1), then the corrected one (0). Its two sample ids.
async fn session(w: &World, id: &str, question: &str) -> Vec<String> {
    w.session(
        id,
        question,
        &["It is in Spain.", "Sorry: it is in France."],
        &["No, that's wrong. It is in France."],
    )
    .await;
    // Judged; a step then finds its samples ready.
    w.learn(id).await;
    w.samples(id).into_iter().map(|s| s.turn).collect()
}

/// The samples of `session`, all trained in `step` of `run`.
fn assert_trained(samples: &[Sample], run: &str, step: i64) {
    assert_eq!(samples.len(), 2, "{samples:?}");
    assert!(
        samples
            .iter()
            .all(|s| s.state == "trained" && s.run.as_deref() == Some(run) && s.step == Some(step)),
        "{samples:?}"
    );
}

/// Asks for a step, waits until the fake holds its call, and kills the
/// daemon with SIGKILL; checks that the step was under way (its samples in
/// step 2) and that its caller was told it failed.
async fn step_and_kill(w: &mut World) {
    let mut asked = Command::new(common::BIN)
        .args(["train", "step", "--json"])
        .env("METACLAW_HOME", w.path())
        .env("METACLAW_NO_WIRE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: Seen = w.fake_get("seen").await;
        if seen.stalled == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "step 2 never reached the stalled call: {seen:?}\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = w.samples("s-second");
    assert!(
        held.iter()
            .all(|s| s.state == "in_step" && s.step == Some(2)),
        "{held:?}"
    );
    w.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while asked.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "train step outlived the daemon");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut said = String::new();
    asked
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(
        !asked.wait().unwrap().success() && !said.contains("stepped"),
        "{said}"
    );
}

async fn kill_and_resume(crash: Crash, model: &str) {
    let mut w = World::new(Setup::new(model)).await;

    // Step 1: the first session's two turns, saved (training state and
    // sampler weights), served.
    let first = session(&w, "s-first", "Where is Paris?").await;
    let step1 = w.json(&["train", "step", "--json"]).await;
    assert_eq!(step1["outcome"], "stepped", "{step1}");
    assert_eq!(
        (step1["step"].as_i64(), step1["samples"].as_i64()),
        (Some(1), Some(2))
    );
    let run = step1["run"].as_str().unwrap().to_string();
    let state1 = step1["checkpoint"].as_str().unwrap().to_string();
    assert_trained(&w.samples("s-first"), &run, 1);

    let second = session(&w, "s-second", "Where is Lyon?").await;
    let model_before = w.json(&["train", "status", "--json"]).await["run"]["model_id"]
        .as_str()
        .unwrap()
        .to_string();
    if crash == Crash::FailedSave {
        // Step 2's optimiser step is applied, the save of its state
        // refused: the step fails, and its samples go back to the queue.
        let out = w.cli(&["train", "step", "--json"]).await;
        let said = String::from_utf8_lossy(&out.stderr);
        // A refusal, in the service's words: not an outage.
        assert!(
            !out.status.success()
                && said.contains("the training step failed: the training service refused")
                && said.contains("save failed")
                && !said.contains("unreachable"),
            "{said}"
        );
    } else {
        step_and_kill(&mut w).await;
    }

    // What it left: the run's last saved state is step 1's; the service
    // holds what step 2 did on the model it was trained on.
    let record = w.json(&["train", "status", "--json"]).await["run"].clone();
    assert_eq!(record["state_step"], 1, "{record}");
    assert_eq!(record["state_path"], state1.as_str(), "{record}");
    let pending = record["pending"].as_str().unwrap_or_default().to_string();
    let m = w.models().await;
    let before = &m[&model_before];
    assert_eq!(before.forward_backwards, 2, "{m:?}");
    let written = w.checkpoints(&model_before).await;
    let saved2: Vec<&String> = written
        .iter()
        .filter(|(kind, path)| kind == "training" && path.ends_with("-step000002"))
        .map(|(_, path)| path)
        .collect();
    match crash {
        Crash::Step => {
            // The service ran step 2's forward_backward (and its
            // optim_step too where the client sends it without waiting for
            // the first result); metaclaw counted neither.
            assert!(pending.contains("step 2: forward_backward"), "{record}");
            assert_eq!(record["step"], 1, "{record}");
            assert!(
                matches!(
                    (before.steps, before.unapplied_gradients),
                    (1, true) | (2, false)
                ),
                "{m:?}"
            );
            assert!(saved2.is_empty(), "{written:?}");
        }
        Crash::Save => {
            // Step 2 was applied, and its state written on the service
            // under a name metaclaw never learnt.
            assert!(
                pending.starts_with("save ") && pending.ends_with("-step000002"),
                "{record}"
            );
            assert_eq!(record["step"], 2, "{record}");
            assert!(!before.unapplied_gradients && before.steps == 2, "{m:?}");
            assert_eq!(saved2.len(), 1, "{written:?}");
        }
        Crash::FailedSave => {
            // Step 2 was applied; nothing was saved.
            assert!(pending.is_empty(), "{record}");
            assert_eq!(record["step"], 2, "{record}");
            assert!(!before.unapplied_gradients && before.steps == 2, "{m:?}");
            assert!(saved2.is_empty(), "{written:?}");
        }
    }
    let orphan = saved2.first().map(|p| p.to_string());
    if crash != Crash::FailedSave {
        w.start().await;
    }

    // After the restart (or the failure), the second session's samples are
    // ready again before any step is asked for (a step counts only ready
    // samples).
    let status = w.json(&["status", "--json"]).await;
    assert_eq!(
        status["student"]["policy_version"], 1,
        "{}",
        status["student"]
    );
    assert_eq!(w.queue().await, (2, 0, 2));
    assert!(w.samples("s-second").iter().all(|s| s.state == "ready"));

    // The next step trains them, as step 2 again, on a new model loaded
    // from step 1's state.
    let step2 = w.json(&["train", "step", "--json"]).await;
    assert_eq!(step2["outcome"], "stepped", "{step2}\n{}", w.log());
    assert_eq!(
        (step2["step"].as_i64(), step2["samples"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(step2["run"], run.as_str());
    assert_eq!(step2["policy_version"], 2);
    let state2 = step2["checkpoint"].as_str().unwrap().to_string();
    assert_ne!(
        Some(&state2),
        orphan.as_ref(),
        "a checkpoint name was reused"
    );
    let record = w.json(&["train", "status", "--json"]).await;
    let model = record["run"]["model_id"].as_str().unwrap().to_string();
    assert!(model != model_before, "{record}");
    assert_eq!(record["run"]["step"], 2, "{record}");
    assert_eq!(record["run"]["state_step"], 2, "{record}");
    assert_eq!(record["run"]["state_path"], state2.as_str(), "{record}");
    assert!(record["run"]["pending"].is_null(), "{record}");

    // The service agrees: the weights trained now hold exactly two
    // optimiser steps, step 1's loaded and this one; what the killed step
    // did stayed on the abandoned model.
    let m = w.models().await;
    assert_eq!(
        m[&model].loaded_from.as_deref(),
        Some(state1.as_str()),
        "{m:?}"
    );
    assert_eq!(
        (m[&model].steps, m[&model].forward_backwards),
        (2, 1),
        "{m:?}"
    );
    assert!(!m[&model].unapplied_gradients);
    assert_eq!(m[&model_before].forward_backwards, 2, "{m:?}");

    // Every sample trained exactly once, in its own step; nothing left.
    assert_trained(&w.samples("s-first"), &run, 1);
    assert_trained(&w.samples("s-second"), &run, 2);
    let turns: Vec<String> = w
        .samples("s-first")
        .into_iter()
        .chain(w.samples("s-second"))
        .map(|s| s.turn)
        .collect();
    assert_eq!(turns, [first, second].concat());
    assert_eq!(w.queue().await, (0, 0, 4));
    let again = w.json(&["train", "step", "--json"]).await;
    assert_eq!(again["outcome"], "waiting", "{again}");
    assert_eq!(again["ready"], 0, "{again}");
    // The run's history: step 1, the step the kill cut short (recorded
    // only if its optimiser step was applied), and step 2 trained again.
    let steps: Vec<(i64, i64)> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_i64().unwrap(),
                s["incarnation"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: &[(i64, i64)] = match crash {
        Crash::Step => &[(2, 2), (1, 1)],
        Crash::Save | Crash::FailedSave => &[(2, 2), (2, 1), (1, 1)],
    };
    assert_eq!(steps, expected, "{record}");
}

/// Killed while step 2's `forward_backward` is on the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_step_resumes_from_the_last_checkpoint_and_trains_each_sample_once() {
    kill_and_resume(Crash::Step, "fake-bigram@stall_fwdbwd=2").await;
}

/// Killed while step 2's training state is being saved (the third save:
/// step 1 saved its state and its sampler weights).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_save_resumes_from_the_last_checkpoint_and_trains_each_sample_once() {
    kill_and_resume(Crash::Save, "fake-bigram@stall_save=3").await;
}

/// No kill: step 2's save is refused by the service. The step fails, its
/// samples go back to the queue, and so must the weights: the next step
/// trains them again from step 1's state, not on top of weights that
/// already hold them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_save_trains_the_step_again_from_the_last_checkpoint_and_each_sample_once() {
    kill_and_resume(Crash::FailedSave, "fake-bigram@fail_save=3").await;
}

/// The sampler weights the student serves, its policy version, and how
/// many turns fell back to `llm`.
async fn served(w: &World) -> (String, i64, u64) {
    let status = w.json(&["status", "--json"]).await;
    let student = &status["student"];
    (
        student["sampler"].as_str().unwrap_or_default().to_string(),
        student["policy_version"].as_i64().unwrap_or(-1),
        student["fallbacks"].as_u64().unwrap_or(0),
    )
}

/// Ends the sessions of `model` on the fake, as skyrl does 300 s after
/// their last heartbeat: the model is unloaded, and samples of its
/// checkpoints fail ("Model … not loaded").
async fn unload(w: &World, model: &str) {
    let session = w.models().await[model].session.clone();
    let ended = common::client()
        .post(format!("{}/api/v1/fake/expire_session", w.fake))
        .json(&serde_json::json!({ "session_id": session }))
        .send()
        .await
        .unwrap();
    assert!(ended.status().is_success());
    assert!(!w.models().await.contains_key(model));
}

/// A restart serves the run's saved weights at once, and still once the
/// service has unloaded the dead process's models (skyrl 0.3.0 unloads a
/// session's models 300 s after its last heartbeat; until W3-C a restarted
/// daemon kept sampling the dead model's checkpoint and, once it was gone,
/// fell back to `llm` for good while `status` said "ready"). The new
/// process loads the run's last saved state into a model of its own and
/// serves that, with the same policy version; `status` is "ready" only for
/// a sampler that has sampled. Both orders: the dead process's models
/// unloaded after the restart, and before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_serves_the_saved_weights_also_after_the_service_unloads_the_dead_process() {
    let mut w = World::new(Setup::new(metaclaw_mock_tinker::BASE_MODEL)).await;
    session(&w, "s-first", "Where is Paris?").await;
    let step1 = w.json(&["train", "step", "--json"]).await;
    assert_eq!(step1["outcome"], "stepped", "{step1}");
    let first = w.json(&["train", "status", "--json"]).await["run"]["model_id"]
        .as_str()
        .unwrap()
        .to_string();

    // Killed; the dead process's models are unloaded after the restart.
    killed_and_serving_its_own_copy(&mut w, &first).await;
    unload(&w, &first).await;
    session(&w, "s-after-unload", "Where is Rome?").await;
    let (_, version, fallbacks) = served(&w).await;
    assert_eq!((version, fallbacks), (1, 0), "{}", w.log());

    // Killed again; its models are unloaded before the restart: the
    // student is not "ready" on the dead checkpoint, and serves the saved
    // weights again once loaded.
    let second = w.json(&["train", "status", "--json"]).await["run"]["model_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(second, first);
    w.kill();
    unload(&w, &second).await;
    w.start().await;
    let (sampler, version, fallbacks) = served(&w).await;
    assert!(
        !sampler.starts_with(&format!("tinker://{second}/")) && version == 1 && fallbacks == 0,
        "{sampler} {version} {fallbacks}\n{}",
        w.log()
    );
    session(&w, "s-after-restart", "Where is Oslo?").await;
    assert_eq!(served(&w).await.2, 0, "{}", w.log());
    // The step counter went on from the saved state; nothing was trained.
    let record = w.json(&["train", "status", "--json"]).await["run"].clone();
    assert_eq!(
        (record["step"].as_i64(), record["state_step"].as_i64()),
        (Some(1), Some(1)),
        "{record}"
    );
}

/// Two student turns of session `id` on a real service (whatever it
/// samples): a question, and the user's correction of the answer (the
/// dummy judge scores the first −1, the last 0: a step has signal). Each
/// must be answered by the student; waits until both are stored.
async fn student_session(w: &World, id: &str) {
    let mut messages = vec![serde_json::json!({"role": "user", "content": "Where is Paris?"})];
    for turn in 0..2 {
        let (served, v) = w.ask(id, &messages).await;
        assert!(
            served.starts_with("student"),
            "turn {turn} of {id} served by {served:?}\n{}",
            w.log()
        );
        messages.push(v["choices"][0]["message"].clone());
        messages.push(
            serde_json::json!({"role": "user", "content": "No, that's wrong. It is in France."}),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while w.samples(id).len() < 2 {
        assert!(Instant::now() < deadline, "{id}'s turns were not stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (2 minutes at most) until skyrl's log says it unloaded `model`.
async fn unloaded_by_skyrl(server: &common::skyrl::Skyrl, model: &str) {
    let line = format!("Auto-unloaded stale model {model}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !server.log().contains(&line) {
        assert!(
            Instant::now() < deadline,
            "skyrl never unloaded {model}:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The run's training model now.
async fn training_model(w: &World) -> String {
    w.json(&["train", "status", "--json"]).await["run"]["model_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The same against skyrl 0.3.0 (the tiny Qwen3 on CPU), with sessions
/// unloaded 10 s after their last heartbeat instead of 300: after a
/// `kill -9` the restarted daemon answers from the student with the
/// step's weights within a minute (`World::start` waits for "ready"), both
/// inside the unload window and after it, with no turn falling back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_skyrl_a_restart_serves_the_saved_weights_inside_and_after_the_unload_window() {
    let Some(server) =
        common::skyrl::start_with("restart against skyrl", &["--session-timeout", "10"])
    else {
        return;
    };
    let model = common::skyrl::model_dir();
    let mut w = World::new(Setup::against(&server.proc.url, &model)).await;
    student_session(&w, "s-first").await;
    w.learn("s-first").await;
    let step1 = w.json(&["train", "step", "--json"]).await;
    assert_eq!(step1["outcome"], "stepped", "{step1}\n{}", w.log());
    let first = training_model(&w).await;

    // Inside the window: the dead process's model is still loaded, and
    // serves until the new process has loaded the saved state into a
    // model of its own (with skyrl's 300 s window that is long before the
    // unload; with 10 s, a loaded machine can be slower, so the test waits
    // for it before the unload).
    killed_and_serving_its_own_copy(&mut w, &first).await;
    unloaded_by_skyrl(&server, &first).await;
    student_session(&w, "s-after-unload").await;
    let (sampler, version, fallbacks) = served(&w).await;
    assert!(
        !sampler.starts_with(&format!("tinker://{first}/")) && version == 1 && fallbacks == 0,
        "{sampler} {version} {fallbacks}"
    );

    // After the window: the dead process's model is gone before the
    // restart.
    let second = training_model(&w).await;
    w.kill();
    unloaded_by_skyrl(&server, &second).await;
    let restarted = Instant::now();
    w.start().await;
    eprintln!(
        "restarted after the unload: the student serves again after {:.1} s",
        restarted.elapsed().as_secs_f64()
    );
    let (sampler, version, fallbacks) = served(&w).await;
    assert!(
        !sampler.starts_with(&format!("tinker://{second}/")) && version == 1 && fallbacks == 0,
        "{sampler} {version} {fallbacks}"
    );
    student_session(&w, "s-after-restart").await;
    assert_eq!(served(&w).await.2, 0, "{}", w.log());

    // Learning turned off (nothing trains): the saved weights are still
    // loaded again by the new process and served, after the unload too.
    let config = w.home.path().join("config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("learning:\n  enabled: true\n"), "{text}");
    std::fs::write(
        &config,
        text.replace(
            "learning:\n  enabled: true\n",
            "learning:\n  enabled: false\n",
        ),
    )
    .unwrap();
    let third = training_model(&w).await;
    w.kill();
    unloaded_by_skyrl(&server, &third).await;
    w.start().await;
    let (sampler, version, fallbacks) = served(&w).await;
    assert!(
        !sampler.starts_with(&format!("tinker://{third}/")) && version == 1 && fallbacks == 0,
        "{sampler} {version} {fallbacks}"
    );
    student_session(&w, "s-learning-off").await;
    assert_eq!(served(&w).await.2, 0, "{}", w.log());
    let status = w.json(&["status", "--json"]).await;
    assert_eq!(status["training"]["running"], false, "{status}");
    let out = w.cli(&["train", "step"]).await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("nothing trains"),
        "{said}"
    );
}

/// Kills the daemon (SIGKILL), starts it again and waits until the student
/// serves the saved weights (policy version 1) from a model of the new
/// process, not from `dead`, the killed process's model.
async fn killed_and_serving_its_own_copy(w: &mut World, dead: &str) {
    w.kill();
    w.start().await;
    let status = w
        .until(
            "the saved weights served from a model of the new process",
            |s| {
                let sampler = s["student"]["sampler"].as_str().unwrap_or_default();
                s["student"]["state"] == "ready"
                    && !sampler.starts_with(&format!("tinker://{dead}/"))
                    && sampler != "base"
            },
        )
        .await;
    assert_eq!(
        status["student"]["policy_version"], 1,
        "{}",
        status["student"]
    );
}
