//! Pieces of the benches that serve from the student (`training`,
//! `scheduler`): the real daemon in an RL mode beside the dummy upstream
//! and the fake Tinker server, open-loop chat load, the learning sessions
//! a step trains on, admin calls and per-thread CPU.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::harness::{self, BIN, Proc, added_cells, latency_cells, spawn};

/// What one measured request came to.
pub enum Done {
    /// Answered by the student: when it was due, its latency, and the
    /// policy version it named.
    Student(Instant, Duration, Option<i64>),
    /// Answered 2xx, but by `llm` (`x-metaclaw-served-by: llm; student_fallback`).
    FellBack,
    /// No 2xx answer: why.
    Failed(String),
}

/// Each measured request in a session of its own (`x-session-id`), so a
/// canary's arms both serve the load (`training --canary`); off: they all
/// share the one session their identical messages make.
pub static SESSION_EACH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One non-streamed request; its latency from the scheduled send time.
async fn one(client: &reqwest::Client, url: &str, body: &Arc<Vec<u8>>, scheduled: Instant) -> Done {
    use std::sync::atomic::Ordering;
    let mut request = client.post(url).header("content-type", "application/json");
    if SESSION_EACH.load(Ordering::Relaxed) {
        let n = SENT.fetch_add(1, Ordering::Relaxed);
        request = request.header("x-session-id", format!("load-{}-{n}", std::process::id()));
    }
    let response = match request.body(body.as_ref().clone()).send().await {
        Ok(r) => r,
        Err(e) => return Done::Failed(format!("no answer: {e}")),
    };
    let status = response.status();
    let served_by = response
        .headers()
        .get("x-metaclaw-served-by")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = match response.bytes().await {
        Ok(b) => b,
        Err(e) => return Done::Failed(format!("body cut: {e}")),
    };
    let latency = scheduled.elapsed();
    if !status.is_success() {
        return Done::Failed(format!(
            "{status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ));
    }
    match served_by.strip_prefix("student") {
        Some(rest) => Done::Student(
            scheduled,
            latency,
            rest.split("policy_version=")
                .nth(1)
                .and_then(|v| v.trim().parse().ok()),
        ),
        None => Done::FellBack,
    }
}

/// `rate` req/s for `secs` seconds, open-loop: the schedule is kept by
/// this OS thread with precise sleeps (the async timer ticks in whole
/// milliseconds). Returns once every request has its answer.
pub fn run_slice(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    rate: u32,
    secs: u32,
) -> Vec<Done> {
    let (tx, rx) = std::sync::mpsc::channel();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let t0 = Instant::now() + Duration::from_millis(5);
    let n = rate * secs;
    for i in 0..n {
        let scheduled = t0 + interval * i;
        let now = Instant::now();
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        let (client, url, body, tx) = (client.clone(), url.to_string(), body.clone(), tx.clone());
        rt.spawn(async move {
            let _ = tx.send(one(&client, &url, &body, scheduled).await);
        });
    }
    rx.iter().take(n as usize).collect()
}

/// The measured request: small, and answered by the student.
pub fn small_request() -> Arc<Vec<u8>> {
    let small = json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say PONG"}]});
    Arc::new(serde_json::to_vec(&small).unwrap_or_default())
}

/// Admin calls with the daemon's token.
#[derive(Clone)]
pub struct Admin {
    pub client: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Admin {
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await;
        match r {
            Ok(r) => {
                let status = r.status().as_u16();
                let text = r.text().await.unwrap_or_default();
                (
                    status,
                    serde_json::from_str(&text).unwrap_or(Value::String(text)),
                )
            }
            Err(e) => (0, Value::String(e.to_string())),
        }
    }

    pub async fn status(&self) -> Value {
        match self
            .client
            .get(format!("{}/admin/status", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }
}

/// A learning session of two student turns: a question, and after the
/// student's answer the user's correction. The judge (`judge` on the
/// dummy) gives the first turn −1 and the second 0: advantages that are
/// not all zero, so each session is a step's worth of signal.
pub async fn make_session(client: &reqwest::Client, url: &str, id: &str) -> Result<(), String> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are terse."}),
        json!({"role": "user", "content": format!("What is the capital of {id}?")}),
    ];
    for turn in 0..2 {
        let r = client
            .post(url)
            .header("x-session-id", id)
            .json(&json!({"model": "m", "max_tokens": 8, "messages": messages}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("{id}: {}", r.status()));
        }
        let answer: Value = r.json().await.map_err(|e| e.to_string())?;
        if turn == 0 {
            let said = answer["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            messages.push(json!({"role": "assistant", "content": said}));
            messages.push(json!({"role": "user", "content": "No, that's wrong: it is Zorb."}));
        }
    }
    Ok(())
}

/// The daemon serving from the student, with its upstream and training
/// service; each a process killed on drop.
pub struct Daemon {
    pub home: tempfile::TempDir,
    /// metaclaw, the fake Tinker server, the dummy upstream.
    pub pids: [u32; 3],
    pub admin: Admin,
    pub chat_url: String,
    /// `rl.model` on the fake.
    pub model: String,
    /// From start until the student was ready.
    pub ready: Duration,
    _procs: [Proc; 3],
}

impl Daemon {
    /// `metaclaw start --foreground` on a fresh home: the student on the
    /// fake (`fake-bigram`, every future ready after `slow` ms), the
    /// dummy's judge with one vote, batches of 2 (one learning session),
    /// skills off (no evolution takes samples out of the queue); `mode`,
    /// `rl.manual_train_trigger`, and `extra` appended to the config.
    pub fn start(
        slow: u64,
        mode: &str,
        manual_trigger: bool,
        extra: &str,
        rt: &tokio::runtime::Runtime,
    ) -> Self {
        let home = tempfile::tempdir().unwrap();
        let (dummy, dummy_url) = harness::dummy();
        let (fake, fake_url, _) = spawn(
            {
                let mut c = Command::new(BIN);
                c.args(["dev", "tinker", "--port", "0"])
                    .stderr(Stdio::null());
                c
            },
            "fake tinker listening on ",
        );
        let model = match slow {
            0 => "fake-bigram".to_string(),
            n => format!("fake-bigram@slow={n}"),
        };
        let fixture = format!(
            "{}/../tests/fixtures/tiny-qwen3",
            env!("CARGO_MANIFEST_DIR")
        );
        // Weights serve at once unless `extra` says otherwise (a canary's
        // test would hold every step after the first).
        let canary = match extra.contains("canary:") {
            true => "",
            false => "canary:\n  weights: false\n",
        };
        std::fs::write(
            home.path().join("config.yaml"),
            format!(
                "mode: {mode}\nllm:\n  api_base: {dummy_url}\n  model_id: echo\n  force_model: true\n\
                 rl:\n  model: {model}\n  tinker_base_url: {fake_url}\n  tokenizer_path: {fixture}\n  \
                 batch_size: 2\n  manual_train_trigger: {manual_trigger}\n  prm_model: judge\n  prm_m: 1\n\
                 skills:\n  enabled: false\nlearning:\n  enabled: true\nplugins:\n  builtin: false\n\
                 log:\n  level: warn\nsessions:\n  idle_timeout: 1h\n{canary}{extra}"
            ),
        )
        .unwrap();
        let stderr = std::fs::File::create(home.path().join("stderr.log")).unwrap();
        let started = Instant::now();
        let (proxy, proxy_url, _) = spawn(
            {
                let mut c = Command::new(BIN);
                // The agent's config is left alone (METACLAW_NO_WIRE).
                c.args(["start", "--foreground", "--port", "0"])
                    .env("METACLAW_HOME", home.path())
                    .env("METACLAW_NO_WIRE", "1")
                    .stderr(stderr);
                c
            },
            "metaclaw listening on ",
        );
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(512)
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let admin = Admin {
            client,
            base: proxy_url.clone(),
            token: std::fs::read_to_string(home.path().join("admin.token"))
                .unwrap()
                .trim()
                .to_string(),
        };
        // The student connects in the background.
        let ready = rt.block_on(async {
            loop {
                let s = admin.status().await;
                if s["student"]["state"] == "ready" {
                    return started.elapsed();
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the student never became ready: {}",
                    s["student"]
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self {
            home,
            pids: [proxy.pid(), fake.pid(), dummy.pid()],
            admin,
            chat_url: format!("{proxy_url}/v1/chat/completions"),
            model,
            ready,
            _procs: [proxy, fake, dummy],
        }
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.admin.client
    }

    /// Makes `n` learning sessions named `prefix0`, `prefix1`, …; their
    /// names.
    pub fn make_sessions(
        &self,
        rt: &tokio::runtime::Runtime,
        prefix: &str,
        n: usize,
    ) -> Vec<String> {
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        let errors: Vec<String> = rt.block_on(async {
            futures_util::stream::iter(ids.iter())
                .map(|id| make_session(self.client(), &self.chat_url, id))
                .buffer_unordered(16)
                .filter_map(|r| async move { r.err() })
                .collect()
                .await
        });
        assert!(errors.is_empty(), "making sessions: {errors:?}");
        ids
    }

    /// The last lines metaclaw logged (printed when a run fails).
    pub fn print_log_tail(&self, lines: usize) {
        let log = std::fs::read_to_string(self.home.path().join("stderr.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        for line in tail.into_iter().rev() {
            println!("# metaclaw: {line}");
        }
    }

    /// The store, read-only (for what the daemon recorded).
    pub fn store(&self, status: &Value) -> Option<metaclaw_core::store::sql::Conn> {
        let db = status["store"]["path"].as_str()?;
        metaclaw_core::store::Db::at(db).read().ok()
    }
}

/// Per thread name (`comm`) of `pid`: CPU ms and ms spent waiting on a
/// run queue (`/proc/PID/task/*/schedstat`), summed over its threads.
pub fn threads(pid: u32) -> BTreeMap<String, (f64, f64)> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        let f: Vec<f64> = stat
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        if f.len() >= 2 {
            let e = out.entry(comm.trim().to_string()).or_insert((0.0, 0.0));
            e.0 += f[0] / 1e6;
            e.1 += f[1] / 1e6;
        }
    }
    out
}

/// `now - before`, per thread name.
pub fn threads_since(
    before: &BTreeMap<String, (f64, f64)>,
    now: BTreeMap<String, (f64, f64)>,
    into: &mut BTreeMap<String, (f64, f64)>,
) {
    for (name, (c, w)) in now {
        let (c0, w0) = before.get(&name).copied().unwrap_or((0.0, 0.0));
        let e = into.entry(name).or_insert((0.0, 0.0));
        e.0 += c - c0;
        e.1 += w - w0;
    }
}

/// The threads that used or waited at least 1 ms, as `name cpu/wait`.
pub fn threads_line(m: &BTreeMap<String, (f64, f64)>) -> String {
    m.iter()
        .filter(|(_, (c, w))| *c >= 1.0 || *w >= 1.0)
        .map(|(n, (c, w))| format!("{n} {c:.0}/{w:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table header `row` and `added` fill.
pub fn header(first: &str) -> String {
    format!(
        "{first:<8} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "n", "failed", "fell back", "p50 ms", "p90 ms", "p99 ms", "max ms"
    )
}

pub fn row(label: &str, v: &[Duration], failed: usize, fell_back: usize) -> String {
    format!(
        "{label:<8} {:>6} {:>7} {:>9} {}",
        v.len(),
        failed,
        fell_back,
        latency_cells(v)
    )
}

pub fn added(label: &str, base: &[Duration], other: &[Duration]) -> String {
    format!(
        "{label:<8} {:>6} {:>7} {:>9} {}",
        "",
        "",
        "",
        added_cells(base, other)
    )
}
