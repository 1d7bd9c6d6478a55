//! The overview: health, mode, upstream, turns a minute, the latency
//! metaclaw adds, learning, training and the scheduler's window; and, in
//! words and a small chart, what it learned lately and whether it helps
//! (skills added, changed and removed with each version's effect, the
//! reward of judged turns with skills and without, the policy's health).

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use serde::Serialize;

use super::{PageError, data, frame, read, store_conn};
use crate::app::SharedApp;
use crate::store::learning::{DayRewards, RecentChange};
use crate::ui::Dashboard;
use crate::ui::auth::Login;
use crate::ui::chart::{Chart, Series, XAxis};

pub async fn page(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
) -> Response {
    let metrics = &app.proxy.metrics;
    let added = context! {
        p50_ms => metrics.overhead.quantile(0.5).map(|s| s * 1000.0),
        p99_ms => metrics.overhead.quantile(0.99).map(|s| s * 1000.0),
        turns => metrics.overhead.count(),
    };
    let turns_per_minute = metrics.turns_last_minute.count();
    let reader = app.clone();
    let status = match read(move || crate::app::status(&reader).map_err(PageError::store)).await {
        Ok(status) => status,
        Err(page) => return page,
    };
    let reader = app.clone();
    let learned = match read(move || learned(&reader, crate::clock::now_ms())).await {
        Ok(learned) => learned,
        Err(page) => return page,
    };
    dashboard.views.page(
        StatusCode::OK,
        "overview.html",
        context! {
            frame => frame("overview", &login, &dashboard),
            status => data(&status),
            added => added,
            turns_per_minute => turns_per_minute,
            learned => data(&learned),
            trend_chart => learned.chart.clone(),
        },
    )
}

/// How far back "lately" reaches.
const DAYS: i64 = 30;
/// Skill changes listed.
const CHANGES: u32 = 12;
const DAY_MS: i64 = 86_400_000;

/// What it learned lately, and whether it helps.
#[derive(Serialize)]
struct Learned {
    days: i64,
    /// `added`, `changed`, `removed`: how many over [`DAYS`].
    counts: std::collections::BTreeMap<String, i64>,
    changes: Vec<ChangeEffect>,
    /// Judged main turns over [`DAYS`]: with skills and without.
    with_skills: Side,
    without_skills: Side,
    /// The reward per day, with and without skills (SVG; empty without
    /// judged turns).
    #[serde(skip)]
    chart: String,
}

#[derive(Serialize, Default)]
struct Side {
    judged: i64,
    mean: Option<f64>,
}

#[derive(Serialize)]
struct ChangeEffect {
    change: RecentChange,
    /// The version's outcomes (none for a removal).
    effect: Option<crate::skills::outcomes::Effect>,
}

fn learned(app: &SharedApp, now_ms: i64) -> Result<Learned, PageError> {
    let conn = store_conn(app)?;
    let since = now_ms - DAYS * DAY_MS;
    let (changes, counts) = crate::store::learning::recent_changes(&conn, since, CHANGES)
        .map_err(PageError::read("the skills' history"))?;
    let sums = crate::store::outcomes::all(&conn).map_err(PageError::read("the outcomes"))?;
    let all = sums
        .get(&(
            crate::store::outcomes::ALL.to_string(),
            crate::store::outcomes::ALL.to_string(),
        ))
        .copied()
        .unwrap_or_default();
    let changes = changes
        .into_iter()
        .map(|change| {
            let effect = match (change.change.as_str(), &change.version) {
                ("removed", _) | (_, None) => None,
                (_, Some(version)) => {
                    let key = (change.skill_id.clone(), version.clone());
                    let with = sums.get(&key).copied().unwrap_or_default();
                    Some(crate::skills::outcomes::effect(&with, &all))
                }
            };
            ChangeEffect { change, effect }
        })
        .collect();
    let days = crate::store::learning::reward_trend(&conn, since)
        .map_err(PageError::read("the judged turns"))?;
    let side = |n: i64, sum: f64| Side {
        judged: n,
        mean: (n > 0).then(|| sum / n as f64),
    };
    let with_skills = side(
        days.iter().map(|d| d.with_skills).sum(),
        days.iter().map(|d| d.with_sum).sum(),
    );
    let without_skills = side(
        days.iter().map(|d| d.without_skills).sum(),
        days.iter().map(|d| d.without_sum).sum(),
    );
    Ok(Learned {
        days: DAYS,
        counts: counts.into_iter().collect(),
        changes,
        with_skills,
        without_skills,
        chart: trend_chart(&days),
    })
}

/// The mean reward per day of judged main turns with skills and without.
fn trend_chart(days: &[DayRewards]) -> String {
    // One day is a point, not a trend: the sentence says it.
    if days.len() < 2 {
        return String::new();
    }
    let series = |name: &str, pick: &dyn Fn(&DayRewards) -> (i64, f64)| Series {
        name: name.into(),
        points: days
            .iter()
            .filter_map(|d| {
                let (n, sum) = pick(d);
                (n > 0).then(|| ((d.day * DAY_MS) as f64, sum / n as f64))
            })
            .collect(),
    };
    Chart {
        title: "Mean reward of judged turns per day".into(),
        y_label: "reward".into(),
        x_axis: XAxis::TimeMs,
        series: vec![
            series("with skills", &|d| (d.with_skills, d.with_sum)),
            series("without skills", &|d| (d.without_skills, d.without_sum)),
        ],
        markers: Vec::new(),
        width: 520,
        height: 180,
    }
    .svg()
}
