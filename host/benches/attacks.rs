//! Hostile plugins against a running metaclaw: for each attack, small chat
//! requests from other sessions arrive open-loop at a fixed rate, in
//! alternating one-second slices without (baseline) and with the attack
//! running. Per-turn attacks send a turn of the attacking session every
//! 100 ms by default (a scorer attack: each finishes the one before, which
//! the scorers then score), or a burst of turns at once at the start of each
//! attack slice (600 turns that wake a sleeping executable skill); drop-in
//! attacks put a file into the plugin folder (a `guard@9.9.9` impostor, a
//! `metadata()` that never returns, an 8 GiB sparse file) and watch
//! everyone else meanwhile. Reported per attack: the other requests'
//! latency in both kinds of slice, errors, metaclaw's RSS before, at its
//! peak and after, what metaclaw recorded of the attack (the plugin's
//! failures from the log, the reward it was allowed to return, a refused
//! file), and how long a normal session's turn then waits to be scored.
//! Then the slow-skills case (`slow_skills_case`): forty executable skills
//! that each sleep just under their deadline, against `plugins.turn_budget`,
//! in a metaclaw of their own; `--quick` fails if they add more than the
//! budget and its margin to a turn.
//!
//!     cargo bench -p metaclaw --bench attacks                # every attack, 5 s per side
//!     cargo bench -p metaclaw --bench attacks -- --quick     # CI: most attacks, asserts containment
//!
//! Options: --secs N (per side, per attack)  --rate R (requests/s)
//!          --attacks loop,bomb,...  --quick
//!          --attack-every MS (between attack turns; default 100)
//!
//! `re-index` (in both modes) runs in-process on the plugin host, its
//! embedding backend a counting upstream behind metaclaw's real cache: the
//! hostile retriever, granted `embed`, indexes a 40-skill library and traps
//! on every second `retrieve()`, for 120 turns; then, with fresh text at
//! every index and a 100-request hour, for 120 more. Its bounds: the
//! library goes upstream once, the plugin is disabled by its failure rate
//! before the turns run out, and the fresh-text attacker stays within 100
//! requests.
//!
//! Needs the plugins built (scripts/build-plugins): the attackers are in
//! `target/plugins/testing/`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/slow_skills.rs"]
mod slow_skills;
use harness::{BIN, mib, ms, percentile, rss_kib};

/// The harness's spawn, without the start-up time.
fn spawn(cmd: Command, prefix: &str) -> (harness::Proc, String) {
    let (proc, url, _) = harness::spawn(cmd, prefix);
    (proc, url)
}

/// How an attack reaches metaclaw.
#[derive(Clone, Copy)]
enum Vector {
    /// Turns of `session` saying `text`: one every `--attack-every` ms of an
    /// attack slice, or `burst` of them at once at the start of each.
    Turns {
        session: &'static str,
        text: &'static str,
        burst: usize,
    },
    /// A file put into the plugin folder at the start of the attack (and
    /// removed after it).
    DropIn,
}

struct Attack {
    name: &'static str,
    /// The plugin that carries it (its name, as `plugins list` shows it).
    plugin: &'static str,
    /// Files in the plugin folder for the attack: (built file under
    /// `target/plugins/`, or `sparse:<GiB>`; name in the folder).
    files: &'static [(&'static str, &'static str)],
    vector: Vector,
}

const HOSTILE: &[(&str, &str)] = &[];

const fn turns(name: &'static str, text: &'static str) -> Attack {
    Attack {
        name,
        plugin: "hostile",
        files: HOSTILE,
        vector: Vector::Turns {
            session: name,
            text,
            burst: 0,
        },
    }
}

/// Every attack the bench knows.
const ALL: [Attack; 18] = [
    turns("loop", "go"),
    turns("sleep", "go"),
    turns("bomb", "go"),
    turns("recurse", "go"),
    turns("huge", "8388608"),
    turns("trap", "go"),
    turns("read-file", "/etc/passwd"),
    turns("list-dir", "go"),
    turns("write-file", "go"),
    turns("open-socket", "{socket}"),
    turns("read-env", "go"),
    turns("wasi-clock", "go"),
    turns("host-clock", "go"),
    turns("log-flood", "go"),
    Attack {
        name: "sleep-skill",
        plugin: "hostile-skill",
        files: &[("testing/hostile-skill.wasm", "hostile-skill.wasm")],
        vector: Vector::Turns {
            session: "sleep-skill",
            text: "hostile:sleep",
            burst: 600,
        },
    },
    Attack {
        name: "slow-metadata",
        plugin: "slow-metadata",
        files: &[("testing/slow-metadata.wasm", "slow-metadata.wasm")],
        vector: Vector::DropIn,
    },
    Attack {
        name: "fake-guard",
        plugin: "guard",
        files: &[("testing/fake-guard.wasm", "guard-9.9.9.wasm")],
        vector: Vector::DropIn,
    },
    Attack {
        name: "sparse-8g",
        plugin: "-",
        files: &[("sparse:8", "huge.wasm")],
        vector: Vector::DropIn,
    },
];
const QUICK: [&str; 12] = [
    "loop",
    "sleep",
    "bomb",
    "recurse",
    "huge",
    "read-file",
    "open-socket",
    "log-flood",
    "sleep-skill",
    "slow-metadata",
    "fake-guard",
    "sparse-8g",
];
/// The plugin memory budget (`plugins.memory_mb`, set so).
const MEMORY_MB: u64 = 64;
/// All plugins' memory together (`plugins.total_memory_mb`, set so).
const TOTAL_MB: u64 = 512;
/// The sum-of-memory attack's scorers, and the MiB each grows by: just
/// under its own budget (`MEMORY_MB`).
const SUM_SCORERS: usize = 40;
const GROW_MB: &str = "60";
/// The attacks run as sections of their own, after the table.
const SECTIONS: [&str; 3] = ["re-index", SLOW_SKILLS, "sum-of-memory"];
/// Sessions the other requests rotate through.
const BYSTANDER_SESSIONS: u32 = 8;

struct Options {
    quick: bool,
    /// Run the in-process `re-index` case.
    reindex: bool,
    secs: u32,
    rate: u32,
    /// Milliseconds between attack turns.
    attack_every_ms: u32,
    attacks: Vec<&'static Attack>,
    /// Run the slow-skills case (`--attacks slow-skills`, or by default).
    slow_skills: bool,
    /// Run the sum-of-memory section.
    sum_of_memory: bool,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let value = |flag: &str| args.value(flag);
    let names: Vec<String> = value("--attacks")
        .map(|a| a.split(',').map(str::to_string).collect())
        .unwrap_or_else(|| {
            let table = if quick {
                QUICK.iter().map(|a| a.to_string()).collect::<Vec<_>>()
            } else {
                ALL.iter().map(|a| a.name.to_string()).collect()
            };
            table
                .into_iter()
                .chain(SECTIONS.iter().map(|s| s.to_string()))
                .collect()
        });
    let reindex = names.iter().any(|n| n == "re-index");
    let slow_skills = names.iter().any(|n| n == SLOW_SKILLS);
    let sum_of_memory = names.iter().any(|n| n == "sum-of-memory");
    let attacks = names
        .iter()
        .filter(|n| !SECTIONS.contains(&n.as_str()))
        .map(|n| {
            ALL.iter().find(|a| a.name == n).unwrap_or_else(|| {
                panic!(
                    "unknown attack {n}; known: {:?}",
                    ALL.iter()
                        .map(|a| a.name)
                        .chain(SECTIONS)
                        .collect::<Vec<_>>()
                )
            })
        })
        .collect();
    Options {
        quick,
        reindex,
        secs: value("--secs")
            .and_then(|s| s.parse().ok())
            .unwrap_or(if quick { 1 } else { 5 }),
        rate: value("--rate").and_then(|s| s.parse().ok()).unwrap_or(200),
        attack_every_ms: value("--attack-every")
            .and_then(|s| s.parse().ok())
            .unwrap_or(100),
        attacks,
        slow_skills,
        sum_of_memory,
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
/// slice, alternating each second (B A A B B A …). During attack slices the
/// attack's turns (one every `--attack-every` ms, or a burst at the start
/// of each); `start` runs as the first attack slice begins (a drop-in is put
/// in place). The schedule is kept by this thread with precise sleeps;
/// requests run on `rt`.
#[allow(clippy::too_many_arguments)]
fn run_slices(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    opts: &Options,
    vector: Vector,
    socket: &str,
    pid: u32,
    start: &dyn Fn(),
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
    let mut started = false;
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
            if kind == Slice::Attack && !started {
                start();
                started = true;
            }
            if let (
                Slice::Attack,
                Vector::Turns {
                    session,
                    text,
                    burst,
                },
            ) = (kind, vector)
            {
                let n = match burst {
                    0 if i.is_multiple_of(attack_every) => 1,
                    0 => 0,
                    n if i == 0 => n,
                    _ => 0,
                };
                for _ in 0..n {
                    let (client, url, atx) = (client.clone(), url.to_string(), atx.clone());
                    let text = text.replace("{socket}", socket);
                    rt.spawn(async move {
                        let ok = turn(&client, &url, session, &text, scheduled).await;
                        let _ = atx.send(ok.is_some());
                    });
                    attack_sent += 1;
                }
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

/// What `plugins list` says: every plugin, and the problems.
fn listing(home: &Path) -> Value {
    cli(home, &["plugins", "list", "--json"]).unwrap_or(Value::Null)
}

/// A plugin's `(calls, failures, status)` in a listing.
fn stats(list: &Value, name: &str) -> (u64, u64, String) {
    list["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .map(|p| {
            (
                p["calls"].as_u64().unwrap_or(0),
                p["failures"].as_u64().unwrap_or(0),
                p["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .unwrap_or((0, 0, "not loaded".into()))
}

/// The problem `plugins list` reports for the file called `file`.
fn problem(list: &Value, file: &str) -> Option<String> {
    list["problems"].as_array()?.iter().find_map(|p| {
        p["path"]
            .as_str()
            .is_some_and(|path| path.ends_with(file))
            .then(|| p["error"].as_str().unwrap_or("").to_string())
    })
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

/// Each `plugin call failed` of `plugin` in `log`, counted by message
/// (one line each: what a plugin can put in a message is escaped).
fn failures_in(log: &str, plugin: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let tag = format!("plugin={plugin}@");
    for line in log.lines().filter(|l| l.contains(&tag)) {
        let Some((_, message)) = line.split_once("plugin call failed: ") else {
            continue;
        };
        let message = message.split(" plugin=").next().unwrap_or(message).trim();
        *out.entry(message.to_string()).or_insert(0) += 1;
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

/// What an attack left behind.
struct Evidence {
    /// The attacking plugin's failures, by message.
    failures: BTreeMap<String, u32>,
    /// The hostile scorer's rewards on the attacking session.
    rewards: Vec<String>,
    /// The log written during the attack.
    log: String,
    /// `plugins list` after it.
    listing: Value,
    /// RSS growth (KiB) over the attack, at the peak.
    grown_kib: u64,
}

/// What the attack is expected to end as; `Ok` names the limit that
/// stopped it.
fn judge(attack: &Attack, e: &Evidence) -> Result<String, String> {
    let (failures, rewards) = (&e.failures, &e.rewards);
    let failed = |needle: &str| failures.keys().any(|m| m.to_lowercase().contains(needle));
    let all_rewards =
        |ok: &dyn Fn(&str) -> bool| !rewards.is_empty() && rewards.iter().all(|r| ok(r));
    let refused =
        |file: &str, needle: &str| problem(&e.listing, file).is_some_and(|p| p.contains(needle));
    let guard = e.listing["plugins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "guard"))
        .map(|p| {
            (
                p["source"].as_str().unwrap_or(""),
                p["version"].as_str().unwrap_or(""),
            )
        });
    let got = || {
        format!(
            "failures {failures:?}, rewards {:?}, problems {}",
            rewards.iter().map(|r| short(r, 80)).collect::<Vec<_>>(),
            e.listing["problems"]
        )
    };
    let verdict = match attack.name {
        "loop" => (failed("deadline") && rewards.is_empty())
            .then_some("deadline (plugins.timeouts.scorer)"),
        "sleep" => (failed("deadline") && rewards.is_empty())
            .then_some("deadline, though asleep in WASI (the waiter drops the call)"),
        "bomb" => (failed("memory cap") && rewards.is_empty())
            .then_some("memory cap (plugins.memory_mb)")
            .or((failed("deadline") && rewards.is_empty())
                .then_some("deadline before the memory cap")),
        "recurse" => (failed("trapped") && failed("stack") && rewards.is_empty())
            .then_some("wasm stack limit (trap)"),
        "trap" => (failed("trapped") && rewards.is_empty()).then_some("trap ends the call only"),
        "huge" => (failed("plugins.max_call_mb") && rewards.is_empty())
            .then_some("copy limit (plugins.max_call_mb): refused before the host copies it"),
        "read-file" | "list-dir" | "write-file" | "open-socket" => {
            all_rewards(&|r| r.starts_with("Err(")).then_some("denied: no preopens / no network")
        }
        "read-env" => all_rewards(&|r| r == "vars=0 HOME=None").then_some("empty environment"),
        "wasi-clock" => all_rewards(&|r| r == "0").then_some("WASI clock frozen at the epoch"),
        "host-clock" => (failed("not granted") && rewards.is_empty())
            .then_some("capability `clock` not granted"),
        "log-flood" => {
            let flood = e.log.lines().filter(|l| l.contains("flood ")).count();
            let forged = e
                .log
                .lines()
                .any(|l| l.starts_with("2026-11-23T00:00:00.000000Z"));
            let turns = rewards.len().max(1);
            (!forged && flood <= 100 + 50 * turns && all_rewards(&|r| r == "flooded"))
                .then_some("one line a message, 50 a call, 20 a second a plugin")
        }
        "sleep-skill" => failed("deadline")
            .then_some("deadline; the other calls found it busy and went on without it"),
        "slow-metadata" => (refused("slow-metadata.wasm", "metadata() failed: deadline")
            && guard == Some(("builtin", "0.1.0")))
        .then_some("load deadline (plugins.timeouts.load); first-party plugins loaded first"),
        "fake-guard" => (refused("guard-9.9.9.wasm", "first-party")
            && guard == Some(("builtin", "0.1.0")))
        .then_some("first-party name reserved: refused before any grant or role"),
        "sparse-8g" => (refused("huge.wasm", "max_file_mb") && e.grown_kib < 32 << 10)
            .then_some("plugins.max_file_mb, from its metadata: never read"),
        _ => None,
    };
    verdict.map(str::to_string).ok_or_else(got)
}

/// The outcome in a few words for the table.
fn outcome_cell(attack: &Attack, e: &Evidence) -> String {
    if let Some((msg, n)) = e.failures.iter().max_by_key(|(_, n)| **n) {
        return format!("{n}x fail: {}", short(msg, 48));
    }
    if let Some((_, file)) = attack.files.first()
        && let Some(p) = problem(&e.listing, file)
    {
        return format!("refused: {}", short(&p, 48));
    }
    match e.rewards.last() {
        Some(r) => format!("{}x reward: {}", e.rewards.len(), short(r, 48)),
        None => "nothing recorded".into(),
    }
}

/// Puts an attack's files into the plugin folder.
fn place(files: &[(&str, &str)], built: &Path, dir: &Path) {
    for (from, to) in files {
        if let Some(gib) = from.strip_prefix("sparse:") {
            let f = std::fs::File::create(dir.join(to)).unwrap();
            f.set_len(gib.parse::<u64>().unwrap() << 30).unwrap();
        } else {
            std::fs::copy(built.join(from), dir.join(to)).unwrap();
        }
    }
}

/// Waits until `plugins list` shows every file of `attack` loaded or
/// refused (the watcher picked it up).
fn settled(home: &Path, attack: &Attack) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let list = listing(home);
        let done = attack.files.iter().all(|(_, file)| {
            problem(&list, file).is_some()
                || list["plugins"].as_array().is_some_and(|p| {
                    p.iter()
                        .any(|p| p["path"].as_str().is_some_and(|path| path.ends_with(file)))
                })
        });
        if done {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// `metaclaw start` in home `h`, its log to `log_path`.
fn start_metaclaw(h: &Path, log_path: &Path, env: &[(&str, &str)]) -> (harness::Proc, String) {
    let mut c = Command::new(BIN);
    c.args(["start", "--foreground", "--port", "0"])
        .env("METACLAW_HOME", h)
        .env("METACLAW_NO_WIRE", "1")
        .envs(env.iter().copied())
        .stderr(std::fs::File::create(log_path).unwrap());
    spawn(c, "metaclaw listening on ")
}

/// The slow-skills case's name in `--attacks`.
const SLOW_SKILLS: &str = "slow-skills";

/// Forty executable skills, each sleeping just under its deadline in
/// `applies()`, in a metaclaw of their own: the median latency of turns
/// that wake them all against that of ordinary turns (which ask them too,
/// and none applies). Err if they add more than `plugins.turn_budget` and
/// its scheduling margin.
fn slow_skills_case(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    built: &Path,
    dummy_url: &str,
    opts: &Options,
) -> Result<(), String> {
    use slow_skills::{BUDGET_MS, MARGIN_MS, SKILLS, SLEEP_MS};
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let drop_ins = h.join("slow-skills");
    std::fs::create_dir_all(&drop_ins).unwrap();
    slow_skills::place(&built.join("testing/hostile-skill.wasm"), &drop_ins);
    std::fs::write(
        h.join("config.yaml"),
        slow_skills::config(dummy_url, &drop_ins) + "log:\n  level: warn\n",
    )
    .unwrap();
    let log_path = h.join("metaclaw.log");
    let (proxy, proxy_url) = start_metaclaw(h, &log_path, &[("METACLAW_NO_BUILTIN_SKILLS", "1")]);
    let deadline = Instant::now() + Duration::from_secs(600);
    while !slow_skills::all_loaded(&listing(h)) {
        if Instant::now() > deadline {
            return Err(format!("{SLOW_SKILLS}: the {SKILLS} skills never loaded"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let url = format!("{proxy_url}/v1/chat/completions");
    let n = if opts.quick { 5 } else { 25 };
    let query = slow_skills::query();
    let (ordinary, slow, errors) = rt.block_on(async {
        let mut lat: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
        let mut errors = 0;
        turn(client, &url, "warm", "Say PONG", Instant::now()).await;
        // Ordinary turns first: a turn that cuts skills drops their busy
        // instances, and the next one would pay for new ones.
        for (k, text) in [(0, "Say PONG"), (1, query.as_str())] {
            for i in 0..n {
                match turn(client, &url, &format!("slow-{k}-{i}"), text, Instant::now()).await {
                    Some(took) => lat[k].push(took),
                    None => errors += 1,
                }
            }
        }
        lat.iter_mut().for_each(|l| l.sort());
        let [ordinary, slow] = lat;
        (ordinary, slow, errors)
    });
    let list = listing(h);
    let (mut cuts, mut failures) = (0, 0);
    for p in list["plugins"].as_array().into_iter().flatten() {
        if p["name"].as_str().is_some_and(slow_skills::is_slow_skill) {
            cuts += p["turn_cuts"].as_u64().unwrap_or(0);
            failures += p["failures"].as_u64().unwrap_or(0);
        }
    }
    drop(proxy);
    let added = percentile(&slow, 50.0).saturating_sub(percentile(&ordinary, 50.0));
    let bound = Duration::from_millis(BUDGET_MS + MARGIN_MS);
    println!(
        "\n# {SLOW_SKILLS}: {SKILLS} executable skills whose applies() sleeps {SLEEP_MS} ms (deadline {} ms), plugins.turn_budget {BUDGET_MS} ms, plugins.threads 2",
        slow_skills::DEADLINE_MS
    );
    println!(
        "{SLOW_SKILLS:<13} ordinary turn p50 {:.1} ms, p99 {:.1} ms; woken p50 {:.1} ms, p99 {:.1} ms; added p50 {:.1} ms (bound {:.0} ms; one after another: {} ms); calls cut {cuts}, failures {failures}, errors {errors}",
        ms(percentile(&ordinary, 50.0)),
        ms(percentile(&ordinary, 99.0)),
        ms(percentile(&slow, 50.0)),
        ms(percentile(&slow, 99.0)),
        ms(added),
        ms(bound),
        SKILLS as u64 * SLEEP_MS
    );
    if errors > 0 {
        return Err(format!("{SLOW_SKILLS}: {errors} turns failed"));
    }
    if added > bound {
        return Err(format!(
            "{SLOW_SKILLS}: the slow skills added {:.0} ms to a turn (p50), over {:.0} ms",
            ms(added),
            ms(bound)
        ));
    }
    Ok(())
}

fn main() {
    let opts = options();
    let built = PathBuf::from(BIN)
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("plugins");
    let hostile = built.join("testing/hostile.wasm");
    assert!(
        hostile.is_file(),
        "{} is missing: run scripts/build-plugins first",
        hostile.display()
    );
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let drop_ins = h.join("plugins");
    std::fs::create_dir_all(&drop_ins).unwrap();
    std::fs::copy(&hostile, drop_ins.join("hostile.wasm")).unwrap();

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
            "llm:\n  api_base: {dummy_url}\nlog:\n  level: warn\nsessions:\n  idle_timeout: 1h\nplugins:\n  max_failures: 1000000\n  memory_mb: {MEMORY_MB}\n  total_memory_mb: {TOTAL_MB}\n  watch_interval: 200ms\n"
        ),
    )
    .unwrap();
    let log_path = h.join("metaclaw.log");
    let (proxy, proxy_url) = start_metaclaw(h, &log_path, &[]);
    let pid = proxy.0.id();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Plugins compile in the background: wait for the hostile one.
    let deadline = Instant::now() + Duration::from_secs(120);
    while stats(&listing(h), "hostile").2 != "ok" {
        assert!(
            Instant::now() < deadline,
            "the hostile plugin never loaded:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let rt = harness::runtime();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
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

    println!("# hostile plugins vs. a running metaclaw (release build, loopback, dummy upstream)");
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
        "# attack: a turn of the attack's session every {} ms (a scorer attack: each finishes the previous one, which is then scored), a burst at the start of each attack slice, or a file dropped into the plugin folder",
        opts.attack_every_ms
    );
    println!(
        "# limits: plugins.timeouts 50 ms (load 2 s), plugins.memory_mb {MEMORY_MB}, plugins.total_memory_mb {TOTAL_MB}, plugins.max_call_mb 4, no grants; max_failures raised so the attackers stay loaded"
    );
    println!(
        "# a normal turn's wait to be scored before any attack: {}",
        idle_probe.map_or("timeout".into(), |d| format!("{:.0} ms", ms(d)))
    );
    println!(
        "\n{:<13} {:>5} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>6} {:>5} {:>21} {:>8}  outcome",
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
        let log_from = log().len();
        let before = listing(h);
        let (calls0, fails0, _) = stats(&before, attack.plugin);
        let rss0 = rss_kib(pid);
        let start = || {
            if matches!(attack.vector, Vector::DropIn) {
                place(attack.files, &built, &drop_ins);
            }
        };
        // A per-turn attacker that is not the hostile scorer is put in place
        // (and loaded) before the slices.
        if matches!(attack.vector, Vector::Turns { .. }) && !attack.files.is_empty() {
            place(attack.files, &built, &drop_ins);
            assert!(
                settled(h, attack),
                "{} never loaded:\n{}",
                attack.name,
                log()
            );
        }
        let run = run_slices(
            &rt,
            &client,
            &url,
            &opts,
            attack.vector,
            &socket_addr,
            pid,
            &start,
        );
        if matches!(attack.vector, Vector::DropIn) && !settled(h, attack) {
            problems.push(format!(
                "{}: the dropped file was never looked at",
                attack.name
            ));
        }
        // Drains the scoring queue: every attack turn is scored by now.
        let lag = probe(&rt, &client, &url, h, attack.name);
        let rss1 = rss_kib(pid);
        let after = listing(h);
        let (calls1, fails1, status) = stats(&after, attack.plugin);
        let all_log = log();
        let window = all_log[log_from.min(all_log.len())..].to_string();
        let evidence = Evidence {
            failures: failures_in(&window, attack.plugin),
            rewards: hostile_rewards(h, attack.name),
            log: window,
            listing: after,
            grown_kib: run
                .peak_rss_kib
                .saturating_sub(rss0)
                .max(rss1.saturating_sub(rss0)),
        };
        for (_, file) in attack.files {
            let _ = std::fs::remove_file(drop_ins.join(file));
        }
        let [base, atk] = &run.lat;
        let ratio = ms(percentile(atk, 99.0)) / ms(percentile(base, 99.0)).max(1e-9);
        println!(
            "{:<13} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>5.2}x {:>6} {:>6} {:>5} {:>7.0}/{:>6.0}/{:>6.0} {:>8}  {}",
            attack.name,
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
            outcome_cell(attack, &evidence)
        );
        let verdict = judge(attack, &evidence);
        details.push(format!(
            "{:<13} {}; plugin calls +{}, failures +{}, status {status}",
            attack.name,
            match &verdict {
                Ok(limit) => format!("contained by: {limit}"),
                Err(got) => format!("UNEXPECTED: {got}"),
            },
            calls1.saturating_sub(calls0),
            fails1.saturating_sub(fails0),
        ));
        for (msg, n) in &evidence.failures {
            details.push(format!("{:<13}   {n}x {}", "", short(msg, 160)));
        }
        if let Err(got) = verdict {
            problems.push(format!("{}: unexpected outcome: {got}", attack.name));
        }
        if run.errors != [0, 0] || run.attack_errors != 0 {
            problems.push(format!(
                "{}: failed requests: baseline {}, attack slices {}, attack turns {}",
                attack.name, run.errors[0], run.errors[1], run.attack_errors
            ));
        }
        // Everyone else is answered within the deadline on top of what the
        // baseline slices took, with room for what the attack's own turns
        // cost the 2 cores (a 600-turn burst is 600 requests to serve); a
        // stalled proxy would show the attacker's 10-minute sleep.
        let bound = percentile(base, 99.0) + Duration::from_millis(50 + 1000);
        if percentile(atk, 99.0) > bound {
            problems.push(format!(
                "{}: other requests' p99 {:.0} ms during the attack, over {:.0} ms",
                attack.name,
                ms(percentile(atk, 99.0)),
                ms(bound)
            ));
        }
        if lag.is_none() {
            problems.push(format!(
                "{}: a normal turn was not scored within 60 s",
                attack.name
            ));
        }
        // A per-turn attacker stays loaded (failures are counted, and
        // max_failures is raised); a refused drop-in never loads.
        if matches!(attack.vector, Vector::Turns { .. }) && status != "ok" {
            problems.push(format!("{}: the plugin is {status}", attack.name));
        }
        // The host never holds more than the plugin's budget on top of
        // what it had.
        if evidence.grown_kib > (MEMORY_MB + 32) << 10 {
            problems.push(format!(
                "{}: metaclaw grew by {:.0} MiB (budget {MEMORY_MB} MiB)",
                attack.name,
                mib(evidence.grown_kib)
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

    if opts.sum_of_memory {
        let log_from = log().len();
        let sum = SumOfMemory {
            rt: &rt,
            client: &client,
            url: &url,
            home: h,
            built: &built,
            drop_ins: &drop_ins,
            pid,
        };
        problems.extend(sum.run(&opts, &socket_addr, &|| {
            let all = log();
            all[log_from.min(all.len())..].to_string()
        }));
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
    if opts.reindex {
        problems.extend(reindex::run(&built));
    }
    if opts.slow_skills
        && let Err(problem) = slow_skills_case(&rt, &client, &built, &dummy_url, &opts)
    {
        problems.push(problem);
    }
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

/// The re-index attack, in-process: what a retriever that makes the host
/// throw its instances away can spend on the embedding backend.
mod reindex {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use metaclaw_core::config::Config;
    use metaclaw_core::embeddings::{Backend, Cached, EmbedError};
    use metaclaw_core::plugins::types::{Skill, TurnContext};
    use metaclaw_core::plugins::{CallError, Embedder, Grants, HostSettings, PluginHost};

    const LIBRARY: usize = 40;
    const TURNS: usize = 120;
    const FRESH_BUDGET: u64 = 100;

    /// A paid endpoint, as far as counting goes.
    #[derive(Default)]
    struct Upstream(AtomicU64);

    impl Backend for Upstream {
        fn model_id(&self) -> &str {
            "bench-upstream"
        }
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        }
    }

    struct Outcome {
        upstream: u64,
        indexes: u64,
        disabled_at: Option<usize>,
    }

    fn attack(built: &Path, marker: &str, tune: impl FnOnce(&mut Config)) -> Outcome {
        let home = tempfile::tempdir().unwrap();
        let file = built.join("testing/hostile-retriever.wasm");
        let folder = home.path().join("plugins");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::copy(&file, folder.join("r.wasm")).unwrap();
        let sha = metaclaw_core::digest::sha256_hex(std::fs::read(&file).unwrap());
        let mut config = Config::default();
        config.plugins.builtin = false;
        config.plugins.grants.insert(
            format!("hostile-retriever@sha256:{sha}").parse().unwrap(),
            Grants::parse(&["embed".to_string()]).unwrap(),
        );
        tune(&mut config);
        let upstream = Arc::new(Upstream::default());
        let db = metaclaw_core::store::Db::at(home.path().join("metaclaw.db"));
        let embedder: Arc<dyn Embedder> = Arc::new(Cached::new(upstream.clone(), &db).unwrap());
        let settings =
            HostSettings::from_config(&config, &metaclaw_core::home::Home::at(home.path()));
        let host = PluginHost::new(settings, Some(embedder)).unwrap();
        let plugin = host.reload().find("hostile-retriever", None).unwrap();
        let text = |id: String| Skill {
            name: id.clone(),
            description: format!("when {id} applies"),
            category: "general".into(),
            tags: Vec::new(),
            version: "1.0.0".into(),
            body: format!("Steps for {id}."),
            id,
        };
        let mut skills: Vec<Skill> = (0..LIBRARY).map(|i| text(format!("s{i}"))).collect();
        skills.push(text(marker.into()));
        let library = Arc::new(skills);
        let query = TurnContext {
            session_id: "attacker".into(),
            turn_type: "main".into(),
            model: "m".into(),
            system_prompt: String::new(),
            messages: Vec::new(),
            query: "hostile:trap-every-second".into(),
        };
        let engine = host.engine.clone();
        let calls = || plugin.stats.calls.load(Ordering::Relaxed);
        let mut indexes = 0;
        let mut reindex = || {
            let before = calls();
            let _ = engine.block_on(plugin.warm(&library, 1));
            indexes += calls() - before;
        };
        reindex();
        let mut disabled_at = None;
        for turn in 0..TURNS {
            match engine.block_on(plugin.retrieve(&library, 1, &query, 4, None)) {
                Err(CallError::Indexing) => reindex(),
                Err(CallError::Disabled(_)) => {
                    disabled_at = Some(turn);
                    break;
                }
                _ => {}
            }
        }
        Outcome {
            upstream: upstream.0.load(Ordering::SeqCst),
            indexes,
            disabled_at,
        }
    }

    /// Runs both halves, prints them, and returns what exceeded a bound.
    pub fn run(built: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        let same = attack(built, "hostile-embed-index", |_| {});
        let fresh = attack(built, "hostile-embed-fresh", |c| {
            c.plugins.embed_requests_per_hour = FRESH_BUDGET;
            c.plugins.max_failures = 1_000_000;
            c.plugins.max_failure_rate = 1.0;
        });
        println!(
            "\n## re-index (in-process: {LIBRARY}+1 skills, {TURNS} turns trapping every second retrieve())"
        );
        let at = |o: &Outcome| {
            o.disabled_at
                .map_or("never".into(), |t| format!("turn {t}"))
        };
        println!(
            "unchanged texts: {} upstream requests over {} index() calls; disabled at {}",
            same.upstream,
            same.indexes,
            at(&same)
        );
        println!(
            "fresh texts ({FRESH_BUDGET} requests/hour, never disabled): {} upstream requests over {} index() calls",
            fresh.upstream, fresh.indexes
        );
        let library = LIBRARY as u64 + 1;
        if same.upstream > library {
            problems.push(format!(
                "re-index: {} upstream requests for a {library}-skill library indexed {} times (bound: {library}, once)",
                same.upstream, same.indexes
            ));
        }
        if same.disabled_at.is_none() {
            problems.push(format!(
                "re-index: the churning retriever was never disabled in {TURNS} turns"
            ));
        }
        if fresh.upstream > FRESH_BUDGET {
            problems.push(format!(
                "re-index: fresh texts made {} upstream requests (budget {FRESH_BUDGET})",
                fresh.upstream
            ));
        }
        problems
    }
}

/// Where the sum-of-memory section runs.
struct SumOfMemory<'a> {
    rt: &'a tokio::runtime::Runtime,
    client: &'a reqwest::Client,
    url: &'a str,
    home: &'a Path,
    built: &'a Path,
    drop_ins: &'a Path,
    pid: u32,
}

/// `bytes` with every occurrence of `from` replaced by `to` (same length).
fn renamed(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
    out
}

impl SumOfMemory<'_> {
    /// Forty scorers, each growing by just under its own budget on every
    /// turn of the attacking session, in the usual slices. Returns the
    /// containment problems.
    fn run(&self, opts: &Options, socket: &str, log: &dyn Fn() -> String) -> Vec<String> {
        let mut problems = Vec::new();
        let grow = std::fs::read(self.built.join("testing/grow-scorer.wasm"))
            .expect("testing/grow-scorer.wasm is missing: run scripts/build-plugins");
        let names: Vec<String> = (0..SUM_SCORERS).map(|i| format!("grow-{i:02}")).collect();
        for name in &names {
            std::fs::write(
                self.drop_ins.join(format!("{name}.wasm")),
                renamed(&grow, b"grow-00", name.as_bytes()),
            )
            .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        while !names
            .iter()
            .all(|n| stats(&listing(self.home), n).2 == "ok")
        {
            if Instant::now() > deadline {
                problems.push("sum-of-memory: the scorers never all loaded".into());
                return problems;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let rss0 = rss_kib(self.pid);
        let text = GROW_MB;
        let run = run_slices(
            self.rt,
            self.client,
            self.url,
            opts,
            Vector::Turns {
                session: "grow",
                text,
                burst: 0,
            },
            socket,
            self.pid,
            &|| {},
        );
        let lag = probe(self.rt, self.client, self.url, self.home, "sum-of-memory");
        let rss1 = rss_kib(self.pid);
        let status = cli(self.home, &["status", "--json"]).unwrap_or(Value::Null);
        let memory = &status["plugins"]["memory"];
        let (peak, limit) = (
            memory["peak"].as_u64().unwrap_or(u64::MAX),
            memory["limit"].as_u64().unwrap_or(0),
        );
        let list = listing(self.home);
        let (calls, failures) = names.iter().fold((0, 0), |(c, f), n| {
            let (calls, failures, _) = stats(&list, n);
            (c + calls, f + failures)
        });
        let held_back = log()
            .lines()
            .filter(|l| l.contains("plugins.total_memory_mb") && l.contains("plugin call failed"))
            .count();
        let [base, atk] = &run.lat;
        let grown_kib = run
            .peak_rss_kib
            .saturating_sub(rss0)
            .max(rss1.saturating_sub(rss0));
        println!(
            "\n## sum of memory: {SUM_SCORERS} scorers, each growing by {text} MiB (plugins.memory_mb {MEMORY_MB}) on every turn of the attacking session"
        );
        println!(
            "# plugins together: peak {:.0} MiB of plugins.total_memory_mb {:.0} MiB; scorer calls {calls}, failed {failures} ({held_back} on the total); attack turns {}",
            peak as f64 / f64::from(1 << 20),
            limit as f64 / f64::from(1 << 20),
            run.attack_turns
        );
        println!(
            "# metaclaw RSS before/peak/after {:.0}/{:.0}/{:.0} MiB (grew {:.0} MiB); other requests p50/p99 {:.2}/{:.2} ms baseline, {:.2}/{:.2} ms attack; errors {}; a normal turn scored after {}",
            mib(rss0),
            mib(run.peak_rss_kib),
            mib(rss1),
            mib(grown_kib),
            ms(percentile(base, 50.0)),
            ms(percentile(base, 99.0)),
            ms(percentile(atk, 50.0)),
            ms(percentile(atk, 99.0)),
            run.errors[0] + run.errors[1] + run.attack_errors,
            lag.map_or("timeout".into(), |d| format!("{:.0} ms", ms(d)))
        );
        if limit != TOTAL_MB << 20 || peak > limit {
            problems.push(format!(
                "sum-of-memory: the plugins held {peak} bytes together, over plugins.total_memory_mb ({limit})"
            ));
        }
        if grown_kib > (TOTAL_MB + 64) << 10 {
            problems.push(format!(
                "sum-of-memory: metaclaw grew by {:.0} MiB (total {TOTAL_MB} MiB)",
                mib(grown_kib)
            ));
        }
        if lag.is_none() {
            problems.push("sum-of-memory: a normal turn was not scored within 60 s".into());
        }
        if run.errors != [0, 0] || run.attack_errors != 0 {
            problems.push(format!(
                "sum-of-memory: failed requests: baseline {}, attack slices {}, attack turns {}",
                run.errors[0], run.errors[1], run.attack_errors
            ));
        }
        for name in &names {
            let _ = std::fs::remove_file(self.drop_ins.join(format!("{name}.wasm")));
        }
        problems
    }
}
