//! The guard's verdicts on skills that came from other tools
//! (`skills.untrusted`, skills::untrusted): one row per exact SKILL.md
//! text, by its sha256.

use crate::store::sql::{Conn, params};

/// The guard's verdict on one SKILL.md text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub sha256: String,
    pub skill_id: String,
    pub passed: bool,
    /// Why it was refused (the guard's words, one line).
    pub reason: Option<String>,
    /// The plugin that judged it (`name@version`).
    pub checker: String,
    pub at_ms: i64,
}

/// Records a verdict (a later one for the same text replaces it).
pub fn record(conn: &Conn, check: &Check) -> crate::store::sql::Result<()> {
    conn.execute(
        "INSERT INTO skill_checks (sha256, skill_id, passed, reason, checker, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT(sha256) DO UPDATE SET skill_id = ?2, passed = ?3, reason = ?4,
             checker = ?5, at_ms = ?6",
        params![
            check.sha256,
            check.skill_id,
            check.passed,
            check.reason,
            check.checker,
            check.at_ms
        ],
    )?;
    Ok(())
}

/// Every verdict recorded.
pub fn all(conn: &Conn) -> crate::store::sql::Result<Vec<Check>> {
    let mut stmt =
        conn.prepare("SELECT sha256, skill_id, passed, reason, checker, at_ms FROM skill_checks")?;
    let rows = stmt.query_map((), |r| {
        Ok(Check {
            sha256: r.get(0)?,
            skill_id: r.get(1)?,
            passed: r.get(2)?,
            reason: r.get(3)?,
            checker: r.get(4)?,
            at_ms: r.get(5)?,
        })
    })?;
    rows.collect()
}
