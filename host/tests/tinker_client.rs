//! The training bridge's client against the fake Tinker-compatible server
//! (`metaclaw-mock-tinker`) over loopback HTTP: the loop RL runs, resuming
//! in a second session, both dialects (and what the service's config says
//! of them: zstd bodies, legacy JSON), the faults the protocol names
//! (billing pauses and `complete_metadata` included), what `get_info` and
//! `weights_info` tell, and sampling's stops and prompt logprobs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use metaclaw_core::tinker::types::{Datum, LossFn, StopReason};
use metaclaw_core::tinker::{
    AdamParams, Dialect, Error, LoraConfig, SamplingParams, Service, ServiceSettings, Stop,
};
use metaclaw_mock_tinker::{Options, Seen};

/// The fake on a free port, and settings for it (short waits).
async fn fake() -> ServiceSettings {
    fake_with(Options::default()).await
}

/// [`fake`], configured with `options`.
async fn fake_with(options: Options) -> ServiceSettings {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(metaclaw_mock_tinker::serve_with(listener, options));
    let mut settings = ServiceSettings::new(&url, Some("tml-dummy".into()));
    settings.first_retry_wait = Duration::from_millis(5);
    settings.billing_wait = Duration::from_millis(5);
    settings
}

/// What the fake saw.
async fn seen(settings: &ServiceSettings) -> Seen {
    reqwest::get(format!("{}/api/v1/fake/seen", settings.base_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn greedy() -> SamplingParams {
    SamplingParams {
        max_tokens: 4,
        temperature: Some(0.0),
        ..SamplingParams::default()
    }
}

/// The loop RL runs.
async fn train_once(settings: &ServiceSettings, base_model: &str) {
    let service = Service::connect(settings).await.unwrap();
    let session = service.create_session().await.unwrap();
    let model = session
        .create_model(base_model, &LoraConfig::new(4).seeded(1))
        .await
        .unwrap();
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
async fn train_in_time(settings: &ServiceSettings, base_model: &str) {
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
    let faulty = "fake-bigram@drop=2,http500=2,http429=2,http402=2,http408=2,http410=2,try_again=3,metadata=2,slow=20";
    train_in_time(&fake().await, faulty).await;
}

/// A new model of `base_model` on the service at `settings`, with the
/// service and session it lives in.
async fn model_on(
    settings: &ServiceSettings,
    base_model: &str,
    lora: &LoraConfig,
) -> (
    Service,
    metaclaw_core::tinker::Session,
    metaclaw_core::tinker::TrainingModel,
) {
    let service = Service::connect(settings).await.unwrap();
    let session = service.create_session().await.unwrap();
    let model = session.create_model(base_model, lora).await.unwrap();
    (service, session, model)
}

/// A model whose next two calls are answered 402, with a 100 ms pause.
async fn billed_twice() -> (
    Service,
    metaclaw_core::tinker::Session,
    metaclaw_core::tinker::TrainingModel,
) {
    let mut settings = fake().await;
    settings.billing_wait = Duration::from_millis(100);
    model_on(&settings, "fake-bigram@http402=2", &LoraConfig::new(4)).await
}

#[tokio::test]
async fn a_billing_pause_on_a_direct_call_is_waited_out() {
    let (_service, _session, model) = billed_twice().await;
    // get_info is answered 402 twice, then the info.
    let t = Instant::now();
    let info = model.get_info().await.unwrap();
    assert_eq!(info.lora_rank, Some(4));
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
}

#[tokio::test]
async fn a_billing_pause_on_a_poll_waits_as_long_as_set() {
    let (_service, _session, model) = billed_twice().await;
    // The optimiser step's first two polls are answered 402.
    let t = Instant::now();
    model.optim_step(AdamParams::default()).await.unwrap();
    let waited = t.elapsed();
    // The set pause, not the protocol's 5 s.
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_billing_pause_longer_than_the_limit_fails() {
    let mut settings = fake().await;
    settings.billing_limit = Duration::from_millis(50);
    let (_service, _session, model) =
        model_on(&settings, "fake-bigram@http402=100000", &LoraConfig::new(4)).await;
    let e = model.get_info().await.unwrap_err();
    assert!(matches!(e, Error::Service { status: 402, .. }), "{e}");
}

#[tokio::test]
async fn model_and_weights_info_tell_the_base_and_the_lora() {
    let lora = LoraConfig {
        train_attn: false,
        ..LoraConfig::new(8).seeded(3)
    };
    let (service, _session, model) = model_on(&fake().await, "fake-bigram", &lora).await;
    let info = model.get_info().await.unwrap();
    assert_eq!(info.model_id.as_deref(), Some(model.model_id.as_str()));
    assert_eq!(info.base_model.as_deref(), Some("fake-bigram"));
    assert!(info.tokenizer_id.is_some(), "{info:?}");
    assert_eq!((info.is_lora, info.lora_rank), (Some(true), Some(8)));
    assert_eq!(
        (info.train_unembed, info.train_mlp, info.train_attn),
        (Some(true), Some(true), Some(false))
    );

    let path = model.save_for_sampler("info").await.unwrap();
    let weights = service.weights_info(&path).await.unwrap();
    assert_eq!(weights.base_model.as_deref(), Some("fake-bigram"));
    assert_eq!(
        (weights.lora_rank, weights.train_attn),
        (Some(8), Some(false))
    );
    let e = service
        .weights_info("tinker://nobody/weights/none")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Service { status: 404, .. }), "{e}");
}

#[tokio::test]
async fn prompt_logprobs_score_a_fixed_sequence() {
    let settings = fake().await;
    let service = Service::connect(&settings).await.unwrap();
    let session = service.create_session().await.unwrap();
    let sampler = session.sampler(Some("fake-bigram"), None).await.unwrap();
    let sampled = sampler.sample(&[3], &greedy(), 1).await.unwrap();
    assert_eq!(sampled.prompt_logprobs, None, "not asked for");
    let seq = &sampled.sequences[0];

    // The reference's recipe: the sequence as the prompt, one token more.
    let prompt: Vec<i32> = [3].iter().chain(&seq.tokens).copied().collect();
    let score = SamplingParams {
        max_tokens: 1,
        prompt_logprobs: true,
        ..SamplingParams::default()
    };
    let scored = sampler.sample(&prompt, &score, 1).await.unwrap();
    let logprobs = scored.prompt_logprobs.unwrap();
    assert_eq!(logprobs.len(), prompt.len());
    assert_eq!(logprobs[0], None, "the first token has no logprob");
    for (p, s) in logprobs[1..].iter().zip(seq.logprobs.as_ref().unwrap()) {
        assert!((p.unwrap() - s).abs() < 1e-5, "{logprobs:?} vs {seq:?}");
    }
}

#[tokio::test]
async fn sampling_stops_at_stop_strings_and_stop_tokens() {
    let settings = fake().await;
    let service = Service::connect(&settings).await.unwrap();
    let session = service.create_session().await.unwrap();
    let sampler = session.sampler(Some("fake-bigram"), None).await.unwrap();
    let long = SamplingParams {
        max_tokens: 6,
        ..greedy()
    };
    let free = sampler.sample(&[3], &long, 1).await.unwrap().sequences[0].clone();
    assert_eq!(free.tokens.len(), 6);

    // The fake spells each token as one character: stop at the text of
    // tokens 3 and 4 (or earlier, if the text holds it before).
    let text = metaclaw_mock_tinker::detokenize(&free.tokens);
    let stop = text[2..4].to_string();
    let end = (1..=text.len())
        .find(|&n| text[..n].contains(&stop))
        .unwrap();
    let stopped = SamplingParams {
        stop: Some(Stop::Strings(vec![stop])),
        ..long.clone()
    };
    let got = sampler.sample(&[3], &stopped, 1).await.unwrap().sequences[0].clone();
    assert_eq!(got.tokens, free.tokens[..end]);
    assert_eq!(got.stop_reason, StopReason::Stop);

    let at_token = SamplingParams {
        stop: Some(Stop::Tokens(vec![free.tokens[1]])),
        ..long
    };
    let got = sampler.sample(&[3], &at_token, 1).await.unwrap().sequences[0].clone();
    let end = free
        .tokens
        .iter()
        .position(|&t| t == free.tokens[1])
        .unwrap()
        + 1;
    assert_eq!(got.tokens, free.tokens[..end]);
    assert_eq!(got.stop_reason, StopReason::Stop);
}

#[tokio::test]
async fn a_result_announced_by_its_size_is_then_fetched_whole() {
    let settings = fake().await;
    train_in_time(&settings, "fake-bigram@metadata=3").await;
    // The polls allowed a metadata-only answer, and got it three times.
    assert_eq!(seen(&settings).await.complete_metadata, 3);
}

#[tokio::test]
async fn bodies_are_compressed_when_the_service_asks_for_it() {
    let settings = fake_with(Options {
        compress: true,
        ..Options::default()
    })
    .await;
    train_in_time(&settings, "fake-bigram").await;
    let seen = seen(&settings).await;
    assert_eq!(seen.fwdbwd_protobuf, 2, "{seen:?}");
    assert_eq!(seen.fwdbwd_zstd, 2, "{seen:?}");
}

#[tokio::test]
async fn a_legacy_json_service_gets_json_from_the_start() {
    let settings = fake_with(Options {
        json_only: true,
        ..Options::default()
    })
    .await;
    assert_eq!(
        Service::connect(&settings).await.unwrap().dialect(),
        Some(Dialect::Json)
    );
    train_in_time(&settings, "fake-bigram").await;
    let seen = seen(&settings).await;
    assert_eq!((seen.fwdbwd_json, seen.fwdbwd_refused), (2, 0), "{seen:?}");

    // A dialect set by hand still wins.
    let mut forced = settings.clone();
    forced.dialect = Some(Dialect::Protobuf);
    assert_eq!(
        Service::connect(&forced).await.unwrap().dialect(),
        Some(Dialect::Protobuf)
    );
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
        .create_model("fake-bigram", &LoraConfig::new(4))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, Error::SessionEnded(_)), "{e}");
}

#[test]
fn the_key_is_never_printed() {
    let settings = ServiceSettings::new("http://127.0.0.1:1", Some("tml-secret-4471".into()));
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
        .create_model("no-such-model", &LoraConfig::new(4))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("unknown base model"), "{e}");
    assert!(matches!(e, Error::Service { status: 400, .. }), "{e}");
}
