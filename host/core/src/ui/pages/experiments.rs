//! The experiments page: each canary (an evolved skill under test or
//! decided), its arms' sessions and mean rewards, the effect with its
//! interval, the test's evidence against 1/δ, and the decision and why;
//! with `ui.actions`, promote or roll back one still under test.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use super::{PageError, data, frame, read, store_conn};
use crate::app::SharedApp;
use crate::ui::Dashboard;
use crate::ui::auth::Login;

/// The newest experiments shown.
const LATEST: u32 = 100;

pub async fn page(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
) -> Response {
    let on = app
        .proxy
        .skills
        .as_ref()
        .is_some_and(|s| s.settings.canary.is_some());
    // Weights are tested where a trainer serves and trains them.
    let weights = app.train.is_some() && app.info.canary.weights;
    let settings = app.info.canary.clone();
    let rule = settings.clone();
    let reader = app.clone();
    let shown = read(move || {
        let conn = store_conn(&reader)?;
        crate::store::experiments::list(&conn, LATEST)
            .map_err(PageError::read("the experiments"))?
            .into_iter()
            .map(|e| crate::learn::canary::shown(&conn, e, &settings))
            .collect::<anyhow::Result<Vec<_>>>()
            .map_err(PageError::store)
    })
    .await;
    match shown {
        Ok(experiments) => dashboard.views.page(
            StatusCode::OK,
            "experiments.html",
            context! {
                frame => frame("experiments", &login, &dashboard),
                experiments => data(&experiments),
                on => on,
                weights => weights,
                share => rule.share,
                delta => rule.delta,
                min_sessions => rule.min_sessions,
            },
        ),
        Err(page) => page,
    }
}
