//! One skill: `<skills.dir>/<name>/SKILL.md`, YAML frontmatter and a
//! Markdown body. Parsing is strict: anything off is an error that says what
//! to fix, and the skill is skipped (never the whole library).

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::proxy::request::hex;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    General,
    TaskSpecific,
    CommonMistakes,
}

impl Category {
    pub const ALL: [Category; 3] = [
        Category::General,
        Category::TaskSpecific,
        Category::CommonMistakes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::General => "general",
            Category::TaskSpecific => "task-specific",
            Category::CommonMistakes => "common-mistakes",
        }
    }

    /// The original MetaClaw's spellings and its task categories.
    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "general" => Some(Category::General),
            "common-mistakes" => Some(Category::CommonMistakes),
            "task-specific" | "coding" | "research" | "data-analysis" | "security"
            | "communication" | "automation" | "agentic" | "productivity" => {
                Some(Category::TaskSpecific)
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skill {
    /// The folder name, which is also `name`.
    pub id: String,
    pub name: String,
    pub description: String,
    pub category: Category,
    pub tags: Vec<String>,
    pub version: semver::Version,
    /// `builtin`, `user`, or `evolved:<session id>`.
    pub created_by: String,
    /// An executable skill: the `skill` plugin (`name` or `name@req`) that
    /// decides when it applies and renders it.
    pub component: Option<String>,
    /// Where an evolved skill (or its latest version) came from.
    pub provenance: Option<Provenance>,
    pub body: String,
    /// sha256 of the whole file.
    pub content_hash: String,
}

impl Skill {
    /// Whether a revision drafted by the learning pipeline waits for the
    /// user's review instead of being written: built-in skills (safety
    /// rules among them) and the user's own are never rewritten unseen.
    pub fn revisions_need_review(&self) -> bool {
        matches!(self.created_by.as_str(), "builtin" | "user")
    }
}

/// The session an evolved skill was learned from: its turns that taught
/// the lesson and the judge's scores of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub session: String,
    #[serde(default)]
    pub turns: Vec<String>,
    /// The judge's score of each of `turns` (null where it did not judge).
    #[serde(default)]
    pub judge_scores: Vec<Option<i8>>,
    /// The evolver model.
    #[serde(default)]
    pub model: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Frontmatter {
    name: String,
    description: String,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    created_by: Option<String>,
    #[serde(default)]
    component: Option<String>,
    #[serde(default)]
    provenance: Option<Provenance>,
}

pub const MAX_DESCRIPTION: usize = 400;
pub const MAX_BODY: usize = 32 << 10;

/// Is this a valid skill name (and folder name)?
pub fn valid_name(name: &str) -> bool {
    (2..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Parses the text of `<id>/SKILL.md`.
pub fn parse(id: &str, text: &str) -> Result<Skill, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Err("must start with a `---` line opening the YAML frontmatter".into());
    };
    let Some(end) = rest
        .find("\n---\n")
        .or_else(|| rest.find("\n---\r\n"))
        .or_else(|| {
            rest.strip_suffix("\n---")
                .map(|r| r.len())
                .or_else(|| rest.strip_suffix("\n---\n").map(|r| r.len()))
        })
    else {
        return Err("the frontmatter is not closed by a `---` line".into());
    };
    let yaml = &rest[..end];
    // Past the closing `---` line only: a body may itself start with one.
    let body = rest[end + "\n---".len()..]
        .trim_start_matches(['\r', '\n'])
        .trim_end();
    let fm: Frontmatter = serde_saphyr::from_str(yaml).map_err(|e| {
        let e = e.to_string();
        if e.contains("unknown field") {
            format!("frontmatter: {e} (allowed: name, description, category, tags, version, created_by, component, provenance)")
        } else {
            format!("frontmatter: {e}")
        }
    })?;
    let name = fm.name.trim().to_string();
    if !valid_name(&name) {
        return Err(format!(
            "name {name:?}: use 2-64 lowercase letters, digits and dashes"
        ));
    }
    if name != id {
        return Err(format!("name {name:?} must equal its folder name {id:?}"));
    }
    let description = fm.description.trim().to_string();
    if description.is_empty() {
        return Err("description: required (one sentence saying when the skill applies)".into());
    }
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(format!("description: at most {MAX_DESCRIPTION} characters"));
    }
    let category = match &fm.category {
        None => Category::General,
        Some(c) => Category::parse(c).ok_or_else(|| {
            format!("category {c:?}: use general, task-specific or common-mistakes")
        })?,
    };
    let version = match &fm.version {
        None => semver::Version::new(1, 0, 0),
        Some(v) => semver::Version::parse(v.trim())
            .map_err(|e| format!("version {v:?}: {e} (e.g. 1.0.0)"))?,
    };
    let created_by = fm
        .created_by
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|| "user".into());
    let known = created_by == "builtin"
        || created_by == "user"
        || created_by
            .strip_prefix("evolved:")
            .is_some_and(|s| !s.is_empty());
    if !known {
        return Err(format!(
            "created_by {created_by:?}: use builtin, user or evolved:<session id>"
        ));
    }
    let mut tags = Vec::new();
    for tag in fm.tags {
        let tag = tag.trim().to_lowercase();
        if tag.is_empty() || tag.len() > 40 {
            return Err(format!("tags: {tag:?} must be 1-40 characters"));
        }
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    if let Some(component) = &fm.component {
        crate::plugins::PluginSpec::parse(component).map_err(|e| format!("component: {e}"))?;
    }
    if body.is_empty() && fm.component.is_none() {
        return Err("the body (the instructions, after the frontmatter) is empty".into());
    }
    if body.len() > MAX_BODY {
        return Err(format!(
            "the body is {} bytes; at most {MAX_BODY}",
            body.len()
        ));
    }
    Ok(Skill {
        id: id.to_string(),
        name,
        description,
        category,
        tags,
        version,
        created_by,
        component: fm.component.map(|c| c.trim().to_string()),
        provenance: fm.provenance,
        body: body.to_string(),
        content_hash: hex(&Sha256::digest(text.as_bytes())),
    })
}

/// Reads and parses `<dir>/SKILL.md`.
pub fn load(dir: &Path) -> Result<Skill, String> {
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| "the folder name is not UTF-8".to_string())?;
    let file = dir.join("SKILL.md");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read SKILL.md: {e}"))?;
    parse(id, &text)
}

/// The SKILL.md text for a skill (used when metaclaw writes one).
pub fn render(skill: &Skill) -> String {
    let tags = skill
        .tags
        .iter()
        .map(|t| yaml_str(t))
        .collect::<Vec<_>>()
        .join(", ");
    let mut fm = format!(
        "---\nname: {}\ndescription: {}\ncategory: {}\ntags: [{tags}]\nversion: {}\ncreated_by: {}\n",
        skill.name,
        yaml_str(&skill.description),
        skill.category.as_str(),
        skill.version,
        yaml_str(&skill.created_by)
    );
    if let Some(c) = &skill.component {
        fm.push_str(&format!("component: {}\n", yaml_str(c)));
    }
    if let Some(p) = &skill.provenance
        && let Ok(json) = serde_json::to_string(p)
    {
        // JSON is YAML's flow style: one line, no quoting surprises.
        fm.push_str(&format!("provenance: {json}\n"));
    }
    format!("{fm}---\n{}\n", skill.body.trim_end())
}

/// A YAML scalar, quoted when plain style would misread it.
fn yaml_str(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.contains([
            ':', '#', '\'', '"', '\n', '[', ']', '{', '}', ',', '&', '*', '!', '|', '>', '%', '@',
            '`',
        ])
        && !s.starts_with([' ', '-', '?'])
        && !s.ends_with(' ')
        && s.parse::<f64>().is_err()
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~"
        );
    if plain {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "---\nname: git-rebase\ndescription: Rebase a branch onto main.\ncategory: task-specific\ntags: [git, Rebase]\nversion: 1.2.0\ncreated_by: builtin\n---\n# Rebase\n\n1. Fetch first.\n";

    #[test]
    fn parses_a_good_skill() {
        let s = parse("git-rebase", GOOD).unwrap();
        assert_eq!(s.category, Category::TaskSpecific);
        assert_eq!(s.tags, vec!["git", "rebase"]);
        assert_eq!(s.version, semver::Version::new(1, 2, 0));
        assert!(s.body.starts_with("# Rebase"));
        assert_eq!(s.content_hash.len(), 64);
    }

    #[test]
    fn defaults_for_the_originals_minimal_frontmatter() {
        let s = parse(
            "tidy",
            "---\nname: tidy\ndescription: Keep it tidy.\ncategory: common_mistakes\n---\nBody.\n",
        )
        .unwrap();
        assert_eq!(s.category, Category::CommonMistakes);
        assert_eq!(s.version, semver::Version::new(1, 0, 0));
        assert_eq!(s.created_by, "user");
    }

    #[test]
    fn every_mistake_gets_a_message_that_says_what_to_fix() {
        let cases = [
            ("x", "no frontmatter", "`---`"),
            ("x", "---\nname: x\n", "not closed"),
            (
                "ab",
                "---\nname: ab\ndescription: d.\nauthor: me\n---\nb\n",
                "allowed: name",
            ),
            (
                "ab",
                "---\nname: Ab Cd\ndescription: d.\n---\nb\n",
                "lowercase",
            ),
            (
                "ab",
                "---\nname: cd\ndescription: d.\n---\nb\n",
                "folder name",
            ),
            (
                "ab",
                "---\nname: ab\ndescription: ''\n---\nb\n",
                "description",
            ),
            (
                "ab",
                "---\nname: ab\ndescription: d.\ncategory: misc\n---\nb\n",
                "category",
            ),
            (
                "ab",
                "---\nname: ab\ndescription: d.\nversion: one\n---\nb\n",
                "version",
            ),
            (
                "ab",
                "---\nname: ab\ndescription: d.\ncreated_by: someone\n---\nb\n",
                "created_by",
            ),
            ("ab", "---\nname: ab\ndescription: d.\n---\n\n", "body"),
            (
                "ab",
                "---\nname: ab\ndescription: [d\n---\nb\n",
                "frontmatter",
            ),
        ];
        for (id, text, needle) in cases {
            let err = parse(id, text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn render_round_trips() {
        let mut s = parse("git-rebase", GOOD).unwrap();
        s.description = "Careful: tricky # stuff, \"quoted\".".into();
        s.created_by = "evolved:1a2b:3".into();
        s.provenance = Some(Provenance {
            session: "1a2b:3".into(),
            turns: vec!["t1".into(), "t2".into()],
            judge_scores: vec![Some(-1), None],
            model: "judge: \"x\"".into(),
        });
        let text = render(&s);
        let back = parse("git-rebase", &text).unwrap();
        assert_eq!(back.description, s.description);
        assert_eq!(back.created_by, s.created_by);
        assert_eq!(back.provenance, s.provenance);
        assert_eq!(back.body, s.body);
    }
}
