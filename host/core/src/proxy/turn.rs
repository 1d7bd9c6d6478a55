//! One chat turn, top to bottom, each step one call:
//!
//! 1. **admit** (`request.rs`): a JSON body of bounded size, read within
//!    bounded time, and read once into the typed request every later step
//!    uses (a request in another API becomes the chat request it means);
//! 2. **session** (`sessions`): which conversation the turn belongs to,
//!    main or side, and which attempt of its turn it is;
//! 3. **skills** (`skills`): the retriever picks the few skills that fit
//!    the turn, on the plugin runtime;
//! 4. **upstream body** (`answer.rs`): the agent's bytes with only what
//!    must change rewritten (model, metaclaw's control fields, the skills
//!    block after the system prompt), in the upstream's API;
//! 5. **upstream** (`upstream.rs`): sent on a pooled keep-alive connection,
//!    falling back before any byte is sent;
//! 6. **answer** (`answer.rs`, `stream.rs`): errors pass through with the
//!    upstream's status; a stream is forwarded chunk by chunk as it
//!    arrives while a tee keeps a copy;
//! 7. **record** (`record.rs`): when the answer is over (or the client went
//!    away), the turn is queued for the store and the session is told; a
//!    client's "done" ends the session, which is what learning listens for.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::Response;
use metaclaw_wire::Front;
use metaclaw_wire::request::ChatRequest;
use tracing::Instrument;

use super::Proxy;
use super::answer::{self, Dialects};
use super::record::{Arrival, Outcome, TurnCtx};
use super::request::{self, Incoming};
use super::student;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::policy::Unavailable;
use crate::sessions::{TurnAttempt, TurnType};
use crate::skills::{Query, Skills, inject};
use crate::store::{InjectedSkill, ServedBy};

/// `POST /v1/chat/completions`
pub async fn chat_completions(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    serve(proxy, request, Front::Chat).await
}

/// `POST /v1/messages` (Anthropic Messages)
pub async fn messages(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    serve(proxy, request, Front::Anthropic).await
}

/// `POST /v1/responses` (OpenAI Responses)
pub async fn responses(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    serve(proxy, request, Front::Responses).await
}

async fn serve(proxy: Arc<Proxy>, request: Request, front: Front) -> Response {
    let started = Instant::now();
    // Every log of this turn (session, retrieval, plugins, upstream, the
    // streamed answer) carries its id, session, front and model.
    let id = uuid::Uuid::now_v7().to_string();
    let span = tracing::info_span!(
        "turn",
        id = %id,
        front = front.route(),
        session = tracing::field::Empty,
        model = tracing::field::Empty,
    );
    let arrival = Arrival {
        id,
        span: span.clone(),
        front,
        started,
        started_at_ms: now_ms(),
    };
    let turn = turn(&proxy, request, arrival);
    let response = match turn.instrument(span).await {
        Ok(response) => response,
        Err(e) => {
            proxy.metrics.errors.inc(&[e.kind()]);
            let body = e.body_for(front);
            e.into_response_with(body)
        }
    };
    proxy
        .metrics
        .requests
        .inc(&[front.route(), response.status().as_str()]);
    proxy.metrics.turns_last_minute.tick();
    response
}

async fn turn(
    proxy: &Arc<Proxy>,
    request: Request,
    arrival: Arrival,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;

    // 1. Admit the request and read it, once.
    let Incoming { request, client } =
        request::admit(headers, body, &proxy.limits, arrival.front).await?;

    // 2. Session: which agent, which conversation, main or side, and which
    // attempt.
    let agent = request::agent_id(headers, &request)?;
    let turn_type = request::turn_type(headers, &request);
    let session = proxy
        .sessions
        .resolve(
            &request::session_hints(headers, &request, &agent),
            turn_type,
        )
        .map_err(|e| ApiError::Conflict(e.to_string()))?;
    arrival.span.record("session", &*session.id);
    if let Some(model) = &request.model {
        arrival.span.record("model", model.as_str());
    }
    let model = match request::served_model(&request, &proxy.upstream) {
        Ok(model) => model,
        Err(e) => {
            proxy.sessions.finished(&session, turn_type, "", false);
            return Err(e);
        }
    };
    // A resend of a main turn whose answer failed is that turn again.
    let attempt = match turn_type {
        TurnType::Main => {
            let key = request::attempt_key(&request);
            proxy.sessions.attempt(&session, key, &arrival.id)
        }
        TurnType::Side | TurnType::Retried => TurnAttempt::FIRST,
    };
    // From here on the turn is tracked: if the client goes away at any
    // await below, dropping `ctx` records it and releases its session.
    let mut ctx = TurnCtx::new(proxy, arrival, &request, session, turn_type, attempt, model);
    ctx.done_after = request::ends_session(headers, &request);
    ctx.agent = request::agent(headers, &request);
    ctx.admission = proxy.store.admit().await;

    // 3. Skills: the few that fit this turn, after the agent's own system
    // prompt (main turns only; background work gets none).
    let block = match (&proxy.skills, turn_type) {
        (Some(skills), TurnType::Main) if skills.settings.enabled => {
            choose_skills(skills, &request, &mut ctx).await
        }
        _ => None,
    };

    // The trainable model answers (rl/auto), unless it cannot: then llm
    // does, and the turn is not trainable.
    if let Some(policy) = proxy
        .policy_for(&ctx.session.agent)
        .filter(|p| p.serves(turn_type == TurnType::Main))
    {
        match student::sample(policy, &request, block.as_deref(), &mut ctx).await {
            Ok(answer) => return student::respond(answer, ctx, client.as_ref()),
            Err(Unavailable(why)) if policy.settings.fallback_to_llm => {
                tracing::warn!("the trainable model did not answer, llm does: {why}");
                policy.fell_back(&why);
                ctx.served_by = ServedBy::Fallback(why);
            }
            Err(Unavailable(why)) => {
                policy.fell_back(&why);
                let e = ApiError::StudentUnavailable(why);
                ctx.finish(Outcome::failed(Some(e.status()), &e));
                return Err(e);
            }
        }
    }

    // 4. The upstream body, in the upstream's API.
    let dialects = Dialects::new(ctx.front, proxy.upstream.format);
    let model = ctx.upstream_model.as_deref().unwrap_or_default();
    let outgoing = match dialects.outgoing(&request, client.as_ref(), model, block.as_deref()) {
        Ok(outgoing) => outgoing,
        Err(e) => {
            ctx.finish(Outcome::failed(None, &e));
            return Err(e);
        }
    };

    // 5. Upstream (falling back to `llm.fallbacks` before any byte is sent).
    ctx.upstream_started = Some(Instant::now());
    let sent = match proxy
        .upstream
        .post(dialects.path(), headers, outgoing)
        .await
    {
        Ok(sent) => sent,
        Err(e) => {
            ctx.finish(Outcome::failed(None, &e));
            return Err(e);
        }
    };
    ctx.fallback = sent.target;
    if sent.model.is_some() {
        ctx.upstream_model = sent.model;
    }

    // 6. The answer, in the client's API; 7. recorded when it is over.
    answer::answer(sent.response, ctx, dialects, client.as_ref()).await
}

/// Chooses the turn's skills (on a blocking thread: retrievers are plugins)
/// and returns the block to add to the system prompt, noting in `ctx` what
/// was injected. Any failure injects nothing.
async fn choose_skills(
    skills: &Arc<Skills>,
    request: &ChatRequest,
    ctx: &mut TurnCtx,
) -> Option<String> {
    let skills = skills.clone();
    let turn_budget = skills.settings.turn_budget;
    let model = ctx.upstream_model.as_deref().unwrap_or_default();
    let query = Query {
        agent: ctx.session.agent.clone(),
        ..Query::from_request(request, &ctx.session.id, model)
    };
    let (prompt_bytes, reserve) = (request.body().len(), request.max_output_tokens);
    let engine = skills.plugins.as_ref().map(|p| p.engine.clone());
    let choose = async move {
        let selection = skills.select(&query).await;
        let budget = skills.settings.max_context_tokens;
        // `max_tokens` is a ceiling, often the model's whole output limit
        // (Hermes: 65,536): reserving all of it would leave no room for
        // skills, so at most a quarter of the budget is kept for the answer.
        let reserve = reserve.min(budget / 4);
        let chosen = inject::fit(selection.skills, prompt_bytes, reserve, budget);
        (chosen, selection.cut, selection.arms)
    };
    // On the plugin runtime: serving threads never run plugin code, and
    // each plugin call there ends at its deadline. Dropped with the turn.
    let (chosen, cut, arms) = match engine {
        Some(engine) => engine.spawn(choose).await?,
        None => choose.await,
    };
    if !cut.is_empty() {
        // Legal but slow: said in the turn's log line and counted per
        // plugin (`plugins list` shows the counts too).
        tracing::warn!(
            "plugins.turn_budget ({turn_budget:?}) ran out: left out of this turn: {}",
            cut.join(", ")
        );
        let metrics = &ctx.proxy.metrics;
        metrics.turns_over_plugin_budget.inc();
        for plugin in &cut {
            metrics.plugin_turn_cuts.inc(&[plugin.as_str()]);
        }
    }
    // Withheld candidates count too: the control arm is a session without.
    ctx.arms = arms;
    if chosen.is_empty() {
        return None;
    }
    ctx.injected = chosen
        .iter()
        .map(|s| InjectedSkill {
            id: s.id.clone(),
            version: s.version.clone(),
            score: s.score,
        })
        .collect();
    Some(inject::block(&chosen))
}
