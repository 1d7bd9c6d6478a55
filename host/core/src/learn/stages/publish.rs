//! Stage 4: the drafts the evolve stage kept, written to the skills folder
//! (atomically, never over a skill that changed since it was drafted), then
//! the library re-read and re-indexed.

use std::path::PathBuf;

use crate::store::sql::Conn;
use anyhow::{Context, Result};

use super::{Output, Parts, Stage};
use crate::clock::now_ms;
use crate::digest::sha256_hex;
use crate::store::jobs::Job;
use crate::store::learning;
use crate::store::skills::Attribution;

/// The skills written now.
pub struct Published {
    written: Vec<String>,
}

/// Writes the job's kept drafts that are not on disk yet, each marked
/// written (or refused, with the reason) as it goes: a job cut short does
/// not write them twice. Blocking (file I/O).
pub fn run(parts: &Parts, job: &Job) -> Result<Published> {
    let rows = parts
        .db
        .call_blocking(|c| Ok(learning::unwritten_drafts(c, &job.session_id)?))?;
    let mut written = Vec::new();
    if let Some(skills) = &parts.skills {
        // Held until this job's files are recorded as its own.
        let held = skills.library.lock_changes();
        for row in &rows {
            let (Some(id), Some(content)) = (&row.skill_id, &row.content) else {
                continue;
            };
            // The exact text, recorded before the file is in place: any
            // rescan that finds it (another job's, the folder watcher's)
            // credits this session, and this job's rescan nothing else.
            let hash = sha256_hex(content.as_bytes());
            // A candidate under test from its first turn (`canary.skills`):
            // the test is on record, and the turn path knows it, before the
            // file is in place.
            let origin = format!("evolved:{}", job.session_id);
            // Offered to OpenClaw's Skill Workshop (`skills.deliver`): on
            // record before the file is in place, so no turn gets it before
            // the mode allows. Under `workshop` its owner decides, not a
            // canary.
            let delivery = &skills.delivery;
            let experiment = parts.db.call_blocking(|c| {
                learning::writing(c, row.id, &hash, now_ms())?;
                if delivery.offers() {
                    crate::store::proposals::offer(
                        c,
                        &hash,
                        id,
                        row.version.as_deref(),
                        content,
                        &delivery.openclaw_agent(id),
                        now_ms(),
                    )?;
                }
                match delivery.mode {
                    crate::config::Deliver::Workshop => Ok(None),
                    _ => {
                        super::super::canary::start(skills, c, id, row.version.as_deref(), &origin)
                    }
                }
            })?;
            delivery.reload();
            let refused = match spec_refusal(id, content) {
                Some(why) => Some(why),
                None => write_skill(&skills.library.dir, id, content, row.base_hash.as_deref())?,
            };
            if let (Some(experiment), Some(reason)) = (experiment, &refused) {
                parts.db.call_blocking(|c| {
                    super::super::canary::abandon(skills, c, experiment, reason)
                })?;
            }
            if refused.is_some() && delivery.offers() {
                parts
                    .db
                    .call_blocking(|c| Ok(crate::store::proposals::withdraw(c, &hash)?))?;
                delivery.reload();
            }
            if let Some(reason) = &refused {
                tracing::warn!(skill = %id, "evolved skill not written: {reason}");
            } else {
                tracing::info!(skill = %id, version = ?row.version, "skill {} from session {}", row.outcome, job.session_id);
                written.push((id.clone(), content.clone()));
            }
            parts.db.call_blocking(|c| {
                Ok(learning::draft_written(
                    c,
                    row.id,
                    now_ms(),
                    refused.as_deref(),
                )?)
            })?;
        }
        if !written.is_empty() {
            let session = &job.session_id;
            let ours = written.iter().fold(
                Attribution::new(
                    format!("evolved:{session}"),
                    format!("learned from session {session}"),
                ),
                |a, (id, content)| a.wrote(id, content),
            );
            skills.library.rescan_holding(&held, Some(&ours));
            skills.warm();
            skills.delivery.wake();
        }
    }
    Ok(Published {
        written: written.into_iter().map(|(id, _)| id).collect(),
    })
}

impl Output for Published {
    const STAGE: Stage = Stage::Publish;

    fn summary(&self) -> String {
        format!("{} skill(s) written", self.written.len())
    }

    /// Nothing more: each draft was marked as it was written.
    fn write(&self, _tx: &Conn) -> Result<()> {
        Ok(())
    }
}

/// Why an agent would refuse the SKILL.md metaclaw is about to write as
/// skill `id`, if it would (the Agent Skills spec, `skills check`): such a
/// skill is not written, and its draft keeps the reason.
pub(crate) fn spec_refusal(id: &str, content: &str) -> Option<String> {
    let (_, name) = crate::skills::layer::split(id);
    crate::skills::spec::refusal(content, Some(name))
        .map(|why| format!("an agent would refuse it (the Agent Skills spec): {why}"))
}

/// Temporary files of this process, numbered: two jobs (or a job and a
/// review) writing one skill at once never share one.
static TEMPORARY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes `<dir>/<id>/SKILL.md` atomically (a temporary file of its own,
/// then rename).
/// An update is refused when the file changed since the draft was made
/// from it; a new skill when another appeared under its name. Writing the
/// same text again (a job resumed after a crash) is a no-op. Returns why it
/// was refused.
pub(crate) fn write_skill(
    dir: &std::path::Path,
    id: &str,
    content: &str,
    base_hash: Option<&str>,
) -> Result<Option<String>> {
    let folder = dir.join(id);
    let path = folder.join("SKILL.md");
    let ours = sha256_hex(content.as_bytes());
    match std::fs::read(&path) {
        Ok(current) => {
            let current = sha256_hex(&current);
            if current == ours {
                return Ok(None);
            }
            match base_hash {
                Some(base) if base == current => {}
                Some(_) => {
                    return Ok(Some(
                        "the skill changed on disk since the draft was made".into(),
                    ));
                }
                None => return Ok(Some("a skill with this name appeared meanwhile".into())),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if base_hash.is_some() {
                return Ok(Some("the skill it updates was removed".into()));
            }
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    std::fs::create_dir_all(&folder)
        .with_context(|| format!("cannot create {}", folder.display()))?;
    let n = TEMPORARY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = folder.join(format!(".SKILL.md.{}.{n}.tmp", std::process::id()));
    std::fs::write(&tmp, content).with_context(|| format!("cannot write {}", tmp.display()))?;
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(None)
}
