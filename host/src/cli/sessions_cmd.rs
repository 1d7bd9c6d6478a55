//! `sessions list | show`: read straight from the database (read-only, so it
//! works beside a running daemon and when none runs).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use serde::Deserialize;

use super::{SessionsCommand, load_config, local_time};
use metaclaw_core::home::Home;
use metaclaw_core::store::learning::{self, DraftOutcome};
use metaclaw_core::store::{self, SessionRow, TurnRow};
use std::collections::HashMap;

pub fn db_path(home: &Home, config_path: &Path) -> metaclaw_core::store::Db {
    let config = metaclaw_core::config::load(config_path)
        .ok()
        .map(|l| l.config);
    store_file(home, config.as_ref())
}

/// The store the commands read: while `start --demo` runs, the demo's own;
/// else `store.path` (default `<home>/metaclaw.db`).
pub fn store_file(
    home: &Home,
    config: Option<&metaclaw_core::config::Config>,
) -> metaclaw_core::store::Db {
    if home.demo_running() {
        return metaclaw_core::store::Db::at(home.demo_db_file());
    }
    config
        .map(|c| metaclaw_core::skills::paths(home, c).1)
        .unwrap_or_else(|| metaclaw_core::store::Db::at(home.db_file()))
}

pub fn run(home: &Home, config_path: &Path, command: SessionsCommand) -> Result<ExitCode> {
    let _ = load_config(config_path)?;
    let path = db_path(home, config_path);
    if !path.exists() {
        match command {
            SessionsCommand::List { json: true, .. } => say!("[]"),
            SessionsCommand::List { .. } => say!(
                "no sessions recorded yet ({} does not exist)",
                path.display()
            ),
            SessionsCommand::Show { id, .. } => bail!("no session {id:?}: nothing recorded yet"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let conn = path.read()?;
    match command {
        SessionsCommand::List { json, limit, agent } => {
            let rows = store::list_sessions(&conn, limit, agent.as_ref().map(|a| a.as_str()))?;
            if json {
                say!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print_list(&rows);
            }
        }
        SessionsCommand::Show {
            id,
            json,
            messages,
            tokens,
        } => {
            let Some(session) = store::session_detail(&conn, &id)? else {
                bail!("no session {id:?} (see `metaclaw sessions list`)");
            };
            if json {
                let detail = store::browse::Detail { messages, tokens };
                let Some(view) = store::browse::session_view(&conn, &session.id, detail)? else {
                    bail!("no session {id:?} (see `metaclaw sessions list`)");
                };
                say!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                let turns = store::session_turns(&conn, &session.id)?;
                let learned = Learned {
                    rewards: store::turn_rewards(&conn, &session.id)?,
                    judgments: learning::judgments(&conn, &session.id)?,
                    drafts: learning::drafts(&conn, &session.id)?,
                    job: store::jobs::get(&conn, &session.id)?,
                    feedback: store::feedback::list(&conn, &session.id)?,
                };
                print_session(&session, &turns, &learned);
                if messages {
                    for t in &turns {
                        say!("\n--- turn {} request messages ---", t.seq);
                        for m in store::load_messages(&conn, &t.message_hashes)? {
                            say!("{}", serde_json::to_string_pretty(&m)?);
                        }
                    }
                }
                if tokens {
                    print_tokens(&conn, &turns)?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_list(rows: &[SessionRow]) {
    if rows.is_empty() {
        say!("no sessions recorded yet");
        return;
    }
    let width = rows
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(2)
        .clamp(2, 48);
    let agents = rows
        .iter()
        .map(|r| r.agent_id.len())
        .max()
        .unwrap_or(5)
        .max(5);
    say!(
        "{:<width$}  {:<agents$}  {:<16}  {:<7}  {:>5}  {:<19}  ENDED",
        "ID",
        "AGENT",
        "SOURCE",
        "STATUS",
        "TURNS",
        "LAST ACTIVITY"
    );
    for r in rows {
        say!(
            "{:<width$}  {:<agents$}  {:<16}  {:<7}  {:>5}  {:<19}  {}",
            r.id,
            r.agent_id,
            r.source,
            r.status,
            r.turns,
            local_time(r.last_activity_ms),
            r.end_reason.as_deref().unwrap_or(""),
        );
    }
}

/// A student turn's line: which policy answered and how many tokens.
fn print_sample(s: &store::SampleSummary) {
    let trajectory = match &s.extends {
        Some(turn) => format!("extends {turn}"),
        None => "starts a trajectory".into(),
    };
    say!(
        "     student:   policy version {} ({}) · {} prompt → {} sampled tokens ({}) · {trajectory} · skills generation {}",
        s.policy_version,
        s.sampler,
        s.prompt_len,
        s.sampled_len,
        s.stop_reason,
        s.skill_generation
    );
    if let Some(e) = &s.parse_error {
        say!("     parse:     the sample did not parse, answered as text: {e}");
    }
    if let Some(why) = &s.withheld {
        say!("     tokens:    not kept: {why}");
    }
}

/// `--tokens`: each student turn's token ids and logprobs.
fn print_tokens(conn: &metaclaw_core::store::sql::Conn, turns: &[TurnRow]) -> Result<()> {
    for t in turns.iter().filter(|t| t.sample.is_some()) {
        let Some(sample) = store::samples::for_turn(conn, &t.id)? else {
            continue;
        };
        let list = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(" ");
        say!(
            "\n--- turn {} tokens (rendering {}) ---",
            t.seq,
            sample.rendering
        );
        say!(
            "prompt ({}): {}",
            sample.prompt_tokens.len(),
            list(&sample.prompt_tokens)
        );
        say!(
            "sampled ({}): {}",
            sample.tokens.len(),
            list(&sample.tokens)
        );
        let logprobs: Vec<String> = sample.logprobs.iter().map(|l| format!("{l:.4}")).collect();
        say!("logprobs: {}", logprobs.join(" "));
    }
    Ok(())
}

/// What learning made of a session.
struct Learned {
    rewards: HashMap<String, Vec<store::RewardRow>>,
    judgments: HashMap<String, learning::Judgment>,
    drafts: Vec<learning::DraftRow>,
    job: Option<store::jobs::Job>,
    feedback: Vec<store::feedback::Feedback>,
}

/// `thumbs down (-1) (cli, 2026-11-29 10:02): wrong file`.
fn feedback_line(f: &store::feedback::Feedback) -> String {
    let what = match f.rating.as_deref() {
        Some("up") => "thumbs up (+1)".to_string(),
        Some("down") => "thumbs down (-1)".to_string(),
        _ => format!("score {:+.2}", f.value),
    };
    let comment = f
        .comment
        .as_deref()
        .map(|c| format!(": {c}"))
        .unwrap_or_default();
    format!("{what} ({}, {}){comment}", f.source, local_time(f.at_ms))
}

fn print_session(s: &SessionRow, turns: &[TurnRow], learned: &Learned) {
    say!("session {}", s.id);
    if let Some(agent) = &s.agent_session_id {
        say!("  agent session: {agent} (window {})", s.window);
    }
    say!("  source:        {}", s.source);
    let ended = match (&s.ended_at_ms, &s.end_reason) {
        (Some(at), Some(reason)) => format!(" at {} ({reason})", local_time(*at)),
        _ => String::new(),
    };
    say!("  status:        {}{ended}", s.status);
    say!("  started:       {}", local_time(s.started_at_ms));
    say!("  turns:         {} ({} main)", s.turns, s.main_turns);
    for t in turns {
        print_turn(t);
        print_turn_learning(t, learned);
    }
    print_session_learning(learned);
}

/// A turn's token counts, as the upstream reported them.
#[derive(serde::Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

/// A turn's arm of an experiment, as recorded.
#[derive(serde::Deserialize)]
struct Arm {
    experiment: i64,
    arm: String,
}

fn shown(n: Option<u64>) -> String {
    n.map_or_else(|| "null".into(), |n| n.to_string())
}

/// One turn of `sessions show`: what was asked and answered, how, and what
/// it was served with.
fn print_turn(t: &TurnRow) {
    let http = t
        .http_status
        .map(|s| s.to_string())
        .unwrap_or_else(|| "-".into());
    let tokens = match t.usage.as_ref().map(Usage::deserialize) {
        Some(Ok(u)) => format!(
            " · tokens {}→{}",
            shown(u.prompt_tokens),
            shown(u.completion_tokens)
        ),
        _ => String::new(),
    };
    let timing = format!(
        "total {:.0} ms{}{}",
        t.total_ms,
        t.upstream_ms
            .map(|u| format!(" · upstream {u:.0} ms"))
            .unwrap_or_default(),
        t.ttft_ms
            .map(|f| format!(" · first byte {f:.0} ms"))
            .unwrap_or_default(),
    );
    say!();
    say!(
        "  #{} {}  {}  {} {}  {}{}  {}{tokens}",
        t.seq,
        local_time(t.started_at_ms),
        t.turn_type,
        t.status,
        http,
        if t.stream { "stream " } else { "" },
        t.model.as_deref().unwrap_or("-"),
        timing,
    );
    if let Some(first) = &t.retry_of {
        say!(
            "     attempt {} of the turn first sent as {first} (a resend after a failure)",
            t.attempt
        );
    }
    if let Some(user) = &t.user {
        say!("     user:      {user}");
    }
    if let Some(reply) = &t.response_summary {
        say!("     assistant: {reply}");
    }
    if let Some(err) = &t.error {
        say!("     error:     {err}");
    }
    if let Some(sample) = &t.sample {
        print_sample(sample);
    }
    if let Some(why) = &t.fallback_reason {
        say!("     student:   did not answer, llm did (not trainable): {why}");
    }
    if let Some(Ok(skills)) = t
        .injected_skills
        .as_ref()
        .map(Vec::<store::InjectedSkill>::deserialize)
    {
        let names: Vec<String> = skills
            .iter()
            .map(|s| format!("{}@{} ({:.2})", s.id, s.version, s.score))
            .collect();
        say!("     skills:    {}", names.join(", "));
    }
    if let Some(Ok(arms)) = t.arms.as_ref().map(Vec::<Arm>::deserialize) {
        let arms: Vec<String> = arms
            .iter()
            .map(|a| format!("experiment {} ({})", a.experiment, a.arm))
            .collect();
        say!(
            "     canaries:  {} (metaclaw experiments show ID)",
            arms.join(", ")
        );
    }
}

/// What learning made of one turn: the judge's votes, the scorers, the
/// user's feedback and the reward that came of them.
fn print_turn_learning(t: &TurnRow, learned: &Learned) {
    if let Some(j) = learned.judgments.get(&t.id) {
        let votes: Vec<String> = j
            .votes
            .iter()
            .map(|v| {
                v.score
                    .map(|s| format!("{s:+}"))
                    .unwrap_or_else(|| "?".into())
            })
            .collect();
        let answer = j
            .answer_model
            .as_deref()
            .map(|m| format!("; the answer of {m}"))
            .unwrap_or_default();
        say!(
            "     judge:     {:+} (votes {}; saw {}; {} {}{answer}): {}",
            j.value,
            votes.join(" "),
            j.evidence,
            j.model,
            j.prompt_version,
            j.rationale
        );
    }
    for r in learned.rewards.get(&t.id).into_iter().flatten() {
        say!(
            "     scorer:    {:+.2} {} ({}): {}",
            r.value,
            r.label,
            r.source,
            r.rationale
        );
    }
    for f in learned
        .feedback
        .iter()
        .filter(|f| f.turn_id.as_deref() == Some(t.id.as_str()))
    {
        say!("     feedback:  {}", feedback_line(f));
    }
    let judged = learned.judgments.contains_key(&t.id);
    let overrides = learned
        .feedback
        .iter()
        .any(|f| f.turn_id.is_none() || f.turn_id.as_deref() == Some(t.id.as_str()));
    match (
        t.reward,
        learning::no_reward(t, judged, learned.job.as_ref()),
    ) {
        (Some(reward), _) if overrides && t.turn_type == "main" => {
            say!("     reward:    {reward:+.2} (your feedback, ahead of the judge)")
        }
        (Some(reward), _) => say!("     reward:    {reward:+.2} (combined)"),
        (None, Some(why)) => say!("     reward:    none — {why}"),
        (None, None) => {}
    }
}

/// What learning made of the whole session: feedback on it, its job, and
/// the skills evolved from it.
fn print_session_learning(learned: &Learned) {
    let whole: Vec<_> = learned
        .feedback
        .iter()
        .filter(|f| f.turn_id.is_none())
        .collect();
    if !whole.is_empty() {
        say!();
        for f in whole {
            say!("  feedback:      {} (the whole session)", feedback_line(f));
        }
    }
    if let Some(job) = &learned.job {
        say!();
        let detail = match job.detail() {
            d if d.is_empty() => d,
            d => format!(" — {d}"),
        };
        say!(
            "  learning:      {} (round {}, attempt {}){detail}",
            job.state,
            job.round,
            job.attempts
        );
    }
    if !learned.drafts.is_empty() {
        say!("  skills evolved from this session:");
        for d in &learned.drafts {
            match d.outcome {
                DraftOutcome::Rejected => say!(
                    "    ✗ {} rejected: {}",
                    d.name,
                    d.reason.as_deref().unwrap_or("")
                ),
                DraftOutcome::PendingReview => say!(
                    "    ? {} revision (version {}) waits for your review: metaclaw skills review",
                    d.skill_id.as_deref().unwrap_or(&d.name),
                    d.version.as_deref().unwrap_or("?"),
                ),
                outcome => say!(
                    "    ✓ {} {} (version {}){}",
                    d.skill_id.as_deref().unwrap_or(&d.name),
                    outcome,
                    d.version.as_deref().unwrap_or("?"),
                    if d.written_ms.is_some() {
                        ""
                    } else {
                        ", not written yet"
                    }
                ),
            }
        }
    }
}
