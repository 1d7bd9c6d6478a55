//! Skills: the library on disk, choosing the few that fit a turn, and the
//! block injected into the system prompt.
//!
//! Choosing goes through the `retriever` plugin role (BM25 by default): the
//! first retriever that answers wins, the next is the fallback, and with
//! none available no skill is injected (the proxy never fails for it).
//! Skills below `skills.min_relevance`, or below
//! `skills.min_relative_relevance` of the best one, are dropped, so that
//! small talk injects nothing and a shared word is not enough;
//! `skills.top_k` caps the total and `skills.task_specific_top_k` the
//! task-specific ones. Executable skills (`skill` plugins) join when
//! their `applies()` clears `skills.component_threshold`.
//!
//! A turn's retriever and executable-skill calls share one budget,
//! `plugins.turn_budget` (`plugins::turn`): retrievers are asked one after
//! another (the next is the fallback), then every executable skill at once,
//! at most as many calls at a time as there are plugin threads. What has
//! not answered when the budget ends is left out of the turn and reported
//! in [`Selection::cut`]: no number of slow but legal plugins adds more
//! than the budget to a turn.

pub mod builtin;
pub mod export;
pub mod import;
pub mod inject;
pub mod layer;
pub mod library;
pub mod outcomes;
pub mod skill;
pub mod spec;
pub mod stats;
pub mod untrusted;
pub mod upgrade;
pub mod workshop;

/// The skill library's folder (`skills.dir`, else the home's): what
/// [`paths`] gives without naming the store (on Postgres, naming it makes
/// a connection pool).
pub fn library_dir(home: &crate::home::Home, config: &crate::config::Config) -> std::path::PathBuf {
    config
        .skills
        .dir
        .as_deref()
        .map(crate::home::expand_home)
        .unwrap_or_else(|| home.skills_dir())
}

/// The library folder and the store that `config` names (under `home`
/// unless set).
pub fn paths(
    home: &crate::home::Home,
    config: &crate::config::Config,
) -> (std::path::PathBuf, crate::store::Db) {
    let expand = crate::home::expand_home;
    (
        library_dir(home, config),
        match config.store.url.as_deref() {
            Some(url) => crate::store::Db::postgres(url),
            None => crate::store::Db::at(
                config
                    .store
                    .path
                    .as_deref()
                    .map(expand)
                    .unwrap_or_else(|| home.db_file()),
            ),
        },
    )
}

use std::sync::{Arc, RwLock};

use std::sync::atomic::Ordering;

use crate::plugins::turn::TurnBudget;
use crate::plugins::{LoadedPlugin, PluginHost, types};
use inject::{Chosen, Injected};
use library::{Library, Snapshot};
use metaclaw_wire::request::{ChatRequest, Role};
use skill::{Category, Skill};

#[derive(Debug, Clone)]
pub struct SelectionSettings {
    pub enabled: bool,
    pub top_k: usize,
    pub task_specific_top_k: usize,
    pub min_relevance: f32,
    pub min_relative_relevance: f32,
    pub component_threshold: f32,
    /// `skills.outcome_weight`: how much a relevant skill's outcomes
    /// weigh in its rank (0: relevance alone).
    pub outcome_weight: f32,
    /// `skills.auto_retire`: evolved skills the outcomes flag leave
    /// retrieval.
    pub auto_retire: bool,
    pub max_context_tokens: u64,
    /// `plugins.builtin` (to say why no retriever answers).
    pub builtin_plugins: bool,
    /// `plugins.turn_budget`: what a turn's plugin calls may add to it.
    pub turn_budget: std::time::Duration,
    /// `canary.*` when `canary.skills` is on: evolved skills are tested on
    /// a share of sessions.
    pub canary: Option<crate::config::CanaryConfig>,
    /// `skills.untrusted`: skills from other tools, held until the guard
    /// passed them ([`untrusted`]).
    pub untrusted: Vec<String>,
    /// `skills.deliver` and `skills.workshop` ([`workshop`]).
    pub deliver: crate::config::Deliver,
    pub workshop: crate::config::WorkshopConfig,
}

impl SelectionSettings {
    pub fn from_config(config: &crate::config::Config) -> Self {
        let s = &config.skills;
        Self {
            enabled: s.enabled,
            top_k: s.top_k as usize,
            task_specific_top_k: s.task_specific_top_k as usize,
            min_relevance: s.min_relevance,
            min_relative_relevance: s.min_relative_relevance,
            component_threshold: s.component_threshold,
            outcome_weight: s.outcome_weight,
            auto_retire: s.auto_retire,
            max_context_tokens: config.max_context_tokens,
            builtin_plugins: config.plugins.builtin,
            turn_budget: config.plugins.turn_budget.get(),
            canary: config.canary.skills.then(|| config.canary.clone()),
            untrusted: s.untrusted.clone(),
            deliver: s.deliver,
            workshop: s.workshop.clone(),
        }
    }
}

/// What a turn looks like to retrieval.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub session_id: String,
    /// Whose turn: it sees the shared skills and its agent's own
    /// ([`layer`]).
    pub agent: crate::agent_id::AgentId,
    pub model: String,
    /// The user's latest message, cleaned of agent metadata.
    pub text: String,
    /// The last few messages (role, text), oldest first.
    pub recent: Vec<(String, String)>,
    pub system_prompt: String,
}

impl Query {
    /// How many of the latest messages a query carries, and how much of
    /// each (and of the system prompt).
    const RECENT: usize = 6;
    const CLIP_CHARS: usize = 2000;

    /// The query of a turn's request: only its last few messages are read.
    pub fn from_request(request: &ChatRequest, session_id: &str, model: &str) -> Self {
        let clip = |s: String| match s.char_indices().nth(Self::CLIP_CHARS) {
            Some((end, _)) => s[..end].to_string(),
            None => s,
        };
        let mut recent: Vec<(String, String)> = Vec::new();
        for m in request.messages().iter().rev() {
            if recent.len() == Self::RECENT {
                break;
            }
            if m.role == Role::System || m.internal {
                continue;
            }
            let mut text = request.text(m);
            if m.role == Role::User {
                // The user's words: agent metadata in a query pulls in
                // irrelevant skills (the original's issue #39).
                text = metaclaw_wire::text::user_words(&text);
            }
            recent.push((m.role.as_str().to_string(), clip(text)));
        }
        recent.reverse();
        let text = recent
            .iter()
            .rev()
            .find(|(role, _)| role == "user")
            .map(|(_, t)| t.clone())
            .unwrap_or_default();
        Query {
            session_id: session_id.into(),
            agent: crate::agent_id::AgentId::default(),
            model: model.into(),
            text,
            recent,
            system_prompt: request.system_prompt().map(clip).unwrap_or_default(),
        }
    }
}

/// The skills chosen for a turn, and how.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// In injection order (by id), each with its part of the block.
    pub skills: Vec<Chosen>,
    /// The retriever that answered (`name@version`), if any.
    pub retriever: Option<String>,
    /// Every candidate with its score, best first (for `skills search`).
    pub ranked: Vec<(String, f32)>,
    /// The plugins (`name@version`) whose calls `plugins.turn_budget` cut
    /// off: they were left out of this turn.
    pub cut: Vec<String>,
    /// The canaries this turn met: a candidate injected (its arm) or
    /// withheld (the control's).
    pub arms: Vec<crate::store::experiments::ArmRecord>,
}

/// Why no retriever answers a turn (then no skill is injected).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRetriever {
    #[error("the plugin host did not start (see the log)")]
    NoHost,
    #[error("the plugins are still loading")]
    Loading,
    #[error("no {0} plugin is loaded and enabled (see `metaclaw plugins list`)")]
    NotLoaded(String),
    #[error("plugins.builtin is false and no drop-in {0} retriever is loaded")]
    NoDropIn(String),
}

/// The retrievers a turn asks now (`name@version`, in order), or why none
/// would answer (then no skill is injected): for `status` and `doctor`.
/// `builtin` is `plugins.builtin`.
pub fn answering(plugins: Option<&PluginHost>, builtin: bool) -> Result<Vec<String>, NoRetriever> {
    let Some(host) = plugins else {
        return Err(NoRetriever::NoHost);
    };
    let loaded: Vec<String> = host
        .retrievers()
        .iter()
        .map(|r| r.label().to_string())
        .collect();
    if !loaded.is_empty() {
        return Ok(loaded);
    }
    if host.current().generation == 0 {
        return Err(NoRetriever::Loading);
    }
    let wanted: Vec<&str> = host
        .settings
        .retriever
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let wanted = wanted.join(" or ");
    Err(if builtin {
        NoRetriever::NotLoaded(wanted)
    } else {
        NoRetriever::NoDropIn(wanted)
    })
}

/// A retriever (`bm25@0.1.0`) and where its index of the library stands.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RetrieverIndex {
    pub name: String,
    pub index: crate::plugins::IndexState,
}

impl std::fmt::Display for RetrieverIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.index)
    }
}

/// How skills are retrieved, for `status`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Retrieval {
    /// `bm25` or `embedding`.
    pub mode: String,
    /// The embedding model's id, when embeddings are on.
    pub embeddings: Option<String>,
    /// Why embedding retrieval is off although configured.
    pub problem: Option<String>,
}

impl Retrieval {
    /// Builds the embedding backend the config asks for; when it cannot be
    /// built, says why and leaves retrieval to BM25.
    pub fn from_config(
        config: &crate::config::Config,
        db: &crate::store::Db,
    ) -> (Self, Option<Arc<dyn crate::plugins::Embedder>>) {
        let mode = if config.skills.embedding_retrieval() {
            "embedding"
        } else {
            "bm25"
        };
        let mut retrieval = Retrieval {
            mode: mode.into(),
            ..Retrieval::default()
        };
        match crate::embeddings::from_config(config, db) {
            Ok(Some(cached)) => {
                retrieval.embeddings = Some(cached.model_id().to_string());
                let embedder: Arc<dyn crate::plugins::Embedder> = cached;
                (retrieval, Some(embedder))
            }
            Ok(None) => (retrieval, None),
            Err(e) => {
                let problem = format!("{e:#}");
                tracing::error!("embeddings are off, BM25 retrieves skills instead: {problem}");
                retrieval.problem = Some(problem);
                (retrieval, None)
            }
        }
    }
}

pub struct Skills {
    pub library: Arc<Library>,
    pub plugins: Option<Arc<PluginHost>>,
    pub settings: SelectionSettings,
    pub retrieval: Retrieval,
    /// The retriever that answered the last turn (`name@version`).
    last_retriever: std::sync::Mutex<Option<String>>,
    /// The library as retrievers see it, rebuilt when the generation moves.
    wit: RwLock<(u64, Arc<Vec<types::Skill>>)>,
    /// Each skill version's outcomes (learning refreshes them).
    pub outcomes: Arc<outcomes::Outcomes>,
    /// The skill versions under test and their arms (learning updates
    /// them; empty with `canary.skills` off).
    pub canaries: Arc<crate::canary::Live>,
    /// Skills from other tools and the guard's verdicts on them: a held
    /// one is never injected, shown to the evolver or exported.
    pub untrusted: Arc<untrusted::Untrusted>,
    /// Evolved skills offered to OpenClaw's Skill Workshop and the owner's
    /// verdicts (`skills.deliver`).
    pub delivery: Arc<workshop::Delivery>,
}

/// A skill as retriever plugins see it.
pub fn to_wit(s: &Skill) -> types::Skill {
    types::Skill {
        id: s.id.clone(),
        name: s.name.clone(),
        description: s.description.clone(),
        category: s.category.as_str().into(),
        tags: s.tags.clone(),
        version: s.version.to_string(),
        body: s.body.clone(),
    }
}

impl Skills {
    pub fn new(
        library: Arc<Library>,
        plugins: Option<Arc<PluginHost>>,
        settings: SelectionSettings,
        retrieval: Retrieval,
    ) -> Arc<Self> {
        let outcomes = Arc::new(outcomes::Outcomes::load(library.db()));
        let canaries = match &settings.canary {
            Some(canary) => {
                let live = crate::canary::Live::load(library.db());
                if canary.user_skills {
                    library.test_user_changes(canary.share, live.clone());
                }
                live
            }
            None => crate::canary::Live::new(),
        };
        let untrusted = untrusted::Untrusted::new(settings.untrusted.clone(), library.db().clone());
        let delivery = workshop::Delivery::new(
            settings.deliver,
            settings.workshop.clone(),
            library.db().clone(),
        );
        Arc::new(Self {
            library,
            plugins,
            settings,
            retrieval,
            last_retriever: std::sync::Mutex::new(None),
            wit: RwLock::new((u64::MAX, Arc::new(Vec::new()))),
            outcomes,
            canaries,
            untrusted,
            delivery,
        })
    }

    fn wit_skills(&self, snapshot: &Snapshot) -> Arc<Vec<types::Skill>> {
        if let Ok(cached) = self.wit.read()
            && cached.0 == snapshot.generation
        {
            return cached.1.clone();
        }
        // Executable skills are chosen by their component, not retrieved;
        // retired ones not at all.
        let list: Arc<Vec<types::Skill>> = Arc::new(
            snapshot
                .skills
                .iter()
                .filter(|s| s.component.is_none() && s.retired.is_none())
                .map(|s| to_wit(s))
                .collect(),
        );
        if let Ok(mut cached) = self.wit.write() {
            *cached = (snapshot.generation, list.clone());
        }
        list
    }

    /// Whether turns may get `skill`: not one from another tool the guard
    /// has not passed ([`untrusted`]), nor one offered to OpenClaw's Skill
    /// Workshop that its owner has not applied (`deliver: workshop`) or
    /// has rejected (`both`) ([`workshop`]).
    pub fn usable(&self, skill: &Skill) -> bool {
        !self.untrusted.held(skill) && self.delivery.usable(skill)
    }

    /// Why turns do not get `skill`, if they do not.
    pub fn hold(&self, skill: &Skill) -> Option<String> {
        self.untrusted
            .hold(skill)
            .map(|h| h.label())
            .or_else(|| self.delivery.hold(skill))
    }

    /// The retrievers (`name@version`) that have indexed `generation`.
    pub fn indexed_by(&self, generation: u64) -> Vec<String> {
        self.plugins
            .iter()
            .flat_map(|p| p.retrievers())
            .filter(|r| r.indexed_generation() == Some(generation))
            .map(|r| r.label().to_string())
            .collect()
    }

    /// Each loaded retriever and where its index of library `generation`
    /// stands.
    pub fn retriever_indexes(&self, generation: u64) -> Vec<RetrieverIndex> {
        let retrievers = self.plugins.iter().flat_map(|p| p.retrievers());
        retrievers
            .map(|r| RetrieverIndex {
                name: r.label().to_string(),
                index: r.index_state(generation),
            })
            .collect()
    }

    /// [`answering`] for this library's plugins.
    pub fn answering(&self) -> Result<Vec<String>, NoRetriever> {
        answering(self.plugins.as_deref(), self.settings.builtin_plugins)
    }

    pub fn last_retriever(&self) -> Option<String> {
        self.last_retriever.lock().ok().and_then(|l| l.clone())
    }

    /// Indexes the library in every retriever, in the background on the
    /// plugin runtime (each `index()` under its own deadline): a reload or
    /// a library change never waits for it.
    pub fn warm(&self) {
        // A new or edited skill from another tool waits for the guard.
        self.untrusted.wake();
        let Some(plugins) = &self.plugins else { return };
        let snapshot = self.library.snapshot();
        let skills = self.wit_skills(&snapshot);
        for retriever in plugins.retrievers() {
            let (skills, generation) = (skills.clone(), snapshot.generation);
            plugins
                .engine
                .detach(async move { index(&retriever, &skills, generation).await });
        }
    }

    /// Indexes the library in every retriever now (`skills search`, tests).
    pub async fn index_now(&self) {
        let Some(plugins) = &self.plugins else { return };
        let snapshot = self.library.snapshot();
        let skills = self.wit_skills(&snapshot);
        for retriever in plugins.retrievers() {
            index(&retriever, &skills, snapshot.generation).await;
        }
    }

    /// Chooses the skills for a turn. Every plugin call in it is bounded by
    /// its deadline; run it on the plugin runtime (`PluginEngine::spawn`)
    /// so that serving threads never run plugin code.
    pub async fn select(&self, query: &Query) -> Selection {
        let mut selection = Selection::default();
        if !self.settings.enabled {
            return selection;
        }
        let snapshot = self.library.snapshot();
        let context = turn_context(query);
        let mut chosen: Vec<(Chosen, Category)> = Vec::new();
        let budget = TurnBudget::start(self.settings.turn_budget);

        if !query.text.trim().is_empty() && !snapshot.skills.is_empty() {
            let want = (self.settings.top_k * 4).max(8) as u32;
            let board = self.outcomes.board();
            // A retriever whose index of this library is ready answers
            // first; one still indexing it (serving an older library's
            // index, possibly an empty one) only when none is ready.
            let mut retrievers: Vec<_> = self.plugins.iter().flat_map(|p| p.retrievers()).collect();
            retrievers.sort_by_key(|r| {
                r.index_state(snapshot.generation) != crate::plugins::IndexState::Ready
            });
            self.retrieve(
                &snapshot,
                &context,
                &budget,
                &board,
                want,
                retrievers,
                &mut selection,
            )
            .await;
            self.choose_relevant(&snapshot, &board, query, &mut selection, &mut chosen);
        }

        self.ask_executable(&snapshot, &context, &budget, &mut selection, &mut chosen)
            .await;

        let mut skills: Vec<Chosen> = chosen.into_iter().map(|(i, _)| i).collect();
        skills.sort_by(|a, b| a.id.cmp(&b.id));
        selection.skills = skills;
        selection
    }

    /// Asks the retrievers in turn until one answers within the budget:
    /// its ranking (finite scores, usable skills, best first) and name go
    /// into `selection`; one cut off by the budget is noted there.
    #[allow(clippy::too_many_arguments)]
    async fn retrieve(
        &self,
        snapshot: &Arc<library::Snapshot>,
        context: &types::TurnContext,
        budget: &TurnBudget,
        board: &Arc<outcomes::Board>,
        want: u32,
        retrievers: Vec<Arc<LoadedPlugin>>,
        selection: &mut Selection,
    ) {
        let skills = self.wit_skills(snapshot);
        for retriever in retrievers {
            // Only a retriever granted them sees the outcomes (the same
            // board the re-rank below uses).
            let view = retriever.grants().outcomes.then(|| {
                Arc::new(outcomes::View {
                    board: board.clone(),
                    snapshot: snapshot.clone(),
                }) as Arc<dyn crate::plugins::OutcomeSource>
            });
            // The budget, like the call's deadline, stands still while
            // the host embeds the query.
            let retrieved = budget
                .bound_host_paused(retriever.retrieve(
                    &skills,
                    snapshot.generation,
                    context,
                    want,
                    view,
                ))
                .await;
            let Some(retrieved) = retrieved else {
                // As at its own deadline, but no fallback has time left.
                cut_off(&retriever, &mut selection.cut);
                break;
            };
            match retrieved {
                Ok(ranked) => {
                    selection.retriever = Some(retriever.label().to_string());
                    if let Ok(mut last) = self.last_retriever.lock()
                        && last.as_deref() != Some(retriever.label())
                    {
                        *last = Some(retriever.label().to_string());
                    }
                    // A NaN or infinite relevance is no relevance: it
                    // would pass every floor, or raise it past all others.
                    // A held skill is not a candidate at all
                    // ([`Skills::usable`]; retrievers index it: an
                    // index is per library generation, and a verdict
                    // is no new generation).
                    selection.ranked = ranked
                        .iter()
                        .filter(|r| r.score.is_finite())
                        .filter(|r| snapshot.get(&r.id).is_none_or(|s| self.usable(s)))
                        .map(|r| (r.id.clone(), r.score))
                        .collect();
                    // By the score the floors and `skills search` use:
                    // a retriever may rank by something else (BM25 by
                    // its raw score, `embedding` by fused rank). Stable,
                    // so ties keep the retriever's order.
                    selection.ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
                    break;
                }
                // Expected while the library is being indexed, in a
                // burst of turns or on a busy machine; not worth a
                // warning per turn (the plugin's stats count them).
                Err(e)
                    if matches!(e, crate::plugins::CallError::Indexing) || e.not_the_plugins() =>
                {
                    tracing::debug!(
                        retriever = retriever.label(),
                        "{e}; trying the next retriever"
                    )
                }
                Err(e) => tracing::warn!(
                    retriever = retriever.label(),
                    "retrieval failed, trying the next: {e}"
                ),
            }
        }
    }

    /// The relevant skills this turn may get, best first, up to `top_k`:
    /// visible to its agent, not executable, not retired, within
    /// `task_specific_top_k`, and in the candidate arm of any canary.
    fn choose_relevant(
        &self,
        snapshot: &library::Snapshot,
        board: &outcomes::Board,
        query: &Query,
        selection: &mut Selection,
        chosen: &mut Vec<(Chosen, Category)>,
    ) {
        let mut task_specific = 0;
        let relevant = rank_relevant(&selection.ranked, &self.settings, snapshot, board);
        for (id, score) in relevant {
            if chosen.len() >= self.settings.top_k {
                continue;
            }
            let Some(skill) = snapshot.get(id) else {
                continue;
            };
            if !snapshot.visible_to(id, &query.agent) {
                continue;
            }
            if skill.component.is_some()
                || skill.retired.is_some()
                || chosen.iter().any(|(c, _)| c.id == skill.id)
            {
                continue;
            }
            // A candidate under test: its arm says whether this session
            // gets it; withheld, the next relevant skill may take its
            // place, as if it were not in the library.
            if let Some((experiment, arm)) =
                self.canaries
                    .skill_arm(&skill.id, &skill.version, &query.session_id)
            {
                if arm != crate::canary::Arm::Outside
                    && !selection.arms.iter().any(|a| a.experiment == experiment)
                {
                    selection.arms.push(crate::store::experiments::ArmRecord {
                        experiment,
                        arm: arm.as_str(),
                    });
                }
                if arm != crate::canary::Arm::Candidate {
                    continue;
                }
            }
            if skill.category == Category::TaskSpecific {
                if task_specific >= self.settings.task_specific_top_k {
                    continue;
                }
                task_specific += 1;
            }
            let Some(entry) = snapshot.entry(id) else {
                continue;
            };
            let item = Chosen::cached(injected(skill, skill.body.clone(), *score), entry);
            chosen.push((item, skill.category));
        }
    }

    /// Executable skills decide for themselves, all at once, in what is
    /// left of the budget (none is asked when retrieval filled top_k).
    async fn ask_executable(
        &self,
        snapshot: &library::Snapshot,
        context: &types::TurnContext,
        budget: &TurnBudget,
        selection: &mut Selection,
        chosen: &mut Vec<(Chosen, Category)>,
    ) {
        let plugins: Vec<Arc<LoadedPlugin>> = match &self.plugins {
            Some(host) if chosen.len() < self.settings.top_k => host.skills(),
            _ => Vec::new(),
        };
        let threads = self.plugins.as_ref().map_or(1, |p| p.engine.threads());
        let threshold = self.settings.component_threshold;
        let answers = ask_skills(&plugins, context, threshold, budget, threads).await;
        for (plugin, answer) in plugins.iter().zip(answers) {
            let (applies, text) = match answer {
                Answer::Cut => {
                    cut_off(plugin, &mut selection.cut);
                    continue;
                }
                Answer::Nothing => continue,
                Answer::Rendered(applies, text) => (applies, text),
            };
            if chosen.len() >= self.settings.top_k {
                continue;
            }
            // A SKILL.md naming this component describes it.
            let described = snapshot.skills.iter().find(|s| {
                s.component
                    .as_deref()
                    .and_then(|c| crate::plugins::PluginSpec::parse(c).ok())
                    .is_some_and(|spec| {
                        spec.name == plugin.info.name && spec.req.matches(&plugin.info.version)
                    })
            });
            let item = match described {
                Some(skill) => Chosen::new(injected(skill, text, applies)),
                None => Chosen::new(Injected {
                    id: plugin.info.name.clone(),
                    name: plugin.info.name.clone(),
                    version: plugin.info.version.to_string(),
                    description: plugin.info.description.clone(),
                    text,
                    score: applies,
                }),
            };
            if !chosen.iter().any(|(c, _)| c.id == item.id) {
                chosen.push((item, Category::TaskSpecific));
            }
        }
    }
}

/// What a retriever or an executable skill is told of the turn.
fn turn_context(query: &Query) -> types::TurnContext {
    types::TurnContext {
        session_id: query.session_id.clone(),
        turn_type: "main".into(),
        model: query.model.clone(),
        system_prompt: query.system_prompt.clone(),
        messages: query
            .recent
            .iter()
            .map(|(role, text)| types::Message {
                role: role.clone(),
                content: text.clone(),
                tool_call_id: None,
                tool_calls: Vec::new(),
            })
            .collect(),
        query: query.text.clone(),
    }
}

/// The candidates past the relevance floors (`skills.min_relevance`, and
/// `min_relative_relevance` of the best), in the order they are injected:
/// by relevance alone (`outcome_weight` 0), else by relevance and each
/// skill version's outcomes (docs/skills.md, "Outcomes"). Relevance is the
/// gate; outcomes only reorder what passed it, before the top-k cut.
/// Stable: equal ranks keep the retriever's order.
pub fn rank_relevant<'a>(
    ranked: &'a [(String, f32)],
    settings: &SelectionSettings,
    snapshot: &Snapshot,
    board: &outcomes::Board,
) -> Vec<&'a (String, f32)> {
    let best = ranked.iter().map(|(_, s)| *s).fold(0.0f32, f32::max);
    let floor = settings
        .min_relevance
        .max(best * settings.min_relative_relevance);
    let relevant = ranked.iter().filter(|(_, s)| *s >= floor);
    if settings.outcome_weight <= 0.0 || best <= 0.0 {
        return relevant.collect();
    }
    let weight = f64::from(settings.outcome_weight);
    let mut keyed: Vec<(f64, &(String, f32))> = relevant
        .map(|r| {
            let optimistic = match snapshot.get(&r.0) {
                Some(s) => board.optimistic(&s.id, &s.version),
                None => board.fresh(),
            };
            (outcomes::rank(f64::from(r.1 / best), optimistic, weight), r)
        })
        .collect();
    keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
    keyed.into_iter().map(|(_, r)| r).collect()
}

/// What an executable skill said this turn.
enum Answer {
    /// `plugins.turn_budget` ran out first.
    Cut,
    /// It does not apply, rendered nothing, or failed (logged).
    Nothing,
    /// How much it applies, and its text.
    Rendered(f32, String),
}

/// Asks every skill in `plugins` whether it applies and, if it clears
/// `threshold`, for its text: at most `threads` calls at a time (more would
/// only share the same plugin threads, and a skill that computes would miss
/// the deadline it meets alone), all ending with the budget. The answers
/// come back in the order of `plugins`; the asking goes fastest first (by
/// each skill's mean call time, those cut before last), so that slow skills
/// cannot crowd quick ones out of every turn.
async fn ask_skills(
    plugins: &[Arc<LoadedPlugin>],
    context: &types::TurnContext,
    threshold: f32,
    budget: &TurnBudget,
    threads: usize,
) -> Vec<Answer> {
    let mut order: Vec<usize> = (0..plugins.len()).collect();
    order.sort_by_key(|&i| {
        let stats = &plugins[i].stats;
        let calls = stats.calls.load(Ordering::Relaxed);
        let mean = stats.busy_nanos.load(Ordering::Relaxed) / calls.max(1);
        (stats.turn_cuts.load(Ordering::Relaxed), mean)
    });
    // Fair (first come, first served): the order above is the order served.
    let slots = tokio::sync::Semaphore::new(threads.max(1));
    let asks = order.into_iter().map(|i| {
        let (plugin, slots) = (&plugins[i], &slots);
        async move {
            let answer = budget.bound(async {
                let Ok(_slot) = slots.acquire().await else {
                    return Answer::Nothing;
                };
                if budget.spent() {
                    return Answer::Cut;
                }
                ask_skill(plugin, context, threshold).await
            });
            (i, answer.await.unwrap_or(Answer::Cut))
        }
    });
    let mut answered: Vec<(usize, Answer)> = futures_util::future::join_all(asks).await;
    answered.sort_by_key(|(i, _)| *i);
    answered.into_iter().map(|(_, a)| a).collect()
}

async fn ask_skill(plugin: &LoadedPlugin, context: &types::TurnContext, threshold: f32) -> Answer {
    let applies = match plugin.applies(context).await {
        Ok(score) => score,
        Err(e) => {
            tracing::warn!(skill = plugin.label(), "applies() failed: {e}");
            return Answer::Nothing;
        }
    };
    // NaN would pass the threshold, infinity outrank everything.
    if !applies.is_finite() || applies < threshold {
        return Answer::Nothing;
    }
    match plugin.render(context).await {
        Ok(text) if !text.trim().is_empty() => Answer::Rendered(applies, text),
        Ok(_) => Answer::Nothing,
        Err(e) => {
            tracing::warn!(skill = plugin.label(), "render() failed: {e}");
            Answer::Nothing
        }
    }
}

/// Counts a call the turn's budget cut off, and names its plugin.
fn cut_off(plugin: &LoadedPlugin, cut: &mut Vec<String>) {
    plugin.stats.turn_cuts.fetch_add(1, Ordering::Relaxed);
    cut.push(plugin.label().to_string());
}

async fn index(retriever: &crate::plugins::LoadedPlugin, skills: &[types::Skill], generation: u64) {
    match retriever.warm(skills, generation).await {
        Ok(()) => tracing::debug!(
            retriever = retriever.label(),
            "indexed {} skills (generation {generation})",
            skills.len()
        ),
        Err(e) => tracing::warn!(
            retriever = retriever.label(),
            "cannot index the skills: {e}"
        ),
    }
}

fn injected(skill: &Skill, text: String, score: f32) -> Injected {
    Injected {
        id: skill.id.clone(),
        name: skill.name.clone(),
        version: skill.version.to_string(),
        description: skill.description.clone(),
        text,
        score,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_lose_openclaws_metadata() {
        let fixture: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../tests/fixtures/openclaw/chat_completions_stream_request.json"
        ))
        .unwrap();
        let body = serde_json::to_vec(&fixture["body"]).unwrap();
        let request = ChatRequest::parse(body.into(), false).unwrap();
        let query = Query::from_request(&request, "s", "m");
        assert_eq!(query.text, "Say PONG");
        // The internal context is left out; the user's message is their words.
        assert_eq!(query.recent, [("user".to_string(), "Say PONG".to_string())]);
        assert!(query.system_prompt.contains("OpenClaw"));
    }
}
