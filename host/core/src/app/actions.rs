//! What an operator may do to a running daemon, once for every front that
//! offers it: the admin API (`/admin/...`, the CLI) and the dashboard's
//! forms (`ui.actions`). Each answers what it did, or an [`ApiError`] whose
//! status says why not.

use serde_json::{Value, json};

use super::App;
use crate::error::ApiError;
use crate::sessions::EndReason;
use crate::store::skills::Attribution;

/// Why nothing can be served or rolled back: the student does not serve.
pub const STUDENT_OFF: &str = "the student does not serve (mode: rl or auto)";

/// Runs a session's learning job now (ending the session first if it is
/// still open), or every queued and failed job; answers when they end.
/// `agent`: that agent's sessions alone (a session named must be its).
pub async fn learn_now(
    app: &App,
    session: Option<String>,
    agent: Option<crate::agent_id::AgentId>,
) -> Result<Value, ApiError> {
    let Some(learn) = app.learn.clone() else {
        return Err(ApiError::NotFound(crate::learn::OFF.into()));
    };
    if let Some(agent) = agent {
        let Some(id) = &session else {
            return match learn.now_of_agent(agent).await {
                Ok(jobs) => Ok(json!({ "jobs": jobs })),
                Err(e) => Err(ApiError::Internal(e.to_string())),
            };
        };
        // A session named must be the agent's (its turns are in the store
        // once it is flushed).
        app.proxy.store.flush().await;
        let conn = app
            .proxy
            .store
            .db()
            .read()
            .map_err(|e| ApiError::Internal(format!("cannot open the store: {e:#}")))?;
        let owner = crate::store::learning::session_agent(&conn, id)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Some(owner) = owner
            && owner != agent
        {
            return Err(ApiError::Conflict(format!(
                "session {id} belongs to agent {owner}, not {agent}"
            )));
        }
    }
    if let Some(id) = &session {
        // Learning from a session means it is over.
        let _ = app.proxy.sessions.end(id, EndReason::Api);
    }
    match learn.now(session).await {
        Ok(jobs) => Ok(json!({ "jobs": jobs })),
        Err(e @ crate::learn::LearnError::NoSession(_)) => Err(ApiError::NotFound(e.to_string())),
        Err(e) => Err(ApiError::Internal(e.to_string())),
    }
}

/// Serves earlier sampler weights: now (the swap) and after restarts (the
/// active run's record names them). With a trainer, through it: it serves
/// them without touching the training model's weights
/// (`TrainerHandle::serve`).
/// `agent`: its own run's (`agents.<id>`), else the shared run's.
pub async fn rollback(
    app: &App,
    agent: Option<&crate::agent_id::AgentId>,
    sampler: &str,
) -> Result<RolledBack, ApiError> {
    let (policy, train) = match agent {
        None => (app.proxy.policy.clone(), app.train.as_ref()),
        Some(id) => (
            app.proxy.agent_policies.get(id).cloned().flatten(),
            app.agent_trains.get(id),
        ),
    };
    let Some(policy) = policy else {
        return Err(ApiError::NotFound(match agent {
            None => STUDENT_OFF.into(),
            Some(id) => format!("agent {id} has no run of its own (agents.{id}.mode: rl or auto)"),
        }));
    };
    if let Some(train) = train {
        let (path, version) = train
            .serve(sampler)
            .await
            .map_err(|e| ApiError::BadRequest(format!("cannot serve {sampler}: {e}")))?;
        return Ok(RolledBack {
            sampler: path,
            policy_version: version,
            requested: Some(sampler.to_string()),
        });
    }
    let version = crate::learn::rl::checkpoint_step(sampler).unwrap_or(0);
    if let Err(e) = policy.swap(sampler, version).await {
        return Err(ApiError::BadRequest(format!("cannot serve {sampler}: {e}")));
    }
    // Restarts serve it too: the active run's record names it.
    let recorded = app.proxy.store.db().side_writer().and_then(|conn| {
        let service = policy.settings.tinker.service_url();
        match crate::store::training::active(
            &conn,
            service,
            &policy.settings.base_model,
            &policy.settings.run_agent,
        )? {
            Some(run) => crate::store::training::serve(
                &conn,
                &run.id,
                sampler,
                version,
                crate::clock::now_ms(),
            ),
            None => Ok(()),
        }
    });
    if let Err(e) = recorded {
        tracing::warn!("rolled back to {sampler}, but a restart will not know: {e:#}");
    }
    Ok(RolledBack {
        sampler: sampler.to_string(),
        policy_version: version,
        requested: None,
    })
}

/// What a rollback serves now: the sampler weights (as the trainer saved
/// them) and their policy version; `requested`: the path asked for, when
/// a trainer resolved it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RolledBack {
    pub sampler: String,
    pub policy_version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
}

/// What `POST /admin/train/resume` answers: the pause it ended.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Resumed {
    pub resumed: bool,
    pub was_paused: String,
}

/// Disables a loaded plugin (its calls fail over to the next, as when it
/// keeps failing) or enables it again; a reload of a changed file or a
/// restart also enables it. Answers the plugin's `name@version`.
pub fn set_plugin_disabled(app: &App, name: &str, disabled: bool) -> Result<String, ApiError> {
    let Some(host) = app.plugins.as_ref() else {
        return Err(ApiError::NotFound(
            "the plugin host is not running (see the log)".into(),
        ));
    };
    let Some(plugin) = host.current().find(name, None) else {
        return Err(ApiError::NotFound(format!(
            "no plugin {name:?} is loaded (see the plugins page)"
        )));
    };
    plugin.set_disabled(disabled.then_some("disabled by hand (the dashboard)"));
    tracing::info!(
        plugin = %plugin.label(),
        "{} by hand",
        if disabled { "disabled" } else { "enabled" }
    );
    Ok(plugin.label().to_string())
}

/// Takes a library skill out of retrieval by hand (`retired: <why>` in its
/// SKILL.md, as `skills.auto_retire` does; `metaclaw skills restore` puts
/// it back). Blocking: it writes the file and rescans the library.
pub fn retire_skill(app: &App, name: &str, why: &str) -> Result<(), ApiError> {
    let Some(skills) = app.proxy.skills.as_ref() else {
        return Err(ApiError::NotFound(
            "skills are off (skills.enabled: false)".into(),
        ));
    };
    let snapshot = skills.library.snapshot();
    let Some(skill) = snapshot.get(name) else {
        return Err(ApiError::NotFound(format!(
            "no skill {name:?} in the library"
        )));
    };
    if skill.retired.is_some() {
        return Err(ApiError::BadRequest(format!("{name} is already retired")));
    }
    let held = skills.library.lock_changes();
    match crate::learn::retire::set_retired(&skills.library.dir, skill, Some(why.to_string())) {
        Ok(None) => {}
        Ok(Some(refused)) => {
            return Err(ApiError::BadRequest(format!(
                "{name} was not retired: {refused}; try again"
            )));
        }
        Err(e) => return Err(ApiError::Internal(format!("{e:#}"))),
    }
    skills.library.rescan_holding(
        &held,
        Some(&Attribution::new("user", format!("retired by hand: {why}")).skill(name)),
    );
    Ok(())
}

/// Every revision of `skill` waiting for review, accepted or rejected at
/// once: accepting writes the newest (the others, older drafts of the same
/// change, are rejected as superseded by it); rejecting drops them all.
/// Blocking: it writes the file and rescans the library. Answers what was
/// done.
pub fn review_skill(app: &App, skill: &str, accept: bool) -> Result<String, ApiError> {
    let Some(skills) = app.proxy.skills.as_ref() else {
        return Err(ApiError::NotFound(
            "skills are off (skills.enabled: false)".into(),
        ));
    };
    let (db, dir) = (skills.library.db(), &skills.library.dir);
    let waiting: Vec<crate::store::learning::DraftRow> = db
        .read()
        .and_then(|c| Ok(crate::store::learning::pending_reviews(&c)?))
        .map_err(|e| ApiError::Internal(format!("{e:#}")))?
        .into_iter()
        .filter(|d| d.skill_id.as_deref().unwrap_or(&d.name) == skill)
        .collect();
    let Some(newest) = waiting.iter().max_by_key(|d| d.id) else {
        return Err(ApiError::BadRequest(format!(
            "no revision of {skill} is waiting for review"
        )));
    };
    let bad = |e: anyhow::Error| ApiError::BadRequest(format!("{e:#}"));
    let said = if accept {
        crate::learn::review::accept(db, dir, newest.id).map_err(bad)?;
        format!(
            "{skill} is now v{} (revision {} from session {})",
            newest.version.as_deref().unwrap_or("?"),
            newest.id,
            newest.session_id
        )
    } else {
        format!("{} revision(s) of {skill} rejected", waiting.len())
    };
    let why = match accept {
        true => format!(
            "superseded by revision {}, accepted in the dashboard",
            newest.id
        ),
        false => "in the dashboard".to_string(),
    };
    for d in waiting.iter().filter(|d| !accept || d.id != newest.id) {
        crate::learn::review::reject(db, d.id, Some(&why)).map_err(bad)?;
    }
    tracing::info!(skill, "{said} (the dashboard)");
    Ok(said)
}

/// Puts a skill's current version under test at the user's word (`metaclaw
/// experiments start SKILL`): how a skill the user wrote is opted in one at
/// a time. The experiment, and whether it was under test already.
pub fn start_experiment(app: &App, name: &str) -> Result<Value, ApiError> {
    let Some(skills) = app.proxy.skills.as_ref() else {
        return Err(ApiError::NotFound(
            "skills are off (skills.enabled: false)".into(),
        ));
    };
    if skills.settings.canary.is_none() {
        return Err(ApiError::Conflict(
            "canary.skills is off: no skill is tested (turn it on in the config and restart)"
                .into(),
        ));
    }
    let snapshot = skills.library.snapshot();
    let Some(skill) = snapshot
        .skills
        .iter()
        .find(|s| s.id == name || s.name == name)
    else {
        return Err(ApiError::NotFound(format!(
            "no skill {name:?} in {} (see `metaclaw skills list`)",
            skills.library.dir.display()
        )));
    };
    if let Some(why) = &skill.retired {
        return Err(ApiError::Conflict(format!(
            "{name} is retired ({why}): `metaclaw skills restore {name}` first"
        )));
    }
    if skill.component.is_some() {
        return Err(ApiError::Conflict(format!(
            "{name} is an executable skill: its component chooses it, so there is nothing to withhold"
        )));
    }
    let conn = app
        .proxy
        .store
        .db()
        .side_writer()
        .map_err(|e| ApiError::Internal(format!("cannot open the store: {e:#}")))?;
    let version = skill.version.to_string();
    let running = crate::store::experiments::testing(&conn, "skill")
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .into_iter()
        .any(|e| e.subject == skill.id && e.version == version);
    let id = crate::learn::canary::start(
        skills,
        &conn,
        &skill.id,
        Some(&version),
        "user: metaclaw experiments start",
    )
    .map_err(|e| ApiError::Internal(format!("{e:#}")))?
    .ok_or_else(|| ApiError::Internal("the test was not started".into()))?;
    let experiment =
        crate::store::experiments::get(&conn, id).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(json!({ "experiment": experiment, "already": running }))
}

/// Promotes a canary's candidate or rolls it back by hand, whatever its
/// test says so far (the CLI's `experiments promote|rollback`, the
/// dashboard). Blocking: a rollback writes the SKILL.md and rescans.
/// What deciding a canary by hand answers: the experiment as decided.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Decided {
    pub experiment: crate::store::experiments::Experiment,
}

pub fn decide_experiment(
    app: &App,
    id: i64,
    promote: bool,
    why: &str,
) -> Result<Decided, ApiError> {
    use crate::learn::canary::{UserDecision, decide_by_user};
    let conn = app
        .proxy
        .store
        .db()
        .read()
        .map_err(|e| ApiError::Internal(format!("cannot open the store: {e:#}")))?;
    let experiment =
        crate::store::experiments::get(&conn, id).map_err(|e| ApiError::Internal(e.to_string()))?;
    if let Some(crate::store::experiments::Experiment { kind, state, .. }) = &experiment
        && kind == "weights"
    {
        // The trainer serves and trains them: it ends the test.
        if state != "testing" {
            return Err(ApiError::Conflict(format!(
                "experiment {id} is not under test any more ({state})"
            )));
        }
        // The trainer of the run whose weights they are.
        let run_agent = crate::store::experiments::run_agent(&conn, id)
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .unwrap_or_default();
        let train = match run_agent.as_str() {
            "" => app.train.as_ref(),
            agent => crate::agent_id::AgentId::parse(agent)
                .ok()
                .and_then(|id| app.agent_trains.get(&id)),
        };
        let train = train.ok_or_else(|| {
            ApiError::Conflict("the trainer is not running: weights are decided by it".into())
        })?;
        let decided = tokio::runtime::Handle::current()
            .block_on(train.decide(id, promote, why))
            .map_err(ApiError::from)?;
        return Ok(Decided {
            experiment: decided,
        });
    }
    let Some(skills) = app.proxy.skills.as_ref() else {
        return Err(ApiError::NotFound(
            "skills are off (skills.enabled: false)".into(),
        ));
    };
    let conn = app
        .proxy
        .store
        .db()
        .side_writer()
        .map_err(|e| ApiError::Internal(format!("cannot open the store: {e:#}")))?;
    match decide_by_user(skills, &conn, id, promote, why) {
        Ok(experiment) => Ok(Decided { experiment }),
        Err(e @ UserDecision::Unknown(_)) => Err(ApiError::NotFound(e.to_string())),
        Err(e @ UserDecision::Decided(..)) => Err(ApiError::Conflict(e.to_string())),
        Err(UserDecision::Failed(e)) => Err(ApiError::Internal(e)),
    }
}
