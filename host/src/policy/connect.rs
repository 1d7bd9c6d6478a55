//! Keeps the student answerable, in the background (serving never waits on
//! it): loads the chat format, connects to the training service, opens a
//! session and a sampler on the newest weights, and starts over when the
//! sampler is lost (service down, session ended). Every failure is in
//! [`super::Health`], which `status` shows.

use std::sync::Arc;
use std::time::Duration;

use metaclaw_chat::render::{ModelFiles, Renderer};
use tokio_util::sync::CancellationToken;

use super::files::{self, Lookup};
use super::{ChatFormat, Policy, Serving};
use crate::clock::now_ms;
use crate::tinker::{Service, Session};

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
                    h.state = "down";
                    h.reason = Some(why);
                    h.since_ms = now_ms();
                });
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(LAST_RETRY);
            }
        }
    }
}

/// The renderer, from files found (or fetched) by `files::locate`.
async fn load_format(policy: &Policy) -> Result<(), String> {
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
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?
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
        h.tool_call_format = Some(format.family.map_or("none", |f| f.name()));
    });
    if let Ok(mut slot) = policy.format.write() {
        *slot = Some(Arc::new(format));
    }
    Ok(())
}

/// A session and a sampler on the newest weights: the active training
/// run's last saved sampler, else the base model.
async fn connect(policy: &Policy) -> Result<Arc<Session>, String> {
    let settings = &policy.settings;
    let service = Service::connect(&settings.tinker)
        .await
        .map_err(|e| e.to_string())?;
    let session = Arc::new(service.create_session().await.map_err(|e| e.to_string())?);
    let newest = latest_sampler(policy, service.url());
    let (sampler, name, version) = match newest {
        Some((path, step)) => match session.sampler(None, Some(&path)).await {
            Ok(sampler) => (sampler, path, step),
            Err(e) => {
                tracing::warn!(
                    "the last saved sampler weights {path} cannot be sampled ({e}); serving the base model"
                );
                base_sampler(&session, &settings.base_model).await?
            }
        },
        None => base_sampler(&session, &settings.base_model).await?,
    };
    tracing::info!(sampler = %name, version, "serving the trainable model");
    policy.install(Serving {
        session: session.clone(),
        sampler,
        sampler_name: name,
        version,
    });
    Ok(session)
}

async fn base_sampler(
    session: &Session,
    base_model: &str,
) -> Result<(crate::tinker::Sampler, String, i64), String> {
    let sampler = session
        .sampler(Some(base_model), None)
        .await
        .map_err(|e| e.to_string())?;
    Ok((sampler, "base".into(), 0))
}

/// The active training run's last saved sampler weights and their step.
fn latest_sampler(policy: &Policy, service: &str) -> Option<(String, i64)> {
    let conn = crate::store::open_read_only(&policy.settings.db).ok()?;
    let run =
        crate::store::training::active(&conn, service, &policy.settings.base_model).ok()??;
    Some((run.sampler_path?, run.sampler_step.unwrap_or(0)))
}
