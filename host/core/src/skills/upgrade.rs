//! The library moved into the Agent Skills layout, once per store: every
//! SKILL.md that an agent applying the spec would refuse only because of
//! metaclaw's older layout (its keys at the top level, the original
//! MetaClaw's line-by-line frontmatter) is written again with
//! [`skill::render`], loading as the same skill (name, description,
//! category, tags, version, provenance, retirement and body; a user's edit
//! stays an edit). The files as they were go to a backup folder first, and
//! each change is recorded in the skill's history (`upgrade`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::library::{Library, scan};
use super::skill::{self, Skill};
use super::spec;
use crate::store::skills::Attribution;

/// The layout recorded once the library was moved into it.
pub const LAYOUT: &str = "agent-skills";
/// Who the upgrade is in a skill's history.
pub const WHO: &str = "upgrade";

/// What an upgrade did.
#[derive(Debug, Default)]
pub struct Upgraded {
    /// The skills written in the Agent Skills layout.
    pub rewritten: Vec<String>,
    /// Where their files as they were went.
    pub backup: Option<PathBuf>,
    /// Skills an agent would still refuse, and why (a problem the layout
    /// does not fix, such as a name with two hyphens in a row), or that
    /// did not load the same when rendered (left as they were).
    pub left: Vec<(String, String)>,
}

impl Upgraded {
    /// One line for `setup` and `start`; `None` when nothing was rewritten.
    pub fn summary(&self, dir: &Path) -> Option<String> {
        let backup = self.backup.as_ref()?;
        let mut line = format!(
            "skills: {} rewritten in the Agent Skills layout (metaclaw's keys under metadata) in {}; the files as they were: {}",
            self.rewritten.len(),
            dir.display(),
            backup.display()
        );
        if !self.left.is_empty() {
            line.push_str(&format!(
                "; {} left as they were (`metaclaw skills check` says why)",
                self.left.len()
            ));
        }
        Some(line)
    }
}

/// Moves the library at `dir` into the Agent Skills layout unless the store
/// at `db` records that it was (`None`: done before). A store with no
/// library yet is recorded as done: what metaclaw writes from now on is in
/// that layout anyway, and files a user adds later are theirs to keep.
pub fn once(dir: &Path, db: &crate::store::Db, backups: &Path) -> Result<Option<Upgraded>> {
    let conn = db.side_writer()?;
    if crate::store::skills::layout(&conn)?.as_deref() == Some(LAYOUT) {
        return Ok(None);
    }
    let library = Library::new(dir.to_path_buf(), db.clone());
    let held = library.lock_changes();
    let mut upgraded = Upgraded::default();
    let mut writes: Vec<(String, String, String)> = Vec::new();
    for s in scan(dir).0 {
        let file = dir.join(&s.id).join("SKILL.md");
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if !spec::refused(&spec::check(&text, Some(&s.id))) {
            continue;
        }
        let rendered = skill::render(&s);
        match skill::parse(&s.id, &rendered) {
            Ok(back) if same_skill(&back, &s) => {
                let still = spec::check(&rendered, Some(&s.id));
                if spec::refused(&still) {
                    upgraded.left.push((s.id.clone(), spec::refusals(&still)));
                }
                writes.push((s.id.clone(), text, rendered));
            }
            Ok(_) => upgraded.left.push((
                s.id.clone(),
                "it would not load as the same skill in the new layout".into(),
            )),
            Err(e) => upgraded.left.push((s.id.clone(), e.to_string())),
        }
    }
    if !writes.is_empty() {
        let backup = backups.join(format!(
            "skills-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        ));
        for (id, before, _) in &writes {
            let folder = backup.join(id);
            std::fs::create_dir_all(&folder)
                .with_context(|| format!("cannot create the backup {}", folder.display()))?;
            std::fs::write(folder.join("SKILL.md"), before)
                .with_context(|| format!("cannot back up {id} into {}", folder.display()))?;
        }
        let why = format!(
            "the Agent Skills layout: metaclaw's keys under metadata (the file before: {})",
            backup.display()
        );
        let mut ours = Attribution::new(WHO, why);
        for (id, _, after) in &writes {
            crate::home::write_atomic(&dir.join(id).join("SKILL.md"), after.as_bytes(), None)
                .with_context(|| format!("cannot write {id}'s SKILL.md"))?;
            ours = ours.wrote(id, after);
            upgraded.rewritten.push(id.clone());
        }
        library.rescan_holding(&held, Some(&ours));
        upgraded.backup = Some(backup);
    }
    crate::store::skills::set_layout(&conn, LAYOUT)?;
    Ok(Some(upgraded))
}

/// Whether two readings are the same skill: everything metaclaw reads.
fn same_skill(a: &Skill, b: &Skill) -> bool {
    (
        &a.name,
        &a.description,
        a.category,
        &a.tags,
        &a.version,
        &a.created_by,
        &a.component,
        &a.provenance,
        &a.retired,
        &a.body,
    ) == (
        &b.name,
        &b.description,
        b.category,
        &b.tags,
        &b.version,
        &b.created_by,
        &b.component,
        &b.provenance,
        &b.retired,
        &b.body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, id: &str, text: &str) {
        std::fs::create_dir_all(dir.join(id)).unwrap();
        std::fs::write(dir.join(id).join("SKILL.md"), text).unwrap();
    }

    /// The older layout and the original's are rewritten once, as the same
    /// skills, with a backup and a history entry; a spec-clean file and a
    /// user's comment-bearing spec file are left alone; a second start does
    /// nothing, even to a file in the old layout added since.
    #[test]
    fn the_library_moves_once_keeping_every_skill_as_it_was() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        let db = crate::store::test_db(home.path().join("m.db"));
        let backups = home.path().join("backups");
        let edited = "---\nname: tidy\ndescription: Keep it tidy.\ncategory: common-mistakes\ntags: [desk, 整理]\nversion: 1.3.0\ncreated_by: builtin\nretired: by hand\n---\n# Tidy\n\nMy own edit.\n";
        let original = "---\nname: notes\ndescription: Notes: yesterday, today\ncategory: communication\n---\nThree lines.\n";
        let clean = "---\nname: pdf\n# mine\ndescription: PDF forms.\nmetadata:\n  author: me\n---\nUse pdftk.\n";
        write(&dir, "tidy", edited);
        write(&dir, "notes", original);
        write(&dir, "pdf", clean);
        let before = Library::open(dir.clone(), db.clone()).snapshot();

        let up = once(&dir, &db, &backups).unwrap().unwrap();
        assert_eq!(up.rewritten, vec!["notes", "tidy"]);
        assert!(up.left.is_empty(), "{:?}", up.left);
        let backup = up.backup.clone().unwrap();
        assert_eq!(
            std::fs::read_to_string(backup.join("tidy/SKILL.md")).unwrap(),
            edited
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("pdf/SKILL.md")).unwrap(),
            clean
        );
        let after = Library::open(dir.clone(), db.clone()).snapshot();
        for id in ["tidy", "notes", "pdf"] {
            let (a, b) = (before.get(id).unwrap(), after.get(id).unwrap());
            assert!(same_skill(a, b), "{id}: {a:?} / {b:?}");
            let text = std::fs::read_to_string(dir.join(id).join("SKILL.md")).unwrap();
            assert!(!spec::refused(&spec::check(&text, Some(id))), "{text}");
        }
        let conn = db.side_writer().unwrap();
        let history = crate::store::skills::history(&conn, "tidy").unwrap();
        let last = history.last().unwrap();
        assert_eq!((last.change.as_str(), last.who.as_str()), ("changed", WHO));
        assert!(
            last.why.contains(&backup.display().to_string()),
            "{}",
            last.why
        );
        assert_eq!(history.len(), 2, "added, then the upgrade");

        // Once: an old-layout file added later is the user's to keep.
        write(&dir, "later", edited.replace("tidy", "later").as_str());
        assert!(once(&dir, &db, &backups).unwrap().is_none());
        assert_eq!(
            std::fs::read_to_string(dir.join("later/SKILL.md")).unwrap(),
            edited.replace("tidy", "later")
        );
    }
}
