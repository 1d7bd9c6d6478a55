//! Per-turn scoring: a turn's outcome is known once the next thing happens
//! in its session (the agent's next call carries the tool results or the
//! user's next message). So when a session's next main turn is recorded
//! (the store's writer reports it), the previous one is *finished* and the
//! scorer plugins score it; when the session ends (the writer reports that
//! too, after the session's turns), its last turn. Rewards
//! go back to the store through its writer queue. What this misses (a
//! crash, a restart) the job's score stage (`stages::score`) catches up.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;

use super::finished;
use crate::clock::now_ms;
use crate::plugins::PluginHost;
use crate::plugins::types::FinishedTurn;
use crate::store::{Committed, Recorded, RewardRecord, SCORER_TAIL, ScoringInput, Store, TurnType};

/// A turn for the scorers: what the store's writer handed over when it
/// recorded the turn, or (for a turn recorded before this run) its id, to
/// read back.
enum Input {
    Memory(Arc<ScoringInput>),
    Stored(String),
}

impl Input {
    fn of(turn: &Recorded) -> Self {
        match &turn.scoring {
            Some(input) => Input::Memory(input.clone()),
            None => Input::Stored(turn.turn_id.clone()),
        }
    }

    fn id(&self) -> &str {
        match self {
            Input::Memory(input) => &input.turn_id,
            Input::Stored(id) => id,
        }
    }

    fn load(self, store: &Store) -> anyhow::Result<Option<Arc<ScoringInput>>> {
        match self {
            Input::Memory(input) => Ok(Some(input)),
            Input::Stored(id) => Ok(store.scoring_input(&id)?.map(Arc::new)),
        }
    }
}

pub struct Scoring {
    store: Store,
    /// The latest main turn of each open session, waiting for its successor.
    pending: HashMap<Arc<str>, Input>,
    plugins: Option<Arc<PluginHost>>,
}

impl Scoring {
    /// Scoring runs on its own thread, one turn at a time, fed by the
    /// store's writer in commit order (a turn, then its session's end):
    /// no hop through the serving runtime. Not niced: scorer calls have
    /// wall-clock deadlines, and a starved thread would time out plugins
    /// that did nothing wrong. It ends when the writer does.
    pub fn spawn(
        store: Store,
        plugins: Option<Arc<PluginHost>>,
        committed: Receiver<Committed>,
    ) -> std::io::Result<JoinHandle<()>> {
        let mut scoring = Self {
            store,
            pending: HashMap::new(),
            plugins,
        };
        crate::work::thread("metaclaw-score", move || {
            for event in committed {
                match event {
                    Committed::Turn(turn) => scoring.on_recorded(turn),
                    Committed::SessionEnd(session) => scoring.on_session_end(session),
                }
            }
        })
    }

    /// Whether any scorer is loaded now (`plugins.scorers: []` has none; a
    /// reload may change it). Without one, a turn is neither read back nor
    /// queued: the job's score stage marks what is left when it runs.
    fn scoring(&self) -> bool {
        self.plugins
            .as_ref()
            .is_some_and(|p| !p.scorers().is_empty())
    }

    fn on_recorded(&mut self, turn: Recorded) {
        if turn.turn_type != TurnType::Main {
            return;
        }
        if !self.scoring() {
            // Its predecessor is not this turn's to score once scorers come
            // back: the store says then what is unscored.
            self.pending.remove(&turn.session_id);
            return;
        }
        if turn.retry {
            // The attempt it retries is superseded: scoring it with its
            // own resend as "what happened next" would read the agent's
            // retry as the user repeating themselves.
            self.pending
                .insert(turn.session_id.clone(), Input::of(&turn));
            return;
        }
        let previous = match self
            .pending
            .insert(turn.session_id.clone(), Input::of(&turn))
        {
            Some(previous) => Some(previous),
            // First sight since start: the store knows what is unscored.
            None => self
                .unscored(&turn.session_id, Some(turn.seq))
                .map(Input::Stored),
        };
        if let Some(previous) = previous {
            self.score(previous, Some(Input::of(&turn)));
        }
    }

    fn on_session_end(&mut self, session: Arc<str>) {
        if !self.scoring() {
            self.pending.remove(&session);
            return;
        }
        let last = match self.pending.remove(&session) {
            Some(last) => Some(last),
            None => self.unscored(&session, None).map(Input::Stored),
        };
        if let Some(last) = last {
            self.score(last, None);
        }
    }

    fn unscored(&self, session: &str, before: Option<i64>) -> Option<String> {
        match self.store.unscored_main_turn(session, before) {
            Ok(found) => found.map(|(id, _)| id),
            Err(e) => {
                tracing::warn!(session, "cannot look for unscored turns: {e:#}");
                None
            }
        }
    }

    /// Scores `turn`, `next` being its successor, and queues its rewards.
    fn score(&self, turn: Input, next: Option<Input>) {
        let turn_id = turn.id().to_string();
        let scored = (|| {
            let Some(turn) = turn.load(&self.store)? else {
                anyhow::bail!("turn {turn_id} is not in the store");
            };
            // A failed turn is no answer: nothing to score (it still was
            // the next state of the turn before it).
            if turn.status != "ok" {
                return Ok(None);
            }
            let next = match next {
                Some(next) => next.load(&self.store)?,
                None => None,
            };
            Ok(Some(score(self.plugins.as_deref(), &turn, next.as_deref())))
        })();
        match scored {
            Ok(Some(Ok(rewards))) => self.store.rewards(turn_id, rewards, now_ms()),
            Ok(None) => {}
            // Left unscored: the session's job scores it (and waits while
            // the scorer cannot run).
            Ok(Some(Err(e))) => tracing::info!(turn = %turn_id, "{e}"),
            Err(e) => tracing::warn!(turn = %turn_id, "cannot score: {e:#}"),
        }
    }
}

/// Scores a recorded turn read back from the store (the job's score stage):
/// the store's errors outside, a scorer that could not run inside.
pub fn score_turn(
    store: &Store,
    plugins: Option<&PluginHost>,
    turn_id: &str,
    next: Option<&str>,
) -> anyhow::Result<Result<Vec<RewardRecord>, ScorerUnavailable>> {
    // No scorer, nothing to read: the turn is scored with no rewards.
    if plugins.is_none_or(|host| host.scorers().is_empty()) {
        return Ok(Ok(Vec::new()));
    }
    let Some(turn) = store.scoring_input(turn_id)? else {
        anyhow::bail!("turn {turn_id} is not in the store");
    };
    let next = match next {
        Some(id) => store.scoring_input(id)?,
        None => None,
    };
    Ok(score(plugins, &turn, next.as_ref()))
}

/// A scorer had no chance to run (every instance busy, or the machine too
/// busy to give it its deadline), even when asked again: the turn is left
/// unscored to be scored later, not stored without that scorer's reward (a
/// reward lost to a busy moment is a turn that silently never trains).
#[derive(Debug, thiserror::Error)]
#[error("scorer {scorer} could not run ({why}); the turn is scored later")]
pub struct ScorerUnavailable {
    scorer: String,
    why: String,
}

/// The waits before asking a crowded-out scorer again (off the request
/// path, so a few seconds in all).
const SCORER_RETRIES: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(500),
    std::time::Duration::from_millis(2500),
];

/// Runs every scorer of the role on a finished turn. A failing scorer is
/// skipped (its failure is counted, and it is disabled if it keeps failing);
/// one crowded out by the machine is asked again, and then the turn waits.
pub(crate) fn score(
    plugins: Option<&PluginHost>,
    turn: &ScoringInput,
    next: Option<&ScoringInput>,
) -> Result<Vec<RewardRecord>, ScorerUnavailable> {
    let Some(host) = plugins else {
        return Ok(Vec::new());
    };
    let scorers = host.scorers();
    if scorers.is_empty() {
        return Ok(Vec::new());
    }
    let finished = scorer_view(turn, next);
    let finished = &finished;
    // All scorers at once: a slow one costs its deadline once, not once per
    // scorer after it.
    let outcomes = host
        .engine
        .block_on(futures_util::future::join_all(scorers.iter().map(
            |scorer| async move {
                let mut outcome = scorer.score(finished).await;
                for wait in SCORER_RETRIES {
                    if !matches!(outcome, Err(ref e) if e.not_the_plugins()) {
                        break;
                    }
                    tokio::time::sleep(wait).await;
                    outcome = scorer.score(finished).await;
                }
                outcome
            },
        )));
    let mut rewards = Vec::new();
    for (scorer, outcome) in scorers.iter().zip(outcomes) {
        match outcome {
            Ok(Some(reward)) => rewards.push(RewardRecord {
                source: format!("plugin:{}", scorer.label()),
                value: reward.value,
                label: reward.label,
                rationale: reward.rationale,
            }),
            Ok(None) => {}
            Err(e) if e.not_the_plugins() => {
                return Err(ScorerUnavailable {
                    scorer: scorer.label().to_string(),
                    why: e.to_string(),
                });
            }
            Err(e) => tracing::debug!(plugin = scorer.label(), "scorer skipped: {e}"),
        }
    }
    Ok(rewards)
}

/// The finished turn as a scorer gets it: the conversation's latest
/// [`SCORER_TAIL`] messages, without the system prompt (what the writer
/// hands over already is just that).
fn scorer_view(turn: &ScoringInput, next: Option<&ScoringInput>) -> FinishedTurn {
    let mut finished = finished::finished_turn(turn, next);
    finished.request.retain(|m| m.role != "system");
    let skip = finished.request.len().saturating_sub(SCORER_TAIL);
    finished.request.drain(..skip);
    finished
}
