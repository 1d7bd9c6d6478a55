//! Waiting for a future (reference §8): `retrieve_future` until the result,
//! a terminal failure, or a status that says what to do — poll again (408,
//! 5xx, `try_again`; `complete_metadata`, then asking for the whole
//! result), wait (429, 402, an unanswered poll), re-submit the original
//! request under its `seq_id` (410), or give up (other 4xx).

use std::time::Duration;

use serde_json::json;

use super::Error;
use super::replies::{Accepted, Polled};
use super::transport::{Body, Reply, Transport, retry_hint, service_error};

/// Each poll's own limit; servers hold a poll open for up to minutes.
const POLL_TIMEOUT: Duration = Duration::from_secs(45);
/// A server that answers "not yet" at once is polled again after a short,
/// growing wait rather than in a busy loop.
const NOT_YET: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));
/// Waits after 429 or an unanswered poll: min(2ⁿ, 30) s.
const SLOW_DOWN_MAX: Duration = Duration::from_secs(30);
/// Consecutive unanswered polls before the service counts as gone.
const UNANSWERED: u32 = 8;

/// What a submitted request is, for the poll's `X-Tinker-Request-Type`.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    CreateModel,
    ForwardBackward,
    OptimStep,
    SaveWeights,
    SaveWeightsForSampler,
    LoadWeights,
    Sample,
}

impl Kind {
    fn header(self) -> &'static str {
        match self {
            Kind::CreateModel => "CreateModel",
            Kind::ForwardBackward => "ForwardBackward",
            Kind::OptimStep => "OptimStep",
            Kind::SaveWeights => "SaveWeights",
            Kind::SaveWeightsForSampler => "SaveWeightsForSampler",
            Kind::LoadWeights => "LoadWeights",
            Kind::Sample => "Sample",
        }
    }
}

/// Submits `body` to `path` and waits for its result, re-submitting the
/// same body (same `seq_id`) if the service lets the future expire.
pub async fn submit_and_wait(
    transport: &Transport,
    path: &str,
    body: Body,
    kind: Kind,
) -> Result<Reply, Error> {
    submit(transport, path, body, kind)
        .await?
        .wait(transport)
        .await
}

/// A request the service accepted, whose result is not awaited yet: several
/// can be in flight, each run by the service in `seq_id` order.
pub struct Submitted {
    path: String,
    body: Body,
    kind: Kind,
    request_id: String,
}

/// Submits `body` to `path`; its result is [`Submitted::wait`]ed for later.
pub async fn submit(
    transport: &Transport,
    path: &str,
    body: Body,
    kind: Kind,
) -> Result<Submitted, Error> {
    let request_id = post(transport, path, &body).await?;
    Ok(Submitted {
        path: path.to_string(),
        body,
        kind,
        request_id,
    })
}

impl Submitted {
    /// Polls to the result, re-submitting the same body (same `seq_id`) if
    /// the service lets the future expire.
    pub async fn wait(self, transport: &Transport) -> Result<Reply, Error> {
        let (path, body) = (&self.path, &self.body);
        let resubmit = || post(transport, path, body);
        wait(transport, self.request_id.clone(), self.kind, resubmit).await
    }
}

/// Posts `body` to `path`; the future's id.
async fn post(transport: &Transport, path: &str, body: &Body) -> Result<String, Error> {
    let reply = transport
        .call(reqwest::Method::POST, path, Some(body.clone()))
        .await?;
    Ok(reply
        .decode::<Accepted>(&format!("{path}'s future"))?
        .request_id
        .into_string())
}

/// Polls `request_id` to its result. `resubmit` sends the original
/// request again (same `seq_id`, same body) and gives the new id: the
/// answer to a 410.
async fn wait<F, Fut>(
    transport: &Transport,
    mut request_id: String,
    kind: Kind,
    mut resubmit: F,
) -> Result<Reply, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String, Error>>,
{
    let mut not_yet = crate::http::Backoff::new(NOT_YET.0, NOT_YET.1);
    let mut slow_down = crate::http::Backoff::new(transport.first_wait, SLOW_DOWN_MAX);
    let (mut unanswered, mut bad_requests) = (0u32, 0u32);
    let mut billing = None;
    // As the SDK: a large result may first be announced by its size
    // (`complete_metadata`); then it is asked for whole.
    let mut allow_metadata_only = true;
    let mut polls = 0u64;
    loop {
        let iteration = polls;
        polls += 1;
        let headers = [
            ("x-tinker-request-type", kind.header().to_string()),
            ("x-tinker-request-iteration", iteration.to_string()),
        ];
        let body = Body::Json(json!({
            "request_id": request_id, "allow_metadata_only": allow_metadata_only,
        }));
        let reply = match transport
            .send_once(
                reqwest::Method::POST,
                "retrieve_future",
                Some(&body),
                &headers,
                POLL_TIMEOUT,
            )
            .await
        {
            Ok(reply) => {
                unanswered = 0;
                reply
            }
            Err(e) => {
                unanswered += 1;
                if unanswered >= UNANSWERED {
                    return Err(Error::Unavailable(format!(
                        "polling {request_id}: {}",
                        crate::http::describe(&e)
                    )));
                }
                tokio::time::sleep(slow_down.wait(None)).await;
                continue;
            }
        };
        match reply.status.as_u16() {
            200 if reply.protobuf => return Ok(reply),
            200 => {
                let polled: Polled = reply.decode("retrieve_future")?;
                if polled.try_again() {
                    tokio::time::sleep(not_yet.wait(None)).await;
                    continue;
                }
                if polled.metadata_only() {
                    allow_metadata_only = false;
                    continue;
                }
                if polled.failed() {
                    return Err(service_error("retrieve_future", &reply));
                }
                return Ok(reply);
            }
            408 | 500..=599 => tokio::time::sleep(not_yet.wait(None)).await,
            429 => tokio::time::sleep(slow_down.wait(retry_hint(&reply.headers))).await,
            402 => {
                if !transport.billing_pause(&mut billing).await {
                    return Err(service_error("retrieve_future", &reply));
                }
            }
            410 => {
                tracing::debug!(
                    request_id,
                    "the future expired; re-submitting under its seq_id"
                );
                request_id = resubmit().await?;
            }
            // An empty 400 is a proxy's artefact: tried again. skyrl
            // reports a failed operation as 400 {"detail"}: final.
            400 if reply.bytes.is_empty() && bad_requests < 3 => bad_requests += 1,
            _ => return Err(service_error("retrieve_future", &reply)),
        }
    }
}
