//! The sessions list (filters, keyset pages) and a session's page.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use serde::Deserialize;

use super::{PageError, data, frame, nonempty, read, store_conn};
use crate::app::SharedApp;
use crate::store::browse::{self, Cursor, SessionFilter};
use crate::ui::Dashboard;
use crate::ui::auth::Login;
use crate::ui::render::{query_value, refused};

/// Sessions a page of the list shows.
const PAGE: u32 = 50;

/// The list's filters and page, as the form and the links send them.
#[derive(Debug, Default, Deserialize)]
pub struct SessionsQuery {
    status: Option<String>,
    /// The client that sent the session (`openclaw`, …).
    agent: Option<String>,
    /// The agent (namespace) the session belongs to.
    agent_id: Option<String>,
    /// `YYYY-MM-DD`, local time: from the start of that day.
    since: Option<String>,
    /// `YYYY-MM-DD`, local time: until the end of that day.
    until: Option<String>,
    min_reward: Option<String>,
    max_reward: Option<String>,
    q: Option<String>,
    after: Option<String>,
}

/// Local midnight of `YYYY-MM-DD` (plus `days`), as Unix ms.
/// A filter of the sessions list that is not one (the page says so and
/// lists everything).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FilterError {
    #[error("{0:?} is not a date (YYYY-MM-DD)")]
    NotADate(String),
    #[error("no such day")]
    NoSuchDay,
    #[error("{0} has no local midnight")]
    NoMidnight(String),
    #[error("the {which} reward {text:?} is not a number")]
    NotANumber { which: &'static str, text: String },
    #[error("status {0:?} is neither active nor ended")]
    Status(String),
}

fn day_ms(text: &str, days: i64) -> Result<i64, FilterError> {
    use chrono::TimeZone;
    let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map_err(|_| FilterError::NotADate(text.to_string()))?;
    let midnight = (date + chrono::Duration::days(days))
        .and_hms_opt(0, 0, 0)
        .ok_or(FilterError::NoSuchDay)?;
    chrono::Local
        .from_local_datetime(&midnight)
        .earliest()
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| FilterError::NoMidnight(text.to_string()))
}

impl SessionsQuery {
    fn filter(&self) -> Result<SessionFilter, FilterError> {
        let reward =
            |v: &Option<String>, which: &'static str| -> Result<Option<f64>, FilterError> {
                nonempty(v)
                    .map(|s| {
                        s.parse::<f64>()
                            .ok()
                            .filter(|r| r.is_finite())
                            .ok_or_else(|| FilterError::NotANumber {
                                which,
                                text: s.to_string(),
                            })
                    })
                    .transpose()
            };
        Ok(SessionFilter {
            status: match nonempty(&self.status) {
                None => None,
                Some(s @ ("active" | "ended")) => Some(s.to_string()),
                Some(other) => return Err(FilterError::Status(other.to_string())),
            },
            since_ms: nonempty(&self.since).map(|d| day_ms(d, 0)).transpose()?,
            until_ms: nonempty(&self.until).map(|d| day_ms(d, 1)).transpose()?,
            min_reward: reward(&self.min_reward, "lowest")?,
            max_reward: reward(&self.max_reward, "highest")?,
            id_prefix: nonempty(&self.q).map(str::to_string),
            agent: nonempty(&self.agent).map(str::to_string),
            agent_id: nonempty(&self.agent_id).map(str::to_string),
        })
    }

    /// The query string of this filter, for the next page's link.
    fn without_page(&self) -> String {
        [
            ("status", &self.status),
            ("agent", &self.agent),
            ("agent_id", &self.agent_id),
            ("since", &self.since),
            ("until", &self.until),
            ("min_reward", &self.min_reward),
            ("max_reward", &self.max_reward),
            ("q", &self.q),
        ]
        .iter()
        .filter_map(|(k, v)| nonempty(v).map(|v| format!("{k}={}", query_value(v))))
        .collect::<Vec<_>>()
        .join("&")
    }
}

pub async fn list(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    query: Result<Query<SessionsQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(query) => query,
        Err(e) => return refused(StatusCode::BAD_REQUEST, &e.body_text()),
    };
    let (filter, error) = match query.filter() {
        Ok(f) => (f, None),
        Err(e) => (SessionFilter::default(), Some(e.to_string())),
    };
    let after = nonempty(&query.after).and_then(Cursor::parse);
    let page = {
        let (app, filter) = (app.clone(), filter.clone());
        read(move || {
            let conn = store_conn(&app)?;
            let page = browse::sessions_page(&conn, &filter, after.as_ref(), PAGE);
            let agents =
                browse::agents(&conn).and_then(|clients| Ok((clients, browse::agent_ids(&conn)?)));
            page.and_then(|page| Ok((page, agents?)))
                .map_err(PageError::read("the sessions"))
        })
        .await
    };
    let ((rows, next), (agents, agent_ids)) = match page {
        Ok(page) => page,
        Err(page) => return page,
    };
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    dashboard.views.page(
        status,
        "sessions.html",
        context! {
            frame => frame("sessions", &login, &dashboard),
            rows => data(&rows),
            next => next.map(|c| c.text()),
            filter_query => query.without_page(),
            form => context! {
                status => nonempty(&query.status),
                agent => nonempty(&query.agent),
                agent_id => nonempty(&query.agent_id),
                since => nonempty(&query.since),
                until => nonempty(&query.until),
                min_reward => nonempty(&query.min_reward),
                max_reward => nonempty(&query.max_reward),
                q => nonempty(&query.q),
            },
            agents => agents,
            agent_ids => agent_ids,
            first_page => query.after.is_none(),
            error => error,
        },
    )
}

pub async fn show(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Path(id): Path<String>,
) -> Response {
    let wanted = id.clone();
    let view = read(move || {
        let conn = store_conn(&app)?;
        browse::session_view(&conn, &wanted, browse::Detail::default()).map_err(PageError::store)
    })
    .await;
    match view {
        Ok(Some(view)) => dashboard.views.page(
            StatusCode::OK,
            "session.html",
            context! {
                frame => frame("sessions", &login, &dashboard),
                view => data(&view),
            },
        ),
        Ok(None) => refused(
            StatusCode::NOT_FOUND,
            &format!("No session {id:?} is recorded."),
        ),
        Err(page) => page,
    }
}
