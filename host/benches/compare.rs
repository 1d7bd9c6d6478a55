//! Side by side, in one run: the same requests sent straight to the dummy
//! upstream (the baseline), through metaclaw with skills off, with 10,000
//! skills and BM25, with 10,000 skills and embeddings, and through the
//! original MetaClaw (Python, `skills_only`). Every side gets the same
//! open-loop load, interleaved in one-second slices so that drift on a noisy
//! machine lands on all of them; figures are reported as added latency and
//! as ratios against the direct side of the same run. Also: idle and loaded
//! memory, and time from start to healthy, of both proxies.
//!
//!     scripts/build-plugins --rust-only
//!     METACLAW_TEST_MODEL_DIR=$(scripts/fetch-model) \
//!       cargo bench -p metaclaw --features local-embeddings --bench compare
//!     ... -- --quick        # CI: a short run that proves every side still works
//!
//! Options: --rates 100,1000,5000  --secs N (per side per rate)  --skills N
//!          --no-original  --no-embeddings  --starts N (start-up trials)
//!          --baseline BIN (another metaclaw build, e.g. the commit before a
//!          change: its skills-off and BM25 sides join the same run)
//!
//! The original is installed into a throwaway venv by
//! `scripts/original-metaclaw install` (it imports torch at start-up even in
//! skills_only mode; the script puts an empty torch stub on its path).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "support/harness.rs"]
mod harness;
#[path = "support/skillgen.rs"]
mod skillgen;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use harness::{
    BIN, Proc, cpu_secs, cpus, free_port, mib, ms, peak_rss_kib, percentile, rss_kib, wait_healthy,
};
use serde_json::json;

/// How long one request may take before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

struct Options {
    rates: Vec<u32>,
    secs: u32,
    skills: usize,
    /// The embedding side's library: the real model embeds every skill once
    /// (about 50 ms each on one core of this machine), so it gets fewer.
    embedding_skills: usize,
    min_samples: u32,
    original: bool,
    embeddings: bool,
    starts: u32,
    /// Another metaclaw binary (an earlier build) whose skills-off and BM25
    /// sides run in the same run, for a before/after on the same machine.
    baseline: Option<PathBuf>,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let flag = |f: &str| args.has(f);
    let value = |f: &str| args.value(f);
    let num = |f: &str, quick_default: u64, default: u64| {
        value(f)
            .and_then(|v| v.parse().ok())
            .unwrap_or(if quick { quick_default } else { default })
    };
    Options {
        rates: value("--rates")
            .map(|r| r.split(',').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_else(|| {
                if quick {
                    vec![10, 100]
                } else {
                    vec![10, 100, 1000, 5000]
                }
            }),
        secs: num("--secs", 1, 5) as u32,
        skills: num("--skills", 500, 10_000) as usize,
        embedding_skills: num("--embedding-skills", 100, 1_000) as usize,
        min_samples: if quick { 20 } else { 200 },
        original: !flag("--no-original"),
        embeddings: !flag("--no-embeddings"),
        starts: num("--starts", 1, 5) as u32,
        baseline: value("--baseline").map(PathBuf::from),
    }
}

/// One way to reach the dummy: straight, or through a proxy.
struct Side {
    name: String,
    /// The chat-completions endpoint.
    url: String,
    /// The proxy's process (none for the direct side).
    pid: Option<u32>,
    /// Set once the side could not keep up; higher rates skip it.
    saturated: Option<String>,
    /// A metaclaw side's home and port (for its admin status).
    admin: Option<(PathBuf, u16)>,
    _proc: Option<Proc>,
}

#[derive(Default)]
struct Sample {
    total: Duration,
    ttft: Option<Duration>,
    gaps: Vec<Duration>,
    skills: bool,
}

#[derive(Default)]
struct Outcome {
    samples: Vec<Sample>,
    errors: u32,
    /// Time from each slice's start to its last answer, summed.
    busy: Duration,
    slices: u32,
    cpu: f64,
}

impl Outcome {
    fn sorted(&self, f: impl Fn(&Sample) -> Vec<Duration>) -> Vec<Duration> {
        let mut v: Vec<Duration> = self.samples.iter().flat_map(f).collect();
        v.sort();
        v
    }
    fn totals(&self) -> Vec<Duration> {
        self.sorted(|s| vec![s.total])
    }
    fn ttfts(&self) -> Vec<Duration> {
        self.sorted(|s| s.ttft.into_iter().collect())
    }
    fn gaps(&self) -> Vec<Duration> {
        self.sorted(|s| s.gaps.clone())
    }
    /// Answers per second of the time each slice took to be answered, less
    /// one request's own length (a stream lasts ~100 ms by design).
    fn served_per_sec(&self) -> f64 {
        let own = percentile(&self.totals(), 50.0) * self.slices;
        self.samples.len() as f64 / self.busy.saturating_sub(own).as_secs_f64().max(1e-9)
    }
}

/// A rate, and per side its added p50 and p99 (ms) at that rate.
type RateAdded = (u32, Vec<Option<(f64, f64)>>);

/// A request body per query: the same bodies go to every side.
fn bodies(queries: &[String], stream: bool) -> Vec<Arc<Vec<u8>>> {
    queries
        .iter()
        .map(|q| {
            let body = if stream {
                json!({"model": "stream-10-10", "stream": true, "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": q}]})
            } else {
                json!({"model": "echo", "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": q}]})
            };
            Arc::new(serde_json::to_vec(&body).unwrap())
        })
        .collect()
}

/// One request; times count from `scheduled`. Streams report the time to
/// the first content chunk and the gaps between chunks.
async fn one(
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    scheduled: Instant,
) -> Option<Sample> {
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
    let skills = response.headers().contains_key("x-metaclaw-skills");
    let streaming = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut sample = Sample {
        skills,
        ..Sample::default()
    };
    if !streaming {
        response.bytes().await.ok()?;
        sample.total = scheduled.elapsed();
        return Some(sample);
    }
    let mut chunks = response.bytes_stream();
    let mut last: Option<Instant> = None;
    let mut buf = Vec::new();
    let mut done = false;
    while let Some(chunk) = chunks.next().await {
        let now = Instant::now();
        buf.extend_from_slice(&chunk.ok()?);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            if has_content(&text) {
                match last {
                    None => sample.ttft = Some(now - scheduled),
                    Some(prev) => sample.gaps.push(now - prev),
                }
                last = Some(now);
            }
            done |= text.contains("[DONE]");
        }
    }
    // A stream that ends without its terminator, or without content, failed.
    if !done || sample.ttft.is_none() {
        return None;
    }
    sample.total = scheduled.elapsed();
    Some(sample)
}

/// Whether an SSE event carries answer text (any JSON spacing: the
/// original sends Python's `json.dumps`).
fn has_content(event: &str) -> bool {
    event.lines().any(|line| {
        line.strip_prefix("data:")
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
            .is_some_and(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
    })
}

/// One second of `rate` requests to `url`, open loop: an OS thread keeps the
/// schedule with precise sleeps and latency counts from each scheduled send
/// time. Waits for every answer (or its timeout) before returning, so a
/// side that falls behind cannot spill its queue into the next side's slice.
fn slice(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    bodies: &[Arc<Vec<u8>>],
    rate: u32,
    next_body: &mut usize,
    into: &mut Outcome,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = Instant::now() + Duration::from_millis(5);
    for i in 0..rate {
        let scheduled = start + interval * i;
        let now = Instant::now();
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        let body = bodies[*next_body % bodies.len()].clone();
        *next_body += 1;
        let (client, url, tx) = (client.clone(), url.to_string(), tx.clone());
        rt.spawn(async move {
            let result = one(&client, &url, &body, scheduled).await;
            let _ = tx.send((result, Instant::now()));
        });
    }
    let mut last = start;
    for (result, at) in rx.iter().take(rate as usize) {
        last = last.max(at);
        match result {
            Some(s) => into.samples.push(s),
            None => into.errors += 1,
        }
    }
    into.busy += last
        .saturating_duration_since(start)
        .max(Duration::from_secs(1));
    into.slices += 1;
}

/// `secs` rounds of one slice per side at `rate`; the order of the sides
/// rotates every round.
fn run_rate(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    sides: &[Side],
    bodies: &[Arc<Vec<u8>>],
    rate: u32,
    secs: u32,
) -> Vec<Option<Outcome>> {
    let mut out: Vec<Option<Outcome>> = sides
        .iter()
        .map(|s| s.saturated.is_none().then(Outcome::default))
        .collect();
    let cpu_before: Vec<f64> = sides
        .iter()
        .map(|s| s.pid.map(cpu_secs).unwrap_or(0.0))
        .collect();
    for round in 0..secs as usize {
        for k in 0..sides.len() {
            let i = (k + round) % sides.len();
            if let Some(outcome) = out[i].as_mut() {
                // Every side gets the same queries in the same order.
                let mut next_body = round * rate as usize;
                slice(
                    rt,
                    client,
                    &sides[i].url,
                    bodies,
                    rate,
                    &mut next_body,
                    outcome,
                );
            }
        }
    }
    for (i, side) in sides.iter().enumerate() {
        if let (Some(o), Some(pid)) = (out[i].as_mut(), side.pid) {
            o.cpu = cpu_secs(pid) - cpu_before[i];
        }
    }
    out
}

/// Rounds at `rate`: `secs`, or more at low rates so each side gets at
/// least `min_samples` requests (200 in a full run: a p99 needs them).
fn rounds(rate: u32, secs: u32, min_samples: u32) -> u32 {
    secs.max(min_samples.div_ceil(rate.max(1)))
}

/// Why a side could not keep up at this rate, if it could not.
fn fell_behind(o: &Outcome, rate: u32) -> Option<String> {
    let sent = o.samples.len() as u32 + o.errors;
    let totals = o.totals();
    if o.errors * 100 > sent {
        Some(format!(
            "{} of {sent} requests failed at {rate}/s",
            o.errors
        ))
    } else if o.served_per_sec() < 0.9 * f64::from(rate) {
        Some(format!("served {:.0}/s of {rate}/s", o.served_per_sec()))
    } else if percentile(&totals, 50.0) > Duration::from_secs(1) {
        Some(format!(
            "p50 {:.0} ms at {rate}/s",
            ms(percentile(&totals, 50.0))
        ))
    } else {
        None
    }
}

fn added(base: &[Duration], side: &[Duration], p: f64) -> f64 {
    ms(percentile(side, p)) - ms(percentile(base, p))
}

fn ratio(base: &[Duration], side: &[Duration], p: f64) -> f64 {
    ms(percentile(side, p)) / ms(percentile(base, p)).max(1e-9)
}

fn not_run(side: &Side, rate: u32) {
    println!(
        "{:<34} (not run at {rate}/s: {})",
        side.name,
        side.saturated.as_deref().unwrap_or("")
    );
}

fn print_plain(sides: &[Side], outcomes: &[Option<Outcome>], rate: u32) {
    println!(
        "{:<34} {:>6} {:>4} {:>9} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6} {:>7} {:>8}",
        "side",
        "n",
        "err",
        "served/s",
        "p50 ms",
        "p99 ms",
        "added50",
        "added99",
        "x p50",
        "x p99",
        "skills",
        "cpu us"
    );
    let Some(base) = outcomes[0].as_ref() else {
        return;
    };
    let base_t = base.totals();
    for (side, o) in sides.iter().zip(outcomes) {
        let Some(o) = o else {
            not_run(side, rate);
            continue;
        };
        let t = o.totals();
        let extra = if side.pid.is_none() {
            String::new()
        } else {
            // metaclaw names the skills it injected in a header; the
            // original does not say.
            let skills = if side.name.starts_with("original") {
                "n/a".to_string()
            } else {
                format!(
                    "{:.0}%",
                    100.0 * o.samples.iter().filter(|s| s.skills).count() as f64
                        / o.samples.len().max(1) as f64
                )
            };
            format!(
                "{:>+9.3} {:>+9.3} {:>5.2}x {:>5.2}x {:>7} {:>8.0}",
                added(&base_t, &t, 50.0),
                added(&base_t, &t, 99.0),
                ratio(&base_t, &t, 50.0),
                ratio(&base_t, &t, 99.0),
                skills,
                o.cpu * 1e6 / o.samples.len().max(1) as f64
            )
        };
        println!(
            "{:<34} {:>6} {:>4} {:>9.0} {:>8.3} {:>8.3} {extra}",
            side.name,
            o.samples.len(),
            o.errors,
            o.served_per_sec(),
            ms(percentile(&t, 50.0)),
            ms(percentile(&t, 99.0)),
        );
    }
}

fn print_stream(sides: &[Side], outcomes: &[Option<Outcome>], rate: u32) {
    println!(
        "{:<34} {:>6} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "side",
        "n",
        "err",
        "served/s",
        "TTFT p50",
        "TTFT p99",
        "+TTFT p50",
        "+TTFT p99",
        "gap p50",
        "+gap p50",
        "+gap p99"
    );
    let Some(base) = outcomes[0].as_ref() else {
        return;
    };
    let (bt, bg) = (base.ttfts(), base.gaps());
    for (side, o) in sides.iter().zip(outcomes) {
        let Some(o) = o else {
            not_run(side, rate);
            continue;
        };
        let (t, g) = (o.ttfts(), o.gaps());
        // The direct side is the baseline: its gap, nothing added.
        let extra = if side.pid.is_none() {
            format!("{:>9} {:>9} {:>9.3}", "", "", ms(percentile(&g, 50.0)))
        } else {
            format!(
                "{:>+9.3} {:>+9.3} {:>9.3} {:>+9.3} {:>+9.3}",
                added(&bt, &t, 50.0),
                added(&bt, &t, 99.0),
                ms(percentile(&g, 50.0)),
                added(&bg, &g, 50.0),
                added(&bg, &g, 99.0)
            )
        };
        println!(
            "{:<34} {:>6} {:>4} {:>9.0} {:>9.3} {:>9.3} {extra}",
            side.name,
            o.samples.len(),
            o.errors,
            o.served_per_sec(),
            ms(percentile(&t, 50.0)),
            ms(percentile(&t, 99.0)),
        );
    }
}

/// Every process in the tree under `pid` (the original may fork).
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return all;
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        all.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    all
}

fn tree_rss(pid: u32, f: fn(u32) -> u64) -> f64 {
    mib(tree(pid).into_iter().map(f).sum())
}

fn metaclaw_home(dir: &Path, dummy: &str, skills: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        format!(
            "llm:\n  api_base: {dummy}\nlog:\n  level: warn\nsessions:\n  idle_timeout: 1h\n{skills}"
        ),
    )
    .unwrap();
    dir.to_path_buf()
}

fn start_metaclaw(home: &Path, port: u16) -> Proc {
    start_metaclaw_bin(Path::new(BIN), home, port)
}

fn start_metaclaw_bin(bin: &Path, home: &Path, port: u16) -> Proc {
    let child = Command::new(bin)
        .args(["start", "--foreground", "--port", &port.to_string()])
        .env("METACLAW_HOME", home)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc(child)
}

fn original_script() -> PathBuf {
    skillgen::repo().join("scripts/original-metaclaw")
}

/// Installs the original into its throwaway venv; false (with the reason
/// printed) when that is not possible here.
fn install_original() -> bool {
    let out = Command::new(original_script())
        .arg("install")
        .stdout(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            println!(
                "# the original MetaClaw could not be installed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            false
        }
        Err(e) => {
            println!("# the original MetaClaw could not be installed: {e}");
            false
        }
    }
}

/// The original's frontmatter parser reads line by line, not YAML; the
/// script converts a library once, outside the timed start.
fn convert_for_original(from: &Path, to: &Path) {
    let status = Command::new(original_script())
        .arg("convert-skills")
        .arg(from)
        .arg(to)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "converting skills for the original failed"
    );
}

fn start_original(dummy: &str, skills: &Path, work: &Path, port: u16) -> Proc {
    std::fs::create_dir_all(work).unwrap();
    let child = Command::new(original_script())
        .arg("serve")
        .args(["--port", &port.to_string(), "--upstream", dummy])
        .arg("--skills-raw")
        .arg(skills)
        .arg("--workdir")
        .arg(work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc(child)
}

/// Sends the first query until the answer carries injected skills (the
/// library is loaded and indexed), or until `limit`.
/// On the embedding side, the answer must also come from the embedding
/// retriever (BM25 answers while the embeddings are computed).
fn wait_skills(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    side: &Side,
    body: &Arc<Vec<u8>>,
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let want = if side.name.ends_with("embeddings") {
        "embedding"
    } else {
        "bm25"
    };
    rt.block_on(async {
        while start.elapsed() < limit {
            if let Some(s) = one(client, &side.url, body, Instant::now()).await
                && s.skills
                && side.admin.as_ref().is_none_or(|(home, port)| {
                    admin_get(home, *port, "/admin/status").is_some_and(|st| {
                        st["skills"]["last_retriever"]
                            .as_str()
                            .is_some_and(|r| r.contains(want))
                    })
                })
            {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    })
}

/// `GET` with the admin token over a raw connection; the JSON body.
fn admin_get(home: &Path, port: u16, path: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let token = std::fs::read_to_string(home.join("admin.token")).ok()?;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\nconnection: close\r\n\r\n",
        token.trim()
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.split_once("\r\n\r\n")?.1).ok()
}

/// Waits until the daemon has loaded its plugins and skills (compiled
/// plugins are then in the home's cache for the next start).
fn wait_loaded(home: &Path, port: u16) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        if let Some(status) = admin_get(home, port, "/admin/status")
            && status["plugins"]["loaded"].as_u64().unwrap_or(0) > 0
            && status["skills"]["loaded"].as_u64().unwrap_or(0) > 0
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("metaclaw did not load its plugins and skills within 2 minutes");
}

/// Process-tree RSS, MiB, after start-up work settles and one turn.
fn settle_rss(proc: &Proc, port: u16) -> f64 {
    std::thread::sleep(Duration::from_secs(3));
    let body = json!({"model": "echo", "messages": [{"role": "user", "content": "How do I write a good commit message?"}]});
    let _ = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-H",
            "content-type: application/json",
            "-d",
        ])
        .arg(body.to_string())
        .arg(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .status();
    std::thread::sleep(Duration::from_secs(2));
    tree_rss(proc.pid(), rss_kib)
}

/// Median time from spawn to a 200 from the health route, over `n` starts.
fn start_times(n: u32, mut start: impl FnMut(u16) -> Proc, health: &str) -> Vec<Duration> {
    let mut times = Vec::new();
    for _ in 0..n {
        let port = free_port();
        let t0 = Instant::now();
        let proc = start(port);
        if let Some(t) = wait_healthy(port, health, t0, Duration::from_secs(120)) {
            times.push(t);
        }
        drop(proc);
    }
    times.sort();
    times
}

fn main() {
    let opts = options();
    let work = tempfile::tempdir().unwrap();
    let (dummy, dummy_url) = harness::dummy();
    let dummy_pid = dummy.pid();

    let queries = skillgen::queries();
    let bank = skillgen::builtin_bank();
    let library = work.path().join("library");
    skillgen::write_library(&library, &skillgen::generated(opts.skills, &bank));
    let library_text = library.display().to_string();
    let model_dir = std::env::var("METACLAW_TEST_MODEL_DIR").ok();
    let embeddings = opts.embeddings && cfg!(feature = "local-embeddings") && model_dir.is_some();
    let original = opts.original && install_original();

    println!("# metaclaw side by side (release build, loopback, dummy upstream)");
    println!(
        "# {} CPUs; load generator, dummy and proxies share them; {} s per side per rate, interleaved 1 s slices",
        cpus(),
        opts.secs
    );
    println!(
        "# open loop: latency from each request's scheduled send time; the user's message cycles through {} queries",
        queries.len()
    );
    println!(
        "# {} generated skills (SKILL.md folders) for the skill sides; added = side - direct at that percentile; x = side / direct",
        opts.skills
    );
    // A baseline built with other features differs by more than its code.
    // (The `local-embeddings` feature costs nothing measurable with BM25:
    // the ~35–50 MiB once put on it was the library's one-time upgrade,
    // paid by whichever side started first on a library written in the
    // older layout; see skillgen::write_library.)
    if let Some(baseline) = &opts.baseline {
        println!(
            "# baseline {}: built by whoever ran this (for a fair memory row, with the features of this side: {})",
            baseline.display(),
            if cfg!(feature = "local-embeddings") {
                "--release --features local-embeddings"
            } else {
                "--release"
            }
        );
    }

    // Start-up: the default configuration (the 44 built-in skills, the
    // first-party plugins), a fresh home and a restart.
    println!(
        "\n## start to healthy (spawn until GET /healthz answers 200), median of {} starts; default config, 44 built-in skills",
        opts.starts
    );
    let fresh_root = work.path().join("fresh");
    // The default configuration with the built-in bank (44 skills) as its
    // library, as `metaclaw skills install-builtin` would give it.
    let bank_config = format!(
        "skills:\n  dir: {}\n",
        skillgen::repo().join("skills").display()
    );
    let mut k = 0;
    let fresh = start_times(
        opts.starts,
        |port| {
            k += 1;
            let home = metaclaw_home(&fresh_root.join(k.to_string()), &dummy_url, &bank_config);
            start_metaclaw(&home, port)
        },
        "/healthz",
    );
    let restart_home = metaclaw_home(&work.path().join("restart"), &dummy_url, &bank_config);
    // One full start first: plugins compiled into the home's cache, as
    // after any first start.
    let first_idle = {
        let port = free_port();
        let proc = start_metaclaw(&restart_home, port);
        wait_healthy(port, "/healthz", Instant::now(), Duration::from_secs(60));
        wait_loaded(&restart_home, port);
        settle_rss(&proc, port)
    };
    let restart = start_times(
        opts.starts,
        |port| start_metaclaw(&restart_home, port),
        "/healthz",
    );
    let median = |v: &[Duration]| percentile(v, 50.0);
    println!(
        "metaclaw, default config, fresh home     {:>8.1} ms (of {} starts)",
        ms(median(&fresh)),
        fresh.len()
    );
    println!(
        "metaclaw, default config, restart        {:>8.1} ms (of {} starts)",
        ms(median(&restart)),
        restart.len()
    );
    let bank_dir = work.path().join("original-bank");
    let original_library = work.path().join("original-library");
    let mut original_start = None;
    if original {
        convert_for_original(&skillgen::repo().join("skills"), &bank_dir);
        convert_for_original(&library, &original_library);
        let mut k = 0;
        let times = start_times(
            opts.starts,
            |port| {
                k += 1;
                start_original(
                    &dummy_url,
                    &bank_dir,
                    &work.path().join(format!("orig-start-{k}")),
                    port,
                )
            },
            "/healthz",
        );
        println!(
            "original MetaClaw, skills_only, 44 skills {:>7.1} ms (of {} starts)",
            ms(median(&times)),
            times.len()
        );
        original_start = Some(median(&times));
    }

    // Idle memory of the default configuration: started, healthy, plugins
    // and skills loaded, one answered turn, then quiet.
    let mut idle_default = Vec::new();
    {
        let port = free_port();
        let proc = start_metaclaw(&restart_home, port);
        wait_healthy(port, "/healthz", Instant::now(), Duration::from_secs(60));
        wait_loaded(&restart_home, port);
        idle_default.push((
            "metaclaw, default config".to_string(),
            settle_rss(&proc, port),
        ));
        idle_default.push((
            "metaclaw, default config, first start (compiles its plugins)".to_string(),
            first_idle,
        ));
    }
    if original {
        let port = free_port();
        let proc = start_original(&dummy_url, &bank_dir, &work.path().join("orig-idle"), port);
        wait_healthy(port, "/healthz", Instant::now(), Duration::from_secs(120));
        idle_default.push((
            "original MetaClaw, 44 skills".to_string(),
            settle_rss(&proc, port),
        ));
    }
    let start_default = median(&restart);

    // The sides, all against the same dummy.
    let mut sides = vec![Side {
        name: "direct to the dummy".into(),
        url: format!("{dummy_url}/chat/completions"),
        pid: None,
        saturated: None,
        admin: None,
        _proc: None,
    }];
    let off = "skills:\n  enabled: false\n".to_string();
    let bm25 = format!("skills:\n  dir: {library_text}\n  retrieval_mode: bm25\n");
    let mut configs: Vec<(String, String, PathBuf)> = vec![
        (
            "metaclaw, skills off".into(),
            off.clone(),
            PathBuf::from(BIN),
        ),
        (
            format!("metaclaw, {} skills, BM25", opts.skills),
            bm25.clone(),
            PathBuf::from(BIN),
        ),
    ];
    if let Some(baseline) = &opts.baseline {
        configs.push(("baseline, skills off".into(), off, baseline.clone()));
        let name = format!("baseline, {} skills, BM25", opts.skills);
        configs.push((name, bm25, baseline.clone()));
    }
    if embeddings {
        // The first `embedding_skills` of the same generated library.
        let small = work.path().join("library-embedding");
        skillgen::write_library(
            &small,
            &skillgen::generated(opts.embedding_skills.min(opts.skills), &bank),
        );
        configs.push((
            format!("metaclaw, {} skills, embeddings", opts.embedding_skills.min(opts.skills)),
            format!(
                "skills:\n  dir: {}\n  retrieval_mode: embedding\n  embedding_backend: local\n  embedding_model_path: {}\n",
                small.display(),
                model_dir.clone().unwrap_or_default()
            ),
            PathBuf::from(BIN),
        ));
    }
    for (i, (name, skills, bin)) in configs.into_iter().enumerate() {
        let home = metaclaw_home(&work.path().join(format!("side-{i}")), &dummy_url, &skills);
        let port = free_port();
        let proc = start_metaclaw_bin(&bin, &home, port);
        wait_healthy(port, "/healthz", Instant::now(), Duration::from_secs(60))
            .expect("metaclaw did not become healthy");
        sides.push(Side {
            name,
            url: format!("http://127.0.0.1:{port}/v1/chat/completions"),
            pid: Some(proc.pid()),
            saturated: None,
            admin: Some((home, port)),
            _proc: Some(proc),
        });
    }
    if original {
        let port = free_port();
        let proc = start_original(
            &dummy_url,
            &original_library,
            &work.path().join("orig"),
            port,
        );
        wait_healthy(port, "/healthz", Instant::now(), Duration::from_secs(300))
            .expect("the original did not become healthy");
        sides.push(Side {
            name: format!("original MetaClaw, {} skills", opts.skills),
            url: format!("http://127.0.0.1:{port}/v1/chat/completions"),
            pid: Some(proc.pid()),
            saturated: None,
            admin: None,
            _proc: Some(proc),
        });
    }

    let rt = harness::runtime();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap();
    let plain = bodies(&queries, false);
    let streamed = bodies(&queries, true);

    // Ready: the skill sides answer with skills injected (library loaded,
    // indexed, embeddings computed).
    println!("\n## ready");
    for side in sides.iter().filter(|s| s.name.contains("skills,")) {
        match wait_skills(&rt, &client, side, &plain[0], Duration::from_secs(900)) {
            Some(t) => println!(
                "{:<34} first answer with skills after {:.1} s",
                side.name,
                t.as_secs_f64()
            ),
            None => println!("{:<34} never injected skills", side.name),
        }
    }
    // Warm every path (connections, caches: each query once).
    rt.block_on(async {
        for side in &sides {
            for body in plain.iter().chain(&streamed) {
                one(&client, &side.url, body, Instant::now()).await;
            }
        }
    });
    std::thread::sleep(Duration::from_secs(1));
    let idle: Vec<Option<f64>> = sides
        .iter()
        .map(|s| s.pid.map(|p| tree_rss(p, rss_kib)))
        .collect();

    // Per rate, per side: added p50 and p99 of the non-streaming run.
    let mut summary: Vec<RateAdded> = Vec::new();
    for &rate in &opts.rates {
        for (label, set, stream) in [
            ("non-streaming", &plain, false),
            (
                "streaming, stream-10-10 (10 chunks 10 ms apart)",
                &streamed,
                true,
            ),
        ] {
            println!("\n## {label}, {rate} req/s ({} s per side)", opts.secs);
            let dummy_cpu = cpu_secs(dummy_pid);
            let outcomes = run_rate(
                &rt,
                &client,
                &sides,
                set,
                rate,
                rounds(rate, opts.secs, opts.min_samples),
            );
            if stream {
                print_stream(&sides, &outcomes, rate);
            } else {
                print_plain(&sides, &outcomes, rate);
            }
            let served: usize = outcomes.iter().flatten().map(|o| o.samples.len()).sum();
            println!(
                "# dummy CPU: {:.0} us per request",
                (cpu_secs(dummy_pid) - dummy_cpu) * 1e6 / served.max(1) as f64
            );
            if !stream {
                let base = outcomes[0]
                    .as_ref()
                    .map(Outcome::totals)
                    .unwrap_or_default();
                let row = outcomes
                    .iter()
                    .map(|o| {
                        o.as_ref().map(|o| {
                            let t = o.totals();
                            (added(&base, &t, 50.0), added(&base, &t, 99.0))
                        })
                    })
                    .collect();
                summary.push((rate, row));
            }
            for (side, o) in sides.iter_mut().zip(&outcomes) {
                // The direct side is the baseline: always measured.
                if let Some(o) = o
                    && side.pid.is_some()
                    && side.saturated.is_none()
                    && let Some(why) = fell_behind(o, rate)
                {
                    side.saturated = Some(why);
                }
            }
        }
    }

    println!("\n## memory (process tree RSS, MiB)");
    println!(
        "{:<34} {:>8} {:>11} {:>8}",
        "side", "idle", "after load", "peak"
    );
    for (side, idle) in sides.iter().zip(&idle) {
        if let (Some(pid), Some(idle)) = (side.pid, idle) {
            println!(
                "{:<34} {:>8.1} {:>11.1} {:>8.1}",
                side.name,
                idle,
                tree_rss(pid, rss_kib),
                tree_rss(pid, peak_rss_kib)
            );
        }
    }
    print_summary(
        &sides,
        &summary,
        &idle_default,
        start_default,
        original_start,
    );
    drop(dummy);
}

/// The claims, each against its target.
fn print_summary(
    sides: &[Side],
    summary: &[RateAdded],
    idle_default: &[(String, f64)],
    start_default: Duration,
    original_start: Option<Duration>,
) {
    println!("\n## summary");
    let original = sides.iter().position(|s| s.name.starts_with("original"));
    let bm25 = sides.iter().position(|s| s.name.ends_with("BM25"));
    for (rate, row) in summary {
        let Some(Some((o50, o99))) = original.map(|i| row[i]) else {
            continue;
        };
        for (i, side) in sides.iter().enumerate().skip(1) {
            if Some(i) == original {
                continue;
            }
            if let Some((a50, a99)) = row[i] {
                // Below 10 us the added figure is noise; the ratio is then a floor.
                println!(
                    "{rate}/s: the original adds {o50:+.3} ms p50, {o99:+.3} ms p99; {} adds {a50:+.3} / {a99:+.3} ms: {:.0}x / {:.0}x less",
                    side.name,
                    o50 / a50.max(0.01),
                    o99 / a99.max(0.01)
                );
            }
        }
    }
    if let (Some(b), Some((_, row))) = (bm25, summary.iter().find(|(r, _)| *r == 1000))
        && let Some((_, a99)) = row[b]
    {
        println!(
            "target p99 added <= 1 ms at 1000/s with {}: {a99:+.3} ms ({})",
            sides[b].name,
            if a99 <= 1.0 { "met" } else { "NOT met" }
        );
    }
    if let (Some(o), Some(b), Some((_, row))) = (original, bm25, summary.first())
        && let (Some((o50, _)), Some((a50, _))) = (row[o], row[b])
    {
        let x = o50 / a50.max(0.01);
        println!(
            "target overhead >= 30x below the original's (p50 at {}/s, BM25 side): {x:.0}x ({})",
            summary[0].0,
            if x >= 30.0 { "met" } else { "NOT met" }
        );
    }
    for (name, rss) in idle_default {
        println!("idle RSS, {name}: {rss:.1} MiB = {:.1} MB", rss * 1.048_576);
    }
    if let Some((_, rss)) = idle_default.first() {
        let mb = rss * 1.048_576;
        println!(
            "target idle RSS <= 40 MB (metaclaw, default config): {mb:.1} MB ({})",
            if mb <= 40.0 { "met" } else { "NOT met" }
        );
    }
    println!(
        "target start to healthy <= 300 ms (metaclaw, default config, restart): {:.1} ms ({})",
        ms(start_default),
        if start_default <= Duration::from_millis(300) {
            "met"
        } else {
            "NOT met"
        }
    );
    if let Some(t) = original_start {
        println!(
            "start to healthy, original: {:.1} ms ({:.0}x metaclaw's)",
            ms(t),
            ms(t) / ms(start_default).max(1e-9)
        );
    }
}
