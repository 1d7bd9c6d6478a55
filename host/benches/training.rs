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
//!          --canary (`canary.weights` on, half the sessions in each arm,
//!            each load request a session of its own: a step's weights
//!            serve the candidate arm beside the incumbent's until the
//!            driver's next cycle decides them by hand, promoted and
//!            rolled back in turn)
//!          --quick (short; exits non-zero if a request failed or fell back
//!            to `llm`, or no step and swap happened while training was on)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

#[path = "support/harness.rs"]
mod harness;
#[path = "support/student.rs"]
mod student;
use harness::{cpu_secs, cpus, ms, percentile};
use student::{Admin, Daemon, Done, make_session, run_slice, threads};

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
    canary: bool,
    quick: bool,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let value = |flag: &str| args.value(flag);
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
        aa: args.has("--aa"),
        canary: args.has("--canary"),
        quick,
    }
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
    /// Canaries decided by hand: promoted, rolled back.
    promoted: u32,
    rolled_back: u32,
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
    let mut testing: Option<i64> = None;
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
        // The weights under test since the last step (`--canary`) served
        // their arm while the learning job ran: decided now, promoted and
        // rolled back in turn, so the next step trains.
        if let Some(id) = testing.take() {
            let promote = (t.promoted + t.rolled_back) % 2 == 0;
            let decision = if promote { "promote" } else { "rollback" };
            let started = Instant::now();
            let (status, body) = admin
                .post(
                    &format!("/admin/experiments/{id}/decide"),
                    &json!({"decision": decision, "reason": "bench"}),
                )
                .await;
            t.step_spans.push((started, Instant::now()));
            match (status, promote) {
                (200, true) => t.promoted += 1,
                (200, false) => t.rolled_back += 1,
                _ => t
                    .errors
                    .push(format!("experiments/{id}/decide {status}: {body}")),
            }
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
                testing = body["under_test"].as_i64();
            }
            (200, Some("waiting")) => t.waiting += 1,
            (200, Some("no_signal")) => t.no_signal += 1,
            _ => t.errors.push(format!("train/step {status}: {body}")),
        }
    }
    // An "off" slice serves no weights under test: the last ones are
    // decided before it.
    if let Some(id) = testing {
        let (status, body) = admin
            .post(
                &format!("/admin/experiments/{id}/decide"),
                &json!({"decision": "promote", "reason": "bench"}),
            )
            .await;
        match status {
            200 => t.promoted += 1,
            _ => t
                .errors
                .push(format!("experiments/{id}/decide {status}: {body}")),
        }
    }
    t
}

/// Everything measured for one `slow` value; `true` when the quick run's
/// conditions hold (no failure, no fallback, at least one step and swap
/// while on).
fn measure(opts: &Options, slow: u64, rt: &tokio::runtime::Runtime) -> bool {
    // Training by hand: the driver's steps.
    let canary = match opts.canary {
        true => "canary:\n  weights: true\n  share: 0.5\n  min_sessions: 10000\n",
        false => "",
    };
    student::SESSION_EACH.store(opts.canary, std::sync::atomic::Ordering::Relaxed);
    let daemon = Daemon::start(slow, "rl", true, canary, rt);
    let (admin, chat_url, model) = (&daemon.admin, &daemon.chat_url, &daemon.model);
    let client = daemon.client().clone();
    let pids = daemon.pids;
    let ready = daemon.ready;

    // The sessions the driver learns, one a step: with futures ready at
    // once a cycle is ~0.1 s (the learning job), else ~5 futures' time.
    let sessions = opts.pool.unwrap_or(match slow {
        0 => opts.secs as usize * 12,
        _ => opts.secs as usize * 2 + 4,
    });
    let made = Instant::now();
    let ids = daemon.make_sessions(rt, "zorblax", sessions);
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

    let body = student::small_request();
    // Warm the path (connections, caches) at the same rate; not counted.
    run_slice(rt, &client, chat_url, &body, opts.rate, 1);

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
        let done = run_slice(rt, &client, chat_url, &body, opts.rate, opts.slice);
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
        student::threads_since(
            &threads_before,
            threads(pids[0]),
            &mut per_thread[side as usize],
        );
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

    println!("{}", student::header("side"));
    println!(
        "{}",
        student::row("off", &lat[0], failed[0].len(), fell_back[0])
    );
    println!(
        "{}",
        student::row("on", &lat[1], failed[1].len(), fell_back[1])
    );
    println!("{}", student::added("added", &lat[0], &lat[1]));

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
    if opts.canary {
        println!(
            "# canaries: {} decided by hand while on ({} promoted, {} rolled back); each step's weights served half the sessions until then",
            training
                .iter()
                .map(|t| t.promoted + t.rolled_back)
                .sum::<u32>(),
            training.iter().map(|t| t.promoted).sum::<u32>(),
            training.iter().map(|t| t.rolled_back).sum::<u32>(),
        );
    }
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
        println!(
            "# metaclaw threads {side}, cpu/run-queue wait ms: {}",
            student::threads_line(m)
        );
    }
    println!(
        "# student: {} samples, {} fallbacks; training queue {}",
        status["student"]["samples"], status["student"]["fallbacks"], status["training"]["queue"]
    );
    // Why samples were not trained (the driver's sessions should be).
    if let Some(conn) = daemon.store(&status) {
        let mut stmt = conn
            .prepare(
                "SELECT train_note, count(*) FROM turn_samples WHERE train_state = 'skipped'
                 GROUP BY train_note",
            )
            .unwrap();
        let notes: Vec<(Option<String>, i64)> = stmt
            .query_map((), |r| Ok((r.get(0)?, r.get(1)?)))
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
        daemon.print_log_tail(20);
    }
    ok
}

fn main() {
    let opts = options();
    let rt = harness::runtime();
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
    if opts.canary {
        println!(
            "# CANARY RUN: canary.weights on (share 0.5), each request a session of its own; a step's weights serve the candidate arm beside the incumbent until the next cycle decides them by hand"
        );
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
