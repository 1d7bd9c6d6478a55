//! `start --demo`: the learning loop in a few seconds, with no API key.
//!
//! The daemon answers from the dummy upstream in its own process (an echo
//! model, and a rule-based judge and evolver) and keeps its data apart, in
//! `<home>/demo` (`daemon::use_demo_data`). This side plays the user over
//! the daemon's own HTTP API: a question that gets built-in skills, a
//! correction, the session's end, its learning job (`learn now`), and a
//! similar question in a new session that gets the skill just evolved.
//! Every wait is for something the daemon reports, and bounded.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use metaclaw_core::admin::AdminClient;
use metaclaw_core::app::Status;
use metaclaw_core::home::{Home, PidInfo};
use metaclaw_core::store;
use metaclaw_core::store::jobs::{Job, JobState};
use metaclaw_core::store::learning::{self, DraftOutcome, DraftRow};
use metaclaw_core::untrusted::log_line;

/// The longest the demo waits for any one step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);

const QUESTION: &str = "Write a commit message for my refactor of the config loader";
const CORRECTION: &str =
    "No, that's wrong: the subject should say why the loader changed, not list the files.";
const SIMILAR: &str = "Write a commit message for my refactor of the HTTP retry logic";

/// The daemon, as the demo talks to it.
struct Daemon {
    admin: AdminClient,
    proxy_token: Option<String>,
}

/// A skill injected into a turn, with its retrieval score.
#[derive(serde::Deserialize)]
struct Injected {
    id: String,
    #[serde(default)]
    score: f64,
}

/// Runs the demo's steps against the started daemon, reporting each; an
/// error names the step that did not happen as it should.
pub(super) async fn run(home: &Home, info: &PidInfo, proxy_token: Option<&str>) -> Result<()> {
    let started = Instant::now();
    let daemon = Daemon {
        admin: AdminClient::of(home, info)?.timeout(STEP_TIMEOUT),
        proxy_token: proxy_token.map(str::to_string),
    };
    say!();
    say!(
        "Demo: the learning loop, end to end. The models are dummies built into metaclaw (an echo \
         model answers; a rule-based judge and evolver learn): no API key, nothing leaves this machine."
    );
    let status = daemon.until_indexed(None).await?;
    let store_path = status.store.path.clone();
    let library = status
        .skills
        .as_ref()
        .context("skills are off in this daemon")?;
    say!(
        "  demo data: {} (its own store and skill library, started afresh with {} built-in skills; \
         yours are not touched)",
        home.demo_dir().display(),
        library.loaded
    );

    let first = ask_and_correct(&daemon, &store_path).await?;
    let job = end_and_learn(&daemon, &first).await?;
    let evolved = judge_and_evolve(&store_path, &first, &status, &library.dir, &job)?;
    ask_again(&daemon, &store_path, library.generation, &evolved).await?;
    say!("   (demo done in {:.1} s)", started.elapsed().as_secs_f64());
    try_it_yourself(info, proxy_token, &first, &evolved);
    Ok(())
}

/// Steps 1-2: a question that gets built-in skills, and a correction in
/// the same session. Returns the session's id.
async fn ask_and_correct(daemon: &Daemon, store_path: &Path) -> Result<String> {
    let first = new_session_id();
    say!();
    say!("1. You ask: \"{QUESTION}\"");
    let mut messages = vec![json!({"role": "user", "content": QUESTION})];
    let (turn, answer) = daemon.ask(&first, &messages).await?;
    let injected = injected_into(&store::Db::at(store_path), &first, &turn).await?;
    if injected.is_empty() {
        bail!("no built-in skill was injected into the question (see `metaclaw status`)");
    }
    say!("   built-in skills injected: {}", list(&injected, None));
    say!(
        "   answer (the echo model repeats you): \"{}\"",
        log_line(&answer, 60)
    );
    say!("2. You correct it: \"{CORRECTION}\"");
    messages.push(json!({"role": "assistant", "content": answer}));
    messages.push(json!({"role": "user", "content": CORRECTION}));
    daemon.ask(&first, &messages).await?;
    Ok(first)
}

/// Step 3 and the start of 4: the session ends and its learning job runs
/// now. Returns the job once it is done.
async fn end_and_learn(daemon: &Daemon, session: &str) -> Result<Job> {
    daemon.end(session).await?;
    say!("3. The session ends (POST /v1/sessions/{session}/end): a learning job is queued.");
    say!("4. Learning from it (what `metaclaw learn now {session}` runs):");
    let mut job = daemon.learn_now(session).await?;
    // The runner may have claimed it first: `learn now` then waits for it,
    // and asking again returns it as it ended.
    let asked = Instant::now();
    while job.state == JobState::Running && asked.elapsed() < STEP_TIMEOUT {
        tokio::time::sleep(Duration::from_millis(100)).await;
        job = daemon.learn_now(session).await?;
    }
    if job.state != JobState::Done {
        bail!(
            "the learning job did not finish ({}): {}",
            job.state,
            job.detail()
        );
    }
    Ok(job)
}

/// Step 4's outcome, as the store recorded it: the judge's verdict on each
/// turn and the evolver's drafts. Returns the skill the job created.
fn judge_and_evolve(
    store_path: &Path,
    session: &str,
    status: &Status,
    skills_dir: &Path,
    job: &Job,
) -> Result<String> {
    let conn = store::Db::at(store_path).read()?;
    let turns = store::session_turns(&conn, session)?;
    let judgments = learning::judgments(&conn, session)?;
    let verdicts: Vec<String> = turns
        .iter()
        .map(|t| match judgments.get(&t.id) {
            Some(j) => format!(
                "turn {} {} ({})",
                t.seq,
                signed(j.value),
                log_line(&j.rationale, 60)
            ),
            None => format!("turn {} not judged", t.seq),
        })
        .collect();
    say!("   judge: {}", verdicts.join("; "));
    let drafts = learning::drafts(&conn, session)?;
    drop(conn);
    let Some(evolved) = show_drafts(&drafts, status, skills_dir) else {
        bail!("the learning job evolved no skill ({})", job.detail());
    };
    Ok(evolved)
}

/// The evolver's drafts, each as its chain of evolvers left it; the id of
/// the skill created and written, if any.
fn show_drafts(drafts: &[DraftRow], status: &Status, skills_dir: &Path) -> Option<String> {
    let chain: Vec<&str> = status
        .evolver_chain
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    say!(
        "   evolver: {} draft(s), each checked by {}:",
        drafts.len(),
        if chain.is_empty() {
            "no evolver plugin".to_string()
        } else {
            chain.join(" → ")
        }
    );
    let mut evolved = None;
    for d in drafts {
        let name = log_line(d.skill_id.as_deref().unwrap_or(&d.name), 60);
        match d.outcome {
            DraftOutcome::Rejected => say!(
                "     ✗ {name} rejected: {}",
                log_line(d.reason.as_deref().unwrap_or(""), 100)
            ),
            outcome => {
                say!(
                    "     ✓ {name} {outcome} (v{}) in {}",
                    d.version.as_deref().unwrap_or("?"),
                    skills_dir.display()
                );
                if outcome == DraftOutcome::Created && d.written_ms.is_some() {
                    evolved = d.skill_id.clone();
                }
            }
        }
    }
    evolved
}

/// Step 5: the library changed; once it is indexed (past `generation`), a
/// similar question in a new session must retrieve the `evolved` skill.
async fn ask_again(
    daemon: &Daemon,
    store_path: &Path,
    generation: u64,
    evolved: &str,
) -> Result<()> {
    daemon.until_indexed(Some(generation)).await?;
    let second = new_session_id();
    say!("5. You ask again, in a new session: \"{SIMILAR}\"");
    let messages = [json!({"role": "user", "content": SIMILAR})];
    let (turn, _) = daemon.ask(&second, &messages).await?;
    let injected = injected_into(&store::Db::at(store_path), &second, &turn).await?;
    say!("   skills injected: {}", list(&injected, Some(evolved)));
    if !injected.iter().any(|s| s.id == evolved) {
        bail!("the evolved skill {evolved} was not injected into the similar question");
    }
    Ok(())
}

/// The summary: commands to look at what the demo did, and to go on.
fn try_it_yourself(info: &PidInfo, proxy_token: Option<&str>, first: &str, evolved: &str) {
    let auth = proxy_token
        .map(|t| format!(" -H 'authorization: Bearer {t}'"))
        .unwrap_or_default();
    say!();
    say!("Try it yourself (while the demo runs, these read its data):");
    say!(
        "  curl -si {}/v1/chat/completions -H 'content-type: application/json'{auth} \\\n    \
         -d '{{\"model\":\"echo\",\"messages\":[{{\"role\":\"user\",\"content\":\"How do I rebase my branch onto main?\"}}]}}'\n    \
         # the x-metaclaw-skills header lists the skills injected",
        info.url
    );
    say!("  metaclaw sessions show {first}   # turns, skills, verdicts, what evolved");
    say!("  metaclaw skills show {evolved}");
    say!("  metaclaw skills search \"squash my commits before a merge\"");
    say!("  metaclaw status");
    say!("  metaclaw stop       # then `metaclaw setup` and `metaclaw start` for your own agent");
}

/// A reply's JSON body (`null` if it has none).
async fn json_body(response: reqwest::Response) -> Value {
    let bytes = response.bytes().await.unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or_default()
}

/// A verdict as the judge gives it: -1, 0, +1.
fn signed(value: i8) -> String {
    match value {
        0 => "0".into(),
        v => format!("{v:+}"),
    }
}

fn new_session_id() -> String {
    format!("demo-{}", uuid::Uuid::now_v7().simple())
}

/// `id (score), …`, best first, marking `evolved`.
fn list(skills: &[Injected], evolved: Option<&str>) -> String {
    if skills.is_empty() {
        return "none".into();
    }
    let mut by_score: Vec<&Injected> = skills.iter().collect();
    by_score.sort_by(|a, b| b.score.total_cmp(&a.score));
    by_score
        .into_iter()
        .map(|s| {
            let mark = match evolved {
                Some(e) if e == s.id => " ← evolved in step 4",
                _ => "",
            };
            format!("{} ({:.2}){mark}", log_line(&s.id, 60), s.score)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The skills injected into `turn`, read from the store once the turn is
/// recorded (the proxy answers first and records right after).
async fn injected_into(db: &store::Db, session: &str, turn: &str) -> Result<Vec<Injected>> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let conn = db.read()?;
        let row = store::session_turns(&conn, session)?
            .into_iter()
            .find(|t| t.id == turn);
        if let Some(row) = row {
            let skills = row
                .injected_skills
                .map(serde_json::from_value::<Vec<Injected>>)
                .transpose()
                .context("the turn's injected skills are not as recorded")?
                .unwrap_or_default();
            return Ok(skills);
        }
        if Instant::now() > deadline {
            bail!(
                "turn {turn} was not recorded within {}s (see the log)",
                STEP_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

impl Daemon {
    /// A request to the proxy's own route `path`, with its token if any.
    fn proxy(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .admin
            .http()
            .post(format!("{}{path}", self.admin.url()))
            .timeout(STEP_TIMEOUT)
            .header("content-type", "application/json");
        match &self.proxy_token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn status(&self) -> Result<Status> {
        Ok(self.admin.status().await?)
    }

    /// Waits until the library is read (a generation after `after`, if
    /// given) and a retriever has indexed it: a turn never waits for an
    /// index, so a question asked before would get no skills.
    async fn until_indexed(&self, after: Option<u64>) -> Result<Status> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let status = self.status().await?;
            let Some(skills) = &status.skills else {
                bail!("skills are off in this daemon");
            };
            let ready = skills.loaded > 0
                && after.is_none_or(|g| skills.generation > g)
                && !skills.indexed_by.is_empty();
            if ready {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let blocked = match &status.evolution_blocked {
                    Some(s) => format!("; skills would not evolve either: {s}"),
                    None => String::new(),
                };
                bail!(
                    "no retriever indexed the demo's skill library within {}s ({} plugin(s) \
                     loaded; see `metaclaw plugins list` and the log){blocked}",
                    STEP_TIMEOUT.as_secs(),
                    status.plugins.as_ref().map_or(0, |p| p.loaded)
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One turn in `session`: the turn's id and the answer's text.
    async fn ask(&self, session: &str, messages: &[Value]) -> Result<(String, String)> {
        let body = json!({"model": "echo", "messages": messages});
        let response = self
            .proxy("/v1/chat/completions")
            .header("x-session-id", session)
            .body(body.to_string())
            .send()
            .await
            .context("the demo's question did not reach metaclaw")?;
        let status = response.status();
        let turn = response
            .headers()
            .get("x-metaclaw-turn-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let answer: Value = json_body(response).await;
        let (true, Some(turn)) = (status.is_success(), turn) else {
            bail!("the demo's question failed ({status}): {answer}");
        };
        let text = metaclaw_wire::recorded::Completion::read(&answer)
            .message()
            .and_then(|m| m.content.as_str())
            .unwrap_or_default()
            .to_string();
        Ok((turn, text))
    }

    async fn end(&self, session: &str) -> Result<()> {
        let response = self
            .proxy(&format!("/v1/sessions/{session}/end"))
            .send()
            .await
            .context("cannot end the demo's session")?;
        if !response.status().is_success() {
            bail!(
                "ending the demo's session failed ({}): {}",
                response.status(),
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Runs the session's learning job now and returns it as it ended.
    async fn learn_now(&self, session: &str) -> Result<Job> {
        let reply = self
            .admin
            .post_json("/admin/learn/now", &json!({ "session": session }))
            .await
            .context("learn now failed")?;
        #[derive(serde::Deserialize)]
        struct Ran {
            jobs: Vec<Job>,
        }
        let ran: Ran =
            serde_json::from_value(reply).context("learn now answered without its job")?;
        ran.jobs
            .into_iter()
            .next()
            .context("learn now ran no job for the demo's session")
    }
}
