//! The `openai` backend: any OpenAI-compatible `POST /v1/embeddings`.
//!
//! Plugins call `embed` synchronously from blocking threads, so requests are
//! handed to one worker thread with its own small runtime and answered over
//! a channel: no runtime-in-runtime tricks on the caller's side.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::Backend;

struct Job {
    texts: Vec<String>,
    reply: std::sync::mpsc::SyncSender<Result<Vec<Vec<f32>>, String>>,
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
    pub fn new(api_base: &str, api_key: Option<String>, model: &str) -> Result<Self> {
        let base = api_base.trim().trim_end_matches('/').to_string();
        let url = format!("{base}/embeddings");
        reqwest::Url::parse(&url).with_context(|| format!("embedding endpoint {url:?}"))?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .build()
            .context("cannot build the embedding HTTP client")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the embedding client's runtime")?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let model_name = model.to_string();
        std::thread::Builder::new()
            .name("metaclaw-embed".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        let result =
                            request(&client, &url, api_key.as_deref(), &model_name, &job.texts)
                                .await;
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

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.jobs
            .send(Job {
                texts: texts.to_vec(),
                reply,
            })
            .map_err(|_| "the embedding client has stopped".to_string())?;
        answer
            .recv()
            .map_err(|_| "the embedding client has stopped".to_string())?
    }
}

async fn request(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
    model: &str,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, String> {
    // A turn's query is one short text and waits on the hot path: it gets
    // little time. A library being indexed gets more.
    let timeout = Duration::from_secs((5 + texts.len() as u64).min(60));
    let mut req = client
        .post(url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(
            serde_json::json!({
                "model": model,
                "input": texts,
                "encoding_format": "float",
            })
            .to_string(),
        );
    if let Some(key) = api_key {
        req = req.bearer_auth(key);
    }
    let response = req.send().await.map_err(|e| {
        if e.is_timeout() {
            format!("{url} did not answer within {}s", timeout.as_secs())
        } else {
            format!("cannot reach {url}: {}", e.without_url())
        }
    })?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{url}: {}", e.without_url()))?;
    if !status.is_success() {
        let text: String = String::from_utf8_lossy(&body).chars().take(300).collect();
        return Err(format!("{url} answered {status}: {text}"));
    }
    let parsed: Response = serde_json::from_slice(&body)
        .map_err(|e| format!("{url} answered something that is not an embeddings response: {e}"))?;
    if parsed.data.len() != texts.len() {
        return Err(format!(
            "{url} returned {} embeddings for {} texts",
            parsed.data.len(),
            texts.len()
        ));
    }
    let mut out = vec![Vec::new(); texts.len()];
    for (position, item) in parsed.data.into_iter().enumerate() {
        let at = item.index.unwrap_or(position);
        let Some(slot) = out.get_mut(at) else {
            return Err(format!("{url} returned an embedding for index {at}"));
        };
        let mut v = item.embedding;
        // Not every compatible server normalises.
        super::normalize(&mut v);
        *slot = v;
    }
    if out.iter().any(Vec::is_empty) {
        return Err(format!("{url} left some texts without an embedding"));
    }
    Ok(out)
}
