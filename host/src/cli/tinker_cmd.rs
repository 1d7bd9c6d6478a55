//! `tinker check | train | status`: the training service the config names
//! (`rl.tinker_base_url`, `rl.tinker_api_key`, `rl.model`, …). `train`
//! drives the active training run in this process; the run's progress is
//! in the store, so `status` reads it whether or not anything runs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::sessions_cmd::store_file;
use super::{TinkerCommand, TinkerTrainArgs, load_config, local_time, runtime};
use metaclaw_core::home::Home;
use metaclaw_core::store;
use metaclaw_core::tinker::types::{Datum, LossFn};
use metaclaw_core::tinker::{self, AdamParams, Service, TrainingRun};

/// What every `tinker` subcommand works with.
struct Cx<'a> {
    home: &'a Home,
    config: metaclaw_core::config::Config,
    settings: tinker::ServiceSettings,
}

pub fn run(home: &Home, config_path: &Path, command: TinkerCommand) -> Result<ExitCode> {
    let loaded = load_config(config_path)?;
    let config = loaded.config;
    let env = |k: &str| std::env::var(k).ok();
    let settings = tinker::configured::settings(&config, &env);
    let cx = Cx {
        home,
        config,
        settings,
    };
    match command {
        TinkerCommand::Check { json } => run_check(&cx, json),
        TinkerCommand::Train(args) => run_train(&cx, args),
        TinkerCommand::Status { json, steps } => run_status(&cx, json, steps),
    }
}

/// `tinker check`.
fn run_check(cx: &Cx, json: bool) -> Result<ExitCode> {
    let model = tinker::configured::base_model(&cx.config);
    let report = runtime()?
        .block_on(tinker::check::check(&cx.settings, &model))
        .map_err(|e| anyhow::anyhow!(tinker::check::advice(&cx.settings, &e)))?;
    let problem = report.problem();
    if json {
        /// The report, and what is wrong, if anything.
        #[derive(serde::Serialize)]
        struct Checked<'a> {
            #[serde(flatten)]
            report: &'a tinker::check::Report,
            problem: &'a Option<String>,
        }
        let checked = Checked {
            report: &report,
            problem: &problem,
        };
        say!("{}", serde_json::to_string_pretty(&checked)?);
    } else {
        say!(
            "service   {} (key {})",
            report.url,
            if report.key_set { "set" } else { "not set" }
        );
        say!(
            "dialect   {}: {}{}",
            report.dialect.map(|d| d.as_str()).unwrap_or("unknown"),
            report.dialect_evidence,
            report
                .configured_dialect
                .map(|d| format!(" (rl.tinker_dialect: {})", d.as_str()))
                .unwrap_or_default()
        );
        say!("flags     {}", report.flags);
        for (name, trainable) in &report.models {
            let what = if *trainable {
                "trainable"
            } else {
                "sampling only"
            };
            say!("model     {name} ({what})");
        }
        match &problem {
            None => say!("ok: rl.model `{}` can be trained here", report.model),
            Some(p) => say!("problem: {p}"),
        }
    }
    Ok(if problem.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A `tinker train --json` line: what happened, and its report.
#[derive(serde::Serialize)]
struct Event<'a, T: serde::Serialize> {
    event: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

/// The first `tinker train --json` line: the run opened, from which
/// weights (`new` or `restored`, `from` where, `lost` steps not in them),
/// and at which step it goes on.
#[derive(serde::Serialize)]
struct OpenedLine<'a> {
    event: &'static str,
    weights: &'static str,
    from: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost: Option<i64>,
    run: &'a str,
    model_id: Option<&'a str>,
    step: i64,
}

/// The run just opened: where its weights came from and at which step it
/// goes on (`--json`: the first line).
fn print_opened(opened: &tinker::Opened, record: &store::training::Run, json: bool) -> Result<()> {
    if !json {
        say!(
            "run {} on {}: model {} at step {} ({})",
            record.id,
            record.service,
            record.model_id.as_deref().unwrap_or("-"),
            record.step,
            describe_opened(opened)
        );
        return Ok(());
    }
    let (weights, from, lost) = match opened {
        tinker::Opened::New { from } => ("new", from.as_deref(), None),
        tinker::Opened::Restored { from, lost, .. } => {
            ("restored", Some(from.as_str()), Some(*lost))
        }
    };
    let line = OpenedLine {
        event: "opened",
        weights,
        from,
        lost,
        run: &record.id,
        model_id: record.model_id.as_deref(),
        step: record.step,
    };
    say!("{}", serde_json::to_string(&line)?);
    Ok(())
}

/// `tinker train`.
fn run_train(cx: &Cx, args: TinkerTrainArgs) -> Result<ExitCode> {
    let TinkerTrainArgs {
        data,
        steps,
        batch,
        loss,
        learning_rate,
        save_every,
        fresh,
        json,
    } = args;
    let datums = read_datums(&data)?;
    let batch = batch.unwrap_or(cx.config.rl.batch_size as usize).max(1);
    let loss_name = loss.unwrap_or_else(|| cx.config.rl.loss_fn.clone());
    let loss: LossFn = serde_json::from_value(json!(loss_name)).map_err(|_| {
        anyhow::anyhow!(
            "unknown loss `{loss_name}`: use cross_entropy, importance_sampling, ppo or cispo"
        )
    })?;
    let adam = AdamParams {
        learning_rate: learning_rate.unwrap_or(cx.config.rl.learning_rate),
        ..AdamParams::default()
    };
    let spec = tinker::configured::run_spec(&cx.config, "", save_every);
    let db = store_file(cx.home, Some(&cx.config));
    runtime()?.block_on(async {
        let service = Service::connect(&cx.settings)
            .await
            .map_err(|e| anyhow::anyhow!(tinker::check::advice(&cx.settings, &e)))?;
        let (mut run, opened) = TrainingRun::open(&service, &db, spec, fresh, None).await?;
        print_opened(&opened, run.record(), json)?;
        for _ in 0..steps {
            let start = (run.record().step as usize * batch) % datums.len();
            let chunk: Vec<Datum> = (0..batch)
                .map(|i| datums[(start + i) % datums.len()].clone())
                .collect();
            let report = run.step(&chunk, loss, &BTreeMap::new(), adam).await?;
            if json {
                let step = Event {
                    event: "step",
                    body: &report,
                };
                say!("{}", serde_json::to_string(&step)?);
            } else {
                let loss = report
                    .loss
                    .map(|l| format!("{l:.4}"))
                    .unwrap_or_else(|| "-".into());
                say!(
                    "step {}: {} datums, loss {loss}{}",
                    report.step,
                    report.samples,
                    report
                        .saved
                        .as_deref()
                        .map(|p| format!(", saved {p}"))
                        .unwrap_or_default()
                );
            }
        }
        // The run ends saved, so the next start loses nothing.
        if run.record().state_step != Some(run.record().step) {
            let path = run.save_state().await?;
            if json {
                say!(
                    "{}",
                    json!({"event": "saved", "path": path, "step": run.record().step})
                );
            } else {
                say!("saved {path}");
            }
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `tinker status`.
fn run_status(cx: &Cx, json: bool, steps: usize) -> Result<ExitCode> {
    let path = store_file(cx.home, Some(&cx.config));
    let runs = if path.exists() {
        let conn = path.read()?;
        store::training::list(&conn, 20)?
            .into_iter()
            .map(|r| {
                let steps = store::training::steps(&conn, &r.id, steps)?;
                anyhow::Ok((r, steps))
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    if json {
        /// A run with its latest steps.
        #[derive(serde::Serialize)]
        struct RunSteps<'a> {
            #[serde(flatten)]
            run: &'a store::training::Run,
            steps: &'a [store::training::Step],
        }
        let v: Vec<_> = runs
            .iter()
            .map(|(run, steps)| RunSteps { run, steps })
            .collect();
        say!("{}", serde_json::to_string_pretty(&v)?);
    } else if runs.is_empty() {
        say!("no training runs yet (`metaclaw tinker train` starts one)");
    } else {
        for (r, s) in &runs {
            say!(
                "{} ({}) {} rank {} on {}: step {}, model {}, saved {}{}",
                r.id,
                r.status,
                r.base_model,
                r.lora_rank,
                r.service,
                r.step,
                r.model_id.as_deref().unwrap_or("-"),
                r.state_path.as_deref().unwrap_or("never"),
                r.pending
                    .as_deref()
                    .map(|p| format!(", interrupted during {p}"))
                    .unwrap_or_default()
            );
            for step in s {
                say!(
                    "  step {} at {}: {} datums, loss {}",
                    step.step,
                    local_time(step.at_ms),
                    step.samples,
                    step.loss
                        .map(|l| format!("{l:.4}"))
                        .unwrap_or_else(|| "-".into())
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn describe_opened(opened: &tinker::Opened) -> String {
    match opened {
        tinker::Opened::New { from: None } => "new LoRA weights".into(),
        tinker::Opened::New { from: Some(p) } => format!("started from {p}"),
        tinker::Opened::Restored { from, lost: 0, .. } => format!("restored from {from}"),
        tinker::Opened::Restored { from, lost, .. } => {
            format!("restored from {from}; {lost} later steps were not saved and are not in it")
        }
    }
}

/// The datums of `path`, one JSON object per line (blank lines skipped).
fn read_datums(path: &Path) -> Result<Vec<Datum>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the datums in {}", path.display()))?;
    let mut datums = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let datum: Datum = serde_json::from_str(line).with_context(|| {
            format!(
                "{} line {}: not a Tinker datum ({{\"model_input\": …, \"loss_fn_inputs\": …}})",
                path.display(),
                i + 1
            )
        })?;
        datums.push(datum);
    }
    if datums.is_empty() {
        bail!("{} has no datums", path.display());
    }
    Ok(datums)
}
