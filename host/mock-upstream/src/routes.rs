//! The routes, the required key, the dummy's own introspection routes and
//! the OpenAI-style error every route answers with.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::Dummy;
use crate::anthropic::anthropic_messages;
use crate::chat::chat;
use crate::completions::completions;
use crate::embeddings::embeddings;

pub fn router(dummy: Arc<Dummy>) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/messages", post(anthropic_messages))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/completions", post(completions))
        .route_layer(axum::middleware::from_fn_with_state(
            dummy.clone(),
            require_key,
        ));
    Router::new()
        .merge(api)
        .route("/v1/dummy/stats", get(stats))
        .route("/v1/dummy/requests", get(recent_requests))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({ "ok": true, "dummy": true })) }),
        )
        .with_state(dummy)
}

/// With a required key, a request that does not carry it gets what OpenAI
/// answers for a wrong key (Anthropic's shape for an Anthropic client).
async fn require_key(
    State(dummy): State<Arc<Dummy>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(key) = &dummy.required_key else {
        return next.run(request).await;
    };
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    if bearer == Some(key.as_str()) || x_api_key == Some(key.as_str()) {
        return next.run(request).await;
    }
    // Anthropic's shape for its clients (they send `anthropic-version`).
    if request.uri().path() == "/v1/messages" || headers.contains_key("anthropic-version") {
        let body = json!({"type": "error", "error": {"type": "authentication_error",
                          "message": "invalid x-api-key"}});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let body = json!({ "error": { "message": "Incorrect API key provided",
                       "type": "invalid_request_error", "code": "invalid_api_key" } });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// Serves the dummy on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, dummy: Arc<Dummy>) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(dummy)).await
}

async fn models(State(dummy): State<Arc<Dummy>>) -> Response {
    let data: Vec<Value> = crate::behaviour::names(&dummy)
        .into_iter()
        .map(|b| json!({ "id": b, "object": "model", "created": 0, "owned_by": "metaclaw-dummy" }))
        .collect();
    axum::Json(json!({ "object": "list", "data": data })).into_response()
}

async fn stats(State(dummy): State<Arc<Dummy>>) -> Response {
    let s = &dummy.stats;
    axum::Json(json!({
        "requests": s.requests.load(Ordering::Relaxed),
        "streams_completed": s.streams_completed.load(Ordering::Relaxed),
        "streams_cancelled": s.streams_cancelled.load(Ordering::Relaxed),
        "embedding_requests": s.embedding_requests.load(Ordering::Relaxed),
        "embedded_texts": s.embedded_texts.load(Ordering::Relaxed),
        "embedding_auth": s.embedding_auth.lock().ok().and_then(|a| a.clone()),
    }))
    .into_response()
}

async fn recent_requests(
    State(dummy): State<Arc<Dummy>>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let model = query.get("model").cloned().unwrap_or_default();
    let bodies: Vec<Value> = dummy
        .stats
        .recent
        .lock()
        .map(|r| {
            r.iter()
                .filter(|(m, _)| model.is_empty() || *m == model)
                .map(|(_, b)| b.clone())
                .collect()
        })
        .unwrap_or_default();
    axum::Json(json!({ "model": model, "requests": bodies })).into_response()
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = if status == StatusCode::TOO_MANY_REQUESTS {
        "rate_limit_error"
    } else if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let mut response = (
        status,
        axum::Json(json!({ "error": { "message": message.into(), "type": kind, "code": status.as_u16() } })),
    )
        .into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    #[tokio::test]
    async fn a_required_key_is_checked_on_the_api_routes_only() {
        use tower::ServiceExt;
        let app = router(Arc::new(Dummy::requiring_key("sk-right")));
        let get = |path: &str, auth: Option<(&str, &str)>| {
            let mut request = axum::http::Request::builder().uri(path);
            if let Some((k, v)) = auth {
                request = request.header(k, v);
            }
            let app = app.clone();
            let request = request.body(Body::empty()).unwrap();
            async move { app.oneshot(request).await.unwrap().status() }
        };
        assert_eq!(get("/v1/models", None).await, StatusCode::UNAUTHORIZED);
        let wrong = Some(("authorization", "Bearer sk-wrong"));
        assert_eq!(get("/v1/models", wrong).await, StatusCode::UNAUTHORIZED);
        let right = Some(("authorization", "Bearer sk-right"));
        assert_eq!(get("/v1/models", right).await, StatusCode::OK);
        assert_eq!(
            get("/v1/models", Some(("x-api-key", "sk-right"))).await,
            StatusCode::OK
        );
        // The dummy's own routes stay open.
        assert_eq!(get("/healthz", None).await, StatusCode::OK);
        assert_eq!(get("/v1/dummy/stats", None).await, StatusCode::OK);
        // No key required: everything answers.
        let open = router(Arc::new(Dummy::default()));
        let request = axum::http::Request::builder()
            .uri("/v1/models")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            open.oneshot(request).await.unwrap().status(),
            StatusCode::OK
        );
    }
}
