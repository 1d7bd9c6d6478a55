//! The HTTP surface: routes, authentication, and serving with TCP_NODELAY,
//! a deadline on request headers and a bounded graceful shutdown.
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

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::{Listener, ListenerExt};
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::app::SharedApp;
use crate::error::ApiError;
use crate::metrics::Gauges;
use crate::proxy::turn;
use crate::sessions::{EndOutcome, EndReason};

pub fn router(app: SharedApp) -> Router {
    let proxy = Router::new()
        .route("/v1/chat/completions", post(turn::chat_completions))
        .route("/chat/completions", post(turn::chat_completions))
        .route("/v1/messages", post(turn::messages))
        .route("/v1/responses", post(turn::responses))
        .route("/responses", post(turn::responses))
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

async fn require_proxy_token(
    State(app): State<SharedApp>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(expected) = &app.proxy_token
        && let Err(e) = check_token(request.headers(), expected, true)
    {
        app.metrics.errors.inc(&[e.kind()]);
        // Each API's clients get the error shape they parse.
        let front = if request.uri().path().ends_with("/messages") {
            crate::proxy::dialect::Front::Anthropic
        } else {
            crate::proxy::dialect::Front::Chat
        };
        let body = front.error_body(&e);
        return e.into_response_with(body);
    }
    next.run(request).await
}

async fn require_admin_token(
    State(app): State<SharedApp>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(e) = check_token(request.headers(), &app.admin_token, false) {
        app.metrics.errors.inc(&[e.kind()]);
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
    let upstream = app.upstream.get("/models").await;
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
    match &app.upstream.default_model {
        Some(model) => axum::Json(json!({
            "object": "list",
            "data": [{ "id": model, "object": "model", "created": 0, "owned_by": "metaclaw" }],
        }))
        .into_response(),
        None => ApiError::UpstreamUnreachable {
            base: app.upstream.base.clone(),
            reason: "no model list from the upstream and no llm.model_id configured".into(),
        }
        .into_response(),
    }
}

async fn end_session(State(app): State<SharedApp>, Path(id): Path<String>) -> Response {
    match app.sessions.end(&id, EndReason::Api) {
        EndOutcome::Ended => {
            axum::Json(json!({ "id": id, "ended": true, "already_ended": false })).into_response()
        }
        EndOutcome::AlreadyEnded => {
            axum::Json(json!({ "id": id, "ended": true, "already_ended": true })).into_response()
        }
        EndOutcome::Unknown => ApiError::NotFound(format!("no session {id:?}")).into_response(),
    }
}

async fn metrics(State(app): State<SharedApp>) -> Response {
    let gauges = Gauges {
        uptime_seconds: app.info.started.elapsed().as_secs_f64(),
        store_queue_depth: app.store.queue_depth(),
        active_sessions: app.sessions.active_count(),
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        app.metrics.render(&gauges),
    )
        .into_response()
}

async fn admin_status(State(app): State<SharedApp>) -> Response {
    let store = app.store.clone();
    let counts = tokio::task::spawn_blocking(move || store.counts()).await;
    let (sessions, turns) = match counts {
        Ok(Ok(c)) => c,
        _ => return ApiError::Internal("cannot read the store".into()).into_response(),
    };
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
        "active_sessions": app.sessions.active_count(),
        "turns": turns,
        "store": { "path": app.store.path(), "queue_depth": app.store.queue_depth() },
        "skills": app.skills.as_ref().map(|skills| {
            let snapshot = skills.library.snapshot();
            json!({
                "loaded": snapshot.skills.len(),
                "generation": snapshot.generation,
                "dir": skills.library.dir,
                "problems": snapshot.problems,
                "retrieval": skills.retrieval,
                "last_retriever": skills.last_retriever(),
            })
        }),
        "plugins": app.plugins.as_ref().map(|host| {
            let registry = host.current();
            json!({ "loaded": registry.plugins.len(), "problems": registry.problems.len(), "locked": registry.locked })
        }),
    }))
    .into_response()
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
async fn admin_learn_now(State(app): State<SharedApp>, body: axum::body::Bytes) -> Response {
    let Some(learn) = app.learn.clone() else {
        return ApiError::NotFound("learning is off (learning.enabled: false)".into())
            .into_response();
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
        let _ = app.sessions.end(id, EndReason::Api);
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
