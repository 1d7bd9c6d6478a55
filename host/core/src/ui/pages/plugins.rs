//! The plugins page: loaded components, versions, hashes, pins, grants,
//! calls, failures and disabled state.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;

use super::{data, frame};
use crate::app::SharedApp;
use crate::ui::Dashboard;
use crate::ui::auth::Login;

pub async fn page(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
) -> Response {
    let registry = app
        .plugins
        .as_ref()
        .map(|host| crate::plugins::view(&host.current()));
    dashboard.views.page(
        StatusCode::OK,
        "plugins.html",
        context! {
            frame => frame("plugins", &login, &dashboard),
            registry => data(&registry),
            off => app.plugins.is_none(),
        },
    )
}
