//! Training runs on a Tinker-compatible service, kept so that a run
//! survives metaclaw's restarts (`tinker::run` drives them). A run is a
//! LoRA of one base model on one service; its row says which model on the
//! service holds its weights now, how many optimiser steps those weights
//! have had, the last `seq_id` handed out, the last saved state (weights
//! and optimiser) and what is in flight (`pending`), and each process that
//! drives it counts one `incarnation`, so names it makes never repeat.

use crate::store::instances::{Fence, fenced};
use crate::store::sql::{Conn, Optional, params};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// A run's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub id: String,
    /// The service's base URL.
    pub service: String,
    pub base_model: String,
    /// The agent whose own run it is (`agents.<id>.rl`), '' the shared run.
    pub agent: String,
    pub lora_rank: u32,
    /// The training model that holds the run's weights (none yet: the run
    /// has not made one).
    pub model_id: Option<String>,
    pub last_seq: i64,
    /// Optimiser steps the weights in `model_id` have had, counting the
    /// steps of the state they were loaded from.
    pub step: i64,
    pub incarnation: i64,
    /// A training call sent whose outcome is not known (`forward_backward`
    /// of step n+1, …): the model's state is then unknown.
    pub pending: Option<String>,
    pub state_path: Option<String>,
    pub state_step: Option<i64>,
    pub sampler_path: Option<String>,
    pub sampler_step: Option<i64>,
    /// The checkpoint the run's first weights were loaded from.
    pub started_from: Option<String>,
    /// `active`, or `finished` (replaced by a fresh run).
    pub status: String,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One optimiser step, as the service reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub step: i64,
    pub incarnation: i64,
    pub model_id: String,
    pub samples: i64,
    pub loss: Option<f64>,
    /// The forward/backward's and the optimiser's metrics (JSON object,
    /// the service's own keys), and the trainer's under `metaclaw`.
    pub metrics: serde_json::Value,
    pub at_ms: i64,
}

impl Step {
    /// What the trainer kept of this step (`metrics.metaclaw`); nothing,
    /// where the row holds none or not in this shape.
    pub fn ours(&self) -> TrainerMetrics {
        #[derive(serde::Deserialize)]
        struct Metrics {
            #[serde(default)]
            metaclaw: TrainerMetrics,
        }
        Metrics::deserialize(&self.metrics)
            .map(|m| m.metaclaw)
            .unwrap_or_default()
    }
}

/// What only the trainer knows of a step, kept with its row under
/// `metrics.metaclaw` ([`annotate_step`] adds what it sets): `train
/// status`, the learning-health verdict, the dashboard, rollbacks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TrainerMetrics {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_reward: Option<f64>,
    /// The spread of the rewards (population standard deviation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward_sd: Option<f64>,
    /// Served samples with a reward trained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewarded: Option<u64>,
    /// Mean over the trained tokens of log p_sampler − log p_learner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kl_sampler_learner: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entropy: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub siblings: Option<u64>,
    /// Mean sampled tokens of a served answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_tokens: Option<f64>,
    /// Share of served answers cut off at the length limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_share: Option<f64>,
    /// Samples the queue had skipped when the step ran, in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opd_reverse_kl: Option<f64>,
    /// The training state saved with the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The sampler weights it served (a rollback may serve them again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
    /// When its weights began to serve everyone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_at_ms: Option<i64>,
    /// The canary that tested them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<i64>,
}

const COLUMNS: &str = "id, service, base_model, lora_rank, model_id, last_seq, step, incarnation, \
    pending, state_path, state_step, sampler_path, sampler_step, started_from, status, created_ms, updated_ms, agent";

fn row_to_run(r: &crate::store::sql::Row) -> crate::store::sql::Result<Run> {
    Ok(Run {
        id: r.get(0)?,
        service: r.get(1)?,
        base_model: r.get(2)?,
        lora_rank: r.get(3)?,
        model_id: r.get(4)?,
        last_seq: r.get(5)?,
        step: r.get(6)?,
        incarnation: r.get(7)?,
        pending: r.get(8)?,
        state_path: r.get(9)?,
        state_step: r.get(10)?,
        sampler_path: r.get(11)?,
        sampler_step: r.get(12)?,
        started_from: r.get(13)?,
        status: r.get(14)?,
        created_ms: r.get(15)?,
        updated_ms: r.get(16)?,
        agent: r.get(17)?,
    })
}

/// The active run of `base_model` on `service` of `agent` ('' the shared
/// run).
pub fn active(conn: &Conn, service: &str, base_model: &str, agent: &str) -> Result<Option<Run>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM training_runs WHERE status = 'active' AND service = ?1 \
         AND base_model = ?2 AND agent = ?3 ORDER BY created_ms DESC LIMIT 1"
    );
    Ok(conn
        .query_row(&sql, params![service, base_model, agent], row_to_run)
        .optional()?)
}

/// Runs, newest first (`usize::MAX`: all of them).
pub fn list(conn: &Conn, limit: usize) -> Result<Vec<Run>> {
    let sql = format!("SELECT {COLUMNS} FROM training_runs ORDER BY created_ms DESC LIMIT ?1");
    let mut stmt = conn.prepare(&sql)?;
    // Saturated, not wrapped: `usize::MAX as i64` is -1, which SQLite
    // reads as no limit and Postgres refuses ("LIMIT must not be
    // negative").
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map([limit], row_to_run)?;
    Ok(rows.collect::<crate::store::sql::Result<_>>()?)
}

pub fn get(conn: &Conn, id: &str) -> Result<Option<Run>> {
    let sql = format!("SELECT {COLUMNS} FROM training_runs WHERE id = ?1");
    Ok(conn.query_row(&sql, [id], row_to_run).optional()?)
}

/// A new run; the service's other active run of the same base model and
/// agent (if any) is finished in the same transaction.
pub fn create(conn: &mut Conn, run: &Run) -> Result<()> {
    let tx = conn.transaction()?;
    tx.execute(
        "UPDATE training_runs SET status = 'finished', updated_ms = ?3 \
         WHERE status = 'active' AND service = ?1 AND base_model = ?2 AND agent = ?4",
        params![run.service, run.base_model, run.created_ms, run.agent],
    )?;
    tx.execute(
        &format!(
            "INSERT INTO training_runs ({COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
        ),
        params![
            run.id,
            run.service,
            run.base_model,
            run.lora_rank,
            run.model_id,
            run.last_seq,
            run.step,
            run.incarnation,
            run.pending,
            run.state_path,
            run.state_step,
            run.sampler_path,
            run.sampler_step,
            run.started_from,
            run.status,
            run.created_ms,
            run.updated_ms,
            run.agent,
        ],
    )?;
    tx.commit()?;
    Ok(())
}

/// A process takes the run over: a new incarnation, whose number it gets.
pub fn next_incarnation(conn: &Conn, id: &str, now_ms: i64) -> Result<i64> {
    Ok(conn.query_row(
        "UPDATE training_runs SET incarnation = incarnation + 1, updated_ms = ?2 WHERE id = ?1 \
         RETURNING incarnation",
        params![id, now_ms],
        |r| r.get(0),
    )?)
}

/// The run's weights now live in `model_id`, at `step`, with nothing in
/// flight.
pub fn set_model(
    conn: &Conn,
    fence: Option<&Fence>,
    id: &str,
    model_id: &str,
    step: i64,
    last_seq: i64,
    now_ms: i64,
) -> Result<()> {
    fenced(conn, fence, |tx| {
        tx.execute(
            "UPDATE training_runs SET model_id = ?2, step = ?3, last_seq = ?4, pending = NULL, \
             updated_ms = ?5 WHERE id = ?1",
            params![id, model_id, step, last_seq, now_ms],
        )
    })?;
    Ok(())
}

/// A training call is about to go out: from now until it is settled the
/// model's state is unknown (`None`: it settled and changed no weights).
pub fn set_pending(
    conn: &Conn,
    fence: Option<&Fence>,
    id: &str,
    what: Option<&str>,
    last_seq: i64,
    now_ms: i64,
) -> Result<()> {
    fenced(conn, fence, |tx| {
        tx.execute(
            "UPDATE training_runs SET pending = ?2, last_seq = ?3, updated_ms = ?4 WHERE id = ?1",
            params![id, what, last_seq, now_ms],
        )
    })?;
    Ok(())
}

/// A step the service applied: its row, and the run's new step count, in
/// one transaction.
pub fn step_done(
    conn: &Conn,
    fence: Option<&Fence>,
    id: &str,
    step: &Step,
    last_seq: i64,
) -> Result<()> {
    fenced(conn, fence, |tx| step_rows(tx, id, step, last_seq))?;
    Ok(())
}

fn step_rows(tx: &Conn, id: &str, step: &Step, last_seq: i64) -> super::sql::Result<()> {
    tx.execute(
        "INSERT INTO training_steps (run_id, step, incarnation, model_id, samples, loss, metrics, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            id,
            step.step,
            step.incarnation,
            step.model_id,
            step.samples,
            step.loss,
            step.metrics.to_string(),
            step.at_ms,
        ],
    )?;
    tx.execute(
        "UPDATE training_runs SET step = ?2, last_seq = ?3, pending = NULL, updated_ms = ?4 \
         WHERE id = ?1",
        params![id, step.step, last_seq, step.at_ms],
    )?;
    Ok(())
}

/// Adds what the trainer knows of a step (mean reward, KL, entropy…) to
/// its row's metrics, under `metaclaw`.
pub fn annotate_step(
    conn: &Conn,
    id: &str,
    step: i64,
    incarnation: i64,
    ours: &TrainerMetrics,
) -> Result<()> {
    // Merged here, not in SQL (SQLite's json_patch has no Postgres twin),
    // and written back only over the text it was merged into, so a
    // concurrent annotation is merged again rather than lost.
    let patch = serde_json::json!({ "metaclaw": ours });
    for _ in 0..3 {
        let old: Option<String> = conn
            .query_row(
                "SELECT metrics FROM training_steps WHERE run_id = ?1 AND step = ?2 AND incarnation = ?3",
                params![id, step, incarnation],
                |r| r.get(0),
            )
            .optional()?;
        let Some(old) = old else {
            return Ok(());
        };
        let mut metrics: serde_json::Value = serde_json::from_str(&old)
            .with_context(|| format!("step {step}'s stored metrics are not JSON"))?;
        merge_patch(&mut metrics, &patch);
        let written = conn.execute(
            "UPDATE training_steps SET metrics = ?5
             WHERE run_id = ?1 AND step = ?2 AND incarnation = ?3 AND metrics = ?4",
            params![id, step, incarnation, old, metrics.to_string()],
        )?;
        if written > 0 {
            return Ok(());
        }
    }
    anyhow::bail!("step {step}'s metrics kept changing while being annotated")
}

/// `patch` merged into `target` as a JSON merge patch (RFC 7396, what
/// SQLite's json_patch does): objects merge key by key, a null removes
/// the key, anything else replaces.
fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let serde_json::Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = serde_json::Value::Object(serde_json::Map::new());
    }
    if let serde_json::Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(
                    target.entry(key.clone()).or_insert(serde_json::Value::Null),
                    value,
                );
            }
        }
    }
}

/// What was saved: a training state (`state`) or sampler weights.
#[allow(clippy::too_many_arguments)]
pub fn saved(
    conn: &Conn,
    fence: Option<&Fence>,
    id: &str,
    state: bool,
    path: &str,
    step: i64,
    last_seq: i64,
    now_ms: i64,
) -> Result<()> {
    let sql = if state {
        "UPDATE training_runs SET state_path = ?2, state_step = ?3, last_seq = ?4, pending = NULL, \
         updated_ms = ?5 WHERE id = ?1"
    } else {
        "UPDATE training_runs SET sampler_path = ?2, sampler_step = ?3, last_seq = ?4, \
         pending = NULL, updated_ms = ?5 WHERE id = ?1"
    };
    fenced(conn, fence, |tx| {
        tx.execute(sql, params![id, path, step, last_seq, now_ms])
    })?;
    Ok(())
}

/// The run goes on from `path` (`rl.resume_from_ckpt` changed): its state
/// is that checkpoint, at the run's current step (the counter continues),
/// and the run remembers it was started from it, so the next restart
/// takes its own saves again.
pub fn restart_from(conn: &Conn, id: &str, path: &str, step: i64, now_ms: i64) -> Result<()> {
    conn.execute(
        "UPDATE training_runs SET state_path = ?2, state_step = ?3, started_from = ?2, \
         pending = NULL, updated_ms = ?4 WHERE id = ?1",
        params![id, path, step, now_ms],
    )?;
    Ok(())
}

/// The run goes back to the training state at `path` (a rollback after a
/// collapse), its step counter at `step` (policy versions only go up);
/// unlike [`restart_from`] the run's starting checkpoint is unchanged, so
/// `rl.resume_from_ckpt` is not taken as changed.
pub fn go_back_to(conn: &Conn, id: &str, path: &str, step: i64, now_ms: i64) -> Result<()> {
    conn.execute(
        "UPDATE training_runs SET state_path = ?2, state_step = ?3, pending = NULL, updated_ms = ?4 \
         WHERE id = ?1",
        params![id, path, step, now_ms],
    )?;
    Ok(())
}

/// The sampler weights to serve, chosen by hand (a rollback): only what is
/// served changes, never the run's training state or its call in flight.
pub fn serve(conn: &Conn, id: &str, path: &str, step: i64, now_ms: i64) -> Result<()> {
    conn.execute(
        "UPDATE training_runs SET sampler_path = ?2, sampler_step = ?3, updated_ms = ?4 WHERE id = ?1",
        params![id, path, step, now_ms],
    )?;
    Ok(())
}

/// Where a run's learning-health verdict starts judging, and why training
/// is paused (`rl.on_collapse`): kept so that a restart neither forgets a
/// pause nor judges again what the user already acted on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct HealthMark {
    /// Steps up to this one are not judged again (a resume, a rollback).
    pub since_step: i64,
    /// Training is paused, and why.
    pub paused: Option<String>,
}

fn health_key(run_id: &str) -> String {
    format!("rl.health.{run_id}")
}

pub fn health_mark(conn: &Conn, run_id: &str) -> Result<HealthMark> {
    let value: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            params![health_key(run_id)],
            |r| r.get(0),
        )
        .optional()?;
    Ok(value
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default())
}

pub fn set_health_mark(conn: &Conn, run_id: &str, mark: &HealthMark) -> Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![health_key(run_id), serde_json::to_string(mark)?],
    )?;
    Ok(())
}

/// The run's steps judged by the health verdict, oldest first: after
/// `since_step`, the newest record of each step (a step redone after a
/// restart counts once, as it was last trained), at most `limit`.
pub fn health_steps(conn: &Conn, id: &str, since_step: i64, limit: usize) -> Result<Vec<Step>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out: Vec<Step> = steps(conn, id, limit.saturating_mul(4).max(16))?
        .into_iter()
        .filter(|s| s.step > since_step && seen.insert(s.step))
        .collect();
    out.sort_by_key(|s| s.step);
    let extra = out.len().saturating_sub(limit);
    out.drain(..extra);
    Ok(out)
}

/// The run's steps, newest first.
pub fn steps(conn: &Conn, id: &str, limit: usize) -> Result<Vec<Step>> {
    let mut stmt = conn.prepare(
        "SELECT step, incarnation, model_id, samples, loss, metrics, at_ms FROM training_steps \
         WHERE run_id = ?1 ORDER BY at_ms DESC, step DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![id, limit as i64], |r| {
        let metrics: String = r.get(5)?;
        Ok(Step {
            step: r.get(0)?,
            incarnation: r.get(1)?,
            model_id: r.get(2)?,
            samples: r.get(3)?,
            loss: r.get(4)?,
            metrics: serde_json::from_str(&metrics).unwrap_or(serde_json::Value::Null),
            at_ms: r.get(6)?,
        })
    })?;
    Ok(rows.collect::<crate::store::sql::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_steps_annotations_merge_into_its_metrics() {
        let mut conn = crate::store::memory();
        let run = Run {
            id: "r".into(),
            service: "https://tinker.test".into(),
            base_model: "base".into(),
            agent: String::new(),
            lora_rank: 8,
            model_id: None,
            last_seq: 0,
            step: 0,
            incarnation: 1,
            pending: None,
            state_path: None,
            state_step: None,
            sampler_path: None,
            sampler_step: None,
            started_from: None,
            status: "active".into(),
            created_ms: 0,
            updated_ms: 0,
        };
        create(&mut conn, &run).unwrap();
        // Every run (`train status` asks for all of them: on Postgres a
        // wrapped limit was refused).
        assert_eq!(list(&conn, usize::MAX).unwrap().len(), 1);
        let step = Step {
            step: 1,
            incarnation: 1,
            model_id: "m1".into(),
            samples: 4,
            loss: Some(0.5),
            metrics: serde_json::json!({"loss:sum": 2.0, "metaclaw": {"tokens": 7}}),
            at_ms: 10,
        };
        step_done(&conn, None, "r", &step, 1).unwrap();
        // A step recorded under a lead this instance does not hold (it
        // passed to another): refused, the run still at step 1.
        let lost = crate::store::instances::Fence {
            lease: "trainer".into(),
            holder: "me".into(),
            epoch: 1,
        };
        let two = Step {
            step: 2,
            ..step.clone()
        };
        assert!(step_done(&conn, Some(&lost), "r", &two, 2).is_err());
        assert!(saved(&conn, Some(&lost), "r", true, "p", 2, 2, 11).is_err());
        assert_eq!(get(&conn, "r").unwrap().unwrap().step, 1);
        assert_eq!(steps(&conn, "r", 10).unwrap().len(), 1);
        let mean = TrainerMetrics {
            mean_reward: Some(0.25),
            ..TrainerMetrics::default()
        };
        annotate_step(&conn, "r", 1, 1, &mean).unwrap();
        let served = TrainerMetrics {
            served_at_ms: Some(20),
            ..TrainerMetrics::default()
        };
        annotate_step(&conn, "r", 1, 1, &served).unwrap();
        let stored = steps(&conn, "r", 10).unwrap();
        assert_eq!(
            stored[0].metrics["loss:sum"], 2.0,
            "the service's own keys stay"
        );
        let ours = stored[0].ours();
        assert_eq!(
            (ours.tokens, ours.mean_reward, ours.served_at_ms),
            (Some(7), Some(0.25), Some(20))
        );
        // A step not recorded has nothing to annotate.
        annotate_step(&conn, "r", 2, 1, &served).unwrap();
        assert_eq!(steps(&conn, "r", 10).unwrap().len(), 1);
    }
}
