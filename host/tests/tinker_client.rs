//! The training bridge's client against the fake Tinker-compatible server
//! (`metaclaw-mock-tinker`) over loopback HTTP: the loop RL runs, resuming
//! in a second session, both dialects, and the faults the protocol names.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use metaclaw::tinker::types::{Datum, LossFn};
use metaclaw::tinker::{AdamParams, Dialect, Error, SamplingParams, Service, Settings};

/// The fake on a free port, and settings for it (short waits).
async fn fake() -> Settings {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(metaclaw_mock_tinker::serve(listener));
    let mut settings = Settings::new(&url, Some("tml-dummy".into()));
    settings.first_retry_wait = Duration::from_millis(5);
    settings
}

fn greedy() -> SamplingParams {
    SamplingParams {
        max_tokens: 4,
        temperature: Some(0.0),
        ..SamplingParams::default()
    }
}

/// The loop RL runs.
async fn train_once(settings: &Settings, base_model: &str) {
    let service = Service::connect(settings).await.unwrap();
    let session = service.create_session().await.unwrap();
    let model = session.create_model(base_model, 4, Some(1)).await.unwrap();
    let base = session.sampler(Some(base_model), None).await.unwrap();
    let before = base.sample(&[3], &greedy(), 1).await.unwrap();
    let seq = &before.sequences[0];
    assert_eq!(seq.tokens.len(), seq.logprobs.as_ref().unwrap().len());

    let out = model
        .forward_backward(
            &[Datum::from_sample(&[3], seq, -1.0)],
            LossFn::ImportanceSampling,
            &BTreeMap::new(),
        )
        .await
        .unwrap();
    let current = out.loss_fn_outputs[0]["logprobs"].floats();
    assert_eq!(current.len(), seq.tokens.len(), "one logprob per target");
    let adam = AdamParams {
        learning_rate: 1.0,
        ..AdamParams::default()
    };
    let metrics = model.optim_step(adam).await.unwrap();
    assert!(metrics.values().any(|v| *v > 0.0), "{metrics:?}");
    let after = model
        .sampler()
        .await
        .unwrap()
        .sample(&[3], &greedy(), 1)
        .await
        .unwrap();
    assert_ne!(
        after.sequences[0], before.sequences[0],
        "training changed nothing"
    );

    let path = model.save_state("step-1").await.unwrap();
    assert!(path.ends_with("/weights/step-1"), "{path}");
    let listed = model.checkpoints().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|c| c.path == path && c.kind == "training"),
        "{listed:?}"
    );
    assert_eq!(model.last_seq(), 4);

    // A second client (a restart) picks the model up where the first left.
    let again = Service::connect(settings).await.unwrap();
    let resumed = again
        .create_session()
        .await
        .unwrap()
        .attach(&model.model_id, model.last_seq());
    resumed.load_state(&path, true).await.unwrap();
    resumed
        .forward_backward(
            &[Datum::from_sample(&[3], &after.sequences[0], 1.0)],
            LossFn::ImportanceSampling,
            &BTreeMap::new(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.last_seq(), 6);
}

/// [`train_once`] within a time limit: a lost `seq_id` would hang it.
async fn train_in_time(settings: &Settings, base_model: &str) {
    tokio::time::timeout(Duration::from_secs(60), train_once(settings, base_model))
        .await
        .expect("the loop hung");
}

#[tokio::test]
async fn the_rl_loop_runs_and_resumes_in_a_second_session() {
    let settings = fake().await;
    train_in_time(&settings, "fake-bigram").await;
}

#[tokio::test]
async fn the_json_dialect_runs_the_same_loop() {
    let mut settings = fake().await;
    settings.dialect = Some(Dialect::Json);
    train_in_time(&settings, "fake-bigram").await;
}

#[tokio::test]
async fn the_loop_survives_every_fault_the_protocol_names() {
    let faulty = "fake-bigram@drop=2,http500=2,http429=2,http408=2,http410=2,try_again=3,slow=20";
    train_in_time(&fake().await, faulty).await;
}

#[tokio::test]
async fn a_session_the_service_ended_refuses_further_calls() {
    let mut settings = fake().await;
    settings.heartbeat = Duration::from_millis(20);
    let service = Service::connect(&settings).await.unwrap();
    let session = service.create_session().await.unwrap();
    reqwest::Client::new()
        .post(format!("{}/api/v1/fake/expire_session", settings.base_url))
        .json(&serde_json::json!({"session_id": session.id()}))
        .send()
        .await
        .unwrap();
    // Wait for what the heartbeat learns, not for a count of beats.
    let ended = async {
        while !session.ended() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ended)
        .await
        .expect("no heartbeat saw the 410");
    let e = session
        .create_model("fake-bigram", 4, None)
        .await
        .err()
        .unwrap();
    assert!(matches!(e, Error::SessionEnded(_)), "{e}");
}

#[test]
fn the_key_is_never_printed() {
    let settings = Settings::new("http://127.0.0.1:1", Some("tml-secret-4471".into()));
    let printed = format!("{settings:?}");
    assert!(!printed.contains("tml-secret-4471"), "{printed}");
    assert!(printed.contains("<redacted>"), "{printed}");
}

#[tokio::test]
async fn refusals_say_what_the_service_said() {
    let settings = fake().await;
    let service = Service::connect(&settings).await.unwrap();
    let models = service.models().await.unwrap();
    assert!(
        models.contains(&("fake-bigram".to_string(), true)),
        "{models:?}"
    );
    let session = service.create_session().await.unwrap();
    let e = session
        .create_model("no-such-model", 4, None)
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("unknown base model"), "{e}");
    assert!(matches!(e, Error::Service { status: 400, .. }), "{e}");
}
