//! The learning page: jobs with their stages, failures and retries, and
//! the drafts evolution made (kept, rejected with the reason, waiting for
//! review).

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use serde::{Deserialize, Serialize};

use super::{PageError, data, frame, nonempty, read, store_conn};
use crate::app::SharedApp;
use crate::store::jobs::{self, Job, JobState, StageDone};
use crate::store::learning::{self, DraftRow};
use crate::ui::Dashboard;
use crate::ui::auth::Login;
use crate::ui::render::refused;

/// Jobs and drafts the page lists (the newest).
const LATEST: u32 = 100;

#[derive(Debug, Default, Deserialize)]
pub struct LearningQuery {
    state: Option<String>,
}

/// A job with what its round's stages did.
#[derive(Debug, Serialize)]
struct JobShown {
    #[serde(flatten)]
    job: Job,
    done: Vec<StageDone>,
}

#[derive(Debug, Serialize)]
struct Shown {
    jobs: Vec<JobShown>,
    drafts: Vec<DraftRow>,
    /// Revisions waiting for review, one line per skill (the newest
    /// `LATEST` skills), and how many wait in all.
    pending: Vec<learning::ReviewGroup>,
    pending_total: i64,
}

pub async fn page(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    query: Result<Query<LearningQuery>, QueryRejection>,
) -> Response {
    let state = match query.as_ref().map(|q| nonempty(&q.state)) {
        Ok(None) => None,
        Ok(Some(s)) => match s.parse::<JobState>() {
            Ok(state) => Some(state),
            Err(e) => return refused(StatusCode::BAD_REQUEST, &format!("state: {e}")),
        },
        Err(e) => return refused(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let reader = app.clone();
    let shown = read(move || {
        let conn = store_conn(&reader)?;
        let err = PageError::store::<anyhow::Error>;
        let jobs = jobs::list_in(&conn, state, LATEST as usize)
            .map_err(err)?
            .into_iter()
            .map(|job| {
                let done = jobs::stages_done(&conn, &job.session_id, job.round)?;
                Ok(JobShown { job, done })
            })
            .collect::<anyhow::Result<_>>()
            .map_err(err)?;
        let sql = PageError::store::<crate::store::sql::Error>;
        let (pending, pending_total) = learning::review_groups(&conn, LATEST).map_err(sql)?;
        Ok(Shown {
            jobs,
            drafts: learning::recent_drafts(&conn, LATEST).map_err(sql)?,
            pending,
            pending_total,
        })
    })
    .await;
    let shown = match shown {
        Ok(shown) => shown,
        Err(page) => return page,
    };
    dashboard.views.page(
        StatusCode::OK,
        "learning.html",
        context! {
            frame => frame("learning", &login, &dashboard),
            on => app.learn.is_some(),
            runner => data(&crate::learn::LearningState::of(app.learn.is_some())),
            state => state.map(|s| s.as_str()),
            states => JobState::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            shown => data(&shown),
        },
    )
}
