//! The dashboard's sessions list over a large store (the dashboard issue:
//! "page load under 200 ms for the sessions list with 100k recorded
//! turns"). A store of 10,000 sessions of 10 turns each (100,000 turns) is
//! made with the crate's own migrations and filled by SQL in one
//! transaction; the real daemon (`metaclaw start`) is then started on it,
//! logged in to like a browser, and asked for, one request at a time:
//!
//!   healthz   GET /healthz: the baseline (the same server, no store read)
//!   first     GET /ui/sessions: the list's first page (newest 50)
//!   deep      GET /ui/sessions?after=…: a page ~100 "Older" links in
//!   filter    GET /ui/sessions?min_reward=0.5: a reward filter's first page
//!   sparse    GET /ui/sessions?min_reward=0.99: a filter few sessions pass,
//!             so the page walks (nearly) every session to fill itself
//!
//! interleaved in rounds (each round sends each once, in a rotating order)
//! so the machine's noise lands on all alike. Each is reported with its
//! p50/p99 and its p50 as a ratio of the baseline's. The same four lists
//! are also timed in process (`store::browse::sessions_page` on a fresh
//! read-only connection, as a page opens one), to tell the store's share of
//! a page from rendering and HTTP.
//!
//!     cargo bench -p metaclaw --bench dashboard              # full run (~1 min)
//!     cargo bench -p metaclaw --bench dashboard -- --quick   # CI: proves it runs
//!
//! Options: --sessions N  --turns N (per session)  --requests N (per kind)
//!          --keep DIR (the home and its store go there, an empty or new
//!            folder, and are left for a look with sqlite3)
//!          --quick (1,000 sessions, 10,000 turns, 30 requests each;
//!            exits non-zero only if a request fails, never on timing)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use metaclaw_core::store::browse::{self, Cursor, SessionFilter};
use metaclaw_core::store::sql::params;
use serde_json::json;

#[path = "support/harness.rs"]
mod harness;
use harness::{BIN, cpus, ms, percentile, spawn};

/// The acceptance criterion, for the full run's verdict.
const TARGET_MS: f64 = 200.0;
/// Rows a page of the list shows (host/core/src/ui/pages/sessions.rs).
const PAGE: u32 = 50;
/// "Older" links followed to reach the deep page.
const DEEP_PAGES: u32 = 100;

struct Options {
    sessions: u32,
    turns: u32,
    requests: u32,
    keep: Option<std::path::PathBuf>,
    quick: bool,
}

fn options() -> Options {
    let args = harness::Args::from_env();
    let quick = args.has("--quick");
    let value = |flag: &str, default: u32| {
        args.value(flag)
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
            .max(1)
    };
    Options {
        sessions: value("--sessions", if quick { 1_000 } else { 10_000 }),
        turns: value("--turns", 10),
        requests: value("--requests", if quick { 30 } else { 200 }),
        keep: args.value("--keep").map(Into::into),
        quick,
    }
}

/// splitmix64: the same store on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next().to_le_bytes());
        bytes[8..].copy_from_slice(&self.next().to_le_bytes());
        uuid::Builder::from_random_bytes(bytes)
            .into_uuid()
            .to_string()
    }
}

/// What the fill made.
struct Filled {
    sessions: u64,
    turns: u64,
    main_judged: u64,
    injected: u64,
    took: Duration,
}

const AGENTS: [(&str, f64); 5] = [
    ("openclaw", 0.60),
    ("hermes", 0.80),
    ("claude-cli", 0.90),
    ("python-requests", 0.95),
    ("", 1.0), // no agent recorded
];

const SKILLS: [&str; 20] = [
    "debug-rust-borrow",
    "write-commit-message",
    "summarize-meeting",
    "plan-trip",
    "sql-indexes",
    "git-rebase",
    "email-reply",
    "python-venv",
    "unit-tests-first",
    "read-stack-trace",
    "shell-quoting",
    "json-schema",
    "regex-escape",
    "docker-layers",
    "http-caching",
    "csv-cleanup",
    "calendar-conflicts",
    "budget-sheet",
    "recipe-scaling",
    "terse-answers",
];

/// Makes the store at `path` with the crate's own migrations, then fills
/// it: `sessions` sessions of `turns` turns, newest last, one session
/// every ~100 days / `sessions`, all ended but those active in the last
/// half hour. Every NOT NULL column gets a value as the writer would give
/// it; messages are content-addressed blobs, each turn resending the
/// history before it.
fn fill(path: &Path, sessions: u32, turns: u32) -> Filled {
    let started = Instant::now();
    let mut conn = metaclaw_core::store::Db::at(path).side_writer().unwrap();
    let mut rng = Rng(0x6d65_7461_636c_6177);
    let now = chrono::Utc::now().timestamp_millis();
    let span_ms: i64 = 100 * 24 * 3600 * 1000;
    let gap = span_ms / i64::from(sessions);
    let turn_gap: i64 = 20_000;
    // The newest session's last turn finishes before now.
    let end = now - i64::from(turns) * turn_gap - 10_000;
    let system =
        json!({"role": "system", "content": "You are a helpful personal assistant. ".repeat(40)});
    let system_text = system.to_string();
    let system_hash = metaclaw_core::digest::sha256_hex(system_text.as_bytes());
    let tools_text =
        json!([{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}])
            .to_string();
    let tools_hash = metaclaw_core::digest::sha256_hex(tools_text.as_bytes());
    let (mut n_turns, mut n_judged, mut n_injected) = (0u64, 0u64, 0u64);
    let tx = conn.transaction().unwrap();
    {
        let mut blob = tx
            .prepare("INSERT OR IGNORE INTO blobs (hash, json) VALUES (?1, ?2)")
            .unwrap();
        blob.execute(params![system_hash, system_text]).unwrap();
        blob.execute(params![tools_hash, tools_text]).unwrap();
        let mut session = tx
            .prepare(
                "INSERT INTO sessions (id, base_key, agent_session_id, source, window_index, status,
                                       started_at_ms, last_activity_ms, ended_at_ms, end_reason,
                                       turn_count, main_turns, last_message_count, agent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )
            .unwrap();
        let mut turn = tx
            .prepare(
                "INSERT INTO turns (id, session_id, seq, turn_type, api, model, upstream_model, stream, status,
                                    http_status, error, request_messages, tools_blob, request_params, response,
                                    usage, user_summary, response_summary, started_at_ms, finished_at_ms,
                                    total_ms, upstream_ms, ttft_ms, injected_skills, attempt, retry_of,
                                    served_by, fallback_reason, reward, scored_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
                         ?19, ?20, ?21, ?22, ?23, ?24, 1, NULL, 'llm', NULL, ?25, ?26)",
            )
            .unwrap();
        let mut skill = tx
            .prepare(
                "INSERT OR IGNORE INTO turn_skills (skill_id, at_ms, turn_id, version) VALUES (?1, ?2, ?3, ?4)",
            )
            .unwrap();
        let mut judgment = tx
            .prepare(
                "INSERT INTO turn_judgments (turn_id, value, votes, rationale, evidence, model, prompt_version, at_ms)
                 VALUES (?1, ?2, ?3, ?4, 'next-user-message', 'judge', 'v1', ?5)",
            )
            .unwrap();
        let mut event = tx
            .prepare("INSERT INTO session_events (session_id, kind, reason, at_ms) VALUES (?1, 'ended', ?2, ?3)")
            .unwrap();
        for i in 0..sessions {
            let start =
                end - span_ms + i64::from(i) * gap + rng.below(gap.max(2) as u64 / 2) as i64;
            let roll = rng.unit();
            let agent = AGENTS.iter().find(|(_, p)| roll < *p).map_or("", |a| a.0);
            let base = rng.uuid();
            let window = u32::from(agent == "openclaw" && rng.unit() < 0.05);
            let id = if window == 0 {
                base.clone()
            } else {
                format!("{base}:{window}")
            };
            let (source, agent_session_id) = match agent {
                "openclaw" => ("openclaw_runtime", Some(base.clone())),
                "hermes" => ("header", Some(format!("hermes-{}", &base[..8]))),
                _ => ("fingerprint", None),
            };
            let api = if agent == "claude-cli" {
                "messages"
            } else {
                "chat_completions"
            };
            // Most sessions are judged; their turns' rewards gather round
            // a mean of their own, so a reward filter keeps some of them.
            let judged = rng.unit() < 0.9;
            let bias = rng.unit() * 2.0 - 1.0;
            // When each turn starts and how long it takes, first: the
            // session's row (which its turns reference) sums them up.
            let timing: Vec<(i64, f64)> = (1..=turns)
                .map(|seq| {
                    let at = start + i64::from(seq - 1) * turn_gap + rng.below(5_000) as i64;
                    (at, 300.0 + rng.unit() * 4_000.0)
                })
                .collect();
            let last = timing
                .iter()
                .map(|(at, total)| at + *total as i64)
                .max()
                .unwrap_or(start);
            let main_turns = (1..=turns).filter(|seq| seq % 5 != 0).count() as i64;
            // The last turn's messages: the system prompt, each main turn's
            // question and answer before it, and its own question.
            let last_messages = 2 + 2 * (1..turns).filter(|seq| seq % 5 != 0).count() as i64;
            let active = last > now - 30 * 60 * 1000;
            let reason = match rng.below(10) {
                0..=6 => "idle",
                7 | 8 => "client_done",
                _ => "reset",
            };
            let ended_at = (last + 30 * 60 * 1000).min(now);
            session
                .execute(params![
                    id,
                    base,
                    agent_session_id,
                    source,
                    window,
                    if active { "active" } else { "ended" },
                    start,
                    last,
                    (!active).then_some(ended_at),
                    (!active).then_some(reason),
                    turns,
                    main_turns,
                    last_messages,
                    (!agent.is_empty()).then_some(agent),
                ])
                .unwrap();
            if !active {
                event.execute(params![id, reason, ended_at]).unwrap();
            }
            let mut history: Vec<String> = vec![system_hash.clone()];
            for seq in 1..=turns {
                let main = seq % 5 != 0;
                let (at, total) = timing[seq as usize - 1];
                let finished = at + total as i64;
                let turn_id = rng.uuid();
                let user = format!(
                    "Question {seq} of session {i}: how do I {}?",
                    SKILLS[rng.below(20) as usize]
                );
                let answer = format!(
                    "Here is how, step by step, for question {seq} of session {i}. {}",
                    "Detail. ".repeat(20)
                );
                let user_json = json!({"role": "user", "content": user}).to_string();
                let user_hash = metaclaw_core::digest::sha256_hex(user_json.as_bytes());
                blob.execute(params![user_hash, user_json]).unwrap();
                let mut messages = history.clone();
                messages.push(user_hash.clone());
                let usage = json!({"prompt_tokens": 600 + 40 * seq, "completion_tokens": 60, "total_tokens": 660 + 40 * seq});
                let response = json!({
                    "id": format!("chatcmpl-{}", &turn_id[..8]),
                    "object": "chat.completion",
                    "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                    "usage": usage,
                });
                let reward = (main && judged).then(|| {
                    let r = (bias + (rng.unit() - 0.5) * 0.6).clamp(-1.0, 1.0);
                    (r * 100.0).round() / 100.0
                });
                let injected: Vec<(&str, &str)> = if main && rng.unit() < 0.3 {
                    (0..1 + rng.below(2))
                        .map(|_| {
                            let s = SKILLS[rng.below(SKILLS.len() as u64) as usize];
                            (s, if rng.unit() < 0.5 { "1.0.0" } else { "1.1.0" })
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let injected_json = (!injected.is_empty()).then(|| {
                    json!(
                        injected
                            .iter()
                            .map(|(id, v)| json!({"id": id, "version": v, "score": 0.8}))
                            .collect::<Vec<_>>()
                    )
                    .to_string()
                });
                turn.execute(params![
                    turn_id,
                    id,
                    seq,
                    if main { "main" } else { "side" },
                    api,
                    "gpt-4o-mini",
                    "gpt-4o-mini-2024-07-18",
                    rng.unit() < 0.7,
                    "ok",
                    200,
                    Option::<String>::None,
                    serde_json::to_string(&messages).unwrap(),
                    Some(&tools_hash),
                    json!({"model": "gpt-4o-mini", "temperature": 0.7}).to_string(),
                    response.to_string(),
                    usage.to_string(),
                    user,
                    answer.chars().take(120).collect::<String>(),
                    at,
                    finished,
                    total,
                    total - 2.0,
                    Some(120.0 + rng.unit() * 400.0),
                    injected_json,
                    reward,
                    reward.map(|_| finished + 30_000),
                ])
                .unwrap();
                for (skill_id, version) in &injected {
                    skill
                        .execute(params![skill_id, at, turn_id, version])
                        .unwrap();
                    n_injected += 1;
                }
                if let Some(r) = reward {
                    let value = if r > 0.33 {
                        1
                    } else if r < -0.33 {
                        -1
                    } else {
                        0
                    };
                    judgment
                        .execute(params![
                            turn_id,
                            value,
                            json!([{"score": value, "rationale": "bench"}]).to_string(),
                            "The user went on without correcting it.",
                            finished + 30_000,
                        ])
                        .unwrap();
                    n_judged += 1;
                }
                if main {
                    let answer_json = json!({"role": "assistant", "content": answer}).to_string();
                    let answer_hash = metaclaw_core::digest::sha256_hex(answer_json.as_bytes());
                    blob.execute(params![answer_hash, answer_json]).unwrap();
                    history.push(user_hash);
                    history.push(answer_hash);
                }
                n_turns += 1;
            }
        }
    }
    // The outcomes per skill version, as migration 13 works them out.
    tx.execute_batch(
        "DELETE FROM skill_outcomes;
         INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
         SELECT id, version, count(*), count(reward), coalesce(sum(reward), 0), coalesce(sum(reward * reward), 0)
         FROM (SELECT DISTINCT t.id AS turn, json_extract(j.value, '$.id') AS id,
                      json_extract(j.value, '$.version') AS version, t.reward AS reward
               FROM turns t, json_each(t.injected_skills) j
               WHERE t.turn_type = 'main' AND t.injected_skills IS NOT NULL)
         GROUP BY id, version;
         INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
         SELECT '', '', count(*), count(reward), coalesce(sum(reward), 0), coalesce(sum(reward * reward), 0)
         FROM turns WHERE turn_type = 'main';",
    )
    .unwrap();
    tx.commit().unwrap();
    conn.sqlite()
        .unwrap()
        .pragma_update(None, "wal_checkpoint", "TRUNCATE")
        .unwrap();
    Filled {
        sessions: u64::from(sessions),
        turns: n_turns,
        main_judged: n_judged,
        injected: n_injected,
        took: started.elapsed(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Healthz,
    First,
    Deep,
    Filter,
    Sparse,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Healthz,
        Kind::First,
        Kind::Deep,
        Kind::Filter,
        Kind::Sparse,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Healthz => "healthz (baseline)",
            Kind::First => "sessions, first page",
            Kind::Deep => "sessions, deep page",
            Kind::Filter => "sessions, min_reward=0.5",
            Kind::Sparse => "sessions, min_reward=0.99",
        }
    }

    /// The list's filter and page, for the in-process timing.
    fn filter(self) -> SessionFilter {
        let min_reward = match self {
            Kind::Filter => Some(0.5),
            Kind::Sparse => Some(0.99),
            _ => None,
        };
        SessionFilter {
            min_reward,
            ..SessionFilter::default()
        }
    }
}

/// The dashboard as a logged-in browser sees it.
struct Browser {
    client: reqwest::Client,
    base: String,
    /// Where the login's pages are (`/ui/<key>`).
    ui: String,
    cookie: String,
}

impl Browser {
    async fn login(base: &str, token: &str) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let response = client
            .post(format!("{base}/ui/login"))
            .header("origin", base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&next=%2Fui%2Fsessions"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status().as_u16(),
            303,
            "the login was refused: {}",
            response.text().await.unwrap_or_default()
        );
        let ui = response.headers()["location"]
            .to_str()
            .unwrap()
            .strip_suffix("/sessions")
            .expect("the login leads to the sessions page")
            .to_string();
        let cookie = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                v.split(';')
                    .next()
                    .filter(|c| c.starts_with("metaclaw_ui="))
            })
            .expect("the login set no metaclaw_ui cookie")
            .to_string();
        Self {
            client,
            base: base.to_string(),
            ui,
            cookie,
        }
    }

    /// GET `path` (a dashboard page as `/ui…`, under the login's key): its
    /// status, its body and how long it took to the last byte.
    async fn get(&self, path: &str) -> (u16, String, Duration) {
        let path = match path.strip_prefix("/ui") {
            Some(rest) => format!("{}{rest}", self.ui),
            None => path.to_string(),
        };
        let started = Instant::now();
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await;
        match response {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                (status, body, started.elapsed())
            }
            Err(e) => (0, e.to_string(), started.elapsed()),
        }
    }
}

/// The "Older" link's `after=` value.
fn older(page: &str) -> Option<String> {
    let re = regex::Regex::new(r#"after=([^"&]+)" rel="next""#).unwrap();
    re.captures(page).map(|c| c[1].to_string())
}

/// Sessions listed on a page (links to `/ui/<key>/sessions/…`).
fn rows(page: &str) -> usize {
    let link = r#"<td><a href="/ui/"#;
    page.match_indices(link)
        .filter(|(at, _)| page[at + link.len()..].get(64..74) == Some("/sessions/"))
        .count()
}

fn row(name: &str, sorted: &[Duration], base_p50: f64) -> String {
    let p50 = ms(percentile(sorted, 50.0));
    format!(
        "{name:<28} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.1}x",
        sorted.len(),
        p50,
        ms(percentile(sorted, 99.0)),
        ms(*sorted.last().unwrap_or(&Duration::ZERO)),
        p50 / base_p50.max(1e-9)
    )
}

fn main() {
    let opts = options();
    let temp = tempfile::tempdir().unwrap();
    let home = opts
        .keep
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&home).unwrap();
    let db = home.join("metaclaw.db");
    assert!(!db.exists(), "{} exists already", db.display());
    let filled = fill(&db, opts.sessions, opts.turns);
    let db_mib = std::fs::metadata(&db).map_or(0.0, |m| m.len() as f64 / 1024.0 / 1024.0);

    let (_dummy, dummy_url) = harness::dummy();
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "llm:\n  api_base: {dummy_url}\nskills:\n  enabled: false\nlearning:\n  enabled: false\n\
             plugins:\n  builtin: false\nlog:\n  level: warn\nsessions:\n  idle_timeout: 1h\n"
        ),
    )
    .unwrap();
    let stderr = std::fs::File::create(home.join("stderr.log")).unwrap();
    let (daemon, base, to_listening) = spawn(
        {
            let mut c = Command::new(BIN);
            c.args(["start", "--foreground", "--port", "0"])
                .env("METACLAW_HOME", &home)
                .env("METACLAW_NO_WIRE", "1")
                .stderr(Stdio::from(stderr));
            c
        },
        "metaclaw listening on ",
    );
    let token = std::fs::read_to_string(home.join("admin.token"))
        .unwrap()
        .trim()
        .to_string();
    let rt = harness::runtime();

    println!(
        "# metaclaw dashboard: the sessions list over a large store (release build, loopback)"
    );
    println!(
        "# {} CPUs; store: {} sessions, {} turns ({} judged main turns, {} skill injections), {db_mib:.1} MiB",
        cpus(),
        filled.sessions,
        filled.turns,
        filled.main_judged,
        filled.injected
    );
    println!(
        "# store filled in {:.2} s (migrations + one SQL transaction); daemon start to listening {:.0} ms",
        filled.took.as_secs_f64(),
        ms(to_listening)
    );

    let mut failures: Vec<String> = Vec::new();
    let (browser, deep_path, first_bytes) = rt.block_on(async {
        let browser = Browser::login(&base, &token).await;
        // The deep page: follow "Older" links, as a reader paging back would.
        let (status, first, _) = browser.get("/ui/sessions").await;
        assert_eq!(status, 200, "GET /ui/sessions: {first}");
        let mut page = first.clone();
        let mut followed = 0;
        let limit = if opts.quick { 10 } else { DEEP_PAGES };
        let mut path = "/ui/sessions".to_string();
        while followed < limit {
            let Some(after) = older(&page) else { break };
            path = format!("/ui/sessions?after={after}");
            let (status, body, _) = browser.get(&path).await;
            assert_eq!(status, 200, "GET {path}: {body}");
            page = body;
            followed += 1;
        }
        println!(
            "# deep page: {followed} \"Older\" links in (sessions {}-{} of {}): {path}",
            followed * PAGE + 1,
            followed * PAGE + rows(&page) as u32,
            filled.sessions
        );
        (browser, path, first.len())
    });

    let paths = |kind: Kind| -> &str {
        match kind {
            Kind::Healthz => "/healthz",
            Kind::First => "/ui/sessions",
            Kind::Deep => &deep_path,
            Kind::Filter => "/ui/sessions?min_reward=0.5",
            Kind::Sparse => "/ui/sessions?min_reward=0.99",
        }
    };
    let kinds = Kind::ALL.len();
    let mut lat = vec![Vec::new(); kinds];
    let mut first_request = vec![Duration::ZERO; kinds];
    let mut listed = vec![0usize; kinds];
    rt.block_on(async {
        // Warm-up (connections, the OS cache, SQLite's schema parse):
        // not counted, but the very first of each is reported.
        for round in 0..5 {
            for kind in Kind::ALL {
                let (status, body, took) = browser.get(paths(kind)).await;
                if status != 200 {
                    failures.push(format!("{} {status}: {body}", paths(kind)));
                }
                if round == 0 {
                    first_request[kind as usize] = took;
                }
                listed[kind as usize] = rows(&body);
            }
        }
        for round in 0..opts.requests as usize {
            for k in 0..kinds {
                let kind = Kind::ALL[(round + k) % kinds];
                let (status, body, took) = browser.get(paths(kind)).await;
                if status != 200 {
                    failures.push(format!(
                        "{} {status}: {}",
                        paths(kind),
                        &body[..body.len().min(300)]
                    ));
                    continue;
                }
                if matches!(kind, Kind::First | Kind::Deep | Kind::Filter) && rows(&body) == 0 {
                    let listed = body
                        .find("<tbody>")
                        .map_or("", |at| &body[at..body.len().min(at + 300)]);
                    failures.push(format!("{} listed no session: {listed}", paths(kind)));
                }
                lat[kind as usize].push(took);
            }
        }
    });
    for l in &mut lat {
        l.sort();
    }
    for (kind, n) in [(Kind::First, PAGE as usize), (Kind::Deep, PAGE as usize)] {
        if listed[kind as usize] != n {
            failures.push(format!(
                "{} listed {} sessions, not {n}",
                kind.name(),
                listed[kind as usize]
            ));
        }
    }

    // The store's share: the same lists in process, on a fresh read-only
    // connection each, as a page opens one.
    let deep_cursor = deep_path
        .split_once("after=")
        .and_then(|(_, c)| Cursor::parse(c));
    let lists: Vec<(Kind, Option<Cursor>)> = Kind::ALL[1..]
        .iter()
        .map(|&k| {
            (
                k,
                if k == Kind::Deep {
                    deep_cursor.clone()
                } else {
                    None
                },
            )
        })
        .collect();
    let mut store_lat: Vec<Vec<Duration>> = vec![Vec::new(); lists.len()];
    for round in 0..opts.requests as usize {
        for k in 0..lists.len() {
            let i = (round + k) % lists.len();
            let (kind, after) = &lists[i];
            let filter = kind.filter();
            let started = Instant::now();
            let conn = metaclaw_core::store::Db::at(&db).read().unwrap();
            let (page, _) = browse::sessions_page(&conn, &filter, after.as_ref(), PAGE).unwrap();
            let agents = browse::agents(&conn).unwrap();
            drop(conn);
            store_lat[i].push(started.elapsed());
            assert!(*kind == Kind::Sparse || !page.is_empty());
            assert!(!agents.is_empty());
        }
    }
    for l in &mut store_lat {
        l.sort();
    }

    let base_p50 = ms(percentile(&lat[Kind::Healthz as usize], 50.0));
    println!(
        "\n## GET over HTTP, logged in, one at a time, {} rounds (first page {} bytes)",
        opts.requests, first_bytes
    );
    println!(
        "{:<28} {:>5} {:>9} {:>9} {:>9} {:>10}",
        "request", "n", "p50 ms", "p99 ms", "max ms", "p50/base"
    );
    for kind in Kind::ALL {
        println!("{}", row(kind.name(), &lat[kind as usize], base_p50));
    }
    println!(
        "# the first request of each (cold): {}",
        Kind::ALL
            .iter()
            .map(|k| format!("{} {:.2} ms", k.name(), ms(first_request[*k as usize])))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "\n## the store's share: browse::sessions_page + agents on a fresh read-only connection, in process"
    );
    println!(
        "{:<28} {:>5} {:>9} {:>9} {:>9} {:>10}",
        "list", "n", "p50 ms", "p99 ms", "max ms", "p50/base"
    );
    for (i, (kind, _)) in lists.iter().enumerate() {
        println!("{}", row(kind.name(), &store_lat[i], base_p50));
    }

    let first_p99 = ms(percentile(&lat[Kind::First as usize], 99.0));
    if !opts.quick {
        println!(
            "\n# verdict: sessions first page p99 {first_p99:.1} ms with {} recorded turns: {} the {TARGET_MS:.0} ms target",
            filled.turns,
            if first_p99 < TARGET_MS {
                "UNDER"
            } else {
                "OVER"
            }
        );
    }
    drop(daemon);
    if !failures.is_empty() {
        println!("\n# FAILED: {} request(s) failed:", failures.len());
        for f in failures.iter().take(10) {
            println!("#   {f}");
        }
        std::process::exit(1);
    }
}
