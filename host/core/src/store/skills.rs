//! The skill library's state and history in the database. Whoever notices a
//! change first (the daemon watching the folder, a learning job, or a CLI
//! command that made it) records it, inside one write transaction, so each
//! change is recorded once. Each change is credited to what really made it,
//! whoever notices it: the caller, for the files its [`Attribution`]
//! covers; else the learning job that wrote exactly that text (its draft,
//! recorded before the file was renamed into place); else a user's edit on
//! disk.

use crate::store::sql::{Behavior, Conn, Optional, params};
use serde::Serialize;

/// What a skill is now, as far as the library is concerned.
#[derive(Debug, Clone)]
pub struct SkillVersion {
    pub id: String,
    pub version: String,
    pub content_hash: String,
    pub created_by: String,
}

/// Who made a change and why, when the caller knows better than "it
/// changed on disk", and the files it made: a change it does not cover
/// (another job's, a user's edit made meanwhile) is not credited to it.
#[derive(Debug, Clone)]
pub struct Attribution {
    pub who: String,
    pub why: String,
    covers: Vec<Covered>,
}

/// A skill an attribution covers: the exact text written, or (`None`)
/// whatever the skill now is, or its removal.
#[derive(Debug, Clone)]
struct Covered {
    skill_id: String,
    content_hash: Option<String>,
}

impl Attribution {
    /// Covers nothing yet: add what it wrote with [`Attribution::wrote`]
    /// and [`Attribution::skill`].
    pub fn new(who: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            who: who.into(),
            why: why.into(),
            covers: Vec::new(),
        }
    }

    /// It wrote `text` as the SKILL.md of `skill_id`.
    pub fn wrote(mut self, skill_id: &str, text: impl AsRef<[u8]>) -> Self {
        self.covers.push(Covered {
            skill_id: skill_id.to_string(),
            content_hash: Some(crate::digest::sha256_hex(text)),
        });
        self
    }

    /// It changed or removed `skill_id` (the text unknown to it). A learning
    /// job's own text found there still goes to the job.
    pub fn skill(mut self, skill_id: &str) -> Self {
        self.covers.push(Covered {
            skill_id: skill_id.to_string(),
            content_hash: None,
        });
        self
    }

    /// Whether it wrote exactly this version (`Some` hash) of `skill_id`.
    fn wrote_exactly(&self, skill_id: &str, hash: &str) -> bool {
        self.covers
            .iter()
            .any(|c| c.skill_id == skill_id && c.content_hash.as_deref() == Some(hash))
    }

    /// Whether it changed `skill_id` without knowing the text.
    fn touched(&self, skill_id: &str) -> bool {
        self.covers
            .iter()
            .any(|c| c.skill_id == skill_id && c.content_hash.is_none())
    }
}

/// The learning job whose draft is exactly this version of `skill_id`
/// (recorded before its file was written): its session.
fn drafted_by(
    conn: &Conn,
    skill_id: &str,
    content_hash: &str,
) -> crate::store::sql::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT session_id FROM evolved_drafts
         WHERE skill_id = ?1 AND content_hash = ?2 AND writing_ms IS NOT NULL
           AND outcome != 'rejected'
         ORDER BY id DESC LIMIT 1",
    )?
    .query_row(params![skill_id, content_hash], |r| r.get(0))
    .optional()
}

/// Who made the change `change` of `skill` (its version now; `None` when
/// removed) and why.
fn credit(
    conn: &Conn,
    skill_id: &str,
    now: Option<&SkillVersion>,
    change: &str,
    attribution: Option<&Attribution>,
) -> crate::store::sql::Result<(String, String)> {
    let hash = now.map(|v| v.content_hash.as_str());
    if let (Some(a), Some(hash)) = (attribution, hash)
        && a.wrote_exactly(skill_id, hash)
    {
        return Ok((a.who.clone(), a.why.clone()));
    }
    if let Some(hash) = hash
        && let Some(session) = drafted_by(conn, skill_id, hash)?
    {
        return Ok((
            format!("evolved:{session}"),
            format!("learned from session {session}"),
        ));
    }
    if let Some(a) = attribution.filter(|a| a.touched(skill_id)) {
        return Ok((a.who.clone(), a.why.clone()));
    }
    Ok(match now {
        None => ("user".into(), "removed from the skills folder".into()),
        // A file claiming a learning job no job wrote is the user's.
        Some(v) if change == "added" && !v.created_by.starts_with("evolved:") => {
            (v.created_by.clone(), "found in the skills folder".into())
        }
        Some(v) if change == "added" => (
            "user".into(),
            format!(
                "found in the skills folder (it says created_by: {}, but no learning job wrote it)",
                v.created_by
            ),
        ),
        Some(_) => ("user".into(), "edited in the skills folder".into()),
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct SkillChange {
    pub skill_id: String,
    pub change: String,
    pub version: Option<String>,
    pub content_hash: Option<String>,
    pub who: String,
    pub why: String,
    pub generation: u64,
    pub at_ms: i64,
}

pub fn generation(conn: &Conn) -> crate::store::sql::Result<u64> {
    let value: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'skills.generation'",
            (),
            |r| r.get(0),
        )
        .optional()?;
    Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Records the differences between `current` and the stored state; bumps
/// the generation when there are any. Keeps the text of each version not
/// kept yet, as `text_of` reads it (a text whose hash is not the
/// version's, changed again since, is left for the next sync). Returns the
/// generation and the changes recorded now.
pub fn sync(
    conn: &mut Conn,
    current: &[SkillVersion],
    text_of: &dyn Fn(&SkillVersion) -> Option<String>,
    attribution: Option<&Attribution>,
    at_ms: i64,
) -> crate::store::sql::Result<(u64, Vec<SkillChange>)> {
    let tx = conn.transaction_with_behavior(Behavior::Immediate)?;
    keep_texts(&tx, current, text_of)?;
    let mut stored: std::collections::HashMap<String, (String, String)> =
        std::collections::HashMap::new();
    {
        let mut stmt = tx.prepare("SELECT skill_id, version, content_hash FROM skill_state")?;
        let rows = stmt.query_map((), |r| {
            Ok((
                r.get::<String>(0)?,
                (r.get::<String>(1)?, r.get::<String>(2)?),
            ))
        })?;
        for row in rows {
            let (id, v) = row?;
            stored.insert(id, v);
        }
    }
    let mut changes = Vec::new();
    for skill in current {
        let change = match stored.remove(&skill.id) {
            None => "added",
            Some((_, hash)) if hash != skill.content_hash => "changed",
            Some(_) => continue,
        };
        let (who, why) = credit(&tx, &skill.id, Some(skill), change, attribution)?;
        changes.push(SkillChange {
            skill_id: skill.id.clone(),
            change: change.into(),
            version: Some(skill.version.clone()),
            content_hash: Some(skill.content_hash.clone()),
            who,
            why,
            generation: 0,
            at_ms,
        });
    }
    for (id, (version, _)) in stored {
        let (who, why) = credit(&tx, &id, None, "removed", attribution)?;
        changes.push(SkillChange {
            skill_id: id,
            change: "removed".into(),
            version: Some(version),
            content_hash: None,
            who,
            why,
            generation: 0,
            at_ms,
        });
    }
    let mut generation = generation(&tx)?;
    if !changes.is_empty() {
        generation += 1;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('skills.generation', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![generation.to_string()],
        )?;
        for c in &mut changes {
            c.generation = generation;
            tx.execute(
                "INSERT INTO skill_changes (skill_id, change, version, content_hash, who, why, generation, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![c.skill_id, c.change, c.version, c.content_hash, c.who, c.why, generation as i64, at_ms],
            )?;
        }
        for skill in current {
            tx.execute(
                "INSERT INTO skill_state (skill_id, version, content_hash, created_by, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(skill_id) DO UPDATE SET version = excluded.version,
                     content_hash = excluded.content_hash, created_by = excluded.created_by,
                     updated_at_ms = excluded.updated_at_ms
                 WHERE skill_state.content_hash != excluded.content_hash",
                params![skill.id, skill.version, skill.content_hash, skill.created_by, at_ms],
            )?;
        }
        for c in changes.iter().filter(|c| c.change == "removed") {
            tx.execute(
                "DELETE FROM skill_state WHERE skill_id = ?1",
                params![c.skill_id],
            )?;
        }
    }
    tx.commit()?;
    Ok((generation, changes))
}

fn keep_texts(
    tx: &Conn,
    current: &[SkillVersion],
    text_of: &dyn Fn(&SkillVersion) -> Option<String>,
) -> crate::store::sql::Result<()> {
    let mut kept = tx.prepare_cached("SELECT 1 FROM skill_texts WHERE content_hash = ?1")?;
    let mut keep = tx
        .prepare_cached("INSERT OR IGNORE INTO skill_texts (content_hash, text) VALUES (?1, ?2)")?;
    for skill in current {
        if kept.exists(params![skill.content_hash])? {
            continue;
        }
        if let Some(text) =
            text_of(skill).filter(|t| crate::digest::sha256_hex(t.as_bytes()) == skill.content_hash)
        {
            keep.execute(params![skill.content_hash, text])?;
        }
    }
    Ok(())
}

/// The SKILL.md of a version, by its sha256, if it was kept.
pub fn text(conn: &Conn, content_hash: &str) -> crate::store::sql::Result<Option<String>> {
    conn.query_row(
        "SELECT text FROM skill_texts WHERE content_hash = ?1",
        params![content_hash],
        |r| r.get(0),
    )
    .optional()
}

/// Hashes of the versions of `skill_id` that metaclaw itself installed.
pub fn builtin_hashes(conn: &Conn, skill_id: &str) -> crate::store::sql::Result<Vec<String>> {
    conn.prepare("SELECT content_hash FROM skill_changes WHERE skill_id = ?1 AND who = 'builtin' AND content_hash IS NOT NULL")?
        .query_map(params![skill_id], |r| r.get(0))?
        .collect()
}

/// Adds an event to a skill's history that is no change of its text (what
/// an agent's owner decided about it, say), at the current generation.
pub fn note(conn: &Conn, change: &SkillChange) -> crate::store::sql::Result<()> {
    let generation = generation(conn)?;
    conn.execute(
        "INSERT INTO skill_changes (skill_id, change, version, content_hash, who, why, generation, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            change.skill_id,
            change.change,
            change.version,
            change.content_hash,
            change.who,
            change.why,
            generation as i64,
            change.at_ms
        ],
    )?;
    Ok(())
}

/// A skill's recorded history, oldest first.
pub fn history(conn: &Conn, skill_id: &str) -> crate::store::sql::Result<Vec<SkillChange>> {
    conn.prepare(
        "SELECT skill_id, change, version, content_hash, who, why, generation, at_ms
         FROM skill_changes WHERE skill_id = ?1 ORDER BY id",
    )?
    .query_map(params![skill_id], |r| {
        Ok(SkillChange {
            skill_id: r.get(0)?,
            change: r.get(1)?,
            version: r.get(2)?,
            content_hash: r.get(3)?,
            who: r.get(4)?,
            why: r.get(5)?,
            generation: r.get::<i64>(6)?.max(0) as u64,
            at_ms: r.get(7)?,
        })
    })?
    .collect()
}

/// The layout the library was last rewritten to (`skills::upgrade`), if any.
pub fn layout(conn: &Conn) -> crate::store::sql::Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM meta WHERE key = 'skills.layout'",
        (),
        |r| r.get(0),
    )
    .optional()
}

pub fn set_layout(conn: &Conn, layout: &str) -> crate::store::sql::Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('skills.layout', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [layout],
    )?;
    Ok(())
}

/// A skill metaclaw wrote into an agent's skill folder (`skills::export`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub target: String,
    pub name: String,
    pub sha256: String,
    pub version: String,
    pub at_ms: i64,
}

fn export_row(r: &crate::store::sql::Row) -> crate::store::sql::Result<Export> {
    Ok(Export {
        target: r.get(0)?,
        name: r.get(1)?,
        sha256: r.get(2)?,
        version: r.get(3)?,
        at_ms: r.get(4)?,
    })
}

pub fn export_of(
    conn: &Conn,
    target: &str,
    name: &str,
) -> crate::store::sql::Result<Option<Export>> {
    conn.query_row(
        "SELECT target, name, sha256, version, at_ms FROM skill_exports
         WHERE target = ?1 AND name = ?2",
        [target, name],
        export_row,
    )
    .optional()
}

pub fn exports_to(conn: &Conn, target: &str) -> crate::store::sql::Result<Vec<Export>> {
    let mut stmt = conn.prepare(
        "SELECT target, name, sha256, version, at_ms FROM skill_exports
         WHERE target = ?1 ORDER BY name",
    )?;
    stmt.query_map([target], export_row)?.collect()
}

pub fn set_export(conn: &Conn, export: &Export) -> crate::store::sql::Result<()> {
    conn.execute(
        "INSERT INTO skill_exports (target, name, sha256, version, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (target, name) DO UPDATE SET
             sha256 = excluded.sha256, version = excluded.version, at_ms = excluded.at_ms",
        crate::store::sql::params![
            export.target,
            export.name,
            export.sha256,
            export.version,
            export.at_ms
        ],
    )?;
    Ok(())
}

pub fn drop_export(conn: &Conn, target: &str, name: &str) -> crate::store::sql::Result<()> {
    conn.execute(
        "DELETE FROM skill_exports WHERE target = ?1 AND name = ?2",
        [target, name],
    )?;
    Ok(())
}
