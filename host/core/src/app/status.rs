//! The daemon's state in one document: `GET /admin/status` (and so
//! `metaclaw status`) and the dashboard's overview.

use serde_json::{Value, json};

use super::App;

/// What `GET /admin/status` answers and the dashboard's overview shows:
/// health, mode, upstream, the store, skills, learning, training, the
/// student and the plugins. It reads the store: call it off the async
/// workers.
/// The store could not be read for `status`.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the store: {0}")]
pub struct StatusUnread(String);

pub fn status_json(app: &App) -> Result<Value, StatusUnread> {
    let (sessions, turns) = app
        .proxy
        .store
        .counts()
        .map_err(|e| StatusUnread(format!("{e:#}")))?;
    // The learning job's own check, once (with learning on).
    let chain = app
        .learn
        .as_ref()
        .map(|_| crate::learn::evolver_chain(app.plugins.as_deref()));
    let info = &app.info;
    Ok(json!({
        "running": true,
        "healthy": true,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "mode": info.mode,
        "demo": info.demo,
        "host": info.host,
        "port": info.port,
        "url": format!("http://{}:{}", crate::http::url_host(&info.host), info.port),
        "upstream": info.upstream_base,
        "started_at_ms": info.started_at_ms,
        "uptime_seconds": info.started.elapsed().as_secs_f64(),
        "sessions": sessions,
        "active_sessions": app.proxy.sessions.active_count(),
        "turns": turns,
        "store": { "path": app.proxy.store.path(), "queue_depth": app.proxy.store.queue_depth() },
        "skills": app.proxy.skills.as_ref().map(|skills| {
            let snapshot = skills.library.snapshot();
            let mut retrieval = json!(skills.retrieval);
            // What answers a turn now: `mode` is only what is configured.
            let (answering, none_answers) = match skills.answering() {
                Ok(list) => (list, None),
                Err(why) => (Vec::new(), Some(why.to_string())),
            };
            retrieval["answering"] = json!(answering);
            retrieval["none_answers"] = json!(none_answers);
            json!({
                "loaded": snapshot.skills.len(),
                "generation": snapshot.generation,
                "dir": skills.library.dir,
                "problems": snapshot.problems,
                "retrieval": retrieval,
                "last_retriever": skills.last_retriever(),
                // Retrievers that hold an index of this library (a turn
                // never waits for one: until then it goes to the next).
                "indexed_by": skills.indexed_by(snapshot.generation),
                // Every loaded retriever: ready, indexing, failed or
                // not_started (what a tool waits on before a first turn).
                "retrievers": skills.retriever_indexes(snapshot.generation),
                // Skills from other tools (`skills.untrusted`): how many the
                // guard passed, how many are held, and why checking waits.
                "untrusted": skills.untrusted.status(&snapshot),
                // `skills.deliver`: evolved skills offered to OpenClaw's
                // Skill Workshop, by the owner's verdict.
                "delivery": skills.delivery.status(),
            })
        }),
        "learning": crate::learn::state_json(app.learn.is_some()),
        // rl/auto: whether the trainable model answers, on which weights,
        // and why not (turns then go to llm when rl.fallback_to_llm).
        // Training from the student's turns: the queue and whether it runs.
        "training": app.proxy.policy.as_ref().map(|_| training_json(app, "", app.train.as_ref())),
        "student": app.proxy.policy.as_ref().map(|policy| student_json(policy)),
        // The agents with a mode of their own (`agents.<id>`): theirs, and
        // their own run's model and training when it serves them.
        "agents": app.proxy.agent_policies.iter().map(|(agent, policy)| {
            (agent.to_string(), json!({
                "own_run": policy.is_some(),
                "training": policy.as_ref().map(|_| {
                    training_json(app, agent.as_str(), app.agent_trains.get(agent))
                }),
                "student": policy.as_ref().map(|policy| student_json(policy)),
            }))
        }).collect::<serde_json::Map<_, _>>(),
        // Why skills are not evolved now (the learning job's own check:
        // without an enabled guard, nothing is), or that they are evolved
        // unchecked because the config's chain leaves guard out; and the
        // evolver plugins every skill draft goes through, in order.
        "evolution_blocked": chain.as_ref().and_then(|c| c.as_ref().err()).map(|e| e.to_string()),
        "evolution_unguarded": chain
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .and_then(|c| crate::learn::evolution_unguarded(c)),
        "evolver_chain": chain.as_ref().and_then(|c| c.as_ref().ok()).map(|c| {
            c.iter().map(|p| p.info.name.clone()).collect::<Vec<_>>()
        }),
        "plugins": app.plugins.as_ref().map(|host| {
            let registry = host.current();
            json!({
                "loaded": registry.plugins.len(),
                "problems": registry.problems.len(),
                "notices": registry.notices.len(),
                "locked": registry.locked,
                "loading": registry.loading(),
                "pin_conflicts": registry.pin_conflicts,
                // Each disabled plugin and why (failures in a row, its
                // failure rate, or by hand).
                "disabled": registry
                    .plugins
                    .iter()
                    .filter(|p| p.is_disabled())
                    .map(|p| json!({ "plugin": p.label(), "why": p.status() }))
                    .collect::<Vec<_>>(),
                // Every instance's memory and every loaded plugin's
                // compiled code, against plugins.total_memory_mb.
                "memory": registry.total_memory.as_ref().map(|m| json!({
                    "used": m.used(),
                    "peak": m.peak(),
                    "limit": m.limit(),
                })),
                // Files refused because they do not fit in it, or whose
                // compile ran out of time: why, in full.
                "refused_for_resources": registry
                    .problems
                    .iter()
                    .filter(|p| {
                        p.error.contains("plugins.total_memory_mb")
                            || p.error.contains("plugins.timeouts.compile")
                    })
                    .collect::<Vec<_>>(),
            })
        }),
    }))
}

/// Training from the student's turns, of one run (the shared one, `''`,
/// or an agent's own): the queue and whether it runs.
fn training_json(
    app: &App,
    run_agent: &str,
    train: Option<&crate::learn::rl::trainer::TrainerHandle>,
) -> serde_json::Value {
    let queue = app
        .proxy
        .store
        .db()
        .read()
        .ok()
        .and_then(|c| crate::store::train_queue::counts(&c, Some(run_agent)).ok());
    let state = train.map(|t| t.state()).unwrap_or_default();
    json!({
        "running": train.is_some_and(|t| t.steps_off.is_none()),
        "queue": queue,
        "last_error": state.last_error,
        "opd": state.opd,
        // Is it working? (learn::rl::health)
        "health": state.health,
        "paused": state.paused,
        "on_collapse": state.on_collapse,
        // canary.weights: what became of the last weights under test, or
        // why a step's weights serve untested.
        "canary": state.canary,
        "scheduler": train.map(scheduler_json),
        "note": app.learn.is_none()
            .then_some("nothing trains: training needs the rewards of learning jobs (learning.enabled: false); the run's saved weights are served"),
    })
}

/// Whether the trainable model answers, on which weights, and why not
/// (turns then go to llm when rl.fallback_to_llm).
fn student_json(policy: &crate::policy::Policy) -> serde_json::Value {
    let mut health = json!(policy.health());
    health["base_model"] = json!(policy.settings.base_model);
    health["fallback_to_llm"] = json!(policy.settings.fallback_to_llm);
    // New weights serving their canary's candidate arm.
    health["under_test"] = json!(policy.under_test());
    health
}

/// The training scheduler in `status`: whether steps wait for windows,
/// the machine's state and the last decision.
fn scheduler_json(train: &crate::learn::rl::trainer::TrainerHandle) -> serde_json::Value {
    match (&train.gate, &train.gate_error) {
        (_, Some(error)) => json!({ "gated": true, "error": error.to_string() }),
        (None, None) => json!({ "gated": false }),
        (Some(gate), None) => {
            let last = gate.last();
            json!({
                "gated": true,
                "state": gate.state().as_str(),
                "open": last.as_ref().map(|r| r.open),
                "reason": last.as_ref().map(|r| r.reason.clone()),
                // When the signals were last read (the trainer reads them
                // before each step it may start).
                "assessed_at_ms": last.as_ref().map(|r| r.now.timestamp_millis()),
                "next_opening": last.and_then(|r| r.next_opening),
            })
        }
    }
}
