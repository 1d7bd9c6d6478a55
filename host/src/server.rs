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
//! | `GET /metrics` | `proxy.api_key`, if set |
//! | `GET /admin/status` | the admin token (`<home>/admin.token`), always |
//! | `GET /admin/plugins`, `POST /admin/plugins/reload` | the admin token, always |
//! | `POST /admin/learn/now` (`{"session": ID}` or `{}`) | the admin token, always |
//! | `POST /admin/train/step`, `POST /admin/train/rollback` (`{"sampler": PATH}`) | the admin token, always |

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
        .route_layer(middleware::from_fn_with_state(
            app.clone(),
            require_admin_token,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(proxy)
        .merge(admin)
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
        tokio::spawn(async move {
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
    let learning = crate::learn::state_json(app.learn.is_some());
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
    let store = app.proxy.store.clone();
    let counts = tokio::task::spawn_blocking(move || store.counts()).await;
    let (sessions, turns) = match counts {
        Ok(Ok(c)) => c,
        _ => return ApiError::Internal("cannot read the store".into()).into_response(),
    };
    // The learning job's own check, once (with learning on).
    let chain = app
        .learn
        .as_ref()
        .map(|_| crate::learn::evolver_chain(app.plugins.as_deref()));
    let info = &app.info;
    axum::Json(json!({
        "running": true,
        "healthy": true,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "mode": info.mode,
        "demo": info.demo,
        "host": info.host,
        "port": info.port,
        "url": format!("http://{}:{}", url_host(&info.host), info.port),
        "upstream": info.upstream_base,
        "started_at_ms": info.started_at_ms,
        "uptime_seconds": info.started.elapsed().as_secs_f64(),
        "sessions": sessions,
        "active_sessions": app.proxy.sessions.active_count(),
        "turns": turns,
        "store": { "path": app.proxy.store.path(), "queue_depth": app.proxy.store.queue_depth() },
        "skills": app.proxy.skills.as_ref().map(|skills| {
            let snapshot = skills.library.snapshot();
            let mut retrieval = json!(skills.retrieval);
            // What answers a turn now: `mode` is only what is configured.
            let (answering, none_answers) = match skills.answering() {
                Ok(list) => (list, None),
                Err(why) => (Vec::new(), Some(why)),
            };
            retrieval["answering"] = json!(answering);
            retrieval["none_answers"] = json!(none_answers);
            json!({
                "loaded": snapshot.skills.len(),
                "generation": snapshot.generation,
                "dir": skills.library.dir,
                "problems": snapshot.problems,
                "retrieval": retrieval,
                "last_retriever": skills.last_retriever(),
                // Retrievers that hold an index of this library (a turn
                // never waits for one: until then it goes to the next).
                "indexed_by": skills.indexed_by(snapshot.generation),
                // Every loaded retriever: ready, indexing, failed or
                // not_started (what a tool waits on before a first turn).
                "retrievers": skills.retriever_indexes(snapshot.generation),
            })
        }),
        "learning": crate::learn::state_json(app.learn.is_some()),
        // rl/auto: whether the trainable model answers, on which weights,
        // and why not (turns then go to llm when rl.fallback_to_llm).
        // Training from the student's turns: the queue and whether it runs.
        "training": app.proxy.policy.as_ref().map(|_| {
            let queue = crate::store::open_read_only(app.proxy.store.path())
                .ok()
                .and_then(|c| crate::store::train_queue::counts(&c).ok());
            let state = app.train.as_ref().map(|t| t.state()).unwrap_or_default();
            json!({
                "running": app.train.is_some(),
                "queue": queue,
                "last_error": state.last_error,
                "opd": state.opd,
                "scheduler": app.train.as_ref().map(scheduler_json),
                "note": (app.train.is_none() && app.learn.is_none())
                    .then_some("nothing trains: training needs the rewards of learning jobs (learning.enabled: false)"),
            })
        }),
        "student": app.proxy.policy.as_ref().map(|policy| {
            let mut health = json!(policy.health());
            health["base_model"] = json!(policy.settings.base_model);
            health["fallback_to_llm"] = json!(policy.settings.fallback_to_llm);
            health
        }),
        // Why skills are not evolved now (the learning job's own check:
        // without an enabled guard, nothing is), or that they are evolved
        // unchecked because the config's chain leaves guard out; and the
        // evolver plugins every skill draft goes through, in order.
        "evolution_blocked": chain.as_ref().and_then(|c| c.as_ref().err()).map(|e| e.to_string()),
        "evolution_unguarded": chain
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .and_then(|c| crate::learn::evolution_unguarded(c)),
        "evolver_chain": chain.as_ref().and_then(|c| c.as_ref().ok()).map(|c| {
            c.iter().map(|p| p.info.name.clone()).collect::<Vec<_>>()
        }),
        "plugins": app.plugins.as_ref().map(|host| {
            let registry = host.current();
            json!({
                "loaded": registry.plugins.len(),
                "problems": registry.problems.len(),
                "notices": registry.notices.len(),
                "locked": registry.locked,
            })
        }),
    }))
    .into_response()
}

/// The training scheduler in `status`: whether steps wait for windows,
/// the machine's state and the last decision.
fn scheduler_json(train: &crate::learn::rl::trainer::TrainerHandle) -> serde_json::Value {
    match (&train.gate, &train.gate_error) {
        (_, Some(error)) => json!({ "gated": true, "error": error }),
        (None, None) => json!({ "gated": false }),
        (Some(gate), None) => {
            let last = gate.last();
            json!({
                "gated": true,
                "state": gate.state().as_str(),
                "open": last.as_ref().map(|r| r.open),
                "reason": last.as_ref().map(|r| r.reason.clone()),
                // When the signals were last read (the trainer reads them
                // before each step it may start).
                "assessed_at_ms": last.as_ref().map(|r| r.now.timestamp_millis()),
                "next_opening": last.and_then(|r| r.next_opening),
            })
        }
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
async fn admin_train_step(State(app): State<SharedApp>) -> Response {
    let Some(train) = app.train.clone() else {
        let why = match (&app.proxy.policy, app.learn.is_some()) {
            (None, _) => "nothing trains: the student does not serve (mode: rl or auto)",
            (Some(_), false) => {
                "nothing trains: training needs the rewards of learning jobs (learning.enabled: false)"
            }
            (Some(_), true) => "the trainer did not start (see the log)",
        };
        return ApiError::NotFound(why.into()).into_response();
    };
    match train.step().await {
        Ok(outcome) => axum::Json(json!(outcome)).into_response(),
        Err(e) => ApiError::UpstreamUnreachable {
            base: "the training service".into(),
            reason: e,
        }
        .into_response(),
    }
}

/// Serves earlier sampler weights: now (the swap) and after restarts (the
/// active run's record names them).
async fn admin_train_rollback(State(app): State<SharedApp>, body: axum::body::Bytes) -> Response {
    let Some(policy) = app.proxy.policy.clone() else {
        return ApiError::NotFound("the student does not serve (mode: rl or auto)".into())
            .into_response();
    };
    let sampler = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(v) => match v["sampler"].as_str() {
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
    let version = crate::learn::rl::checkpoint_step(&sampler).unwrap_or(0);
    if let Err(e) = policy.swap(&sampler, version).await {
        return ApiError::BadRequest(format!("cannot serve {sampler}: {e}")).into_response();
    }
    // Restarts serve it too: the active run's record names it.
    let recorded = crate::store::open_side_writer(app.proxy.store.path()).and_then(|conn| {
        let service = policy.settings.tinker.service_url();
        match crate::store::training::active(&conn, service, &policy.settings.base_model)? {
            Some(run) => crate::store::training::serve(
                &conn,
                &run.id,
                &sampler,
                version,
                crate::clock::now_ms(),
            ),
            None => Ok(()),
        }
    });
    if let Err(e) = recorded {
        tracing::warn!("rolled back to {sampler}, but a restart will not know: {e:#}");
    }
    axum::Json(json!({ "sampler": sampler, "policy_version": version })).into_response()
}

async fn admin_learn_now(State(app): State<SharedApp>, body: axum::body::Bytes) -> Response {
    let Some(learn) = app.learn.clone() else {
        return ApiError::NotFound(crate::learn::OFF.into()).into_response();
    };
    let session = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) if v.is_object() => match &v["session"] {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
                _ => {
                    return ApiError::BadRequest("\"session\" must be a session id".into())
                        .into_response();
                }
            },
            Ok(_) => {
                return ApiError::BadRequest("send a JSON object: {\"session\": ID} or {}".into())
                    .into_response();
            }
            Err(e) => return ApiError::InvalidJson(e.to_string()).into_response(),
        }
    };
    if let Some(id) = &session {
        // Learning from a session means it is over.
        let _ = app.proxy.sessions.end(id, EndReason::Api);
    }
    match learn.now(session).await {
        Ok(jobs) => axum::Json(json!({ "jobs": jobs })).into_response(),
        Err(e @ crate::learn::LearnError::NoSession(_)) => {
            ApiError::NotFound(e.to_string()).into_response()
        }
        Err(e) => ApiError::Internal(e.to_string()).into_response(),
    }
}

pub fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
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
    use crate::config::{Config, Loaded, ProxyConfig};
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
        let metrics = Arc::new(Metrics::new());
        let (store, _writer) = Store::open(
            StoreOptions {
                path: dir.path().join("metaclaw.db"),
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
        let loaded = Loaded {
            config,
            path: dir.path().join("config.yaml"),
            file_exists: false,
            warnings: Vec::new(),
            secret_sources: Default::default(),
        };
        let proxy = &loaded.config.proxy;
        let app = Arc::new(App {
            proxy: Arc::new(Proxy {
                upstream: Upstream::new(&loaded, loaded.api_base()).unwrap(),
                sessions: Tracker::new(store.clone(), metrics.clone(), Duration::from_secs(600)),
                skills: None,
                store,
                metrics,
                policy: None,
                limits: Limits {
                    max_body_bytes: 1 << 20,
                    client_body_timeout: Duration::from_secs(5),
                },
            }),
            plugins: None,
            learn: None,
            train: None,
            proxy_token: proxy.api_key.clone(),
            admin_token: ADMIN.into(),
            info: RuntimeInfo {
                started: Instant::now(),
                started_at_ms: 0,
                mode: "skills_only".into(),
                demo: false,
                upstream_base: loaded.api_base(),
                host: proxy.host.clone(),
                port: PORT,
            },
        });
        let config = loaded.config.proxy.clone();
        (Served { app, config }, dir)
    }

    /// The state and the config its `Host` guard is built from.
    struct Served {
        app: SharedApp,
        config: ProxyConfig,
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
        let mut request = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = router(app.app.clone(), Guard::new(&app.config, PORT))
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
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
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
}
