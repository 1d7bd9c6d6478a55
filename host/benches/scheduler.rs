//! Serving while the scheduler opens and closes training windows (W2-G:
//! "chat requests during all of this are served with no added wait").
//! metaclaw runs in `mode: auto`: the trainer starts steps on its own,
//! only inside a window. The sleep window covers the whole run, so the
//! window follows a calendar file that the bench rewrites: an event now
//! shuts it, no event opens it. Chat requests go to the student at a
//! steady open-loop rate through phases:
//!
//!   shut   the calendar is busy and nothing is learned: the baseline
//!   queue  busy, and a driver learns sessions: samples wait, ready
//!   open   free; the driver goes on learning and the trainer steps
//!          back to back while batches are ready
//!
//! in a mirrored order (shut, queue, open, open, queue, shut, …) so drift
//! lands on every phase alike. Leaving `open` the window closes; a step
//! then running finishes (`closing`). Each request is also classed by
//! the scheduler's state when it was sent, from the transitions the daemon
//! stored. Latency counts from each request's scheduled send time.
//!
//!     cargo bench -p metaclaw --bench scheduler              # full run (~4 min)
//!     cargo bench -p metaclaw --bench scheduler -- --quick   # CI: proves it runs
//!
//! Options: --rate N (req/s)  --phase N (seconds a phase)  --cycles N
//!          --learn N (sessions the driver learns a second)
//!          --slow MS[,MS…] (the fake's latency per future; one setup
//!            each; default 0,2000: with 2000 a step takes ~10 s, longer
//!            than the scheduler's 5 s look, so windows close mid-step)
//!          --aa (the calendar stays busy and nothing is learned in any
//!            phase: the method's noise floor)
//!          --quick (short; exits non-zero if a request failed or fell
//!            back to `llm`, samples did not wait while the window was
//!            shut, or no window opened, trained and closed)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/student.rs"]
mod student;
use harness::{cpus, ms};
use student::{Admin, Daemon, Done, run_slice, threads, threads_line, threads_since};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Phase {
    Shut,
    Queue,
    Open,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Shut, Phase::Queue, Phase::Open];

    fn name(self) -> &'static str {
        match self {
            Phase::Shut => "shut",
            Phase::Queue => "queue",
            Phase::Open => "open",
        }
    }

    fn learns(self) -> bool {
        self != Phase::Shut
    }

    fn busy(self) -> bool {
        self != Phase::Open
    }
}

struct Options {
    rate: u32,
    phase: u32,
    cycles: u32,
    learn: f64,
    slow: Vec<u64>,
    aa: bool,
    quick: bool,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let value = |flag: &str| args.value(flag);
    Options {
        rate: value("--rate").and_then(|n| n.parse().ok()).unwrap_or(20),
        phase: value("--phase")
            .and_then(|n| n.parse().ok())
            .unwrap_or(if quick { 6 } else { 10 })
            .max(1),
        cycles: value("--cycles")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1)
            .max(1),
        learn: value("--learn")
            .and_then(|n| n.parse().ok())
            .unwrap_or(2.0f64)
            .max(0.1),
        slow: value("--slow")
            .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_else(|| if quick { vec![0] } else { vec![0, 2000] }),
        aa: args.has("--aa"),
        quick,
    }
}

/// The calendar the daemon reads on every look: `busy` puts an event
/// around now. Written whole and renamed, so no look sees half a file.
fn write_calendar(path: &std::path::Path, busy: bool) {
    let event = if busy {
        let now = chrono::Utc::now();
        let at = |t: chrono::DateTime<chrono::Utc>| t.format("%Y%m%dT%H%M%SZ").to_string();
        format!(
            "BEGIN:VEVENT\r\nUID:bench-busy@metaclaw\r\nDTSTAMP:{}\r\nDTSTART:{}\r\nDTEND:{}\r\nSUMMARY:Busy\r\nEND:VEVENT\r\n",
            at(now),
            at(now - chrono::Duration::hours(1)),
            at(now + chrono::Duration::days(1)),
        )
    } else {
        String::new()
    };
    let text = format!(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//metaclaw bench//EN\r\n{event}END:VCALENDAR\r\n"
    );
    let tmp = path.with_extension("ics.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Learns the pool's sessions at `per_sec`, until `stop`.
async fn drive(
    admin: Admin,
    pool: Arc<Mutex<VecDeque<String>>>,
    per_sec: f64,
    stop: Arc<AtomicBool>,
) -> (u32, Vec<String>) {
    let (mut learned, mut errors) = (0, Vec::new());
    let every = Duration::from_secs_f64(1.0 / per_sec);
    let mut next = tokio::time::Instant::now();
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep_until(next).await;
        next += every;
        let Some(session) = pool.lock().unwrap().pop_front() else {
            errors.push("the pool of sessions ran out (raise it, or lower --learn)".into());
            break;
        };
        let (status, body) = admin
            .post("/admin/learn/now", &json!({"session": session}))
            .await;
        match status {
            200 => learned += 1,
            _ => errors.push(format!("learn/now {status}: {body}")),
        }
    }
    (learned, errors)
}

/// The scheduler's state at each instant, from the stored transitions.
struct States(Vec<(i64, String, String)>);

impl States {
    fn read(daemon: &Daemon, status: &Value) -> Self {
        let conn = daemon.store(status).expect("the daemon's store");
        let mut stmt = conn
            .prepare("SELECT at_ms, from_state, to_state FROM scheduler_transitions ORDER BY id")
            .unwrap();
        let rows = stmt
            .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        Self(rows)
    }

    fn at(&self, ms: i64) -> &str {
        self.0
            .iter()
            .rev()
            .find(|(at, _, _)| *at <= ms)
            .map_or("closed", |(_, _, to)| to.as_str())
    }

    fn count(&self, from: &str, to: &str) -> usize {
        self.0
            .iter()
            .filter(|(_, f, t)| (from.is_empty() || f == from) && t == to)
            .count()
    }
}

fn sorted(mut v: Vec<Duration>) -> Vec<Duration> {
    v.sort();
    v
}

/// Everything measured for one `slow` value; `true` when the quick run's
/// conditions hold.
fn measure(opts: &Options, slow: u64, rt: &tokio::runtime::Runtime) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let calendar = dir.path().join("calendar.ics");
    write_calendar(&calendar, true);
    // The sleep window (UTC) holds for hours either side of the run.
    let now = chrono::Utc::now();
    let hhmm = |t: chrono::DateTime<chrono::Utc>| t.format("%H:%M").to_string();
    let daemon = Daemon::start(
        slow,
        "auto",
        false,
        &format!(
            "scheduler:\n  enabled: true\n  timezone: UTC\n  sleep_start: '{}'\n  \
             sleep_end: '{}'\n  min_window_minutes: 15\n  calendar:\n    ics_url: {}\n",
            hhmm(now - chrono::Duration::hours(2)),
            hhmm(now + chrono::Duration::hours(3)),
            calendar.display()
        ),
        rt,
    );
    let client = daemon.client().clone();
    let order: Vec<Phase> = (0..opts.cycles)
        .flat_map(|_| {
            let mut v = Phase::ALL.to_vec();
            v.extend(Phase::ALL.iter().rev());
            v
        })
        .collect();
    // The driver keeps its pace until the phase's last answer is in (up
    // to a request's latency after the phase): 5 s of slack a phase.
    let learning_phases = order.iter().filter(|p| p.learns()).count();
    let sessions =
        learning_phases * ((f64::from(opts.phase) + 5.0) * opts.learn).ceil() as usize + 4;
    let made = Instant::now();
    let ids = daemon.make_sessions(rt, "zorblax", sessions);
    let made = made.elapsed();
    let pool = Arc::new(Mutex::new(ids.into_iter().collect::<VecDeque<_>>()));
    println!(
        "\n## {}: rl.model on the fake; every future (samples, steps) ready after {slow} ms",
        daemon.model
    );
    println!(
        "# student ready {:.0} ms after start; {sessions} learning sessions made in {:.2} s",
        ms(daemon.ready),
        made.as_secs_f64()
    );

    let body = student::small_request();
    // Warm the path at the same rate; not counted.
    run_slice(rt, &client, &daemon.chat_url, &body, opts.rate, 1);

    // The bench's instants on the daemon's clock (transitions are stored
    // in ms since the epoch).
    let (base, base_ms) = (
        Instant::now(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    let epoch_ms = |at: Instant| base_ms + at.saturating_duration_since(base).as_millis() as i64;
    let version = |s: &Value| s["student"]["policy_version"].as_i64().unwrap_or(-1);
    let version_before = version(&rt.block_on(daemon.admin.status()));

    let mut by_phase: BTreeMap<Phase, (Vec<Duration>, usize, usize)> = BTreeMap::new();
    let mut sent: Vec<(i64, Duration)> = Vec::new();
    let mut per_thread: BTreeMap<Phase, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    let mut learned = 0;
    let mut errors = Vec::new();
    // Ready samples and the policy version at the end of each busy phase
    // that learned: samples wait, nothing trains.
    let mut queued = Vec::new();
    let mut failures = Vec::new();
    for (i, &phase) in order.iter().enumerate() {
        let (busy, learns) = match opts.aa {
            true => (true, false),
            false => (phase.busy(), phase.learns()),
        };
        if i == 0 || (!opts.aa && order[i - 1].busy() != busy) {
            write_calendar(&calendar, busy);
        }
        let v0 = version(&rt.block_on(daemon.admin.status()));
        let threads_before = threads(daemon.pids[0]);
        let stop = Arc::new(AtomicBool::new(false));
        let driver = learns.then(|| {
            rt.spawn(drive(
                daemon.admin.clone(),
                pool.clone(),
                opts.learn,
                stop.clone(),
            ))
        });
        let done = run_slice(rt, &client, &daemon.chat_url, &body, opts.rate, opts.phase);
        if let Some(driver) = driver {
            stop.store(true, Ordering::SeqCst);
            let (n, e) = rt.block_on(driver).unwrap();
            learned += n;
            errors.extend(e);
        }
        threads_since(
            &threads_before,
            threads(daemon.pids[0]),
            per_thread.entry(phase).or_default(),
        );
        let entry = by_phase.entry(phase).or_default();
        for d in done {
            match d {
                Done::Student(at, l, _) => {
                    entry.0.push(l);
                    sent.push((epoch_ms(at), l));
                }
                Done::FellBack => entry.2 += 1,
                Done::Failed(why) => {
                    entry.1 += 1;
                    failures.push(format!("{}: {why}", phase.name()));
                }
            }
        }
        if learns && phase == Phase::Queue && order.get(i + 1) == Some(&Phase::Open) {
            let s = rt.block_on(daemon.admin.status());
            queued.push((
                s["training"]["queue"]["ready"].as_i64().unwrap_or(0),
                version(&s) - v0,
            ));
        }
    }
    let status = rt.block_on(daemon.admin.status());
    let states = States::read(&daemon, &status);
    let steps = version(&status) - version_before;

    println!("{}", student::header("phase"));
    let empty = (Vec::new(), 0, 0);
    let base = sorted(by_phase.get(&Phase::Shut).unwrap_or(&empty).0.clone());
    for phase in Phase::ALL {
        let (lat, failed, fell_back) = by_phase.get(&phase).unwrap_or(&empty);
        let lat = sorted(lat.clone());
        println!("{}", student::row(phase.name(), &lat, *failed, *fell_back));
        if phase != Phase::Shut {
            println!("{}", student::added(" added", &base, &lat));
        }
    }
    // By the state the scheduler was in when each request was sent.
    let mut by_state: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    for (at, l) in &sent {
        by_state.entry(states.at(*at)).or_default().push(*l);
    }
    println!("{}", student::header("state"));
    for name in ["closed", "open", "training", "closing"] {
        let lat = sorted(by_state.get(name).cloned().unwrap_or_default());
        println!("{}", student::row(name, &lat, 0, 0));
        if name != "closed" && !lat.is_empty() {
            println!("{}", student::added(" added", &base, &lat));
        }
    }
    println!(
        "# scheduler: {} windows opened, {} closed ({} while a step ran), {} steps (policy version {version_before} -> {}); {learned} sessions learned; ready samples at the end of each queue phase, and steps in it: {queued:?}",
        states.count("closed", "open"),
        states.count("", "closed"),
        states.count("", "closing"),
        steps,
        version(&status),
    );
    for phase in Phase::ALL {
        println!(
            "# metaclaw threads in {} phases, cpu/run-queue wait ms: {}",
            phase.name(),
            threads_line(per_thread.get(&phase).unwrap_or(&BTreeMap::new()))
        );
    }
    println!(
        "# training queue at the end {}",
        status["training"]["queue"]
    );
    for f in failures.iter().take(3) {
        println!("# failed: {f}");
    }
    for e in errors.iter().take(3) {
        println!("# driver error: {e}");
    }
    let fell_back: usize = by_phase.values().map(|v| v.2).sum();
    let waited = !queued.is_empty()
        && queued
            .iter()
            .all(|(ready, stepped)| *ready >= 2 && *stepped == 0);
    let trained =
        waited && steps > 0 && states.count("closed", "open") > 0 && states.count("", "closed") > 0;
    let ok = failures.is_empty() && fell_back == 0 && errors.is_empty() && (opts.aa || trained);
    if !ok {
        daemon.print_log_tail(20);
    }
    ok
}

fn main() {
    let opts = options();
    let rt = harness::runtime();
    println!(
        "# metaclaw: serving from the student while the scheduler opens and closes training windows (mode: auto; release build, loopback)"
    );
    println!(
        "# {} CPUs; dummy upstream (llm, judge) and fake Tinker server, each its own process",
        cpus()
    );
    println!(
        "# {} req/s open-loop, latency from each request's scheduled send time; {} s phases: shut, queue, open, open, queue, shut (x{}); the driver learns {} sessions/s in queue and open",
        opts.rate, opts.phase, opts.cycles, opts.learn
    );
    if opts.aa {
        println!(
            "# A/A RUN: the window never opens and nothing is learned; every 'added' figure below is noise"
        );
    }
    let mut ok = true;
    for &slow in &opts.slow {
        ok &= measure(&opts, slow, &rt);
    }
    if opts.quick && !ok {
        println!(
            "# FAILED: a request failed or fell back, samples did not wait while shut, or no window opened, trained and closed"
        );
        std::process::exit(1);
    }
}
