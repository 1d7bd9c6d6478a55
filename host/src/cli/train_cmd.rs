//! `train step | status`. `step` asks the running daemon (it owns the
//! trainer and the served policy); `status` reads the database, daemon or
//! not.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use super::sessions_cmd::store_file;
use super::{TrainArgs, TrainCommand, load_config, local_time, runtime};
use metaclaw_core::admin::AdminClient;
use metaclaw_core::app::actions::{Resumed, RolledBack};
use metaclaw_core::app::status::TrainingStatus;
use metaclaw_core::home::Home;
use metaclaw_core::learn::rl::trainer::Outcome;
use metaclaw_core::store::{train_queue, training};

/// A step waits this long (a cold CPU server compiles for a while).
const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1800);

pub fn run(home: &Home, config_path: &Path, args: TrainArgs) -> Result<ExitCode> {
    // Loaded once (its warnings are printed once).
    let config = load_config(config_path)?.config;
    // `--agent`: that agent's own run, under its own config.
    let (run, config) = match &args.agent {
        None => (Run::default(), config),
        Some(id) => {
            let own = config.for_agent(id.as_str()).map_err(anyhow::Error::msg)?;
            match own {
                Some(own) if own.serves_student() => (Run(id.to_string()), own),
                Some(_) => anyhow::bail!(
                    "agent {id} has no run: its mode does not serve the trainable model (agents.{id}.mode)"
                ),
                None => anyhow::bail!(
                    "agent {id} has no run of its own: give it one in the config (agents.{id}.mode: rl), or leave out --agent for the shared run"
                ),
            }
        }
    };
    match args.command {
        TrainCommand::Step { json } => step(home, &run, json),
        TrainCommand::Status { json } => status(home, &config, &run, json),
        TrainCommand::Checkpoints { json } => checkpoints(home, &config, &run, json),
        TrainCommand::Rollback { path } => rollback(home, &run, &path),
        TrainCommand::Resume => resume(home, &run),
    }
}

/// Whose run: '' the shared one, else an agent's own.
#[derive(Default)]
struct Run(String);

impl Run {
    /// An admin route of this run's trainer.
    fn route(&self, path: &str) -> String {
        match self.0.as_str() {
            "" => path.to_string(),
            agent => format!("{path}?agent={agent}"),
        }
    }
}

use metaclaw_core::learn::rl::checkpoint_step as step_of;

fn checkpoints(
    home: &Home,
    config: &metaclaw_core::config::Config,
    run_of: &Run,
    json: bool,
) -> Result<ExitCode> {
    let env = |k: &str| std::env::var(k).ok();
    let settings = metaclaw_core::tinker::configured::settings(config, &env);
    let conn = store_file(home, Some(config)).read()?;
    let base = metaclaw_core::tinker::configured::base_model(config);
    let list = runtime()?.block_on(async {
        let service = metaclaw_core::tinker::Service::connect(&settings).await?;
        let Some(run) = training::active(&conn, service.url(), &base, &run_of.0).map_err(|e| {
            metaclaw_core::tinker::Error::Client(format!("the training run's record: {e:#}"))
        })?
        else {
            return Ok(None);
        };
        let Some(model_id) = run.model_id.clone() else {
            return Ok(Some((run, Vec::new())));
        };
        let session = service.create_session().await?;
        let list = session
            .attach(&model_id, run.last_seq)
            .checkpoints()
            .await?;
        Ok::<_, metaclaw_core::tinker::Error>(Some((run, list)))
    })?;
    let Some((run, list)) = list else {
        say!("no training run of {base} on {} yet", settings.base_url);
        return Ok(ExitCode::SUCCESS);
    };
    if json {
        let rows: Vec<serde_json::Value> = list
            .iter()
            .map(|c| json!({"kind": c.kind, "path": c.path, "step": step_of(&c.path)}))
            .collect();
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({"run": run.id, "checkpoints": rows}))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "run {} ({} checkpoint(s)); serving {}",
        run.id,
        list.len(),
        run.sampler_path.as_deref().unwrap_or("the base model")
    );
    for c in &list {
        say!(
            "  {:<8} step {:>6}  {}",
            c.kind,
            step_of(&c.path).map_or_else(|| "?".into(), |s| s.to_string()),
            c.path
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn rollback(home: &Home, run: &Run, path: &str) -> Result<ExitCode> {
    let admin = AdminClient::connect(home)?.timeout(STEP_TIMEOUT);
    let route = run.route("/admin/train/rollback");
    let reply: RolledBack =
        runtime()?.block_on(admin.post_as(&route, &json!({ "sampler": path })))?;
    say!(
        "serving {} (policy version {})",
        reply.sampler,
        reply.policy_version
    );
    Ok(ExitCode::SUCCESS)
}

fn resume(home: &Home, run: &Run) -> Result<ExitCode> {
    let admin = AdminClient::connect(home)?;
    let reply: Resumed =
        runtime()?.block_on(admin.post_as(&run.route("/admin/train/resume"), &json!({})))?;
    say!(
        "training resumed (it was paused: {}); learning health is judged afresh from the next step",
        reply.was_paused
    );
    Ok(ExitCode::SUCCESS)
}

fn step(home: &Home, run: &Run, json: bool) -> Result<ExitCode> {
    let admin = AdminClient::connect(home)?.timeout(STEP_TIMEOUT);
    let reply =
        runtime()?.block_on(admin.post_json(&run.route("/admin/train/step"), &json!({})))?;
    if json {
        say!("{}", serde_json::to_string_pretty(&reply)?);
        return Ok(ExitCode::SUCCESS);
    }
    let outcome: Outcome = serde_json::from_value(reply)
        .context("the daemon's step answer is not what this metaclaw reads (restart it if it is another version)")?;
    print_outcome(&outcome);
    Ok(ExitCode::SUCCESS)
}

/// A step's outcome, in a sentence.
fn print_outcome(outcome: &Outcome) {
    let shown = |v: Option<f64>| v.map_or_else(|| "null".into(), |x| x.to_string());
    match outcome {
        Outcome::Stepped(s) => say!(
            "step {} of {}: {} sample(s) in {} datum(s), {} token(s); loss {}, mean reward {:+.3}, KL(sampler‖learner) {}, entropy {}; {} policy version {}{}",
            s.step,
            s.run,
            s.samples,
            s.datums,
            s.tokens,
            shown(s.loss),
            s.mean_reward,
            shown(s.kl_sampler_learner),
            shown(s.entropy),
            match s.under_test {
                Some(id) => format!("testing (experiment {id}: its candidate arm gets it)"),
                None => "serving".to_string(),
            },
            s.policy_version,
            s.checkpoint
                .as_deref()
                .map(|c| format!("; checkpoint {c}"))
                .unwrap_or_default()
        ),
        Outcome::Waiting { ready, batch_size } => say!(
            "no step: {ready} sample(s) ready (a step needs at least one; rl.batch_size {batch_size})"
        ),
        Outcome::UnderTest {
            experiment,
            policy_version,
        } => say!(
            "no step: step {policy_version}'s weights are under test (experiment {experiment}); training goes on once it is decided (`metaclaw experiments show {experiment}`)"
        ),
        Outcome::NoSignal { skipped } => say!(
            "no step: the {skipped} ready sample(s) had no signal (every advantage zero) and were skipped"
        ),
    }
}

/// `train status`: the run, its health and its last steps.
fn print_run(
    run: Option<&training::Run>,
    next_checkpoint: Option<i64>,
    health: Option<&(
        training::HealthMark,
        metaclaw_core::learn::rl::health::Verdict,
    )>,
    steps: &[training::Step],
    on_collapse: &str,
) {
    match run {
        None => say!("no training run yet"),
        Some(run) => {
            say!(
                "run {} on {} ({}): step {}, policy version served {}, last saved state at step {}{}",
                run.id,
                run.base_model,
                run.service,
                run.step,
                run.sampler_step.unwrap_or(0),
                run.state_step
                    .map_or_else(|| "none".to_string(), |s| s.to_string()),
                next_checkpoint
                    .map(|n| format!(", next at step {n}"))
                    .unwrap_or_default()
            );
            if let Some((mark, verdict)) = health {
                say!(
                    "learning health: {} ({}); on collapse: {}",
                    verdict.state.as_str(),
                    verdict.why,
                    on_collapse
                );
                if let Some(why) = &mark.paused {
                    say!("training is paused: {why}; `metaclaw train resume` goes on");
                }
            }
            let num = |v: Option<f64>, digits: usize| {
                v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
            };
            for s in steps {
                let ours = s.ours();
                say!(
                    "  step {:>4}  {}  {} sample(s)  loss {}  mean reward {}  KL {}  entropy {}  answer {} tokens  cut off {}",
                    s.step,
                    local_time(s.at_ms),
                    s.samples,
                    s.loss.map_or_else(|| "-".into(), |l| format!("{l:.4}")),
                    ours.mean_reward
                        .map_or_else(|| "-".into(), |r| format!("{r:+.3}")),
                    num(ours.kl_sampler_learner, 4),
                    num(ours.entropy, 2),
                    num(ours.answer_tokens, 0),
                    ours.truncated_share
                        .map_or_else(|| "-".into(), |t| format!("{:.0}%", t * 100.0)),
                );
            }
        }
    }
}

fn status(
    home: &Home,
    config: &metaclaw_core::config::Config,
    run_of: &Run,
    json: bool,
) -> Result<ExitCode> {
    let path = store_file(home, Some(config));
    let conn = path.read()?;
    let queue = train_queue::counts(&conn, Some(&run_of.0))?;
    let skipped = train_queue::skipped_by_reason(&conn, &run_of.0)?;
    // The newest run of this agent (or the shared one).
    let runs: Vec<training::Run> = training::list(&conn, usize::MAX)?
        .into_iter()
        .filter(|r| r.agent == run_of.0)
        .take(1)
        .collect();
    let steps = match runs.first() {
        Some(run) => training::steps(&conn, &run.id, 10)?,
        None => Vec::new(),
    };
    let rule = metaclaw_core::learn::rl::health::Rule {
        window: config.rl.health_window as usize,
        ..Default::default()
    };
    let health = match runs.first() {
        Some(run) => Some(metaclaw_core::learn::rl::health::of_run(
            &conn, &run.id, &rule,
        )?),
        None => None,
    };
    let every = i64::from(config.rl.save_every);
    let next_checkpoint = (every > 0).then(|| {
        let at = runs.first().map_or(0, |r| r.step);
        (at / every + 1) * every
    });
    let (service, daemon) = runtime()?.block_on(async {
        (
            service_health(config).await,
            daemon_training(home, run_of).await,
        )
    });
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "queue": queue,
                "skipped_by_reason": skipped
                    .iter()
                    .map(|(why, n)| json!({"reason": why, "samples": n}))
                    .collect::<Vec<_>>(),
                "run": runs.first(),
                "steps": steps,
                "next_checkpoint_step": next_checkpoint,
                "health": health.as_ref().map(|(_, v)| v),
                "paused": health.as_ref().and_then(|(m, _)| m.paused.clone()),
                "on_collapse": config.rl.on_collapse.as_str(),
                "service": service,
                "daemon": daemon,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "queue: {} waiting for their session's learning job, {} ready, {} in a step, {} trained, {} skipped",
        queue.waiting,
        queue.ready,
        queue.in_step,
        queue.trained,
        queue.skipped
    );
    for (why, n) in &skipped {
        say!("  skipped {n:>5}: {why}");
    }
    match &service.error {
        None => say!("training service: {} reachable", service.url),
        Some(error) => say!("training service: {} not reachable: {error}", service.url),
    }
    match &daemon {
        None => say!("trainer: the daemon is not running (`metaclaw start`)"),
        Some(None) => {}
        Some(Some(d)) => {
            if let Some(e) = &d.trainer.last_error {
                say!("trainer: the last step failed: {e}");
            }
            if let Some(opd) = &d.trainer.opd {
                say!("distillation: teacher {opd}");
            }
        }
    }
    print_run(
        runs.first(),
        next_checkpoint,
        health.as_ref(),
        &steps,
        config.rl.on_collapse.as_str(),
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether the training service answers (connecting as the trainer does,
/// Whether the training service answers, and why not.
#[derive(serde::Serialize)]
struct ServiceHealth {
    url: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Whether the training service answers (connecting as the trainer does,
/// for at most a few seconds).
async fn service_health(config: &metaclaw_core::config::Config) -> ServiceHealth {
    let env = |k: &str| std::env::var(k).ok();
    let settings = metaclaw_core::tinker::configured::settings(config, &env);
    let url = settings.service_url().to_string();
    let connect = metaclaw_core::tinker::Service::connect(&settings);
    let error = match tokio::time::timeout(std::time::Duration::from_secs(10), connect).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("no answer within 10 s".to_string()),
    };
    ServiceHealth {
        url,
        reachable: error.is_none(),
        error,
    }
}

/// The running daemon's trainer of this run: its last error and
/// distillation state (`None`: no daemon; `Some(None)`: it does not train
/// this run).
async fn daemon_training(home: &Home, run: &Run) -> Option<Option<TrainingStatus>> {
    let admin = AdminClient::connect(home).ok()?;
    let mut status = admin.status().await.ok()?;
    Some(match run.0.as_str() {
        "" => status.training,
        agent => status.agents.remove(agent).and_then(|a| a.training),
    })
}
