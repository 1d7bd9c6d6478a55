//! `metaclaw tinker` (the real binary) against the fake Tinker server.
//!
//! `check` says whether rl.model can be trained, and otherwise what to
//! change: the key, the model, the address, the dialect.
//!
//! A training run survives a kill -9 in the middle of a step. `metaclaw
//! tinker train` trains against the fake;
//! the fake runs the run's third `forward_backward` but never answers it
//! (`stall_fwdbwd=3`); the step's `optim_step`, submitted right behind it
//! (pipelined), runs too, so the service has applied a step metaclaw never
//! heard of when the process is killed with SIGKILL. The next `train` must
//! not build on it: it loads the last saved state into a new model, and
//! the steps it reports are the steps the fake says the weights it trains
//! have had.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use metaclaw_mock_tinker::ModelReport;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_metaclaw");
const MODEL: &str = "fake-bigram@stall_fwdbwd=3";

fn metaclaw(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("METACLAW_HOME", home)
        .env_remove("TINKER_API_KEY")
        .env_remove("TINKER_BASE_URL")
        .env_remove("METACLAW_RL_TINKER_API_KEY");
    cmd
}

/// `tinker train --json` on `data` (cross-entropy, two datums a step).
fn train_command(home: &Path, data: &Path, steps: &str) -> Command {
    let mut cmd = metaclaw(home);
    cmd.args(["tinker", "train", "--json", "--loss", "cross_entropy"])
        .args(["--batch", "2", "--steps", steps])
        .arg("--data")
        .arg(data);
    cmd
}

fn train(home: &Path, data: &Path, steps: &str) -> Output {
    train_command(home, data, steps).output().unwrap()
}

/// The JSON lines a `train --json` printed.
fn events(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "train failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The fake on a free port (requiring `key`, if given); its URL.
async fn fake(options: metaclaw_mock_tinker::Options) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(metaclaw_mock_tinker::serve_with(listener, options));
    url
}

/// `tinker check` with this config; (exit success, stdout, stderr).
async fn check(config: &str, json: bool) -> (bool, String, String) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    let mut cmd = metaclaw(home.path());
    cmd.args(["tinker", "check"]);
    if json {
        cmd.arg("--json");
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rl(url: &str, key: Option<&str>, model: &str, extra: &str) -> String {
    let key = key
        .map(|k| format!("  tinker_api_key: {k}\n"))
        .unwrap_or_default();
    format!("rl:\n  tinker_base_url: {url}\n{key}  model: '{model}'\n{extra}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whether_rl_model_can_be_trained_and_what_to_fix() {
    let url = fake(metaclaw_mock_tinker::Options {
        api_key: Some("tml-right"),
        ..Default::default()
    })
    .await;

    let (ok, out, err) = check(&rl(&url, Some("tml-right"), "fake-bigram", ""), false).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("dialect   protobuf"), "{out}");
    assert!(
        out.contains("ok: rl.model `fake-bigram` can be trained here"),
        "{out}"
    );
    let (ok, out, _) = check(&rl(&url, Some("tml-right"), "fake-bigram", ""), true).await;
    let report: Value = serde_json::from_str(&out).unwrap();
    assert!(
        ok && report["trainable"] == true && report["problem"].is_null(),
        "{report}"
    );
    assert_eq!(report["dialect"], "protobuf");
    assert_eq!(report["key_set"], true);
    assert!(!out.contains("tml-right"), "the key was printed: {out}");

    // A refused key, a missing one: what to set, and never the key itself.
    let (ok, out, err) = check(&rl(&url, Some("tml-wrong"), "fake-bigram", ""), false).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("refused the key") && err.contains("rl.tinker_api_key"),
        "{err}"
    );
    assert!(
        !err.contains("tml-wrong") && !out.contains("tml-wrong"),
        "{err}"
    );
    let (ok, _, err) = check(&rl(&url, None, "fake-bigram", ""), false).await;
    assert!(
        !ok && err.contains("wants a key") && err.contains("TINKER_API_KEY"),
        "{err}"
    );

    // A model the service does not train: the ones it does.
    let (ok, out, _) = check(&rl(&url, Some("tml-right"), "Qwen/Qwen3-4B", ""), false).await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("does not offer `Qwen/Qwen3-4B`")
            && out.contains("it trains: fake-bigram")
            && out.contains("Set rl.model"),
        "{out}"
    );

    // Nothing listening there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (ok, _, err) = check(&rl(&closed, Some("tml-right"), "fake-bigram", ""), false).await;
    assert!(
        !ok && err.contains("cannot reach") && err.contains("rl.tinker_base_url"),
        "{err}"
    );

    // A JSON-only server, and a config that insists on protobuf.
    let json_only = fake(metaclaw_mock_tinker::Options {
        json_only: true,
        ..Default::default()
    })
    .await;
    let (ok, out, _) = check(&rl(&json_only, None, "fake-bigram", ""), false).await;
    assert!(ok && out.contains("dialect   json"), "{out}");
    let fixed = rl(
        &json_only,
        None,
        "fake-bigram",
        "  tinker_dialect: protobuf\n",
    );
    let (ok, out, _) = check(&fixed, false).await;
    assert!(
        !ok && out.contains("set rl.tinker_dialect to auto"),
        "{out}"
    );
}

async fn models(url: &str) -> BTreeMap<String, ModelReport> {
    reqwest::get(format!("{url}/api/v1/fake/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn status(home: &Path) -> Value {
    let out = metaclaw(home)
        .args(["tinker", "status", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    runs[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_a_step_is_unanswered_leaves_nothing_inconsistent() {
    let url = fake(metaclaw_mock_tinker::Options::default()).await;

    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.yaml"),
        format!(
            "rl:\n  tinker_base_url: {url}\n  tinker_api_key: tml-dummy\n  model: '{MODEL}'\n  lora_rank: 4\n"
        ),
    )
    .unwrap();
    let data = home.path().join("datums.jsonl");
    let datum = |tokens: &[i64]| {
        let n = tokens.len() - 1;
        json!({
            "model_input": {"chunks": [{"type": "encoded_text", "tokens": &tokens[..n]}]},
            "loss_fn_inputs": {
                "target_tokens": {"data": &tokens[1..], "dtype": "int64", "shape": [n]},
                "weights": {"data": vec![1.0; n], "dtype": "float32", "shape": [n]},
            },
        })
        .to_string()
    };
    std::fs::write(
        &data,
        [
            datum(&[1, 2, 3, 4]),
            datum(&[5, 6, 7]),
            datum(&[8, 9, 10, 11]),
        ]
        .join("\n"),
    )
    .unwrap();

    // Two steps, each saved.
    let first = events(&train(home.path(), &data, "2"));
    assert_eq!(first[0]["weights"], "new", "{first:?}");
    let steps: Vec<_> = first.iter().filter(|e| e["event"] == "step").collect();
    assert_eq!(steps.len(), 2, "{first:?}");
    let saved_at_2 = steps[1]["saved"].as_str().unwrap().to_string();
    let first_model = steps[1]["model_id"].as_str().unwrap().to_string();
    assert!(
        steps.iter().all(|s| s["loss"].as_f64().is_some()),
        "{steps:?}"
    );

    // The third forward_backward is run but never answered, and the
    // optim_step submitted behind it applied: kill -9 then.
    let mut child = train_command(home.path(), &data, "3")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let opened: Value =
        serde_json::from_str(&rx.recv_timeout(Duration::from_secs(120)).unwrap()).unwrap();
    assert_eq!(opened["weights"], "restored", "{opened}");
    assert_eq!(opened["from"], saved_at_2.as_str());
    let stalled_model = opened["model_id"].as_str().unwrap().to_string();
    // The readiness this depends on: the fake has run that step.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = models(&url).await;
        if m.get(&stalled_model)
            .is_some_and(|r| r.forward_backwards == 1 && r.steps == 3)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the third forward_backward never arrived: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        rx.try_iter().all(|l| !l.contains("\"step\"")),
        "a step was reported"
    );

    // The record says a step was in flight; the service applied it.
    let record = status(home.path());
    assert_eq!(record["step"], 2, "{record}");
    assert!(
        record["pending"]
            .as_str()
            .is_some_and(|p| p.contains("step 3")),
        "{record}"
    );
    let m = models(&url).await;
    assert_eq!(m[&stalled_model].steps, 3, "{m:?}");

    // The restart: a new model from the state saved at step 2, then step 3.
    let after = events(&train(home.path(), &data, "1"));
    assert_eq!(after[0]["weights"], "restored", "{after:?}");
    assert_eq!(after[0]["from"], saved_at_2.as_str());
    assert_eq!(after[0]["step"], 2);
    assert_eq!(after[0]["lost"], 0);
    let step = after.iter().find(|e| e["event"] == "step").unwrap();
    assert_eq!(step["step"], 3, "{after:?}");
    let model = step["model_id"].as_str().unwrap();
    assert!(model != stalled_model && model != first_model, "{after:?}");

    // What the service did matches: the model trained now has 3 steps in
    // its weights, 2 of them loaded from the step-2 state, 1 its own; the
    // unheard-of step stayed on the abandoned model.
    let m = models(&url).await;
    assert_eq!(m[model].steps, 3, "{m:?}");
    assert_eq!(m[model].loaded_from.as_deref(), Some(saved_at_2.as_str()));
    assert_eq!(m[model].forward_backwards, 1);
    assert!(!m[model].unapplied_gradients);
    assert_eq!(
        m[&stalled_model].loaded_from.as_deref(),
        Some(saved_at_2.as_str())
    );

    // The record agrees, and no checkpoint name was used twice.
    let record = status(home.path());
    assert_eq!(record["step"], 3, "{record}");
    assert!(record["pending"].is_null(), "{record}");
    assert_eq!(record["model_id"], model);
    let saved_at_3 = step["saved"].as_str().unwrap();
    let names = [
        steps[0]["saved"].as_str().unwrap(),
        saved_at_2.as_str(),
        saved_at_3,
    ];
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    let unique: std::collections::BTreeSet<_> = names.iter().map(|p| name(p)).collect();
    assert_eq!(unique.len(), 3, "{names:?}");
    let recorded: Vec<i64> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_i64().unwrap())
        .collect();
    assert_eq!(recorded, [3, 2, 1], "{record}");
}

/// `rl.resume_from_ckpt` set on a run that has its own saves: the next
/// start goes on from that checkpoint, once, with the step counter
/// continued (policy versions only go up); the start after it takes the
/// run's own last save again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_ckpt_overrides_the_runs_own_save_once() {
    let url = fake(metaclaw_mock_tinker::Options::default()).await;
    let home = tempfile::tempdir().unwrap();
    let config = |extra: &str| {
        std::fs::write(
            home.path().join("config.yaml"),
            format!(
                "rl:\n  tinker_base_url: {url}\n  tinker_api_key: tml-dummy\n  model: fake-bigram\n  lora_rank: 4\n{extra}"
            ),
        )
        .unwrap();
    };
    config("");
    let data = home.path().join("datums.jsonl");
    let datum = json!({
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": [2, 3, 4], "dtype": "int64", "shape": [3]},
            "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32", "shape": [3]},
        },
    })
    .to_string();
    std::fs::write(&data, [datum.clone(), datum].join("\n")).unwrap();
    let steps = |events: &[Value]| -> Vec<Value> {
        events
            .iter()
            .filter(|e| e["event"] == "step")
            .cloned()
            .collect()
    };

    let first = steps(&events(&train(home.path(), &data, "2")));
    let saved_at_1 = first[0]["saved"].as_str().unwrap().to_string();
    let saved_at_2 = first[1]["saved"].as_str().unwrap().to_string();

    config(&format!("  resume_from_ckpt: {saved_at_1}\n"));
    let out = events(&train(home.path(), &data, "1"));
    assert_eq!(out[0]["weights"], "restored", "{out:?}");
    assert_eq!(out[0]["from"], saved_at_1.as_str(), "{out:?}");
    let step = &steps(&out)[0];
    assert_eq!(step["step"], 3, "the counter continues: {out:?}");
    let model = step["model_id"].as_str().unwrap();
    let m = models(&url).await;
    // One optimiser step in the checkpoint, one since: step 2's weights
    // were not built on.
    assert_eq!(m[model].steps, 2, "{m:?}");
    assert_eq!(m[model].loaded_from.as_deref(), Some(saved_at_1.as_str()));
    let saved_at_3 = step["saved"].as_str().unwrap().to_string();
    assert_ne!(saved_at_3, saved_at_2);

    // Same config, next start: the run's own last save.
    let again = events(&train(home.path(), &data, "1"));
    assert_eq!(again[0]["from"], saved_at_3.as_str(), "{again:?}");
    assert_eq!(steps(&again)[0]["step"], 4, "{again:?}");
}
