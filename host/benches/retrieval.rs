//! Skill retrieval latency inside wasm: `retrieve()` of the first-party
//! retrievers through metaclaw's plugin host, over the built-in bank and
//! over 10,000 generated skills. The baseline, same run: the same call with
//! an empty query (the cost of the call itself).
//!
//! The embedding retriever gets its vectors from a deterministic hashing
//! embedder (384 dimensions, like all-MiniLM-L6-v2), so the figure is the
//! ranking alone; the time the host spends embedding the query is timed
//! separately, with the real model when it is available
//! (`--features local-embeddings` and METACLAW_TEST_MODEL_DIR).
//!
//! Then the outcome re-ranking (`skills::rank_relevant`, W2-H) of BM25's
//! answers, with every skill holding outcomes, against the same call with
//! `skills.outcome_weight: 0` (relevance alone), interleaved.
//!
//!     scripts/build-plugins --rust-only
//!     METACLAW_TEST_MODEL_DIR=… cargo bench -p metaclaw --features local-embeddings --bench retrieval
//!     cargo bench -p metaclaw --bench retrieval -- --quick
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/skillgen.rs"]
mod skillgen;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metaclaw_core::plugins::types::{Skill, TurnContext};
use skillgen::{builtin_bank, generated, queries};

use metaclaw_core::plugins::{
    EmbedAllowance, EmbedLedger, EmbedPurpose, Embedder, Grants, Limits, LoadedPlugin, PluginEngine,
};

const DIM: usize = 384;

/// Hashing embedder that also counts the time spent on queries.
#[derive(Default)]
struct Hashing {
    query_nanos: AtomicU64,
}

impl Embedder for Hashing {
    fn embed(
        &self,
        texts: &[String],
        purpose: EmbedPurpose,
    ) -> Result<Vec<Vec<f32>>, metaclaw_core::plugins::EmbedFailed> {
        let start = Instant::now();
        let out = texts
            .iter()
            .map(|t| metaclaw_mock_upstream::hashed_embedding(t, DIM))
            .collect();
        if purpose == EmbedPurpose::Query {
            self.query_nanos
                .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        Ok(out)
    }
}

fn load(engine: &Arc<PluginEngine>, rel: &str, embedder: Arc<Hashing>) -> Arc<LoadedPlugin> {
    // The host's defaults (pool of 4) but a deadline that a slow
    // moment on a shared machine cannot trip, and no recycling mid-run.
    let limits = Limits {
        timeout: Duration::from_secs(5),
        memory_bytes: 1 << 30,
        recycle_after: u32::MAX,
        ..Limits::default()
    };
    let grants = Grants::parse(&["embed".to_string()]).unwrap();
    let embedder: Arc<dyn Embedder> = embedder;
    // What is measured is ranking, on a free in-process embedder: indexing
    // 10,000 skills sends more text than a plugin's hourly budget allows.
    let ledger = EmbedLedger::new(EmbedAllowance {
        requests: 1 << 40,
        bytes: 1 << 50,
        window: Duration::from_secs(3600),
    });
    common::load_built_on(engine, rel, grants, Some(embedder), limits, &ledger)
}

fn context(query: &str) -> TurnContext {
    TurnContext {
        session_id: "bench".into(),
        turn_type: "main".into(),
        model: "m".into(),
        system_prompt: String::new(),
        messages: Vec::new(),
        query: query.into(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Row {
    p50: Duration,
    p99: Duration,
}

/// Latency of `retrieve(k = 24)` (what the host asks for with top_k 6),
/// minus the time the embedder spent on the query.
fn measure(
    plugin: &Arc<LoadedPlugin>,
    embedder: &Hashing,
    skills: &Arc<Vec<Skill>>,
    generation: u64,
    queries: &[String],
    n: usize,
) -> Row {
    let start = Instant::now();
    let engine = plugin.engine().clone();
    engine.block_on(plugin.warm(skills, generation)).unwrap();
    let indexed = start.elapsed();
    let mut times = Vec::with_capacity(n);
    for i in 0..(n + 50) {
        let ctx = context(&queries[i % queries.len()]);
        let before = embedder.query_nanos.load(Ordering::Relaxed);
        let start = Instant::now();
        let hits = engine
            .block_on(plugin.retrieve(skills, generation, &ctx, 24, None))
            .unwrap();
        let elapsed = start.elapsed();
        let embedding = embedder.query_nanos.load(Ordering::Relaxed) - before;
        std::hint::black_box(hits);
        if i >= 50 {
            times.push(elapsed.saturating_sub(Duration::from_nanos(embedding)));
        }
    }
    times.sort();
    let row = Row {
        p50: percentile(&times, 50.0),
        p99: percentile(&times, 99.0),
    };
    println!(
        "{:<10} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>10.0} {:>10.1}",
        plugin.info.name,
        skills.len(),
        us(row.p50),
        us(row.p99),
        us(percentile(&times, 100.0)),
        indexed.as_secs_f64() * 1e3,
        plugin.memory_in_use() as f64 / (1 << 20) as f64,
    );
    row
}

/// The cost of the call itself: an empty query returns at once.
fn floor(plugin: &Arc<LoadedPlugin>, skills: &Arc<Vec<Skill>>, generation: u64, n: usize) -> Row {
    let mut times = Vec::with_capacity(n);
    let ctx = context("");
    for _ in 0..n {
        let start = Instant::now();
        std::hint::black_box(
            plugin
                .engine()
                .block_on(plugin.retrieve(skills, generation, &ctx, 24, None))
                .unwrap(),
        );
        times.push(start.elapsed());
    }
    times.sort();
    Row {
        p50: percentile(&times, 50.0),
        p99: percentile(&times, 99.0),
    }
}

/// `skills` as the library's snapshot (evolved skills, as the outcomes
/// concern them most).
fn snapshot_of(skills: &[Skill]) -> metaclaw_core::skills::library::Snapshot {
    let list = skills
        .iter()
        .map(|s| {
            Arc::new(metaclaw_core::skills::skill::Skill {
                id: s.id.clone(),
                name: s.name.clone(),
                description: s.description.clone(),
                category: serde_json::from_value(serde_json::json!(s.category))
                    .unwrap_or(metaclaw_core::skills::skill::Category::General),
                tags: s.tags.clone(),
                version: semver::Version::parse(&s.version)
                    .unwrap_or_else(|_| semver::Version::new(1, 0, 0)),
                created_by: "evolved:bench".into(),
                component: None,
                provenance: None,
                retired: None,
                extra: serde_json::Map::new(),
                body: s.body.clone(),
                content_hash: String::new(),
            })
        })
        .collect();
    metaclaw_core::skills::library::Snapshot::new(list, Vec::new(), 1)
}

/// Outcomes for every skill: 0 to 60 judged turns each, rewards spread
/// over [-1, 1] (a fixed sequence), and every main turn's row.
fn board_of(skills: &[Skill]) -> metaclaw_core::skills::outcomes::Board {
    use metaclaw_core::store::outcomes::Sums;
    let mut rows = std::collections::HashMap::new();
    let mut all = Sums::default();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for s in skills {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let judged = ((x >> 33) % 61) as i64;
        let mean = ((x >> 13) % 2001) as f64 / 1000.0 - 1.0;
        let sums = Sums {
            injected: judged + 3,
            judged,
            reward_sum: mean * judged as f64,
            reward_sq: judged as f64 * mean * mean,
        };
        all.injected += sums.injected;
        all.judged += sums.judged;
        all.reward_sum += sums.reward_sum;
        all.reward_sq += sums.reward_sq;
        rows.insert((s.id.clone(), s.version.clone()), sums);
    }
    rows.insert((String::new(), String::new()), all);
    metaclaw_core::skills::outcomes::Board::new(rows)
}

/// The re-ranking of BM25's answers (k = 24) over `skills`, with and
/// without outcomes, interleaved; the added p99.
fn rerank(
    plugin: &Arc<LoadedPlugin>,
    skills: &Arc<Vec<Skill>>,
    generation: u64,
    queries: &[String],
    n: usize,
) {
    let engine = plugin.engine().clone();
    engine.block_on(plugin.warm(skills, generation)).unwrap();
    let hits: Vec<Vec<(String, f32)>> = queries
        .iter()
        .map(|q| {
            let mut h: Vec<(String, f32)> = engine
                .block_on(plugin.retrieve(skills, generation, &context(q), 24, None))
                .unwrap()
                .into_iter()
                .map(|r| (r.id, r.score))
                .collect();
            h.sort_by(|a, b| b.1.total_cmp(&a.1));
            h
        })
        .collect();
    let snapshot = snapshot_of(skills);
    let board = board_of(skills);
    // The default floors; the weight is the variable.
    let mut settings = metaclaw_core::skills::SelectionSettings::from_config(
        &metaclaw_core::config::Config::default(),
    );
    let (mut plain, mut weighted) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut relevant = 0usize;
    for i in 0..(n + 50) {
        let h = &hits[i % hits.len()];
        for (weight, times) in [(0.0f32, &mut plain), (0.3, &mut weighted)] {
            settings.outcome_weight = weight;
            let start = Instant::now();
            let order = metaclaw_core::skills::rank_relevant(h, &settings, &snapshot, &board);
            let elapsed = start.elapsed();
            relevant += order.len();
            std::hint::black_box(order);
            if i >= 50 {
                times.push(elapsed);
            }
        }
    }
    plain.sort();
    weighted.sort();
    println!(
        "{:<10} {:>7} {:>10.2} {:>10.2} {:>10.2} {:>10.2}   {:>5.1} {:>+10.2}",
        "bm25",
        skills.len(),
        us(percentile(&plain, 50.0)),
        us(percentile(&plain, 99.0)),
        us(percentile(&weighted, 50.0)),
        us(percentile(&weighted, 99.0)),
        relevant as f64 / (2 * (n + 50)) as f64,
        us(percentile(&weighted, 99.0)) - us(percentile(&plain, 99.0)),
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 200 } else { 5_000 };
    let cache = tempfile::tempdir().unwrap();
    let engine = common::engine_with_cache(cache.path());
    let bank = Arc::new(builtin_bank());
    let large = Arc::new(generated(10_000, &bank));
    let queries = queries();

    println!(
        "# skill retrieval inside wasm: retrieve(k = 24) through metaclaw's plugin host (release build)"
    );
    println!(
        "# {} queries from tests/data/retrieval-queries.yaml, cycled; {n} calls per row after 50 warm-up calls",
        queries.len()
    );
    println!(
        "# embedding: ranking only (384-dim vectors from a hashing embedder; query embedding time subtracted)"
    );
    println!(
        "{:<10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "retriever", "skills", "p50 us", "p99 us", "max us", "index ms", "wasm MiB"
    );
    for rel in ["builtin/bm25.wasm", "builtin/embedding.wasm"] {
        let embedder = Arc::new(Hashing::default());
        let plugin = load(&engine, rel, embedder.clone());
        measure(&plugin, &embedder, &bank, 1, &queries, n);
        let big = measure(&plugin, &embedder, &large, 2, &queries, n);
        let base = floor(&plugin, &large, 2, n);
        println!(
            "{:<10} {:>7} {:>10.1} {:>10.1}   (baseline: the call with an empty query; 10k p99 = {:.0}x it)",
            "",
            "empty",
            us(base.p50),
            us(base.p99),
            us(big.p99) / us(base.p99)
        );
    }
    println!(
        "\n# outcome re-ranking of the relevant candidates (skills::rank_relevant), every skill with outcomes; baseline: outcome_weight 0, interleaved"
    );
    println!(
        "{:<10} {:>7} {:>10} {:>10} {:>10} {:>10}   {:>5} {:>10}",
        "retriever", "skills", "w=0 p50", "w=0 p99", "w=.3 p50", "w=.3 p99", "cands", "added p99"
    );
    let bm25 = load(&engine, "builtin/bm25.wasm", Arc::new(Hashing::default()));
    rerank(&bm25, &bank, 1, &queries, n);
    rerank(&bm25, &large, 2, &queries, n);
    query_embedding(&queries, quick);
    println!(
        "\n# {} CPUs",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
}

#[cfg(feature = "local-embeddings")]
fn query_embedding(queries: &[String], quick: bool) {
    use metaclaw_core::embeddings::Backend;
    println!(
        "\n# the query's own embedding: all-MiniLM-L6-v2 on the CPU (candle), one query per call"
    );
    let Ok(dir) = std::env::var("METACLAW_TEST_MODEL_DIR") else {
        println!(
            "skipped: set METACLAW_TEST_MODEL_DIR to the model folder (scripts/test fetches it)"
        );
        return;
    };
    let dir = metaclaw_core::embeddings::model_dir(std::path::Path::new(&dir)).unwrap();
    let model = metaclaw_core::embeddings::minilm::MiniLm::open(&dir).unwrap();
    let start = Instant::now();
    model.embed(&queries[..1]).unwrap();
    let load = start.elapsed();
    let rounds = if quick { 1 } else { 5 };
    let mut times = Vec::new();
    for _ in 0..rounds {
        for q in queries {
            let start = Instant::now();
            std::hint::black_box(model.embed(std::slice::from_ref(q)).unwrap());
            times.push(start.elapsed());
        }
    }
    times.sort();
    println!(
        "{:<10} {:>7} {:>10.0} {:>10.0}   (load and first query: {:.0} ms)",
        "minilm",
        times.len(),
        us(percentile(&times, 50.0)),
        us(percentile(&times, 99.0)),
        load.as_secs_f64() * 1e3
    );
}

#[cfg(not(feature = "local-embeddings"))]
fn query_embedding(_queries: &[String], _quick: bool) {
    println!(
        "\n# the query's own embedding: build with --features local-embeddings to time all-MiniLM-L6-v2"
    );
}
