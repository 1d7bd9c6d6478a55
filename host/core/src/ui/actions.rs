//! The dashboard's actions (`ui.actions: true`): run learning now, disable
//! or enable a plugin, retire a skill, accept or reject a skill's revisions
//! waiting for review, serve earlier weights, promote or roll back a
//! canary. Each is a
//! form POST from a logged-in page carrying the login's CSRF token (the
//! browser guard has already refused other sites' forms), and each does
//! what the admin API does (`app::actions`).
//!
//! Those that change what metaclaw does (all but enabling a plugin) ask
//! first: the page's button posts the form without `confirm=yes`, which
//! does nothing but answer with a page saying what would happen and a form
//! of its own (the same fields, the CSRF token, `confirm=yes`) to do it.
//! No script is needed, so it works under the dashboard's strict CSP.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use serde::Deserialize;

use super::Dashboard;
use super::auth::{Login, csrf_refusal};
use super::pages::frame;
use super::render::{notice, query_value, refused};
use crate::app::SharedApp;
use crate::app::actions;
use crate::error::ApiError;

#[derive(Debug, Deserialize)]
pub struct ActionForm {
    csrf: String,
    /// Why (retiring a skill).
    why: Option<String>,
    /// The sampler weights to serve (a rollback).
    sampler: Option<String>,
    /// `yes`: asked and confirmed (see the module's doc).
    confirm: Option<String>,
}

/// What an action asks before it acts.
struct Ask<'a> {
    /// The section of the dashboard it belongs to.
    nav: &'a str,
    question: String,
    consequence: String,
    /// The button that does it.
    verb: &'a str,
    /// The action's path and the page to go back to, under the login's
    /// base (`/actions/…`, `/plugins`).
    action: String,
    back: String,
}

/// The form's answer if it has not been confirmed yet: a page that asks,
/// with a form to confirm. `None`: confirmed, go ahead.
fn unconfirmed(
    dashboard: &Dashboard,
    login: &Login,
    form: &ActionForm,
    ask: Ask,
) -> Option<Response> {
    if form.confirm.as_deref() == Some("yes") {
        return None;
    }
    let fields: Vec<(&str, String)> = [("why", &form.why), ("sampler", &form.sampler)]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.clone()?)))
        .collect();
    Some(dashboard.views.page(
        StatusCode::OK,
        "confirm.html",
        context! {
            frame => frame(ask.nav, login, dashboard),
            question => ask.question,
            consequence => ask.consequence,
            verb => ask.verb,
            action => ask.action,
            back => ask.back,
            fields => fields,
        },
    ))
}

/// Why the form may not act, if it may not: actions are off, or the form
/// is not this login's.
fn refusal(dashboard: &Dashboard, login: &Login, form: &ActionForm) -> Option<Response> {
    if !dashboard.settings.actions {
        return Some(refused(
            StatusCode::FORBIDDEN,
            "The dashboard is read-only (ui.actions: false); set ui.actions: true to act from it.",
        ));
    }
    csrf_refusal(login, &form.csrf)
}

fn failed(e: &ApiError) -> Response {
    refused(e.status(), &e.to_string())
}

pub async fn learn_now(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(page) = refusal(&dashboard, &login, &form) {
        return page;
    }
    if app.learn.is_none() {
        return failed(&ApiError::NotFound(crate::learn::OFF.into()));
    }
    let ask = Ask {
        nav: "learning",
        question: "Run every queued and failed learning job now?".into(),
        consequence: "The judge and the evolver models are called for each of them now (which costs what their calls cost), and the skills they draft are published as they pass the evolver plugins.".into(),
        verb: "Learn now",
        action: "/actions/learn-now".into(),
        back: "/learning".into(),
    };
    if let Some(page) = unconfirmed(&dashboard, &login, &form, ask) {
        return page;
    }
    // The jobs may take minutes (judge and evolver calls): the page does
    // not wait for them; the learning page shows them as they go.
    let work = app.work.clone();
    work.task("learning now (from the dashboard)", async move {
        if let Err(e) = actions::learn_now(&app, None, None).await {
            tracing::warn!("learning now (from the dashboard) failed: {e}");
        }
    });
    notice(
        StatusCode::ACCEPTED,
        "Every queued and failed learning job runs now.",
        ("/ui/learning", "See them on the learning page"),
    )
}

/// `…/plugins/{name}/disable` or `…/enable`.
pub async fn plugin(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Path((name, verb)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(page) = refusal(&dashboard, &login, &form) {
        return page;
    }
    let disabled = match verb.as_str() {
        "disable" => true,
        "enable" => false,
        _ => return refused(StatusCode::NOT_FOUND, "A plugin is disabled or enabled."),
    };
    // Enabling gives back what was there: it needs no asking.
    if disabled {
        let ask = Ask {
            nav: "plugins",
            question: format!("Disable the plugin {name}?"),
            consequence: "It is skipped as if it had failed too often: its calls go to the next plugin of its role (or none), until you enable it, replace its file or restart metaclaw. Disabling a guard evolver stops skill evolution.".into(),
            verb: "Disable",
            action: format!("/actions/plugins/{}/disable", query_value(&name)),
            back: "/plugins".into(),
        };
        if let Some(page) = unconfirmed(&dashboard, &login, &form, ask) {
            return page;
        }
    }
    match actions::set_plugin_disabled(&app, &name, disabled) {
        Ok(label) => notice(
            StatusCode::OK,
            &if disabled {
                format!(
                    "{label} is disabled: its calls go to the next plugin until you enable it, replace its file or restart metaclaw."
                )
            } else {
                format!("{label} is enabled again.")
            },
            ("/ui/plugins", "Back to the plugins"),
        ),
        Err(e) => failed(&e),
    }
}

pub async fn skill_retire(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Path(name): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(page) = refusal(&dashboard, &login, &form) {
        return page;
    }
    let why = form
        .why
        .as_deref()
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .unwrap_or("retired from the dashboard")
        .chars()
        .take(200)
        .collect::<String>();
    let ask = Ask {
        nav: "skills",
        question: format!("Retire the skill {name} from retrieval?"),
        consequence: format!(
            "Its SKILL.md gets \"retired: {why}\", and retrieval no longer injects it into any turn, until metaclaw skills restore {name} puts it back."
        ),
        verb: "Retire",
        action: format!("/actions/skills/{}/retire", query_value(&name)),
        back: format!("/skills/{}", query_value(&name)),
    };
    if let Some(page) = unconfirmed(&dashboard, &login, &form, ask) {
        return page;
    }
    let (app, wanted) = (app.clone(), name.clone());
    let done = tokio::task::spawn_blocking(move || actions::retire_skill(&app, &wanted, &why))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())));
    match done {
        Ok(()) => notice(
            StatusCode::OK,
            &format!(
                "{name} is retired: retrieval no longer injects it (`metaclaw skills restore {name}` puts it back)."
            ),
            (
                &format!("/ui/skills/{}", query_value(&name)),
                "Back to the skill",
            ),
        ),
        Err(e) => failed(&e),
    }
}

/// Accepts the newest revision of a skill waiting for review (the older
/// ones rejected as superseded), or rejects them all.
pub async fn review(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Path((name, verb)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(page) = refusal(&dashboard, &login, &form) {
        return page;
    }
    let accept = match verb.as_str() {
        "accept" => true,
        "reject" => false,
        _ => return refused(StatusCode::NOT_FOUND, "No such action: accept or reject."),
    };
    let ask = Ask {
        nav: "learning",
        question: match accept {
            true => format!("Accept the newest revision of {name}?"),
            false => format!("Reject every revision of {name} waiting for review?"),
        },
        consequence: match accept {
            true => "Its SKILL.md is rewritten as that revision (the next version, credited to the session it was learned from), and the older revisions waiting are rejected as superseded. `metaclaw skills review` shows the diff first.".to_string(),
            false => format!("The library's {name} stays as it is; the revisions are kept, marked rejected."),
        },
        verb: if accept { "Accept" } else { "Reject" },
        action: format!("/actions/reviews/{}/{verb}", query_value(&name)),
        back: "/learning".into(),
    };
    if let Some(page) = unconfirmed(&dashboard, &login, &form, ask) {
        return page;
    }
    let (app, wanted) = (app.clone(), name.clone());
    let done = tokio::task::spawn_blocking(move || actions::review_skill(&app, &wanted, accept))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())));
    match done {
        Ok(said) => notice(
            StatusCode::OK,
            &format!("{said}."),
            ("/ui/learning", "Back to learning"),
        ),
        Err(e) => failed(&e),
    }
}

pub async fn rollback(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(page) = refusal(&dashboard, &login, &form) {
        return page;
    }
    let Some(sampler) = form
        .sampler
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    else {
        return refused(
            StatusCode::BAD_REQUEST,
            "Which weights? The form sent no sampler path.",
        );
    };
    let ask = Ask {
        nav: "training",
        question: "Serve these weights?".into(),
        consequence: format!(
            "The student answers from {sampler} from the next turn on, and after restarts, until a later step's weights are swapped in."
        ),
        verb: "Serve these weights",
        action: "/actions/training/rollback".into(),
        back: "/training".into(),
    };
    if let Some(page) = unconfirmed(&dashboard, &login, &form, ask) {
        return page;
    }
    match actions::rollback(&app, None, sampler).await {
        Ok(done) => notice(
            StatusCode::OK,
            &format!(
                "Serving {sampler} (policy version {}) now, and after restarts.",
                done.policy_version
            ),
            ("/ui/training", "Back to training"),
        ),
        Err(e) => failed(&e),
    }
}

/// `…/experiments/{id}/promote` or `…/rollback`: a canary decided by hand.
pub async fn experiment(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Path((id, verb)): Path<(i64, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(page) = refusal(&dashboard, &login, &form) {
        return page;
    }
    let promote = match verb.as_str() {
        "promote" => true,
        "rollback" => false,
        _ => return refused(StatusCode::NOT_FOUND, "No such action."),
    };
    let ask = Ask {
        nav: "experiments",
        question: if promote {
            format!("Promote the candidate of experiment {id} now?")
        } else {
            format!("Roll back the candidate of experiment {id} now?")
        },
        consequence: if promote {
            "Its test ends: every session it fits gets the skill (or, for weights, every session is served by them) from now on, whatever the test said so far.".into()
        } else {
            "Its test ends: the skill leaves retrieval (retired:canary in its history; metaclaw skills restore puts it back), or, for weights, the weights before serve everyone and training goes on from them, whatever the test said so far.".into()
        },
        verb: if promote { "Promote" } else { "Roll back" },
        action: format!("/actions/experiments/{id}/{verb}"),
        back: "/experiments".into(),
    };
    if let Some(page) = unconfirmed(&dashboard, &login, &form, ask) {
        return page;
    }
    let done = tokio::task::spawn_blocking(move || {
        actions::decide_experiment(&app, id, promote, "from the dashboard")
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())));
    match done {
        Ok(v) => notice(
            StatusCode::OK,
            &format!(
                "Experiment {id} is {}: {}",
                v.experiment.state.replace('_', " "),
                v.experiment.reason.as_deref().unwrap_or("")
            ),
            ("/ui/experiments", "Back to the experiments"),
        ),
        Err(e) => failed(&e),
    }
}
