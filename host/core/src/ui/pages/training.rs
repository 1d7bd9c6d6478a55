//! The training page (rl/auto): mean reward, loss and KL per step as SVG
//! charts, the policy versions served over time with checkpoints and hot
//! swaps, the scheduler's windows, and the runs.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use serde::{Deserialize, Serialize};

use super::{PageError, data, frame, nonempty, read, store_conn};
use crate::app::SharedApp;
use crate::store::scheduler::Transition;
use crate::store::training::{self, Run, Step};
use crate::ui::Dashboard;
use crate::ui::auth::Login;
use crate::ui::chart::{Chart, Marker, MarkerKind, Series, XAxis};
use crate::ui::render::refused;

/// Steps a run's charts show (the latest); the table shows fewer.
const STEPS: usize = 10_000;
const TABLE: usize = 50;
/// Runs and scheduler transitions listed.
const RUNS: usize = 20;
const TRANSITIONS: usize = 200;

#[derive(Debug, Default, Deserialize)]
pub struct TrainingQuery {
    run: Option<String>,
}

/// A step as the table shows it: the service's figures and the trainer's.
#[derive(Debug, Serialize)]
struct StepRow {
    step: i64,
    samples: i64,
    loss: Option<f64>,
    mean_reward: Option<f64>,
    kl: Option<f64>,
    entropy: Option<f64>,
    answer_tokens: Option<f64>,
    truncated: Option<f64>,
    checkpoint: Option<String>,
    served_at_ms: Option<i64>,
    /// The sampler weights it served (a rollback may serve them again).
    sampler: Option<String>,
    at_ms: i64,
}

impl StepRow {
    fn of(step: &Step) -> Self {
        let ours = step.ours();
        Self {
            step: step.step,
            samples: step.samples,
            loss: step.loss,
            mean_reward: ours.mean_reward,
            kl: ours.kl_sampler_learner,
            entropy: ours.entropy,
            answer_tokens: ours.answer_tokens,
            truncated: ours.truncated_share,
            checkpoint: ours.checkpoint,
            served_at_ms: ours.served_at_ms,
            sampler: ours.sampler,
            at_ms: step.at_ms,
        }
    }
}

/// The charts of a run's steps (oldest first).
fn charts(rows: &[StepRow], transitions: &[Transition]) -> Vec<String> {
    let series = |name: &str, value: &dyn Fn(&StepRow) -> Option<f64>| Series {
        name: name.into(),
        points: rows
            .iter()
            .map(|r| (r.step as f64, value(r).unwrap_or(f64::NAN)))
            .collect(),
    };
    let chart = |title: &str, y: &str, series: Vec<Series>| {
        Chart {
            title: title.into(),
            y_label: y.into(),
            x_axis: XAxis::Steps,
            series,
            markers: Vec::new(),
            width: 640,
            height: 220,
        }
        .svg()
    };
    let per_step = |title: &str, y: &str, name: &str, value: &dyn Fn(&StepRow) -> Option<f64>| {
        chart(title, y, vec![series(name, value)])
    };
    // The reward as the health verdict smooths it (½ per step).
    let mut level: Option<f64> = None;
    let smoothed: Vec<Option<f64>> = rows
        .iter()
        .map(|r| {
            if let Some(x) = r.mean_reward {
                level = Some(level.map_or(x, |l| 0.5 * l + 0.5 * x));
            }
            level
        })
        .collect();
    let reward = chart(
        "Mean reward per step (and smoothed)",
        "reward",
        vec![
            series("mean reward", &|r| r.mean_reward),
            Series {
                name: "smoothed".into(),
                points: rows
                    .iter()
                    .zip(&smoothed)
                    .map(|(r, s)| (r.step as f64, s.unwrap_or(f64::NAN)))
                    .collect(),
            },
        ],
    );
    let mut markers: Vec<Marker> = Vec::new();
    for r in rows {
        if let Some(path) = &r.checkpoint {
            markers.push(Marker {
                x: r.at_ms as f64,
                label: format!("checkpoint at step {}: {path}", r.step),
                kind: MarkerKind::Checkpoint,
            });
        }
        if let Some(at) = r.served_at_ms {
            markers.push(Marker {
                x: at as f64,
                label: format!("hot swap: policy version {} serving", r.step),
                kind: MarkerKind::Swap,
            });
        }
    }
    let first = rows.first().map_or(i64::MIN, |r| r.at_ms);
    for t in transitions.iter().filter(|t| t.at_ms >= first) {
        markers.push(Marker {
            x: t.at_ms as f64,
            label: format!("scheduler: {} → {} ({})", t.from, t.to, t.reason),
            kind: MarkerKind::Policy,
        });
    }
    let versions = Chart {
        title: "Policy version served over time (markers: swaps, checkpoints, scheduler)".into(),
        y_label: "policy version".into(),
        x_axis: XAxis::TimeMs,
        series: vec![Series {
            name: "policy version".into(),
            points: rows
                .iter()
                .filter_map(|r| r.served_at_ms.map(|at| (at as f64, r.step as f64)))
                .collect(),
        }],
        markers,
        width: 640,
        height: 220,
    }
    .svg();
    vec![
        reward,
        per_step("Loss per step", "loss", "loss", &|r| r.loss),
        per_step("KL (sampler ‖ learner) per step", "KL", "KL", &|r| r.kl),
        per_step("Entropy per step", "entropy", "entropy", &|r| r.entropy),
        per_step("Answer length per step", "tokens", "tokens", &|r| {
            r.answer_tokens
        }),
        versions,
    ]
}

#[derive(Debug, Serialize)]
struct Shown {
    runs: Vec<Run>,
    run: Option<Run>,
    /// Is it working? The run's learning-health verdict, and a pause.
    health: Option<crate::learn::rl::health::Verdict>,
    paused: Option<String>,
    steps: Vec<StepRow>,
    transitions: Vec<Transition>,
    #[serde(skip)]
    charts: Vec<String>,
}

pub async fn page(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    query: Result<Query<TrainingQuery>, QueryRejection>,
) -> Response {
    let wanted = match &query {
        Ok(Query(q)) => nonempty(&q.run).map(str::to_string),
        Err(e) => return refused(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let reader = app.clone();
    let shown = read(move || {
        let conn = store_conn(&reader)?;
        let err = PageError::store::<anyhow::Error>;
        let runs = training::list(&conn, RUNS).map_err(err)?;
        let run = match &wanted {
            Some(id) => training::get(&conn, id).map_err(err)?,
            None => runs
                .iter()
                .find(|r| r.status == "active")
                .or(runs.first())
                .cloned(),
        };
        let mut steps: Vec<StepRow> = match &run {
            Some(run) => training::steps(&conn, &run.id, STEPS)
                .map_err(err)?
                .iter()
                .map(StepRow::of)
                .collect(),
            None => Vec::new(),
        };
        steps.reverse();
        let rule = reader
            .train
            .as_ref()
            .map(|t| t.health_rule.clone())
            .unwrap_or_default();
        let (health, paused) = match &run {
            Some(run) => {
                let (mark, verdict) =
                    crate::learn::rl::health::of_run(&conn, &run.id, &rule).map_err(err)?;
                (Some(verdict), mark.paused)
            }
            None => (None, None),
        };
        let transitions = crate::store::scheduler::recent(&conn, TRANSITIONS).map_err(err)?;
        let charts = charts(&steps, &transitions);
        // The table: newest first, the latest only.
        steps.reverse();
        steps.truncate(TABLE);
        Ok(Shown {
            runs,
            run,
            health,
            paused,
            steps,
            transitions,
            charts,
        })
    })
    .await;
    let shown = match shown {
        Ok(shown) => shown,
        Err(page) => return page,
    };
    if let (Ok(Query(q)), None) = (&query, &shown.run)
        && let Some(id) = nonempty(&q.run)
    {
        return refused(
            StatusCode::NOT_FOUND,
            &format!("No training run {id:?} is recorded."),
        );
    }
    dashboard.views.page(
        StatusCode::OK,
        "training.html",
        context! {
            frame => frame("training", &login, &dashboard),
            on => app.proxy.policy.is_some(),
            trainer => app.train.is_some(),
            on_collapse => app.train.as_ref().and_then(|t| t.state().on_collapse),
            charts => shown.charts.clone(),
            shown => data(&shown),
        },
    )
}
