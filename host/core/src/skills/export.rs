//! The library's skills written into an agent's own skill folder
//! (`metaclaw skills export`), where the agent loads them natively: Codex's
//! `~/.agents/skills`, Claude Code's `~/.claude/skills`, OpenClaw's managed
//! `~/.openclaw/skills`, a `metaclaw` category of Hermes's
//! `~/.hermes/skills`, or any folder.
//!
//! Each skill goes in the Agent Skills layout, its provenance under
//! `metadata`. A folder metaclaw did not write — the user's own skill, or
//! one the agent learned — is never touched; one it wrote is updated only
//! while it still holds exactly what metaclaw wrote (an edit there, by the
//! user or by the agent's own curator, is kept). What was written is
//! recorded in the store (`skill_exports`), so `--sync` can also remove what
//! metaclaw wrote that the library no longer has live.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::store::sql::Conn;
use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::skill::{self, Skill};
use super::spec;
use crate::clock::now_ms;
use crate::digest::sha256_hex;
use crate::store::skills as records;

/// Where skills are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// OpenClaw's managed skills (`$OPENCLAW_STATE_DIR/skills`, by default
    /// `~/.openclaw/skills`), seen by every agent of the install.
    Openclaw,
    /// Hermes's skills, in a category of their own: `$HERMES_HOME/skills/
    /// metaclaw` (by default under `~/.hermes`).
    Hermes,
    /// `~/.agents/skills`: Codex, and agents reading the shared folder
    /// (OpenClaw too, with its default state folder).
    Codex,
    /// `~/.claude/skills`: Claude Code's personal skills.
    Claude,
    Dir(PathBuf),
}

impl Target {
    /// `openclaw`, `hermes`, `codex`, `claude`, or a folder.
    pub fn parse(text: &str) -> Self {
        match text {
            "openclaw" => Self::Openclaw,
            "hermes" => Self::Hermes,
            "codex" => Self::Codex,
            "claude" => Self::Claude,
            other => Self::Dir(crate::home::expand_home(other)),
        }
    }

    /// The folder, for a user whose home is `home`, reading the agents'
    /// own variables with `var`.
    pub fn dir(&self, home: &Path, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
        let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        match self {
            Self::Openclaw => set("OPENCLAW_STATE_DIR")
                .unwrap_or_else(|| home.join(".openclaw"))
                .join("skills"),
            Self::Hermes => set("HERMES_HOME")
                .unwrap_or_else(|| home.join(".hermes"))
                .join("skills")
                .join("metaclaw"),
            Self::Codex => home.join(".agents").join("skills"),
            Self::Claude => home.join(".claude").join("skills"),
            Self::Dir(dir) => dir.clone(),
        }
    }
}

/// What an export did, by skill name.
#[derive(Debug, Default, Serialize)]
pub struct Exported {
    /// The folder written into.
    pub dir: PathBuf,
    /// New in the folder.
    pub written: Vec<String>,
    /// metaclaw's earlier export, replaced by the library's current text.
    pub updated: Vec<String>,
    /// Already as the library has it.
    pub unchanged: Vec<String>,
    /// metaclaw's earlier export of a skill the library no longer has live
    /// (`--sync`).
    pub removed: Vec<String>,
    /// Left as they are, and why: the agent's own skill of the same name,
    /// or metaclaw's export edited since.
    pub kept: Vec<(String, String)>,
    /// Not exported, and why (an executable skill, one an agent would
    /// refuse).
    pub skipped: Vec<(String, String)>,
}

/// An export of the live skills of a library (the folder `library_dir`;
/// `only`: just these names) into `dir`.
/// `dry_run`: says what it would do, writes nothing. `held` says why a
/// skill may not leave metaclaw now (one from another tool the guard has
/// not passed): it is skipped, and what an earlier export wrote of it stays.
pub struct Export<'a> {
    pub library_dir: &'a Path,
    pub skills: &'a [Arc<Skill>],
    pub held: &'a dyn Fn(&Skill) -> Option<String>,
    pub only: &'a [String],
    pub dir: &'a Path,
    /// Also removes what an earlier export wrote of skills no longer live.
    pub sync: bool,
    pub dry_run: bool,
}

/// Runs `export`, recording what it wrote in `conn`.
pub fn export(export: &Export<'_>, conn: &Conn) -> Result<Exported> {
    check_only(export)?;
    let dir = export.dir;
    if !export.dry_run {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let run = Run {
        export,
        conn,
        target: dir.to_string_lossy().into_owned(),
        dir,
    };
    let mut out = Exported {
        dir: run.dir.clone(),
        ..Exported::default()
    };
    let only = export.only;
    let mut live = Vec::new();
    for skill in export.skills {
        if !(only.is_empty() || only.contains(&skill.name) || only.contains(&skill.id)) {
            continue;
        }
        if skill.retired.is_some() {
            continue;
        }
        live.push(skill.name.clone());
        run.export_skill(skill, &mut out)?;
    }
    if export.sync {
        run.remove_stale(&live, &mut out)?;
    }
    Ok(out)
}

/// Refuses names in `only` that the library does not have.
fn check_only(export: &Export<'_>) -> Result<()> {
    for name in export.only {
        if !export
            .skills
            .iter()
            .any(|s| &s.name == name || &s.id == name)
        {
            bail!(
                "no skill {name:?} in {} (see `metaclaw skills list`)",
                export.library_dir.display()
            );
        }
    }
    Ok(())
}

/// An export under way: what was asked, the store that records it, and
/// the folder resolved, with its name as the store keys it.
struct Run<'a> {
    export: &'a Export<'a>,
    conn: &'a Conn,
    dir: PathBuf,
    target: String,
}

impl Run<'_> {
    /// Exports one live skill, or notes why it is skipped or kept.
    fn export_skill(&self, skill: &Skill, out: &mut Exported) -> Result<()> {
        let Some(text) = self.exportable(skill, out) else {
            return Ok(());
        };
        let written = records::export_of(self.conn, &self.target, &skill.name)?;
        let folder = self.dir.join(&skill.name);
        let file = folder.join("SKILL.md");
        let on_disk = std::fs::read(&file).ok().map(sha256_hex);
        let new_hash = sha256_hex(&text);
        let seen = Seen {
            folder: &folder,
            on_disk: on_disk.as_deref(),
            written: written.as_ref(),
            new_hash: &new_hash,
        };
        match seen.list_in(out) {
            Ok(list) => list.push(skill.name.clone()),
            Err(why) => {
                out.kept.push((skill.name.clone(), why.into()));
                return Ok(());
            }
        }
        if self.export.dry_run {
            return Ok(());
        }
        if on_disk.as_deref() != Some(new_hash.as_str()) {
            write_atomically(&folder, &file, &text)?;
        }
        records::set_export(
            self.conn,
            &records::Export {
                target: self.target.clone(),
                name: skill.name.clone(),
                sha256: new_hash,
                version: skill.version.to_string(),
                at_ms: now_ms(),
            },
        )?;
        Ok(())
    }

    /// The text to export for `skill`; `None`, noted in `out.skipped`
    /// with why, for one held, executable, or that an agent would refuse.
    fn exportable(&self, skill: &Skill, out: &mut Exported) -> Option<String> {
        let why = if let Some(why) = (self.export.held)(skill) {
            why
        } else if skill.component.is_some() {
            "an executable skill: it runs in metaclaw's sandbox, not in an agent".into()
        } else if let Some(text) = exportable_text(self.export.library_dir, skill) {
            return Some(text);
        } else {
            "an agent would refuse it: see `metaclaw skills check`".into()
        };
        out.skipped.push((skill.name.clone(), why));
        None
    }

    /// `--sync`: removes what an earlier export wrote of skills no longer
    /// `live`, unless changed since.
    fn remove_stale(&self, live: &[String], out: &mut Exported) -> Result<()> {
        let (only, dry_run) = (self.export.only, self.export.dry_run);
        for ours in records::exports_to(self.conn, &self.target)? {
            if live.contains(&ours.name) || (!only.is_empty() && !only.contains(&ours.name)) {
                continue;
            }
            let folder = self.dir.join(&ours.name);
            let file = folder.join("SKILL.md");
            match std::fs::read(&file).ok().map(sha256_hex) {
                None => {}
                Some(now) if now == ours.sha256 => {
                    out.removed.push(ours.name.clone());
                    if dry_run {
                        continue;
                    }
                    std::fs::remove_file(&file)
                        .with_context(|| format!("cannot remove {}", file.display()))?;
                    // Only the folder metaclaw made, and only if nothing
                    // else was put in it.
                    let _ = std::fs::remove_dir(&folder);
                }
                Some(_) => {
                    out.kept.push((
                        ours.name.clone(),
                        "no longer live in the library, but changed since metaclaw wrote it: kept"
                            .into(),
                    ));
                    continue;
                }
            }
            if !dry_run {
                records::drop_export(self.conn, &self.target, &ours.name)?;
            }
        }
        Ok(())
    }
}

/// What a skill's folder holds now, against what metaclaw last wrote
/// there and what it would write.
struct Seen<'a> {
    folder: &'a Path,
    on_disk: Option<&'a str>,
    written: Option<&'a records::Export>,
    new_hash: &'a str,
}

impl Seen<'_> {
    /// The list of `out` the skill goes in, or why its folder is kept as
    /// it is.
    fn list_in<'o>(&self, out: &'o mut Exported) -> Result<&'o mut Vec<String>, &'static str> {
        match (self.on_disk, self.written) {
            (None, _) if self.folder.exists() => {
                Err("a folder of that name is there without a SKILL.md metaclaw wrote")
            }
            (None, _) => Ok(&mut out.written),
            (Some(now), _) if now == self.new_hash => Ok(&mut out.unchanged),
            (Some(now), Some(ours)) if now == ours.sha256 => Ok(&mut out.updated),
            (Some(_), Some(_)) => {
                Err("changed since metaclaw wrote it (by you or the agent): kept")
            }
            (Some(_), None) => Err("the agent's own skill of that name: never overwritten"),
        }
    }
}

/// The library's own file when an agent takes it as it is, else the skill
/// rendered in the Agent Skills layout; `None` when an agent would refuse
/// both.
fn exportable_text(library_dir: &Path, skill: &Skill) -> Option<String> {
    let own = std::fs::read_to_string(library_dir.join(&skill.id).join("SKILL.md")).ok();
    own.into_iter()
        .chain(std::iter::once(skill::render(skill)))
        .find(|text| !spec::refused(&spec::check(text, Some(&skill.name))))
}

fn write_atomically(folder: &Path, file: &Path, text: &str) -> Result<()> {
    std::fs::create_dir_all(folder)
        .with_context(|| format!("cannot create {}", folder.display()))?;
    let tmp = folder.join(".SKILL.md.metaclaw-tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(dir: &Path, skills: &[(&str, &str)]) -> Vec<Arc<Skill>> {
        for (name, body) in skills {
            let folder = dir.join(name);
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::write(
                folder.join("SKILL.md"),
                format!("---\nname: {name}\ndescription: Use when {name} matters.\nmetadata:\n  category: general\n  version: 1.0.0\n  created_by: evolved:s1\n---\n{body}\n"),
            )
            .unwrap();
        }
        skills
            .iter()
            .map(|(name, _)| Arc::new(skill::load(&dir.join(name)).unwrap()))
            .collect()
    }

    fn store(dir: &Path) -> Conn {
        crate::store::test_db(dir.join("metaclaw.db"))
            .side_writer()
            .unwrap()
    }

    #[test]
    fn an_agents_own_skill_is_exported_under_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("skills");
        let skills = library(&lib, &[("alpha", "shared")]);
        let own = library(&lib.join("@work"), &[("beta", "work's own")]);
        let own: Vec<Arc<Skill>> = own
            .into_iter()
            .map(|s| {
                Arc::new(Skill {
                    id: "@work/beta".into(),
                    ..Skill::clone(&s)
                })
            })
            .collect();
        let all: Vec<Arc<Skill>> = skills.into_iter().chain(own).collect();
        let into = tmp.path().join("agent");
        let conn = store(tmp.path());
        let done = export(
            &Export {
                library_dir: &lib,
                skills: &all,
                held: &|_| None,
                only: &["@work/beta".into()],
                dir: &into,
                sync: false,
                dry_run: false,
            },
            &conn,
        )
        .unwrap();
        assert_eq!(done.written.len(), 1, "{done:?}");
        let text = std::fs::read_to_string(into.join("beta/SKILL.md")).unwrap();
        assert!(text.contains("work's own"), "{text}");
        assert!(!into.join("@work").exists());
    }

    #[test]
    fn each_agent_s_folder_follows_its_own_variables() {
        let home = Path::new("/home/me");
        let none = |_: &str| None;
        assert_eq!(
            Target::parse("openclaw").dir(home, none),
            Path::new("/home/me/.openclaw/skills")
        );
        assert_eq!(
            Target::parse("hermes").dir(home, none),
            Path::new("/home/me/.hermes/skills/metaclaw")
        );
        assert_eq!(
            Target::parse("codex").dir(home, none),
            Path::new("/home/me/.agents/skills")
        );
        assert_eq!(
            Target::parse("claude").dir(home, none),
            Path::new("/home/me/.claude/skills")
        );
        let env = |name: &str| match name {
            "OPENCLAW_STATE_DIR" => Some("/srv/oc".into()),
            "HERMES_HOME" => Some("/srv/hermes/profiles/work".into()),
            _ => None,
        };
        assert_eq!(
            Target::parse("openclaw").dir(home, env),
            Path::new("/srv/oc/skills")
        );
        assert_eq!(
            Target::parse("hermes").dir(home, env),
            Path::new("/srv/hermes/profiles/work/skills/metaclaw")
        );
        assert_eq!(Target::parse("/tmp/x").dir(home, env), Path::new("/tmp/x"));
    }

    #[test]
    fn only_what_metaclaw_wrote_is_updated_or_removed() {
        let lib = tempfile::tempdir().unwrap();
        let agent = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let conn = store(home.path());
        // The agent's own skill of a name the library has too.
        std::fs::create_dir_all(agent.path().join("git-hygiene")).unwrap();
        std::fs::write(
            agent.path().join("git-hygiene/SKILL.md"),
            "---\nname: git-hygiene\ndescription: mine\n---\nmine\n",
        )
        .unwrap();
        let skills = library(
            lib.path(),
            &[
                ("git-hygiene", "theirs"),
                ("retry-flaky", "v1"),
                ("cite-sources", "v1"),
            ],
        );
        // The whole library into the agent's folder.
        let every = |skills: &[Arc<Skill>], sync: bool, dry_run: bool| {
            let export = Export {
                library_dir: lib.path(),
                skills,
                held: &|_| None,
                only: &[],
                dir: agent.path(),
                sync,
                dry_run,
            };
            super::export(&export, &conn).unwrap()
        };
        let first = every(&skills, false, false);
        assert_eq!(first.written, ["retry-flaky", "cite-sources"]);
        assert_eq!(first.kept.len(), 1, "{:?}", first.kept);
        let mine = std::fs::read_to_string(agent.path().join("git-hygiene/SKILL.md")).unwrap();
        assert!(mine.contains("mine"), "the agent's own skill is untouched");
        let exported = std::fs::read_to_string(agent.path().join("retry-flaky/SKILL.md")).unwrap();
        assert!(
            spec::check(&exported, Some("retry-flaky")).is_empty(),
            "{exported}"
        );

        // The agent's curator edits one export; the library changes both.
        std::fs::write(
            agent.path().join("cite-sources/SKILL.md"),
            "---\nname: cite-sources\ndescription: curated\n---\ncurated\n",
        )
        .unwrap();
        let skills = library(lib.path(), &[("retry-flaky", "v2"), ("cite-sources", "v2")]);
        let again = every(&skills, false, false);
        assert_eq!(again.updated, ["retry-flaky"]);
        assert_eq!(again.kept[0].0, "cite-sources");
        let updated = std::fs::read_to_string(agent.path().join("retry-flaky/SKILL.md")).unwrap();
        assert!(updated.contains("v2"));
        let curated = std::fs::read_to_string(agent.path().join("cite-sources/SKILL.md")).unwrap();
        assert!(
            curated.contains("curated"),
            "an edit in the agent's folder is kept"
        );

        // The library retires retry-flaky: --sync removes metaclaw's copy
        // (a dry run first says so and leaves it).
        let mut skills = skills;
        let mut retired = (*skills[0]).clone();
        retired.retired = Some("canary".into());
        skills[0] = Arc::new(retired);
        let dry = every(&skills, true, true);
        assert_eq!(dry.removed, ["retry-flaky"]);
        assert!(agent.path().join("retry-flaky/SKILL.md").exists());
        let synced = every(&skills, true, false);
        assert_eq!(synced.removed, ["retry-flaky"]);
        assert!(!agent.path().join("retry-flaky").exists());
        assert!(agent.path().join("git-hygiene/SKILL.md").exists());
        assert!(agent.path().join("cite-sources/SKILL.md").exists());
    }
}
