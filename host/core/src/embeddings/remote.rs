//! The `openai` backend: any OpenAI-compatible `POST /v1/embeddings`.
//!
//! Plugins call `embed` synchronously from blocking threads, so requests are
//! handed to one worker thread with its own small runtime and answered over
//! a channel: no runtime-in-runtime tricks on the caller's side.
//!
//! A failed request is not retried here: a turn's query waits on it, so
//! the caller ([`super::Cached`]) stops asking for a while instead, as long
//! as the server's `Retry-After` says or else a growing backoff.

use std::time::Duration;

use anyhow::{Context, Result};
use axum::http::{HeaderMap, HeaderValue, header};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::{Backend, EmbedError};
use crate::config::ApiFormat;
use crate::http::{ClientSpec, Credential, Purpose};

struct Job {
    texts: Vec<String>,
    reply: std::sync::mpsc::SyncSender<Result<Vec<Vec<f32>>, EmbedError>>,
}

pub struct Remote {
    id: String,
    jobs: mpsc::UnboundedSender<Job>,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

impl Remote {
    /// `key` (may be empty: none is sent) came from the setting `key_setting`.
    pub fn new(api_base: &str, (key, key_setting): (&str, &str), model: &str) -> Result<Self> {
        let base = api_base.trim().trim_end_matches('/').to_string();
        let url = format!("{base}/embeddings");
        reqwest::Url::parse(&url).with_context(|| format!("embedding endpoint {url:?}"))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(credential) = Credential::new(ApiFormat::Openai, Some(key), key_setting)? {
            credential.apply(&mut headers);
        }
        let client = ClientSpec::new(Purpose::Embeddings)
            .only_calls([url.as_str()])
            .build()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the embedding client's runtime")?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let model_name = model.to_string();
        // Ends when `jobs`, the sender, is dropped with this client.
        crate::work::unjoined("metaclaw-embed", move || {
            runtime.block_on(async move {
                while let Some(job) = rx.recv().await {
                    let result = request(&client, &url, &headers, &model_name, &job.texts).await;
                    let _ = job.reply.send(result);
                }
            });
        })
        .context("cannot start the embedding client thread")?;
        Ok(Self {
            id: format!("openai:{base}:{model}"),
            jobs: tx,
        })
    }
}

impl Backend for Remote {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.jobs
            .send(Job {
                texts: texts.to_vec(),
                reply,
            })
            .map_err(|_| EmbedError::from("the embedding client has stopped"))?;
        answer
            .recv()
            .map_err(|_| EmbedError::from("the embedding client has stopped"))?
    }
}

async fn request(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    model: &str,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    // A turn's query is one short text and waits on the hot path: it gets
    // little time. A library being indexed gets more.
    let timeout = Duration::from_secs((5 + texts.len() as u64).min(60));
    let req = client
        .post(url)
        .timeout(timeout)
        .headers(headers.clone())
        .body(
            serde_json::json!({
                "model": model,
                "input": texts,
                "encoding_format": "float",
            })
            .to_string(),
        );
    let response = req.send().await.map_err(|e| {
        if e.is_timeout() {
            format!("{url} did not answer within {}s", timeout.as_secs())
        } else {
            format!("cannot reach {url}: {}", crate::http::describe(&e))
        }
    })?;
    let status = response.status();
    let retry_after = crate::http::retry_after(response.headers());
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{url}: {}", crate::http::describe(&e)))?;
    if !status.is_success() {
        let text: String = String::from_utf8_lossy(&body).chars().take(300).collect();
        return Err(EmbedError {
            message: format!("{url} answered {status}: {text}"),
            retry_after,
        });
    }
    let parsed: Response = serde_json::from_slice(&body)
        .map_err(|e| format!("{url} answered something that is not an embeddings response: {e}"))?;
    if parsed.data.len() != texts.len() {
        return Err(format!(
            "{url} returned {} embeddings for {} texts",
            parsed.data.len(),
            texts.len()
        )
        .into());
    }
    let mut out = vec![Vec::new(); texts.len()];
    for (position, item) in parsed.data.into_iter().enumerate() {
        let at = item.index.unwrap_or(position);
        let Some(slot) = out.get_mut(at) else {
            return Err(format!("{url} returned an embedding for index {at}").into());
        };
        let mut v = item.embedding;
        // Not every compatible server normalises.
        super::normalize(&mut v);
        *slot = v;
    }
    if out.iter().any(Vec::is_empty) {
        return Err(format!("{url} left some texts without an embedding").into());
    }
    Ok(out)
}
