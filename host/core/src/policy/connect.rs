//! Keeps the student answerable, in the background (serving never waits on
//! it): loads the chat format, connects to the training service, opens a
//! session and a sampler on the newest weights, and starts over when the
//! sampler is lost (service down, session ended). Every failure is in
//! [`super::Health`], which `status` shows.

use std::sync::Arc;
use std::time::Duration;

use metaclaw_chat::render::{ModelFiles, RenderOptions, Renderer};
use tokio_util::sync::CancellationToken;

use super::files::{self, Lookup};
use super::{ChatFormat, Policy, Serving};
use crate::clock::now_ms;
use crate::tinker::{Sampler, SamplingParams, Service, Session, Stop};

/// Waits between attempts: doubled from the first to the last.
const FIRST_RETRY: Duration = Duration::from_secs(2);
const LAST_RETRY: Duration = Duration::from_secs(60);
/// How often a live session is checked for having been ended.
const WATCH: Duration = Duration::from_secs(5);

/// Runs until `cancel`.
pub async fn run(policy: Arc<Policy>, cancel: CancellationToken) {
    let mut wait = FIRST_RETRY;
    loop {
        let attempt = async {
            if policy.format().is_none() {
                load_format(&policy).await?;
            }
            connect(&policy).await
        };
        let result = tokio::select! {
            _ = cancel.cancelled() => return,
            result = attempt => result,
        };
        match result {
            Ok(session) => {
                wait = FIRST_RETRY;
                // Until the sampler is lost or the session ends.
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = policy.reconnect.notified() => break,
                        _ = tokio::time::sleep(WATCH) => {
                            if session.ended() {
                                if let Some(serving) = policy.serving() {
                                    policy.lost(&serving, "the training service ended the session");
                                }
                                break;
                            }
                        }
                    }
                }
            }
            Err(why) => {
                tracing::warn!("the trainable model cannot answer yet: {why}");
                policy.update_health(|h| {
                    h.state = "down".into();
                    h.reason = Some(why.to_string());
                    h.since_ms = now_ms();
                });
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                    // New weights were saved (the trainer loaded the lost
                    // ones again): try them now.
                    _ = policy.reconnect.notified() => wait = FIRST_RETRY / 2,
                }
                wait = (wait * 2).min(LAST_RETRY);
            }
        }
    }
}

/// Why the trainable model cannot answer yet (`status` shows it; the
/// connection is tried again).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Files(#[from] super::files::FilesError),
    /// The chat template or tokenizer cannot be loaded.
    #[error("{0}")]
    Format(String),
    #[error("{0}")]
    Service(#[from] crate::tinker::Error),
    #[error(
        "the saved weights of step {step} ({path}) are gone from the training service ({error}); {}",
        match .reloads {
            true => "the trainer is loading them again",
            false => "nothing loads them again: the trainer did not start (see the log)",
        }
    )]
    WeightsGone {
        step: i64,
        path: String,
        error: crate::tinker::Error,
        reloads: bool,
    },
    #[error("the saved weights of step {step} ({path}) cannot be sampled: {error}")]
    WeightsUnsampled {
        step: i64,
        path: String,
        error: crate::tinker::Error,
    },
    #[error("the base model cannot be sampled: {0}")]
    BaseUnsampled(crate::tinker::Error),
}

/// The renderer, from files found (or fetched) by `files::locate`.
async fn load_format(policy: &Policy) -> Result<(), ConnectError> {
    let settings = &policy.settings;
    let env = |k: &str| std::env::var(k).ok();
    let lookup = Lookup {
        model: &settings.base_model,
        tokenizer_path: &settings.tokenizer_path,
        download: settings.download_tokenizer,
        download_dir: settings.download_dir.clone(),
        env: &env,
    };
    let dir = files::locate(&lookup).await?;
    let renderer = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            ModelFiles::from_dir(&dir).and_then(|files| Renderer::new(&files))
        })
        .await
        .map_err(|e| ConnectError::Format(e.to_string()))?
        .map_err(|e| ConnectError::Format(e.to_string()))?
    };
    let format = ChatFormat::new(renderer, settings, dir.clone());
    tracing::info!(
        rendering = format.renderer.id(),
        dir = %dir.display(),
        tool_calls = format.family.map_or("none", |f| f.name()),
        "the trainable model's chat format is loaded"
    );
    policy.update_health(|h| {
        h.rendering = Some(format.renderer.id().to_string());
        h.tokenizer_dir = Some(dir.display().to_string());
        h.tool_call_format = Some(format.family.map_or("none", |f| f.name()).into());
    });
    if let Ok(mut slot) = policy.format.write() {
        *slot = Some(Arc::new(format));
    }
    Ok(())
}

/// A session and a sampler on the newest weights (the active training
/// run's last saved sampler, else the base model) that has answered a
/// probe: the student is "ready" only once it has sampled. Saved weights
/// the service no longer holds (skyrl unloads a dead process's models) are
/// never replaced by the base model: the trainer loads them again
/// ([`Policy::weights_lost`]) and this connects to what it saved.
async fn connect(policy: &Policy) -> Result<Arc<Session>, ConnectError> {
    let settings = &policy.settings;
    let service = Service::connect(&settings.tinker).await?;
    let session = Arc::new(service.create_session().await?);
    let (sampler, name, version) = match latest_sampler(policy, service.url()) {
        Some((path, step)) => {
            let sampled = match session.sampler(None, Some(&path)).await {
                Ok(sampler) => probe(policy, &sampler).await.map(|()| sampler),
                Err(e) => Err(e),
            };
            match sampled {
                Ok(sampler) => (sampler, path, step),
                Err(e) if super::weights_gone(&e) => {
                    policy.lose_weights(&path);
                    return Err(ConnectError::WeightsGone {
                        step,
                        path,
                        error: e,
                        reloads: policy.reloads_weights(),
                    });
                }
                Err(e) => {
                    return Err(ConnectError::WeightsUnsampled {
                        step,
                        path,
                        error: e,
                    });
                }
            }
        }
        None => {
            let (sampler, name, version) = base_sampler(&session, &settings.base_model).await?;
            probe(policy, &sampler)
                .await
                .map_err(ConnectError::BaseUnsampled)?;
            (sampler, name, version)
        }
    };
    tracing::info!(sampler = %name, version, "serving the trainable model");
    policy.install(Serving {
        session: session.clone(),
        sampler,
        sampler_name: name,
        version,
    });
    // Weights under test go on being tested, from this session.
    if let Some(candidate) = policy.under_test()
        && let Err(e) = policy
            .test_candidate(
                &candidate.sampler,
                candidate.policy_version,
                candidate.experiment,
                candidate.share,
            )
            .await
    {
        tracing::warn!(
            sampler = %candidate.sampler,
            "the weights under test cannot be sampled after the reconnect ({e}): their arm's turns fall back until the trainer decides"
        );
    }
    Ok(session)
}

/// One token sampled from a two-word chat: whether the sampler answers at
/// all (creating one checks nothing: skyrl finds a missing model only when
/// it samples).
async fn probe(policy: &Policy, sampler: &Sampler) -> Result<(), crate::tinker::Error> {
    let Some(format) = policy.format() else {
        return Err(crate::tinker::Error::Client(
            "the chat template is not loaded".into(),
        ));
    };
    let messages = [serde_json::json!({"role": "user", "content": "Hello there"})];
    let options = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: format.enable_thinking,
    };
    let rendered = format
        .renderer
        .render(&messages, None, &options)
        .map_err(|e| crate::tinker::Error::Client(format!("cannot render the probe: {e}")))?;
    let params = SamplingParams {
        max_tokens: 1,
        seed: Some(0),
        stop: Some(Stop::Tokens(format.renderer.stop_token_ids().to_vec())),
        ..SamplingParams::default()
    };
    let sampled = tokio::time::timeout(
        policy.settings.sample_timeout,
        sampler.sample(&rendered.tokens, &params, 1),
    )
    .await
    .map_err(|_| {
        crate::tinker::Error::Unavailable(format!(
            "the probe took longer than rl.sample_timeout ({} s)",
            policy.settings.sample_timeout.as_secs_f64()
        ))
    })??;
    match sampled.sequences.is_empty() {
        true => Err(crate::tinker::Error::Protocol(
            "the probe sampled no sequence".into(),
        )),
        false => Ok(()),
    }
}

async fn base_sampler(
    session: &Session,
    base_model: &str,
) -> Result<(crate::tinker::Sampler, String, i64), ConnectError> {
    let sampler = session.sampler(Some(base_model), None).await?;
    Ok((sampler, "base".into(), 0))
}

/// The active training run's last saved sampler weights and their step.
fn latest_sampler(policy: &Policy, service: &str) -> Option<(String, i64)> {
    let conn = policy.settings.db.read().ok()?;
    let run = crate::store::training::active(
        &conn,
        service,
        &policy.settings.base_model,
        &policy.settings.run_agent,
    )
    .ok()??;
    Some((run.sampler_path?, run.sampler_step.unwrap_or(0)))
}
