//! Added latency of the proxy: the same requests sent straight to the dummy
//! upstream (A) and through metaclaw (B), in the same run, interleaved in
//! one-second slices so machine noise lands on both sides alike. Load is
//! open-loop: requests leave on a fixed schedule and latency counts from the
//! scheduled time, so a stall cannot hide itself by delaying the next send.
//!
//!     cargo bench -p metaclaw --bench proxy                # full run (~2 min)
//!     cargo bench -p metaclaw --bench proxy -- --quick     # CI: proves it runs
//!
//! Options: --rates 100,1000  --secs N (per side, per rate)  --quick
//!          --aa (both sides direct: the method's noise floor)
//!          --proxy-env KEY=VALUE (environment for the proxy, for experiments)
//!          --proxy-bin PATH (the metaclaw that serves side B: an older build,
//!            for before/after runs back to back; default this build's)
//!          --learning N (then again while N learning jobs run: judge, scorers,
//!            evolver, plugins and skill writes, all on the same machine)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

#[path = "support/harness.rs"]
mod harness;
use harness::{BIN, added_cells, cpu_secs, latency_cells, ms, percentile, rss_kib, spawn};

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Direct,
    Proxy,
}

struct Options {
    aa: bool,
    /// `KEY=VALUE` environment for the proxy process (experiments).
    proxy_env: Vec<String>,
    /// The metaclaw binary of side B.
    proxy_bin: String,
    rates: Vec<u32>,
    secs: u32,
    quick: bool,
    learning: Option<u32>,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let value = |flag: &str| args.value(flag);
    let rates = value("--rates")
        .map(|r| r.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| {
            if quick {
                vec![100, 1000]
            } else {
                vec![100, 500, 1000, 2000]
            }
        });
    let secs = value("--secs")
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 1 } else { 10 });
    let proxy_env = args.values("--proxy-env");
    let aa = args.has("--aa");
    let learning = value("--learning").and_then(|n| n.parse().ok());
    Options {
        learning,
        aa,
        proxy_env,
        proxy_bin: value("--proxy-bin").unwrap_or_else(|| BIN.to_string()),
        rates,
        secs,
        quick,
    }
}

/// One non-streamed request; its latency from the scheduled send time.
async fn one(
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    scheduled: Instant,
) -> Option<Duration> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.as_ref().clone())
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.bytes().await.ok()?;
    Some(scheduled.elapsed())
}

/// Runs `rate` req/s for `secs` seconds per side, alternating sides each
/// second. The schedule is kept by an OS thread with precise sleeps (the
/// async timer ticks in whole milliseconds, which would blur both sides).
/// Returns sorted latencies per side and error counts.
fn run_rate(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    urls: [&str; 2],
    bodies: [Arc<Vec<u8>>; 2],
    rate: u32,
    secs: u32,
) -> ([Vec<Duration>; 2], [u32; 2]) {
    let (tx, rx) = std::sync::mpsc::channel();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let t0 = Instant::now() + Duration::from_millis(20);
    let mut sent = 0;
    for slice in 0..(secs * 2) {
        // Alternate which side goes first in each pair of slices.
        let side = if (slice + slice / 2) % 2 == 0 {
            Side::Direct
        } else {
            Side::Proxy
        };
        let slice_start = t0 + Duration::from_secs(u64::from(slice));
        for i in 0..rate {
            let scheduled = slice_start + interval * i;
            let now = Instant::now();
            if scheduled > now {
                std::thread::sleep(scheduled - now);
            }
            let (client, url, body, tx) = (
                client.clone(),
                urls[side as usize].to_string(),
                bodies[side as usize].clone(),
                tx.clone(),
            );
            rt.spawn(async move {
                let _ = tx.send((side, one(&client, &url, &body, scheduled).await));
            });
            sent += 1;
        }
    }
    let mut lat = [Vec::new(), Vec::new()];
    let mut errors = [0, 0];
    for (side, result) in rx.iter().take(sent) {
        match result {
            Some(d) => lat[side as usize].push(d),
            None => errors[side as usize] += 1,
        }
    }
    lat[0].sort();
    lat[1].sort();
    (lat, errors)
}

struct StreamStats {
    ttft: Vec<Duration>,
    gaps: Vec<Duration>,
}

/// Sequential streams: time to the first content chunk, and the gaps
/// between content chunks.
async fn streams(client: &reqwest::Client, url: &str, n: u32) -> StreamStats {
    let body = json!({"model": "stream-10-10", "stream": true, "messages": [{"role": "user", "content": "go"}]}).to_string();
    let mut stats = StreamStats {
        ttft: Vec::new(),
        gaps: Vec::new(),
    };
    for _ in 0..n {
        let start = Instant::now();
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let mut s = response.bytes_stream();
        let mut last: Option<Instant> = None;
        let mut buf = String::new();
        while let Some(chunk) = s.next().await {
            let now = Instant::now();
            buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                if event.contains("\"content\":\"chunk-") {
                    match last {
                        None => stats.ttft.push(now - start),
                        Some(prev) => stats.gaps.push(now - prev),
                    }
                    last = Some(now);
                }
            }
        }
    }
    stats.ttft.sort();
    stats.gaps.sort();
    stats
}

fn row(label: &str, v: &[Duration]) -> String {
    format!("{label:<8} {:>6} {}", v.len(), latency_cells(v))
}

/// Added p50 and p99, ms.
fn added_ms(direct: &[Duration], proxy: &[Duration]) -> (f64, f64) {
    let d = |p| ms(percentile(proxy, p)) - ms(percentile(direct, p));
    (d(50.0), d(99.0))
}

/// `n` sessions, each a task, a wrong answer and the user's correction,
/// all ended at once: `n` learning jobs queue up. The small-request run is
/// then repeated while they run, and compared with the run before.
#[allow(clippy::too_many_arguments)]
fn learning_phase(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    proxy_url: &str,
    urls: [&str; 2],
    body: &Arc<Vec<u8>>,
    n: u32,
    opts: &Options,
    before: &[(f64, f64)],
    home: &std::path::Path,
) {
    rt.block_on(async {
        for i in 0..n {
            let task = format!("What is the capital of zorblax{i}?");
            let turns = [
                json!({"model": "echo", "messages": [{"role": "user", "content": task}]}),
                json!({"model": "echo", "messages": [
                    {"role": "user", "content": task},
                    {"role": "assistant", "content": "Paris."},
                    {"role": "user", "content": format!("No, that's wrong: it is Zorb{i}.")},
                ]}),
            ];
            for t in turns {
                client
                    .post(format!("{proxy_url}/v1/chat/completions"))
                    .header("x-session-id", format!("learn-{i}"))
                    .header("content-type", "application/json")
                    .body(t.to_string())
                    .send()
                    .await
                    .unwrap();
            }
        }
        for i in 0..n {
            client
                .post(format!("{proxy_url}/v1/sessions/learn-{i}/end"))
                .send()
                .await
                .unwrap();
        }
    });
    println!("
## small chat request while a batch of {n} learning jobs runs (judge x3 votes per turn, scorers, evolver, evolver plugins, skill writes)");
    println!(
        "{:<8} {:<8} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "rate", "side", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    for (k, &rate) in opts.rates.iter().enumerate() {
        let done_before = jobs_in(home, "done");
        let ([a, b], errors) = run_rate(
            rt,
            client,
            urls,
            [body.clone(), body.clone()],
            rate,
            opts.secs,
        );
        let done_after = jobs_in(home, "done");
        println!("{:<8} {}", format!("{rate}/s"), row("direct", &a));
        println!("{:<8} {}", "", row("proxy", &b));
        println!("{:<8} {}", "", added(&a, &b));
        if let Some((p50, p99)) = before.get(k) {
            let (q50, q99) = added_ms(&a, &b);
            println!(
                "{:<8} added while learning vs before: p50 {q50:+.3} vs {p50:+.3} ms, p99 {q99:+.3} vs {p99:+.3} ms",
                ""
            );
        }
        if errors != [0, 0] {
            println!(
                "{:<8} errors: direct {}, proxy {}",
                "", errors[0], errors[1]
            );
        }
        println!(
            "{:<8} learning jobs done during this rate: {} (of {n}; {done_after} done so far)",
            "",
            done_after - done_before
        );
    }
    println!(
        "# learning jobs when the measurement ended: {} done, {} running or queued, {} failed (of {n})",
        jobs_in(home, "done"),
        jobs_in(home, "running") + jobs_in(home, "queued"),
        jobs_in(home, "failed")
    );
}

/// Learning jobs in `state` (`metaclaw learn status`).
fn jobs_in(home: &std::path::Path, state: &str) -> usize {
    let out = Command::new(BIN)
        .args(["learn", "status", "--json", "--limit", "100000"])
        .env("METACLAW_HOME", home)
        .output()
        .unwrap();
    let jobs: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    jobs.as_array()
        .map(|j| j.iter().filter(|j| j["state"] == state).count())
        .unwrap_or(0)
}

fn added(direct: &[Duration], proxy: &[Duration]) -> String {
    format!("{:<8} {:>6} {}", "added", "", added_cells(direct, proxy))
}

fn main() {
    let opts = options();
    let home = tempfile::tempdir().unwrap();
    let (dummy, dummy_url, _) = spawn(
        {
            let mut c = Command::new(BIN);
            c.args(["dev", "upstream", "--port", "0"])
                .stderr(std::process::Stdio::null());
            c
        },
        "dummy upstream listening on ",
    );
    std::fs::write(
        home.path().join("config.yaml"),
        format!(
            "llm:\n  api_base: {dummy_url}\nlog:\n  level: warn\nsessions:\n  idle_timeout: 1h\nrl:\n  prm_model: judge\n  evolver_model: evolver-slow-250\n"
        ),
    )
    .unwrap();
    let (proxy, proxy_url, to_listening) = spawn(
        {
            let mut c = Command::new(&opts.proxy_bin);
            c.args(["start", "--foreground", "--port", "0"])
                .env("METACLAW_HOME", home.path())
                .stderr(std::process::Stdio::null());
            for kv in &opts.proxy_env {
                if let Some((k, v)) = kv.split_once('=') {
                    c.env(k, v);
                }
            }
            c
        },
        "metaclaw listening on ",
    );
    let proxy_pid = proxy.0.id();
    let dummy_pid = dummy.0.id();
    let _dummy = dummy;

    let rt = harness::runtime();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let direct = format!("{dummy_url}/chat/completions");
    // A/A: both sides direct, to show this machine's noise floor.
    let through = if opts.aa {
        direct.clone()
    } else {
        format!("{proxy_url}/v1/chat/completions")
    };
    std::thread::sleep(Duration::from_millis(300));
    let rss_idle = rss_kib(proxy_pid);

    println!("# metaclaw proxy overhead (release build, loopback, dummy upstream)");
    if opts.proxy_bin != BIN {
        println!("# side B served by {}", opts.proxy_bin);
    }
    if opts.aa {
        println!("# A/A RUN: both sides go direct; every 'added' figure below is noise");
    }
    println!(
        "# {} CPUs; A = direct to the dummy, B = through metaclaw; same run, interleaved 1 s slices",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "# open-loop: latency from each request's scheduled send time; {} s per side per rate",
        opts.secs
    );
    println!(
        "# start to listening: {:.0} ms; proxy RSS idle: {:.1} MiB",
        ms(to_listening),
        rss_idle as f64 / 1024.0
    );

    let small = json!({"model": "echo", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say PONG"}]});
    let fixture: Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/openclaw/chat_completions_stream_request.json"
    ))
    .unwrap();
    let mut openclaw = fixture["body"].clone();
    openclaw["model"] = json!("echo");
    openclaw["stream"] = json!(false);
    // The other two APIs, as OpenClaw sends them: through metaclaw's
    // `/v1/messages` and `/v1/responses` (translated to chat there and
    // back), against the same request in chat form straight to the dummy.
    let translated = |file: &str, translate: fn(&Value) -> metaclaw_wire::Result<Value>| {
        let f: Value = serde_json::from_str(
            &std::fs::read_to_string(format!(
                "{}/../tests/fixtures/openclaw/{file}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap(),
        )
        .unwrap();
        let mut native = f["body"].clone();
        native["model"] = json!("echo");
        native["stream"] = json!(false);
        let chat = translate(&native).unwrap();
        (chat, native)
    };
    let chat_route = "/v1/chat/completions";
    let mut payloads: Vec<(&str, Value, &str, Value)> = vec![(
        "small chat request (non-streaming)",
        small.clone(),
        chat_route,
        small,
    )];
    if !opts.quick {
        payloads.push((
            "OpenClaw's real first-turn request, 60 KB (non-streaming)",
            openclaw.clone(),
            chat_route,
            openclaw,
        ));
        let (chat, native) = translated(
            "anthropic_messages.json",
            metaclaw_wire::request::anthropic::to_chat,
        );
        payloads.push((
            "OpenClaw's Anthropic request via /v1/messages (B) vs. its chat form direct (A), non-streaming",
            chat,
            "/v1/messages",
            native,
        ));
        let (chat, native) = translated(
            "openai_responses.json",
            metaclaw_wire::request::responses::to_chat,
        );
        payloads.push((
            "OpenClaw's Responses request via /v1/responses (B) vs. its chat form direct (A), non-streaming",
            chat,
            "/v1/responses",
            native,
        ));
    }
    let small_body = Arc::new(serde_json::to_vec(&payloads[0].1).unwrap());
    let mut before = Vec::new();
    for (name, direct_payload, route, proxy_payload) in payloads {
        let body = Arc::new(serde_json::to_vec(&direct_payload).unwrap());
        let proxy_body = Arc::new(serde_json::to_vec(&proxy_payload).unwrap());
        let through = if opts.aa {
            direct.clone()
        } else {
            format!("{proxy_url}{route}")
        };
        // Warm both paths (connections, caches).
        rt.block_on(async {
            for _ in 0..200 {
                one(&client, &direct, &body, Instant::now()).await;
                one(&client, &through, &proxy_body, Instant::now()).await;
            }
        });
        println!(
            "\n## {name}, {} bytes{}",
            proxy_body.len(),
            if route == chat_route { "" } else { " (B)" }
        );
        println!(
            "{:<8} {:<8} {:>6} {:>9} {:>9} {:>9} {:>9}",
            "rate", "side", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        for &rate in &opts.rates {
            let cpu = (cpu_secs(proxy_pid), cpu_secs(dummy_pid));
            let ([a, b], errors) = run_rate(
                &rt,
                &client,
                [&direct, &through],
                [body.clone(), proxy_body.clone()],
                rate,
                opts.secs,
            );
            let n = (a.len() + b.len()) as f64;
            let proxy_us = (cpu_secs(proxy_pid) - cpu.0) * 1e6 / b.len().max(1) as f64;
            let dummy_us = (cpu_secs(dummy_pid) - cpu.1) * 1e6 / n.max(1.0);
            println!("{:<8} {}", format!("{rate}/s"), row("direct", &a));
            println!("{:<8} {}", "", row("proxy", &b));
            println!("{:<8} {}", "", added(&a, &b));
            if before.len() < opts.rates.len() && *body == *small_body {
                before.push(added_ms(&a, &b));
            }
            println!(
                "{:<8} cpu per request: proxy {proxy_us:.0} us, dummy {dummy_us:.0} us",
                ""
            );
            if errors != [0, 0] {
                println!(
                    "{:<8} errors: direct {}, proxy {}",
                    "", errors[0], errors[1]
                );
            }
        }
    }

    if let Some(n) = opts.learning {
        learning_phase(
            &rt,
            &client,
            &proxy_url,
            [&direct, &through],
            &small_body,
            n,
            &opts,
            &before,
            home.path(),
        );
    }

    rt.block_on(async {
        let n = if opts.quick { 10 } else { 100 };
        let a = streams(&client, &direct, n).await;
        let b = streams(&client, &through, n).await;
        println!(
            "\n## streaming: stream-10-10 (10 chunks, 10 ms apart), {n} sequential streams per side"
        );
        println!(
            "{:<8} {:<8} {:>6} {:>9} {:>9} {:>9} {:>9}",
            "metric", "side", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        println!("{:<8} {}", "TTFT", row("direct", &a.ttft));
        println!("{:<8} {}", "", row("proxy", &b.ttft));
        println!("{:<8} {}", "", added(&a.ttft, &b.ttft));
        println!("{:<8} {}", "gap", row("direct", &a.gaps));
        println!("{:<8} {}", "", row("proxy", &b.gaps));
        println!("{:<8} {}", "", added(&a.gaps, &b.gaps));

        // The proxy's own account: its overhead histogram.
        let metrics = client
            .get(format!("{proxy_url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        println!("\n## in-process overhead histogram (metaclaw_overhead_seconds), cumulative");
        for line in metrics.lines().filter(|l| {
            l.starts_with("metaclaw_overhead_seconds_bucket")
                || l.starts_with("metaclaw_overhead_seconds_count")
        }) {
            println!("{line}");
        }
    });
    println!(
        "\n# proxy RSS after load: {:.1} MiB",
        rss_kib(proxy_pid) as f64 / 1024.0
    );
}
