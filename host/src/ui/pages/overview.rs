//! The overview: health, mode, upstream, turns a minute, the latency
//! metaclaw adds, learning, training and the scheduler's window.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use super::{data, frame, read};
use crate::app::SharedApp;
use crate::ui::Dashboard;
use crate::ui::auth::Login;

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
    let status = match read(move || crate::app::status_json(&reader)).await {
        Ok(status) => status,
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
        },
    )
}
