//! The cost of calling a plugin: one call on a reused (pooled) instance,
//! against a fresh instance per call as the baseline, in the same run; and
//! calls from several threads at once. Plugins are the ones
//! scripts/build-plugins builds (Rust, QuickJS, Python).
//!
//!     scripts/build-plugins && cargo bench -p metaclaw --bench plugins
//!     cargo bench -p metaclaw --bench plugins -- --quick
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use metaclaw::plugins::types::{FinishedTurn, Message};
use metaclaw::plugins::{Grants, Limits, Loaded, PluginEngine};

fn load(engine: &Arc<PluginEngine>, rel: &str, pool_size: usize) -> Arc<Loaded> {
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
fn timed(plugin: &Loaded, n: usize) -> Vec<Duration> {
    let t = turn();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        std::hint::black_box(plugin.engine().block_on(plugin.score(&t)).unwrap());
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

    // Concurrent calls into one plugin: the pool hands each thread its own
    // instance. Throughput against one thread, same run.
    println!("\n# concurrent calls into one Rust plugin (pool of 4), calls per second");
    println!(
        "{:<10} {:>14} {:>10} {:>12}",
        "threads", "calls/s", "p99 us", "vs 1 thread"
    );
    let plugin = Arc::new(load(&engine, "builtin/tool-error.wasm", 4));
    let per_thread = if quick { 2_000 } else { 40_000 };
    let mut single = 0.0;
    for threads in [1usize, 2, 4, 8] {
        let start = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let p = plugin.clone();
                std::thread::spawn(move || timed(&p, per_thread))
            })
            .collect();
        let mut all: Vec<Duration> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let rate = (threads * per_thread) as f64 / start.elapsed().as_secs_f64();
        all.sort();
        if threads == 1 {
            single = rate;
        }
        println!(
            "{threads:<10} {rate:>14.0} {:>10.1} {:>11.2}x",
            us(percentile(&all, 99.0)),
            rate / single
        );
    }
    println!(
        "\n# {} CPUs",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
}
