//! One skill: `<skills.dir>/<name>/SKILL.md`, YAML frontmatter and a
//! Markdown body. Parsing is strict about what metaclaw reads (anything off
//! is an error that says what to fix, and the skill is skipped, never the
//! whole library) and keeps what it does not: the Agent Skills format
//! (Claude skills, OpenClaw/ClawHub skills) adds keys such as `license`,
//! `metadata`, `allowed-tools` or `homepage`, which are stored with the
//! skill, shown, and written back unchanged.

use std::path::Path;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::digest::sha256_hex;

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
    /// `builtin`, `user`, `evolved:<session id>` or `imported:<source>`.
    pub created_by: String,
    /// An executable skill: the `skill` plugin (`name` or `name@req`) that
    /// decides when it applies and renders it.
    pub component: Option<String>,
    /// Where an evolved skill (or its latest version) came from.
    pub provenance: Option<Provenance>,
    /// Why it was taken out of retrieval (`skills.auto_retire`, when its
    /// outcomes were clearly worse than the turns without it); kept in
    /// the library, shown, and undone by `metaclaw skills restore`.
    pub retired: Option<String>,
    /// Frontmatter keys metaclaw does not read, in their order, kept as
    /// they were (`license`, `metadata`, `allowed-tools`, ...).
    pub extra: serde_json::Map<String, serde_json::Value>,
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
            || self.created_by.starts_with(IMPORTED)
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

/// metaclaw's keys, which the Agent Skills layout keeps under `metadata`.
pub const METADATA_KEYS: [&str; 7] = [
    "category",
    "tags",
    "version",
    "created_by",
    "component",
    "provenance",
    "retired",
];

/// `created_by` of a skill copied in by `metaclaw skills import`.
pub const IMPORTED: &str = "imported:";

/// The Agent Skills format's limit.
pub const MAX_DESCRIPTION: usize = 1024;
/// What the learning pipeline drafts: one sentence or two.
pub const MAX_DRAFT_DESCRIPTION: usize = 400;
pub const MAX_BODY: usize = 32 << 10;
/// A SKILL.md larger than this is not read at all.
pub const MAX_FILE: u64 = 256 << 10;

/// Is this a valid skill name (and folder name)?
pub fn valid_name(name: &str) -> bool {
    (2..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// What is wrong with a SKILL.md (the library lists it as a problem;
/// `skills check` and the importer say it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    #[error("name {name:?} must equal its folder name {folder:?}")]
    NameNotFolder { name: String, folder: String },
    #[error("must start with a `---` line opening the YAML frontmatter")]
    NoFrontmatter,
    #[error("the frontmatter is not closed by a `---` line")]
    Unclosed,
    #[error("frontmatter: must be `key: value` lines")]
    NotAMapping,
    #[error("frontmatter is not valid YAML: {0}")]
    Yaml(String),
    #[error("{0}: must be text")]
    NotText(String),
    #[error("name: required (2-64 lowercase letters, digits and dashes, e.g. git-rebase-safely)")]
    NoName,
    #[error("name {0:?}: use 2-64 lowercase letters, digits and dashes")]
    BadName(String),
    #[error("description: required (one sentence saying when the skill applies)")]
    NoDescription,
    #[error("description: at most {MAX_DESCRIPTION} characters")]
    LongDescription,
    #[error("category {0:?}: use general, task-specific or common-mistakes")]
    BadCategory(String),
    #[error("version {version:?}: {error} (e.g. 1.0.0)")]
    BadVersion { version: String, error: String },
    #[error("created_by {0:?}: use builtin, user, evolved:<session id> or imported:<source>")]
    BadOrigin(String),
    #[error("{0}: a list of words")]
    NotWords(String),
    #[error("tags: {0:?} must be 1-40 characters")]
    BadTag(String),
    #[error("component: {0}")]
    BadComponent(crate::config::plugin_refs::RefError),
    #[error("provenance: {0}")]
    BadProvenance(String),
    #[error("the body (the instructions, after the frontmatter) is empty")]
    EmptyBody,
    #[error("the body is {0} bytes; at most {MAX_BODY}")]
    LongBody(usize),
    #[error("the folder name is not UTF-8")]
    FolderNotUtf8,
    #[error("cannot read SKILL.md: {0}")]
    Unreadable(String),
    #[error("SKILL.md is {0} bytes; at most {MAX_FILE}")]
    LargeFile(u64),
}

/// Parses the text of `<id>/SKILL.md`: its `name` must be `id`.
pub fn parse(id: &str, text: &str) -> Result<Skill, SkillError> {
    let skill = parse_text(text)?;
    if skill.name != id {
        return Err(SkillError::NameNotFolder {
            name: skill.name,
            folder: id.to_string(),
        });
    }
    Ok(skill)
}

/// A SKILL.md's YAML frontmatter and its body (past the closing `---`
/// line, trimmed), or what is wrong with its frame.
pub fn split(text: &str) -> Result<(&str, &str), SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Err(SkillError::NoFrontmatter);
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
        return Err(SkillError::Unclosed);
    };
    let yaml = &rest[..end];
    // Past the closing `---` line only: a body may itself start with one.
    let body = rest[end + "\n---".len()..]
        .trim_start_matches(['\r', '\n'])
        .trim_end();
    Ok((yaml, body))
}

/// Parses a SKILL.md wherever it is: its id is its `name`.
pub fn parse_text(text: &str) -> Result<Skill, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (yaml, body) = split(text)?;
    let mut extra = frontmatter(yaml)?;
    let mut known = Known::take(&mut extra);
    let name = known
        .text("name")?
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .ok_or(SkillError::NoName)?;
    if !valid_name(&name) {
        return Err(SkillError::BadName(name));
    }
    let description = known.description()?;
    let category = match known.text("category")? {
        None => Category::General,
        Some(c) => Category::parse(&c).ok_or(SkillError::BadCategory(c))?,
    };
    let version = match known.text("version")? {
        None => semver::Version::new(1, 0, 0),
        Some(v) => parse_version(&v).map_err(|e| SkillError::BadVersion {
            error: e.to_string(),
            version: v,
        })?,
    };
    let created_by = known.origin()?;
    let tags = known.tags(&extra)?;
    let component = known.text("component")?.map(|c| c.trim().to_string());
    let retired = known
        .text("retired")?
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    if let Some(component) = &component {
        crate::plugins::PluginSpec::parse(component).map_err(SkillError::BadComponent)?;
    }
    let provenance = known.provenance()?;
    if body.is_empty() && component.is_none() {
        return Err(SkillError::EmptyBody);
    }
    if body.len() > MAX_BODY {
        return Err(SkillError::LongBody(body.len()));
    }
    Ok(Skill {
        id: name.clone(),
        name,
        description,
        category,
        tags,
        version,
        created_by,
        component,
        provenance,
        retired,
        extra,
        body: body.to_string(),
        content_hash: sha256_hex(text.as_bytes()),
    })
}

/// The frontmatter's keys and values: YAML, or else the original
/// MetaClaw's `key: value` lines.
fn frontmatter(yaml: &str) -> Result<Map<String, Value>, SkillError> {
    match serde_saphyr::from_str::<Value>(yaml) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(SkillError::NotAMapping),
        Err(e) => original_lines(yaml).ok_or_else(|| {
            // The first line says where and what; the rest is a snippet.
            let e = e.to_string();
            let e = e
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ");
            SkillError::Yaml(e.to_string())
        }),
    }
}

/// The frontmatter keys metaclaw reads (`name`, `description` and its
/// own), taken out of the rest.
struct Known(HashMap<&'static str, Value>);

impl Known {
    /// Takes metaclaw's keys out of `extra`, which keeps any other key.
    /// The Agent Skills layout has metaclaw's own keys under `metadata`
    /// (as text); the older layout has them at the top level, which wins
    /// where a file has both; what else `metadata` holds stays as it was.
    fn take(extra: &mut Map<String, Value>) -> Self {
        let mut known: HashMap<&'static str, Value> = HashMap::new();
        for key in ["name", "description"].into_iter().chain(METADATA_KEYS) {
            if let Some(value) = extra.shift_remove(key) {
                known.insert(key, value);
            }
        }
        if let Some(Value::Object(metadata)) = extra.get_mut("metadata") {
            for key in METADATA_KEYS {
                if let Some(value) = metadata.shift_remove(key) {
                    known.entry(key).or_insert(value);
                }
            }
            if metadata.is_empty() {
                extra.shift_remove("metadata");
            }
        }
        Self(known)
    }

    /// The value of `key` as text (a number or a boolean reads as one).
    fn text(&self, key: &str) -> Result<Option<String>, SkillError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(_) => Err(SkillError::NotText(key.to_string())),
        }
    }

    /// `description`: required, and within the Agent Skills format's limit.
    fn description(&self) -> Result<String, SkillError> {
        let description = self
            .text("description")?
            .map(|d| d.trim().to_string())
            .unwrap_or_default();
        if description.is_empty() {
            return Err(SkillError::NoDescription);
        }
        if description.chars().count() > MAX_DESCRIPTION {
            return Err(SkillError::LongDescription);
        }
        Ok(description)
    }

    /// `created_by` (by default `user`), one of the origins metaclaw knows.
    fn origin(&self) -> Result<String, SkillError> {
        let created_by = self
            .text("created_by")?
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| "user".into());
        let known_origin = created_by == "builtin"
            || created_by == "user"
            || ["evolved:", IMPORTED].iter().any(|prefix| {
                created_by
                    .strip_prefix(prefix)
                    .is_some_and(|s| !s.is_empty())
            });
        if !known_origin {
            return Err(SkillError::BadOrigin(created_by));
        }
        Ok(created_by)
    }

    /// `tags`, lowercase and without repeats, then the other formats'
    /// `keywords` (from `extra`), which feed retrieval as tags do.
    fn tags(&self, extra: &Map<String, Value>) -> Result<Vec<String>, SkillError> {
        let mut tags = Vec::new();
        for tag in words(self.0.get("tags"), "tags")? {
            let tag = tag.trim().to_lowercase();
            if tag.is_empty() || tag.len() > 40 {
                return Err(SkillError::BadTag(tag));
            }
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
        // The key itself is kept as it was, and a keyword that would not
        // make a tag is left out rather than refusing the skill.
        let keywords = extra
            .get("keywords")
            .or_else(|| extra.get("metadata").and_then(|m| m.get("keywords")));
        for keyword in words(keywords, "keywords").unwrap_or_default() {
            let keyword = keyword.trim().to_lowercase();
            if (1..=40).contains(&keyword.len()) && !tags.contains(&keyword) {
                tags.push(keyword);
            }
        }
        Ok(tags)
    }

    /// `provenance`: a mapping, or JSON text under `metadata`.
    fn provenance(&mut self) -> Result<Option<Provenance>, SkillError> {
        let provenance = match self.0.remove("provenance") {
            None | Some(Value::Null) => None,
            Some(Value::String(json)) => Some(serde_json::from_str::<Provenance>(&json)),
            Some(v) => Some(serde_json::from_value::<Provenance>(v)),
        };
        provenance
            .transpose()
            .map_err(|e| SkillError::BadProvenance(e.to_string()))
    }
}

/// The original MetaClaw's frontmatter, which it reads line by line, not
/// as YAML: `description: Do this: then that` is valid there. Used only
/// when the text is not YAML, and only when every line is `key: value`.
fn original_lines(yaml: &str) -> Option<Map<String, Value>> {
    let mut map = Map::new();
    for line in yaml.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once(':')?;
        let simple = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !simple {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        map.insert(key.to_string(), Value::String(value.to_string()));
    }
    Some(map)
}

/// A list of words: a YAML list of scalars, or one comma-separated string.
fn words(value: Option<&Value>, key: &str) -> Result<Vec<String>, SkillError> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s.split(',').map(str::to_string).collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| scalar(v).ok_or_else(|| SkillError::NotWords(key.to_string())))
            .collect(),
        Some(_) => Err(SkillError::NotWords(key.to_string())),
    }
}

/// A semantic version; `1`, `1.2` and `v1.2.3` as other formats write them.
fn parse_version(text: &str) -> Result<semver::Version, semver::Error> {
    let text = text.trim();
    let text = text.strip_prefix(['v', 'V']).unwrap_or(text);
    let parts = text.split('.').count();
    let numeric = text
        .split('.')
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match parts {
        1 if numeric => semver::Version::parse(&format!("{text}.0.0")),
        2 if numeric => semver::Version::parse(&format!("{text}.0")),
        _ => semver::Version::parse(text),
    }
}

/// Reads and parses `<dir>/SKILL.md`.
pub fn load(dir: &Path) -> Result<Skill, SkillError> {
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or(SkillError::FolderNotUtf8)?;
    let file = dir.join("SKILL.md");
    let unreadable = |e: std::io::Error| SkillError::Unreadable(e.to_string());
    let size = std::fs::metadata(&file).map_err(unreadable)?.len();
    if size > MAX_FILE {
        return Err(SkillError::LargeFile(size));
    }
    let text = std::fs::read_to_string(&file).map_err(unreadable)?;
    parse(id, &text)
}

/// The SKILL.md text for a skill (used when metaclaw writes one), in the
/// Agent Skills layout: `name` and `description`, the spec's other keys
/// the skill has (`license`, `compatibility`, `allowed-tools`), and under
/// `metadata`, as text, metaclaw's keys, the skill's own metadata and any
/// other key it came with (a list of words as `a, b`; a key the metadata
/// already has stays at the top level rather than being lost).
pub fn render(skill: &Skill) -> String {
    let mut fm = format!(
        "---\nname: {}\ndescription: {}\n",
        skill.name,
        yaml_str(&skill.description)
    );
    let mut metadata: Vec<(String, String)> =
        vec![("category".into(), skill.category.as_str().into())];
    if !skill.tags.is_empty() {
        metadata.push(("tags".into(), skill.tags.join(", ")));
    }
    metadata.push(("version".into(), skill.version.to_string()));
    metadata.push(("created_by".into(), skill.created_by.clone()));
    if let Some(c) = &skill.component {
        metadata.push(("component".into(), c.clone()));
    }
    if let Some(p) = &skill.provenance
        && let Ok(json) = serde_json::to_string(p)
    {
        metadata.push(("provenance".into(), json));
    }
    if let Some(r) = &skill.retired {
        metadata.push(("retired".into(), r.clone()));
    }
    let mut top = Vec::new();
    let mut own = serde_json::Map::new();
    for (key, value) in &skill.extra {
        match key.as_str() {
            "metadata" => match value {
                Value::Object(map) => own = map.clone(),
                other => top.push((key.clone(), other.clone())),
            },
            k if super::spec::TOP_LEVEL.contains(&k) => top.push((key.clone(), value.clone())),
            _ => {}
        }
    }
    let taken = |k: &str| metadata.iter().any(|(m, _)| m == k) || own.contains_key(k);
    let mut moved = Vec::new();
    for (key, value) in &skill.extra {
        if key == "metadata" || super::spec::TOP_LEVEL.contains(&key.as_str()) {
            continue;
        }
        if taken(key) {
            top.push((key.clone(), value.clone()));
        } else {
            moved.push((key.clone(), as_text(value)));
        }
    }
    for (key, value) in &top {
        fm.push_str(&format!("{}: {}\n", yaml_str(key), yaml_value(value)));
    }
    fm.push_str("metadata:\n");
    for (key, value) in metadata.iter().chain(&moved) {
        // JSON text (provenance) reads best single-quoted: its quotes stay.
        let scalar = match value.starts_with('{') && !value.contains(['\n', '\r']) {
            true => format!("'{}'", value.replace('\'', "''")),
            false => yaml_str(value),
        };
        fm.push_str(&format!("  {}: {scalar}\n", yaml_str(key)));
    }
    for (key, value) in &own {
        fm.push_str(&format!("  {}: {}\n", yaml_str(key), yaml_value(value)));
    }
    format!("{fm}---\n{}\n", skill.body.trim_end())
}

/// A value as metadata's text: a list of words as `a, b`, anything else
/// not text as JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(|v| !v.is_object() && !v.is_array()) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// A YAML value on one line: text as a scalar, the rest as JSON (YAML's
/// flow style).
fn yaml_value(value: &Value) -> String {
    match value {
        Value::String(s) => yaml_str(s),
        other => other.to_string(),
    }
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
        // The original reads lines, not YAML: a colon in a value is fine.
        let s = parse(
            "standup",
            "---\nname: standup\ndescription: Notes: yesterday, today, blockers.\ncategory: communication\n---\nBody.\n",
        )
        .unwrap();
        assert_eq!(s.description, "Notes: yesterday, today, blockers.");
        assert_eq!(s.category, Category::TaskSpecific);
    }

    #[test]
    fn every_mistake_gets_a_message_that_says_what_to_fix() {
        let cases = [
            ("x", "no frontmatter", "`---`"),
            ("x", "---\nname: x\n", "not closed"),
            ("ab", "---\ndescription: d.\n---\nb\n", "name: required"),
            ("ab", "---\nname: ab\n---\nb\n", "description: required"),
            ("ab", "---\n- a list\n---\nb\n", "key: value"),
            (
                "ab",
                "---\nname: ab\ndescription: d.\nmetadata:\n  - [broken\n---\nb\n",
                "not valid YAML",
            ),
            (
                "ab",
                "---\nname: ab\ndescription: {a: 1}\n---\nb\n",
                "must be text",
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
        ];
        for (id, text, needle) in cases {
            let err = parse(id, text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    /// Claude skills and OpenClaw/ClawHub skills: keys metaclaw does not
    /// read are kept, in order, and written back.
    #[test]
    fn agent_skills_keys_are_kept() {
        let text = "---\nname: pdf-tools\ndescription: Fill and merge PDF forms.\nlicense: Apache-2.0\nallowed-tools: Read, Bash(python:*)\nmetadata:\n  openclaw:\n    emoji: \"📄\"\n    requires: {bins: [qpdf]}\nhomepage: https://example.com/pdf\nkeywords: [pdf, Forms]\nversion: 1.2\n---\nRun `scripts/fill.py`.\n";
        let s = parse("pdf-tools", text).unwrap();
        assert_eq!(
            s.extra.keys().collect::<Vec<_>>(),
            vec![
                "license",
                "allowed-tools",
                "metadata",
                "homepage",
                "keywords"
            ]
        );
        assert_eq!(
            s.extra["metadata"]["openclaw"]["requires"]["bins"][0],
            "qpdf"
        );
        assert_eq!(s.tags, vec!["pdf", "forms"]);
        assert_eq!(s.version, semver::Version::new(1, 2, 0));
        assert_eq!(s.created_by, "user");
        // Written back in the Agent Skills layout: the spec's keys at the
        // top, everything else under `metadata` (a list of words as text),
        // nothing lost, and the same text when written again.
        let written = render(&s);
        assert_eq!(
            super::super::spec::check(&written, Some("pdf-tools"))
                .iter()
                .filter(|f| f.severity == super::super::spec::Severity::Refused)
                .count(),
            0,
            "{written}"
        );
        let back = parse("pdf-tools", &written).unwrap();
        assert_eq!(
            back.extra.keys().collect::<Vec<_>>(),
            vec!["license", "allowed-tools", "metadata"]
        );
        assert_eq!(back.extra["license"], "Apache-2.0");
        assert_eq!(
            back.extra["metadata"]["homepage"],
            "https://example.com/pdf"
        );
        assert_eq!(back.extra["metadata"]["keywords"], "pdf, Forms");
        assert_eq!(
            back.extra["metadata"]["openclaw"]["requires"]["bins"][0],
            "qpdf"
        );
        assert_eq!(
            (&back.tags, &back.version, &back.created_by, &back.body),
            (&s.tags, &s.version, &s.created_by, &s.body)
        );
        assert_eq!(render(&back), written);
    }

    /// Both layouts read the same; metaclaw's keys at the top level win
    /// over the same keys under `metadata`.
    #[test]
    fn the_old_and_the_agent_skills_layouts_read_alike() {
        let old = parse("git-rebase", GOOD).unwrap();
        let text = render(&old);
        assert!(text.contains("\nmetadata:\n  category: task-specific\n  tags: \"git, rebase\"\n  version: 1.2.0\n  created_by: builtin\n---\n"), "{text}");
        let new = parse("git-rebase", &text).unwrap();
        assert_eq!(
            (
                &new.category,
                &new.tags,
                &new.version,
                &new.created_by,
                &new.body,
                &new.extra
            ),
            (
                &old.category,
                &old.tags,
                &old.version,
                &old.created_by,
                &old.body,
                &old.extra
            )
        );
        let both = "---\nname: ab\ndescription: d.\nversion: 2.0.0\nmetadata:\n  version: 1.0.0\n  author: me\n---\nB\n";
        let s = parse("ab", both).unwrap();
        assert_eq!(s.version, semver::Version::new(2, 0, 0));
        assert_eq!(s.extra["metadata"], serde_json::json!({"author": "me"}));
        assert!(!render(&s).contains("1.0.0"));
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
