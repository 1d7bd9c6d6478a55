//! The fake over HTTP (tower `oneshot` on its router): the loop a training
//! client runs, in both dialects, the faults a client must survive, and
//! the options, bodies and stops it takes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use metaclaw_tinker::convert;
use metaclaw_tinker::types::{Datum, LossFn, Sampled};
use serde_json::{Value, json};
use tower::ServiceExt;

struct Fake(Router);

impl Fake {
    async fn call(
        &self,
        path: &str,
        body: Value,
        accept_proto: bool,
    ) -> (StatusCode, Vec<u8>, String) {
        let mut request =
            Request::post(format!("/api/v1/{path}")).header("content-type", "application/json");
        if accept_proto {
            request = request.header("accept", "application/x-protobuf, application/json");
        }
        self.send(request.body(Body::from(body.to_string())).unwrap())
            .await
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, Vec<u8>, String) {
        let response = self.0.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let ct = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, bytes.to_vec(), ct)
    }

    async fn json(&self, path: &str, body: Value) -> Value {
        let (status, bytes, _) = self.call(path, body, false).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{path}: {}",
            String::from_utf8_lossy(&bytes)
        );
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Polls a future until it has a result (as JSON, or protobuf bytes).
    async fn result(&self, request_id: &str, accept_proto: bool) -> (Vec<u8>, String) {
        for _ in 0..100 {
            let (status, bytes, ct) = self
                .call(
                    "retrieve_future",
                    json!({"request_id": request_id, "allow_metadata_only": true}),
                    accept_proto,
                )
                .await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{}",
                String::from_utf8_lossy(&bytes)
            );
            if ct.starts_with("application/json") {
                let v: Value = serde_json::from_slice(&bytes).unwrap();
                if v["type"] == "try_again" {
                    tokio::task::yield_now().await;
                    continue;
                }
            }
            return (bytes, ct);
        }
        panic!("future {request_id} never finished");
    }

    async fn model(&self, base: &str) -> (String, String) {
        let session = self.json("create_session", json!({"tags": [], "user_metadata": {}, "sdk_version": "metaclaw", "type": "create_session"})).await;
        let session = session["session_id"].as_str().unwrap().to_string();
        let f = self
            .json("create_model", json!({"session_id": session, "model_seq_id": 0, "base_model": base, "lora_config": {"rank": 4}, "type": "create_model"}))
            .await;
        let (bytes, _) = self.result(f["request_id"].as_str().unwrap(), false).await;
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        (session, v["model_id"].as_str().unwrap().to_string())
    }

    async fn sample(&self, sampler: &str, seq: u64) -> Sampled {
        let f = self
            .json("asample", json!({"sampling_session_id": sampler, "seq_id": seq, "num_samples": 1, "prompt": {"chunks": [{"type": "encoded_text", "tokens": [3]}]}, "sampling_params": {"max_tokens": 4, "temperature": 0.0}, "type": "sample"}))
            .await;
        let (bytes, ct) = self.result(f["request_id"].as_str().unwrap(), true).await;
        assert_eq!(ct, "application/x-protobuf");
        convert::sampled(&bytes).unwrap()
    }
}

#[tokio::test]
async fn a_training_step_changes_what_the_new_weights_sample() {
    let fake = Fake(metaclaw_mock_tinker::router());
    let (_, model) = fake.model("fake-bigram").await;
    let base = fake
        .json(
            "create_sampling_session",
            json!({"session_id": "x", "sampling_session_seq_id": 0, "base_model": "fake-bigram"}),
        )
        .await;
    let before = fake
        .sample(base["sampling_session_id"].as_str().unwrap(), 0)
        .await;
    let seq = &before.sequences[0];
    assert_eq!(seq.tokens.len(), seq.logprobs.as_ref().unwrap().len());

    // forward_backward as protobuf, its result as protobuf.
    let body = convert::forward_backward_body(
        &model,
        1,
        &[Datum::from_sample(&[3], seq, -1.0)],
        LossFn::ImportanceSampling,
        &BTreeMap::new(),
        false,
    );
    let request = Request::post("/api/v1/forward_backward")
        .header("content-type", "application/x-protobuf")
        .body(Body::from(body))
        .unwrap();
    let (status, bytes, _) = fake.send(request).await;
    assert_eq!(status, StatusCode::OK);
    let f: Value = serde_json::from_slice(&bytes).unwrap();
    let (bytes, ct) = fake.result(f["request_id"].as_str().unwrap(), true).await;
    assert_eq!(ct, "application/x-protobuf");
    let out = convert::forward_backward_result(&bytes).unwrap();
    // On-policy, the current logprobs are the sampler's.
    let current = out.loss_fn_outputs[0]["logprobs"].floats();
    for (a, b) in current.iter().zip(seq.logprobs.as_ref().unwrap()) {
        assert!((a - b).abs() < 1e-5);
    }

    let f = fake.json("optim_step", json!({"model_id": model, "seq_id": 2, "type": "optim_step", "adam_params": {"learning_rate": 1.0}})).await;
    let (bytes, _) = fake.result(f["request_id"].as_str().unwrap(), false).await;
    let metrics: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(metrics["metrics"]["fake/grad_norm"].as_f64().unwrap() > 0.0);

    let f = fake.json("save_weights_for_sampler", json!({"model_id": model, "seq_id": 3, "sampling_session_seq_id": 1, "kind": "snapshot"})).await;
    let (bytes, _) = fake.result(f["request_id"].as_str().unwrap(), false).await;
    let saved: Value = serde_json::from_slice(&bytes).unwrap();
    let after = fake
        .sample(saved["sampling_session_id"].as_str().unwrap(), 0)
        .await;
    // A negative advantage made the greedy answer less likely.
    assert_ne!(after.sequences[0], before.sequences[0]);

    let f = fake
        .json(
            "save_weights",
            json!({"model_id": model, "path": "step-1", "seq_id": 4, "type": "save_weights"}),
        )
        .await;
    let (bytes, _) = fake.result(f["request_id"].as_str().unwrap(), false).await;
    let path = serde_json::from_slice::<Value>(&bytes).unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(path, format!("tinker://{model}/weights/step-1"));
    let (status, bytes, _) = fake
        .send(
            Request::get(format!("/api/v1/training_runs/{model}/checkpoints"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(list["checkpoints"][0]["tinker_path"], path.as_str());
}

#[tokio::test]
async fn faults_come_in_the_shapes_a_client_must_handle() {
    let fake = Fake(metaclaw_mock_tinker::router());
    let (session, model) = fake.model("fake-bigram@http410,http429,try_again=1").await;
    let body = json!({"model_id": model, "seq_id": 1, "type": "optim_step", "adam_params": {"learning_rate": 0.1}});
    let f = fake.json("optim_step", body.clone()).await;
    let id = f["request_id"].as_str().unwrap();
    let poll = json!({"request_id": id, "allow_metadata_only": true});
    let (status, _, _) = fake.call("retrieve_future", poll.clone(), false).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = fake.call("retrieve_future", poll.clone(), false).await;
    assert_eq!(status, StatusCode::GONE);
    // The promise broke: the same request under the same seq_id again.
    let again = fake.json("optim_step", body).await;
    let (bytes, _) = fake
        .result(again["request_id"].as_str().unwrap(), false)
        .await;
    assert!(serde_json::from_slice::<Value>(&bytes).unwrap()["metrics"].is_object());
    // Another request under a used seq_id is a conflict.
    let (status, _, _) = fake
        .call("optim_step", json!({"model_id": model, "seq_id": 1, "type": "optim_step", "adam_params": {"learning_rate": 0.9}}), false)
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // A session the server ended answers its heartbeats with 410.
    let beat = json!({"session_id": session, "type": "session_heartbeat"});
    assert_eq!(
        fake.call("session_heartbeat", beat.clone(), false).await.0,
        StatusCode::OK
    );
    fake.call("fake/expire_session", json!({"session_id": session}), false)
        .await;
    assert_eq!(
        fake.call("session_heartbeat", beat, false).await.0,
        StatusCode::GONE
    );
}

/// The fake's client config, and a protobuf forward-only body for a new
/// model of it.
async fn config_and_probe(fake: &Fake) -> (Value, Vec<u8>) {
    let config = fake
        .json("client/config", json!({"sdk_version": "x"}))
        .await;
    let (_, model) = fake.model("fake-bigram").await;
    let body = convert::forward_backward_body(
        &model,
        1,
        &[],
        LossFn::CrossEntropy,
        &BTreeMap::new(),
        true,
    );
    (config, body)
}

#[tokio::test]
async fn the_config_bodies_and_stops_it_takes() {
    let options = metaclaw_mock_tinker::Options {
        compress: true,
        ..Default::default()
    };
    let fake = Fake(metaclaw_mock_tinker::router_with(options));
    let (config, body) = config_and_probe(&fake).await;
    assert_eq!(config["proto_compress_fwdbwd"], true);
    let post = |body: Vec<u8>| {
        Request::post("/api/v1/forward_backward")
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "zstd")
            .body(Body::from(body))
            .unwrap()
    };
    // A zstd body is read; one that is not zstd is refused.
    let packed = convert::compress_body(&body).unwrap();
    assert_eq!(fake.send(post(packed)).await.0, StatusCode::OK);
    assert_eq!(fake.send(post(body)).await.0, StatusCode::BAD_REQUEST);

    // Stops are ids or strings, never both.
    let sampler = fake
        .json(
            "create_sampling_session",
            json!({"session_id": "x", "sampling_session_seq_id": 0, "base_model": "fake-bigram"}),
        )
        .await;
    let sample = |stop: Value| json!({"sampling_session_id": sampler["sampling_session_id"], "seq_id": 0, "num_samples": 1, "prompt": {"chunks": [{"type": "encoded_text", "tokens": [3]}]}, "sampling_params": {"max_tokens": 2, "stop": stop}});
    assert_eq!(
        fake.call("asample", sample(json!(["ab"])), false).await.0,
        StatusCode::OK
    );
    assert_eq!(
        fake.call("asample", sample(json!([1, "ab"])), false)
            .await
            .0,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    // A server of the JSON dialect says so, and refuses protobuf.
    let legacy = Fake(metaclaw_mock_tinker::router_with(
        metaclaw_mock_tinker::Options {
            json_only: true,
            ..Default::default()
        },
    ));
    let (config, body) = config_and_probe(&legacy).await;
    assert_eq!(config["proto_write_fwdbwd"], false);
    let request = Request::post("/api/v1/forward_backward")
        .header("content-type", "application/x-protobuf")
        .body(Body::from(body))
        .unwrap();
    assert_eq!(
        legacy.send(request).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}
