//! The dashboard's pages: each reads what it shows (off the async workers,
//! for the store) and renders one template. The helpers here are what
//! every page shares.

pub mod experiments;
pub mod learning;
pub mod overview;
pub mod plugins;
pub mod sessions;
pub mod skills;
pub mod training;

use axum::http::StatusCode;
use axum::response::Response;
use minijinja::value::Serde;
use minijinja::{Value, context};
use serde::Serialize;

use super::Dashboard;
use super::auth::Login;
use super::render::refused;
use crate::app::SharedApp;

/// What every page's frame needs: where it is, where the login's pages
/// are (`ui`: every link starts there), the logout form's token, whether
/// actions are offered.
pub(super) fn frame(nav: &str, login: &Login, dashboard: &Dashboard) -> Value {
    context! {
        nav => nav,
        // `/ui/` and 64 hex digits: nothing to escape, and left unescaped
        // the links read as what they are (`/ui/<key>/…`, not `&#x2f;ui…`).
        ui => Value::from_safe_string(login.base()),
        csrf => login.csrf.clone(),
        actions => dashboard.settings.actions,
        version => env!("CARGO_PKG_VERSION"),
    }
}

/// Runs `read` on a blocking thread; a failure is a page saying so.
/// Why a page could not read what it shows (the page says so, 500).
#[derive(Debug, thiserror::Error)]
pub(super) enum PageError {
    /// The store cannot be opened, or a read failed with causes.
    #[error("{0}")]
    Store(String),
    /// One read: of what, and why.
    #[error("{what}: {error}")]
    Read { what: &'static str, error: String },
}

impl PageError {
    pub(super) fn store<E: std::fmt::Display>(e: E) -> Self {
        Self::Store(format!("{e:#}"))
    }

    pub(super) fn read<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Self + Copy {
        move |e| Self::Read {
            what,
            error: format!("{e:#}"),
        }
    }
}

pub(super) async fn read<T: Send + 'static>(
    read: impl FnOnce() -> Result<T, PageError> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => {
            tracing::warn!("a dashboard page could not read what it shows: {e}");
            Err(refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("This page could not be read: {e}"),
            ))
        }
        Err(_) => Err(refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "This page could not be read.",
        )),
    }
}

pub(super) fn store_conn(app: &SharedApp) -> Result<crate::store::sql::Conn, PageError> {
    app.proxy.store.db().read().map_err(PageError::store)
}

/// A serializable value as the templates read it.
pub(super) fn data<T: Serialize>(value: &T) -> Value {
    Value::from(Serde(value))
}

/// `None` for an absent or blank form field; the text, trimmed, otherwise.
pub(super) fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}
