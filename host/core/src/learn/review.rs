//! Evolved revisions of built-in and user-written skills, held for the
//! user's review (`metaclaw skills review`): listed with a diff, then
//! accepted — written and recorded as the learning job would have — or
//! rejected. Reads and writes the store and the skills folder directly, so
//! it works whether the daemon runs or not.

use std::path::Path;

use crate::store::sql::Conn;
use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::stages::publish::write_skill;
use crate::clock::now_ms;
use crate::digest::sha256_hex;
use crate::skills::library::Library;
use crate::skills::skill::{self, Skill};
use crate::store::learning::{self, DraftOutcome, DraftRow};
use crate::store::skills::Attribution;

/// A revision waiting for review, as `skills review` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Pending {
    pub id: i64,
    pub skill: String,
    /// The version it revises, and the one it would be.
    pub from_version: Option<String>,
    pub to_version: Option<String>,
    pub session: String,
    pub at_ms: i64,
    /// Why accepting it would be refused now (the skill changed on disk or
    /// was removed since the revision was drafted).
    pub stale: Option<String>,
    /// The skill as it is → as proposed (description, category, tags and
    /// body), as a unified diff.
    pub diff: String,
}

/// Every revision waiting for review, oldest first.
pub fn pending(db: &crate::store::Db, dir: &Path) -> Result<Vec<Pending>> {
    let conn = db.side_writer()?;
    let mut out = Vec::new();
    for row in learning::pending_reviews(&conn)? {
        let (Some(id), Some(content)) = (&row.skill_id, &row.content) else {
            continue;
        };
        let proposed = match skill::parse(id, content) {
            Ok(s) => reviewable(&s),
            Err(e) => format!("(the proposed SKILL.md does not parse: {e})\n{content}"),
        };
        let (current, stale) = match std::fs::read_to_string(dir.join(id).join("SKILL.md")) {
            Ok(text) => {
                let changed = row.base_hash.as_deref() != Some(&sha256_hex(&text));
                let current = match skill::parse(id, &text) {
                    Ok(s) => reviewable(&s),
                    Err(_) => text,
                };
                (
                    current,
                    changed.then(|| "the skill changed on disk since it was drafted".to_string()),
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                String::new(),
                Some("the skill it revises was removed".to_string()),
            ),
            Err(e) => return Err(e).with_context(|| format!("cannot read the skill {id}")),
        };
        let version =
            |v: &Option<String>| v.as_deref().map(|v| format!(" v{v}")).unwrap_or_default();
        // Drafted by a model from a session's text: nothing in it may drive
        // the terminal it is shown on.
        let diff = unified_diff(
            &crate::untrusted::prompt_text(&current),
            &crate::untrusted::prompt_text(&proposed),
            &format!("{id}{} (in the library)", version(&row.base_version)),
            &format!("{id}{} (proposed)", version(&row.version)),
        );
        out.push(Pending {
            id: row.id,
            skill: id.clone(),
            from_version: row.base_version.clone(),
            to_version: row.version.clone(),
            session: row.session_id.clone(),
            at_ms: row.at_ms,
            stale,
            diff,
        });
    }
    Ok(out)
}

/// What a reviewer reads of a skill: what retrieval and injection use.
fn reviewable(s: &Skill) -> String {
    format!(
        "description: {}\ncategory: {}\ntags: {}\n\n{}\n",
        s.description,
        s.category.as_str(),
        s.tags.join(", "),
        s.body
    )
}

/// Writes revision `id` into the library — refused when the skill changed
/// on disk since the revision was drafted — and records the change as the
/// session's, like an evolved update. Returns the revision.
pub fn accept(db: &crate::store::Db, dir: &Path, id: i64) -> Result<DraftRow> {
    let library = Library::new(dir.to_path_buf(), db.clone());
    let lock = library.lock_changes();
    let conn = db.side_writer()?;
    let row = held(&conn, id)?;
    let (Some(skill_id), Some(content)) = (&row.skill_id, &row.content) else {
        bail!("revision {id} has no SKILL.md to write; reject it");
    };
    if let Some(refused) = super::stages::publish::spec_refusal(skill_id, content) {
        bail!(
            "cannot accept revision {id}: {refused}; reject it with `metaclaw skills review reject {id}`"
        );
    }
    // Recorded before the file is in place: whichever rescan finds it
    // credits the session that drafted it.
    learning::writing(&conn, id, &sha256_hex(content.as_bytes()), now_ms())?;
    if let Some(refused) = write_skill(dir, skill_id, content, row.base_hash.as_deref())? {
        bail!(
            "cannot accept revision {id}: {refused} (see `metaclaw skills show {skill_id}`); reject it with `metaclaw skills review reject {id}`"
        );
    }
    // Written first: accepting again after a crash here finds the same
    // text on disk, a no-op, and records it then.
    learning::reviewed(&conn, id, true, None, now_ms())?;
    drop(conn);
    let accepted = Attribution::new(
        format!("evolved:{}", row.session_id),
        format!(
            "learned from session {}; accepted in review (metaclaw skills review accept {id})",
            row.session_id
        ),
    )
    .wrote(skill_id, content);
    library.rescan_holding(&lock, Some(&accepted));
    Ok(row)
}

/// Drops revision `id`; `reason` is kept with it.
pub fn reject(db: &crate::store::Db, id: i64, reason: Option<&str>) -> Result<DraftRow> {
    let conn = db.side_writer()?;
    let row = held(&conn, id)?;
    let why = match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => format!("rejected in review: {r}"),
        None => "rejected in review".to_string(),
    };
    learning::reviewed(&conn, id, false, Some(&why), now_ms())?;
    Ok(row)
}

/// Revision `id`, if it is waiting for review.
fn held(conn: &Conn, id: i64) -> Result<DraftRow> {
    let Some(row) = learning::draft(conn, id)? else {
        bail!("no revision {id} (see `metaclaw skills review`)");
    };
    if row.outcome != DraftOutcome::PendingReview {
        let done = match (row.outcome, row.reviewed_ms) {
            (DraftOutcome::Updated, Some(_)) => "it was accepted".to_string(),
            (DraftOutcome::Rejected, Some(_)) => "it was rejected".to_string(),
            (outcome, _) => format!("it is a draft that was {outcome}"),
        };
        bail!("revision {id} is not waiting for review: {done} (see `metaclaw skills review`)");
    }
    Ok(row)
}

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Above this many line pairs (after the common start and end are set
/// aside) the changed middle is shown as removed, then added, instead of
/// aligned: aligning costs memory in proportion.
const MAX_ALIGN: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Line<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// A unified diff of `old` → `new` by lines (empty when they are equal).
pub fn unified_diff(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let lines = align(&a, &b);
    let changed: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !matches!(l, Line::Same(_)))
        .map(|(i, _)| i)
        .collect();
    if changed.is_empty() {
        return String::new();
    }
    // Old and new line numbers before each line of the alignment.
    let mut before = Vec::with_capacity(lines.len() + 1);
    let (mut o, mut n) = (0, 0);
    for l in &lines {
        before.push((o, n));
        match l {
            Line::Same(_) => (o, n) = (o + 1, n + 1),
            Line::Removed(_) => o += 1,
            Line::Added(_) => n += 1,
        }
    }
    before.push((o, n));
    let range = |start: usize, len: usize| match len {
        0 => format!("{start},0"),
        _ => format!("{},{len}", start + 1),
    };
    let mut out = format!("--- {old_label}\n+++ {new_label}\n");
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k] + 1;
        // Changes closer than twice the context share a hunk.
        while k + 1 < changed.len() && changed[k + 1] - end <= 2 * CONTEXT {
            k += 1;
            end = changed[k] + 1;
        }
        let stop = (end + CONTEXT).min(lines.len());
        let (o0, n0) = before[start];
        let (o1, n1) = before[stop];
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(o0, o1 - o0),
            range(n0, n1 - n0)
        ));
        for l in &lines[start..stop] {
            let (mark, text) = match l {
                Line::Same(t) => (' ', t),
                Line::Removed(t) => ('-', t),
                Line::Added(t) => ('+', t),
            };
            out.push(mark);
            out.push_str(text);
            out.push('\n');
        }
        k += 1;
    }
    out
}

/// `a` → `b` as kept, removed and added lines (a longest common
/// subsequence of the lines that differ between the common start and end).
fn align<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Line<'a>> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut out: Vec<Line<'a>> = a[..head].iter().map(|l| Line::Same(l)).collect();
    if am.len().saturating_mul(bm.len()) > MAX_ALIGN {
        out.extend(am.iter().map(|l| Line::Removed(l)));
        out.extend(bm.iter().map(|l| Line::Added(l)));
    } else {
        // lcs[i * w + j]: the common subsequence's length of am[i..], bm[j..].
        let w = bm.len() + 1;
        let mut lcs = vec![0u32; (am.len() + 1) * w];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() && j < bm.len() {
            if am[i] == bm[j] {
                out.push(Line::Same(am[i]));
                (i, j) = (i + 1, j + 1);
            } else if lcs[(i + 1) * w + j] >= lcs[i * w + j + 1] {
                out.push(Line::Removed(am[i]));
                i += 1;
            } else {
                out.push(Line::Added(bm[j]));
                j += 1;
            }
        }
        out.extend(am[i..].iter().map(|l| Line::Removed(l)));
        out.extend(bm[j..].iter().map(|l| Line::Added(l)));
    }
    out.extend(a[a.len() - tail..].iter().map(|l| Line::Same(l)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::learning::DraftRow;

    #[test]
    fn diffs_are_unified_with_three_lines_of_context() {
        assert_eq!(unified_diff("a\nb\n", "a\nb\n", "old", "new"), "");
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n";
        let new = "1\n2\n3\n4\n5\nsix\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n";
        assert_eq!(
            unified_diff(old, new, "a", "b"),
            "--- a\n+++ b\n@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n@@ -13,3 +13,4 @@\n 13\n 14\n 15\n+16\n"
        );
        // Nearby changes share a hunk; from and to nothing.
        assert_eq!(
            unified_diff("a\nb\nc\n", "a\nB\nc\nd\n", "a", "b"),
            "--- a\n+++ b\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d\n"
        );
        assert_eq!(
            unified_diff("", "x\n", "a", "b"),
            "--- a\n+++ b\n@@ -0,0 +1,1 @@\n+x\n"
        );
        assert_eq!(
            unified_diff("x\ny\n", "", "a", "b"),
            "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-x\n-y\n"
        );
        // Too large to align: the middle is removed, then added.
        let big_old: String = (0..2100).map(|i| format!("o{i}\n")).collect();
        let big_new: String = (0..2100).map(|i| format!("n{i}\n")).collect();
        let diff = unified_diff(&big_old, &big_new, "a", "b");
        assert!(diff.starts_with("--- a\n+++ b\n@@ -1,2100 +1,2100 @@\n-o0\n"));
        assert_eq!(diff.lines().filter(|l| l.starts_with('+')).count(), 2101);
    }

    const BASE: &str = "---\nname: tidy\ndescription: Keep it tidy.\ncreated_by: builtin\nversion: 1.1.0\n---\nPut things back.\n";

    /// A store with one revision of `tidy` held, and the skills folder.
    fn held_revision(home: &Path) -> (crate::store::Db, std::path::PathBuf, i64) {
        let db = crate::store::test_db(home.join("m.db"));
        let dir = home.join("skills");
        std::fs::create_dir_all(dir.join("tidy")).unwrap();
        std::fs::write(dir.join("tidy/SKILL.md"), BASE).unwrap();
        Library::open(dir.clone(), db.clone());
        let base = skill::parse("tidy", BASE).unwrap();
        let revised = Skill {
            version: semver::Version::new(1, 2, 0),
            body: "Put things back.\nLabel the shelves.".into(),
            ..base.clone()
        };
        let conn = db.side_writer().unwrap();
        let row = DraftRow {
            id: 0,
            session_id: "s1".into(),
            round: 1,
            name: "tidy".into(),
            outcome: DraftOutcome::PendingReview,
            skill_id: Some("tidy".into()),
            version: Some("1.2.0".into()),
            reason: None,
            content: Some(skill::render(&revised)),
            base_hash: Some(base.content_hash.clone()),
            base_version: Some("1.1.0".into()),
            written_ms: None,
            reviewed_ms: None,
            at_ms: 1,
        };
        learning::insert_draft(&conn, &row).unwrap();
        let id = learning::pending_reviews(&conn).unwrap()[0].id;
        (db, dir, id)
    }

    #[test]
    fn a_held_revision_is_listed_then_accepted_once() {
        let home = tempfile::tempdir().unwrap();
        let (db, dir, id) = held_revision(home.path());
        let listed = pending(&db, &dir).unwrap();
        assert_eq!(listed.len(), 1);
        let p = &listed[0];
        assert_eq!((p.skill.as_str(), p.session.as_str()), ("tidy", "s1"));
        assert_eq!(p.from_version.as_deref(), Some("1.1.0"));
        assert_eq!(p.stale, None);
        assert!(
            p.diff
                .contains("--- tidy v1.1.0 (in the library)\n+++ tidy v1.2.0 (proposed)\n")
                && p.diff
                    .contains("\n Put things back.\n+Label the shelves.\n"),
            "{}",
            p.diff
        );

        accept(&db, &dir, id).unwrap();
        let text = std::fs::read_to_string(dir.join("tidy/SKILL.md")).unwrap();
        let now = skill::parse("tidy", &text).unwrap();
        assert_eq!(now.version, semver::Version::new(1, 2, 0));
        assert_eq!(now.created_by, "builtin");
        assert!(pending(&db, &dir).unwrap().is_empty());
        let conn = db.side_writer().unwrap();
        let history = crate::store::skills::history(&conn, "tidy").unwrap();
        let last = history.last().unwrap();
        assert_eq!(
            (last.change.as_str(), last.who.as_str()),
            ("changed", "evolved:s1")
        );
        assert!(last.why.contains("accepted in review"), "{}", last.why);
        let row = learning::draft(&conn, id).unwrap().unwrap();
        assert_eq!(row.outcome, DraftOutcome::Updated);
        assert!(row.written_ms.is_some() && row.reviewed_ms.is_some());

        let again = accept(&db, &dir, id).unwrap_err().to_string();
        assert!(
            again.contains("not waiting for review: it was accepted"),
            "{again}"
        );
        let none = reject(&db, 999, None).unwrap_err().to_string();
        assert!(none.contains("no revision 999"), "{none}");
    }

    #[test]
    fn a_revision_of_a_skill_edited_since_is_refused_and_can_be_rejected() {
        let home = tempfile::tempdir().unwrap();
        let (db, dir, id) = held_revision(home.path());
        let edited = BASE.replace("Put things back.", "Put things back, always.");
        std::fs::write(dir.join("tidy/SKILL.md"), &edited).unwrap();
        let listed = pending(&db, &dir).unwrap();
        assert_eq!(
            listed[0].stale.as_deref(),
            Some("the skill changed on disk since it was drafted")
        );
        let refused = accept(&db, &dir, id).unwrap_err().to_string();
        assert!(
            refused.contains("changed on disk") && refused.contains("review reject"),
            "{refused}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("tidy/SKILL.md")).unwrap(),
            edited,
            "the user's edit was overwritten"
        );
        reject(&db, id, Some("  not what I want ")).unwrap();
        let conn = db.side_writer().unwrap();
        let row = learning::draft(&conn, id).unwrap().unwrap();
        assert_eq!(row.outcome, DraftOutcome::Rejected);
        assert_eq!(
            row.reason.as_deref(),
            Some("rejected in review: not what I want")
        );
        assert!(row.written_ms.is_none() && row.reviewed_ms.is_some());
        assert!(pending(&db, &dir).unwrap().is_empty());
    }

    /// 300 near-identical revisions of two skills from 150 sessions: two
    /// groups, the newest of each, and the total.
    #[test]
    fn waiting_revisions_are_grouped_per_skill() {
        let home = tempfile::tempdir().unwrap();
        let (db, _dir, first) = held_revision(home.path());
        let conn = db.side_writer().unwrap();
        let template = learning::draft(&conn, first).unwrap().unwrap();
        for i in 0..299 {
            let skill = if i % 2 == 0 { "tidy" } else { "other" };
            let row = DraftRow {
                session_id: format!("s{}", i / 2),
                name: skill.into(),
                skill_id: Some(skill.into()),
                at_ms: i64::from(i) + 2,
                content: Some(format!("revision {i}")),
                ..template.clone()
            };
            learning::insert_draft(&conn, &row).unwrap();
        }
        let (groups, total) = learning::review_groups(&conn, 100).unwrap();
        assert_eq!(total, 300);
        let shown: Vec<(&str, i64, i64)> = groups
            .iter()
            .map(|g| (g.skill.as_str(), g.waiting, g.sessions))
            .collect();
        assert_eq!(shown, vec![("tidy", 151, 150), ("other", 149, 149)]);
        assert_eq!(groups[0].newest.content.as_deref(), Some("revision 298"));
        assert_eq!(groups[1].newest.content.as_deref(), Some("revision 297"));
        let (capped, _) = learning::review_groups(&conn, 1).unwrap();
        assert_eq!(capped.len(), 1);
    }
}
