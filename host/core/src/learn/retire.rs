//! Retirement: an evolved skill whose outcomes are clearly worse than the
//! turns without it (`skills::outcomes::flag`) leaves retrieval when
//! `skills.auto_retire` is on. It stays in the library with `retired:
//! <reason>` in its frontmatter, its history records `retired:outcomes`,
//! and `metaclaw skills restore` puts it back. The user's own, imported
//! and built-in skills are flagged, never retired. A revision (a new
//! version from the evolver) is not retired: it starts a fresh estimate.

use std::path::Path;

use anyhow::Result;

use super::stages::publish::write_skill;
use crate::skills::Skills;
use crate::skills::skill::{self, Skill};
use crate::store::skills::Attribution;

/// Who retirement is in a skill's history.
pub const WHO: &str = "retired:outcomes";
/// Why, in a skill's history, the user put it back: that version is not
/// retired again (its sums would flag it at the next judged session).
pub const RESTORED: &str = "restored to retrieval (metaclaw skills restore)";

/// Whether the user restored this version of `id`.
fn restored(db: &crate::store::Db, id: &str, version: &str) -> bool {
    db.read()
        .ok()
        .and_then(|c| crate::store::skills::history(&c, id).ok())
        .is_some_and(|h| {
            h.iter()
                .any(|c| c.why == RESTORED && c.version.as_deref() == Some(version))
        })
}

/// Writes `skill` again with `retired` set (or cleared); why it was not
/// written, if it changed on disk meanwhile.
pub fn set_retired(dir: &Path, skill: &Skill, retired: Option<String>) -> Result<Option<String>> {
    let changed = Skill {
        retired,
        ..skill.clone()
    };
    write_skill(
        dir,
        &skill.id,
        &skill::render(&changed),
        Some(&skill.content_hash),
    )
}

/// Retires every evolved skill whose current version the outcomes flag
/// (blocking: file writes). Returns the ids retired.
pub fn retire_flagged(skills: &Skills) -> Result<Vec<String>> {
    let board = skills.outcomes.board();
    let snapshot = skills.library.snapshot();
    let held = skills.library.lock_changes();
    let mut retired = Vec::new();
    let mut reasons = Vec::new();
    for s in &snapshot.skills {
        if s.retired.is_some() || s.revisions_need_review() || s.component.is_some() {
            continue;
        }
        let version = s.version.to_string();
        let Some(flag) = board.flag(&s.id, &version) else {
            continue;
        };
        if restored(skills.library.db(), &s.id, &version) {
            continue;
        }
        let reason = format!("version {}: {}", s.version, flag.reason);
        match set_retired(&skills.library.dir, s, Some(reason.clone()))? {
            None => {
                tracing::warn!(skill = %s.id, "retired (skills.auto_retire): {reason}");
                retired.push(s.id.clone());
                reasons.push(format!("{}: {reason}", s.id));
            }
            Some(why) => tracing::warn!(skill = %s.id, "not retired: {why}"),
        }
    }
    if !retired.is_empty() {
        let ours = retired
            .iter()
            .fold(Attribution::new(WHO, reasons.join("; ")), |a, id| {
                a.skill(id)
            });
        skills.library.rescan_holding(&held, Some(&ours));
        skills.warm();
    }
    Ok(retired)
}
