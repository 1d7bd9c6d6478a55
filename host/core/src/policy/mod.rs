//! The policy being trained, as served (`mode: rl` / `auto`): the agent's
//! turns are answered by sampling the trainable model through the Tinker
//! bridge, and what was sampled is kept token for token.
//!
//! A turn's messages are rendered once with the model's own chat template
//! and tokenizer (`metaclaw_chat::render`), sampled (base weights at first,
//! the latest saved sampler weights after a swap), and the sampled tokens
//! parsed back into an assistant message (`metaclaw_chat::parse`). The
//! proxy turns that into the client's API (`proxy/student.rs`); the exact
//! prompt tokens, sampled tokens and logprobs go to the store with the
//! turn. When the student cannot answer, the proxy falls back to `llm`
//! (`rl.fallback_to_llm`) and [`Policy::health`] says why.
//!
//! | file | job |
//! |---|---|
//! | `files.rs` | where the tokenizer and chat template come from |
//! | `connect.rs` | the background task: renderer, service, session, sampler; reconnects |
//! | `trajectory.rs` | which turns of a session extend one another (one trajectory) |

pub mod connect;
pub mod files;
mod trajectory;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use metaclaw_chat::parse::{self, Family, Parsed};
use metaclaw_chat::render::{RenderOptions, Renderer};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::canary::{Arm, arm_for};
use crate::clock::now_ms;
use crate::config::{Config, Thinking, ToolCallFormat};
use crate::store::experiments::ArmRecord;
use crate::store::samples::{SampleRecord, Sibling};
use crate::tinker::types::StopReason;
use crate::tinker::{self, Sampler, SamplingParams, Session, Stop};

/// Tries of one call to the training service on the serving path.
const SERVING_TRIES: u32 = 2;

/// Why saved weights cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("not connected to the training service")]
    NotConnected,
    #[error("{0}")]
    Service(#[from] crate::tinker::Error),
}

/// What serving from the student is configured to do.
#[derive(Clone)]
pub struct StudentSettings {
    /// The training service's base model (`rl.model`).
    pub base_model: String,
    pub tinker: tinker::ServiceSettings,
    pub fallback_to_llm: bool,
    pub serve_side_turns: bool,
    pub tool_call_format: ToolCallFormat,
    pub thinking: Thinking,
    pub max_new_tokens: u32,
    pub sample_timeout: Duration,
    /// `rl.tokenizer_path`, expanded (empty: look elsewhere).
    pub tokenizer_path: String,
    pub download_tokenizer: bool,
    /// Where downloaded tokenizer files go (`<home>/models`).
    pub download_dir: PathBuf,
    /// The store, read for the active training run's latest sampler.
    pub db: crate::store::Db,
    /// Answers sampled per main turn (`rl.group_size`): one is served, the
    /// others are kept to be judged with it as a group.
    pub group_size: u32,
    /// Whose run's weights it serves and whose run its samples train: ''
    /// the shared run, else the agent's own (`agents.<id>.rl`).
    pub run_agent: String,
}

impl StudentSettings {
    /// The settings of the shared run's policy (`run_agent` ''), or of an
    /// agent's own (`config` is then `Config::for_agent`'s).
    pub fn from_config(
        config: &Config,
        run_agent: &str,
        home: &crate::home::Home,
        db: crate::store::Db,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let rl = &config.rl;
        let tokenizer_path = match rl.tokenizer_path.trim() {
            "" => String::new(),
            p => crate::home::expand_home(p).to_string_lossy().into_owned(),
        };
        // A turn is waiting: a service that does not answer is given up
        // on quickly (the turn falls back), not retried for minutes.
        let mut tinker = tinker::configured::settings(config, env);
        tinker.tries = SERVING_TRIES;
        tinker.first_retry_wait = Duration::from_millis(250);
        Self {
            base_model: tinker::configured::base_model(config),
            tinker,
            fallback_to_llm: rl.fallback_to_llm,
            serve_side_turns: rl.serve_side_turns,
            tool_call_format: rl.tool_call_format,
            thinking: rl.thinking,
            max_new_tokens: rl.max_new_tokens.max(1),
            sample_timeout: rl.sample_timeout.get(),
            tokenizer_path,
            download_tokenizer: rl.download_tokenizer,
            download_dir: home.root.join("models"),
            db,
            group_size: rl.group_size.max(1),
            run_agent: run_agent.to_string(),
        }
    }
}

/// The chat format in use: renderer, tool-call syntax, thinking.
pub struct ChatFormat {
    pub renderer: Renderer,
    pub family: Option<Family>,
    pub enable_thinking: Option<bool>,
    /// Where the files came from (for `status`).
    pub dir: PathBuf,
    /// The model's context window (`max_position_embeddings` of its
    /// `config.json`, when the folder has one): prompt and answer fit in it.
    pub context: Option<u32>,
}

impl ChatFormat {
    fn new(renderer: Renderer, settings: &StudentSettings, dir: PathBuf) -> Self {
        let family = match settings.tool_call_format {
            ToolCallFormat::Auto => Family::detect(renderer.template()),
            ToolCallFormat::Hermes => Some(Family::Hermes),
            ToolCallFormat::KimiK2 => Some(Family::KimiK2),
            ToolCallFormat::None => None,
        };
        let enable_thinking = match settings.thinking {
            Thinking::Auto => None,
            Thinking::On => Some(true),
            Thinking::Off => Some(false),
        };
        if enable_thinking.is_some() && !renderer.supports_thinking() {
            tracing::warn!(
                "rl.thinking is set, but the chat template has no enable_thinking switch: it renders as it always does"
            );
        }
        /// The model's `config.json`, for its context length.
        #[derive(serde::Deserialize)]
        struct ModelConfig {
            max_position_embeddings: Option<u64>,
        }
        let context = std::fs::read(dir.join("config.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<ModelConfig>(&bytes).ok())
            .and_then(|c| c.max_position_embeddings)
            .and_then(|n| u32::try_from(n).ok());
        Self {
            renderer,
            family,
            enable_thinking,
            dir,
            context,
        }
    }
}

/// The sampler answering now, and what it samples.
pub struct Serving {
    /// Kept alive (its heartbeat) while the sampler is in use.
    session: Arc<Session>,
    sampler: Sampler,
    /// `base` or the saved sampler weights' path.
    pub sampler_name: String,
    /// 0 for the base weights, else the training step they were saved at.
    pub version: i64,
}

/// Why the student is or is not answering, for `status`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// `starting`, `ready` or `down`.
    pub state: Cow<'static, str>,
    /// Why it is not ready, or why the last turn fell back.
    pub reason: Option<String>,
    pub since_ms: i64,
    /// The sampler and policy version answering now.
    pub sampler: Option<String>,
    pub policy_version: Option<i64>,
    /// The rendering in use (template + tokenizer hash) and where its files are.
    pub rendering: Option<String>,
    pub tokenizer_dir: Option<String>,
    pub tool_call_format: Option<Cow<'static, str>>,
    pub samples: u64,
    pub parse_errors: u64,
    pub fallbacks: u64,
    pub last_fallback: Option<String>,
}

/// The served policy: shared by every turn, kept up by [`connect::run`].
pub struct Policy {
    pub settings: StudentSettings,
    format: RwLock<Option<Arc<ChatFormat>>>,
    serving: RwLock<Option<Arc<Serving>>>,
    health: Mutex<Health>,
    /// A turn found the sampler gone: reconnect now.
    reconnect: Notify,
    /// The service no longer holds the saved weights being served (skyrl
    /// unloads a dead session's models): the trainer loads them again
    /// into a model of its own ([`Policy::weights_lost`]).
    weights_lost: Notify,
    /// The saved weights last found gone.
    lost_path: Mutex<Option<String>>,
    /// A trainer waits on [`Policy::weights_lost`].
    reloader: std::sync::atomic::AtomicBool,
    trajectories: trajectory::Tails,
    /// New weights under test (`canary.weights`): the sessions of their
    /// candidate arm are served by them, every other by the incumbent.
    candidate: RwLock<Option<Arc<Candidate>>>,
}

/// Weights under test beside the incumbent's.
pub struct Candidate {
    pub experiment: i64,
    pub share: f64,
    serving: Arc<Serving>,
}

/// What `status` says of weights under test.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CandidateShown {
    pub experiment: i64,
    pub sampler: String,
    pub policy_version: i64,
    pub share: f64,
}

/// A turn, as the student needs it.
pub struct TurnInput<'a> {
    /// The chat messages as sent upstream (skills block included).
    pub messages: &'a [Value],
    pub tools: Option<&'a [Value]>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    /// The request's stop strings.
    pub stop: Vec<String>,
    pub session: &'a str,
    pub turn_id: &'a str,
    /// Main turns form trajectories; side turns are answered alone.
    pub main: bool,
    pub skill_generation: u64,
}

/// The student's answer, and what it sampled.
pub struct Answer {
    pub parsed: Parsed,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: &'static str,
    pub sample: SampleRecord,
    /// The weights canary's arm the session is in, when weights are under
    /// test and the session is counted (candidate or control).
    pub arm: Option<ArmRecord>,
}

/// Why the student did not answer.
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

impl Policy {
    pub fn new(settings: StudentSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            format: RwLock::new(None),
            serving: RwLock::new(None),
            health: Mutex::new(Health {
                state: "starting".into(),
                since_ms: now_ms(),
                ..Health::default()
            }),
            reconnect: Notify::new(),
            weights_lost: Notify::new(),
            lost_path: Mutex::new(None),
            reloader: std::sync::atomic::AtomicBool::new(false),
            trajectories: trajectory::Tails::default(),
            candidate: RwLock::new(None),
        })
    }

    pub fn health(&self) -> Health {
        self.health.lock().map(|h| h.clone()).unwrap_or_default()
    }

    fn update_health(&self, f: impl FnOnce(&mut Health)) {
        if let Ok(mut h) = self.health.lock() {
            f(&mut h);
        }
    }

    /// Whether a turn of this kind goes to the student.
    pub fn serves(&self, main: bool) -> bool {
        main || self.settings.serve_side_turns
    }

    /// Notes a turn that `llm` answered instead, and why.
    pub fn fell_back(&self, why: &str) {
        self.update_health(|h| {
            h.fallbacks += 1;
            h.last_fallback = Some(why.to_string());
        });
    }

    /// The chat format, once loaded (the trainer's teacher check needs
    /// its tokenizer).
    pub fn format(&self) -> Option<Arc<ChatFormat>> {
        self.format.read().ok().and_then(|f| f.clone())
    }

    /// The sampler weights served now (`base` or a saved path) and their
    /// policy version; `None` while not connected.
    pub fn served(&self) -> Option<(String, i64)> {
        self.serving().map(|s| (s.sampler_name.clone(), s.version))
    }

    fn serving(&self) -> Option<Arc<Serving>> {
        self.serving.read().ok().and_then(|s| s.clone())
    }

    fn candidate(&self) -> Option<Arc<Candidate>> {
        self.candidate.read().ok().and_then(|c| c.clone())
    }

    /// The weights under test, if any.
    pub fn under_test(&self) -> Option<CandidateShown> {
        self.candidate().map(|c| CandidateShown {
            experiment: c.experiment,
            sampler: c.serving.sampler_name.clone(),
            policy_version: c.serving.version,
            share: c.share,
        })
    }

    /// What answers `session`: the candidate for its candidate arm, else the
    /// incumbent; and the arm, when the session is counted.
    fn serving_for(&self, session: &str) -> Option<(Arc<Serving>, Option<ArmRecord>)> {
        let incumbent = self.serving()?;
        let Some(candidate) = self.candidate() else {
            return Some((incumbent, None));
        };
        let arm = arm_for(candidate.experiment, session, candidate.share);
        let record = |arm: Arm| ArmRecord {
            experiment: candidate.experiment,
            arm: arm.as_str(),
        };
        Some(match arm {
            Arm::Candidate => (candidate.serving.clone(), Some(record(arm))),
            Arm::Control => (incumbent, Some(record(arm))),
            Arm::Outside => (incumbent, None),
        })
    }

    /// Serves the weights at `sampler_path` (policy version `version`) to
    /// the candidate arm of experiment `experiment` beside the incumbent,
    /// which serves every other session.
    pub async fn test_candidate(
        &self,
        sampler_path: &str,
        version: i64,
        experiment: i64,
        share: f64,
    ) -> Result<(), SamplerError> {
        let (session, sampler) = self.sampler_of(sampler_path).await?;
        let candidate = Candidate {
            experiment,
            share,
            serving: Arc::new(Serving {
                session,
                sampler,
                sampler_name: sampler_path.to_string(),
                version,
            }),
        };
        if let Ok(mut slot) = self.candidate.write() {
            *slot = Some(Arc::new(candidate));
        }
        Ok(())
    }

    /// Ends the test: promoted, the candidate serves everyone from now on;
    /// rolled back, it serves no one (turns in flight finish on theirs).
    pub fn end_test(&self, promote: bool) {
        let candidate = self.candidate.write().ok().and_then(|mut c| c.take());
        if let Some(candidate) = candidate.filter(|_| promote) {
            self.install_shared(candidate.serving.clone());
        }
    }

    /// Samples the student for one turn. Never waits longer than
    /// `rl.sample_timeout`; a sampler that is gone is reconnected in the
    /// background while this turn falls back.
    pub async fn answer(&self, input: TurnInput<'_>) -> Result<Answer, Unavailable> {
        let Some(format) = self.format() else {
            return Err(Unavailable(
                self.not_ready("the chat template is not loaded"),
            ));
        };
        let Some((serving, arm)) = self.serving_for(input.session) else {
            return Err(Unavailable(
                self.not_ready("not connected to the training service"),
            ));
        };
        let rendered = render(&format, &input).await?;
        let thinking_open = rendered.text.trim_end().ends_with("<think>");
        let (params, stop_ids) = self.sampling_params(&format, &input, rendered.tokens.len())?;
        // A group for main turns: the first answer is served.
        let group = match input.main {
            true => self.settings.group_size.max(1),
            false => 1,
        };
        let sequences = self
            .draw(&serving, &rendered.tokens, &params, group)
            .await?;
        let mut sequences = sequences.into_iter();
        let Some(sequence) = sequences.next() else {
            return Err(Unavailable(
                "the training service sampled no sequence".into(),
            ));
        };
        let decode = Decode {
            format: &format,
            stop_ids: &stop_ids,
            params: &params,
            thinking_open,
        };
        let (parsed, finish_reason) = decode.read(&sequence)?;
        let siblings = decode.siblings(sequences);
        let drawn = Drawn {
            serving: &serving,
            format: &format,
            prompt: rendered.tokens,
            sequence,
            parse_error: parsed.error.clone(),
            siblings,
        };
        let sample = self.sample_record(&input, drawn);
        Ok(Answer {
            parsed,
            finish_reason,
            sample,
            arm,
        })
    }

    /// The prompt sampled on the served weights, `group` answers, within
    /// `rl.sample_timeout`.
    async fn draw(
        &self,
        serving: &Arc<Serving>,
        prompt: &[i32],
        params: &SamplingParams,
        group: u32,
    ) -> Result<Vec<tinker::types::Sequence>, Unavailable> {
        let sampled = tokio::time::timeout(
            self.settings.sample_timeout,
            serving.sampler.sample(prompt, params, group),
        )
        .await;
        let sampled = match sampled {
            Err(_) => {
                return Err(Unavailable(format!(
                    "the sample took longer than rl.sample_timeout ({} s)",
                    self.settings.sample_timeout.as_secs_f64()
                )));
            }
            Ok(Err(e)) => return Err(self.sample_failed(serving, e)),
            Ok(Ok(sampled)) => sampled,
        };
        Ok(sampled.sequences)
    }

    /// The turn's sample as recorded: its trajectory linked (main turns),
    /// and counted in the policy's health.
    fn sample_record(&self, input: &TurnInput<'_>, drawn: Drawn<'_>) -> SampleRecord {
        let Drawn {
            serving,
            format,
            prompt,
            sequence,
            parse_error,
            siblings,
        } = drawn;
        let (trajectory, extends) = match input.main {
            true => self
                .trajectories
                .link(input.session, input.turn_id, &prompt, &sequence.tokens),
            false => (input.turn_id.to_string(), None),
        };
        let logprobs = sequence.logprobs.unwrap_or_default();
        self.update_health(|h| {
            h.samples += 1;
            h.parse_errors += u64::from(parse_error.is_some());
        });
        SampleRecord {
            base_model: self.settings.base_model.clone(),
            sampler: serving.sampler_name.clone(),
            policy_version: serving.version,
            rendering: format.renderer.id().to_string(),
            skill_generation: input.skill_generation,
            prompt_tokens: prompt,
            tokens: sequence.tokens,
            logprobs,
            stop_reason: stop_reason(sequence.stop_reason).into(),
            parse_error,
            trajectory,
            extends,
            siblings,
            off_policy: off_policy(input.temperature, input.top_p),
            run_agent: self.settings.run_agent.clone(),
        }
    }

    /// How to sample this turn: its `max_tokens` within `rl.max_new_tokens`
    /// and the context window, its settings, and the stop tokens or
    /// strings; and the template's end-of-turn tokens.
    fn sampling_params(
        &self,
        format: &ChatFormat,
        input: &TurnInput<'_>,
        prompt_tokens: usize,
    ) -> Result<(SamplingParams, Vec<i32>), Unavailable> {
        let mut max_tokens = input
            .max_tokens
            .map_or(self.settings.max_new_tokens, |m| {
                m.min(u64::from(self.settings.max_new_tokens)) as u32
            })
            .max(1);
        if let Some(context) = format.context {
            let room = (context as usize).saturating_sub(prompt_tokens);
            if room == 0 {
                return Err(Unavailable(format!(
                    "the prompt has {prompt_tokens} tokens; the model's context window is {context}"
                )));
            }
            max_tokens = max_tokens.min(room as u32);
        }
        let stop_ids = format.renderer.stop_token_ids().to_vec();
        // Tinker takes stop tokens or stop strings, never both: with the
        // request's strings, the end-of-turn tokens go as their text.
        let stop = match input.stop.is_empty() {
            true => Stop::Tokens(stop_ids.clone()),
            false => {
                let mut strings = input.stop.clone();
                for id in &stop_ids {
                    if let Ok(text) = format.renderer.decode(&[*id], false)
                        && !text.is_empty()
                    {
                        strings.push(text);
                    }
                }
                Stop::Strings(strings)
            }
        };
        let params = SamplingParams {
            max_tokens,
            temperature: input.temperature,
            top_p: input.top_p,
            seed: input.seed,
            stop: Some(stop),
            ..SamplingParams::default()
        };
        Ok((params, stop_ids))
    }

    /// Why a sample failed, and what it says of the serving weights: gone
    /// (the service unloaded them), or the session lost.
    fn sample_failed(&self, serving: &Arc<Serving>, e: tinker::Error) -> Unavailable {
        let why = format!("sampling failed: {e}");
        if weights_gone(&e) {
            self.lost(serving, &why);
            if serving.version > 0 {
                self.lose_weights(&serving.sampler_name);
            }
        } else if matches!(
            e,
            tinker::Error::Unavailable(_) | tinker::Error::SessionEnded(_)
        ) || serving.session.ended()
        {
            self.lost(serving, &why);
        }
        Unavailable(why)
    }

    /// Resolves when the served saved weights were found gone from the
    /// service (a sample or the connection's probe said so): whoever
    /// trains them loads them again and serves them ([`Policy::swap`]).
    pub async fn weights_lost(&self) -> String {
        self.weights_lost.notified().await;
        self.lost_path
            .lock()
            .ok()
            .and_then(|mut p| p.take())
            .unwrap_or_default()
    }

    /// Tells the trainer the saved weights at `path` are gone.
    fn lose_weights(&self, path: &str) {
        if let Ok(mut lost) = self.lost_path.lock() {
            *lost = Some(path.to_string());
        }
        self.weights_lost.notify_one();
    }

    /// A trainer answers [`Policy::weights_lost`] (`status` says so).
    pub fn set_reloader(&self) {
        self.reloader
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a trainer loads lost weights again.
    pub fn reloads_weights(&self) -> bool {
        self.reloader.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Connects again now (new weights were saved while it was down).
    pub fn reconnect_now(&self) {
        self.reconnect.notify_one();
    }

    fn not_ready(&self, fallback: &str) -> String {
        self.health().reason.unwrap_or_else(|| fallback.to_string())
    }

    /// The sampler is gone (service down, session ended): stop using it and
    /// reconnect in the background.
    fn lost(&self, serving: &Arc<Serving>, why: &str) {
        if let Ok(mut current) = self.serving.write()
            && current.as_ref().is_some_and(|c| Arc::ptr_eq(c, serving))
        {
            *current = None;
        }
        self.update_health(|h| {
            h.state = "down".into();
            h.reason = Some(why.to_string());
            h.since_ms = now_ms();
            h.sampler = None;
            h.policy_version = None;
        });
        self.reconnect.notify_one();
    }

    /// Serves `sampler_path` (saved sampler weights of training step
    /// `version`) from now on; turns in flight finish on the sampler they
    /// started with. The hot swap of W2-F.
    pub async fn swap(&self, sampler_path: &str, version: i64) -> Result<(), SamplerError> {
        let (session, sampler) = self.sampler_of(sampler_path).await?;
        self.install(Serving {
            session,
            sampler,
            sampler_name: sampler_path.to_string(),
            version,
        });
        Ok(())
    }

    /// A sampler of the saved weights at `sampler_path`, on the session
    /// serving now.
    async fn sampler_of(
        &self,
        sampler_path: &str,
    ) -> Result<(Arc<Session>, Sampler), SamplerError> {
        let Some(current) = self.serving() else {
            return Err(SamplerError::NotConnected);
        };
        let sampler = current.session.sampler(None, Some(sampler_path)).await?;
        Ok((current.session.clone(), sampler))
    }

    fn install(&self, serving: Serving) {
        self.install_shared(Arc::new(serving));
    }

    fn install_shared(&self, serving: Arc<Serving>) {
        let (name, version) = (serving.sampler_name.clone(), serving.version);
        if let Ok(mut current) = self.serving.write() {
            *current = Some(serving);
        }
        self.update_health(|h| {
            h.state = "ready".into();
            h.reason = None;
            h.since_ms = now_ms();
            h.sampler = Some(name);
            h.policy_version = Some(version);
        });
    }
}

/// The service no longer has the model whose weights the sampler samples:
/// skyrl unloads the models of a session that stopped heartbeating (a
/// process that died or was restarted) and answers `Model … not loaded`.
pub fn weights_gone(e: &tinker::Error) -> bool {
    match e {
        tinker::Error::Service { message, .. } => {
            let m = message.to_ascii_lowercase();
            m.contains("not loaded") || (m.contains("model") && m.contains("not found"))
        }
        _ => false,
    }
}

/// The turn's messages rendered to the prompt's tokens. Rendering a long
/// prompt takes milliseconds of CPU (tokenizing most of it): on a
/// blocking thread, not the serving runtime's.
async fn render(
    format: &Arc<ChatFormat>,
    input: &TurnInput<'_>,
) -> Result<metaclaw_chat::render::Rendered, Unavailable> {
    let options = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: format.enable_thinking,
    };
    let rendered = {
        let format = format.clone();
        let messages = input.messages.to_vec();
        let tools = input.tools.map(<[Value]>::to_vec);
        tokio::task::spawn_blocking(move || {
            format
                .renderer
                .render(&messages, tools.as_deref(), &options)
        })
        .await
        .map_err(|e| Unavailable(format!("the renderer stopped: {e}")))?
        .map_err(|e| Unavailable(format!("cannot render the messages: {e}")))?
    };
    if rendered.tokens.is_empty() {
        return Err(Unavailable("the messages render to no tokens".into()));
    }
    Ok(rendered)
}

/// How a turn's sampled sequences are read back into answers.
struct Decode<'a> {
    format: &'a ChatFormat,
    stop_ids: &'a [i32],
    params: &'a SamplingParams,
    thinking_open: bool,
}

impl Decode<'_> {
    fn read(
        &self,
        sequence: &tinker::types::Sequence,
    ) -> Result<(Parsed, &'static str), Unavailable> {
        read_sequence(
            self.format,
            self.stop_ids,
            self.params,
            self.thinking_open,
            sequence,
        )
    }

    /// The group's other answers, as kept beside the served one.
    fn siblings(&self, rest: impl Iterator<Item = tinker::types::Sequence>) -> Vec<Sibling> {
        rest.filter_map(|sibling| {
            // One that cannot be decoded is left out of the group.
            let (parsed, finish_reason) = self.read(&sibling).ok()?;
            Some(Sibling {
                message: message_json(&parsed),
                finish_reason: finish_reason.to_string(),
                parse_error: parsed.error,
                stop_reason: stop_reason(sibling.stop_reason).into(),
                logprobs: sibling.logprobs.unwrap_or_default(),
                tokens: sibling.tokens,
            })
        })
        .collect()
    }
}

/// What a turn sampled, for its record.
struct Drawn<'a> {
    serving: &'a Serving,
    format: &'a ChatFormat,
    prompt: Vec<i32>,
    /// The served answer.
    sequence: tinker::types::Sequence,
    parse_error: Option<String>,
    siblings: Vec<Sibling>,
}

/// A sampled sequence as an answer: decoded (without the stop token, and
/// cut at a stop string), parsed; and its finish reason.
fn read_sequence(
    format: &ChatFormat,
    stop_ids: &[i32],
    params: &SamplingParams,
    thinking_open: bool,
    sequence: &tinker::types::Sequence,
) -> Result<(Parsed, &'static str), Unavailable> {
    // The tokens as sampled (the stop token included: the model must
    // learn to stop); the text without it.
    let body = match sequence.tokens.last() {
        Some(last) if stop_ids.contains(last) => &sequence.tokens[..sequence.tokens.len() - 1],
        _ => &sequence.tokens[..],
    };
    let mut text = format
        .renderer
        .decode(body, false)
        .map_err(|e| Unavailable(format!("cannot decode the sample: {e}")))?;
    if let Some(Stop::Strings(strings)) = &params.stop {
        for s in strings {
            if let Some(cut) = text.strip_suffix(s.as_str()) {
                text = cut.to_string();
                break;
            }
        }
    }
    let parsed = parse::parse(&text, format.family, thinking_open);
    let finish_reason = if !parsed.tool_calls.is_empty() {
        "tool_calls"
    } else if sequence.stop_reason == StopReason::Length {
        "length"
    } else {
        "stop"
    };
    Ok((parsed, finish_reason))
}

/// Why a sample's logprobs are not those of the distribution it was drawn
/// from: the service reports the model's untempered, unfiltered logprobs
/// (skyrl 0.3.0 does), so an answer sampled at another temperature or
/// with top-p is served as the agent asked but never trained as on-policy
/// (importance weights and KL would use the wrong behaviour policy).
pub fn off_policy(temperature: Option<f32>, top_p: Option<f32>) -> Option<String> {
    let mut why = Vec::new();
    if let Some(t) = temperature
        && (t - 1.0).abs() > 1e-6
    {
        why.push(format!("temperature {t}"));
    }
    if let Some(p) = top_p
        && p < 1.0
    {
        why.push(format!("top_p {p}"));
    }
    (!why.is_empty()).then(|| {
        format!(
            "sampled with {} as the agent asked; the service's logprobs are those of the untempered model",
            why.join(" and ")
        )
    })
}

fn stop_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::Stop => "stop",
        StopReason::Length => "length",
    }
}

/// A parsed answer as an OpenAI assistant message: content (null when the
/// answer is only tool calls), reasoning, tool calls.
pub fn message_json(parsed: &Parsed) -> Value {
    let Parsed {
        content,
        reasoning,
        tool_calls,
        ..
    } = parsed;
    let mut message = serde_json::Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        match (content.is_empty(), tool_calls.is_empty()) {
            (true, false) => Value::Null,
            _ => json!(content),
        },
    );
    if let Some(reasoning) = reasoning {
        message.insert("reasoning_content".into(), json!(reasoning));
    }
    if !tool_calls.is_empty() {
        let calls: Vec<Value> = tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(message)
}
