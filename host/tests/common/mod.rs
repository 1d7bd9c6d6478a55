//! Test harness: the real `metaclaw` binary, started on port 0 against the
//! dummy upstream (also the real binary), talked to over loopback HTTP.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod rl_daemon;
pub mod skyrl;
pub mod wat;
pub mod wit;

pub const BIN: &str = env!("CARGO_BIN_EXE_metaclaw");

/// Gives `home` the compile cache of the first-party plugins, compiled once
/// per test binary: every daemon a test starts would otherwise compile the
/// same nine components again, which on a slow 2-core machine is most of a
/// test's CPU (what the first start does is tested on its own, cold).
pub fn warm_plugin_cache(home: &Path) {
    static WARM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let warm = WARM.get_or_init(|| {
        // Kept between runs: an entry is keyed by the component's sha256
        // and the engine, so a rebuilt binary or plugin only misses.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("warm-plugin-cache");
        std::fs::create_dir_all(&dir).unwrap();
        let out = cli_in(&dir, &["plugins", "list"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    });
    let cache = home.join("cache/plugins");
    std::fs::create_dir_all(&cache).unwrap();
    for entry in std::fs::read_dir(warm.join("cache/plugins")).unwrap() {
        let entry = entry.unwrap();
        // Not another run's half-written temp file.
        if !entry.file_name().to_string_lossy().starts_with('.') {
            std::fs::copy(entry.path(), cache.join(entry.file_name())).unwrap();
        }
    }
    std::fs::copy(warm.join("plugin-cache.key"), home.join("plugin-cache.key")).unwrap();
}

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` and waits for the stdout line starting with `prefix`; the
/// rest of that line is the URL. Later stdout is drained in the background.
fn spawn_and_wait(cmd: Command, prefix: &str) -> Proc {
    spawn_and_wait_for(cmd, prefix, Duration::from_secs(20))
}

/// [`spawn_and_wait`], waiting up to `limit` for the line.
pub fn spawn_and_wait_for(mut cmd: Command, prefix: &str, limit: Duration) -> Proc {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn metaclaw");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = prefix.to_string();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !sent && let Some(url) = line.strip_prefix(&prefix) {
                let _ = tx.send(url.trim().to_string());
                sent = true;
            }
        }
    });
    let url = match rx.recv_timeout(limit) {
        Ok(url) => url,
        Err(_) => {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "process did not report its address; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    Proc { child, url }
}

/// The dummy upstream; `url` is its base URL (ending in /v1).
pub fn dummy() -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["dev", "upstream", "--port", "0"])
        .stderr(Stdio::null());
    spawn_and_wait(cmd, "dummy upstream listening on ")
}

/// The dummy upstream answering 401 to API requests without `key`.
pub fn dummy_requiring_key(key: &str) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["dev", "upstream", "--port", "0", "--require-key", key])
        .stderr(Stdio::null());
    spawn_and_wait(cmd, "dummy upstream listening on ")
}

pub struct Metaclaw {
    pub proc: Proc,
    pub home: tempfile::TempDir,
}

impl Metaclaw {
    /// Starts metaclaw in the foreground on port 0 with `config` as its
    /// config.yaml (`{upstream}` is replaced by the upstream base URL).
    pub fn start(upstream: &str, config: &str) -> Self {
        Self::start_with_env(upstream, config, &[])
    }

    pub fn start_with_env(upstream: &str, config: &str, env: &[(&str, &str)]) -> Self {
        let home = tempfile::tempdir().unwrap();
        warm_plugin_cache(home.path());
        let config = config.replace("{upstream}", upstream);
        std::fs::write(home.path().join("config.yaml"), config).unwrap();
        let log = std::fs::File::create(home.path().join("test-stderr.log")).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["start", "--foreground", "--port", "0"])
            .env("METACLAW_HOME", home.path())
            .env_remove("METACLAW_LLM_API_KEY")
            .env_remove("METACLAW_PROXY_API_KEY")
            // Never wire the developer's real agent from a test.
            .env("METACLAW_NO_WIRE", "1")
            // A test's library holds what the test puts there.
            .env("METACLAW_NO_BUILTIN_SKILLS", "1")
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let proc = spawn_and_wait(cmd, "metaclaw listening on ");
        Self { proc, home }
    }

    pub fn url(&self) -> &str {
        &self.proc.url
    }

    /// Kills the daemon (SIGKILL: no clean shutdown) and starts it again in
    /// the same home.
    pub fn kill_and_restart(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.home.path().join("test-stderr.log"))
            .unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["start", "--foreground", "--port", "0"])
            .env("METACLAW_HOME", self.home.path())
            .env_remove("METACLAW_LLM_API_KEY")
            .env_remove("METACLAW_PROXY_API_KEY")
            // Never wire the developer's real agent from a test.
            .env("METACLAW_NO_WIRE", "1")
            // A test's library holds what the test puts there.
            .env("METACLAW_NO_BUILTIN_SKILLS", "1")
            .stderr(log);
        self.proc = spawn_and_wait(cmd, "metaclaw listening on ");
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        cli_in(self.home.path(), args)
    }

    /// `learn now ID`: runs session `id`'s learning job now (ending the
    /// session); fails the test, with the daemon's log, if it fails.
    pub fn learn_now(&self, id: &str) {
        let out = self.cli(&["learn", "now", id]);
        assert!(
            out.status.success(),
            "learn now {id}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    /// `sessions show ID --json` once the session's learning job is done.
    pub fn learned(&self, id: &str) -> Value {
        poll_json(self.home.path(), &["sessions", "show", id, "--json"], |v| {
            v["learning"]["state"] == "done"
        })
    }

    /// `sessions show ID --json`, polled until `ready` holds (the store
    /// commits shortly after the answer is delivered).
    pub fn session_until(&self, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.cli(&["sessions", "show", id, "--json", "--messages"]);
            if out.status.success() {
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                if ready(&v) {
                    return v;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "session {id} never became ready; last: {}{}\nlog:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn turns(&self, id: &str, n: usize) -> Value {
        self.session_until(id, |v| v["turns"].as_array().is_some_and(|t| t.len() >= n))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("test-stderr.log")).unwrap_or_default()
    }
}

pub fn cli_in(home: &Path, args: &[&str]) -> Output {
    cli_with_env(home, args, &[])
}

/// A machine without CA certificates (a bare container), as environment:
/// `SSL_CERT_FILE` and `SSL_CERT_DIR`, which replace the system's store
/// when set, name a missing file and an empty folder.
pub struct NoCaCertificates {
    _dir: tempfile::TempDir,
    file: String,
    dir: String,
}

impl NoCaCertificates {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self {
            file: dir.path().join("none.pem").to_str().unwrap().to_string(),
            dir: dir.path().to_str().unwrap().to_string(),
            _dir: dir,
        }
    }

    pub fn env(&self) -> [(&str, &str); 2] {
        [("SSL_CERT_FILE", &self.file), ("SSL_CERT_DIR", &self.dir)]
    }
}

/// [`cli_in`] with `env` set as well.
pub fn cli_with_env(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("METACLAW_HOME", home)
        .env_remove("METACLAW_LLM_API_KEY")
        .env_remove("METACLAW_PROXY_API_KEY")
        // Never wire the developer's real agent from a test.
        .env("METACLAW_NO_WIRE", "1")
        // A test's library holds what the test puts there.
        .env("METACLAW_NO_BUILTIN_SKILLS", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run metaclaw")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub fn chat(model: &str, text: &str, stream: bool) -> Value {
    serde_json::json!({
        "model": model,
        "stream": stream,
        "stream_options": { "include_usage": true },
        "messages": [
            { "role": "system", "content": "You are terse." },
            { "role": "user", "content": text },
        ],
    })
}

/// POSTs JSON to `{base}/chat/completions`.
pub async fn post_chat(base: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client()
        .post(format!("{base}/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// One non-streamed turn of session `id` through metaclaw: the answer's
/// text and the turn's id (its `x-metaclaw-turn-id` header).
pub async fn session_turn(mc: &Metaclaw, id: &str, messages: &[Value]) -> (String, String) {
    let r = post_chat(
        &format!("{}/v1", mc.url()),
        &serde_json::json!({"model": "m", "messages": messages}),
        &[("x-session-id", id)],
    )
    .await;
    assert!(r.status().is_success(), "{}", r.status());
    let turn_id = r.headers()["x-metaclaw-turn-id"]
        .to_str()
        .unwrap()
        .to_string();
    let answer: Value = r.json().await.unwrap();
    let text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    (text, turn_id)
}

/// `(event name, data)` of each event of a complete SSE text, read by the
/// proxy's own (fuzzed) SSE parser; an event without a name has "".
pub fn sse_events(text: &str) -> Vec<(String, String)> {
    metaclaw_wire::stream::sse::parse_all(text.as_bytes())
        .0
        .into_iter()
        .map(|e| (e.event.unwrap_or_default(), e.data))
        .collect()
}

/// Reads an SSE response, returning each `data:` payload with its arrival
/// time relative to `start`.
pub async fn read_sse(response: reqwest::Response, start: Instant) -> Vec<(Duration, String)> {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut buf = String::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    out.push((start.elapsed(), data.to_string()));
                }
            }
        }
    }
    out
}

/// The `choices[0].delta` of each chunk, with per-call ids removed so two
/// calls can be compared.
pub fn deltas(events: &[(Duration, String)]) -> Vec<Value> {
    events
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .map(|(_, d)| {
            let mut v: Value = serde_json::from_str(d).unwrap();
            if let Some(obj) = v.as_object_mut() {
                obj.remove("id");
                obj.remove("created");
            }
            if let Some(calls) = v
                .pointer_mut("/choices/0/delta/tool_calls")
                .and_then(Value::as_array_mut)
            {
                for c in calls {
                    if let Some(o) = c.as_object_mut() {
                        o.remove("id");
                    }
                }
            }
            v
        })
        .collect()
}

pub fn content_of(events: &[(Duration, String)]) -> String {
    events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

pub fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/openclaw")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The embedded first-party plugin `file` (`guard.wasm`) as a file under
/// `dir` (written if it is not there with these bytes).
pub fn embedded_plugin_file_in(dir: &Path, file: &str) -> PathBuf {
    let name = file.trim_end_matches(".wasm");
    let plugin = metaclaw_core::plugins::embedded::EMBEDDED
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no first-party plugin {name:?}"));
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(file);
    if std::fs::read(&path).ok().as_deref() != Some(plugin.bytes) {
        let tmp = dir.join(format!(".{file}.{}", std::process::id()));
        std::fs::write(&tmp, plugin.bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

fn embedded_plugin_file(file: &str) -> PathBuf {
    embedded_plugin_file_in(
        &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("first-party-plugins"),
        file,
    )
}

/// Where scripts/build-plugins put the plugins, next to the binary's folder.
pub fn built_plugin(rel: &str) -> PathBuf {
    // The first-party ones are embedded in metaclaw (built by host/core/build.rs):
    // written out as files for the tests that need one; the examples and
    // attackers are built into the target dir by scripts/build-plugins.
    let path = match rel.strip_prefix("builtin/") {
        Some(file) => embedded_plugin_file(file),
        None => std::path::Path::new(BIN)
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("plugins")
            .join(rel),
    };
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-plugins first (scripts/test does)",
        path.display()
    );
    path
}

/// A built plugin loaded through metaclaw's own host code (compile cache,
/// sandbox, budget), with `grants` and `limits` for every plugin.
pub fn load_built(
    engine: &std::sync::Arc<metaclaw_core::plugins::PluginEngine>,
    rel: &str,
    grants: metaclaw_core::plugins::Grants,
    embedder: Option<std::sync::Arc<dyn metaclaw_core::plugins::Embedder>>,
    limits: metaclaw_core::plugins::Limits,
) -> std::sync::Arc<metaclaw_core::plugins::LoadedPlugin> {
    let ledger = metaclaw_core::plugins::EmbedLedger::new(Default::default());
    load_built_on(engine, rel, grants, embedder, limits, &ledger)
}

/// [`load_built`], its embedding spend charged to `ledger`.
pub fn load_built_on(
    engine: &std::sync::Arc<metaclaw_core::plugins::PluginEngine>,
    rel: &str,
    grants: metaclaw_core::plugins::Grants,
    embedder: Option<std::sync::Arc<dyn metaclaw_core::plugins::Embedder>>,
    limits: metaclaw_core::plugins::Limits,
    ledger: &std::sync::Arc<metaclaw_core::plugins::EmbedLedger>,
) -> std::sync::Arc<metaclaw_core::plugins::LoadedPlugin> {
    let path = built_plugin(rel);
    let bytes = std::fs::read(&path).unwrap();
    let sha = metaclaw_core::digest::sha256_hex(&bytes);
    let probed = metaclaw_core::plugins::LoadedPlugin::probe(
        engine,
        path,
        &bytes,
        sha,
        metaclaw_core::plugins::Source::Builtin,
        &|_: metaclaw_core::plugins::Kind| limits.clone(),
    )
    .unwrap();
    std::sync::Arc::new(probed.ready_on(grants, embedder, ledger))
}

/// A home whose drop-in folder holds the hostile scorer, with `config`.
/// The first-party plugins come compiled: what the tests time is the
/// attack, not compiling them.
pub fn hostile_home(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    warm_plugin_cache(home.path());
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    std::fs::copy(
        built_plugin("testing/hostile.wasm"),
        home.path().join("plugins/hostile.wasm"),
    )
    .unwrap();
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    home
}

/// A plugin engine with a compile cache in `dir` (its key beside it).
pub fn engine_with_cache(
    dir: &std::path::Path,
) -> std::sync::Arc<metaclaw_core::plugins::PluginEngine> {
    metaclaw_core::plugins::PluginEngine::new(metaclaw_core::plugins::EngineOptions {
        cache: Some(metaclaw_core::plugins::CacheOptions {
            dir: dir.join("cache"),
            key_file: dir.join("cache.key"),
        }),
        threads: 2,
        ..Default::default()
    })
    .unwrap()
}

/// The plugin called `name` in `plugins list --json` output.
pub fn listed_plugin(list: &Value, name: &str) -> Value {
    list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {list}"))
        .clone()
}

async fn get_json(url: String) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// metaclaw's `GET /metrics` (Prometheus text), without a key.
pub async fn metrics_text(base: &str) -> String {
    let response = client().get(format!("{base}/metrics")).send().await;
    response.unwrap().text().await.unwrap()
}

/// The dummy upstream's counters (`GET /v1/dummy/stats`).
pub async fn dummy_stats(upstream_url: &str) -> Value {
    get_json(format!("{upstream_url}/dummy/stats")).await
}

/// The request bodies the dummy upstream received for `model`, oldest
/// first (`GET /dummy/requests?model=`).
pub async fn dummy_requests(upstream_url: &str, model: &str) -> Vec<Value> {
    let v = get_json(format!("{upstream_url}/dummy/requests?model={model}")).await;
    v["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("the dummy's requests for {model}: {v}"))
        .clone()
}

/// A copy of a component with an extra custom section: the same plugin,
/// a different build (and sha256).
pub fn rebuilt_copy(from: &std::path::Path, to: &std::path::Path) {
    let mut bytes = std::fs::read(from).unwrap();
    let name = b"metaclaw-test-rebuild";
    let payload = b"a different build";
    let size = 1 + name.len() + payload.len();
    bytes.push(0); // custom section
    bytes.push(size as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    std::fs::write(to, bytes).unwrap();
}

/// Polls until `ready(stdout)` of `metaclaw <args> --json` holds.
pub fn poll_json(home: &std::path::Path, args: &[&str], ready: impl Fn(&Value) -> bool) -> Value {
    // Only a failing test waits this long: room for compiling a Python
    // plugin (seconds of CPU) on a machine busy with other builds.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let out = cli_in(home, args);
        if let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) {
            if ready(&v) {
                return v;
            }
            if Instant::now() > deadline {
                panic!("{args:?} never got ready; last: {v:#}");
            }
        } else if Instant::now() > deadline {
            panic!(
                "{args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon whose home has the built-in bank installed.
pub fn with_bank(config: &str) -> (Proc, Metaclaw) {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, config);
    let out = mc.cli(&["skills", "install-builtin"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The daemon notices the new folders and indexes them in the
    // background (plugins compile in the background at start; a turn never
    // waits for an index). bm25 serves whenever another retriever cannot (an
    // embedding endpoint that is down, a missing model): wait for its index
    // of the whole bank (an index of part of it is replaced when the rest
    // loads, and turns meanwhile go without skills).
    let bank = std::fs::read_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../skills"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.path().join("SKILL.md").is_file())
                .count()
        })
        .unwrap_or(0) as u64;
    assert!(bank > 0, "the built-in bank (skills/) is empty");
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, bank) && retriever_ready(v, "bm25")
    });
    (up, mc)
}

/// In `status --json`: where the index of the retriever plugin `name`
/// (`bm25`, `embedding`) stands (`ready`, `indexing`, `failed`,
/// `not_started`), if it is loaded.
pub fn retriever_index<'a>(status: &'a Value, name: &str) -> Option<&'a str> {
    status["skills"]["retrievers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| {
            r["name"]
                .as_str()
                .is_some_and(|n| n.split('@').next() == Some(name))
        })
        .and_then(|r| r["index"].as_str())
}

/// In `status --json`: the retriever plugin `name` is loaded and its index
/// of the current library is ready.
pub fn retriever_ready(status: &Value, name: &str) -> bool {
    retriever_index(status, name) == Some("ready")
}

/// In `status --json`: at least `skills` skills are loaded and a retriever
/// has indexed them (a turn never waits for an index: before it, turns go
/// without skills).
pub fn skills_ready(status: &Value, skills: u64) -> bool {
    status["skills"]["loaded"].as_u64().unwrap_or(0) >= skills
        && status["skills"]["indexed_by"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
}

/// Skills over `library` (a folder) behind the real retriever plugins, as
/// the daemon sets them up for `config`, indexed before returning.
pub fn skills_over(
    home: &metaclaw_core::home::Home,
    library: PathBuf,
    config: &metaclaw_core::config::Config,
) -> std::sync::Arc<metaclaw_core::skills::Skills> {
    use metaclaw_core::plugins::{HostSettings, PluginHost};
    use metaclaw_core::skills::{Retrieval, SelectionSettings, Skills, library::Library};
    let db = metaclaw_core::store::Db::at(home.db_file());
    let (retrieval, embedder) = Retrieval::from_config(config, &db);
    assert_eq!(retrieval.problem, None);
    let plugins = PluginHost::new(HostSettings::from_config(config, home), embedder).unwrap();
    let registry = plugins.reload();
    assert!(registry.problems.is_empty(), "{:?}", registry.problems);
    let library = Library::open(library, db);
    let engine = plugins.engine.clone();
    let skills = Skills::new(
        library,
        Some(plugins),
        SelectionSettings::from_config(config),
        retrieval,
    );
    engine.block_on(skills.index_now());
    skills
}

/// `skills stats --json` of `home`, and its row for `name`'s current version.
pub fn skill_stats(home: &Path, name: &str) -> (Value, Value) {
    let out = cli_in(home, &["skills", "stats", "--json"]);
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = stats["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["skill"] == name && r["current"] == true)
        .cloned()
        .unwrap_or_else(|| panic!("{name}: {stats:#}"));
    (stats, row)
}
