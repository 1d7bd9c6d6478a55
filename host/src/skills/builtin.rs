//! The built-in skill bank, compiled in from `skills/`.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::proxy::request::hex;

include!(concat!(env!("OUT_DIR"), "/builtin_skills.rs"));

#[derive(Debug, Default)]
pub struct Installed {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    /// Edited by the user since metaclaw installed them: left alone.
    pub kept: Vec<String>,
}

/// Writes the bank into `dir`. A skill already there is replaced only if it
/// is exactly a version metaclaw installed earlier (`installed_before`
/// lists those hashes): a user's edits are never overwritten.
pub fn install(
    dir: &Path,
    installed_before: &dyn Fn(&str) -> Vec<String>,
) -> std::io::Result<Installed> {
    let mut report = Installed::default();
    for (name, text) in BUILTIN {
        let folder = dir.join(name);
        let file = folder.join("SKILL.md");
        match std::fs::read(&file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&folder)?;
                std::fs::write(&file, text)?;
                report.added.push(name.to_string());
            }
            Err(e) => return Err(e),
            Ok(current) if current == text.as_bytes() => report.unchanged.push(name.to_string()),
            Ok(current) => {
                let hash = hex(&Sha256::digest(&current));
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
        let first = install(dir.path(), &|_| Vec::new()).unwrap();
        assert_eq!(first.added.len(), BUILTIN.len());
        let again = install(dir.path(), &|_| Vec::new()).unwrap();
        assert!(again.added.is_empty() && again.updated.is_empty());
        assert_eq!(again.unchanged.len(), BUILTIN.len());
        let (name, _) = BUILTIN[0];
        let file = dir.path().join(name).join("SKILL.md");
        std::fs::write(&file, "my own version").unwrap();
        let third = install(dir.path(), &|_| Vec::new()).unwrap();
        assert_eq!(third.kept, vec![name.to_string()]);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "my own version");
        // An old version that metaclaw itself installed is updated.
        let old = hex(&Sha256::digest(b"my own version"));
        let fourth = install(dir.path(), &|n| {
            if n == name {
                vec![old.clone()]
            } else {
                Vec::new()
            }
        })
        .unwrap();
        assert_eq!(fourth.updated, vec![name.to_string()]);
    }
}
