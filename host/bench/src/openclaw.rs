//! `--agent openclaw`: the days run through a real OpenClaw, laid out as
//! the reference harness lays it out (docs/bench.md, "Through OpenClaw").
//!
//! Each day gets its own OpenClaw state and config under the day's folder
//! (`dayNN/openclaw/`): the data's seeded transcript imported into the
//! state (OpenClaw 2026.9 keeps sessions in SQLite, so the JSONL is given
//! a `sessions.json` index and imported with `openclaw doctor
//! --session-sqlite import`), and the data's `openclaw_cfg` config with its
//! placeholders filled: the model (`direct`) or the arm's metaclaw, the
//! day's workspace, no prompt-logger plugin. Each round is one
//! `openclaw agent --local --session-id dayNN_<uuid> --message-file …
//! --json`, tried up to three times as the reference runner does; the
//! answer is the turn's text payloads. The checkers stay outside the
//! workspace, as with the built-in agent.
//!
//! The model's key reaches OpenClaw in the environment
//! (`METACLAW_BENCH_API_KEY`, named in the config), never in a file.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::data::{Bench, Day};
use super::day::{Tokens, ToolUse, Turn};
use super::lenient;
use crate::rollout::agent::ErrorBody;
use metaclaw_core::config::ApiFormat;

/// The OpenClaw version the bench's end-to-end test runs.
pub const TESTED_VERSION: &str = "2026.9.6";
/// The agent the data's state and config name.
const AGENT: &str = "metaclaw_agent";
/// The environment variable the config names for the model's key.
const KEY_VAR: &str = "METACLAW_BENCH_API_KEY";
/// Tries per turn (the reference runner's).
const TRIES: u32 = 3;
/// How long one `openclaw agent` turn may take before it is stopped.
const TURN_LIMIT: Duration = Duration::from_secs(30 * 60);
/// How long `openclaw --version` or the state import may take.
const SETUP_LIMIT: Duration = Duration::from_secs(300);

/// The `openclaw` program, found and run once.
#[derive(Debug, Clone)]
pub struct OpenClaw {
    program: PathBuf,
    pub version: String,
}

impl OpenClaw {
    /// `given`, else `openclaw` on PATH; it must answer `--version`.
    pub async fn find(given: Option<&Path>) -> Result<Self> {
        let program = given.map_or_else(|| PathBuf::from("openclaw"), Path::to_path_buf);
        let help = "--agent openclaw runs a real OpenClaw: install it (Node 24, then `npm install \
                    -g openclaw@2026.9.6`; tests/openclaw/install.sh installs the version the \
                    tests run) or pass --openclaw PATH";
        let mut command = tokio::process::Command::new(&program);
        command
            .arg("--version")
            .env("OPENCLAW_NO_AUTO_UPDATE", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(SETUP_LIMIT, command.output())
            .await
            .map_err(|_| anyhow!("`{} --version` did not answer; {help}", program.display()))?
            .map_err(|e| anyhow!("cannot run {}: {e}; {help}", program.display()))?;
        if !out.status.success() {
            bail!(
                "`{} --version` failed ({}): {}; {help}",
                program.display(),
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr))
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // `OpenClaw 2026.9.6 (eb377ac)`.
        let version = text
            .split_whitespace()
            .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
            .unwrap_or("unknown")
            .to_string();
        Ok(Self { program, version })
    }
}

/// Where one arm's OpenClaw sends its model calls.
#[derive(Debug, Clone)]
pub struct Provider {
    /// `direct`: the model's API; otherwise the arm's metaclaw (`…/v1`).
    pub base_url: String,
    pub format: ApiFormat,
    pub model: String,
    pub api_key: Option<String>,
    /// Through metaclaw: the session the day is recorded as (sent as
    /// `x-session-id` on each call).
    pub session: Option<String>,
}

/// One day's OpenClaw: its state, config and session.
#[derive(Debug, Clone)]
pub struct ClawDay {
    openclaw: OpenClaw,
    dir: PathBuf,
    session: String,
    api_key: Option<String>,
}

impl ClawDay {
    /// Sets up the day under `day_dir/openclaw/`: the seeded session
    /// imported once (kept when resuming), the config written each time
    /// (the arm's metaclaw listens on a new port after a restart).
    pub async fn prepare(
        openclaw: &OpenClaw,
        bench: &Bench,
        day: &Day,
        day_dir: &Path,
        work: &Path,
        provider: &Provider,
    ) -> Result<Self> {
        let dir = day_dir.join("openclaw");
        let this = Self {
            openclaw: openclaw.clone(),
            dir,
            session: day.session.clone(),
            api_key: provider.api_key.clone(),
        };
        let imported = this.dir.join("imported");
        if !imported.exists() {
            metaclaw_core::home::remove_dir_if_any(&this.dir)?;
            let sessions = this.sessions_dir();
            std::fs::create_dir_all(&sessions)
                .and_then(|()| std::fs::create_dir_all(this.dir.join("home")))
                .with_context(|| format!("cannot create {}", sessions.display()))?;
            let transcript = sessions.join(format!("{}.jsonl", day.session));
            std::fs::write(&transcript, bench.seed_transcript(day)?)
                .with_context(|| format!("cannot write {}", transcript.display()))?;
            let index = json!({
                format!("agent:{AGENT}:explicit:{}", day.session): {
                    "sessionId": day.session,
                    "updatedAt": metaclaw_core::clock::now_ms(),
                }
            });
            std::fs::write(
                sessions.join("sessions.json"),
                serde_json::to_vec_pretty(&index)?,
            )
            .with_context(|| format!("cannot write the session index in {}", sessions.display()))?;
        }
        let config = config(bench, provider, work, &this.agent_dir())?;
        let file = this.config_file();
        std::fs::write(&file, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("cannot write {}", file.display()))?;
        if !imported.exists() {
            this.import().await?;
            std::fs::write(&imported, b"")
                .with_context(|| format!("cannot write {}", imported.display()))?;
        }
        Ok(this)
    }

    fn sessions_dir(&self) -> PathBuf {
        self.dir.join("state/agents").join(AGENT).join("sessions")
    }

    fn agent_dir(&self) -> PathBuf {
        self.dir.join("state/agents").join(AGENT).join("agent")
    }

    fn config_file(&self) -> PathBuf {
        self.dir.join("openclaw.json")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("openclaw.log")
    }

    /// `openclaw` with this day's state, config and home, nothing of the
    /// user's own OpenClaw, and none of metaclaw's environment that looks
    /// like a secret ([`secret_like`]): its `exec` runs unconfined and
    /// hands its environment on.
    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.openclaw.program);
        for (name, _) in std::env::vars_os() {
            if secret_like(&name.to_string_lossy()) {
                command.env_remove(name);
            }
        }
        command
            .current_dir(&self.dir)
            .env("HOME", self.dir.join("home"))
            .env("OPENCLAW_STATE_DIR", self.dir.join("state"))
            .env("OPENCLAW_CONFIG_PATH", self.config_file())
            .env("OPENCLAW_NO_AUTO_UPDATE", "1")
            .env(KEY_VAR, self.api_key.as_deref().unwrap_or("none"))
            .env_remove("OPENCLAW_GATEWAY_PORT")
            .env_remove("OPENCLAW_PROFILE")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Imports the seeded transcript into the state's session store.
    async fn import(&self) -> Result<()> {
        let mut command = self.command();
        command.args([
            "doctor",
            "--session-sqlite",
            "import",
            "--session-sqlite-agent",
            AGENT,
            "--json",
        ]);
        let out = tokio::time::timeout(SETUP_LIMIT, command.output())
            .await
            .map_err(|_| anyhow!("importing the seeded session into OpenClaw timed out"))?
            .context("cannot run openclaw doctor")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let imported = json_object(&stdout)
            .map(|r| lenient::object::<ImportReport>(&r))
            .and_then(|r| r.totals.imported_entries);
        if !out.status.success() || imported != Some(1) {
            bail!(
                "OpenClaw {} did not import the seeded session {} (`openclaw doctor \
                 --session-sqlite import`, exit {}): {}{}",
                self.openclaw.version,
                self.session,
                out.status,
                tail(&stdout),
                tail(&String::from_utf8_lossy(&out.stderr))
            );
        }
        Ok(())
    }

    /// One turn: `message` sent on the day's session.
    pub async fn ask(&self, message: &str) -> Result<Turn> {
        let file = self.dir.join("message.txt");
        std::fs::write(&file, message)
            .with_context(|| format!("cannot write {}", file.display()))?;
        let mut failures = Vec::new();
        for attempt in 1..=TRIES {
            match self.try_turn(&file).await {
                Ok(turn) => return Ok(turn),
                Err(e) => {
                    self.log(&format!("try {attempt} failed: {e:#}"));
                    failures.push(format!("try {attempt}: {e:#}"));
                }
            }
        }
        bail!(
            "OpenClaw failed the turn {TRIES} times ({}; its output is in {})",
            failures.join("; "),
            self.log_file().display()
        )
    }

    async fn try_turn(&self, message_file: &Path) -> Result<Turn> {
        let mut command = self.command();
        command
            .arg("agent")
            .arg("--local")
            .args(["--agent", AGENT, "--session-id", &self.session]);
        command
            .arg("--message-file")
            .arg(message_file)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = tokio::time::timeout(TURN_LIMIT, command.output())
            .await
            .map_err(|_| anyhow!("no answer within {}s", TURN_LIMIT.as_secs()))?
            .context("cannot run openclaw agent")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        self.log(&String::from_utf8_lossy(&out.stderr));
        let reply = json_object(&stdout);
        if !out.status.success() {
            let why = reply
                .as_ref()
                .and_then(|r| TurnReply::read(r).error.message)
                .unwrap_or_else(|| tail(&stdout));
            bail!("exit {}: {why}", out.status);
        }
        let reply = reply.ok_or_else(|| anyhow!("its output is not JSON: {}", tail(&stdout)))?;
        parse_turn(&reply)
    }

    fn log(&self, text: &str) {
        use std::io::Write as _;
        if text.trim().is_empty() {
            return;
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_file())
        {
            let _ = writeln!(f, "{}", text.trim_end());
        }
    }
}

/// An environment variable OpenClaw is not given: metaclaw's own, and
/// any whose name says it holds a credential.
fn secret_like(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("METACLAW_")
        || [
            "KEY",
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "PASSWD",
            "CREDENTIAL",
            "AUTH",
            "COOKIE",
            "SESSION",
        ]
        .iter()
        .any(|word| upper.contains(word))
}

/// The data's config with its placeholders filled and the harness's
/// changes: one provider (the model, or metaclaw with the day's session
/// header), the day's workspace and agent folder, file tools kept to the
/// workspace, no plugins (the reference's prompt logger is not part of the
/// agent), no update check.
pub fn config(bench: &Bench, provider: &Provider, work: &Path, agent_dir: &Path) -> Result<Value> {
    let mut config: ClawConfig =
        serde_json::from_value(bench.openclaw_config(provider.session.is_some())?)
            .context("the bench's OpenClaw config is not shaped as OpenClaw's")?;
    let providers = config
        .models
        .providers
        .as_mut()
        .ok_or_else(|| anyhow!("the bench's OpenClaw config has no models.providers"))?;
    let (name, entry) = providers
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), lenient::object::<ClawProvider>(v)))
        .ok_or_else(|| anyhow!("the bench's OpenClaw config has no provider"))?;
    providers.clear();
    providers.insert(
        name.clone(),
        serde_json::to_value(fill_provider(entry, provider))?,
    );
    let primary = format!("{name}/{}", provider.model);
    config
        .agents
        .defaults
        .model
        .insert("primary".into(), json!(primary));
    let agent = config
        .agents
        .list
        .as_mut()
        .ok_or_else(|| anyhow!("the bench's OpenClaw config has no agents.list"))?
        .iter_mut()
        .find(|a| lenient::object::<AgentSeen>(a).id.as_deref() == Some(AGENT))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| anyhow!("the bench's OpenClaw config has no agent {AGENT}"))?;
    agent.insert("workspace".into(), json!(work.to_string_lossy()));
    agent.insert("agentDir".into(), json!(agent_dir.to_string_lossy()));
    config.rest.remove("plugins");
    config
        .rest
        .insert("update".into(), json!({ "checkOnStart": false }));
    // OpenClaw's file tools stay in the day's workspace (the run folder
    // beside it holds other arms' conversations, feedback included).
    // `exec` is OpenClaw's and unconfined, as in the reference harness.
    config.tools.fs.insert("workspaceOnly".into(), json!(true));
    let config = serde_json::to_value(config)?;
    let text = config.to_string().replace(&format!("${{{KEY_VAR}}}"), "");
    if let Some(at) = text.find("${") {
        bail!(
            "the bench's OpenClaw config still has a placeholder: {}",
            &text[at..(at + 40).min(text.len())]
        );
    }
    Ok(config)
}

/// The data's provider pointed at `provider`: its URL, API, key variable,
/// the day's session header, and its first model (or a plain one) as the
/// only one, under the model's name.
fn fill_provider(mut entry: ClawProvider, provider: &Provider) -> ClawProvider {
    let (api, base_url) = match provider.format {
        ApiFormat::Openai => ("openai-completions", provider.base_url.clone()),
        // Anthropic's SDK adds `/v1` itself.
        ApiFormat::Anthropic => (
            "anthropic-messages",
            provider
                .base_url
                .trim_end_matches('/')
                .trim_end_matches("/v1")
                .to_string(),
        ),
    };
    entry.rest.insert("baseUrl".into(), json!(base_url));
    entry.rest.insert("api".into(), json!(api));
    entry
        .rest
        .insert("apiKey".into(), json!(format!("${{{KEY_VAR}}}")));
    if let Some(session) = &provider.session {
        entry
            .rest
            .insert("headers".into(), json!({ "x-session-id": session }));
    }
    let mut model = match entry.models.drain(..).next() {
        Some(Value::Object(model)) => model,
        _ => Map::from_iter([
            ("name".to_string(), json!("Benchmark model")),
            ("input".to_string(), json!(["text"])),
        ]),
    };
    model.insert("id".into(), json!(provider.model));
    entry.models = vec![Value::Object(model)];
    entry
}

/// OpenClaw's own config (`openclaw.json`), typed where the harness edits
/// it; every other key, at each level, kept as it was (`rest`: OpenClaw
/// reads keys, not their order). A part the harness sets that is absent
/// is created, as the assignments by key this replaced did.
#[derive(Deserialize, Serialize)]
struct ClawConfig {
    #[serde(default)]
    models: ClawModels,
    #[serde(default)]
    agents: ClawAgents,
    #[serde(default)]
    tools: ClawTools,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Serialize, Default)]
struct ClawModels {
    /// None: absent or not an object (the config is refused).
    #[serde(default, deserialize_with = "lenient::field")]
    providers: Option<Map<String, Value>>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// A provider: its models read, the rest kept.
#[derive(Deserialize, Serialize, Default)]
struct ClawProvider {
    #[serde(default, deserialize_with = "lenient::field")]
    models: Vec<Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Serialize, Default)]
struct ClawAgents {
    #[serde(default)]
    defaults: ClawDefaults,
    /// None: absent or not a list (the config is refused).
    #[serde(default, deserialize_with = "lenient::field")]
    list: Option<Vec<Value>>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Serialize, Default)]
struct ClawDefaults {
    #[serde(default)]
    model: Map<String, Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[derive(Deserialize, Serialize, Default)]
struct ClawTools {
    #[serde(default)]
    fs: Map<String, Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// What the harness reads of an agent in the config's list.
#[derive(Deserialize, Default)]
#[serde(default)]
struct AgentSeen {
    #[serde(deserialize_with = "lenient::field")]
    id: Option<String>,
}

/// `openclaw doctor --session-sqlite import --json`'s report.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ImportReport {
    #[serde(deserialize_with = "lenient::obj")]
    totals: ImportTotals,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ImportTotals {
    #[serde(deserialize_with = "lenient::field")]
    imported_entries: Option<u64>,
}

/// `openclaw agent --json`'s reply: `ok: false` with an error, or the
/// turn's payloads and what the agent did.
#[derive(Deserialize, Default)]
#[serde(default)]
struct TurnReply {
    #[serde(deserialize_with = "lenient::field")]
    ok: Option<bool>,
    #[serde(deserialize_with = "lenient::obj")]
    error: ErrorBody,
    /// None: absent or not a list (no turn).
    #[serde(deserialize_with = "lenient::field")]
    payloads: Option<Vec<Value>>,
    #[serde(deserialize_with = "lenient::obj")]
    meta: TurnMeta,
}

impl TurnReply {
    fn read(reply: &Value) -> Self {
        lenient::object(reply)
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct TurnMeta {
    #[serde(deserialize_with = "lenient::obj")]
    agent_meta: AgentMeta,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct AgentMeta {
    #[serde(deserialize_with = "lenient::obj")]
    terminal_receipt: Receipt,
    #[serde(deserialize_with = "lenient::field")]
    assistant_turns: Option<u64>,
    #[serde(deserialize_with = "lenient::obj")]
    usage: TurnUsage,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Receipt {
    #[serde(deserialize_with = "lenient::strings")]
    successful_tool_names: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TurnUsage {
    #[serde(deserialize_with = "lenient::field")]
    input: Option<u64>,
    #[serde(deserialize_with = "lenient::field")]
    output: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Payload {
    #[serde(deserialize_with = "lenient::field")]
    text: Option<String>,
}

/// The turn in `openclaw agent --json`'s reply: the text payloads, the
/// tools it used, its model calls and tokens.
pub fn parse_turn(reply: &Value) -> Result<Turn> {
    let seen = TurnReply::read(reply);
    if seen.ok == Some(false) {
        bail!(
            "OpenClaw said: {}",
            seen.error.message.as_deref().unwrap_or("an error")
        );
    }
    let payloads = seen
        .payloads
        .ok_or_else(|| anyhow!("the reply has no payloads: {}", tail(&reply.to_string())))?;
    let answer = payloads
        .iter()
        .filter_map(|p| lenient::object::<Payload>(p).text)
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let meta = seen.meta.agent_meta;
    let tools = meta
        .terminal_receipt
        .successful_tool_names
        .unwrap_or_default()
        .into_iter()
        .map(|name| ToolUse {
            name,
            arguments: String::new(),
            result: String::new(),
        })
        .collect();
    // The skills and who served are metaclaw's to say (the arm's store).
    Ok(Turn {
        answer,
        tools,
        steps: meta.assistant_turns.unwrap_or(1) as u32,
        tokens: Tokens {
            input: meta.usage.input.unwrap_or(0),
            output: meta.usage.output.unwrap_or(0),
        },
        skills: Vec::new(),
        served_by: Vec::new(),
    })
}

/// The JSON object in a command's stdout (anything logged before it is
/// skipped).
fn json_object(stdout: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) {
        return Some(v);
    }
    let start = stdout.find("\n{").map(|i| i + 1)?;
    serde_json::from_str(stdout[start..].trim()).ok()
}

/// The last lines of a command's output, for an error message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let tail = lines[lines.len().saturating_sub(6)..].join("\n");
    super::command::clip(&tail)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::data::Set;

    fn provider(session: Option<&str>, format: ApiFormat) -> Provider {
        Provider {
            base_url: "http://127.0.0.1:9/v1".into(),
            format,
            model: "m-1".into(),
            api_key: Some("secret".into()),
            session: session.map(str::to_string),
        }
    }

    /// The config points OpenClaw at the arm's endpoint with the day's
    /// workspace and session, and never holds the key itself.
    #[test]
    fn the_config_fills_the_harness_placeholders_and_keeps_the_key_out() {
        let bench = Bench::load(Set::Small).unwrap();
        let (work, agent) = (Path::new("/w/work"), Path::new("/w/agent"));
        let through = config(
            &bench,
            &provider(Some("bench-learn-1-day01"), ApiFormat::Openai),
            work,
            agent,
        )
        .unwrap();
        let text = through.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(!text.contains("plugins"), "{text}");
        let providers = through["models"]["providers"].as_object().unwrap();
        assert_eq!(providers.len(), 1);
        let (name, entry) = providers.iter().next().unwrap();
        assert_eq!(entry["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(entry["api"], "openai-completions");
        assert_eq!(entry["apiKey"], "${METACLAW_BENCH_API_KEY}");
        assert_eq!(entry["headers"]["x-session-id"], "bench-learn-1-day01");
        assert_eq!(entry["models"][0]["id"], "m-1");
        assert_eq!(entry["models"][0]["contextWindow"], 50000);
        assert_eq!(
            through["agents"]["defaults"]["model"]["primary"],
            format!("{name}/m-1")
        );
        let agent_entry = &through["agents"]["list"][0];
        assert_eq!(agent_entry["workspace"], "/w/work");
        assert_eq!(agent_entry["agentDir"], "/w/agent");
        // The reference's tool settings stay as they are.
        assert_eq!(through["tools"]["profile"], "coding");
        assert_eq!(through["tools"]["deny"], json!(["group:memory"]));
        assert_eq!(through["tools"]["fs"]["workspaceOnly"], true);

        let direct = config(&bench, &provider(None, ApiFormat::Anthropic), work, agent).unwrap();
        let entry = direct["models"]["providers"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap();
        assert_eq!(entry["api"], "anthropic-messages");
        assert_eq!(entry["baseUrl"], "http://127.0.0.1:9");
        assert!(entry.get("headers").is_none());
    }

    #[test]
    fn openclaw_is_not_given_what_looks_like_a_secret() {
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "METACLAW_LLM_API_KEY",
            "METACLAW_HOME",
            "PGPASSWORD",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(secret_like(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "HTTPS_PROXY",
            "NODE_EXTRA_CA_CERTS",
            "TMPDIR",
        ] {
            assert!(!secret_like(name), "{name}");
        }
    }

    #[test]
    fn a_turn_is_read_from_the_json_reply() {
        let reply = json!({
            "payloads": [{"text": "Done."}, {"text": " "}, {"text": "\\bbox{A,B}"}],
            "meta": {"agentMeta": {
                "assistantTurns": 3,
                "usage": {"input": 1200, "output": 34},
                "terminalReceipt": {"successfulToolNames": ["write", "exec"]},
            }},
        });
        let turn = parse_turn(&reply).unwrap();
        assert_eq!(turn.answer, "Done.\n\\bbox{A,B}");
        assert_eq!(turn.steps, 3);
        assert_eq!((turn.tokens.input, turn.tokens.output), (1200, 34));
        let names: Vec<&str> = turn.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["write", "exec"]);
        let refused = json!({"ok": false, "error": {"message": "Session is archived."}});
        let e = parse_turn(&refused).unwrap_err().to_string();
        assert!(e.contains("Session is archived."), "{e}");
    }

    #[test]
    fn the_reply_is_found_after_log_lines() {
        let out = "[config] warning: moved\n{\n  \"payloads\": []\n}\n";
        assert_eq!(json_object(out).unwrap()["payloads"], json!([]));
        assert!(json_object("no json here").is_none());
    }
}
