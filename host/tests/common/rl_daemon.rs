//! The real `metaclaw` daemon in `mode: rl` against the fake Tinker server
//! and the dummy upstream (the judge, and the evolver where skills are
//! learned), both in this process so they outlive the daemon, on one home
//! kept across restarts; steps only when asked (`manual_train_trigger`).
//!
//! [`World`] starts it, waits until the student serves, and gives the
//! tests what they ask of it: the CLI (`--json`), student turns scripted on
//! the fake, the fake's view of its models and checkpoints, and the
//! training queue as the store holds it ([`Sample`]).
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metaclaw_chat::render::{ModelFiles, Renderer};
use metaclaw_mock_tinker::ModelReport;
use serde_json::{Value, json};

/// The tiny Qwen3's folder: the tokenizer the daemon and the fake share.
pub fn fixture() -> String {
    format!(
        "{}/../tests/fixtures/tiny-qwen3",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The tokens the model samples to say `text` and end its turn.
pub fn says(text: &str) -> Vec<i32> {
    let r = Renderer::new(&ModelFiles::from_dir(Path::new(&fixture())).unwrap()).unwrap();
    let mut tokens = r.encode(text).unwrap();
    tokens.push(r.token_id("<|im_end|>").unwrap());
    tokens
}

/// How a [`World`]'s daemon is configured where tests differ.
pub struct Setup {
    /// `rl.model`: the fake's model, with the faults it injects
    /// (`fake-bigram@stall_save=3`).
    pub model: String,
    /// `rl.batch_size`.
    pub batch_size: u32,
    /// Skills on and evolved by the dummy's `evolver` (`skills.auto_evolve`
    /// off: a skill is evolved only after a turn judged −1), built-in
    /// plugins on (evolution needs `guard`), sessions ended only when told;
    /// no canaries (an evolved skill serves every session it fits, a step's
    /// weights every session: these tests are about training, canary_e2e
    /// and weights_canary about canaries).
    /// Off: skills and built-in plugins off.
    pub evolve: bool,
    /// `mode: auto` with `scheduler.force` set to this (steps start on
    /// their own, in the scheduler's windows); `None`: `mode: rl`, steps
    /// only when asked (`manual_train_trigger`).
    pub auto_forced: Option<&'static str>,
    /// A real training service instead of the fake: its URL and the base
    /// model's folder (named as skyrl names it; its tokenizer is there).
    pub service: Option<(String, PathBuf)>,
    /// The `canary:` section's lines (`None`: canaries off).
    pub canary: Option<String>,
}

impl Setup {
    /// `model` with a batch of 2, skills and built-in plugins off.
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_string(),
            batch_size: 2,
            evolve: false,
            auto_forced: None,
            service: None,
            canary: None,
        }
    }

    /// Against a real training service at `url` serving the base model in
    /// `model` (skyrl: `scripts/skyrl-cpu`), answers up to 8 tokens.
    pub fn against(url: &str, model: &std::path::Path) -> Self {
        Self {
            service: Some((url.to_string(), model.to_path_buf())),
            ..Self::new(&model.display().to_string())
        }
    }

    /// `mode: auto`, the scheduler's window forced `open` or `shut`.
    pub fn auto_forced(mut self, force: &'static str) -> Self {
        self.auto_forced = Some(force);
        self
    }

    pub fn batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Canaries of new weights on, with these `canary:` lines added.
    pub fn weights_canary(mut self, lines: &str) -> Self {
        self.canary = Some(format!("  weights: true\n{lines}"));
        self
    }

    /// Skills learned by the evolver (see [`Setup::evolve`]).
    pub fn evolving(mut self) -> Self {
        self.evolve = true;
        self
    }

    /// The daemon's `config.yaml` against the dummy upstream at `upstream`
    /// and the fake (or the real service) at `fake`.
    pub fn config(&self, upstream: &str, fake: &str) -> String {
        // The dummy judge rewards a corrected answer −1 and the last one 0,
        // so a session's batch has signal.
        let (evolver, rest) = if self.evolve {
            (
                "  evolver_model: evolver\n",
                "skills:\n  enabled: true\n  auto_evolve: false\n\
                 sessions:\n  idle_timeout: 1h\n\
                 learning:\n  enabled: true\n\
                 canary:\n  skills: false\n",
            )
        } else {
            (
                "",
                "skills:\n  enabled: false\n\
                 learning:\n  enabled: true\n\
                 plugins:\n  builtin: false\n\
                 canary:\n",
            )
        };
        let (mode, manual, scheduler) = match self.auto_forced {
            None => ("rl", true, String::new()),
            Some(force) => ("auto", false, format!("scheduler:\n  force: {force}\n")),
        };
        let (service, tokenizer, real) = match &self.service {
            None => (fake.to_string(), fixture(), ""),
            Some((url, model)) => (
                url.clone(),
                model.display().to_string(),
                "  thinking: 'off'\n  max_new_tokens: 8\n",
            ),
        };
        let canary = self
            .canary
            .clone()
            .unwrap_or_else(|| "  weights: false\n".into());
        format!(
            "mode: {mode}\n\
             llm:\n  api_base: {upstream}\n  model_id: echo\n  force_model: true\n\
             rl:\n  model: '{}'\n  tinker_base_url: {service}\n  tinker_api_key: tml-dummy\n  \
             tokenizer_path: {tokenizer}\n  lora_rank: 4\n  batch_size: {}\n  save_every: 1\n  \
             manual_train_trigger: {manual}\n  prm_model: judge\n  prm_m: 1\n{real}{evolver}{rest}{canary}{scheduler}",
            self.model, self.batch_size,
        )
    }
}

/// The fake Tinker server and the dummy upstream, in this process; the
/// daemon's home, and the daemon while it runs.
pub struct World {
    pub fake: String,
    pub home: tempfile::TempDir,
    daemon: Option<super::Proc>,
    evolve: bool,
}

impl World {
    /// Starts the fake, the dummy and the daemon as `setup` says, and waits
    /// until the student serves.
    pub async fn new(setup: Setup) -> Self {
        let fake = match &setup.service {
            Some((url, _)) => url.clone(),
            None => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let fake = format!("http://{}", listener.local_addr().unwrap());
                tokio::spawn(metaclaw_mock_tinker::serve(listener));
                fake
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = format!("http://{}/v1", listener.local_addr().unwrap());
        let dummy = Arc::new(metaclaw_mock_upstream::Dummy::default());
        tokio::spawn(metaclaw_mock_upstream::serve(listener, dummy));
        let home = tempfile::tempdir().unwrap();
        if setup.evolve {
            super::warm_plugin_cache(home.path());
        }
        std::fs::write(
            home.path().join("config.yaml"),
            setup.config(&upstream, &fake),
        )
        .unwrap();
        let mut world = Self {
            fake,
            home,
            daemon: None,
            evolve: setup.evolve,
        };
        world.start().await;
        world
    }

    pub fn path(&self) -> PathBuf {
        self.home.path().to_path_buf()
    }

    /// Starts the daemon on the home and waits until the student serves
    /// (and, with skills evolved, until `guard` checks evolution).
    pub async fn start(&mut self) {
        let home = self.path();
        let proc = tokio::task::spawn_blocking(move || {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(home.join("test-stderr.log"))
                .unwrap();
            let mut cmd = Command::new(super::BIN);
            cmd.args(["start", "--foreground", "--port", "0"])
                .env("METACLAW_HOME", &home)
                .env_remove("METACLAW_LLM_API_KEY")
                .env_remove("METACLAW_PROXY_API_KEY")
                .env_remove("TINKER_API_KEY")
                .env_remove("TINKER_BASE_URL")
                .env_remove("METACLAW_RL_TINKER_API_KEY")
                .env("METACLAW_NO_WIRE", "1")
                .env("METACLAW_NO_BUILTIN_SKILLS", "1")
                .stderr(log);
            super::spawn_and_wait_for(cmd, "metaclaw listening on ", Duration::from_secs(60))
        })
        .await
        .unwrap();
        self.daemon = Some(proc);
        // The student connects in the background (a turn before that would
        // be answered by `llm`, with no sample to train), and the plugins
        // load in the background (without `guard` the evolve stage waits).
        if self.evolve {
            self.until("the student serving and guard checking evolution", |s| {
                s["student"]["state"] == "ready"
                    && s["evolver_chain"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|p| p == "guard"))
            })
            .await;
        } else {
            self.until("the student serving", |s| s["student"]["state"] == "ready")
                .await;
        }
    }

    /// SIGKILL: no clean shutdown.
    pub fn kill(&mut self) {
        let mut proc = self.daemon.take().unwrap();
        proc.child.kill().unwrap();
        proc.child.wait().unwrap();
    }

    pub fn url(&self) -> String {
        self.daemon.as_ref().unwrap().url.clone()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("test-stderr.log")).unwrap_or_default()
    }

    pub async fn cli(&self, args: &[&str]) -> Output {
        let home = self.path();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            super::cli_in(&home, &args)
        })
        .await
        .unwrap()
    }

    /// `metaclaw ARGS` (ending in `--json`), which must succeed.
    pub async fn json(&self, args: &[&str]) -> Value {
        let out = self.cli(args).await;
        assert!(
            out.status.success(),
            "{args:?}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Polls `status --json` until `ready` holds (60 s at most).
    pub async fn until(&self, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.json(&["status", "--json"]).await;
            if ready(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "never got {what}: {status:#}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /api/v1/fake/{what}` of the fake.
    pub async fn fake_get<T: serde::de::DeserializeOwned>(&self, what: &str) -> T {
        reqwest::get(format!("{}/api/v1/fake/{what}", self.fake))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The fake's models, by id.
    pub async fn models(&self) -> BTreeMap<String, ModelReport> {
        self.fake_get("models").await
    }

    /// The checkpoints the fake holds for `model`: (type, path).
    pub async fn checkpoints(&self, model: &str) -> Vec<(String, String)> {
        let v: Value = reqwest::get(format!(
            "{}/api/v1/training_runs/{model}/checkpoints",
            self.fake
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        v["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["checkpoint_type"].as_str().unwrap().to_string(),
                    c["tinker_path"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The skill library's generation now.
    pub async fn generation(&self) -> u64 {
        let status = self.json(&["status", "--json"]).await;
        status["skills"]["generation"].as_u64().unwrap()
    }

    /// Student turns of session `id`: the user asks `question`, the
    /// student says each answer in turn, and the user's words after each
    /// but the last are the next of `replies`. Waits until they are stored.
    pub async fn session(&self, id: &str, question: &str, answers: &[&str], replies: &[&str]) {
        self.turns(id, question, answers, replies, 0).await;
    }

    /// [`Self::session`]'s turns from the `from`-th answer on (those
    /// before it were sent already).
    pub async fn turns(
        &self,
        id: &str,
        question: &str,
        answers: &[&str],
        replies: &[&str],
        from: usize,
    ) {
        let http = super::client();
        let mut messages = vec![
            json!({"role": "system", "content": "You are a helpful assistant."}),
            json!({"role": "user", "content": question}),
        ];
        for (i, answer) in answers.iter().enumerate() {
            if i < from {
                messages.push(json!({"role": "assistant", "content": answer}));
                messages.push(json!({"role": "user", "content": replies[i]}));
                continue;
            }
            let script = http
                .post(format!("{}/api/v1/fake/script", self.fake))
                .json(&json!({ "sequences": [says(answer)] }))
                .send()
                .await
                .unwrap();
            assert!(script.status().is_success());
            let (served, v) = self.ask(id, &messages).await;
            assert!(served.starts_with("student"), "served by {served:?}");
            assert_eq!(v["choices"][0]["message"]["content"], *answer, "{v}");
            messages.push(json!({"role": "assistant", "content": answer}));
            if let Some(reply) = replies.get(i) {
                messages.push(json!({"role": "user", "content": reply}));
            }
        }
        // The store commits a turn shortly after its answer.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.samples(id).len() < answers.len() {
            assert!(Instant::now() < deadline, "{id}'s turns were not stored");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One main turn of session `id` with these messages (which must
    /// succeed): who served it (`x-metaclaw-served-by`) and the answer.
    pub async fn ask(&self, id: &str, messages: &[Value]) -> (String, Value) {
        let response = super::client()
            .post(format!("{}/v1/chat/completions", self.url()))
            .header("x-session-id", id)
            .header("x-turn-type", "main")
            .json(&json!({"model": "m", "messages": messages}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", self.log());
        let served = response
            .headers()
            .get("x-metaclaw-served-by")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (served, response.json().await.unwrap())
    }

    /// Ends the session and runs its learning job (the command fails
    /// unless the job is done): judged, a step then finds its samples
    /// ready.
    pub async fn learn(&self, id: &str) {
        let jobs = self.json(&["learn", "now", id, "--json"]).await;
        assert!(jobs.as_array().is_some_and(|j| !j.is_empty()), "{jobs}");
    }

    /// The store, read only.
    pub fn db(&self) -> metaclaw_core::store::sql::Conn {
        let db = metaclaw_core::home::Home::at(self.home.path()).db_file();
        metaclaw_core::store::Db::at(db).read().unwrap()
    }

    /// The session's samples in the store, in turn order.
    pub fn samples(&self, session: &str) -> Vec<Sample> {
        let db = metaclaw_core::home::Home::at(self.home.path()).db_file();
        samples_in(&metaclaw_core::store::Db::at(db), session)
    }

    /// The skills evolved from `session` and written: (skill id, outcome).
    pub fn written_drafts(&self, session: &str) -> Vec<(String, String)> {
        let conn = self.db();
        let mut stmt = conn
            .prepare(
                "SELECT skill_id, outcome FROM evolved_drafts
                 WHERE session_id = ?1 AND written_ms IS NOT NULL ORDER BY id",
            )
            .unwrap();
        stmt.query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<metaclaw_core::store::sql::Result<_>>()
            .unwrap()
    }

    /// Every sample's queue state, as `train status` counts them:
    /// (ready, in step, trained).
    pub async fn queue(&self) -> (u64, u64, u64) {
        let status = self.json(&["train", "status", "--json"]).await;
        let q = &status["queue"];
        (
            q["ready"].as_u64().unwrap(),
            q["in_step"].as_u64().unwrap(),
            q["trained"].as_u64().unwrap(),
        )
    }
}

/// Session `session`'s samples in the store `db` (SQLite's file or a
/// shared Postgres store), in turn order; none while it cannot be read.
pub fn samples_in(db: &metaclaw_core::store::Db, session: &str) -> Vec<Sample> {
    let Ok(conn) = db.read() else {
        return Vec::new();
    };
    let mut stmt = conn
        .prepare(
            "SELECT s.turn_id, s.skill_generation, s.train_state, s.train_note, s.run_id,
                    s.train_step, t.reward
             FROM turn_samples s JOIN turns t ON t.id = s.turn_id
             WHERE t.session_id = ?1 ORDER BY t.seq",
        )
        .unwrap();
    stmt.query_map([session], |r| {
        Ok(Sample {
            turn: r.get(0)?,
            generation: r.get(1)?,
            state: r.get(2)?,
            note: r.get(3)?,
            run: r.get(4)?,
            step: r.get(5)?,
            reward: r.get(6)?,
        })
    })
    .unwrap()
    .collect::<metaclaw_core::store::sql::Result<_>>()
    .unwrap()
}

/// A turn's training sample, as the store's queue holds it.
#[derive(Debug)]
pub struct Sample {
    pub turn: String,
    pub generation: i64,
    pub state: String,
    pub note: Option<String>,
    pub run: Option<String>,
    pub step: Option<i64>,
    pub reward: Option<f64>,
}
