//! `metaclaw skills import PATH`: copies skill folders people already have
//! (Claude's `~/.claude/skills`, OpenClaw's `~/.openclaw/skills` or a
//! workspace `skills/`, the original MetaClaw's `~/.metaclaw/skills`, a
//! checkout of a skills collection) into the library.
//!
//! Each skill folder (one holding a SKILL.md) is copied whole, under its
//! `name`, with `created_by: imported:<the folder it came from>` under its
//! `metadata` (the Agent Skills layout: see [`with_created_by`]); its other
//! files (`scripts/`, `references/`, `assets/`) come along but are never run
//! or injected. Nothing in the library is overwritten unless `force`: a
//! skill already there with the same text is skipped as identical, a
//! different one of the same name is skipped as taken. Symbolic links are
//! never followed (a link in a downloaded collection can point anywhere on
//! the machine), and sizes are bounded.

use std::path::{Path, PathBuf};

use super::skill::{self, IMPORTED};

/// Folders below PATH searched for skills.
const MAX_DEPTH: usize = 6;
/// Files a skill folder may bring along, and their total size.
pub const MAX_BUNDLED_FILES: usize = 200;
pub const MAX_BUNDLED_BYTES: u64 = 8 << 20;

/// What happened to one skill folder.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Imported {
        name: String,
        /// Bundled files copied (besides SKILL.md).
        files: usize,
        /// Symbolic links left behind.
        links_skipped: usize,
        /// It replaced a different skill of that name (`force`).
        replaced: bool,
        /// What the Agent Skills spec says of the SKILL.md as it came (an
        /// agent that applies it would refuse or advise this; metaclaw
        /// reads it anyway).
        spec: Vec<super::spec::Finding>,
    },
    Skipped {
        name: String,
        why: String,
    },
    Refused {
        why: String,
    },
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Item {
    /// The skill folder it came from.
    pub source: PathBuf,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Every folder under `root` (itself included) holding a SKILL.md, sorted;
/// a skill folder's own subfolders are not searched, nor hidden folders,
/// nor symbolic links.
pub fn find(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    walk(root, 0, &mut found);
    found.sort();
    found
}

fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if dir.join("SKILL.md").is_file() {
        found.push(dir.to_path_buf());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && !hidden && entry.file_name() != "node_modules" {
            walk(&entry.path(), depth + 1, found);
        }
    }
}

/// A skill folder's files besides SKILL.md, relative to it, with their
/// sizes; symbolic links are counted, not followed.
pub struct Bundled {
    pub files: Vec<(PathBuf, u64)>,
    pub links: Vec<PathBuf>,
}

pub fn bundled(folder: &Path) -> std::io::Result<Bundled> {
    let mut out = Bundled {
        files: Vec::new(),
        links: Vec::new(),
    };
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(folder.join(&rel))? {
            let entry = entry?;
            let path = rel.join(entry.file_name());
            // Editor and VCS state is not part of a skill.
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                out.links.push(path);
            } else if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && path != Path::new("SKILL.md") {
                out.files.push((path, entry.metadata()?.len()));
            }
        }
    }
    out.files.sort();
    out.links.sort();
    Ok(out)
}

/// Imports every skill found under `root` into the library folder `dir`.
pub fn import(root: &Path, dir: &Path, force: bool) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    for source in find(root) {
        let taken_here = |name: &str| {
            items.iter().find_map(|i| match &i.outcome {
                Outcome::Imported { name: n, .. } if n == name => Some(i.source.clone()),
                _ => None,
            })
        };
        let outcome = match prepare(&source) {
            Err(why) => Outcome::Refused {
                why: why.to_string(),
            },
            Ok(prepared) => match taken_here(&prepared.name) {
                Some(first) => Outcome::Skipped {
                    why: format!(
                        "{} is imported from {} already",
                        prepared.name,
                        first.display()
                    ),
                    name: prepared.name,
                },
                None => place(&source, dir, prepared, force),
            },
        };
        items.push(Item { source, outcome });
    }
    items
}

/// A skill folder read and checked, ready to be copied.
struct Prepared {
    name: String,
    /// SKILL.md as it will be in the library.
    text: String,
    files: Vec<(PathBuf, u64)>,
    links: usize,
    spec: Vec<super::spec::Finding>,
}

/// Why a skill folder is not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportRefused {
    #[error(transparent)]
    Skill(#[from] skill::SkillError),
    #[error("SKILL.md is a symbolic link; not followed")]
    Link,
    #[error("its frontmatter could not be given created_by: imported")]
    NoCreatedBy,
    #[error("cannot list its files: {0}")]
    Unlisted(String),
    #[error("it brings {0} files; at most {MAX_BUNDLED_FILES}")]
    TooManyFiles(usize),
    #[error("its files take {0} bytes; at most {MAX_BUNDLED_BYTES}")]
    TooManyBytes(u64),
}

fn prepare(source: &Path) -> Result<Prepared, ImportRefused> {
    let file = source.join("SKILL.md");
    let unreadable = |e: std::io::Error| skill::SkillError::Unreadable(e.to_string());
    let meta = std::fs::symlink_metadata(&file).map_err(unreadable)?;
    if !meta.is_file() {
        return Err(ImportRefused::Link);
    }
    if meta.len() > skill::MAX_FILE {
        return Err(skill::SkillError::LargeFile(meta.len()).into());
    }
    let original = std::fs::read_to_string(&file).map_err(unreadable)?;
    let parsed = skill::parse_text(&original)?;
    let origin = std::fs::canonicalize(source).unwrap_or_else(|_| source.to_path_buf());
    let (text, rendered) = with_created_by(&original, &format!("{IMPORTED}{}", origin.display()))?;
    // The text written must load as the skill that was read (written anew,
    // its other keys may have moved under `metadata`).
    let check = skill::parse(&parsed.name, &text)?;
    if check.body != parsed.body
        || check.description != parsed.description
        || check.tags != parsed.tags
        || check.version != parsed.version
        || (!rendered && check.extra != parsed.extra)
    {
        return Err(ImportRefused::NoCreatedBy);
    }
    let bundled = bundled(source).map_err(|e| ImportRefused::Unlisted(e.to_string()))?;
    if bundled.files.len() > MAX_BUNDLED_FILES {
        return Err(ImportRefused::TooManyFiles(bundled.files.len()));
    }
    let bytes: u64 = bundled.files.iter().map(|(_, size)| size).sum();
    if bytes > MAX_BUNDLED_BYTES {
        return Err(ImportRefused::TooManyBytes(bytes));
    }
    let spec = super::spec::check(&original, source.file_name().and_then(|n| n.to_str()));
    Ok(Prepared {
        name: parsed.name,
        text,
        spec,
        files: bundled.files,
        links: bundled.links.len(),
    })
}

/// `text` with `created_by` set to `value`, and whether it had to be
/// written anew. A file in the Agent Skills layout keeps its text: the
/// line goes under its `metadata` (replaced, or added; a `metadata:` key is
/// added before the closing `---` if it has none). Any other layout (the
/// original MetaClaw's, metaclaw's keys at the top level, `metadata` in
/// flow style) is written in the Agent Skills layout ([`skill::render`]).
fn with_created_by(text: &str, value: &str) -> Result<(String, bool), skill::SkillError> {
    if let Some(out) = under_metadata(text, "created_by", value) {
        return Ok((out, false));
    }
    let mut parsed = skill::parse_text(text)?;
    parsed.created_by = value.to_string();
    Ok((skill::render(&parsed), true))
}

/// `text` with `key: value` under its frontmatter's block `metadata`; `None`
/// when the frontmatter is not in the Agent Skills layout.
fn under_metadata(text: &str, key: &str, value: &str) -> Option<String> {
    let line = format!("{key}: {}", serde_json::Value::String(value.into()));
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.first().map(|l| l.trim_end()) != Some("---") {
        return None;
    }
    let end = 1 + lines[1..].iter().position(|l| l.trim_end() == "---")?;
    let top_key = |l: &str| -> Option<String> {
        let first = l.chars().next()?;
        if first.is_whitespace() || first == '#' || first == '-' {
            return None;
        }
        l.split_once(':').map(|(k, _)| k.trim().to_string())
    };
    let mut metadata = None;
    for (i, l) in lines.iter().enumerate().take(end).skip(1) {
        let Some(k) = top_key(l) else { continue };
        if skill::METADATA_KEYS.contains(&k.as_str()) {
            return None;
        }
        if k == "metadata" {
            if !l.trim_end().ends_with(':') {
                return None;
            }
            metadata = Some(i);
        }
    }
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    match metadata {
        None => {
            out.insert(end, format!("metadata:\n  {line}\n"));
        }
        Some(at) => {
            // The block's lines: indented, up to the next top-level key.
            let block: Vec<usize> = (at + 1..end)
                .take_while(|&i| top_key(lines[i]).is_none())
                .collect();
            let indent = block
                .iter()
                .map(|&i| lines[i])
                .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .map(|l| &l[..l.len() - l.trim_start().len()])
                .unwrap_or("  ")
                .to_string();
            let ours = format!("{indent}{key}:");
            match block.iter().find(|&&i| lines[i].starts_with(&ours)) {
                Some(&i) => out[i] = format!("{indent}{line}\n"),
                None => out.insert(at + 1, format!("{indent}{line}\n")),
            }
        }
    }
    Some(out.concat())
}

fn place(source: &Path, dir: &Path, prepared: Prepared, force: bool) -> Outcome {
    let target = dir.join(&prepared.name);
    let mut replaced = false;
    if target.exists() {
        if same(&target, &prepared, source) {
            return Outcome::Skipped {
                name: prepared.name,
                why: "already in the library, identical".into(),
            };
        }
        if !force {
            return Outcome::Skipped {
                why: format!(
                    "the library has a different skill called {0} ({1}); pass --force to replace it",
                    prepared.name,
                    target.display()
                ),
                name: prepared.name,
            };
        }
        replaced = true;
    }
    match copy(source, dir, &target, &prepared) {
        Ok(()) => Outcome::Imported {
            name: prepared.name,
            files: prepared.files.len(),
            links_skipped: prepared.links,
            replaced,
            spec: prepared.spec,
        },
        Err(e) => Outcome::Refused {
            why: format!("cannot copy it into {}: {e}", target.display()),
        },
    }
}

/// Whether the library's copy is what this import would write.
fn same(target: &Path, prepared: &Prepared, source: &Path) -> bool {
    let Ok(current) = std::fs::read_to_string(target.join("SKILL.md")) else {
        return false;
    };
    let Ok(theirs) = bundled(target) else {
        return false;
    };
    current == prepared.text
        && theirs.files.len() == prepared.files.len()
        && prepared.files.iter().all(|(rel, _)| {
            matches!(
                (std::fs::read(source.join(rel)), std::fs::read(target.join(rel))),
                (Ok(a), Ok(b)) if a == b
            )
        })
}

/// Copies into a hidden folder of the library (the library skips those),
/// then moves it in place in one rename, so that a watching daemon never
/// reads half a skill.
fn copy(source: &Path, dir: &Path, target: &Path, prepared: &Prepared) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let staging = dir.join(format!(".import-{}-{}", prepared.name, std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    let written = (|| {
        std::fs::create_dir_all(&staging)?;
        std::fs::write(staging.join("SKILL.md"), &prepared.text)?;
        for (rel, _) in &prepared.files {
            let to = staging.join(rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(source.join(rel), &to)?;
        }
        if target.exists() {
            let old = dir.join(format!(
                ".replaced-{}-{}",
                prepared.name,
                std::process::id()
            ));
            std::fs::rename(target, &old)?;
            std::fs::rename(&staging, target)?;
            std::fs::remove_dir_all(&old)
        } else {
            std::fs::rename(&staging, target)
        }
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_by_goes_under_metadata_and_the_rest_is_kept() {
        let text = "---\nname: ab\n# a comment\ndescription: d.\n---\nbody\n---\nmore\n";
        let (out, rendered) = with_created_by(text, "imported:/x").unwrap();
        assert!(!rendered);
        assert_eq!(
            out,
            "---\nname: ab\n# a comment\ndescription: d.\nmetadata:\n  created_by: \"imported:/x\"\n---\nbody\n---\nmore\n"
        );
        let (again, _) = with_created_by(&out, "imported:/y").unwrap();
        assert!(
            again.contains("\nmetadata:\n  created_by: \"imported:/y\"\n"),
            "{again}"
        );
        assert!(!again.contains("/x"));
        // A metadata block of its own: the line joins it, at its indent.
        let text = "---\nname: ab\ndescription: d.\nmetadata:\n    author: me\n    openclaw:\n      emoji: x\nlicense: MIT\n---\nbody\n";
        let (out, _) = with_created_by(text, "imported:/x").unwrap();
        assert_eq!(
            out,
            "---\nname: ab\ndescription: d.\nmetadata:\n    created_by: \"imported:/x\"\n    author: me\n    openclaw:\n      emoji: x\nlicense: MIT\n---\nbody\n"
        );
        let s = skill::parse("ab", &out).unwrap();
        assert_eq!(s.created_by, "imported:/x");
        assert_eq!(s.extra["metadata"]["openclaw"]["emoji"], "x");
        // metaclaw's older layout: written anew, in the spec's.
        let text =
            "---\nname: ab\ndescription: d.\ncategory: general\ncreated_by: user\n---\nbody\n";
        let (out, rendered) = with_created_by(text, "imported:/x").unwrap();
        assert!(rendered);
        assert!(
            !crate::skills::spec::refused(&crate::skills::spec::check(&out, Some("ab"))),
            "{out}"
        );
        assert_eq!(skill::parse("ab", &out).unwrap().created_by, "imported:/x");
    }
}
