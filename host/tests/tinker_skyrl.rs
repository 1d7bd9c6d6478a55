//! The training bridge against a real Tinker-compatible server: skyrl 0.3.0
//! on CPU with a tiny random Qwen3 (`scripts/skyrl-cpu`, cached under
//! `~/.cache/metaclaw/skyrl-0.3.0`). The full RL loop through our client,
//! in the dialect skyrl 0.3 speaks (JSON `forward_backward`, found by the
//! client's fallback): create → sample → importance-sampling
//! forward/backward → optimiser step → save for sampler → sample the new
//! LoRA → save state → list checkpoints → a second client that continues
//! the model's `seq_id`s, and one that resumes from the saved state.
//!
//! Skipped, saying so, only where there is no Python to run the server.
//! Each phase's time is printed (`--nocapture`); docs/rl.md records them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use metaclaw_core::tinker::types::{Datum, LossFn, Sampled};
use metaclaw_core::tinker::{
    AdamParams, Dialect, LoraConfig, SamplingParams, Service, ServiceSettings, TrainingModel,
};

fn phase<T>(timings: &mut Vec<(String, f64)>, name: &str, started: Instant, value: T) -> T {
    let secs = started.elapsed().as_secs_f64();
    eprintln!("  {name}: {secs:.2} s");
    timings.push((name.to_string(), secs));
    value
}

fn params() -> SamplingParams {
    SamplingParams {
        max_tokens: 8,
        temperature: Some(1.0),
        seed: Some(7),
        ..SamplingParams::default()
    }
}

fn logprobs(s: &Sampled) -> Vec<f32> {
    s.sequences
        .iter()
        .flat_map(|q| q.logprobs.clone().unwrap_or_default())
        .collect()
}

/// One RL step on `samples` (advantage +1): the forward/backward result's
/// logprobs of the sampled tokens, and the optimiser's metrics.
async fn rl_step(
    model: &TrainingModel,
    prompt: &[i32],
    samples: &Sampled,
) -> (Vec<Vec<f32>>, BTreeMap<String, f64>) {
    let data: Vec<Datum> = samples
        .sequences
        .iter()
        .map(|s| Datum::from_sample(prompt, s, 1.0))
        .collect();
    let out = model
        .forward_backward(&data, LossFn::ImportanceSampling, &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(
        out.loss_fn_outputs.len(),
        data.len(),
        "one output per datum"
    );
    let current = out
        .loss_fn_outputs
        .iter()
        .map(|o| o["logprobs"].floats())
        .collect();
    let adam = AdamParams {
        learning_rate: 1e-2,
        ..AdamParams::default()
    };
    let metrics = model.optim_step(adam).await.unwrap();
    (current, metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rl_loop_runs_against_skyrl_on_cpu() {
    let Some(server) = common::skyrl::start("tinker_skyrl") else {
        return;
    };
    let mut timings = Vec::new();
    let settings = ServiceSettings::new(&server.proc.url, Some("tml-dummy".into()));

    let t = Instant::now();
    let service = Service::connect(&settings).await.unwrap();
    let models = service.models().await.unwrap();
    // skyrl names its one model by the directory it was loaded from.
    let base = models
        .iter()
        .find(|(_, trainable)| *trainable)
        .map(|(name, _)| name.clone())
        .unwrap_or_else(|| panic!("no trainable model in {models:?}"));
    let session = service.create_session().await.unwrap();
    let model = session
        .create_model(&base, &LoraConfig::new(4).seeded(1))
        .await
        .unwrap();
    phase(&mut timings, "connect, session, create_model", t, ());

    // The exact tokens and logprobs the base model sampled.
    let prompt: Vec<i32> = vec![1, 2, 3, 4, 5];
    let t = Instant::now();
    let base_sampler = session.sampler(Some(&base), None).await.unwrap();
    let before = base_sampler.sample(&prompt, &params(), 4).await.unwrap();
    phase(&mut timings, "sample base (4 x 8)", t, ());
    assert_eq!(before.sequences.len(), 4);
    for s in &before.sequences {
        assert!(!s.tokens.is_empty() && s.tokens.len() <= 8, "{s:?}");
        assert_eq!(s.logprobs.as_ref().map(Vec::len), Some(s.tokens.len()));
    }

    let t = Instant::now();
    let (current, metrics) = rl_step(&model, &prompt, &before).await;
    phase(&mut timings, "forward_backward + optim_step", t, ());
    // skyrl 0.3 reads only JSON bodies: the client found that out itself.
    assert_eq!(service.dialect(), Some(Dialect::Json));
    // On-policy: the trainer's logprobs of the sampled tokens are the
    // sampler's (the datum is aligned on the next token).
    for (seq, lp) in before.sequences.iter().zip(&current) {
        let sampled = seq.logprobs.clone().unwrap();
        let tail = &lp[lp.len() - sampled.len()..];
        for (a, b) in sampled.iter().zip(tail) {
            assert!(
                (a - b).abs() < 0.05,
                "sampler {sampled:?} vs trainer {tail:?}"
            );
        }
    }
    let grad_norm = metrics.get("skyrl.ai/grad_norm").copied();
    assert!(
        grad_norm.is_some_and(|g| g > 0.0),
        "optim_step's metrics: {metrics:?}"
    );

    let t = Instant::now();
    let sampler_path = model.save_for_sampler("loop-sampler").await.unwrap();
    let trained = session.sampler(None, Some(&sampler_path)).await.unwrap();
    let after = trained.sample(&prompt, &params(), 4).await.unwrap();
    phase(&mut timings, "save for sampler, sample new LoRA", t, ());
    assert_ne!(
        logprobs(&after),
        logprobs(&before),
        "the trained LoRA samples exactly as the base model did"
    );

    let t = Instant::now();
    let state = model.save_state("loop-state").await.unwrap();
    let listed = model.checkpoints().await.unwrap();
    phase(&mut timings, "save state, list checkpoints", t, ());
    assert!(
        listed
            .iter()
            .any(|c| c.path == state && c.kind == "training"),
        "{state} not in {listed:?}"
    );
    assert!(
        listed.iter().any(|c| c.kind == "sampler"),
        "no sampler checkpoint in {listed:?}"
    );
    assert_eq!(model.last_seq(), 4, "fwd/bwd, optim, save, save");

    // A second client (another process's, after a restart) continues the
    // same model where the first left its seq ids.
    let t = Instant::now();
    let service2 = Service::connect(&settings).await.unwrap();
    let session2 = service2.create_session().await.unwrap();
    let resumed = session2.attach(&model.model_id, model.last_seq());
    let (_, metrics) = rl_step(&resumed, &prompt, &after).await;
    phase(&mut timings, "second client: attach, one more step", t, ());
    assert!(metrics.contains_key("skyrl.ai/grad_norm"), "{metrics:?}");
    assert_eq!(resumed.last_seq(), 6);

    // And a fresh model loaded from the saved state samples as the state
    // it was saved from (weights restored, not re-initialised).
    let t = Instant::now();
    let restored = session2
        .create_model(&base, &LoraConfig::new(4).seeded(2))
        .await
        .unwrap();
    restored.load_state(&state, true).await.unwrap();
    let again = restored
        .sampler()
        .await
        .unwrap()
        .sample(&prompt, &params(), 4)
        .await
        .unwrap();
    phase(
        &mut timings,
        "second client: create, load state, sample",
        t,
        (),
    );
    for (a, b) in logprobs(&again).iter().zip(logprobs(&after).iter()) {
        assert!(
            (a - b).abs() < 1e-3,
            "restored {:?} vs saved {:?}",
            logprobs(&again),
            logprobs(&after)
        );
    }
    assert_eq!(again.sequences, after.sequences);
    drop(server);
}
