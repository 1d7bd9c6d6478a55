//! The HTTP surface: routes, authentication, and serving with TCP_NODELAY,
//! a deadline on request headers and a bounded graceful shutdown.
//!
//! Before any route, every request must name a `Host` this daemon serves
//! (127.0.0.1, localhost, [::1] on its port, `proxy.host`,
//! `proxy.allowed_hosts`), and every POST must not come from another
//! origin's page nor be `text/plain`, a form or multipart ([`guard`]): a
//! web page cannot reach the proxy through the user's browser. No CORS
//! header is ever sent.
//!
//! | route | auth |
//! |---|---|
//! | `GET /healthz` | none |
//! | `POST /v1/chat/completions` (also `/chat/completions`) | `proxy.api_key`, if set |
//! | `POST /v1/messages` (Anthropic Messages) | `proxy.api_key` as `x-api-key` or bearer, if set |
//! | `POST /v1/responses` (OpenAI Responses) | `proxy.api_key`, if set |
//! | `GET /v1/models` | `proxy.api_key`, if set |
//! | `POST /v1/sessions/{id}/end` | `proxy.api_key`, if set |
//! | `POST /v1/feedback` (a turn's or session's thumb or score: [`crate::app::feedback`]) | `proxy.api_key`, if set |
//! | `GET /metrics` | `proxy.api_key`, if set |
//! | `GET /admin/status` | the admin token (`<home>/admin.token`), always |
//! | `GET /admin/plugins`, `POST /admin/plugins/reload` | the admin token, always |
//! | `POST /admin/learn/now` (`{"session": ID}` or `{}`) | the admin token, always |
//! | `POST /admin/experiments/{id}/decide` (`{"decision": "promote"|"rollback", "reason": TEXT}`) | the admin token, always |
//! | `POST /admin/experiments/start` (`{"skill": NAME}`: its current version under test) | the admin token, always |
//! | `POST /admin/train/step`, `POST /admin/train/rollback` (`{"sampler": PATH}`), `POST /admin/train/resume` | the admin token, always |
//! | `GET /ui…` (the dashboard, [`crate::ui`]) | a login with the admin token (a session cookie); forms also a CSRF token |

pub mod guard;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::{Listener, ListenerExt};
use metaclaw_wire::Front;
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::app::SharedApp;
use crate::error::ApiError;
use crate::metrics::Gauges;
use crate::proxy::turn;
use crate::sessions::{EndOutcome, EndReason};

pub use guard::Guard;

pub fn router(app: SharedApp, guard: Guard) -> Router {
    // The turn handlers get only what a turn needs.
    let turns = Router::new()
        .route("/v1/chat/completions", post(turn::chat_completions))
        .route("/chat/completions", post(turn::chat_completions))
        .route("/v1/messages", post(turn::messages))
        .route("/v1/responses", post(turn::responses))
        .route("/responses", post(turn::responses))
        .with_state(app.proxy.clone());
    let proxy = Router::new()
        .merge(turns)
        .route("/v1/models", get(models))
        .route("/v1/sessions/{id}/end", post(end_session))
        .route("/v1/feedback", post(feedback))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            require_proxy_token,
        ));
    let admin = Router::new()
        .route("/admin/status", get(admin_status))
        .route("/admin/plugins", get(admin_plugins))
        .route("/admin/plugins/reload", post(admin_plugins_reload))
        .route("/admin/learn/now", post(admin_learn_now))
        .route("/admin/train/step", post(admin_train_step))
        .route("/admin/train/rollback", post(admin_train_rollback))
        .route("/admin/train/resume", post(admin_train_resume))
        .route(
            "/admin/experiments/{id}/decide",
            post(admin_decide_experiment),
        )
        .route("/admin/experiments/start", post(admin_start_experiment))
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            require_admin_token,
        ));
    // The dashboard: its own login, on top of the admin token.
    let ui = crate::ui::routes(&app).unwrap_or_else(|e| {
        tracing::error!("the dashboard is off: {e:#}");
        Router::new()
    });
    Router::new()
        .route("/healthz", get(healthz))
        .merge(proxy)
        .merge(admin)
        .merge(ui)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Outermost: before routing, auth and any body is read.
        .layer(middleware::from_fn_with_state(
            (app.clone(), Arc::new(guard)),
            browser_guard,
        ))
        .with_state(app)
}

/// Serves until `shutdown` resolves, then lets requests in flight finish for
/// up to `grace` before dropping them (streams cut this way are recorded as
/// incomplete). A connection whose request headers are not all in within
/// `header_timeout` (an idle keep-alive one included) is closed, so slow or
/// silent clients cannot hold connections forever; request bodies have their
/// own deadline (`proxy.timeouts.client_body`, in the handlers).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
    header_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let mut listener = listener.tap_io(|tcp| {
        // Without it, small SSE frames wait on delayed ACKs (40 ms stalls).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
    });
    // HTTP/1 only: guessing the version first would wait on a silent
    // client's first bytes with no deadline at all.
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // Each connection's task; those still open after the grace period are
    // aborted when this set is dropped.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // `accept` rides out errors itself (a full fd table: it logs and
        // waits a second rather than spinning).
        let (io, _remote) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let connection = builder
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(router.clone()))
            .into_owned();
        let connection = graceful.watch(connection);
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::trace!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!("requests still in flight after {grace:?}; closing them");
        }
    }
    Ok(())
}

/// Refuses what a web page could make the user's browser send: an unserved
/// `Host` on any request; another origin, or a preflight-free content type,
/// on a state-changing one (`OPTIONS` stays a 405 with no CORS allowance).
async fn browser_guard(
    State((app, guard)): State<(SharedApp, Arc<Guard>)>,
    request: Request,
    next: Next,
) -> Response {
    let checked = guard.check_host(request.headers()).and_then(|()| {
        if request.method().is_safe() {
            Ok(())
        } else if request.uri().path().starts_with(crate::ui::FORMS) {
            guard.check_dashboard_form(request.headers())
        } else {
            guard.check_browser(request.headers())
        }
    });
    match checked {
        Ok(()) => next.run(request).await,
        Err(e) => refuse(&app, request.uri().path(), e),
    }
}

async fn require_proxy_token(
    State(app): State<SharedApp>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(expected) = &app.proxy_token
        && let Err(e) = check_token(request.headers(), expected, true)
    {
        return refuse(&app, request.uri().path(), e);
    }
    next.run(request).await
}

/// The error counted, in the shape the route's clients parse.
fn refuse(app: &SharedApp, path: &str, e: ApiError) -> Response {
    app.proxy.metrics.errors.inc(&[e.kind()]);
    let front = if path.ends_with("/messages") {
        Front::Anthropic
    } else {
        Front::Chat
    };
    let body = e.body_for(front);
    e.into_response_with(body)
}

async fn require_admin_token(
    State(app): State<SharedApp>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(e) = check_token(request.headers(), &app.admin_token, false) {
        app.proxy.metrics.errors.inc(&[e.kind()]);
        return e.into_response();
    }
    next.run(request).await
}

/// `Authorization: Bearer <token>` (or, for Anthropic-style clients,
/// `x-api-key: <token>`), compared in constant time.
fn check_token(headers: &HeaderMap, expected: &str, allow_x_api_key: bool) -> Result<(), ApiError> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let presented = bearer.or_else(|| {
        allow_x_api_key
            .then(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .flatten()
    });
    match presented {
        None if allow_x_api_key => Err(ApiError::Unauthorized(
            "missing token: send `Authorization: Bearer <token>` (or `x-api-key: <token>`)",
        )),
        None => Err(ApiError::Unauthorized(
            "missing token: send `Authorization: Bearer <token>`",
        )),
        Some(token) if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) => Ok(()),
        Some(_) => Err(ApiError::Unauthorized("invalid token")),
    }
}

async fn healthz(State(app): State<SharedApp>) -> Response {
    axum::Json(json!({
        "ok": true,
        "version": env!("CARGO_PKG_VERSION"),
        "mode": app.info.mode,
    }))
    .into_response()
}

/// The upstream's model list; if the upstream has none to give, the
/// configured model.
async fn models(State(app): State<SharedApp>) -> Response {
    let upstream = app.proxy.upstream.get("/models").await;
    if let Ok(response) = upstream
        && response.status().is_success()
        && let Ok(body) = response.bytes().await
        && serde_json::from_slice::<serde_json::Value>(&body).is_ok()
    {
        return (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
    }
    match &app.proxy.upstream.default_model {
        Some(model) => axum::Json(json!({
            "object": "list",
            "data": [{ "id": model, "object": "model", "created": 0, "owned_by": "metaclaw" }],
        }))
        .into_response(),
        None => ApiError::UpstreamUnreachable {
            base: app.proxy.upstream.base.clone(),
            reason: "no model list from the upstream and no llm.model_id configured".into(),
        }
        .into_response(),
    }
}

async fn end_session(State(app): State<SharedApp>, Path(id): Path<String>) -> Response {
    // Whether the end queues a learning job, so a client is not left
    // waiting for one that learning.enabled: false never runs.
    let learning = crate::learn::LearningState::of(app.learn.is_some());
    match app.proxy.sessions.end(&id, EndReason::Api) {
        outcome @ (EndOutcome::Ended | EndOutcome::AlreadyEnded) => axum::Json(json!({
            "id": id,
            "ended": true,
            "already_ended": matches!(outcome, EndOutcome::AlreadyEnded),
            "learning": learning,
        }))
        .into_response(),
        EndOutcome::Unknown => ApiError::NotFound(format!("no session {id:?}")).into_response(),
    }
}

/// The user's thumb or score on a turn or a session. Errors come in the
/// client's shape: Anthropic's when it sends `anthropic-version`.
async fn feedback(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let front = if headers.contains_key("anthropic-version") {
        Front::Anthropic
    } else {
        Front::Chat
    };
    let outcome = match crate::app::feedback::FeedbackRequest::parse(&body) {
        Ok(request) => crate::app::feedback::record(&app, request, "api").await,
        Err(e) => Err(e),
    };
    match outcome {
        Ok(recorded) => axum::Json(recorded).into_response(),
        Err(e) => {
            app.proxy.metrics.errors.inc(&[e.kind()]);
            let body = e.body_for(front);
            e.into_response_with(body)
        }
    }
}

async fn metrics(State(app): State<SharedApp>) -> Response {
    let gauges = Gauges {
        uptime_seconds: app.info.started.elapsed().as_secs_f64(),
        store_queue_depth: app.proxy.store.queue_depth(),
        active_sessions: app.proxy.sessions.active_count(),
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        app.proxy.metrics.render(&gauges),
    )
        .into_response()
}

async fn admin_status(State(app): State<SharedApp>) -> Response {
    // It reads the store: off the async workers.
    match tokio::task::spawn_blocking(move || crate::app::status(&app)).await {
        Ok(Ok(status)) => axum::Json(status).into_response(),
        Ok(Err(e)) => ApiError::Internal(e.to_string()).into_response(),
        Err(_) => ApiError::Internal("cannot read the store".into()).into_response(),
    }
}

async fn admin_plugins(State(app): State<SharedApp>) -> Response {
    let Some(host) = app.plugins.clone() else {
        return ApiError::NotFound("the plugin host is not running (see the log)".into())
            .into_response();
    };
    axum::Json(crate::plugins::view(&host.current())).into_response()
}

/// Rescans the plugin folders now (otherwise they are watched).
async fn admin_plugins_reload(State(app): State<SharedApp>) -> Response {
    let Some(host) = app.plugins.clone() else {
        return ApiError::NotFound("the plugin host is not running (see the log)".into())
            .into_response();
    };
    match tokio::task::spawn_blocking(move || {
        let registry = host.reload();
        crate::plugins::view(&registry)
    })
    .await
    {
        Ok(view) => axum::Json(view).into_response(),
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}

/// Runs a session's learning job now (ending the session first if it is
/// still open), or every queued and failed job; answers when they end.
/// One training step now (rl/auto): what it did, or why none ran.
/// `?agent=ID`: the agent's own run (`agents.<id>`), not the shared one.
#[derive(serde::Deserialize, Default)]
struct RunOf {
    agent: Option<String>,
}

async fn admin_train_step(
    State(app): State<SharedApp>,
    axum::extract::Query(run): axum::extract::Query<RunOf>,
) -> Response {
    let train = match trainer(&app, run.agent.as_deref()) {
        Ok(train) => train,
        Err(e) => return e.into_response(),
    };
    if let Some(why) = &train.steps_off {
        return ApiError::NotFound(format!("nothing trains: {why}")).into_response();
    }
    if let Some(why) = train.state().paused {
        return ApiError::Conflict(format!(
            "training is paused: {why}; `metaclaw train resume` goes on"
        ))
        .into_response();
    }
    match train.step().await {
        Ok(outcome) => axum::Json(json!(outcome)).into_response(),
        // In the service's own words: a refusal is not an outage.
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// A canary's candidate promoted or rolled back by hand.
async fn admin_decide_experiment(
    State(app): State<SharedApp>,
    Path(id): Path<i64>,
    body: axum::body::Bytes,
) -> Response {
    /// `{"decision": "promote" or "rollback", "reason": TEXT}`; a field of
    /// another shape reads as absent.
    #[derive(serde::Deserialize)]
    struct Decision {
        decision: Option<serde_json::Value>,
        reason: Option<serde_json::Value>,
    }
    let request = match serde_json::from_slice::<Decision>(&body) {
        Ok(v) => v,
        Err(e) => return ApiError::InvalidJson(e.to_string()).into_response(),
    };
    let promote = match request.decision.as_ref().and_then(|d| d.as_str()) {
        Some("promote") => true,
        Some("rollback") => false,
        _ => {
            return ApiError::BadRequest(
                "send {\"decision\": \"promote\" or \"rollback\", \"reason\": TEXT}".into(),
            )
            .into_response();
        }
    };
    let why = request
        .reason
        .as_ref()
        .and_then(|r| r.as_str())
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .unwrap_or("no reason given")
        .to_string();
    match tokio::task::spawn_blocking(move || {
        crate::app::actions::decide_experiment(&app, id, promote, &why)
    })
    .await
    {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}

/// A skill the user opts in, put under test.
async fn admin_start_experiment(State(app): State<SharedApp>, body: axum::body::Bytes) -> Response {
    #[derive(serde::Deserialize)]
    struct Start {
        skill: String,
    }
    let skill = match serde_json::from_slice::<Start>(&body) {
        Ok(start) => start.skill,
        Err(e) => {
            return ApiError::BadRequest(format!("send {{\"skill\": NAME}}: {e}")).into_response();
        }
    };
    match tokio::task::spawn_blocking(move || crate::app::actions::start_experiment(&app, &skill))
        .await
    {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}

/// Training paused by a "collapsing" verdict goes on.
async fn admin_train_resume(
    State(app): State<SharedApp>,
    axum::extract::Query(run): axum::extract::Query<RunOf>,
) -> Response {
    let train = match trainer(&app, run.agent.as_deref()) {
        Ok(train) => train,
        Err(e) => return e.into_response(),
    };
    match train.resume().await {
        Ok(was) => axum::Json(crate::app::actions::Resumed {
            resumed: true,
            was_paused: was,
        })
        .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The trainer of the shared run, or of `agent`'s own; or why nothing
/// trains.
fn trainer(
    app: &SharedApp,
    agent: Option<&str>,
) -> Result<crate::learn::rl::trainer::TrainerHandle, ApiError> {
    if let Some(agent) = agent {
        let id = crate::agent_id::AgentId::parse(agent)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if let Some(train) = app.agent_trains.get(&id) {
            return Ok(train.clone());
        }
        let why = match (app.proxy.agent_policies.get(&id), app.learn.is_some()) {
            (None, _) => format!(
                "agent {id} has no run of its own (give it one in the config: agents.{id}.mode: rl)"
            ),
            (Some(None), _) => format!(
                "agent {id} has no run: its mode does not serve the trainable model (agents.{id}.mode)"
            ),
            (Some(Some(_)), false) => {
                "nothing trains: training needs the rewards of learning jobs (learning.enabled: false)".into()
            }
            (Some(Some(_)), true) => format!("agent {id}'s trainer did not start (see the log)"),
        };
        return Err(ApiError::NotFound(why));
    }
    let Some(train) = app.train.clone() else {
        let why = match (&app.proxy.policy, app.learn.is_some()) {
            (None, _) => "nothing trains: the student does not serve (mode: rl or auto)",
            (Some(_), false) => {
                "nothing trains: training needs the rewards of learning jobs (learning.enabled: false)"
            }
            (Some(_), true) => "the trainer did not start (see the log)",
        };
        return Err(ApiError::NotFound(why.into()));
    };
    Ok(train)
}

/// Serves earlier sampler weights: now (the swap) and after restarts (the
/// active run's record names them).
async fn admin_train_rollback(
    State(app): State<SharedApp>,
    axum::extract::Query(run): axum::extract::Query<RunOf>,
    body: axum::body::Bytes,
) -> Response {
    let agent = match run.agent.as_deref().map(crate::agent_id::AgentId::parse) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(e)) => return ApiError::BadRequest(e.to_string()).into_response(),
    };
    #[derive(serde::Deserialize)]
    struct Rollback {
        sampler: Option<serde_json::Value>,
    }
    let sampler = match serde_json::from_slice::<Rollback>(&body) {
        Ok(v) => match v.sampler.as_ref().and_then(|s| s.as_str()) {
            Some(s) if !s.trim().is_empty() => s.trim().to_string(),
            _ => {
                return ApiError::BadRequest(
                    "send {\"sampler\": PATH}, a sampler checkpoint's path (metaclaw train checkpoints)".into(),
                )
                .into_response();
            }
        },
        Err(e) => return ApiError::InvalidJson(e.to_string()).into_response(),
    };
    match crate::app::actions::rollback(&app, agent.as_ref(), &sampler).await {
        Ok(done) => axum::Json(done).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn admin_learn_now(State(app): State<SharedApp>, body: axum::body::Bytes) -> Response {
    if app.learn.is_none() {
        return ApiError::NotFound(crate::learn::OFF.into()).into_response();
    }
    let (session, agent) = if body.iter().all(u8::is_ascii_whitespace) {
        (None, None)
    } else {
        /// `{"session": ID}`, `{"agent": ID}` or `{}`: each checked below.
        #[derive(serde::Deserialize)]
        struct Ask {
            #[serde(default)]
            session: serde_json::Value,
            #[serde(default)]
            agent: serde_json::Value,
        }
        match serde_json::from_slice::<serde_json::Value>(&body)
            .map(|v| (v.is_object(), serde_json::from_value::<Ask>(v)))
        {
            Ok((true, Ok(v))) => {
                let session = match &v.session {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
                    _ => {
                        return ApiError::BadRequest("\"session\" must be a session id".into())
                            .into_response();
                    }
                };
                let agent = match &v.agent {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(a) => match crate::agent_id::AgentId::parse(a) {
                        Ok(id) => Some(id),
                        Err(e) => return ApiError::BadRequest(e.to_string()).into_response(),
                    },
                    _ => {
                        return ApiError::BadRequest("\"agent\" must be an agent id".into())
                            .into_response();
                    }
                };
                (session, agent)
            }
            Ok(_) => {
                return ApiError::BadRequest(
                    "send a JSON object: {\"session\": ID}, {\"agent\": ID} or {}".into(),
                )
                .into_response();
            }
            Err(e) => return ApiError::InvalidJson(e.to_string()).into_response(),
        }
    };
    match crate::app::actions::learn_now(&app, session, agent).await {
        Ok(done) => axum::Json(done).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn not_found(request: Request) -> Response {
    ApiError::NotFound(format!(
        "no route for {} {}",
        request.method(),
        request.uri().path()
    ))
    .into_response()
}

async fn method_not_allowed() -> Response {
    let mut response = ApiError::MethodNotAllowed.into_response();
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use axum::body::Body;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::app::{App, RuntimeInfo};
    use crate::config::{Config, LoadedConfig, ProxyConfig};
    use crate::metrics::Metrics;
    use crate::proxy::upstream::Upstream;
    use crate::proxy::{Limits, Proxy};
    use crate::redact::Redactor;
    use crate::sessions::{Hints, Tracker, TurnType};
    use crate::store::{SessionSource, Store, StoreOptions};

    const PORT: u16 = 30000;
    const ADMIN: &str = "admin-token-0123456789";

    /// The daemon's state on a temporary store, its upstream a closed port
    /// (nothing here may reach it).
    fn app(proxy: ProxyConfig) -> (Served, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(dir.path().join("metaclaw.db"));
        app_on(proxy, db, false, dir)
    }

    /// [`app`] on `db`; `join`: as an instance of a shared store's
    /// deployment (Postgres).
    fn app_on(
        proxy: ProxyConfig,
        db: crate::store::Db,
        join: bool,
        dir: tempfile::TempDir,
    ) -> (Served, tempfile::TempDir) {
        let metrics = Arc::new(Metrics::new());
        let work = crate::work::Work::new();
        let team = match join {
            true => crate::team::Team::join(&db, format!("127.0.0.1:{PORT}"), None, &work).unwrap(),
            false => crate::team::Team::solo(),
        };
        let (store, _writer) = Store::open(
            StoreOptions {
                db,
                commit_interval: Duration::from_millis(10),
                queue_capacity: 64,
                redactor: Redactor::new(Vec::new()),
                on_recorded: None,
                queue_learning: false,
            },
            metrics.clone(),
        )
        .unwrap();
        let mut config = Config {
            proxy,
            ..Config::default()
        };
        config.llm.api_base = "http://127.0.0.1:9/v1".into();
        let loaded = LoadedConfig {
            config,
            path: dir.path().join("config.yaml"),
            file_exists: false,
            warnings: Vec::new(),
            secret_sources: Default::default(),
        };
        let proxy = &loaded.config.proxy;
        let app = Arc::new(App {
            work,
            proxy: Arc::new(Proxy {
                upstream: Upstream::new(&loaded, loaded.api_base()).unwrap(),
                sessions: Tracker::new(store.clone(), metrics.clone(), Duration::from_secs(600)),
                skills: None,
                store,
                metrics,
                policy: None,
                agent_policies: Default::default(),
                limits: Limits {
                    max_body_bytes: 1 << 20,
                    client_body_timeout: Duration::from_secs(5),
                },
            }),
            plugins: None,
            learn: None,
            train: None,
            agent_trains: Default::default(),
            proxy_token: proxy.api_key.clone(),
            admin_token: ADMIN.into(),
            redactor: Arc::new(crate::redact::Redactor::new(vec![
                "sk-test-secret-0123456789".to_string(),
            ])),
            team,
            info: RuntimeInfo {
                started: Instant::now(),
                started_at_ms: 0,
                mode: "skills_only".into(),
                demo: false,
                upstream_base: loaded.api_base(),
                host: proxy.host.clone(),
                port: PORT,
                ui: loaded.config.ui.clone(),
                canary: loaded.config.canary.clone(),
            },
        });
        let config = loaded.config.proxy.clone();
        (
            Served {
                app,
                config,
                routes: std::sync::OnceLock::new(),
            },
            dir,
        )
    }

    /// The state and the config its `Host` guard is built from.
    struct Served {
        app: SharedApp,
        config: ProxyConfig,
        /// Built once, as the daemon builds it: the dashboard's logins
        /// live in it.
        routes: std::sync::OnceLock<Router>,
    }

    impl Served {
        fn router(&self) -> Router {
            self.routes
                .get_or_init(|| router(self.app.clone(), Guard::new(&self.config, PORT)))
                .clone()
        }
    }

    impl std::ops::Deref for Served {
        type Target = App;
        fn deref(&self) -> &App {
            &self.app
        }
    }

    /// `method path` with `headers` (a `host` among them, or none at all)
    /// and `body`: the status and the JSON body.
    async fn send(
        app: &Served,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (StatusCode, Value) {
        let (status, _, body) = send_page(app, method, path, headers, body).await;
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    const LOCAL: (&str, &str) = ("host", "127.0.0.1:30000");
    const JSON: (&str, &str) = ("content-type", "application/json");
    const CHAT: &str = r#"{"model":"echo","messages":[{"role":"user","content":"hi"}]}"#;

    fn open_session(app: &Served, id: &str) -> String {
        let hints = Hints {
            explicit: Some((id, SessionSource::Header)),
            ..Hints::default()
        };
        app.proxy
            .sessions
            .resolve(&hints, TurnType::Main)
            .unwrap()
            .id
            .to_string()
    }

    #[tokio::test]
    async fn a_foreign_host_is_refused_on_every_route_in_its_clients_shape() {
        let (app, _dir) = app(ProxyConfig::default());
        let evil = ("host", "evil.example:30000");

        let (status, body) = send(&app, "POST", "/v1/chat/completions", &[evil, JSON], CHAT).await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["type"], "permission_error");
        assert_eq!(body["error"]["code"], "host_not_allowed");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("\"evil.example:30000\"") && message.contains("proxy.allowed_hosts"),
            "{message}"
        );

        let (status, body) = send(&app, "POST", "/v1/messages", &[evil, JSON], "{}").await;
        assert_eq!(status, 403);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "permission_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("evil.example:30000"),
            "{body}"
        );

        for (method, path) in [
            ("GET", "/healthz"),
            ("GET", "/v1/models"),
            ("GET", "/admin/status"),
            ("GET", "/nowhere"),
        ] {
            let auth = format!("Bearer {ADMIN}");
            let headers = [evil, ("authorization", auth.as_str())];
            let (status, _) = send(&app, method, path, &headers, "").await;
            assert_eq!(status, 403, "{method} {path}");
        }
        // No Host at all (HTTP/1.0), a wrong port.
        assert_eq!(send(&app, "GET", "/healthz", &[], "").await.0, 403);
        let (status, _) = send(&app, "GET", "/healthz", &[("host", "127.0.0.1:30001")], "").await;
        assert_eq!(status, 403);
        assert_eq!(app.proxy.sessions.active_count(), 0);
        let gauges = crate::metrics::Gauges {
            uptime_seconds: 0.0,
            store_queue_depth: 0,
            active_sessions: 0,
        };
        assert!(
            app.proxy
                .metrics
                .render(&gauges)
                .contains("host_not_allowed")
        );
    }

    #[tokio::test]
    async fn loopback_names_on_the_port_and_allowed_hosts_are_served() {
        let (app, _dir) = app(ProxyConfig {
            allowed_hosts: vec!["host.docker.internal".parse().unwrap()],
            ..ProxyConfig::default()
        });
        for host in [
            "127.0.0.1:30000",
            "localhost:30000",
            "[::1]:30000",
            "127.0.0.1",
            "host.docker.internal:30000",
        ] {
            let (status, body) = send(&app, "GET", "/healthz", &[("host", host)], "").await;
            assert_eq!(status, 200, "{host}: {body}");
        }
        let (status, _) = send(
            &app,
            "GET",
            "/healthz",
            &[("host", "other.internal:30000")],
            "",
        )
        .await;
        assert_eq!(status, 403);
    }

    #[tokio::test]
    async fn a_cross_site_post_does_not_end_a_session_a_programs_post_does() {
        let (app, _dir) = app(ProxyConfig::default());
        let id = open_session(&app, "s-csrf");
        let path = format!("/v1/sessions/{id}/end");

        let evil = ("origin", "http://evil.example");
        let (status, body) = send(&app, "POST", &path, &[LOCAL, evil, JSON], "").await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], "cross_site");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("http://evil.example"),
            "{body}"
        );
        let site = ("sec-fetch-site", "cross-site");
        assert_eq!(send(&app, "POST", &path, &[LOCAL, site], "").await.0, 403);
        // A form a page posts, no Origin needed to refuse it.
        let form = ("content-type", "application/x-www-form-urlencoded");
        assert_eq!(
            send(&app, "POST", &path, &[LOCAL, form], "x=1").await.0,
            415
        );
        assert_eq!(app.proxy.sessions.active_count(), 1);

        // The same POST from a program: no Origin, JSON (or no body at all).
        let (status, body) = send(&app, "POST", &path, &[LOCAL, JSON], "").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            (&body["ended"], &body["already_ended"]),
            (&Value::Bool(true), &Value::Bool(false))
        );
        // The proxy's own origin is not a cross-site one.
        let id = open_session(&app, "s-own");
        let own = ("origin", "http://127.0.0.1:30000");
        let path = format!("/v1/sessions/{id}/end");
        let (status, body) = send(&app, "POST", &path, &[LOCAL, own, JSON], "").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["ended"], true);
    }

    #[tokio::test]
    async fn feedback_on_a_session_is_stored_redacted_and_bad_feedback_says_what_to_fix() {
        let proxy = ProxyConfig {
            api_key: Some("proxy-key".into()),
            ..ProxyConfig::default()
        };
        let (app, _dir) = app(proxy);
        let auth = ("authorization", "Bearer proxy-key");
        // A session is known once a turn of it is recorded (this one's
        // upstream is unreachable: a failed turn, still a session).
        let session = ("x-session-id", "s-feedback");
        let (status, _) = send(
            &app,
            "POST",
            "/v1/chat/completions",
            &[LOCAL, JSON, auth, session],
            CHAT,
        )
        .await;
        assert_eq!(status, 502);
        let id = "s-feedback";
        let body = format!(
            r#"{{"session_id":"{id}","rating":"down","comment":"it leaked sk-test-secret-0123456789"}}"#
        );
        let body = body.as_str();
        // The proxy's auth, as on every /v1 route.
        assert_eq!(
            send(&app, "POST", "/v1/feedback", &[LOCAL, JSON], body)
                .await
                .0,
            401
        );
        let (status, reply) = send(&app, "POST", "/v1/feedback", &[LOCAL, JSON, auth], body).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["feedback"]["session_id"], id);
        assert_eq!(reply["feedback"]["value"], -1.0);
        let conn = app.proxy.store.db().read().unwrap();
        let stored = crate::store::feedback::list(&conn, id).unwrap();
        assert_eq!(stored.len(), 1);
        let comment = stored[0].comment.as_deref().unwrap();
        assert!(!comment.contains("sk-test-secret"), "{comment}");

        for (body, status, says) in [
            (r#"{"session_id":"s-feedback"}"#, 400, "\"rating\""),
            (
                r#"{"session_id":"s-feedback","score":3}"#,
                400,
                "outside [-1, 1]",
            ),
            (
                r#"{"session_id":"s-feedback","rating":"up","score":1}"#,
                400,
                "not both",
            ),
            (
                r#"{"session_id":"s-feedback","thumbs":"up"}"#,
                400,
                "unknown field",
            ),
            (r#"{"rating":"up"}"#, 400, "name the turn"),
            (r#"{"session_id":"nope","rating":"up"}"#, 404, "no session"),
            (r#"{"turn_id":"nope","rating":"up"}"#, 404, "no turn"),
            ("not json", 400, "expected"),
        ] {
            let (got, reply) = send(&app, "POST", "/v1/feedback", &[LOCAL, JSON, auth], body).await;
            assert_eq!(got, status, "{body}: {reply}");
            let message = reply["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{body}: {message}");
        }
        // An Anthropic-style client gets Anthropic's error shape.
        let anthropic = [
            LOCAL,
            JSON,
            ("x-api-key", "proxy-key"),
            ("anthropic-version", "2023-06-01"),
        ];
        let (got, reply) = send(&app, "POST", "/v1/feedback", &anthropic, "{}").await;
        assert_eq!(got, 400);
        assert_eq!(reply["type"], "error", "{reply}");
        assert_eq!(crate::store::feedback::list(&conn, id).unwrap().len(), 1);
    }

    #[tokio::test]
    async fn simple_content_types_are_refused_before_anything_is_recorded() {
        let (app, _dir) = app(ProxyConfig::default());
        let plain = ("content-type", "text/plain;charset=UTF-8");
        let session = ("x-session-id", "s-plain");
        let (status, body) = send(
            &app,
            "POST",
            "/v1/chat/completions",
            &[LOCAL, plain, session],
            CHAT,
        )
        .await;
        assert_eq!(status, 415);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("application/json"), "{message}");
        let (status, body) =
            send(&app, "POST", "/v1/messages", &[LOCAL, plain, session], CHAT).await;
        assert_eq!(status, 415);
        assert_eq!(body["type"], "error");
        // Refused before the handler: no session was even opened.
        assert_eq!(app.proxy.sessions.active_count(), 0);
        assert_eq!(app.proxy.store.counts().unwrap(), (0, 0));

        // Admin routes too, even with the token.
        let auth = format!("Bearer {ADMIN}");
        let admin = [
            LOCAL,
            ("authorization", auth.as_str()),
            ("origin", "http://evil.example"),
        ];
        let (status, _) = send(&app, "POST", "/admin/plugins/reload", &admin, "").await;
        assert_eq!(status, 403);
    }

    #[tokio::test]
    async fn a_preflight_gets_no_cors_allowance() {
        let (app, _dir) = app(ProxyConfig::default());
        let preflight = [
            LOCAL,
            ("origin", "http://evil.example"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "content-type,authorization",
            ),
        ];
        for path in [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/sessions/x/end",
            "/admin/learn/now",
        ] {
            let (status, _) = send(&app, "OPTIONS", path, &preflight, "").await;
            assert_eq!(status, 405, "{path}");
        }
    }

    /// `method path` with `headers` and `body`: the status, the headers and
    /// the body as text (the dashboard's pages).
    async fn send_page(
        app: &Served,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = app
            .router()
            .oneshot(request.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        // Never a CORS allowance, whatever was asked.
        let cors: Vec<_> = response
            .headers()
            .keys()
            .filter(|k| k.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "{method} {path}: {cors:?}");
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
            .await
            .unwrap();
        (
            status,
            headers,
            // The templates escape `/` in attributes as `&#x2f;` (which a
            // browser reads as `/`): compared as a browser reads them.
            String::from_utf8_lossy(&bytes).replace("&#x2f;", "/"),
        )
    }

    const OWN: (&str, &str) = ("origin", "http://127.0.0.1:30000");
    const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

    fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Logs in; the cookie header to send after, and where the login's
    /// pages are (`/ui/<key>`).
    async fn log_in(app: &Served) -> (String, String) {
        let (status, headers, _) = send_page(
            app,
            "POST",
            "/ui/login",
            &[LOCAL, OWN, FORM],
            &format!("token={ADMIN}&next=%2Fui%2Fsessions"),
        )
        .await;
        assert_eq!(status, 303);
        let location = header(&headers, "location");
        let base = location.strip_suffix("/sessions").unwrap_or_default();
        let key = base.strip_prefix("/ui/").unwrap_or_default();
        assert!(
            key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()),
            "{location}"
        );
        let cookie = header(&headers, "set-cookie");
        for attribute in ["HttpOnly", "SameSite=Strict", &format!("Path={base};")] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        assert!(!cookie.contains("Max-Age"), "a session cookie: {cookie}");
        assert!(!cookie.contains(ADMIN), "the cookie is not the token");
        let value = cookie.split(';').next().unwrap().to_string();
        assert!(!value.contains(key), "the cookie's value is not the key");
        (value, base.to_string())
    }

    /// GET `path` with the login's `cookie`.
    async fn get_page(app: &Served, path: &str, cookie: &str) -> (StatusCode, HeaderMap, String) {
        send_page(app, "GET", path, &[LOCAL, ("cookie", cookie)], "").await
    }

    fn csrf_of(page: &str) -> String {
        let at = page
            .find(r#"name="csrf" value=""#)
            .expect("a form with a CSRF token");
        let rest = &page[at + r#"name="csrf" value=""#.len()..];
        rest[..rest.find('"').unwrap()].to_string()
    }

    /// On a team's store the overview shows every instance and what each
    /// leads, whichever instance serves the page.
    #[tokio::test]
    async fn the_overview_shows_every_instance_of_a_shared_store() {
        let url = metaclaw_pg_cluster::fresh_database().unwrap();
        let db = crate::store::Db::postgres(&url);
        drop(db.side_writer().unwrap()); // migrated, as a start does
        let (app, _dir) = app_on(
            ProxyConfig::default(),
            db.clone(),
            true,
            tempfile::tempdir().unwrap(),
        );
        // Another instance, which leads training.
        let conn = db.side_writer().unwrap();
        let other = crate::store::instances::Instance {
            id: "other-instance".into(),
            host: "b".into(),
            pid: 7,
            version: "0.0.0".into(),
            listen: "10.0.0.2:7777".into(),
            skills_dir: None,
            started_ms: 0,
            heartbeat_ms: 0,
            clock_offset_ms: 0,
            stopped_ms: None,
        };
        crate::store::instances::register(&conn, &other, crate::clock::now_ms()).unwrap();
        crate::store::instances::acquire(&conn, "trainer", "other-instance", 60_000).unwrap();
        let (cookie, base) = log_in(&app).await;
        let (status, _, page) =
            send_page(&app, "GET", &base, &[LOCAL, ("cookie", &cookie)], "").await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("2 of 2 instance(s) alive"), "{page}");
        assert!(
            page.contains(app.team.id()) && page.contains("10.0.0.2:7777"),
            "{page}"
        );
        assert!(page.contains("trainer"), "{page}");
        let (_, status) = send(
            &app,
            "GET",
            "/admin/status",
            &[LOCAL, ("authorization", &format!("Bearer {ADMIN}"))],
            "",
        )
        .await;
        assert_eq!(
            status["deployment"]["leases"][0]["holder"], "other-instance",
            "{status}"
        );
        assert_eq!(status["store"]["backend"], "postgres");
    }

    #[tokio::test]
    async fn the_dashboard_is_behind_a_login_with_the_admin_token() {
        let (app, _dir) = app(ProxyConfig::default());
        // No login: sent to the login page, and back after.
        let (status, headers, _) =
            send_page(&app, "GET", "/ui/sessions?status=ended", &[LOCAL], "").await;
        assert_eq!(status, 303);
        assert_eq!(
            header(&headers, "location"),
            "/ui/login?next=%2Fui%2Fsessions%3Fstatus%3Dended"
        );
        let (status, headers, page) = send_page(&app, "GET", "/ui/login", &[LOCAL], "").await;
        assert_eq!(status, 200);
        assert!(page.contains(r#"name="token""#) && page.contains("admin.token"));
        assert!(header(&headers, "content-security-policy").contains("frame-ancestors 'none'"));
        // The admin token in a header is not a login.
        let bearer = format!("Bearer {ADMIN}");
        let (status, _, _) =
            send_page(&app, "GET", "/ui", &[LOCAL, ("authorization", &bearer)], "").await;
        assert_eq!(status, 303);
        // A wrong token: the login page again, saying so; no cookie.
        let (status, headers, page) = send_page(
            &app,
            "POST",
            "/ui/login",
            &[LOCAL, OWN, FORM],
            "token=guess&next=%2Fui",
        )
        .await;
        assert_eq!(status, 401);
        assert!(page.contains("not the admin token"));
        assert!(headers.get("set-cookie").is_none());
        // The right one: every page opens, under the login's key, and its
        // links stay there.
        let (cookie, base) = log_in(&app).await;
        for (path, shows) in [
            ("", "Overview"),
            ("/sessions", "No session is recorded yet"),
            ("/plugins", "plugin host did not start"),
            ("/skills", "Skills are off"),
            ("/learning", "No job."),
            ("/training", "RL is off"),
        ] {
            let (status, headers, page) = get_page(&app, &format!("{base}{path}"), &cookie).await;
            assert_eq!(status, 200, "{path}: {page}");
            assert!(page.contains(shows), "{path}: {page}");
            assert!(
                page.contains(&format!(r#"href="{base}/sessions""#)),
                "{path}: {page}"
            );
            assert_eq!(header(&headers, "cache-control"), "no-store");
        }
        // A login link may only lead to a dashboard page.
        let (_, headers, _) = send_page(
            &app,
            "POST",
            "/ui/login",
            &[LOCAL, OWN, FORM],
            &format!("token={ADMIN}&next=https%3A%2F%2Fevil.example%2F"),
        )
        .await;
        let location = header(&headers, "location");
        assert!(
            location.starts_with("/ui/") && location.len() == "/ui/".len() + 64,
            "{location}"
        );
        // Bad filters: said, not a failure; the way back stays logged in.
        let (status, _, page) =
            get_page(&app, &format!("{base}/sessions?min_reward=lots"), &cookie).await;
        assert_eq!(status, 400);
        assert!(page.contains("is not a number"), "{page}");
        assert!(page.contains(&format!(r#"href="{base}""#)), "{page}");
    }

    /// A listener on another port of 127.0.0.1 receives the cookies a
    /// browser holds for 127.0.0.1 under the paths it is asked for (cookies
    /// are not scoped by port). A login's cookie is scoped to its key's
    /// path, and worth nothing without that key: what such a listener can
    /// replay (the cookie at `/ui`, at another key, or the key's path
    /// without the cookie) is no login.
    #[tokio::test]
    async fn a_logins_cookie_is_no_login_without_its_key_nor_its_key_without_the_cookie() {
        let (app, _dir) = app(ProxyConfig::default());
        let (cookie, base) = log_in(&app).await;
        let (other_cookie, other_base) = log_in(&app).await;
        assert_ne!(base, other_base);
        let ok = |status: StatusCode| status == 200;
        let (status, _, _) = get_page(&app, &base, &cookie).await;
        assert!(ok(status), "the login itself");
        for (path, cookie) in [
            ("/ui/sessions".to_string(), cookie.as_str()),
            (format!("{other_base}/sessions"), &cookie),
            (format!("{base}/sessions"), &other_cookie),
            (format!("{base}/sessions"), ""),
        ] {
            let (status, headers, _) =
                send_page(&app, "GET", &path, &[LOCAL, ("cookie", cookie)], "").await;
            assert_eq!(status, 303, "{path} with {cookie:?}");
            assert_eq!(
                header(&headers, "location"),
                "/ui/login?next=%2Fui%2Fsessions",
                "{path}: the page asked for, without any key"
            );
        }
        let (status, _, _) = get_page(&app, "/ui", &cookie).await;
        assert_eq!(status, 303);
        // A form: refused, whatever its token.
        let (_, _, page) = get_page(&app, &base, &cookie).await;
        let csrf = csrf_of(&page);
        let (status, _, page) = send_page(
            &app,
            "POST",
            "/ui/logout",
            &[LOCAL, OWN, FORM, ("cookie", &cookie)],
            &format!("csrf={csrf}"),
        )
        .await;
        assert_eq!(status, 403);
        assert!(page.contains("not logged in"), "{page}");
        let (status, _, _) = get_page(&app, &base, &cookie).await;
        assert!(ok(status), "still logged in");
    }

    #[tokio::test]
    async fn dashboard_forms_from_another_site_or_without_the_csrf_token_are_refused() {
        let (app, _dir) = app(ProxyConfig::default());
        let login = format!("token={ADMIN}");
        // Another site's page, a program without an Origin, or a body a
        // page could send without asking: no login.
        for headers in [
            vec![LOCAL, ("origin", "http://evil.example"), FORM],
            vec![LOCAL, FORM],
            vec![LOCAL, OWN, FORM, ("sec-fetch-site", "cross-site")],
            vec![LOCAL, OWN, ("content-type", "text/plain")],
        ] {
            let (status, response, _) =
                send_page(&app, "POST", "/ui/login", &headers, &login).await;
            assert!(status == 403 || status == 415, "{headers:?}: {status}");
            assert!(response.get("set-cookie").is_none());
        }
        // Logged in: logging out needs this login's CSRF token.
        let (cookie, base) = log_in(&app).await;
        let with_cookie = [LOCAL, OWN, FORM, ("cookie", cookie.as_str())];
        let (_, _, page) = get_page(&app, &base, &cookie).await;
        let csrf = csrf_of(&page);
        let logout = format!("{base}/logout");
        let (status, _, page) = send_page(&app, "POST", &logout, &with_cookie, "csrf=forged").await;
        assert_eq!(status, 403);
        assert!(page.contains("CSRF"));
        let (status, _, _) = get_page(&app, &base, &cookie).await;
        assert_eq!(status, 200, "still logged in");
        let (status, headers, _) =
            send_page(&app, "POST", &logout, &with_cookie, &format!("csrf={csrf}")).await;
        assert_eq!(status, 303);
        let gone = header(&headers, "set-cookie");
        assert!(
            gone.contains("Max-Age=0") && gone.contains(&format!("Path={base};")),
            "{gone}"
        );
        let (status, _, _) = get_page(&app, &base, &cookie).await;
        assert_eq!(status, 303, "logged out");
    }

    #[tokio::test]
    async fn dashboard_actions_need_ui_actions_and_the_logins_csrf_token() {
        // Read-only by default: the form is refused, whatever it carries.
        let (read_only, _dir) = app(ProxyConfig::default());
        let (cookie, base) = log_in(&read_only).await;
        let (_, _, page) = get_page(&read_only, &base, &cookie).await;
        let csrf = csrf_of(&page);
        let with_cookie = [LOCAL, OWN, FORM, ("cookie", cookie.as_str())];
        let body = format!("csrf={csrf}&confirm=yes");
        let (status, _, page) = send_page(
            &read_only,
            "POST",
            &format!("{base}/actions/learn-now"),
            &with_cookie,
            &body,
        )
        .await;
        assert_eq!(status, 403);
        assert!(page.contains("ui.actions: false"), "{page}");
        // With ui.actions on: a forged token is refused, the login's acts
        // (here: learning is off, and the page says so).
        let served = with_actions();
        let (cookie, base) = log_in(&served.0).await;
        let (_, _, page) = get_page(&served.0, &format!("{base}/learning"), &cookie).await;
        assert!(
            !page.contains("id=\"learn-now\""),
            "learning is off: no button"
        );
        let csrf = csrf_of(&page);
        let with_cookie = [LOCAL, OWN, FORM, ("cookie", cookie.as_str())];
        let (status, _, page) = send_page(
            &served.0,
            "POST",
            &format!("{base}/actions/learn-now"),
            &with_cookie,
            "csrf=forged&confirm=yes",
        )
        .await;
        assert_eq!(status, 403);
        assert!(page.contains("CSRF"));
        let (status, _, page) = send_page(
            &served.0,
            "POST",
            &format!("{base}/actions/learn-now"),
            &with_cookie,
            &format!("csrf={csrf}&confirm=yes"),
        )
        .await;
        assert_eq!(status, 404);
        assert!(page.contains("learning"), "{page}");
        // No login: refused before anything else.
        let (status, _, _) = send_page(
            &served.0,
            "POST",
            &format!("{base}/actions/skills/x/retire"),
            &[LOCAL, OWN, FORM],
            &format!("csrf={csrf}&confirm=yes"),
        )
        .await;
        assert_eq!(status, 403);
    }

    /// The test app with `ui.actions: true`.
    fn with_actions() -> (Served, tempfile::TempDir) {
        let (mut served, dir) = app(ProxyConfig::default());
        let mut inner = Arc::try_unwrap(served.app).ok().expect("one owner");
        inner.info.ui.actions = true;
        served.app = Arc::new(inner);
        (served, dir)
    }

    /// An action that changes what metaclaw does, posted without
    /// `confirm=yes`, does nothing and answers with a page that asks, whose
    /// own form (no script needed) carries the same fields and the
    /// confirmation; posted with it, the action runs (here it reaches the
    /// library, which is off in this app, and says so).
    #[tokio::test]
    async fn destructive_dashboard_actions_ask_first_and_act_once_confirmed() {
        let served = with_actions();
        let (cookie, base) = log_in(&served.0).await;
        let (_, _, page) = get_page(&served.0, &base, &cookie).await;
        let csrf = csrf_of(&page);
        let with_cookie = [LOCAL, OWN, FORM, ("cookie", cookie.as_str())];
        let retire = format!("{base}/actions/skills/moon%20facts/retire");
        let (status, _, page) = send_page(
            &served.0,
            "POST",
            &retire,
            &with_cookie,
            &format!("csrf={csrf}&why=out+of+date"),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert!(
            page.contains("Retire the skill moon facts from retrieval?"),
            "{page}"
        );
        assert!(page.contains("retired: out of date"), "{page}");
        assert!(
            !page.contains("skills are off"),
            "nothing was tried: {page}"
        );
        // Its form: the same action, fields and token, and the confirmation.
        assert!(
            page.contains(&format!(
                r#"action="{base}/actions/skills/moon%20facts/retire""#
            )),
            "{page}"
        );
        for field in [
            format!(r#"name="csrf" value="{csrf}""#),
            r#"name="why" value="out of date""#.into(),
            r#"name="confirm" value="yes""#.into(),
        ] {
            assert!(page.contains(&field), "{field}: {page}");
        }
        assert!(
            page.contains(&format!(r#"href="{base}/skills/moon%20facts""#)),
            "cancel leads back: {page}"
        );
        // Confirmed: the action runs.
        let (status, _, page) = send_page(
            &served.0,
            "POST",
            &retire,
            &with_cookie,
            &format!("csrf={csrf}&why=out+of+date&confirm=yes"),
        )
        .await;
        assert_eq!(status, 404, "{page}");
        assert!(page.contains("skills are off"), "{page}");
        // Each of the others asks too; enabling a plugin gives back what
        // was there and does not.
        for (path, asks) in [
            (
                "/actions/plugins/guard/disable",
                Some("Disable the plugin guard?"),
            ),
            ("/actions/training/rollback", Some("Serve these weights?")),
            ("/actions/plugins/guard/enable", None),
        ] {
            let (status, _, page) = send_page(
                &served.0,
                "POST",
                &format!("{base}{path}"),
                &with_cookie,
                &format!("csrf={csrf}&sampler=tinker%3A%2F%2Frun%2F1"),
            )
            .await;
            match asks {
                Some(question) => {
                    assert_eq!(status, 200, "{path}: {page}");
                    assert!(page.contains(question), "{path}: {page}");
                    assert!(page.contains(r#"id="confirm""#), "{path}: {page}");
                }
                None => assert_ne!(status, 200, "{path}: {page}"),
            }
        }
    }

    #[tokio::test]
    async fn ui_enabled_false_serves_no_dashboard() {
        let (mut served, _dir) = app(ProxyConfig::default());
        let mut app = Arc::try_unwrap(served.app).ok().expect("one owner");
        app.info.ui.enabled = false;
        served.app = Arc::new(app);
        let (status, _, _) = send_page(&served, "GET", "/ui/login", &[LOCAL], "").await;
        assert_eq!(status, 404);
    }
}
