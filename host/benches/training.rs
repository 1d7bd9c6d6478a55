//! Serving while training (W2-F, "zero downtime"): chat requests answered
//! by the student (`mode: rl`) at a steady open-loop rate, with training
//! off and on, in the same run. The sides alternate in slices (off, on,
//! on, off, …) so machine drift lands on both. While a slice is "on", a
//! driver learns one of the sessions made beforehand (so its samples are
//! ready) and asks for a train step — `forward_backward`, `optim_step`,
//! the saved state, save for sampler, the hot swap to the new sampler —
//! back to back for the whole slice. Latency counts from each request's
//! scheduled send time, so a stall cannot hide by delaying the next send.
//!
//! The real binaries on loopback: `metaclaw dev upstream` (the llm and the
//! judge), `metaclaw dev tinker` (the fake training service, `fake-bigram`;
//! `slow=MS` makes every future, samples included, ready only after MS)
//! and `metaclaw start --foreground`.
//!
//!     cargo bench -p metaclaw --bench training              # full run (~1 min)
//!     cargo bench -p metaclaw --bench training -- --quick   # CI: proves it runs
//!
//! Options: --rate N (req/s)  --secs N (per side)  --slice N (seconds a slice)
//!          --slow MS[,MS…] (the fake's latency per future; one setup per value)
//!          --pool N (sessions made before measuring, one learned per step;
//!            by default about what the step rate needs; more are made
//!            during the phase if they run out, and counted)
//!          --aa (training never starts: both sides "off", the method's
//!            noise floor)
//!          --quick (short; exits non-zero if a request failed or fell back
//!            to `llm`, or no step and swap happened while training was on)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::{BTreeSet, VecDeque};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

#[path = "support/harness.rs"]
mod harness;
use harness::{BIN, added_cells, cpu_secs, cpus, latency_cells, ms, percentile, spawn};

/// Off first, then on: index into per-side arrays.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Side {
    Off,
    On,
}

struct Options {
    rate: u32,
    secs: u32,
    slice: u32,
    slow: Vec<u64>,
    /// `None`: enough for the step rate `slow` allows.
    pool: Option<usize>,
    aa: bool,
    quick: bool,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let slow = value("--slow")
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| if quick { vec![0, 100] } else { vec![0, 200] });
    Options {
        rate: value("--rate").and_then(|n| n.parse().ok()).unwrap_or(20),
        secs: value("--secs")
            .and_then(|n| n.parse().ok())
            .unwrap_or(if quick { 2 } else { 10 }),
        slice: value("--slice")
            .and_then(|n| n.parse().ok())
            .unwrap_or(if quick { 1 } else { 2 })
            .max(1),
        slow,
        pool: value("--pool").and_then(|n| n.parse().ok()),
        aa: args.iter().any(|a| a == "--aa"),
        quick,
    }
}

/// What one measured request came to.
enum Done {
    /// Answered by the student: when it was due, its latency, and the
    /// policy version it named.
    Student(Instant, Duration, Option<i64>),
    /// Answered 2xx, but by `llm` (`x-metaclaw-served-by: llm; student_fallback`).
    FellBack,
    /// No 2xx answer: why.
    Failed(String),
}

/// One non-streamed request; its latency from the scheduled send time.
async fn one(client: &reqwest::Client, url: &str, body: &Arc<Vec<u8>>, scheduled: Instant) -> Done {
    let response = match client
        .post(url)
        .header("content-type", "application/json")
        .body(body.as_ref().clone())
        .send()
        .await
    {
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
fn run_slice(
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

/// What the driver did in one "on" slice.
#[derive(Default)]
struct Training {
    steps: u32,
    /// Policy versions the steps' swaps installed.
    versions: Vec<i64>,
    /// When each step call ran (a step's swap comes last), and each
    /// learning job.
    step_spans: Vec<(Instant, Instant)>,
    learn_spans: Vec<(Instant, Instant)>,
    waiting: u32,
    no_signal: u32,
    errors: Vec<String>,
    /// Sessions the pool did not have, made during the slice.
    made: u32,
}

/// Admin calls with the daemon's token.
#[derive(Clone)]
struct Admin {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Admin {
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
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

    async fn status(&self) -> Value {
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
async fn make_session(client: &reqwest::Client, url: &str, id: &str) -> Result<(), String> {
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

/// Learns a session and asks for a step, again and again, until `stop`;
/// the step in progress then finishes.
async fn drive(
    admin: Admin,
    chat_url: String,
    pool: Arc<Mutex<VecDeque<String>>>,
    stop: Arc<AtomicBool>,
) -> Training {
    let mut t = Training::default();
    let mut extra = 0;
    while !stop.load(Ordering::SeqCst) {
        let next = pool.lock().unwrap().pop_front();
        let session = match next {
            Some(s) => s,
            None => {
                extra += 1;
                let id = format!("zorblax-extra-{}-{extra}", std::process::id());
                if let Err(e) = make_session(&admin.client, &chat_url, &id).await {
                    t.errors.push(format!("making a session: {e}"));
                    continue;
                }
                t.made += 1;
                id
            }
        };
        let started = Instant::now();
        let (status, body) = admin
            .post("/admin/learn/now", &json!({"session": session}))
            .await;
        t.learn_spans.push((started, Instant::now()));
        if status != 200 {
            t.errors.push(format!("learn/now {status}: {body}"));
            continue;
        }
        let started = Instant::now();
        let (status, body) = admin.post("/admin/train/step", &json!({})).await;
        // Every step call, stepped or not, decided the queue.
        t.step_spans.push((started, Instant::now()));
        match (status, body["outcome"].as_str()) {
            (200, Some("stepped")) => {
                t.steps += 1;
                t.versions
                    .push(body["policy_version"].as_i64().unwrap_or(-1));
            }
            (200, Some("waiting")) => t.waiting += 1,
            (200, Some("no_signal")) => t.no_signal += 1,
            _ => t.errors.push(format!("train/step {status}: {body}")),
        }
    }
    t
}

/// Per thread name (`comm`) of `pid`: CPU ms and ms spent waiting on a
/// run queue (`/proc/PID/task/*/schedstat`), summed over its threads.
fn threads(pid: u32) -> std::collections::BTreeMap<String, (f64, f64)> {
    let mut out = std::collections::BTreeMap::new();
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

fn row(label: &str, v: &[Duration], failed: usize, fell_back: usize) -> String {
    format!(
        "{label:<8} {:>6} {:>7} {:>9} {}",
        v.len(),
        failed,
        fell_back,
        latency_cells(v)
    )
}

fn added(off: &[Duration], on: &[Duration]) -> String {
    format!(
        "{:<8} {:>6} {:>7} {:>9} {}",
        "added",
        "",
        "",
        "",
        added_cells(off, on)
    )
}

/// Everything measured for one `slow` value; `true` when the quick run's
/// conditions hold (no failure, no fallback, at least one step and swap
/// while on).
fn measure(opts: &Options, slow: u64, rt: &tokio::runtime::Runtime) -> bool {
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
    // Training by hand (the driver's steps), one session a step (its two
    // samples), the dummy's judge with one vote; skills off, so no
    // evolution takes samples out of the queue.
    std::fs::write(
        home.path().join("config.yaml"),
        format!(
            "mode: rl\nllm:\n  api_base: {dummy_url}\n  model_id: echo\n  force_model: true\n\
             rl:\n  model: {model}\n  tinker_base_url: {fake_url}\n  tokenizer_path: {fixture}\n  \
             batch_size: 2\n  manual_train_trigger: true\n  prm_model: judge\n  prm_m: 1\n\
             skills:\n  enabled: false\nlearning:\n  enabled: true\nplugins:\n  builtin: false\n\
             log:\n  level: warn\nsessions:\n  idle_timeout: 1h\n"
        ),
    )
    .unwrap();
    let stderr = std::fs::File::create(home.path().join("stderr.log")).unwrap();
    let started = Instant::now();
    let (proxy, proxy_url, _) = spawn(
        {
            let mut c = Command::new(BIN);
            // The agent's config is left alone; the built-in skills are
            // installed as for a user (skills off still: see the config).
            c.args(["start", "--foreground", "--port", "0"])
                .env("METACLAW_HOME", home.path())
                .env("METACLAW_NO_WIRE", "1")
                .stderr(stderr);
            c
        },
        "metaclaw listening on ",
    );
    let pids = [proxy.pid(), fake.pid(), dummy.pid()];
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let admin = Admin {
        client: client.clone(),
        base: proxy_url.clone(),
        token: std::fs::read_to_string(home.path().join("admin.token"))
            .unwrap()
            .trim()
            .to_string(),
    };
    let chat_url = format!("{proxy_url}/v1/chat/completions");

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

    // The sessions the driver learns, one a step: with futures ready at
    // once a cycle is ~0.1 s (the learning job), else ~5 futures' time.
    let sessions = opts.pool.unwrap_or(match slow {
        0 => opts.secs as usize * 12,
        _ => opts.secs as usize * 2 + 4,
    });
    let made = Instant::now();
    let ids: Vec<String> = (0..sessions).map(|i| format!("zorblax{i}")).collect();
    let errors: Vec<String> = rt.block_on(async {
        futures_util::stream::iter(ids.iter())
            .map(|id| make_session(&client, &chat_url, id))
            .buffer_unordered(16)
            .filter_map(|r| async move { r.err() })
            .collect()
            .await
    });
    assert!(errors.is_empty(), "making sessions: {errors:?}");
    let made = made.elapsed();
    let pool = Arc::new(Mutex::new(ids.into_iter().collect::<VecDeque<_>>()));

    println!(
        "\n## {model}: rl.model on the fake; every future (samples, steps) ready after {slow} ms"
    );
    println!(
        "# student ready {:.0} ms after start; {} learning sessions made in {:.2} s",
        ms(ready),
        sessions,
        made.as_secs_f64()
    );

    let small = json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say PONG"}]});
    let body = Arc::new(serde_json::to_vec(&small).unwrap());
    // Warm the path (connections, caches) at the same rate; not counted.
    run_slice(rt, &client, &chat_url, &body, opts.rate, 1);

    let mut lat = [Vec::new(), Vec::new()];
    let mut failed: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut fell_back = [0usize, 0];
    let mut served: [BTreeSet<i64>; 2] = [BTreeSet::new(), BTreeSet::new()];
    let mut cpu = [[0.0f64; 3]; 2];
    let mut wall = [Duration::ZERO; 2];
    let mut training = Vec::new();
    // The "on" requests' (due, answered, latency), to see what ran meanwhile.
    let mut spans = Vec::new();
    let mut per_thread: [std::collections::BTreeMap<String, (f64, f64)>; 2] = Default::default();
    let version_before = rt.block_on(admin.status())["student"]["policy_version"].as_i64();
    let slices = opts.secs.div_ceil(opts.slice) * 2;
    for k in 0..slices {
        // off, on, on, off, off, on, …: each side goes first equally often.
        let side = if (k + k / 2) % 2 == 0 {
            Side::Off
        } else {
            Side::On
        };
        let before: Vec<f64> = pids.iter().map(|&p| cpu_secs(p)).collect();
        let threads_before = threads(pids[0]);
        let t = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let driver = (side == Side::On && !opts.aa).then(|| {
            rt.spawn(drive(
                admin.clone(),
                chat_url.clone(),
                pool.clone(),
                stop.clone(),
            ))
        });
        let done = run_slice(rt, &client, &chat_url, &body, opts.rate, opts.slice);
        if let Some(driver) = driver {
            // The step in progress finishes before the next slice: an
            // "off" slice has no training at all.
            stop.store(true, Ordering::SeqCst);
            training.push(rt.block_on(driver).unwrap());
        }
        wall[side as usize] += t.elapsed();
        for (i, &p) in pids.iter().enumerate() {
            cpu[side as usize][i] += cpu_secs(p) - before[i];
        }
        for (name, (c, w)) in threads(pids[0]) {
            let (c0, w0) = threads_before.get(&name).copied().unwrap_or((0.0, 0.0));
            let e = per_thread[side as usize].entry(name).or_insert((0.0, 0.0));
            e.0 += c - c0;
            e.1 += w - w0;
        }
        for d in done {
            match d {
                Done::Student(at, l, v) => {
                    lat[side as usize].push(l);
                    if side == Side::On {
                        spans.push((at, at + l, l));
                    }
                    if let Some(v) = v {
                        served[side as usize].insert(v);
                    }
                }
                Done::FellBack => fell_back[side as usize] += 1,
                Done::Failed(why) => failed[side as usize].push(why),
            }
        }
    }
    lat[0].sort();
    lat[1].sort();
    let status = rt.block_on(admin.status());

    println!(
        "{:<8} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "side", "n", "failed", "fell back", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    println!("{}", row("off", &lat[0], failed[0].len(), fell_back[0]));
    println!("{}", row("on", &lat[1], failed[1].len(), fell_back[1]));
    println!("{}", added(&lat[0], &lat[1]));

    let steps: u32 = training.iter().map(|t| t.steps).sum();
    let versions: Vec<i64> = training.iter().flat_map(|t| t.versions.clone()).collect();
    let step_spans: Vec<(Instant, Instant)> =
        training.iter().flat_map(|t| t.step_spans.clone()).collect();
    let learn_spans: Vec<(Instant, Instant)> = training
        .iter()
        .flat_map(|t| t.learn_spans.clone())
        .collect();
    let took = |spans: &[(Instant, Instant)]| -> Vec<Duration> {
        let mut v: Vec<Duration> = spans.iter().map(|(a, b)| *b - *a).collect();
        v.sort();
        v
    };
    let (step_times, learn_times) = (took(&step_spans), took(&learn_spans));
    let errors: Vec<String> = training.iter().flat_map(|t| t.errors.clone()).collect();
    let swaps = versions.windows(2).filter(|w| w[1] != w[0]).count()
        + usize::from(versions.first().is_some_and(|v| Some(*v) != version_before));
    println!(
        "# training while on: {steps} steps, {swaps} swaps (policy version {} -> {}), step p50 {:.0} ms (max {:.0}), learn p50 {:.0} ms; {} waiting, {} no signal, {} errors; {} sessions made while on",
        version_before.map_or("?".into(), |v| v.to_string()),
        status["student"]["policy_version"],
        ms(percentile(&step_times, 50.0)),
        ms(*step_times.last().unwrap_or(&Duration::ZERO)),
        ms(percentile(&learn_times, 50.0)),
        training.iter().map(|t| t.waiting).sum::<u32>(),
        training.iter().map(|t| t.no_signal).sum::<u32>(),
        errors.len(),
        training.iter().map(|t| t.made).sum::<u32>(),
    );
    // The "on" requests by what ran while they were in flight: a step (its
    // swap included), only a learning job, or nothing (between cycles).
    let overlaps = |from: Instant, to: Instant, list: &[(Instant, Instant)]| {
        list.iter().any(|(a, b)| *a < to && from < *b)
    };
    let mut by = [Vec::new(), Vec::new(), Vec::new()];
    for &(from, to, l) in &spans {
        let k = if overlaps(from, to, &step_spans) {
            0
        } else if overlaps(from, to, &learn_spans) {
            1
        } else {
            2
        };
        by[k].push(l);
    }
    let mut parts = Vec::new();
    for (name, v) in ["a step", "a learning job only", "neither"]
        .iter()
        .zip(by.iter_mut())
    {
        v.sort();
        parts.push(format!(
            "{name}: n {}, p50 {:.3}, p99 {:.3} ms",
            v.len(),
            ms(percentile(v, 50.0)),
            ms(percentile(v, 99.0))
        ));
    }
    println!("# on, by what ran meanwhile: {}", parts.join("; "));
    let on_secs = wall[1].as_secs_f64().max(1e-9);
    let off_secs = wall[0].as_secs_f64().max(1e-9);
    println!(
        "# policy versions that answered: off {}, on {} ({:?}…)",
        served[0].len(),
        served[1].len(),
        served[1].iter().take(8).collect::<Vec<_>>()
    );
    println!(
        "# cpu (ms per wall second): metaclaw off {:.0}, on {:.0}; fake tinker off {:.0}, on {:.0}; dummy off {:.0}, on {:.0}",
        cpu[0][0] * 1e3 / off_secs,
        cpu[1][0] * 1e3 / on_secs,
        cpu[0][1] * 1e3 / off_secs,
        cpu[1][1] * 1e3 / on_secs,
        cpu[0][2] * 1e3 / off_secs,
        cpu[1][2] * 1e3 / on_secs,
    );
    // Where metaclaw's CPU went, and how long its threads waited for a
    // core: the serving runtime's workers are `tokio-rt-worker`.
    for (side, m) in ["off", "on"].iter().zip(&per_thread) {
        let list: Vec<String> = m
            .iter()
            .filter(|(_, (c, w))| *c >= 1.0 || *w >= 1.0)
            .map(|(n, (c, w))| format!("{n} {c:.0}/{w:.0}"))
            .collect();
        println!(
            "# metaclaw threads {side}, cpu/run-queue wait ms: {}",
            list.join(", ")
        );
    }
    println!(
        "# student: {} samples, {} fallbacks; training queue {}",
        status["student"]["samples"], status["student"]["fallbacks"], status["training"]["queue"]
    );
    // Why samples were not trained (the driver's sessions should be).
    if let Some(db) = status["store"]["path"].as_str() {
        let conn =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT train_note, count(*) FROM turn_samples WHERE train_state = 'skipped'
                 GROUP BY train_note",
            )
            .unwrap();
        let notes: Vec<(Option<String>, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        for (note, n) in notes {
            println!("# skipped: {n} x {}", note.unwrap_or_default());
        }
    }
    for (side, f) in ["off", "on"].iter().zip(&failed) {
        for why in f.iter().take(3) {
            println!("# failed ({side}): {why}");
        }
    }
    for e in errors.iter().take(3) {
        println!("# training error: {e}");
    }
    let ok = failed.iter().all(Vec::is_empty)
        && fell_back == [0, 0]
        && (opts.aa || (steps > 0 && swaps > 0))
        && errors.is_empty();
    if !ok {
        let log = std::fs::read_to_string(home.path().join("stderr.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        for line in tail.into_iter().rev() {
            println!("# metaclaw: {line}");
        }
    }
    drop(proxy);
    ok
}

fn main() {
    let opts = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("# metaclaw: serving from the student while it trains (release build, loopback)");
    println!(
        "# {} CPUs; dummy upstream (llm, judge) and fake Tinker server, each its own process",
        cpus()
    );
    println!(
        "# {} req/s open-loop, latency from each request's scheduled send time; {} s per side in {} s slices (off, on, on, off, ...)",
        opts.rate, opts.secs, opts.slice
    );
    println!(
        "# on = learn a session, then a train step (forward_backward, optim_step, save, save for sampler, swap), back to back"
    );
    if opts.aa {
        println!("# A/A RUN: training never starts; every 'added' figure below is noise");
    }
    let mut ok = true;
    for &slow in &opts.slow {
        ok &= measure(&opts, slow, &rt);
    }
    if opts.quick && !ok {
        println!(
            "# FAILED: a request failed or fell back, a step failed, or nothing trained while on"
        );
        std::process::exit(1);
    }
}
