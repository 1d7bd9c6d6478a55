//! The training leader of a team `kill -9`ed mid-step (W3-G): three real
//! `metaclaw start` instances in `mode: rl`, each with a home and a port of
//! its own, share one Postgres store and one fake Tinker server (the fake
//! and the dummy upstream in this process, so they outlive any instance).
//! Steps run only when asked (`manual_train_trigger`).
//!
//! One instance takes the run's lease (`trainer` in `leases`) and leads:
//! it alone steps, the others answer a step with the NotLeader conflict
//! (409, naming the leader) and serve the weights it saves. Step 1 trains
//! a judged session recorded by one follower and is saved; step 2, of a
//! session recorded by the other follower, is asked of the leader, and the
//! leader is killed with SIGKILL while the fake holds that step's
//! `forward_backward` unanswered (`stall_fwdbwd=2`). Then:
//!
//! - a survivor takes the lease (a higher epoch) once it has run out:
//!   within `team::TTL` plus two heartbeats plus a margin for a loaded
//!   machine, measured from the kill;
//! - the new leader goes on from step 1's saved state: the second
//!   session's samples are `ready` again, and the step it is asked for
//!   trains them as step 2 on a new model the fake loaded from step 1's
//!   checkpoint;
//! - every sample is trained exactly once (train_crash's criteria: the
//!   fake's weights hold exactly the two steps, what the killed step did
//!   stayed on the abandoned model; the queue has each sample trained in
//!   its own step, none left ready or in a step), and the run was opened
//!   by the first leader and the new one alone (one incarnation each);
//! - the remaining follower still answers a step with the conflict, now
//!   naming the new leader, and serves step 2's weights.
//!
//! Everything is waited for by polling the store, the fake or the
//! instances, never by fixed sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rl_daemon::{Sample, Setup, samples_in, says};
use metaclaw_core::store::Db;
use metaclaw_core::store::instances::{self, Lease};
use metaclaw_core::team::{HEARTBEAT, TTL};
use metaclaw_mock_tinker::{ModelReport, Seen};
use serde_json::{Value, json};

const INSTANCES: usize = 3;
/// What a loaded 2-core machine may add to the takeover's `TTL` and two
/// heartbeats: three debug builds, Postgres and the test on it, each beat
/// a few queries, and the lease's expiry read on the database's clock.
const LOAD_MARGIN: Duration = Duration::from_secs(6);
/// The run's lease: the default agent's run.
const LEASE: &str = "trainer";

/// One instance: its home, and its process while it runs.
struct Node {
    home: tempfile::TempDir,
    daemon: Option<common::Proc>,
}

/// The instances, the fake they train on and the store they share.
struct Team {
    fake: String,
    store_url: String,
    db: Db,
    nodes: Vec<Node>,
}

impl Team {
    /// Starts the fake, the dummy upstream (the judge) and `INSTANCES`
    /// instances together on the store at `store_url` (they migrate the
    /// empty database at once), and waits until each one's student serves.
    async fn start(store_url: &str, setup: &Setup) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(metaclaw_mock_tinker::serve(listener));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = format!("http://{}/v1", listener.local_addr().unwrap());
        let dummy = Arc::new(metaclaw_mock_upstream::Dummy::default());
        tokio::spawn(metaclaw_mock_upstream::serve(listener, dummy));
        let config = setup.config(&upstream, &fake);
        let mut starting = Vec::new();
        for _ in 0..INSTANCES {
            let home = tempfile::tempdir().unwrap();
            std::fs::write(home.path().join("config.yaml"), &config).unwrap();
            let (path, url) = (home.path().to_path_buf(), store_url.to_string());
            starting.push((
                home,
                tokio::task::spawn_blocking(move || start_daemon(&path, &url)),
            ));
        }
        let mut nodes = Vec::new();
        for (home, proc) in starting {
            nodes.push(Node {
                home,
                daemon: Some(proc.await.unwrap()),
            });
        }
        let team = Self {
            fake,
            store_url: store_url.to_string(),
            db: Db::postgres(store_url),
            nodes,
        };
        // The student connects in the background (and samples once, a
        // probe, which would take an answer scripted on the fake): every
        // instance serves before any answer is scripted.
        for i in 0..INSTANCES {
            team.until(i, "the student serving", |s| {
                s["student"]["state"] == "ready"
            })
            .await;
        }
        team
    }

    fn url(&self, i: usize) -> String {
        self.nodes[i].daemon.as_ref().unwrap().url.clone()
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.nodes[i].home.path().join("test-stderr.log"))
            .unwrap_or_default()
    }

    /// Every instance's log, for a failure's message.
    fn logs(&self) -> String {
        (0..INSTANCES)
            .map(|i| format!("---- instance {i}:\n{}", self.log(i)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `metaclaw ARGS` against instance `i` (its home; the store's URL in
    /// the environment, as on a team's machines).
    async fn cli(&self, i: usize, args: &[&str]) -> Output {
        let home = self.nodes[i].home.path().to_path_buf();
        let url = self.store_url.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            common::cli_with_env(&home, &args, &[("METACLAW_STORE_URL", url.as_str())])
        })
        .await
        .unwrap()
    }

    /// `metaclaw ARGS` (ending in `--json`) against instance `i`, which
    /// must succeed.
    async fn json(&self, i: usize, args: &[&str]) -> Value {
        let out = self.cli(i, args).await;
        assert!(
            out.status.success(),
            "{args:?} on instance {i}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Polls instance `i`'s `status --json` until `ready` holds (60 s at
    /// most).
    async fn until(&self, i: usize, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.json(i, &["status", "--json"]).await;
            if ready(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "instance {i} never got {what}: {status:#}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The session's samples, read straight from the shared store.
    fn samples(&self, session: &str) -> Vec<Sample> {
        samples_in(&self.db, session)
    }

    /// The run's lease as the store has it, and the instance of this test
    /// holding it (`None`: none of them, or no lease yet).
    fn lease(&self) -> Option<(Lease, Option<usize>)> {
        let conn = self.db.read().ok()?;
        let lease = instances::leases(&conn)
            .ok()?
            .into_iter()
            .find(|l| l.name == LEASE)?;
        let listen = instances::list(&conn)
            .ok()?
            .into_iter()
            .find(|i| i.id == lease.holder)?
            .listen;
        let node = (0..INSTANCES).find(|&i| {
            self.nodes[i]
                .daemon
                .as_ref()
                .is_some_and(|d| d.url == format!("http://{listen}"))
        });
        Some((lease, node))
    }

    /// Instance `i`'s id in the store (its `instances` row, by `listen`).
    fn id_of(&self, i: usize) -> String {
        let conn = self.db.read().unwrap();
        let url = self.url(i);
        instances::list(&conn)
            .unwrap()
            .into_iter()
            .find(|row| format!("http://{}", row.listen) == url)
            .unwrap()
            .id
    }

    /// `GET /api/v1/fake/{what}` of the fake.
    async fn fake_get<T: serde::de::DeserializeOwned>(&self, what: &str) -> T {
        reqwest::get(format!("{}/api/v1/fake/{what}", self.fake))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn models(&self) -> std::collections::BTreeMap<String, ModelReport> {
        self.fake_get("models").await
    }

    /// A judged session of two student turns on instance `i`: an answer
    /// the user corrects (the dummy judge scores it −1), then the
    /// corrected one (0), so a step has signal; its learning job run there.
    /// Its two sample ids.
    async fn session(&self, i: usize, id: &str, question: &str) -> Vec<String> {
        let http = common::client();
        let answers = ["It is in Spain.", "Sorry: it is in France."];
        let mut messages = vec![
            json!({"role": "system", "content": "You are a helpful assistant."}),
            json!({"role": "user", "content": question}),
        ];
        for (n, answer) in answers.iter().enumerate() {
            // What the student says: scripted on the fake (whichever
            // instance samples next gets it: only this one samples now).
            let script = http
                .post(format!("{}/api/v1/fake/script", self.fake))
                .json(&json!({ "sequences": [says(answer)] }))
                .send()
                .await
                .unwrap();
            assert!(script.status().is_success());
            let response = http
                .post(format!("{}/v1/chat/completions", self.url(i)))
                .header("x-session-id", id)
                .header("x-turn-type", "main")
                .json(&json!({"model": "m", "messages": messages}))
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success(), "{}", self.log(i));
            let served = response
                .headers()
                .get("x-metaclaw-served-by")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            assert!(served.starts_with("student"), "served by {served:?}");
            let v: Value = response.json().await.unwrap();
            assert_eq!(v["choices"][0]["message"]["content"], *answer, "{v}");
            messages.push(json!({"role": "assistant", "content": answer}));
            if n == 0 {
                messages
                    .push(json!({"role": "user", "content": "No, that's wrong. It is in France."}));
            }
        }
        // The store commits a turn shortly after its answer.
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.samples(id).len() < answers.len() {
            assert!(Instant::now() < deadline, "{id}'s turns were not stored");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let jobs = self.json(i, &["learn", "now", id, "--json"]).await;
        assert!(jobs.as_array().is_some_and(|j| !j.is_empty()), "{jobs}");
        self.samples(id).into_iter().map(|s| s.turn).collect()
    }

    /// Asks instance `i` for a step over its admin route: the status and
    /// the body of the answer.
    async fn step_over_http(&self, i: usize) -> (u16, String) {
        let token = std::fs::read_to_string(self.nodes[i].home.path().join("admin.token")).unwrap();
        let r = common::client()
            .post(format!("{}/admin/train/step", self.url(i)))
            .bearer_auth(token.trim())
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// A follower asked for a step: the conflict, naming the leader
    /// `leader` (its instance id), over HTTP and through the CLI.
    async fn refuses_as_follower(&self, i: usize, leader: &str) {
        let (status, body) = self.step_over_http(i).await;
        assert!(
            status == 409 && body.contains("another instance leads") && body.contains(leader),
            "a follower asked for a step answered {status} {body}"
        );
        let out = self.cli(i, &["train", "step", "--json"]).await;
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && said.contains(&format!(
                    "another instance leads this run's training ({leader}): steps run there"
                )),
            "{said}"
        );
    }

    /// Polls instance `i` until its student serves `sampler` as policy
    /// version `version` (a follower takes the leader's weights from the
    /// run's record at its next heartbeat).
    async fn serving(&self, i: usize, sampler: &str, version: i64) {
        self.until(i, &format!("{sampler} served as version {version}"), |s| {
            s["student"]["state"] == "ready"
                && s["student"]["sampler"] == sampler
                && s["student"]["policy_version"] == version
        })
        .await;
    }
}

/// `metaclaw start` in `home` on the shared store; returns once it
/// listens.
fn start_daemon(home: &std::path::Path, store_url: &str) -> common::Proc {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("test-stderr.log"))
        .unwrap();
    let mut cmd = Command::new(common::BIN);
    cmd.args(["start", "--foreground", "--port", "0"])
        .env("METACLAW_HOME", home)
        .env("METACLAW_STORE_URL", store_url)
        .env_remove("METACLAW_LLM_API_KEY")
        .env_remove("METACLAW_PROXY_API_KEY")
        .env_remove("TINKER_API_KEY")
        .env_remove("TINKER_BASE_URL")
        .env_remove("METACLAW_RL_TINKER_API_KEY")
        .env("METACLAW_NO_WIRE", "1")
        .env("METACLAW_NO_BUILTIN_SKILLS", "1")
        .stderr(log);
    common::spawn_and_wait_for(cmd, "metaclaw listening on ", Duration::from_secs(60))
}

/// The samples of a session, all trained in `step` of `run`.
fn assert_trained(samples: &[Sample], run: &str, step: i64) {
    assert_eq!(samples.len(), 2, "{samples:?}");
    assert!(
        samples
            .iter()
            .all(|s| s.state == "trained" && s.run.as_deref() == Some(run) && s.step == Some(step)),
        "{samples:?}"
    );
}

/// (ready, in step, trained), as `train status` counts the queue.
async fn queue(t: &Team, i: usize) -> (u64, u64, u64) {
    let status = t.json(i, &["train", "status", "--json"]).await;
    let q = &status["queue"];
    (
        q["ready"].as_u64().unwrap(),
        q["in_step"].as_u64().unwrap(),
        q["trained"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_mid_step_is_replaced_and_the_new_leader_trains_each_sample_once_from_the_saved_state()
 {
    let test_started = Instant::now();
    // Postgres first: without it there is nothing to test, and that is the
    // machine's failure, not metaclaw's (a failure all the same: a skipped
    // test would hide that training on a team store went untested).
    let store_url = metaclaw_pg_cluster::fresh_database().unwrap_or_else(|e| {
        panic!(
            "INFRASTRUCTURE (not a metaclaw failure): the throwaway Postgres cluster did not start \
             (initdb and postgres from `scripts/postgres-deps`, or METACLAW_PG_BIN): {e:#}"
        )
    });
    // The second `forward_backward` the fake runs (step 2's, whichever
    // instance sends it) is never answered.
    let mut t = Team::start(&store_url, &Setup::new("fake-bigram@stall_fwdbwd=2")).await;
    let started_in = test_started.elapsed();

    // One instance takes the run's lease at its next heartbeat, and its
    // trainer leads from its own next one (the log says so).
    let deadline = Instant::now() + TTL + HEARTBEAT * 2 + LOAD_MARGIN;
    let (lease, leader) = loop {
        if let Some((lease, Some(node))) = t.lease()
            && t.log(node)
                .contains("this instance leads the run's training now")
        {
            break (lease, node);
        }
        assert!(
            Instant::now() < deadline,
            "no instance led the run's training: {:?}\n{}",
            t.lease(),
            t.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let leader_id = t.id_of(leader);
    let followers: Vec<usize> = (0..INSTANCES).filter(|&i| i != leader).collect();
    // Only one leads, and the others never said they did.
    for &f in &followers {
        assert!(
            !t.log(f)
                .contains("this instance leads the run's training now"),
            "two leaders:\n{}",
            t.logs()
        );
    }

    // A follower asked for a step refuses, naming the leader.
    t.refuses_as_follower(followers[0], &leader_id).await;

    // Step 1, on the leader: a session a follower recorded and judged,
    // saved (training state and sampler weights), then served by every
    // instance.
    let first = t.session(followers[0], "s-first", "Where is Paris?").await;
    let step1 = t.json(leader, &["train", "step", "--json"]).await;
    assert_eq!(step1["outcome"], "stepped", "{step1}");
    assert_eq!(
        (step1["step"].as_i64(), step1["samples"].as_i64()),
        (Some(1), Some(2))
    );
    let run = step1["run"].as_str().unwrap().to_string();
    let state1 = step1["checkpoint"].as_str().unwrap().to_string();
    let sampler1 = step1["sampler_path"].as_str().unwrap().to_string();
    assert_trained(&t.samples("s-first"), &run, 1);
    for &f in &followers {
        t.serving(f, &sampler1, 1).await;
    }

    // Step 2, asked of the leader, on a session the other follower
    // recorded; the leader is killed while the fake holds the step's
    // forward_backward.
    let second = t.session(followers[1], "s-second", "Where is Lyon?").await;
    let model_before = t.json(leader, &["train", "status", "--json"]).await["run"]["model_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut asked = Command::new(common::BIN)
        .args(["train", "step", "--json"])
        .env("METACLAW_HOME", t.nodes[leader].home.path())
        .env("METACLAW_STORE_URL", &store_url)
        .env("METACLAW_NO_WIRE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen: Seen = t.fake_get("seen").await;
        if seen.stalled == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "step 2 never reached the stalled call: {seen:?}\n{}",
            t.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = t.samples("s-second");
    assert!(
        held.iter()
            .all(|s| s.state == "in_step" && s.step == Some(2)),
        "{held:?}"
    );
    {
        let mut proc = t.nodes[leader].daemon.take().unwrap();
        proc.child.kill().unwrap();
        proc.child.wait().unwrap();
    }
    let killed_at = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while asked.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "train step outlived the leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut said = String::new();
    asked
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert!(
        !asked.wait().unwrap().success() && !said.contains("stepped"),
        "{said}"
    );

    // What the kill left: the run's last saved state is step 1's, step 2's
    // forward_backward pending on the abandoned model; until another
    // instance leads, step 2's samples stay in that step (no follower
    // touches the queue).
    let survivor = followers[0];
    let record = t.json(survivor, &["train", "status", "--json"]).await["run"].clone();
    assert_eq!(
        (record["step"].as_i64(), record["state_step"].as_i64()),
        (Some(1), Some(1)),
        "{record}"
    );
    assert_eq!(record["state_path"], state1.as_str(), "{record}");
    assert!(
        record["pending"]
            .as_str()
            .is_some_and(|p| p.contains("step 2: forward_backward")),
        "{record}"
    );

    // A survivor takes the lease once it has run out: a new epoch, within
    // TTL and two heartbeats (the last renewal, the taker's next beat) and
    // the margin. Meanwhile the queue holds step 2's samples in the step.
    let bound = TTL + HEARTBEAT * 2 + LOAD_MARGIN;
    let (new_lease, new_leader) = loop {
        // The queue read first: with the lease still the dead leader's
        // after it, nobody led when it was read.
        let held = t.samples("s-second");
        match t.lease() {
            Some((l, Some(node))) if l.holder != lease.holder => break (l, node),
            Some((l, None)) if l.holder != lease.holder => {
                panic!("the lease went to no instance of this test: {l:?}")
            }
            _ => {}
        }
        assert!(
            held.iter()
                .all(|s| s.state == "in_step" && s.step == Some(2)),
            "the queue moved before another instance led: {held:?}\n{}",
            t.logs()
        );
        assert!(
            killed_at.elapsed() < bound,
            "no survivor took the lease within {bound:?} of the kill: {:?}\n{}",
            t.lease(),
            t.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let taken_after = killed_at.elapsed();
    assert_eq!(new_lease.epoch, lease.epoch + 1, "{new_lease:?}");
    assert!(followers.contains(&new_leader));
    let new_leader_id = t.id_of(new_leader);
    let other = *followers.iter().find(|&&f| f != new_leader).unwrap();

    // The new leader's trainer sees it at its next heartbeat and goes on
    // from the run's last saved state: the dead leader's step is undone in
    // the queue (its samples ready again, before any step is asked for).
    let deadline = Instant::now() + HEARTBEAT * 2 + LOAD_MARGIN;
    loop {
        let held = t.samples("s-second");
        if held.len() == 2 && held.iter().all(|s| s.state == "ready") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "step 2's samples not ready again {:.1} s after the new leader took the lease: {held:?}\n{}",
            (killed_at.elapsed() - taken_after).as_secs_f64(),
            t.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ready_after = killed_at.elapsed();
    assert_trained(&t.samples("s-first"), &run, 1);
    assert_eq!(queue(&t, other).await, (2, 0, 2));

    // The remaining follower refuses a step, naming the new leader.
    t.refuses_as_follower(other, &new_leader_id).await;

    // The new leader trains them, as step 2 again, on a new model loaded
    // from step 1's state.
    let step2 = t.json(new_leader, &["train", "step", "--json"]).await;
    assert_eq!(step2["outcome"], "stepped", "{step2}\n{}", t.logs());
    assert_eq!(
        (step2["step"].as_i64(), step2["samples"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(step2["run"], run.as_str());
    assert_eq!(step2["policy_version"], 2);
    let state2 = step2["checkpoint"].as_str().unwrap().to_string();
    let sampler2 = step2["sampler_path"].as_str().unwrap().to_string();
    let record = t.json(other, &["train", "status", "--json"]).await;
    let model = record["run"]["model_id"].as_str().unwrap().to_string();
    assert!(model != model_before, "{record}");
    assert_eq!(record["run"]["step"], 2, "{record}");
    assert_eq!(record["run"]["state_step"], 2, "{record}");
    assert_eq!(record["run"]["state_path"], state2.as_str(), "{record}");
    assert!(record["run"]["pending"].is_null(), "{record}");

    // The fake agrees: the weights trained now hold exactly two optimiser
    // steps, step 1's loaded and this one, on a model of the new leader's
    // own session; what the killed step did stayed on the abandoned model.
    let m = t.models().await;
    assert_eq!(
        m[&model].loaded_from.as_deref(),
        Some(state1.as_str()),
        "{m:?}"
    );
    assert_eq!(
        (m[&model].steps, m[&model].forward_backwards),
        (2, 1),
        "{m:?}"
    );
    assert!(!m[&model].unapplied_gradients, "{m:?}");
    assert_ne!(m[&model].session, m[&model_before].session, "{m:?}");
    assert_eq!(m[&model_before].forward_backwards, 2, "{m:?}");

    // Every sample trained exactly once, in its own step; nothing left.
    assert_trained(&t.samples("s-first"), &run, 1);
    assert_trained(&t.samples("s-second"), &run, 2);
    let turns: Vec<String> = t
        .samples("s-first")
        .into_iter()
        .chain(t.samples("s-second"))
        .map(|s| s.turn)
        .collect();
    assert_eq!(turns, [first, second].concat());
    assert_eq!(queue(&t, other).await, (0, 0, 4));
    let again = t.json(new_leader, &["train", "step", "--json"]).await;
    assert_eq!(again["outcome"], "waiting", "{again}");
    assert_eq!(again["ready"], 0, "{again}");
    // The run's history: step 1 by the first leader, step 2 by the new
    // one (the killed step applied nothing, so it is not recorded). One
    // incarnation each: no follower opened the run.
    let steps: Vec<(i64, i64)> = record["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_i64().unwrap(),
                s["incarnation"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(steps, [(2, 2), (1, 1)], "{record}");

    // Both survivors serve step 2's weights: the leader its own, the
    // follower the leader's from the run's record.
    t.serving(new_leader, &sampler2, 2).await;
    t.serving(other, &sampler2, 2).await;

    eprintln!(
        "team_train: {INSTANCES} instances up in {:.1} s; the lease taken {:.1} s after the kill \
         (bound {:.0} s), step 2's samples ready again after {:.1} s; {:.1} s in all",
        started_in.as_secs_f64(),
        taken_after.as_secs_f64(),
        bound.as_secs_f64(),
        ready_after.as_secs_f64(),
        test_started.elapsed().as_secs_f64(),
    );
}
