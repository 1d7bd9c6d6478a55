//! Stage 3: evolution. When the session had a judged failure (or always
//! with `skills.auto_evolve`), its transcript and verdicts go to the
//! evolver model (`learn::evolve`: prompt and schema check); its drafts
//! pass through the evolver plugin chain (guard → redact → dedup), and the
//! kept ones become SKILL.md texts in the store, for the publish stage.

use std::collections::{HashMap, HashSet};

use std::sync::Arc;

use crate::store::sql::Conn;
use anyhow::Result;

use super::{Blocked, Output, Parts, Stage, inputs};
use crate::clock::now_ms;
use crate::learn::evolve::{self, Rejected};
use crate::learn::finished;
use crate::plugins::types::{self, SkillDraft};
use crate::plugins::{LoadedPlugin, PluginHost};
use crate::redact::Redactor;
use crate::skills::skill::{self, Category, Provenance, Skill};
use crate::store::jobs::Job;
use crate::store::learning::{self, DraftOutcome, DraftRow};

/// The judge's verdicts of a session's turns, by turn id.
type Judgments = HashMap<String, learning::Judgment>;

/// The evolver plugin every chain must hold.
const GUARD: &str = "guard";

/// The round's drafts and what became of them.
pub struct Evolved {
    rows: Vec<DraftRow>,
    /// Why the evolver was not asked (evolution off, or not called for).
    skipped: Option<&'static str>,
}

/// Drafts skills from the job's session, if it calls for it.
pub async fn run(parts: &Parts, job: &Job) -> Result<Evolved> {
    let Session {
        turns,
        judgments,
        totals,
        agent,
    } = read_session(parts, job).await?;
    let skip = skip_reason(parts, &turns, &judgments);
    let (Some(skills), Some(evolver), None) = (&parts.skills, &parts.evolver, skip) else {
        return Ok(Evolved {
            rows: Vec::new(),
            skipped: Some(skip.unwrap_or("skipped")),
        });
    };

    let transcript = transcript_of(parts, &turns).await?;
    let judged = judged_lines(&turns, &judgments, &totals, &parts.redactor);
    let snapshot = skills.library.snapshot();
    // What the session's agent sees: the shared skills and its own layer's
    // (the evolver names them by name; what it learns goes to that layer).
    let visible = Visible::of(&snapshot, &agent, &skills.untrusted);
    // Skills whose turns went clearly worse than the others are named as
    // such: revising one ("updates") starts a new version.
    let board = skills.outcomes.board();
    let listed = listing(&visible, &board);
    // Before the evolver model is paid for: without guard nothing it
    // drafts could be kept.
    let chain = evolver_chain(parts.plugins.as_deref())?;
    let max = parts.settings.max_drafts.to_string();
    let prompt = evolve::PROMPT.messages(&[
        ("max_drafts", &max),
        ("skills", &listed),
        ("judged", &judged),
        ("transcript", &transcript),
    ]);
    let reply = evolver.complete(&prompt, 0.4, evolve::MAX_TOKENS).await?;

    let ids: HashSet<String> = visible.skills.iter().map(|s| s.name.clone()).collect();
    let (drafts, mut rejected) = parse_reply(parts, job, &reply, &ids);
    let library: Vec<types::Skill> = visible
        .skills
        .iter()
        .map(|s| crate::skills::to_wit(s))
        .collect();
    let (kept, more) = through_chain(parts, chain, drafts, library).await?;
    rejected.extend(more);

    let provenance = provenance(job, &turns, &judgments, &totals, &evolver.model);
    let rows = draft_rows(&parts.redactor, job, &visible, &provenance, kept, rejected);
    Ok(Evolved {
        rows,
        skipped: None,
    })
}

/// What the stage reads of the job's session.
struct Session {
    turns: Vec<learning::MainTurn>,
    judgments: Judgments,
    totals: HashMap<String, f64>,
    agent: crate::agent_id::AgentId,
}

async fn read_session(parts: &Parts, job: &Job) -> Result<Session> {
    let session = job.session_id.clone();
    let (turns, judgments, totals, agent) = parts
        .db
        .call(move |c| {
            Ok((
                learning::main_turns(c, &session)?,
                learning::judgments(c, &session)?,
                learning::turn_reward_totals(c, &session)?,
                learning::session_agent(c, &session)?.unwrap_or_default(),
            ))
        })
        .await?;
    Ok(Session {
        turns,
        judgments,
        totals,
        agent,
    })
}

/// The transcript: the last answered main turn's conversation and
/// answer (a failed turn's error is no answer to learn from).
async fn transcript_of(parts: &Parts, turns: &[learning::MainTurn]) -> Result<String> {
    let last = turns
        .iter()
        .rfind(|t| t.failed.is_none())
        .map(|t| t.id.clone())
        .unwrap_or_default();
    let (input, _) = inputs(&parts.store, last.clone(), None).await?;
    let Some(input) = input else {
        anyhow::bail!("turn {last} is not in the store");
    };
    let finished = finished::finished_turn(&input, None);
    let mut messages = finished.request;
    messages.push(finished.response);
    Ok(evolve::transcript(
        &messages,
        parts.settings.transcript_chars as usize,
        &parts.redactor,
    ))
}

/// The evolver's drafts; a reply that is rejected whole is one rejection.
fn parse_reply(
    parts: &Parts,
    job: &Job,
    reply: &str,
    ids: &HashSet<String>,
) -> (Vec<SkillDraft>, Vec<Rejected>) {
    match evolve::parse_drafts(reply, parts.settings.max_drafts as usize, ids) {
        Ok(parsed) => parsed,
        Err(reason) => {
            tracing::warn!(session = %job.session_id, "the evolver's reply was rejected: {reason}");
            (
                Vec::new(),
                vec![Rejected {
                    name: "(reply)".into(),
                    reason: reason.to_string(),
                }],
            )
        }
    }
}

/// The drafts through the evolver chain: kept, and rejected by it.
async fn through_chain(
    parts: &Parts,
    chain: Vec<Arc<LoadedPlugin>>,
    drafts: Vec<SkillDraft>,
    library: Vec<types::Skill>,
) -> Result<(Vec<SkillDraft>, Vec<Rejected>)> {
    // On the plugin runtime, each plugin under its deadline.
    let chained = async move { run_chain(&chain, drafts, &library).await };
    Ok(match parts.plugins.as_ref() {
        Some(plugins) => plugins
            .engine
            .spawn(chained)
            .await
            .ok_or_else(|| anyhow::anyhow!("the evolver chain was cancelled"))??,
        None => chained.await?,
    })
}

/// The round's rows: the kept drafts as skills (revisions held for review
/// said so), then the rejected ones with why.
fn draft_rows(
    redactor: &Redactor,
    job: &Job,
    visible: &Visible,
    provenance: &Provenance,
    kept: Vec<SkillDraft>,
    rejected: Vec<Rejected>,
) -> Vec<DraftRow> {
    let at = now_ms();
    let mut rows = Vec::new();
    for draft in kept {
        rows.push(to_row(redactor, job, draft, visible, provenance, at));
    }
    for row in rows
        .iter()
        .filter(|r| r.outcome == DraftOutcome::PendingReview)
    {
        tracing::info!(session = %job.session_id, skill = ?row.skill_id, "revision of a built-in or user-written skill held for review (metaclaw skills review)");
    }
    for r in rejected {
        tracing::info!(
            session = %job.session_id,
            draft = %crate::untrusted::log_line(&r.name, 100),
            "skill draft rejected: {}",
            crate::untrusted::log_line(&r.reason, 1000)
        );
        rows.push(DraftRow {
            reason: Some(r.reason),
            ..rejected_row(job, r.name, at)
        });
    }
    rows
}

/// The skills the evolver is shown, each with a note when it was retired
/// or did clearly worse than the others (revising it starts a version).
fn listing(visible: &Visible, board: &crate::skills::outcomes::Board) -> String {
    evolve::library_list(visible.skills.iter().map(|s| {
        let note = match (&s.retired, board.flag(&s.id, &s.version.to_string())) {
            (Some(why), _) => Some(format!(
                "retired from retrieval: {why}; revise it if this session shows how"
            )),
            (None, Some(f)) => Some(format!(
                "did badly: {}; revise it if this session shows how",
                f.reason
            )),
            (None, None) => None,
        };
        (s.name.as_str(), s.description.as_str(), note)
    }))
}

/// Why the evolver is not asked for this session, if it is not.
fn skip_reason(
    parts: &Parts,
    turns: &[learning::MainTurn],
    judgments: &Judgments,
) -> Option<&'static str> {
    let failed = judgments.values().any(|j| j.value < 0);
    match (&parts.skills, &parts.evolver) {
        (None, _) => Some("off: skills are disabled"),
        (_, None) => Some("off: no evolver model (set rl.evolver_model or llm.model_id)"),
        _ if !parts.settings.evolve => Some("off: learning.evolve is false"),
        _ if turns.is_empty() => Some("skipped: the session has no main turn"),
        _ if turns.iter().all(|t| t.failed.is_some()) => {
            Some("skipped: the upstream failed on every main turn")
        }
        _ if !failed && !parts.auto_evolve => {
            Some("skipped: no judged failure and skills.auto_evolve is off")
        }
        _ => None,
    }
}

/// One line per main turn: the judge's verdict (or why there is none)
/// and its reward, redacted.
fn judged_lines(
    turns: &[learning::MainTurn],
    judgments: &Judgments,
    totals: &HashMap<String, f64>,
    redactor: &Redactor,
) -> String {
    let mut judged = String::new();
    for (i, turn) in turns.iter().enumerate() {
        let verdict = match (judgments.get(&turn.id), &turn.failed) {
            (_, Some(why)) => format!("not judged: {why}"),
            (Some(j), None) => format!("judge {:+}: {}", j.value, j.rationale),
            (None, None) => "not judged".to_string(),
        };
        let total = totals
            .get(&turn.id)
            .map(|r| format!("; reward {r:+.2}"))
            .unwrap_or_default();
        judged.push_str(&redactor.redact_str(&format!("- turn {}: {verdict}{total}\n", i + 1)));
    }
    judged
}

/// What a draft was learned from: the turns that failed (else all, at
/// most 20), with their scores, and the evolver model.
fn provenance(
    job: &Job,
    turns: &[learning::MainTurn],
    judgments: &Judgments,
    totals: &HashMap<String, f64>,
    model: &str,
) -> Provenance {
    let mut taught: Vec<(String, Option<i8>)> = turns
        .iter()
        .map(|t| (t.id.clone(), judgments.get(&t.id).map(|j| j.value)))
        .filter(|(id, score)| *score == Some(-1) || totals.get(id).is_some_and(|r| *r < 0.0))
        .collect();
    if taught.is_empty() {
        taught = turns
            .iter()
            .map(|t| (t.id.clone(), judgments.get(&t.id).map(|j| j.value)))
            .collect();
    }
    taught.truncate(20);
    Provenance {
        session: job.session_id.clone(),
        turns: taught.iter().map(|(id, _)| id.clone()).collect(),
        judge_scores: taught.iter().map(|(_, s)| *s).collect(),
        model: model.to_string(),
    }
}

impl Output for Evolved {
    const STAGE: Stage = Stage::Evolve;

    fn summary(&self) -> String {
        if let Some(why) = self.skipped {
            return why.to_string();
        }
        let rows = &self.rows;
        let kept = rows.iter().filter(|r| r.outcome.kept()).count();
        let held = rows
            .iter()
            .filter(|r| r.outcome == DraftOutcome::PendingReview)
            .count();
        match held {
            0 => format!("{kept} skill draft(s) kept, {} rejected", rows.len() - kept),
            _ => format!(
                "{kept} skill draft(s) kept ({held} held for review), {} rejected",
                rows.len() - kept
            ),
        }
    }

    fn write(&self, tx: &Conn) -> Result<()> {
        for row in &self.rows {
            learning::insert_draft(tx, row)?;
        }
        Ok(())
    }
}

/// A draft of the job's round named `name`, rejected (for no reason yet).
fn rejected_row(job: &Job, name: String, at: i64) -> DraftRow {
    DraftRow {
        id: 0,
        session_id: job.session_id.clone(),
        round: job.round,
        name,
        outcome: DraftOutcome::Rejected,
        skill_id: None,
        version: None,
        reason: None,
        content: None,
        base_hash: None,
        base_version: None,
        written_ms: None,
        reviewed_ms: None,
        at_ms: at,
    }
}

/// A kept draft as the SKILL.md to write: a new skill, or the next
/// version of the one it `updates`.
/// The skills one agent's turns see, by name (its layer's in place of the
/// shared ones of the same name), and the layer its new skills go to.
struct Visible {
    pub skills: Vec<Arc<Skill>>,
    agent: crate::agent_id::AgentId,
}

impl Visible {
    /// ...leaving out skills from other tools the guard has not passed.
    fn of(
        snapshot: &crate::skills::library::Snapshot,
        agent: &crate::agent_id::AgentId,
        untrusted: &crate::skills::untrusted::Untrusted,
    ) -> Self {
        Self {
            skills: snapshot
                .skills
                .iter()
                .filter(|s| snapshot.visible_to(&s.id, agent) && !untrusted.held(s))
                .cloned()
                .collect(),
            agent: agent.clone(),
        }
    }

    fn by_name(&self, name: &str) -> Option<&Arc<Skill>> {
        self.skills.iter().find(|s| s.name == name)
    }
}

fn to_row(
    redactor: &Redactor,
    job: &Job,
    draft: SkillDraft,
    visible: &Visible,
    provenance: &Provenance,
    at: i64,
) -> DraftRow {
    let mut row = rejected_row(job, draft.name.clone(), at);
    let existing = draft
        .updates
        .as_deref()
        .and_then(|name| visible.by_name(name))
        .cloned();
    if existing.is_none() && visible.by_name(&draft.name).is_some() {
        row.reason = Some(format!(
            "a skill named {:?} exists and the draft does not update it",
            draft.name
        ));
        return row;
    }
    let category = Category::ALL
        .into_iter()
        .find(|c| c.as_str() == draft.category)
        .unwrap_or(Category::General);
    // The plugins redacted; the host's own patterns run once more.
    let description = redactor.redact_str(&draft.description);
    let body = redactor.redact_str(&draft.body);
    // Learned from an agent's session, it goes to that agent's layer: a
    // shared skill revised there becomes the agent's own version of it
    // (the shared one stays as it was for everyone else).
    let layer_id = |name: &str| crate::skills::layer::id_in(&visible.agent, name);
    let overrides = existing
        .as_ref()
        .is_some_and(|old| old.id != layer_id(&old.name));
    let skill = match &existing {
        Some(old) if overrides => Skill {
            id: layer_id(&old.name),
            description,
            category,
            tags: draft.tags.clone(),
            version: semver::Version::new(old.version.major, old.version.minor + 1, 0),
            created_by: format!("evolved:{}", job.session_id),
            provenance: Some(provenance.clone()),
            retired: None,
            body,
            ..Skill::clone(old)
        },
        Some(old) => Skill {
            description,
            category,
            tags: draft.tags.clone(),
            version: semver::Version::new(old.version.major, old.version.minor + 1, 0),
            provenance: Some(provenance.clone()),
            // A revision is a new version, with a fresh estimate: back in
            // retrieval if the old one was retired.
            retired: None,
            body,
            ..Skill::clone(old)
        },
        None => Skill {
            id: layer_id(&draft.name),
            name: draft.name.clone(),
            description,
            category,
            tags: draft.tags.clone(),
            version: semver::Version::new(1, 0, 0),
            created_by: format!("evolved:{}", job.session_id),
            component: None,
            provenance: Some(provenance.clone()),
            retired: None,
            extra: serde_json::Map::new(),
            body,
            content_hash: String::new(),
        },
    };
    let content = skill::render(&skill);
    if let Err(e) = skill::parse(&skill.name, &content) {
        row.reason = Some(format!("not a valid skill: {e}"));
        return row;
    }
    row.outcome = match &existing {
        // Held until the user accepts it (`metaclaw skills review`).
        Some(old) if old.revisions_need_review() => DraftOutcome::PendingReview,
        Some(_) => DraftOutcome::Updated,
        None => DraftOutcome::Created,
    };
    row.skill_id = Some(skill.id.clone());
    row.version = Some(skill.version.to_string());
    // An agent's first version of a shared skill is a new file.
    row.base_hash = existing
        .as_ref()
        .filter(|_| !overrides)
        .map(|s| s.content_hash.clone());
    row.base_version = existing.map(|s| s.version.to_string());
    row.content = Some(content);
    row
}

/// The evolver plugins in order: those `plugins.evolvers` names (unset:
/// every loaded one), third-party ones in the order given, then always the
/// first-party ones, guard → redact → dedup — whatever the config's order,
/// nothing edits a draft after guard has checked it, and dedup compares
/// clean text.
///
/// Fails closed: without an enabled `guard` in the chain, [`Blocked`] —
/// drafts are never kept unchecked (the job waits; a guard that is still
/// loading, or gets fixed, counts; `status` and `doctor` show the reason).
/// The one exception is a deployment that lists its chain in
/// `plugins.evolvers` and leaves guard out: it said so, and `status` says it.
pub fn evolver_chain(plugins: Option<&PluginHost>) -> Result<Vec<Arc<LoadedPlugin>>> {
    let Some(plugins) = plugins else {
        return Err(Blocked(
            "no guard evolver is loaded: plugins are off (see the log at start); skills are not evolved unchecked".into(),
        )
        .into());
    };
    let mut chain = plugins.evolvers();
    if !chain.iter().any(|p| p.info.name == GUARD) {
        let listed = plugins
            .settings
            .evolvers
            .as_ref()
            .map(|specs| specs.iter().any(|s| s.name == GUARD));
        let why = match listed {
            // Configured without it: the deployment's explicit choice.
            Some(false) => return Ok(chain),
            Some(true) => {
                "plugins.evolvers lists guard, but it is not loaded or is disabled (see `metaclaw plugins list`)"
            }
            None => {
                "guard is not loaded or is disabled (see `metaclaw plugins list`; plugins.builtin: false turns the first-party plugins off)"
            }
        };
        return Err(Blocked(format!(
            "no guard evolver is loaded: {why}; skills are not evolved unchecked"
        ))
        .into());
    }
    let rank = |p: &Arc<LoadedPlugin>| match p.info.name.as_str() {
        GUARD => 1,
        "redact" => 2,
        "dedup" => 3,
        _ => 0,
    };
    chain.sort_by_key(rank);
    Ok(chain)
}

/// Why evolved skills are written without guard, if they are: `chain` (an
/// [`evolver_chain`] that was allowed to run) has none because the config's
/// `plugins.evolvers` leaves it out.
pub fn evolution_unguarded(chain: &[Arc<LoadedPlugin>]) -> Option<String> {
    (!chain.iter().any(|p| p.info.name == GUARD)).then(|| {
        "plugins.evolvers leaves out guard: evolved skills are written without the poisoning check (as configured)".to_string()
    })
}

/// The drafts through each evolver plugin in turn. A plugin that fails
/// fails the stage (the job is retried): a draft never skips a check.
async fn run_chain(
    chain: &[Arc<LoadedPlugin>],
    mut drafts: Vec<SkillDraft>,
    library: &[types::Skill],
) -> Result<(Vec<SkillDraft>, Vec<Rejected>)> {
    let mut rejected = Vec::new();
    for plugin in chain {
        if drafts.is_empty() {
            break;
        }
        let outcomes = plugin
            .process(&drafts, library)
            .await
            .map_err(|e| anyhow::anyhow!("evolver plugin {} failed: {e}", plugin.label()))?;
        if outcomes.len() != drafts.len() {
            anyhow::bail!(
                "evolver plugin {} returned {} outcomes for {} drafts",
                plugin.label(),
                outcomes.len(),
                drafts.len()
            );
        }
        let mut next = Vec::with_capacity(drafts.len());
        for (draft, outcome) in drafts.into_iter().zip(outcomes) {
            match outcome {
                types::DraftOutcome::Keep(d) => next.push(d),
                // The plugin's words, stored and shown: one line, clipped.
                types::DraftOutcome::Reject(reason) => rejected.push(Rejected {
                    name: draft.name,
                    reason: format!(
                        "{}: {}",
                        plugin.info.name,
                        crate::untrusted::log_line(&reason, 1000)
                    ),
                }),
            }
        }
        drafts = next;
    }
    Ok((drafts, rejected))
}
