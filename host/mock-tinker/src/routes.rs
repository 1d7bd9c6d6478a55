//! The HTTP routes, under `/api/v1` as the reference lists them: the JSON
//! dialect everywhere, and the protobuf one where current servers use it
//! (a `forward_backward` body sent as `application/x-protobuf`, zstd when
//! its `Content-Encoding` says so; results as protobuf when the poll's
//! `Accept` asks for it).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metaclaw_tinker::convert;
use metaclaw_tinker::types::{Datum, LoraConfig, LossFn, ModelInput, Stop};
use serde_json::{Value, json};

use crate::state::{self, Op, Poll, Reply};

type Shared = Arc<Mutex<state::State>>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route(
            "/api/v1/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .route("/api/v1/client/config", post(client_config))
        .route("/api/v1/get_server_capabilities", get(capabilities))
        .route("/api/v1/create_session", post(create_session))
        .route("/api/v1/session_heartbeat", post(heartbeat))
        .route("/api/v1/fake/expire_session", post(expire))
        .route("/api/v1/fake/seen", get(seen))
        .route("/api/v1/fake/script", post(script))
        .route("/api/v1/fake/models", get(models))
        .route("/api/v1/create_model", post(create_model))
        .route("/api/v1/get_info", post(get_info))
        .route("/api/v1/forward_backward", post(forward_backward))
        .route("/api/v1/forward", post(forward))
        .route("/api/v1/optim_step", post(optim_step))
        .route("/api/v1/save_weights", post(save_weights))
        .route("/api/v1/save_weights_for_sampler", post(save_for_sampler))
        .route("/api/v1/load_weights", post(load_weights))
        .route("/api/v1/create_sampling_session", post(create_sampler))
        .route("/api/v1/asample", post(asample))
        .route("/api/v1/retrieve_future", post(retrieve_future))
        .route("/api/v1/training_runs/{id}/checkpoints", get(checkpoints))
        .route("/api/v1/weights_info", post(weights_info))
        .layer(axum::middleware::from_fn_with_state(state.clone(), key))
        .with_state(state)
}

/// With `Options::api_key`, a request without that `X-API-Key` is refused
/// (401) as hosted Tinker and tuft refuse a bad key; the fake's own test
/// routes and health are open.
async fn key(
    State(s): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let wanted = locked(&s).options.api_key;
    let open = request.uri().path().starts_with("/api/v1/fake/")
        || request.uri().path() == "/api/v1/healthz";
    if let Some(wanted) = wanted
        && !open
        && request
            .headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            != Some(wanted)
    {
        return detail(401, "invalid API key").into_response();
    }
    next.run(request).await
}

/// A refused request, in FastAPI's error shape (`{"detail": …}`), which
/// every Tinker-compatible server uses.
pub struct Refusal {
    status: u16,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(json!({"detail": self.message}))).into_response()
    }
}

fn detail(status: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

type Answer = Result<Response, Refusal>;

fn json_body(body: &Bytes) -> Result<Value, Refusal> {
    serde_json::from_slice(body).map_err(|e| detail(422, format!("invalid JSON: {e}")))
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, Refusal> {
    v[key]
        .as_str()
        .ok_or_else(|| detail(422, format!("`{key}` is required (a string)")))
}

fn int(v: &Value, key: &str) -> Result<i64, Refusal> {
    v[key]
        .as_i64()
        .ok_or_else(|| detail(422, format!("`{key}` is required (an integer)")))
}

fn future(id: String, model_id: Option<&str>) -> Response {
    let mut v = json!({"request_id": id, "future_id": id, "status": "pending"});
    if let Some(m) = model_id {
        v["model_id"] = json!(m);
    }
    axum::Json(v).into_response()
}

fn locked(state: &Shared) -> std::sync::MutexGuard<'_, state::State> {
    // A test panicking while it holds the lock must not take the fake down.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The most a compressed body may unpack to.
const BODY_LIMIT: u64 = 64 << 20;

async fn client_config(State(s): State<Shared>) -> Response {
    let options = locked(&s).options;
    let mut config = json!({"pjwt_auth_enabled": false});
    if options.compress {
        config["proto_compress_fwdbwd"] = json!(true);
    }
    if options.json_only {
        config["proto_write_fwdbwd"] = json!(false);
    }
    axum::Json(config).into_response()
}

async fn seen(State(s): State<Shared>) -> Response {
    axum::Json(locked(&s).seen.clone()).into_response()
}

async fn models(State(s): State<Shared>) -> Response {
    axum::Json(locked(&s).models()).into_response()
}

async fn capabilities() -> Response {
    axum::Json(json!({"supported_models": [{
        "model_name": state::BASE_MODEL, "trainable": true, "sampleable": true, "max_context_length": 512,
    }]}))
    .into_response()
}

async fn create_session(State(s): State<Shared>) -> Response {
    let id = locked(&s).create_session();
    axum::Json(json!({"session_id": id})).into_response()
}

async fn heartbeat(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let id = text(&v, "session_id")?;
    if !locked(&s).heartbeat(id) {
        return Err(detail(410, format!("session {id} is finished")));
    }
    Ok(axum::Json(json!({"type": "session_heartbeat"})).into_response())
}

async fn expire(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    locked(&s).expire(text(&v, "session_id")?);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `{"sequences": [[token ids], …]}`: what the next samples return.
async fn script(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let sequences: Vec<Vec<i32>> = serde_json::from_value(v["sequences"].clone())
        .map_err(|e| detail(422, format!("`sequences`: {e}")))?;
    locked(&s).script(sequences);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn create_model(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let session = text(&v, "session_id")?;
    let base = text(&v, "base_model")?;
    let lora: LoraConfig = serde_json::from_value(v["lora_config"].clone())
        .map_err(|e| detail(422, format!("`lora_config`: {e}")))?;
    let id = locked(&s)
        .create_model(session, base, lora)
        .map_err(|e| detail(400, e))?;
    Ok(future(id, None))
}

async fn get_info(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let id = text(&v, "model_id")?;
    let info = locked(&s)
        .info(id)
        .map_err(|(status, message)| detail(status, message))?;
    Ok(axum::Json(info).into_response())
}

/// A training-side request into the model's `seq_id` order.
fn submit(s: &Shared, v: &Value, op: Op) -> Answer {
    let model = text(v, "model_id")?;
    let seq = int(v, "seq_id")?;
    let id = locked(s)
        .submit(model, seq, v.clone(), op)
        .map_err(|(status, message)| detail(status, message))?;
    Ok(future(id, Some(model)))
}

fn loss(name: &str) -> Result<LossFn, Refusal> {
    serde_json::from_value(json!(name)).map_err(|_| {
        detail(
            422,
            format!("unknown loss_fn {name:?} (cross_entropy, importance_sampling, ppo, cispo)"),
        )
    })
}

/// A JSON forward(-backward) input: `{data, loss_fn, loss_fn_config}`.
fn fwd_input(v: &Value, key: &str, forward_only: bool) -> Result<Op, Refusal> {
    let input = &v[key];
    let data: Vec<Datum> = serde_json::from_value(input["data"].clone())
        .map_err(|e| detail(422, format!("`{key}.data`: {e}")))?;
    let loss = loss(input["loss_fn"].as_str().unwrap_or_default())?;
    Ok(Op::ForwardBackward {
        data,
        loss,
        forward_only,
    })
}

async fn forward_backward(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let protobuf =
        header(header::CONTENT_TYPE).is_some_and(|ct| ct.starts_with("application/x-protobuf"));
    if !protobuf {
        locked(&s).seen.fwdbwd_json += 1;
        let v = json_body(&body)?;
        let op = fwd_input(&v, "forward_backward_input", false)?;
        return submit(&s, &v, op);
    }
    let zstd = header(header::CONTENT_ENCODING).is_some_and(|e| e.eq_ignore_ascii_case("zstd"));
    {
        let mut state = locked(&s);
        if state.options.json_only {
            state.seen.fwdbwd_refused += 1;
            return Err(detail(422, "the body must be JSON"));
        }
        state.seen.fwdbwd_protobuf += 1;
        state.seen.fwdbwd_zstd += u64::from(zstd);
    }
    let body = if zstd {
        Bytes::from(
            convert::decompress_body(&body, BODY_LIMIT)
                .map_err(|e| detail(400, format!("a zstd body that does not decompress: {e}")))?,
        )
    } else {
        body
    };
    let request =
        convert::decode_forward_backward(&body).map_err(|e| detail(422, e.to_string()))?;
    // The payload a retry is compared with.
    let payload = json!({
        "model_id": request.model_id,
        "seq_id": request.seq_id,
        "forward_backward_input": {"data": request.data, "loss_fn": request.loss.as_str()},
        "forward_only": request.forward_only,
    });
    let op = Op::ForwardBackward {
        data: request.data,
        loss: request.loss,
        forward_only: request.forward_only,
    };
    submit(&s, &payload, op)
}

async fn forward(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let op = fwd_input(&v, "forward_input", true)?;
    submit(&s, &v, op)
}

async fn optim_step(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let learning_rate = v["adam_params"]["learning_rate"].as_f64().unwrap_or(1e-4) as f32;
    submit(&s, &v, Op::OptimStep { learning_rate })
}

async fn save_weights(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let name = text(&v, "path")?.to_string();
    submit(&s, &v, Op::SaveWeights { name })
}

async fn save_for_sampler(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let name = v["path"].as_str().map(str::to_string);
    submit(&s, &v, Op::SaveForSampler { name })
}

async fn load_weights(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let path = text(&v, "path")?.to_string();
    submit(&s, &v, Op::LoadWeights { path })
}

async fn create_sampler(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let id = locked(&s)
        .create_sampler(v["base_model"].as_str(), v["model_path"].as_str())
        .map_err(|e| detail(400, e))?;
    Ok(axum::Json(json!({"sampling_session_id": id})).into_response())
}

async fn asample(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let prompt: ModelInput = serde_json::from_value(v["prompt"].clone())
        .map_err(|e| detail(422, format!("`prompt`: {e}")))?;
    let tokens: Vec<i32> = prompt
        .chunks
        .iter()
        .flat_map(|c| match c {
            metaclaw_tinker::types::Chunk::EncodedText { tokens } => tokens.clone(),
        })
        .collect();
    let params = &v["sampling_params"];
    let max_tokens = params["max_tokens"]
        .as_u64()
        .ok_or_else(|| detail(422, "`sampling_params.max_tokens` is required"))?;
    // A list of ids or of strings (never both), or one string; none
    // stops only at `max_tokens` (the bigram has no end of sequence).
    let stop = match &params["stop"] {
        Value::Null => Stop::Tokens(Vec::new()),
        Value::String(one) => Stop::Strings(vec![one.clone()]),
        list => serde_json::from_value(list.clone()).map_err(|_| {
            detail(
                422,
                "`sampling_params.stop` is a list of token ids or of strings",
            )
        })?,
    };
    let mut state = locked(&s);
    let sampler = match v["sampling_session_id"].as_str() {
        Some(id) => id.to_string(),
        None => state
            .create_sampler(v["base_model"].as_str(), v["model_path"].as_str())
            .map_err(|e| detail(400, e))?,
    };
    let request = state::SampleRequest {
        prompt: &tokens,
        num_samples: v["num_samples"].as_u64().unwrap_or(1) as usize,
        max_tokens: max_tokens as usize,
        temperature: params["temperature"].as_f64().unwrap_or(1.0) as f32,
        stop: &stop,
        seed: params["seed"]
            .as_u64()
            .unwrap_or(v["seq_id"].as_u64().unwrap_or(0)),
        prompt_logprobs: v["prompt_logprobs"].as_bool().unwrap_or(false),
    };
    let id = state
        .sample(&sampler, &request)
        .map_err(|e| detail(400, e))?;
    Ok(future(id, None))
}

async fn retrieve_future(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let id = text(&v, "request_id")?;
    let protobuf = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/x-protobuf"));
    let allow_metadata_only = v["allow_metadata_only"].as_bool().unwrap_or(false);
    let poll = locked(&s).poll(id, allow_metadata_only);
    Ok(match poll {
        Poll::Unknown => return Err(detail(404, format!("unknown request_id {id}"))),
        Poll::Metadata(size) => axum::Json(json!({
            "status": "complete_metadata", "response_payload_size": size,
        }))
        .into_response(),
        Poll::TryAgain => axum::Json(json!({
            "type": "try_again", "request_id": id, "queue_state": "active",
        }))
        .into_response(),
        Poll::Status(429) => {
            let mut r = detail(429, "rate limited").into_response();
            r.headers_mut()
                .insert("retry-after-ms", axum::http::HeaderValue::from_static("20"));
            r
        }
        Poll::Status(408) => return Err(detail(408, "still pending")),
        Poll::Status(402) => return Err(detail(402, state::NO_CREDIT)),
        Poll::Status(410) => return Err(detail(410, "the promise expired: re-submit the request")),
        Poll::Status(status) => return Err(detail(status, "injected server error")),
        Poll::Drop => dropped(),
        Poll::Reply(Reply::Failed(message)) => return Err(detail(400, message)),
        Poll::Reply(Reply::Json(v)) => axum::Json(v).into_response(),
        Poll::Reply(Reply::ForwardBackward(result)) if protobuf => {
            proto_response(convert::encode_forward_backward_result(&result))
        }
        Poll::Reply(Reply::ForwardBackward(result)) => axum::Json(result).into_response(),
        Poll::Reply(Reply::Sample(sampled)) if protobuf => {
            proto_response(convert::encode_sampled(&sampled))
        }
        Poll::Reply(Reply::Sample(sampled)) => {
            let mut v = json!(sampled);
            v["type"] = json!("sample");
            axum::Json(v).into_response()
        }
    })
}

fn proto_response(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/x-protobuf")], bytes).into_response()
}

/// A response whose body fails at once: the connection is cut.
fn dropped() -> Response {
    let failing = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("injected connection drop"))
    });
    Response::new(Body::from_stream(failing))
}

async fn checkpoints(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    axum::Json(locked(&s).checkpoints(&id)).into_response()
}

async fn weights_info(State(s): State<Shared>, body: Bytes) -> Answer {
    let v = json_body(&body)?;
    let path = text(&v, "tinker_path")?;
    let info = locked(&s)
        .weights_info(path)
        .map_err(|(status, message)| detail(status, message))?;
    Ok(axum::Json(info).into_response())
}
