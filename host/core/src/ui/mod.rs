//! The dashboard at `/ui` (docs/dashboard.md): what metaclaw does, shown.
//! Server-rendered HTML (minijinja templates compiled into the binary, a
//! little progressive JavaScript), served by the daemon itself behind the
//! admin token: a login page sets an HttpOnly, SameSite=Strict session
//! cookie scoped to the login's own path (`/ui/<key>/…`, [`auth`]), and
//! every form carries the login's CSRF token. Off with `ui.enabled:
//! false`; read-only unless `ui.actions: true`, and each action that
//! changes what metaclaw does asks first ([`actions`]).

mod actions;
mod auth;
pub mod chart;
mod pages;
mod render;

use std::sync::Arc;

use axum::Router;
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::routing::{any, get, post};

use crate::app::SharedApp;
use crate::config::UiConfig;

/// Where the dashboard's forms post: the browser guard lets a same-origin
/// URL-encoded form through here, and nowhere else.
pub const FORMS: &str = "/ui/";

/// What the dashboard's routes share beside the app.
pub struct Dashboard {
    logins: auth::Logins,
    views: render::Views,
    settings: UiConfig,
}

/// The dashboard's routes, for the daemon's router (none with
/// `ui.enabled: false`). The pages are a router of their own, entered
/// through the login's key ([`auth::enter`]).
pub fn routes(app: &SharedApp) -> anyhow::Result<Router<SharedApp>> {
    let settings = &app.info.ui;
    if !settings.enabled {
        return Ok(Router::new());
    }
    let dashboard = Arc::new(Dashboard {
        logins: auth::Logins::new(std::time::Duration::from_secs(
            u64::from(settings.session_hours.max(1)) * 3600,
        )),
        views: render::Views::new()?,
        settings: settings.clone(),
    });
    let pages = Router::new()
        .route("/ui", get(pages::overview::page))
        .route("/ui/", get(pages::overview::page))
        .route("/ui/sessions", get(pages::sessions::list))
        .route("/ui/sessions/{id}", get(pages::sessions::show))
        .route("/ui/skills", get(pages::skills::list))
        .route("/ui/skills/{name}", get(pages::skills::show))
        .route("/ui/learning", get(pages::learning::page))
        .route("/ui/experiments", get(pages::experiments::page))
        .route("/ui/training", get(pages::training::page))
        .route("/ui/plugins", get(pages::plugins::page))
        .route("/ui/logout", post(auth::logout))
        .route("/ui/actions/learn-now", post(actions::learn_now))
        .route("/ui/actions/plugins/{name}/{verb}", post(actions::plugin))
        .route(
            "/ui/actions/skills/{name}/retire",
            post(actions::skill_retire),
        )
        .route("/ui/actions/training/rollback", post(actions::rollback))
        .route("/ui/actions/reviews/{name}/{verb}", post(actions::review))
        .route(
            "/ui/actions/experiments/{id}/{verb}",
            post(actions::experiment),
        )
        .fallback(|| async { render::refused(StatusCode::NOT_FOUND, "No such page.") })
        .layer(Extension(dashboard.clone()))
        .with_state(app.clone());
    Ok(Router::new()
        .route("/ui", any(auth::enter))
        .route("/ui/", any(auth::enter))
        .route("/ui/{*page}", any(auth::enter))
        .route("/ui/login", get(auth::login_page).post(auth::login))
        .route("/ui/assets/{file}", get(render::asset))
        .layer(Extension(auth::Pages(pages)))
        .layer(Extension(dashboard)))
}
