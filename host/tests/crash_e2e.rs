//! Crash safety, end to end: the real binary is `kill -9`ed under load and
//! started again on the same home. Every turn a reader saw committed before
//! the kill is still there, every turn whose answer was fully delivered
//! more than [`WINDOW`] before the kill is in the store, the database is
//! intact, and every learning job queued or running at the kill is
//! finished after the restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};

/// `store.commit_interval`, as configured below.
const COMMIT_INTERVAL: Duration = Duration::from_millis(100);
/// Turns delivered longer ago than this before the kill are stored. The
/// writer commits every `commit_interval` when it gets the CPU, so what a
/// crash loses is bounded by the machine's load, not by metaclaw alone:
/// ≤ 100 ms on an idle 2-core machine, 368 ms with it overloaded (load 14,
/// five compilers beside the test). 1.5 s is four times that, so the bound
/// holds on a busy CI machine and still fails a writer that holds turns
/// back. What the commit interval itself gives is reported, not asserted.
const WINDOW: Duration = Duration::from_millis(1500);
/// The loss window reported beside [`WINDOW`]: the interval and a margin.
const MARGIN: Duration = Duration::from_millis(150);
const CLIENTS: u64 = 16;
/// Requests per second, all clients together.
const RATE: f64 = 300.0;
const LOAD: Duration = Duration::from_secs(4);
/// Sessions ended before the load: their learning jobs are queued or
/// running at the kill (the evolver takes 2 s, two jobs run at once).
const JOBS: usize = 6;

fn config() -> String {
    format!(
        "llm:\n  api_base: {{upstream}}\n  model_id: echo\n\
         rl:\n  prm_model: judge\n  evolver_model: evolver-slow-2000\n\
         sessions:\n  idle_timeout: 1h\n\
         store:\n  commit_interval: {}ms\n",
        COMMIT_INTERVAL.as_millis()
    )
}

/// A two-turn session whose first answer the user corrects (the judge
/// scores it -1, so the job also evolves), then ended.
async fn corrected_session(base: &str, id: &str, i: usize) {
    let task = format!("What is the capital of zorblax{i}?");
    let first = json!({"model": "echo", "messages": [{"role": "user", "content": task}]});
    let second = json!({"model": "echo", "messages": [
        {"role": "user", "content": task},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": format!("No, that's wrong: it is Zorb{i}.")},
    ]});
    for body in [first, second] {
        let r = post_chat(&format!("{base}/v1"), &body, &[("x-session-id", id)]).await;
        assert_eq!(r.status(), 200);
    }
    let r = client()
        .post(format!("{base}/v1/sessions/{id}/end"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

fn jobs(mc: &Metaclaw) -> Vec<Value> {
    let out = mc.cli(&["learn", "status", "--json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|j| j["session_id"].as_str().unwrap_or("").starts_with("learn-"))
        .collect()
}

/// What the load generator saw.
#[derive(Default)]
struct Seen {
    /// Marker of each request whose answer was fully delivered, and when.
    delivered: Vec<(String, Instant, bool)>,
    /// Markers sent whose answer never completed (in flight at the kill).
    unfinished: Vec<String>,
}

/// One request with `marker` as its user text; `Ok` once the whole answer
/// (every SSE event up to `[DONE]`) has arrived and echoes the marker.
async fn one(
    http: &reqwest::Client,
    url: &str,
    marker: &str,
    stream: bool,
    session: &str,
) -> Result<(), String> {
    let body = json!({
        "model": "echo",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": marker},
        ],
    });
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .header("x-session-id", session)
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(format!("status {}", r.status()));
    }
    if stream {
        let mut text = String::new();
        let mut s = r.bytes_stream();
        while let Some(chunk) = s.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| e.to_string())?));
        }
        if !text.contains("data: [DONE]") || !text.contains(marker) {
            return Err(format!("incomplete stream: {text}"));
        }
    } else {
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        if v["choices"][0]["message"]["content"] != marker {
            return Err(format!("wrong answer: {v}"));
        }
    }
    Ok(())
}

/// `CLIENTS` clients, each on its own session, pacing their requests so
/// that together they send `RATE` per second, alternating streaming and
/// non-streaming, until `stop`.
fn load(
    url: String,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let interval = Duration::from_secs_f64(CLIENTS as f64 / RATE);
    (0..CLIENTS)
        .map(|c| {
            let (http, url, seen, stop, errors) = (
                http.clone(),
                url.clone(),
                seen.clone(),
                stop.clone(),
                errors.clone(),
            );
            tokio::spawn(async move {
                let session = format!("load-{c}");
                // Spread the clients over the interval.
                tokio::time::sleep(interval.mul_f64(c as f64 / CLIENTS as f64)).await;
                let mut next = tokio::time::Instant::now();
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let marker = format!("crashmark-{c:02}-{i:05}");
                    let stream = (c + i).is_multiple_of(2);
                    match one(&http, &url, &marker, stream, &session).await {
                        Ok(()) => {
                            let at = Instant::now();
                            seen.lock().unwrap().delivered.push((marker, at, stream));
                        }
                        Err(e) => {
                            if !stop.load(Ordering::SeqCst) {
                                errors.fetch_add(1, Ordering::SeqCst);
                                eprintln!("request {marker} failed before the kill: {e}");
                            }
                            seen.lock().unwrap().unfinished.push(marker);
                        }
                    }
                    i += 1;
                    next += interval;
                    tokio::time::sleep_until(next).await;
                }
            })
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_delivered_turn_and_no_learning_job() {
    let up = dummy();
    let mut mc = Metaclaw::start(&up.url, &config());
    let db = mc.home.path().join("metaclaw.db");

    // Learning jobs to be cut short: queued, or running (in the slow
    // evolver) when the process dies.
    for i in 0..JOBS {
        corrected_session(mc.url(), &format!("learn-{i}"), i).await;
    }
    poll_json(mc.home.path(), &["learn", "status", "--json"], |v| {
        v.as_array()
            .is_some_and(|j| j.len() >= JOBS && j.iter().any(|j| j["state"] == "running"))
    });

    // Load: streaming and non-streaming turns from 16 clients.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let url = format!("{}/v1/chat/completions", mc.url());
    let load_started = Instant::now();
    let clients = load(url, seen.clone(), stop.clone(), errors.clone());
    let watched = watch_commits(db.clone(), stop.clone());
    tokio::time::sleep(LOAD).await;

    // kill -9 (Child::kill is SIGKILL), right after the reader's last look.
    let log_len = mc.log().len();
    stop.store(true, Ordering::SeqCst);
    let committed = watched.join().unwrap();
    let killed_at = Instant::now();
    let _ = mc.proc.child.kill();
    let _ = mc.proc.child.wait();
    let load_secs = (killed_at - load_started).as_secs_f64();
    for c in clients {
        c.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(
        errors.load(Ordering::SeqCst),
        0,
        "requests failed before the kill"
    );
    let delivered = seen.delivered.len();
    assert!(
        delivered as f64 > load_secs * RATE * 0.3,
        "the load was too light to mean anything: {delivered} answers in {load_secs:.1} s"
    );

    // The database as the crash left it (read-only: the restarted daemon
    // is the first to write to it again) is intact.
    let conn = open_intact(&db);
    // Nothing a reader saw committed is lost.
    let at_crash = crashmarks(&conn);
    assert!(
        !committed.is_empty(),
        "the reader saw no turn committed during {LOAD:?} of load"
    );
    let lost: Vec<&String> = committed.difference(&at_crash).collect();
    assert!(
        lost.is_empty(),
        "{} turns seen committed before the kill are gone after it: {lost:?}",
        lost.len()
    );
    let at_kill: BTreeMap<String, String> = conn
        .prepare("SELECT session_id, state FROM learning_jobs WHERE session_id LIKE 'learn-%'")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    drop(conn);
    assert_eq!(at_kill.len(), JOBS, "{at_kill:?}");

    // Started again on the same home.
    tokio::task::block_in_place(|| mc.kill_and_restart());
    let conn = open_intact(&db);

    // Every turn delivered more than WINDOW before the kill is stored.
    let stored = crashmarks(&conn);
    assert!(
        committed.is_subset(&stored),
        "turns seen committed before the kill are gone after the restart"
    );
    // The interval's own loss window, reported below (not asserted).
    let reported = COMMIT_INTERVAL + MARGIN;
    let mut missing = Vec::new();
    let (mut recent, mut recent_stored) = (0, 0);
    let mut streamed = [0, 0];
    let mut latest_missing: Option<Duration> = None;
    let mut checked = 0usize;
    for (marker, at, stream) in &seen.delivered {
        let before = killed_at.saturating_duration_since(*at);
        let is_stored = stored.contains(marker);
        if is_stored {
            streamed[usize::from(*stream)] += 1;
        } else {
            latest_missing = Some(latest_missing.map_or(before, |m: Duration| m.max(before)));
        }
        if before > WINDOW {
            checked += 1;
            if !is_stored {
                missing.push(format!(
                    "{marker} (delivered {:.0} ms before the kill)",
                    ms(before)
                ));
            }
        } else if before <= reported {
            recent += 1;
            recent_stored += usize::from(is_stored);
        }
    }
    let in_flight_stored = seen
        .unfinished
        .iter()
        .filter(|m| stored.contains(*m))
        .count();
    eprintln!(
        "crash: {delivered} answers delivered in {load_secs:.2} s ({:.0}/s; {} non-streamed, {} streamed stored); \
         {recent} delivered within the last {:.0} ms before the kill, {recent_stored} of them stored; \
         {} in flight at the kill, {in_flight_stored} of them stored; \
         oldest unstored answer: {}",
        delivered as f64 / load_secs,
        streamed[0],
        streamed[1],
        ms(reported),
        seen.unfinished.len(),
        latest_missing.map_or("none".to_string(), |d| format!(
            "{:.0} ms before the kill",
            ms(d)
        )),
    );
    assert!(
        checked as f64 > (LOAD - WINDOW).as_secs_f64() * RATE * 0.3,
        "too few answers were delivered more than {WINDOW:?} before the kill to mean anything: {checked}"
    );
    assert!(
        missing.is_empty(),
        "{} of {delivered} delivered turns are not in the store after the crash: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );

    // Learning jobs cut short finish; none is lost, none stays running.
    assert!(
        at_kill.values().filter(|s| *s != "done").count() >= 1,
        "every job was done before the kill: {at_kill:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(40);
    let after = loop {
        let js = jobs(&mc);
        if js.len() == JOBS && js.iter().all(|j| j["state"] == "done") {
            break js;
        }
        assert!(
            js.iter().all(|j| j["state"] != "failed"),
            "a learning job failed after the restart: {js:#?}"
        );
        if Instant::now() > deadline {
            panic!(
                "learning jobs did not finish after the restart (at the kill: {at_kill:?}): {js:#?}\n{}",
                mc.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for j in &after {
        let id = j["session_id"].as_str().unwrap();
        assert_eq!(
            j["stages"],
            json!(["score", "judge", "evolve", "publish"]),
            "{id}: {j}"
        );
        if at_kill.get(id).is_some_and(|s| s == "running") {
            assert!(
                j["attempts"].as_u64().unwrap() >= 2,
                "{id} was resumed: {j}"
            );
        }
    }
    eprintln!(
        "crash: learning jobs at the kill: {at_kill:?}; all {JOBS} done after the restart (attempts: {:?})",
        after
            .iter()
            .map(|j| j["attempts"].as_u64().unwrap_or(0))
            .collect::<Vec<_>>()
    );

    // The restarted daemon serves, records, and logged no database trouble.
    let r = post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "after the crash", false),
        &[("x-session-id", "after")],
    )
    .await;
    assert_eq!(r.status(), 200);
    mc.turns("after", 1);
    let log = mc.log();
    let restart_log = &log[log_len.min(log.len())..];
    let bad: Vec<&str> = restart_log
        .lines()
        .filter(|l| {
            let lower = l.to_lowercase();
            l.contains("ERROR")
                || ["sqlite", "database", "malformed", "corrupt", "store commit"]
                    .iter()
                    .any(|w| lower.contains(w))
        })
        .collect();
    assert!(bad.is_empty(), "after the restart:\n{}", bad.join("\n"));
    // It said what it resumed.
    let running = at_kill.values().filter(|s| *s == "running").count();
    if running > 0 {
        assert!(
            restart_log.contains(&format!("{running} learning job(s) cut short last time")),
            "{restart_log}"
        );
    }
}

/// The database opened read-only, after `PRAGMA integrity_check` says ok.
fn open_intact(db: &std::path::Path) -> rusqlite::Connection {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    conn
}

/// The crash markers committed in the store as `conn` sees it.
fn crashmarks(conn: &rusqlite::Connection) -> HashSet<String> {
    conn.prepare("SELECT user_summary FROM turns WHERE user_summary LIKE 'crashmark-%'")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A reader beside the daemon: the crash markers it last saw committed
/// when `stop` was set (read-only; WAL lets it read while the writer
/// commits, and it holds no transaction between looks).
fn watch_commits(
    db: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<HashSet<String>> {
    std::thread::spawn(move || {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut last = HashSet::new();
        while !stop.load(Ordering::SeqCst) {
            last = crashmarks(&conn);
            std::thread::sleep(Duration::from_millis(20));
        }
        last
    })
}
