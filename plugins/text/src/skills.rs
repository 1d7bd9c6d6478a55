//! The built-in skills (`skills/*/SKILL.md` at the repository root), for
//! plugin tests that check real skills pass through unharmed. Only built
//! with the `test-skills` feature, which plugins enable as a
//! dev-dependency.

use std::path::{Path, PathBuf};

/// One built-in skill, its front matter parsed minimally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// The skill's directory name.
    pub id: String,
    pub name: String,
    pub description: String,
    pub category: String,
    pub version: String,
    /// The `tags: [a, b]` list (or `tags: "a, b"`), without empty entries.
    pub tags: Vec<String>,
    /// The text after the front matter, leading blank lines removed.
    pub body: String,
    /// The whole file, as read.
    pub text: String,
}

/// The directory of the built-in skills.
pub fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills")
}

/// Every `SKILL.md` under [`skills_dir`], sorted by id (directories without
/// one are skipped); an error when the directory cannot be read or a skill
/// has no `---` front matter.
pub fn builtin_skills() -> Result<Vec<SkillFile>, String> {
    let dir = skills_dir();
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let Ok(text) = std::fs::read_to_string(path.join("SKILL.md")) else {
            continue;
        };
        let (front, body) = text
            .strip_prefix("---\n")
            .and_then(|rest| rest.split_once("\n---\n"))
            .ok_or_else(|| format!("{}: no front matter", path.display()))?;
        // At the top level, or under `metadata` (the Agent Skills layout).
        let field = |key: &str| {
            front
                .lines()
                .find_map(|l| l.trim_start().strip_prefix(&format!("{key}:")))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let tags = field("tags")
            .trim_matches('"')
            .trim_matches(['[', ']'])
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        out.push(SkillFile {
            id: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            name: field("name"),
            description: field("description"),
            category: field("category"),
            version: field("version"),
            tags,
            body: body.trim_start_matches('\n').to_string(),
            text: text.clone(),
        });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_builtin_skills() {
        let skills = super::builtin_skills().unwrap();
        assert!(skills.len() >= 44, "{}", skills.len());
        assert!(skills.windows(2).all(|w| w[0].id < w[1].id));
        for s in &skills {
            assert!(!s.name.is_empty() && !s.body.starts_with('\n'), "{}", s.id);
            assert!(s.text.ends_with(&s.body), "{}", s.id);
        }
    }
}
