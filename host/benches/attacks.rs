//! The hostile scorer plugin against a running metaclaw: for each attack,
//! small chat requests from other sessions arrive open-loop at a fixed
//! rate, in alternating one-second slices without (baseline) and with the
//! attack running (a turn of the session named after the attack every
//! 100 ms by default: each finishes the one before, which the scorers,
//! the hostile one included, then score on the scoring thread). Reported
//! per attack:
//! the other requests' latency in both kinds of slice, errors, metaclaw's
//! RSS before, at its peak and after, what metaclaw recorded of the attack
//! (the plugin's failure from the log, or the reward it was allowed to
//! return), and how long a normal session's turn then waits to be scored
//! (a scorer that starved the others would show there).
//!
//!     cargo bench -p metaclaw --bench attacks                # every attack, 5 s per side
//!     cargo bench -p metaclaw --bench attacks -- --quick     # CI: a few attacks, asserts containment
//!
//! Options: --secs N (per side, per attack)  --rate R (requests/s)
//!          --attacks loop,bomb,...  --quick
//!          --attack-every MS (between attack turns; default 100)
//!
//! Needs the plugins built (scripts/build-plugins): the hostile one is
//! `target/plugins/testing/hostile.wasm`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/harness.rs"]
mod harness;
use harness::{BIN, mib, ms, percentile, rss_kib};

/// The harness's spawn, without the start-up time.
fn spawn(cmd: Command, prefix: &str) -> (harness::Proc, String) {
    let (proc, url, _) = harness::spawn(cmd, prefix);
    (proc, url)
}

/// Every attack the hostile plugin knows (its session id picks one).
const ALL: [&str; 12] = [
    "loop",
    "bomb",
    "recurse",
    "huge",
    "trap",
    "read-file",
    "list-dir",
    "write-file",
    "open-socket",
    "read-env",
    "wasi-clock",
    "host-clock",
];
const QUICK: [&str; 6] = [
    "loop",
    "bomb",
    "recurse",
    "huge",
    "read-file",
    "open-socket",
];
/// The plugin memory budget (`plugins.memory_mb`, default).
const MEMORY_MB: u64 = 64;
/// Sessions the other requests rotate through.
const BYSTANDER_SESSIONS: u32 = 8;

struct Options {
    quick: bool,
    secs: u32,
    rate: u32,
    /// Milliseconds between attack turns.
    attack_every_ms: u32,
    attacks: Vec<String>,
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
    let attacks = value("--attacks")
        .map(|a| a.split(',').map(str::to_string).collect())
        .unwrap_or_else(|| {
            let list: &[&str] = if quick { &QUICK } else { &ALL };
            list.iter().map(|a| a.to_string()).collect()
        });
    let attacks: Vec<String> = attacks;
    for a in &attacks {
        assert!(
            ALL.contains(&a.as_str()),
            "unknown attack {a}; known: {ALL:?}"
        );
    }
    Options {
        quick,
        secs: value("--secs")
            .and_then(|s| s.parse().ok())
            .unwrap_or(if quick { 1 } else { 5 }),
        rate: value("--rate").and_then(|s| s.parse().ok()).unwrap_or(200),
        attack_every_ms: value("--attack-every")
            .and_then(|s| s.parse().ok())
            .unwrap_or(100),
        attacks,
    }
}

/// One non-streamed chat turn in `session`; its latency from `scheduled`.
async fn turn(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    text: &str,
    scheduled: Instant,
) -> Option<Duration> {
    let body = json!({"model": "echo", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": text},
    ]});
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-session-id", session)
        .body(body.to_string())
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.bytes().await.ok()?;
    Some(scheduled.elapsed())
}

#[derive(Clone, Copy, PartialEq)]
enum Slice {
    Baseline = 0,
    Attack = 1,
}

struct Run {
    /// Other sessions' latencies (sorted), per kind of slice.
    lat: [Vec<Duration>; 2],
    errors: [u32; 2],
    attack_turns: u32,
    attack_errors: u32,
    peak_rss_kib: u64,
}

/// `rate` requests/s of other sessions for `secs` seconds of each kind of
/// slice, alternating each second (B A A B B A …); during attack slices a
/// turn of session `attack` every `--attack-every` ms. The schedule is kept by this
/// thread with precise sleeps; requests run on `rt`.
fn run_slices(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    opts: &Options,
    attack: &str,
    attack_text: &str,
    pid: u32,
) -> Run {
    let rate = opts.rate.max(1);
    let (tx, rx) = std::sync::mpsc::channel();
    let (atx, arx) = std::sync::mpsc::channel();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    // Bystander sends between two attack turns.
    let attack_every = (rate * opts.attack_every_ms / 1000).max(1);
    // Peak RSS, sampled every 10 ms while the slices run.
    let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let t0 = Instant::now() + Duration::from_millis(20);
    let (mut sent, mut attack_sent) = (0usize, 0usize);
    for slice in 0..(opts.secs * 2) {
        let kind = if (slice + slice / 2).is_multiple_of(2) {
            Slice::Baseline
        } else {
            Slice::Attack
        };
        let slice_start = t0 + Duration::from_secs(u64::from(slice));
        for i in 0..rate {
            let scheduled = slice_start + interval * i;
            let now = Instant::now();
            if scheduled > now {
                std::thread::sleep(scheduled - now);
            }
            if kind == Slice::Attack && i.is_multiple_of(attack_every) {
                let (client, url, atx) = (client.clone(), url.to_string(), atx.clone());
                let (session, text) = (attack.to_string(), attack_text.to_string());
                rt.spawn(async move {
                    let ok = turn(&client, &url, &session, &text, scheduled).await;
                    let _ = atx.send(ok.is_some());
                });
                attack_sent += 1;
            }
            let (client, url, tx) = (client.clone(), url.to_string(), tx.clone());
            let session = format!("by-{}", (sent as u32) % BYSTANDER_SESSIONS);
            rt.spawn(async move {
                let _ = tx.send((
                    kind,
                    turn(&client, &url, &session, "Say PONG", scheduled).await,
                ));
            });
            sent += 1;
        }
    }
    let mut lat = [Vec::new(), Vec::new()];
    let mut errors = [0, 0];
    for (kind, result) in rx.iter().take(sent) {
        match result {
            Some(d) => lat[kind as usize].push(d),
            None => errors[kind as usize] += 1,
        }
    }
    let attack_errors = arx.iter().take(attack_sent).filter(|ok| !ok).count() as u32;
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    lat[0].sort();
    lat[1].sort();
    Run {
        lat,
        errors,
        attack_turns: attack_sent as u32,
        attack_errors,
        peak_rss_kib: peak.load(Ordering::Relaxed),
    }
}

fn cli(home: &Path, args: &[&str]) -> Option<Value> {
    let out = Command::new(BIN)
        .args(args)
        .env("METACLAW_HOME", home)
        .env("METACLAW_NO_WIRE", "1")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// The hostile plugin's `(calls, failures, status)` from `plugins list`.
fn hostile_stats(home: &Path) -> (u64, u64, String) {
    let list = cli(home, &["plugins", "list", "--json"]).unwrap_or(Value::Null);
    list["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "hostile"))
        .map(|p| {
            (
                p["calls"].as_u64().unwrap_or(0),
                p["failures"].as_u64().unwrap_or(0),
                p["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .unwrap_or((0, 0, "not loaded".into()))
}

/// The hostile plugin's rewards on the turns of `session`, oldest first.
fn hostile_rewards(home: &Path, session: &str) -> Vec<String> {
    let s = cli(home, &["sessions", "show", session, "--json"]).unwrap_or(Value::Null);
    s["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["rewards"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["source"].as_str().is_some_and(|s| s.contains("hostile")))
        .map(|r| r["rationale"].as_str().unwrap_or("").to_string())
        .collect()
}

/// A fresh two-turn session whose first turn the hostile scorer judges
/// harmlessly (`fine`): how long after its second turn is answered the
/// reward is in the store. The scoring thread is first-in first-out, so
/// this also waits out every attack queued before it.
fn probe(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    home: &Path,
    name: &str,
) -> Option<Duration> {
    let session = format!("probe-{name}");
    rt.block_on(async {
        turn(client, url, &session, "hello", Instant::now()).await;
        turn(client, url, &session, "thanks", Instant::now()).await;
    });
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if hostile_rewards(home, &session).iter().any(|r| r == "fine") {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Each `plugin call failed` of the hostile plugin in `log`, counted. A
/// trap's message spans lines (its wasm backtrace): it is shortened to its
/// first line and the trap's reason at the end.
fn failures_in(log: &str) -> BTreeMap<String, u32> {
    // A log entry starts with its timestamp (`2025-…`).
    let starts_entry =
        |l: &str| l.as_bytes().first().is_some_and(u8::is_ascii_digit) && l.get(4..5) == Some("-");
    let mut entries: Vec<Vec<&str>> = Vec::new();
    for line in log.lines() {
        if starts_entry(line) || entries.is_empty() {
            entries.push(vec![line]);
        } else if let Some(last) = entries.last_mut() {
            last.push(line);
        }
    }
    let mut out = BTreeMap::new();
    for entry in entries {
        let Some((_, first)) = entry[0].split_once("plugin call failed: ") else {
            continue;
        };
        let last = entry[entry.len() - 1];
        if !last.contains("plugin=hostile") {
            continue;
        }
        let strip = |t: &str| t.split(" plugin=").next().unwrap_or(t).trim().to_string();
        let msg = if entry.len() == 1 {
            strip(first)
        } else {
            let reason = strip(last);
            let reason = reason
                .split_once(">: ")
                .map_or(reason.clone(), |(_, r)| r.to_string());
            format!("{} … {reason}", first.trim())
        };
        *out.entry(msg).or_insert(0) += 1;
    }
    out
}

fn short(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(n).collect::<String>())
    }
}

/// What the attack is expected to end as; `Ok` names the limit that
/// stopped it.
fn judge(
    attack: &str,
    failures: &BTreeMap<String, u32>,
    rewards: &[String],
) -> Result<&'static str, String> {
    let failed = |needle: &str| failures.keys().any(|m| m.to_lowercase().contains(needle));
    let all_rewards =
        |ok: &dyn Fn(&str) -> bool| !rewards.is_empty() && rewards.iter().all(|r| ok(r));
    let got = || {
        format!(
            "failures {failures:?}, rewards {:?}",
            rewards.iter().map(|r| short(r, 80)).collect::<Vec<_>>()
        )
    };
    let verdict = match attack {
        "loop" => (failed("deadline") && rewards.is_empty())
            .then_some("epoch deadline (plugins.timeouts.scorer)"),
        "bomb" => (failed("memory cap") && rewards.is_empty())
            .then_some("memory cap (plugins.memory_mb)")
            .or((failed("deadline") && rewards.is_empty())
                .then_some("deadline before the memory cap")),
        "recurse" => (failed("trapped") && failed("stack") && rewards.is_empty())
            .then_some("wasm stack limit (trap)"),
        "trap" => (failed("trapped") && rewards.is_empty()).then_some("trap ends the call only"),
        "huge" => {
            all_rewards(&|r| r.chars().count() <= 1001).then_some("reward clipped to 1000 chars")
        }
        "read-file" | "list-dir" | "write-file" | "open-socket" => {
            all_rewards(&|r| r.starts_with("Err(")).then_some("denied: no preopens / no network")
        }
        "read-env" => all_rewards(&|r| r == "vars=0 HOME=None").then_some("empty environment"),
        "wasi-clock" => all_rewards(&|r| r == "0").then_some("WASI clock frozen at the epoch"),
        "host-clock" => (failed("not granted") && rewards.is_empty())
            .then_some("capability `clock` not granted"),
        _ => None,
    };
    verdict.ok_or_else(got)
}

/// The outcome in a few words for the table.
fn outcome_cell(attack: &str, failures: &BTreeMap<String, u32>, rewards: &[String]) -> String {
    if let Some((msg, n)) = failures.iter().max_by_key(|(_, n)| **n) {
        let shown = msg
            .rsplit_once(" … ")
            .map_or(msg.clone(), |(_, reason)| format!("trap: {reason}"));
        return format!("{n}x fail: {}", short(&shown, 48));
    }
    match rewards.last() {
        Some(r) if attack == "huge" => {
            format!("{}x reward: {} chars", rewards.len(), r.chars().count())
        }
        Some(r) => format!("{}x reward: {}", rewards.len(), short(r, 48)),
        None => "nothing recorded".into(),
    }
}

fn main() {
    let opts = options();
    let hostile = PathBuf::from(BIN)
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("plugins/testing/hostile.wasm");
    assert!(
        hostile.is_file(),
        "{} is missing: run scripts/build-plugins first",
        hostile.display()
    );
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::create_dir_all(h.join("plugins")).unwrap();
    std::fs::copy(&hostile, h.join("plugins/hostile.wasm")).unwrap();

    let (_dummy, dummy_url) = spawn(
        {
            let mut c = Command::new(BIN);
            c.args(["dev", "upstream", "--port", "0"])
                .stderr(Stdio::null());
            c
        },
        "dummy upstream listening on ",
    );
    // The attacker stays enabled through every attack (by default three
    // failures in a row disable a plugin, which would end the test early).
    std::fs::write(
        h.join("config.yaml"),
        format!(
            "llm:\n  api_base: {dummy_url}\nlog:\n  level: warn\nsessions:\n  idle_timeout: 1h\nplugins:\n  max_failures: 1000000\n"
        ),
    )
    .unwrap();
    let log_path = h.join("metaclaw.log");
    let (proxy, proxy_url) = spawn(
        {
            let mut c = Command::new(BIN);
            c.args(["start", "--foreground", "--port", "0"])
                .env("METACLAW_HOME", h)
                .env("METACLAW_NO_WIRE", "1")
                .stderr(std::fs::File::create(&log_path).unwrap());
            c
        },
        "metaclaw listening on ",
    );
    let pid = proxy.0.id();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Plugins compile in the background: wait for the hostile one.
    let deadline = Instant::now() + Duration::from_secs(120);
    while hostile_stats(h).2 != "ok" {
        assert!(
            Instant::now() < deadline,
            "the hostile plugin never loaded:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let url = format!("{proxy_url}/v1/chat/completions");
    // A listener the socket attack may try (it is never accepted from).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let socket_addr = listener.local_addr().unwrap().to_string();

    rt.block_on(async {
        for i in 0..200 {
            turn(
                &client,
                &url,
                &format!("by-{}", i % BYSTANDER_SESSIONS),
                "Say PONG",
                Instant::now(),
            )
            .await;
        }
    });
    let idle_probe = probe(&rt, &client, &url, h, "before");

    println!(
        "# hostile scorer plugin vs. a running metaclaw (release build, loopback, dummy upstream)"
    );
    println!(
        "# {} CPUs; other sessions' small chat requests open-loop at {}/s; {} s baseline + {} s attack per attack, interleaved 1 s slices",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        opts.rate,
        opts.secs,
        opts.secs
    );
    println!(
        "# attack: a turn of the attack's session every {} ms (each finishes the previous one, which is then scored)",
        opts.attack_every_ms
    );
    println!(
        "# limits: plugins.timeouts.scorer 50ms, plugins.memory_mb {MEMORY_MB}, no grants; max_failures raised so the attacker stays enabled"
    );
    println!(
        "# a normal turn's wait to be scored before any attack: {}",
        idle_probe.map_or("timeout".into(), |d| format!("{:.0} ms", ms(d)))
    );
    println!(
        "\n{:<12} {:>5} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>5} {:>21} {:>8}  outcome",
        "attack",
        "n",
        "base50",
        "base99",
        "atk50",
        "atk99",
        "p99x",
        "errors",
        "turns",
        "fails",
        "RSS MiB before/peak/after",
        "scored"
    );

    let mut problems = Vec::new();
    let mut details = Vec::new();
    for attack in &opts.attacks {
        let text = match attack.as_str() {
            "read-file" => "/etc/passwd".to_string(),
            "open-socket" => socket_addr.clone(),
            "huge" => (8u32 << 20).to_string(),
            _ => "go".to_string(),
        };
        let log_from = log().len();
        let (calls0, fails0, _) = hostile_stats(h);
        let rss0 = rss_kib(pid);
        let run = run_slices(&rt, &client, &url, &opts, attack, &text, pid);
        // Drains the scoring queue: every attack turn is scored by now.
        let lag = probe(&rt, &client, &url, h, attack);
        let rss1 = rss_kib(pid);
        let (calls1, fails1, status) = hostile_stats(h);
        let all_log = log();
        let failures = failures_in(&all_log[log_from.min(all_log.len())..]);
        let rewards = hostile_rewards(h, attack);
        let [base, atk] = &run.lat;
        let ratio = ms(percentile(atk, 99.0)) / ms(percentile(base, 99.0)).max(1e-9);
        println!(
            "{:<12} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>5.2}x {:>6} {:>6} {:>5} {:>7.0}/{:>6.0}/{:>6.0} {:>8}  {}",
            attack,
            base.len() + atk.len(),
            ms(percentile(base, 50.0)),
            ms(percentile(base, 99.0)),
            ms(percentile(atk, 50.0)),
            ms(percentile(atk, 99.0)),
            ratio,
            run.errors[0] + run.errors[1] + run.attack_errors,
            run.attack_turns,
            fails1.saturating_sub(fails0),
            mib(rss0),
            mib(run.peak_rss_kib),
            mib(rss1),
            lag.map_or("timeout".into(), |d| format!("{:.0}ms", ms(d))),
            outcome_cell(attack, &failures, &rewards)
        );
        let verdict = judge(attack, &failures, &rewards);
        details.push(format!(
            "{attack:<12} {}; plugin calls +{}, failures +{}, status {status}",
            match &verdict {
                Ok(limit) => format!("contained by: {limit}"),
                Err(got) => format!("UNEXPECTED: {got}"),
            },
            calls1.saturating_sub(calls0),
            fails1.saturating_sub(fails0),
        ));
        for (msg, n) in &failures {
            details.push(format!(
                "{:<12}   {n}x {}",
                "",
                short(msg.lines().next().unwrap_or(msg), 160)
            ));
        }
        if let Err(got) = verdict {
            problems.push(format!("{attack}: unexpected outcome: {got}"));
        }
        if run.errors != [0, 0] || run.attack_errors != 0 {
            problems.push(format!(
                "{attack}: failed requests: baseline {}, attack slices {}, attack turns {}",
                run.errors[0], run.errors[1], run.attack_errors
            ));
        }
        if lag.is_none() {
            problems.push(format!(
                "{attack}: a normal turn was not scored within 60 s"
            ));
        }
        if status != "ok" {
            problems.push(format!("{attack}: the plugin is {status}"));
        }
        // The host never holds more than the plugin's budget on top of
        // what it had (one scoring thread: one instance runs at a time).
        let growth = run
            .peak_rss_kib
            .saturating_sub(rss0)
            .max(rss1.saturating_sub(rss0));
        if growth > (MEMORY_MB + 32) << 10 {
            problems.push(format!(
                "{attack}: metaclaw grew by {:.0} MiB (budget {MEMORY_MB} MiB)",
                mib(growth)
            ));
        }
    }

    println!(
        "\n# columns: n = other requests; base/atk = their p50/p99 (ms, from the scheduled send) in baseline/attack slices;"
    );
    println!(
        "#   p99x = attack p99 / baseline p99; errors = failed requests (other sessions' and the attack's own turns);"
    );
    println!(
        "#   turns = attack turns sent; fails = plugin failures counted by metaclaw; scored = wait for a normal turn's"
    );
    println!("#   score right after the attack (it queues behind every attack call)");
    println!("\n## what metaclaw recorded");
    for d in &details {
        println!("{d}");
    }

    let healthy = rt.block_on(async {
        client
            .get(format!("{proxy_url}/healthz"))
            .send()
            .await
            .map(|r| r.status().is_success())
            .unwrap_or(false)
    });
    let mut proxy = proxy;
    let alive = matches!(proxy.0.try_wait(), Ok(None));
    println!(
        "\n# metaclaw after the attacks: {}, RSS {:.1} MiB",
        if healthy && alive {
            "healthy"
        } else {
            "NOT HEALTHY"
        },
        mib(rss_kib(pid))
    );
    if !(healthy && alive) {
        problems.push("metaclaw is not healthy after the attacks".into());
    }
    drop(listener);
    if !problems.is_empty() {
        println!("\n# CONTAINMENT PROBLEMS:");
        for p in &problems {
            println!("#   {p}");
        }
        if opts.quick {
            std::process::exit(1);
        }
    }
}
