//! The store on Postgres against SQLite (issue W3-G), in one run: the same
//! requests sent straight to the dummy upstream (the baseline), through
//! metaclaw recording to its SQLite file, and through metaclaw recording to
//! a Postgres database, interleaved in one-second slices so that drift on a
//! noisy machine lands on all three. Then the throughput of one instance on
//! Postgres: open loop at rising rates until it no longer keeps up.
//!
//!     cargo bench -p metaclaw --bench store              # full run (~7 min)
//!     cargo bench -p metaclaw --bench store -- --quick   # CI: proves it runs
//!
//! Options: --rates 100,1000  --secs N (per side per rate, 1 s slices)
//!          --ramp 500,1000,1500,…,8000  --ramp-secs N (per side per rate)
//!          --max-p99-ms 50 (the ramp's bound: past it a side does not keep up)
//!          --sessions 50 (requests spread over that many sessions: a team)
//!          --idle-secs N (the idle instance's background writes)
//!
//! Postgres is a throwaway cluster started by this process
//! (`metaclaw_pg_cluster`, Debian's `postgresql`, `scripts/postgres-deps`)
//! with the durability a team runs it with: fsync, synchronous commits
//! and full-page writes on. Its CPU is the cluster's processes' CPU from
//! `/proc`; its writes per turn come from `pg_stat_database`,
//! `pg_stat_wal`, `pg_stat_user_tables` and the WAL insert position,
//! divided by the turns metaclaw says it recorded (`/metrics`), less what
//! an idle instance writes meanwhile (measured first).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "support/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{
    BIN, Proc, added_cells, cpu_secs, cpus, latency_cells, mib, ms, percentile, rss_kib, spawn,
};
use metaclaw_pg_cluster::{Cluster, Durability};
use serde_json::{Value, json};

/// How long one request may take before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for a side's write queue to empty after a rate.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// The most a write queue may take to empty after the last answer for the
/// side to keep up: a commit interval (100 ms) and a batch, with room to
/// spare. A writer that falls behind by 10% over a 10 s step is ~1 s late.
const WRITE_LAG: Duration = Duration::from_secs(1);

struct Options {
    rates: Vec<u32>,
    secs: u32,
    ramp: Vec<u32>,
    ramp_secs: u32,
    max_p99: Duration,
    sessions: u32,
    idle_secs: u32,
    quick: bool,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let list = |flag: &str, quick_default: &[u32], default: &[u32]| -> Vec<u32> {
        args.value(flag)
            .map(|r| r.split(',').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_else(|| {
                if quick {
                    quick_default.to_vec()
                } else {
                    default.to_vec()
                }
            })
    };
    let num = |flag: &str, quick_default: u32, default: u32| -> u32 {
        args.value(flag)
            .and_then(|v| v.parse().ok())
            .unwrap_or(if quick { quick_default } else { default })
    };
    Options {
        rates: list("--rates", &[100], &[100, 1000]),
        secs: num("--secs", 1, 10),
        ramp: list(
            "--ramp",
            &[500],
            &[500, 1000, 1500, 2000, 2500, 3000, 4000, 6000, 8000],
        ),
        ramp_secs: num("--ramp-secs", 1, 10),
        max_p99: Duration::from_millis(u64::from(num("--max-p99-ms", 50, 50))),
        sessions: num("--sessions", 50, 50).max(1),
        idle_secs: num("--idle-secs", 1, 20),
        quick,
    }
}

/// One way to reach the dummy.
struct Side {
    name: &'static str,
    /// The chat-completions endpoint.
    url: String,
    /// A metaclaw side: its process and base URL (for `/metrics`).
    metaclaw: Option<(u32, String)>,
}

#[derive(Default)]
struct Outcome {
    latencies: Vec<Duration>,
    errors: u32,
    /// From the first scheduled send to the last answer.
    span: Duration,
}

impl Outcome {
    fn sorted(mut self) -> Self {
        self.latencies.sort();
        self
    }
    fn merge(&mut self, other: Outcome) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.span += other.span;
    }
    fn answered_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.span.as_secs_f64().max(1e-9)
    }
}

/// One non-streamed request in session `session`; its latency from the
/// scheduled send time.
async fn one(
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    session: &str,
    scheduled: Instant,
) -> Option<Duration> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("x-session-id", session)
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

/// `rate` requests a second to `url` for `secs` seconds, open loop: an OS
/// thread keeps the schedule with precise sleeps (the async timer ticks in
/// whole milliseconds) and latency counts from each scheduled send time,
/// so a stall cannot hide by delaying the next send. Requests take turns
/// over `sessions` sessions named `{prefix}-{n}`, as a team's agents would
/// (one prefix per payload: a session belongs to the agent its first
/// request named, and OpenClaw's request names another). Waits for every
/// answer (or its timeout), so a side that falls behind cannot spill its
/// queue into the next side's slice.
fn open_loop(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    (prefix, sessions): (&str, u32),
    rate: u32,
    secs: u32,
) -> Outcome {
    let (tx, rx) = std::sync::mpsc::channel();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = Instant::now() + Duration::from_millis(5);
    let n = rate * secs;
    for i in 0..n {
        let scheduled = start + interval * i;
        let now = Instant::now();
        if scheduled > now {
            std::thread::sleep(scheduled - now);
        }
        let (client, url, body, tx) = (client.clone(), url.to_string(), body.clone(), tx.clone());
        let session = format!("{prefix}-{}", i % sessions);
        rt.spawn(async move {
            let result = one(&client, &url, &body, &session, scheduled).await;
            let _ = tx.send((result, Instant::now()));
        });
    }
    let mut out = Outcome::default();
    let mut last = start;
    for (result, at) in rx.iter().take(n as usize) {
        last = last.max(at);
        match result {
            Some(d) => out.latencies.push(d),
            None => out.errors += 1,
        }
    }
    out.span = last.saturating_duration_since(start);
    out
}

/// `/proc/<pid>/stat`'s fields after the `(comm)` and the state: the
/// parent is index 0, utime 10, stime 11, the reaped children's cutime 12
/// and cstime 13.
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(
        rest.split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// CPU seconds of `pid`'s threads named `name` (the store's writer is
/// `metaclaw-store`): whether one thread is the limit.
fn thread_cpu_secs(pid: u32, name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let mut ticks = 0;
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        let f: Vec<u64> = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        ticks += f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    }
    ticks as f64 / 100.0
}

/// The Postgres server: its postmaster's pid (from `postmaster.pid`).
struct Server {
    cluster: Cluster,
    postmaster: u32,
    database: String,
    url: String,
}

impl Server {
    fn start() -> Self {
        let cluster = Cluster::start(Durability::Durable).unwrap_or_else(|e| {
            panic!(
                "cannot start a Postgres cluster (scripts/postgres-deps installs Debian's postgresql): {e:#}"
            )
        });
        let url = cluster.fresh_database().unwrap();
        let database = url.rsplit('/').next().unwrap().to_string();
        let pidfile = std::fs::read_to_string(cluster.dir().join("data/postmaster.pid")).unwrap();
        let postmaster = pidfile.lines().next().unwrap().trim().parse().unwrap();
        Self {
            cluster,
            postmaster,
            database,
            url,
        }
    }

    /// CPU seconds of the whole server: the postmaster, its living
    /// processes (backends, WAL writer, checkpointer …) and the ones it has
    /// reaped (a backend whose connection closed).
    fn cpu_secs(&self) -> f64 {
        let Some(own) = stat_fields(self.postmaster) else {
            return 0.0;
        };
        let mut ticks = own[10] + own[11] + own[12] + own[13];
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
                if let Some(f) = stat_fields(pid)
                    && f[0] == u64::from(self.postmaster)
                {
                    ticks += f[10] + f[11];
                }
            }
        }
        ticks as f64 / 100.0
    }

    /// Its counters now. Read over a connection to another database, so
    /// the reading is not counted as metaclaw's work (`pg_stat_wal` is the
    /// whole cluster's: this reads no WAL). WAL bytes are the insert
    /// position's: exact at once, where the statistics lag.
    fn stats(&self) -> PgStats {
        let mut client =
            postgres::Client::connect(&self.cluster.url("postgres"), postgres::NoTls).unwrap();
        let row = client
            .query_one(
                "SELECT d.xact_commit, d.xact_rollback, d.tup_inserted, d.tup_updated,
                        d.tup_deleted, w.wal_records, w.wal_fpi,
                        pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8, w.wal_sync
                 FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = $1",
                &[&self.database],
            )
            .unwrap();
        let n = |i: usize| row.get::<_, i64>(i) as f64;
        PgStats {
            commits: n(0),
            rollbacks: n(1),
            inserted: n(2),
            updated: n(3),
            deleted: n(4),
            wal_records: n(5),
            wal_fpi: n(6),
            wal_bytes: row.get::<_, f64>(7),
            wal_syncs: n(8),
        }
    }

    /// Rows written per table (`pg_stat_user_tables`): inserted, updated,
    /// of which HOT (no index touched), deleted.
    fn tables(&self) -> BTreeMap<String, [f64; 4]> {
        let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        client
            .query(
                "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| {
                let n = |i: usize| r.get::<_, i64>(i) as f64;
                (r.get(0), [n(1), n(2), n(3), n(4)])
            })
            .collect()
    }

    fn describe(&self) -> String {
        let mut client =
            postgres::Client::connect(&self.cluster.url("postgres"), postgres::NoTls).unwrap();
        let show = |client: &mut postgres::Client, name: &str| -> String {
            client
                .query_one(&format!("SHOW {name}"), &[])
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_default()
        };
        let version = show(&mut client, "server_version");
        let settings: Vec<String> = [
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "wal_level",
            "shared_buffers",
        ]
        .iter()
        .map(|s| format!("{s}={}", show(&mut client, s)))
        .collect();
        format!(
            "Postgres {version} on 127.0.0.1 (throwaway cluster, same machine): {}",
            settings.join(" ")
        )
    }
}

/// `pg_stat_database` (metaclaw's database) and `pg_stat_wal` counters.
#[derive(Clone, Copy, Default)]
struct PgStats {
    commits: f64,
    rollbacks: f64,
    inserted: f64,
    updated: f64,
    deleted: f64,
    wal_records: f64,
    wal_fpi: f64,
    wal_bytes: f64,
    wal_syncs: f64,
}

impl PgStats {
    fn minus(&self, b: &PgStats) -> PgStats {
        PgStats {
            commits: self.commits - b.commits,
            rollbacks: self.rollbacks - b.rollbacks,
            inserted: self.inserted - b.inserted,
            updated: self.updated - b.updated,
            deleted: self.deleted - b.deleted,
            wal_records: self.wal_records - b.wal_records,
            wal_fpi: self.wal_fpi - b.wal_fpi,
            wal_bytes: self.wal_bytes - b.wal_bytes,
            wal_syncs: self.wal_syncs - b.wal_syncs,
        }
    }

    fn scaled(&self, f: f64) -> PgStats {
        PgStats {
            commits: self.commits * f,
            rollbacks: self.rollbacks * f,
            inserted: self.inserted * f,
            updated: self.updated * f,
            deleted: self.deleted * f,
            wal_records: self.wal_records * f,
            wal_fpi: self.wal_fpi * f,
            wal_bytes: self.wal_bytes * f,
            wal_syncs: self.wal_syncs * f,
        }
    }

    fn per(&self, n: f64) -> String {
        let n = n.max(1e-9);
        format!(
            "{:.3} commits, {:.3} rows inserted + {:.3} updated + {:.3} deleted, {:.2} WAL records ({:.3} full-page images), {:.0} WAL bytes, {:.4} WAL fsyncs{}",
            self.commits / n,
            self.inserted / n,
            self.updated / n,
            self.deleted / n,
            self.wal_records / n,
            self.wal_fpi / n,
            self.wal_bytes / n,
            self.wal_syncs / n,
            if self.rollbacks > 0.0 {
                format!(", {:.3} rollbacks", self.rollbacks / n)
            } else {
                String::new()
            }
        )
    }
}

/// The store counters metaclaw exports on `/metrics`.
#[derive(Clone, Copy, Default)]
struct StoreMetrics {
    recorded: f64,
    unrecorded: f64,
    queue: f64,
}

fn store_metrics(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    base: &str,
) -> StoreMetrics {
    let text = rt.block_on(async {
        client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()
    });
    let text = text.unwrap_or_default();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    StoreMetrics {
        recorded: value("metaclaw_turns_recorded_total "),
        unrecorded: value("metaclaw_turns_unrecorded_total "),
        queue: value("metaclaw_store_queue_depth "),
    }
}

/// Waits until `base`'s write queue is empty (every answered turn is in
/// the store, or counted unrecorded); how long that took, or `None` past
/// [`DRAIN_LIMIT`].
fn drain(rt: &tokio::runtime::Runtime, client: &reqwest::Client, base: &str) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < DRAIN_LIMIT {
        if store_metrics(rt, client, base).queue == 0.0 {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Waits for the server's statistics. A backend publishes its counters
/// when it goes idle, but not twice within a second: then it waits
/// `PGSTAT_IDLE_INTERVAL`, 10 s (Postgres 15's cumulative statistics), so
/// a count read sooner misses the last turns. `--quick` does not wait
/// that long (its figures prove the bench runs, nothing more).
fn settle_stats(opts: &Options) {
    std::thread::sleep(if opts.quick {
        Duration::from_millis(1500)
    } else {
        Duration::from_secs(11)
    });
}

fn metaclaw_home(dir: &Path, dummy: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        format!("llm:\n  api_base: {dummy}\nlog:\n  level: warn\nsessions:\n  idle_timeout: 1h\n"),
    )
    .unwrap();
    dir.to_path_buf()
}

/// `metaclaw start` in `home` (with `env`); its process and base URL.
fn start_metaclaw(home: &Path, env: &[(&str, &str)]) -> (Proc, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["start", "--foreground", "--port", "0"])
        .env("METACLAW_HOME", home)
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (proc, url, _) = spawn(cmd, "metaclaw listening on ");
    (proc, url)
}

/// `GET` with the admin token; the JSON body.
fn admin_get(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    home: &Path,
    base: &str,
    path: &str,
) -> Option<Value> {
    let token = std::fs::read_to_string(home.join("admin.token")).ok()?;
    rt.block_on(async {
        client
            .get(format!("{base}{path}"))
            .bearer_auth(token.trim())
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    })
}

/// Waits until the daemon has compiled and loaded its plugins and skills,
/// so that work is not counted in the first rate's CPU.
fn wait_loaded(rt: &tokio::runtime::Runtime, client: &reqwest::Client, home: &Path, base: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(180) {
        if let Some(status) = admin_get(rt, client, home, base, "/admin/status")
            && status["plugins"]["loaded"].as_u64().unwrap_or(0) > 0
            && status["skills"]["loaded"].as_u64().unwrap_or(0) > 0
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("metaclaw did not load its plugins and skills within 3 minutes");
}

fn row(label: &str, o: &Outcome) -> String {
    format!(
        "{label:<9} {:>6} {}",
        o.latencies.len(),
        latency_cells(&o.latencies)
    )
}

fn added(label: &str, base: &Outcome, o: &Outcome) -> String {
    format!(
        "{label:<9} {:>6} {}",
        "",
        added_cells(&base.latencies, &o.latencies)
    )
}

/// What one rate of the side-by-side cost, per side.
struct Costs {
    cpu: [f64; 3],
    pg_cpu: f64,
    pg: PgStats,
    /// From the counters before the rate to the counters after it, s.
    window: f64,
    /// Rows written per table over the rate (see [`Server::tables`]).
    tables: BTreeMap<String, [f64; 4]>,
    recorded: [f64; 3],
    unrecorded: [f64; 3],
}

/// The CPU and store counters now: metaclaw on SQLite, on Postgres, the
/// dummy; the server; the turns each metaclaw recorded.
struct Snapshot {
    cpu: [f64; 3],
    pg_cpu: f64,
    store: [StoreMetrics; 3],
}

fn snapshot(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    sides: &[Side],
    dummy_pid: u32,
    server: &Server,
) -> Snapshot {
    let mut cpu = [0.0; 3];
    let mut store = [StoreMetrics::default(); 3];
    for (i, side) in sides.iter().enumerate() {
        match &side.metaclaw {
            Some((pid, base)) => {
                cpu[i] = cpu_secs(*pid);
                store[i] = store_metrics(rt, client, base);
            }
            None => cpu[i] = cpu_secs(dummy_pid),
        }
    }
    Snapshot {
        cpu,
        pg_cpu: server.cpu_secs(),
        store,
    }
}

/// The side-by-side: `secs` rounds of one slice per side at `rate`, the
/// order rotating every round.
#[allow(clippy::too_many_arguments)]
fn side_by_side(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    sides: &[Side],
    (body, prefix): (&Arc<Vec<u8>>, &str),
    rate: u32,
    opts: &Options,
    dummy_pid: u32,
    server: &Server,
) -> ([Outcome; 3], Costs) {
    let mut out: [Outcome; 3] = Default::default();
    // Whatever came before (the warm-up, the last rate) is written and
    // counted by the server: the caller settled after it.
    let before = snapshot(rt, client, sides, dummy_pid, server);
    let t0 = Instant::now();
    let pg_before = server.stats();
    let tables_before = server.tables();
    for round in 0..opts.secs as usize {
        for k in 0..sides.len() {
            let i = (k + round) % sides.len();
            let o = open_loop(
                rt,
                client,
                &sides[i].url,
                body,
                (prefix, opts.sessions),
                rate,
                1,
            );
            out[i].merge(o);
        }
    }
    // CPU now: the run's work, not the wait for the statistics below.
    let mut after = snapshot(rt, client, sides, dummy_pid, server);
    for side in sides {
        if let Some((_, base)) = &side.metaclaw {
            drain(rt, client, base);
        }
    }
    settle_stats(opts);
    let pg = server.stats().minus(&pg_before);
    let window = t0.elapsed().as_secs_f64();
    let tables = server
        .tables()
        .into_iter()
        .map(|(name, after)| {
            let before = tables_before.get(&name).copied().unwrap_or_default();
            (name, std::array::from_fn(|k| after[k] - before[k]))
        })
        .filter(|(_, d): &(String, [f64; 4])| d.iter().any(|x| *x > 0.0))
        .collect();
    let settled = snapshot(rt, client, sides, dummy_pid, server);
    after.store = settled.store;
    let mut costs = Costs {
        cpu: [0.0; 3],
        pg_cpu: after.pg_cpu - before.pg_cpu,
        pg,
        window,
        tables,
        recorded: [0.0; 3],
        unrecorded: [0.0; 3],
    };
    for i in 0..3 {
        costs.cpu[i] = after.cpu[i] - before.cpu[i];
        costs.recorded[i] = after.store[i].recorded - before.store[i].recorded;
        costs.unrecorded[i] = after.store[i].unrecorded - before.store[i].unrecorded;
    }
    (out.map(Outcome::sorted), costs)
}

const DIRECT: usize = 0;
const SQLITE: usize = 1;
const POSTGRES: usize = 2;

/// Why a side did not keep up with `rate`, if it did not.
fn fell_behind(
    o: &Outcome,
    rate: u32,
    max_p99: Duration,
    recorded: Option<(f64, f64, Option<Duration>)>,
) -> Option<String> {
    let sent = o.latencies.len() as u32 + o.errors;
    let p99 = percentile(&o.latencies, 99.0);
    if o.errors * 1000 > sent {
        return Some(format!("{} of {sent} requests failed", o.errors));
    }
    if p99 > max_p99 {
        return Some(format!("p99 {:.1} ms > {:.0} ms", ms(p99), ms(max_p99)));
    }
    if o.answered_per_sec() < 0.95 * f64::from(rate) {
        return Some(format!(
            "answered {:.0}/s of {rate}/s",
            o.answered_per_sec()
        ));
    }
    if let Some((recorded, unrecorded, drained)) = recorded {
        if unrecorded > 0.0 {
            return Some(format!("{unrecorded:.0} turns unrecorded"));
        }
        match drained {
            None => {
                return Some(format!(
                    "write queue not empty {} s after the rate",
                    DRAIN_LIMIT.as_secs()
                ));
            }
            Some(d) if d > WRITE_LAG => {
                return Some(format!(
                    "its writes end {:.1} s after the last answer (> {:.0} s): the writer falls behind",
                    d.as_secs_f64(),
                    WRITE_LAG.as_secs_f64()
                ));
            }
            Some(_) => {}
        }
        if recorded < o.latencies.len() as f64 {
            return Some(format!(
                "{recorded:.0} turns recorded of {} answered",
                o.latencies.len()
            ));
        }
    }
    None
}

fn main() {
    let opts = options();
    let work = tempfile::tempdir().unwrap();
    let (dummy, dummy_url) = harness::dummy();
    let dummy_pid = dummy.pid();
    let server = Server::start();

    let sqlite_home = metaclaw_home(&work.path().join("sqlite"), &dummy_url);
    let pg_home = metaclaw_home(&work.path().join("postgres"), &dummy_url);
    let (sqlite, sqlite_url) = start_metaclaw(&sqlite_home, &[]);
    let (pg, pg_url) = start_metaclaw(&pg_home, &[("METACLAW_STORE_URL", &server.url)]);

    let rt = harness::runtime();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(4096)
        .tcp_nodelay(true)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap();
    wait_loaded(&rt, &client, &sqlite_home, &sqlite_url);
    wait_loaded(&rt, &client, &pg_home, &pg_url);

    let sides = [
        Side {
            name: "direct",
            url: format!("{dummy_url}/chat/completions"),
            metaclaw: None,
        },
        Side {
            name: "sqlite",
            url: format!("{sqlite_url}/v1/chat/completions"),
            metaclaw: Some((sqlite.pid(), sqlite_url.clone())),
        },
        Side {
            name: "postgres",
            url: format!("{pg_url}/v1/chat/completions"),
            metaclaw: Some((pg.pid(), pg_url.clone())),
        },
    ];

    println!(
        "# metaclaw's store: SQLite against Postgres (release build, loopback, dummy upstream)"
    );
    println!(
        "# {} CPUs; load generator, dummy, both metaclaws and Postgres share them",
        cpus()
    );
    println!("# {}", server.describe());
    if opts.quick {
        println!(
            "# --quick: Postgres's counters are read before they settle (see settle_stats): its per-turn figures mean nothing here"
        );
    }
    println!(
        "# SQLite: metaclaw's default (<home>/metaclaw.db, WAL, synchronous=NORMAL: no fsync per commit); \
         both metaclaws: default config, group commit every 100 ms (store.commit_interval)"
    );
    println!(
        "# open loop: latency from each request's scheduled send time; requests spread over {} sessions (x-session-id)",
        opts.sessions
    );

    let small = json!({"model": "echo", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say PONG"}]});
    let fixture: Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/openclaw/chat_completions_stream_request.json"
    ))
    .unwrap();
    let mut openclaw = fixture["body"].clone();
    openclaw["model"] = json!("echo");
    openclaw["stream"] = json!(false);
    let mut payloads = vec![("small chat request (non-streaming)", "small", small)];
    if !opts.quick {
        payloads.push((
            "OpenClaw's real first-turn request, 60 KB (non-streaming)",
            "openclaw",
            openclaw,
        ));
    }
    let bodies: Vec<Arc<Vec<u8>>> = payloads
        .iter()
        .map(|(_, _, p)| Arc::new(serde_json::to_vec(p).unwrap()))
        .collect();
    // Warm every path (connections, caches, every session, the blobs of
    // each payload) before anything is counted, then let it be written
    // and counted by the server.
    rt.block_on(async {
        for ((_, prefix, _), body) in payloads.iter().zip(&bodies) {
            for i in 0..200 {
                let session = format!("{prefix}-{}", i % opts.sessions);
                for side in &sides {
                    one(&client, &side.url, body, &session, Instant::now()).await;
                }
            }
        }
    });
    for base in [&sqlite_url, &pg_url] {
        drain(&rt, &client, base);
    }
    settle_stats(&opts);

    // The idle instance's own traffic (heartbeat, job polling, the skill
    // library's generation): what each instance adds with no turns. The
    // window includes the wait for the server's counters after it.
    let (cpu0, pg_cpu0, stats0) = (cpu_secs(pg.pid()), server.cpu_secs(), server.stats());
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(u64::from(opts.idle_secs)));
    settle_stats(&opts);
    let idle_wall = t0.elapsed().as_secs_f64();
    let background = server.stats().minus(&stats0);
    let per_sec = |x: f64| x / idle_wall;
    println!(
        "\n## an idle instance on Postgres, {idle_wall:.1} s: metaclaw {:.1} ms CPU/s, Postgres {:.1} ms CPU/s; \
         per second {:.2} commits ({:.2} rollbacks), {:.2} rows written, {:.0} WAL bytes, {:.2} WAL fsyncs",
        per_sec(cpu_secs(pg.pid()) - cpu0) * 1e3,
        per_sec(server.cpu_secs() - pg_cpu0) * 1e3,
        per_sec(background.commits),
        per_sec(background.rollbacks),
        per_sec(background.inserted + background.updated + background.deleted),
        per_sec(background.wal_bytes),
        per_sec(background.wal_syncs),
    );

    println!(
        "\n# side by side: direct, metaclaw on SQLite, metaclaw on Postgres; {} s per side per rate, interleaved 1 s slices (order rotating)",
        opts.secs
    );
    println!(
        "# added = side - direct at that percentile; pg - sqlite = Postgres side - SQLite side; cpu per request: that process's CPU \
         (user + system, /proc) over the rate / the requests it answered, idle work included"
    );
    // Per payload and rate: metaclaw CPU per turn on each store, the
    // server's, and its writes per turn (for the summary).
    let mut summary = Vec::new();
    let mut failed = Vec::new();
    for ((name, prefix, _), body) in payloads.iter().zip(&bodies) {
        println!("\n## {name}, {} bytes", body.len());
        println!(
            "{:<8} {:<9} {:>6} {:>9} {:>9} {:>9} {:>9}",
            "rate", "side", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        for &rate in &opts.rates {
            let (o, c) = side_by_side(
                &rt,
                &client,
                &sides,
                (body, prefix),
                rate,
                &opts,
                dummy_pid,
                &server,
            );
            let per_request = |cpu: f64, n: usize| cpu * 1e6 / n.max(1) as f64;
            println!("{:<8} {}", format!("{rate}/s"), row("direct", &o[DIRECT]));
            println!("{:<8} {}", "", row("sqlite", &o[SQLITE]));
            println!("{:<8} {}", "", added("added", &o[DIRECT], &o[SQLITE]));
            println!("{:<8} {}", "", row("postgres", &o[POSTGRES]));
            println!("{:<8} {}", "", added("added", &o[DIRECT], &o[POSTGRES]));
            println!("{:<8} {}", "", added("pg-sqlite", &o[SQLITE], &o[POSTGRES]));
            let all: usize = o.iter().map(|o| o.latencies.len()).sum();
            let (sq, pgm, srv) = (
                per_request(c.cpu[SQLITE], o[SQLITE].latencies.len()),
                per_request(c.cpu[POSTGRES], o[POSTGRES].latencies.len()),
                per_request(c.pg_cpu, o[POSTGRES].latencies.len()),
            );
            println!(
                "{:<8} cpu per request: metaclaw on sqlite {sq:.0} us; metaclaw on postgres {pgm:.0} us + postgres server {srv:.0} us = {:.0} us; dummy {:.0} us",
                "",
                pgm + srv,
                per_request(c.cpu[DIRECT], all),
            );
            println!(
                "{:<8} turns recorded: sqlite {:.0} of {} answered, postgres {:.0} of {}; unrecorded: {:.0}, {:.0}",
                "",
                c.recorded[SQLITE],
                o[SQLITE].latencies.len(),
                c.recorded[POSTGRES],
                o[POSTGRES].latencies.len(),
                c.unrecorded[SQLITE],
                c.unrecorded[POSTGRES],
            );
            // The instance's own background over the window (heartbeats,
            // polls; measured idle above) is not the turns' cost.
            let net = c.pg.minus(&background.scaled(c.window / idle_wall));
            println!(
                "{:<8} postgres per recorded turn: {}",
                "",
                net.per(c.recorded[POSTGRES])
            );
            println!(
                "{:<8}   (that is less the idle background over the {:.0} s window; with it: {:.3} commits, {:.0} WAL bytes)",
                "",
                c.window,
                c.pg.commits / c.recorded[POSTGRES].max(1e-9),
                c.pg.wal_bytes / c.recorded[POSTGRES].max(1e-9),
            );
            let turns = c.recorded[POSTGRES].max(1e-9);
            let by_table: Vec<String> = c
                .tables
                .iter()
                .map(|(name, [ins, upd, hot, del])| {
                    let mut parts = Vec::new();
                    if *ins > 0.0 {
                        parts.push(format!("{:.2} ins", ins / turns));
                    }
                    if *upd > 0.0 {
                        parts.push(format!("{:.2} upd ({:.2} HOT)", upd / turns, hot / turns));
                    }
                    if *del > 0.0 {
                        parts.push(format!("{:.2} del", del / turns));
                    }
                    format!("{name} {}", parts.join(" "))
                })
                .collect();
            println!(
                "{:<8} rows per recorded turn, by table: {}",
                "",
                by_table.join("; ")
            );
            let errors: Vec<String> = sides
                .iter()
                .zip(&o)
                .filter(|(_, o)| o.errors > 0)
                .map(|(s, o)| format!("{} {}", s.name, o.errors))
                .collect();
            if !errors.is_empty() {
                println!("{:<8} errors: {}", "", errors.join(", "));
            }
            // CI's check (never on timing): every request answered, every
            // answered turn recorded, on both stores.
            let lost = !errors.is_empty()
                || (SQLITE..=POSTGRES)
                    .any(|i| c.unrecorded[i] > 0.0 || c.recorded[i] < o[i].latencies.len() as f64);
            if lost {
                failed.push(format!("{name} at {rate}/s"));
            }
            summary.push((*name, rate, sq, pgm, srv, net, c.recorded[POSTGRES]));
        }
    }

    println!(
        "\n## throughput: one instance, open loop at rising rates, {} s per side per rate (direct, sqlite, postgres in turn)",
        opts.ramp_secs
    );
    println!(
        "# small chat request; a side keeps up while errors <= 0.1%, p99 <= {:.0} ms, it answers >= 95% of the rate, and every \
         answered turn is recorded, the last within {:.0} s of the last answer (drain: the write queue empty after it)",
        ms(opts.max_p99),
        WRITE_LAG.as_secs_f64()
    );
    println!(
        "# rec/s = turns recorded / (sending time + drain); cores = CPU seconds per wall second of sending: metaclaw (mc), \
         its store writer thread (wr), the Postgres server (pg)"
    );
    println!(
        "{:<8} {:<9} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>5} {:>5} {:>5}  verdict",
        "rate",
        "side",
        "n",
        "err",
        "answer/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "drain ms",
        "rec/s",
        "mc",
        "wr",
        "pg"
    );
    let mut behind: [Option<String>; 3] = Default::default();
    let mut highest: [Option<u32>; 3] = Default::default();
    for &rate in &opts.ramp {
        if behind[POSTGRES].is_some() {
            break;
        }
        for (i, side) in sides.iter().enumerate() {
            if behind[i].is_some() {
                continue;
            }
            let writer = |s: &Side| {
                s.metaclaw
                    .as_ref()
                    .map(|(pid, _)| thread_cpu_secs(*pid, "metaclaw-store"))
                    .unwrap_or(0.0)
            };
            let before = snapshot(&rt, &client, &sides, dummy_pid, &server);
            let writer_before = writer(side);
            let t0 = Instant::now();
            let o = open_loop(
                &rt,
                &client,
                &side.url,
                &bodies[0],
                ("small", opts.sessions),
                rate,
                opts.ramp_secs,
            )
            .sorted();
            let wall = t0.elapsed().as_secs_f64();
            let after = snapshot(&rt, &client, &sides, dummy_pid, &server);
            let writer_cpu = writer(side) - writer_before;
            let recorded = side.metaclaw.as_ref().map(|(_, base)| {
                let drained = drain(&rt, &client, base);
                let m = store_metrics(&rt, &client, base);
                (
                    m.recorded - before.store[i].recorded,
                    m.unrecorded - before.store[i].unrecorded,
                    drained,
                )
            });
            let verdict = fell_behind(&o, rate, opts.max_p99, recorded);
            let cores = |cpu: f64| format!("{:.2}", cpu / wall);
            let (drain_ms, rec_per_sec) = match recorded {
                Some((n, _, Some(d))) => (
                    format!("{:.0}", ms(d)),
                    format!("{:.0}", n / (o.span + d).as_secs_f64()),
                ),
                Some(_) => ("-".to_string(), "-".to_string()),
                None => (String::new(), String::new()),
            };
            println!(
                "{:<8} {:<9} {:>6} {:>5} {:>8.0} {:>8.3} {:>8.3} {:>8.3} {:>8} {:>6} {:>5} {:>5} {:>5}  {}",
                format!("{rate}/s"),
                side.name,
                o.latencies.len(),
                o.errors,
                o.answered_per_sec(),
                ms(percentile(&o.latencies, 50.0)),
                ms(percentile(&o.latencies, 99.0)),
                ms(*o.latencies.last().unwrap_or(&Duration::ZERO)),
                drain_ms,
                rec_per_sec,
                cores(after.cpu[i] - before.cpu[i]),
                if side.metaclaw.is_some() {
                    cores(writer_cpu)
                } else {
                    String::new()
                },
                if i == POSTGRES {
                    cores(after.pg_cpu - before.pg_cpu)
                } else {
                    String::new()
                },
                verdict.as_deref().unwrap_or("keeps up"),
            );
            match verdict {
                Some(v) => behind[i] = Some(format!("{v} at {rate}/s")),
                None => highest[i] = Some(rate),
            }
            // Let the machine and the server settle before the next side.
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let highest_line = |i: usize| match (highest[i], &behind[i]) {
        (Some(r), Some(why)) => format!("{r}/s (not {why})"),
        (Some(r), None) => format!("{r}/s (the highest rate tried)"),
        (None, Some(why)) => format!("none ({why})"),
        (None, None) => "not run".to_string(),
    };

    println!("\n## summary");
    for (i, side) in sides.iter().enumerate() {
        println!(
            "highest sustained rate, {:<9} {}",
            side.name,
            highest_line(i)
        );
    }
    for (name, rate, sq, pgm, srv, pgs, turns) in &summary {
        let short = if name.starts_with("small") {
            "small"
        } else {
            "60 KB"
        };
        println!(
            "{short} at {rate}/s: metaclaw {sq:.0} us/turn on sqlite ({:.0} turns/s per core), {pgm:.0} us on postgres ({:.0} turns/s per core) \
             + postgres server {srv:.0} us; per turn {:.3} commits, {:.2} rows, {:.0} WAL bytes",
            1e6 / sq.max(1e-9),
            1e6 / pgm.max(1e-9),
            pgs.commits / turns.max(1e-9),
            (pgs.inserted + pgs.updated + pgs.deleted) / turns.max(1e-9),
            pgs.wal_bytes / turns.max(1e-9),
        );
    }
    println!(
        "RSS after load: metaclaw on sqlite {:.1} MiB, on postgres {:.1} MiB",
        mib(rss_kib(sqlite.pid())),
        mib(rss_kib(pg.pid()))
    );
    drop((sqlite, pg, dummy));
    if !failed.is_empty() {
        println!(
            "FAILED: a request failed or an answered turn went unrecorded: {}",
            failed.join(", ")
        );
        if opts.quick {
            std::process::exit(1);
        }
    }
}
