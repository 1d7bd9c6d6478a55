//! The cost of calling a plugin: one call on a reused (pooled) instance,
//! against a fresh instance per call as the baseline, in the same run; and
//! calls from several threads at once. Plugins are the ones
//! scripts/build-plugins builds (Rust, QuickJS, Python).
//!
//!
//! Then the first-party scorers on a turn the size of OpenClaw's (its
//! fixture's conversation, a correction as the next message); with
//! `--before DIR`, also the same scorers built earlier (`DIR/metaclaw_*.wasm`,
//! e.g. a copy of target/first-party-plugins/wasm32-wasip2/release) in the
//! same run, as a before/after ratio.
//!
//!     scripts/build-plugins && cargo bench -p metaclaw --bench plugins
//!     cargo bench -p metaclaw --bench plugins -- --quick [--before DIR]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use metaclaw_core::plugins::types::{FinishedTurn, Message};
use metaclaw_core::plugins::{Grants, Limits, LoadedPlugin, PluginEngine};

fn load(engine: &Arc<PluginEngine>, rel: &str, pool_size: usize) -> Arc<LoadedPlugin> {
    let limits = Limits {
        pool_size,
        timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    common::load_built(engine, rel, Grants::default(), None, limits)
}

fn turn() -> FinishedTurn {
    let msg = |role: &str, content: &str| Message {
        role: role.into(),
        content: content.into(),
        tool_call_id: None,
        tool_calls: Vec::new(),
    };
    FinishedTurn {
        session_id: "bench".into(),
        turn_id: "t".into(),
        request: vec![msg("system", "You are terse."), msg("user", "Say PONG")],
        response: msg("assistant", "PONG"),
        tool_results: Vec::new(),
        next_user_message: Some("thanks".into()),
        status: "ok".into(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Latencies of `n` sequential calls.
fn timed(plugin: &LoadedPlugin, n: usize) -> Vec<Duration> {
    timed_on(plugin, &turn(), n)
}

fn timed_on(plugin: &LoadedPlugin, t: &FinishedTurn, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        std::hint::black_box(plugin.engine().block_on(plugin.score(t)).unwrap());
        out.push(start.elapsed());
    }
    out.sort();
    out
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let cache = tempfile::tempdir().unwrap();
    let engine = common::engine_with_cache(cache.path());
    let plugins = [
        (
            "Rust (tool-error)",
            "builtin/tool-error.wasm",
            if quick { 2_000 } else { 50_000 },
            if quick { 200 } else { 2_000 },
        ),
        (
            "JavaScript, QuickJS (refusals)",
            "examples/refusals.wasm",
            if quick { 1_000 } else { 20_000 },
            if quick { 50 } else { 500 },
        ),
        (
            "Python (frustration)",
            "examples/frustration.wasm",
            if quick { 1_000 } else { 20_000 },
            if quick { 10 } else { 100 },
        ),
    ];
    println!(
        "# plugin call cost: scorer.score(finished-turn) through metaclaw's host (release build)"
    );
    println!(
        "# pooled = reused instance (what the host does); fresh = new instance per call (the baseline)"
    );
    println!(
        "{:<32} {:>8} {:>10} {:>10} {:>10} {:>12}",
        "plugin", "mode", "p50 us", "p99 us", "mean us", "fresh/pooled"
    );
    for (label, rel, n_pooled, n_fresh) in plugins {
        let pooled = load(&engine, rel, 4);
        let fresh = load(&engine, rel, 0);
        timed(&pooled, 200); // warm
        let a = timed(&pooled, n_pooled);
        let b = timed(&fresh, n_fresh);
        let mean = |v: &[Duration]| us(v.iter().sum::<Duration>()) / v.len() as f64;
        println!(
            "{label:<32} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            "pooled",
            us(percentile(&a, 50.0)),
            us(percentile(&a, 99.0)),
            mean(&a)
        );
        println!(
            "{:<32} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>11.0}x",
            "",
            "fresh",
            us(percentile(&b, 50.0)),
            us(percentile(&b, 99.0)),
            mean(&b),
            mean(&b) / mean(&a)
        );
    }

    concurrency(&engine, quick);
    scorers(&engine, quick);
    println!(
        "\n# {} CPUs",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
}

/// Concurrent calls into one Rust plugin, throughput against one caller in
/// the same run, three ways: callers as threads blocking on the call (how
/// the scoring and learning threads call) with the default pool of 4, the
/// same with a pool as large as the callers (`plugins.pool_size`), and
/// callers as tasks on the plugin runtime (how a turn's retrieval calls:
/// `PluginEngine::spawn`), pools of 4 and 8.
fn concurrency(engine: &Arc<PluginEngine>, quick: bool) {
    let per_caller = if quick { 2_000 } else { 40_000 };
    println!("\n# concurrent calls into one Rust plugin, calls per second");
    println!(
        "{:<20} {:>8} {:>12} {:>10} {:>12}",
        "callers", "n", "calls/s", "p99 us", "vs 1 caller"
    );
    let pool4 = load(engine, "builtin/tool-error.wasm", 4);
    let pool8 = load(engine, "builtin/tool-error.wasm", 8);
    let rows: [(&str, &Arc<LoadedPlugin>, bool, &[usize]); 4] = [
        ("threads, pool of 4", &pool4, false, &[1, 2, 4, 8]),
        ("threads, pool of 8", &pool8, false, &[1, 8]),
        ("tasks, pool of 4", &pool4, true, &[1, 2, 4, 8]),
        ("tasks, pool of 8", &pool8, true, &[1, 8]),
    ];
    for (label, plugin, tasks, counts) in rows {
        timed(plugin, 200); // warm
        let mut single = 0.0;
        for &n in counts {
            let start = Instant::now();
            let mut all = if tasks {
                on_tasks(plugin, n, per_caller)
            } else {
                on_threads(plugin, n, per_caller)
            };
            let rate = (n * per_caller) as f64 / start.elapsed().as_secs_f64();
            all.sort();
            if n == 1 {
                single = rate;
            }
            println!(
                "{label:<20} {n:>8} {rate:>12.0} {:>10.1} {:>11.2}x",
                us(percentile(&all, 99.0)),
                rate / single
            );
        }
    }
}

fn on_threads(plugin: &Arc<LoadedPlugin>, n: usize, calls: usize) -> Vec<Duration> {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let p = plugin.clone();
            std::thread::spawn(move || timed(&p, calls))
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

fn on_tasks(plugin: &Arc<LoadedPlugin>, n: usize, calls: usize) -> Vec<Duration> {
    let engine = plugin.engine().clone();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let p = plugin.clone();
            engine.spawn(async move {
                let t = turn();
                let mut out = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let start = Instant::now();
                    std::hint::black_box(p.score(&t).await.unwrap());
                    out.push(start.elapsed());
                }
                out
            })
        })
        .collect();
    engine
        .block_on(futures_util::future::join_all(tasks))
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect()
}

/// A turn like OpenClaw's: its fixture's system prompt (~49 KB) and user
/// message, an answer, and a next message that corrects it.
fn openclaw_turn() -> FinishedTurn {
    let body = &common::fixture("chat_completions_stream_request.json")["body"];
    let msg = |role: &str, content: &str| Message {
        role: role.into(),
        content: content.into(),
        tool_call_id: None,
        tool_calls: Vec::new(),
    };
    let request = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| Some(msg(m["role"].as_str()?, m["content"].as_str()?)))
        .collect();
    FinishedTurn {
        session_id: "bench".into(),
        turn_id: "t".into(),
        request,
        response: msg(
            "assistant",
            "I updated the deployment script to point at the production database and restarted \
             the service. The migration ran cleanly; let me know if you want me to run the \
             integration tests as well.",
        ),
        tool_results: Vec::new(),
        next_user_message: Some(
            "[Sun 2026-11-22 08:45 UTC] Hmm, I asked you to check the staging config first. \
             Please roll it back to what it was yesterday and tell me which settings differ \
             between the two environments before touching anything else."
                .into(),
        ),
        status: "ok".into(),
    }
}

/// The first-party scorers on an OpenClaw-sized turn, per call on a pooled
/// instance; with `--before DIR`, the same scorers built earlier too.
fn scorers(engine: &Arc<PluginEngine>, quick: bool) {
    let args: Vec<String> = std::env::args().collect();
    let before = args
        .iter()
        .position(|a| a == "--before")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let n = if quick { 2_000 } else { 20_000 };
    let t = openclaw_turn();
    println!("\n# first-party scorers on an OpenClaw-sized turn (~49 KB system prompt), pooled");
    // The ratio of medians: the mean moves with what else the machine runs.
    println!(
        "{:<32} {:>8} {:>10} {:>10} {:>10} {:>15}",
        "scorer", "build", "p50 us", "p99 us", "mean us", "p50 before/now"
    );
    let mean = |v: &[Duration]| us(v.iter().sum::<Duration>()) / v.len() as f64;
    for name in ["correction", "repeated-refusals", "tool-error"] {
        let now = load(engine, &format!("builtin/{name}.wasm"), 4);
        timed_on(&now, &t, 200);
        let a = timed_on(&now, &t, n);
        println!(
            "{name:<32} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            "now",
            us(percentile(&a, 50.0)),
            us(percentile(&a, 99.0)),
            mean(&a)
        );
        let Some(dir) = &before else { continue };
        let path = dir.join(format!("metaclaw_{}.wasm", name.replace('-', "_")));
        let bytes = std::fs::read(&path).unwrap();
        let limits = Limits {
            pool_size: 4,
            timeout: Duration::from_secs(5),
            ..Limits::default()
        };
        let old = metaclaw_core::plugins::LoadedPlugin::probe(
            engine,
            path,
            &bytes,
            metaclaw_core::digest::sha256_hex(&bytes),
            metaclaw_core::plugins::Source::Builtin,
            &|_: metaclaw_core::plugins::Kind| limits.clone(),
        )
        .unwrap()
        .ready(Grants::default(), None);
        timed_on(&old, &t, 200);
        let b = timed_on(&old, &t, n);
        println!(
            "{:<32} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>14.2}x",
            "",
            "before",
            us(percentile(&b, 50.0)),
            us(percentile(&b, 99.0)),
            mean(&b),
            percentile(&b, 50.0).as_secs_f64() / percentile(&a, 50.0).as_secs_f64()
        );
    }
}
