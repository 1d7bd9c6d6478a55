//! The built-in skill bank, compiled in from `skills/`.

use std::path::Path;

use crate::digest::sha256_hex;

include!(concat!(env!("OUT_DIR"), "/builtin_skills.rs"));

#[derive(Debug, Default)]
pub struct Installed {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    /// Edited by the user since metaclaw installed them: left alone.
    pub kept: Vec<String>,
    /// Removed by the user since metaclaw installed them: not added again.
    pub removed: Vec<String>,
}

impl Installed {
    /// One line saying what changed, if anything was added or updated.
    pub fn summary(&self, dir: &Path) -> Option<String> {
        if self.added.is_empty() && self.updated.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.added.is_empty() {
            parts.push(format!("{} added", self.added.len()));
        }
        if !self.updated.is_empty() {
            parts.push(format!("{} updated", self.updated.len()));
        }
        if !self.kept.is_empty() {
            parts.push(format!("{} kept as you edited them", self.kept.len()));
        }
        Some(format!(
            "built-in skills: {} ({})",
            parts.join(", "),
            dir.display()
        ))
    }
}

/// Which missing built-in skills an install adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Every one (`skills install-builtin`, or a library with no skill).
    All,
    /// Only those the store has never recorded (new in this version): a
    /// skill the user removed stays removed.
    New,
}

/// Installs the bank into `dir` and records the changes in the store at
/// `db` as the built-in bank's (`why` says what installed it), so that a
/// later install knows which files are still exactly what it wrote.
/// `Missing::New` becomes `All` when `dir` holds no skill yet.
pub fn install_recorded(
    dir: &Path,
    db: &crate::store::Db,
    why: &str,
    missing: Missing,
) -> anyhow::Result<Installed> {
    let library = super::library::Library::new(dir.to_path_buf(), db.clone());
    let held = library.lock_changes();
    let empty = super::library::scan(dir).0.is_empty();
    let conn = db.side_writer()?;
    let recorded = |name: &str| -> bool {
        crate::store::skills::history(&conn, name).is_ok_and(|h| !h.is_empty())
    };
    let report = install(
        dir,
        &|name| crate::store::skills::builtin_hashes(&conn, name).unwrap_or_default(),
        &|name| missing == Missing::New && !empty && recorded(name),
    )?;
    drop(conn);
    if !report.added.is_empty() || !report.updated.is_empty() {
        let ours = BUILTIN
            .iter()
            .filter(|(name, _)| {
                report
                    .added
                    .iter()
                    .chain(&report.updated)
                    .any(|n| n == name)
            })
            .fold(
                crate::store::skills::Attribution::new("builtin", why),
                |a, (name, text)| a.wrote(name, text),
            );
        library.rescan_holding(&held, Some(&ours));
    }
    Ok(report)
}

/// Writes the bank into `dir`. A skill already there is replaced only if it
/// is exactly a version metaclaw installed earlier (`installed_before`
/// lists those hashes): a user's edits are never overwritten. A missing
/// skill is added unless `removed` says the user removed it.
pub fn install(
    dir: &Path,
    installed_before: &dyn Fn(&str) -> Vec<String>,
    removed: &dyn Fn(&str) -> bool,
) -> std::io::Result<Installed> {
    let mut report = Installed::default();
    for (name, text) in BUILTIN {
        let folder = dir.join(name);
        let file = folder.join("SKILL.md");
        match std::fs::read(&file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && removed(name) => {
                report.removed.push(name.to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&folder)?;
                std::fs::write(&file, text)?;
                report.added.push(name.to_string());
            }
            Err(e) => return Err(e),
            Ok(current) if current == text.as_bytes() => report.unchanged.push(name.to_string()),
            Ok(current) => {
                let hash = sha256_hex(&current);
                if installed_before(name).contains(&hash) {
                    std::fs::write(&file, text)?;
                    report.updated.push(name.to_string());
                } else {
                    report.kept.push(name.to_string());
                }
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bank_has_forty_valid_skills_at_least() {
        assert!(BUILTIN.len() >= 40, "{} skills", BUILTIN.len());
        for (name, text) in BUILTIN {
            let skill =
                crate::skills::skill::parse(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(skill.created_by, "builtin", "{name}");
        }
    }

    #[test]
    fn installing_is_idempotent_and_keeps_user_edits() {
        let dir = tempfile::tempdir().unwrap();
        let first = install(dir.path(), &|_| Vec::new(), &|_| false).unwrap();
        assert_eq!(first.added.len(), BUILTIN.len());
        let again = install(dir.path(), &|_| Vec::new(), &|_| false).unwrap();
        assert!(again.added.is_empty() && again.updated.is_empty());
        assert_eq!(again.unchanged.len(), BUILTIN.len());
        let (name, _) = BUILTIN[0];
        let file = dir.path().join(name).join("SKILL.md");
        std::fs::write(&file, "my own version").unwrap();
        let third = install(dir.path(), &|_| Vec::new(), &|_| false).unwrap();
        assert_eq!(third.kept, vec![name.to_string()]);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "my own version");
        // An old version that metaclaw itself installed is updated.
        let old = sha256_hex(b"my own version");
        let fourth = install(
            dir.path(),
            &|n| {
                if n == name {
                    vec![old.clone()]
                } else {
                    Vec::new()
                }
            },
            &|_| false,
        )
        .unwrap();
        assert_eq!(fourth.updated, vec![name.to_string()]);
    }

    /// A start adds what is new in this version and updates what the user
    /// did not edit; a skill the user removed or edited stays as it is.
    #[test]
    fn recorded_installs_respect_removals_and_edits() {
        let home = tempfile::tempdir().unwrap();
        let (dir, db) = (
            home.path().join("skills"),
            crate::store::test_db(home.path().join("m.db")),
        );
        let first = install_recorded(&dir, &db, "test", Missing::New).unwrap();
        assert_eq!(first.added.len(), BUILTIN.len());
        assert!(first.summary(&dir).unwrap().contains("added"));
        let (edited, _) = BUILTIN[0];
        let (removed, _) = BUILTIN[1];
        let (new, _) = BUILTIN[2];
        std::fs::write(dir.join(edited).join("SKILL.md"), "mine").unwrap();
        std::fs::remove_dir_all(dir.join(removed)).unwrap();
        // As if `new` were a skill this version brings: never recorded.
        std::fs::remove_dir_all(dir.join(new)).unwrap();
        let conn = db.side_writer().unwrap();
        conn.execute("DELETE FROM skill_changes WHERE skill_id = ?1", [new])
            .unwrap();
        drop(conn);
        let later = install_recorded(&dir, &db, "test", Missing::New).unwrap();
        assert_eq!(later.added, vec![new.to_string()]);
        assert_eq!(later.kept, vec![edited.to_string()]);
        assert_eq!(later.removed, vec![removed.to_string()]);
        assert_eq!(
            std::fs::read_to_string(dir.join(edited).join("SKILL.md")).unwrap(),
            "mine"
        );
        assert!(
            install_recorded(&dir, &db, "test", Missing::New)
                .unwrap()
                .summary(&dir)
                .is_none()
        );
        // The explicit command adds every missing one.
        let all = install_recorded(&dir, &db, "test", Missing::All).unwrap();
        assert_eq!(all.added, vec![removed.to_string()]);
    }

    /// The two file skills as metaclaw 1.2.0 of the bank shipped them
    /// (tuned to MetaClaw-Bench's hidden backup check).
    const TUNED: [(&str, &str); 2] = [
        (
            "read-before-editing-files",
            include_str!("testdata/builtin-1.2.0/read-before-editing-files.md"),
        ),
        (
            "backup-before-overwriting-files",
            include_str!("testdata/builtin-1.2.0/backup-before-overwriting-files.md"),
        ),
    ];

    fn builtin_text(name: &str) -> &'static str {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| *text)
            .unwrap_or_else(|| panic!("no built-in {name}"))
    }

    /// A library holding the 1.2.0 versions metaclaw installed gets the
    /// restored ones at the next start; a 1.2.0 the user edited is kept.
    #[test]
    fn the_tuned_file_skills_are_upgraded_unless_edited() {
        let home = tempfile::tempdir().unwrap();
        let (dir, db) = (
            home.path().join("skills"),
            crate::store::test_db(home.path().join("m.db")),
        );
        install_recorded(&dir, &db, "setup", Missing::New).unwrap();
        // As a binary with the 1.2.0 bank installed them.
        for (name, text) in TUNED {
            std::fs::write(dir.join(name).join("SKILL.md"), text).unwrap();
        }
        let attribution = TUNED.iter().fold(
            crate::store::skills::Attribution::new("builtin", "metaclaw 1.2.0 of the bank"),
            |a, (name, text)| a.wrote(name, text),
        );
        super::super::library::Library::new(dir.clone(), db.clone()).rescan(Some(&attribution));
        // The user edits one of them afterwards.
        let (edited, tuned) = TUNED[1];
        let mine = format!("{tuned}\n- My own note.\n");
        std::fs::write(dir.join(edited).join("SKILL.md"), &mine).unwrap();
        let upgrade = install_recorded(&dir, &db, "start", Missing::New).unwrap();
        assert_eq!(upgrade.updated, vec![TUNED[0].0.to_string()]);
        assert_eq!(upgrade.kept, vec![edited.to_string()]);
        let read = |name: &str| std::fs::read_to_string(dir.join(name).join("SKILL.md")).unwrap();
        assert_eq!(read(TUNED[0].0), builtin_text(TUNED[0].0));
        assert_eq!(read(edited), mine);
        for (name, tuned) in TUNED {
            let old = crate::skills::skill::parse(name, tuned).unwrap();
            let new = crate::skills::skill::parse(name, builtin_text(name)).unwrap();
            assert!(
                new.version > old.version,
                "{name}: {} after {}",
                new.version,
                old.version
            );
        }
    }

    /// The bench's hidden P4 check looks for `<file>.bak` beside an edited
    /// file. The two file skills that were tuned to it advise a backup in
    /// general terms again: no `.bak` name that check would accept (a
    /// timestamped `file.bak.<time>` is not one).
    #[test]
    fn the_file_skills_do_not_name_the_bench_checks_backup() {
        for (name, tuned) in TUNED {
            let names_it = |text: &str| {
                text.match_indices(".bak")
                    .any(|(at, _)| !text[at + 4..].starts_with('.'))
            };
            assert!(names_it(tuned), "{name}: the 1.2.0 text named it");
            let text = builtin_text(name);
            assert!(
                !names_it(text),
                "{name} names the check's `<file>.bak`:\n{text}"
            );
        }
    }
}
