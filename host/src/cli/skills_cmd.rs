//! `metaclaw skills list | show | search | add | remove | history | install-builtin | review`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::{ReviewAction, SkillsCommand, load_config, local_time};
use metaclaw_core::agent_id::AgentId;
use metaclaw_core::config::LoadedConfig;
use metaclaw_core::home::Home;
use metaclaw_core::home::expand_home;
use metaclaw_core::learn::review;
use metaclaw_core::plugins::{HostSettings, PluginHost};
use metaclaw_core::skills::library::Library;
use metaclaw_core::skills::skill::{self, Category};
use metaclaw_core::skills::{Query, Retrieval, SelectionSettings, Skills, builtin, import};
use metaclaw_core::store::skills::{Attribution, history};

use super::skills_stats as stats;

/// What `setup` and `start` do with the built-in bank
/// (`skills.install_builtin`): install it and say in one line what
/// changed. A failure is a warning: the proxy works without skills.
/// Then, once per store, the library is moved into the Agent Skills layout
/// (`skills::upgrade`), whatever `install_builtin` says.
pub(super) fn install_builtin_on(home: &Home, config: &metaclaw_core::config::Config, why: &str) {
    let (dir, db) = metaclaw_core::skills::paths(home, config);
    if config.skills.install_builtin {
        match builtin::install_recorded(&dir, &db, why, builtin::Missing::New) {
            Ok(report) => {
                if let Some(line) = report.summary(&dir) {
                    say!("{line}");
                }
            }
            Err(e) => eprintln!(
                "warning: cannot install the built-in skills into {}: {e:#}",
                dir.display()
            ),
        }
    }
    match metaclaw_core::skills::upgrade::once(&dir, &db, &home.root.join("backups")) {
        Ok(Some(upgraded)) => {
            if let Some(line) = upgraded.summary(&dir) {
                say!("{line}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!(
            "warning: the skills in {} were not moved into the Agent Skills layout: {e:#}",
            dir.display()
        ),
    }
}

/// The library the commands read and change: while `start --demo` runs,
/// the demo's own; else `skills.dir` (default `<home>/skills`).
fn skills_dir(home: &Home, config: &LoadedConfig) -> PathBuf {
    if home.demo_running() {
        return home.demo_skills_dir();
    }
    metaclaw_core::skills::library_dir(home, &config.config)
}

/// The refusals among `findings`, on one line.
fn spec_summary(findings: &[metaclaw_core::skills::spec::Finding]) -> String {
    findings
        .iter()
        .filter(|f| f.severity == metaclaw_core::skills::spec::Severity::Refused)
        .map(|f| format!("{}: {}", f.field, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `skills check`: every SKILL.md at or under `root` against the spec.
fn check(root: PathBuf, json: bool) -> Result<ExitCode> {
    use metaclaw_core::skills::spec::{self, Finding, Severity};
    let files: Vec<PathBuf> = if root.is_file() {
        vec![root.clone()]
    } else {
        import::find(&root)
            .into_iter()
            .map(|d| d.join("SKILL.md"))
            .collect()
    };
    if files.is_empty() {
        bail!(
            "no SKILL.md at or under {}: give a SKILL.md, a skill folder or a folder of them",
            root.display()
        );
    }
    let checked: Vec<(PathBuf, Vec<Finding>)> = files
        .into_iter()
        .map(|file| {
            let folder = file
                .parent()
                .and_then(|p| p.file_name())
                .and_then(|n| n.to_str());
            let findings = match std::fs::read_to_string(&file) {
                Ok(text) => spec::check(&text, folder),
                Err(e) => vec![Finding {
                    severity: Severity::Refused,
                    field: "file".into(),
                    message: format!("cannot read it: {e}"),
                }],
            };
            (file, findings)
        })
        .collect();
    let refused = checked.iter().filter(|(_, f)| spec::refused(f)).count();
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "checked": checked.len(),
                "refused": refused,
                "skills": checked.iter().map(|(file, findings)| json!({
                    "path": file,
                    "refused": spec::refused(findings),
                    "findings": findings,
                })).collect::<Vec<_>>(),
            }))?
        );
    } else {
        for (file, findings) in &checked {
            let verdict = if spec::refused(findings) {
                "refused"
            } else if findings.is_empty() {
                "ok"
            } else {
                "advice"
            };
            say!("{verdict:<8} {}", file.display());
            for f in findings {
                let mark = match f.severity {
                    Severity::Refused => "x",
                    Severity::Advice => "~",
                };
                say!("  {mark} {}: {}", f.field, f.message);
            }
        }
        say!(
            "{refused} of {} would be refused by an agent that applies the Agent Skills spec (Codex, Claude Code, OpenClaw)",
            checked.len()
        );
    }
    Ok(if refused > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn db(home: &Home, config: &LoadedConfig) -> metaclaw_core::store::Db {
    super::sessions_cmd::store_file(home, Some(&config.config))
}

/// What every `skills` subcommand works with: the library's folder and
/// store, as the daemon keeps them.
struct Cx<'a> {
    home: &'a Home,
    config: LoadedConfig,
    dir: PathBuf,
    db: metaclaw_core::store::Db,
    /// Skills from other tools and the guard's verdicts, as the daemon
    /// reads them (the daemon asks the guard; these commands only read).
    untrusted: std::sync::Arc<metaclaw_core::skills::untrusted::Untrusted>,
    /// The skills offered to OpenClaw's Skill Workshop.
    delivery: std::sync::Arc<metaclaw_core::skills::workshop::Delivery>,
}

impl<'a> Cx<'a> {
    fn new(home: &'a Home, config: LoadedConfig) -> Self {
        let (dir, db) = (skills_dir(home, &config), db(home, &config));
        let untrusted = metaclaw_core::skills::untrusted::Untrusted::new(
            config.config.skills.untrusted.clone(),
            db.clone(),
        );
        let delivery = metaclaw_core::skills::workshop::Delivery::new(
            config.config.skills.deliver,
            config.config.skills.workshop.clone(),
            db.clone(),
        );
        Self {
            home,
            config,
            dir,
            db,
            untrusted,
            delivery,
        }
    }

    /// The library as the daemon keeps it: with `canary.user_skills`, a
    /// skill written by these commands (or found edited) is tested too.
    fn new_library(&self) -> std::sync::Arc<Library> {
        let canary = &self.config.config.canary;
        let library = Library::new(self.dir.clone(), self.db.clone());
        if canary.skills && canary.user_skills {
            library.test_user_changes(canary.share, metaclaw_core::canary::Live::new());
        }
        library
    }

    /// [`Cx::new_library`], read.
    fn open_library(&self) -> std::sync::Arc<Library> {
        let library = self.new_library();
        library.rescan(None);
        library
    }

    /// Why a skill is held back from turns, if it is.
    fn hold(&self, s: &metaclaw_core::skills::skill::Skill) -> Option<String> {
        self.untrusted
            .hold(s)
            .map(|h| h.label())
            .or_else(|| self.delivery.hold(s))
    }
}

pub fn run(home: &Home, config_path: &Path, command: SkillsCommand) -> Result<ExitCode> {
    let config = load_config(config_path)?;
    home.ensure()?;
    let cx = Cx::new(home, config);
    match command {
        SkillsCommand::List {
            category,
            tag,
            agent,
            json,
        } => run_list(&cx, category, tag, agent, json),
        SkillsCommand::Show { name, json } => run_show(&cx, name, json),
        SkillsCommand::Stats { name, agent, json } => run_stats(&cx, name, agent, json),
        SkillsCommand::Search { query, agent, json } => run_search(&cx, query, agent, json),
        SkillsCommand::Add { path, force } => run_add(&cx, path, force),
        SkillsCommand::Import { path, force, json } => run_import(&cx, path, force, json),
        SkillsCommand::Check { path, json } => run_check(&cx, path, json),
        SkillsCommand::Export {
            to,
            names,
            agent,
            sync,
            dry_run,
            json,
        } => run_export(&cx, to, names, agent, sync, dry_run, json),
        SkillsCommand::Remove { name } => run_remove(&cx, name),
        SkillsCommand::Share { id } => run_share(&cx, id),
        SkillsCommand::Restore { name } => run_restore(&cx, name),
        SkillsCommand::History { name, json } => run_history(&cx, name, json),
        SkillsCommand::InstallBuiltin => run_install_builtin(&cx),
        SkillsCommand::Review { action, json } => run_review(&cx, action, json),
    }
}

/// `skills list`.
fn run_list(
    cx: &Cx,
    category: Option<String>,
    tag: Option<String>,
    agent: Option<AgentId>,
    json: bool,
) -> Result<ExitCode> {
    let library = cx.open_library();
    let snapshot = library.snapshot();
    let wanted = match category.as_deref() {
        None => None,
        Some(c) => Some(serde_json::from_value::<Category>(json!(c)).map_err(|_| {
            anyhow::anyhow!("--category {c:?}: use general, task-specific or common-mistakes")
        })?),
    };
    let skills: Vec<_> = snapshot
        .skills
        .iter()
        .filter(|s| wanted.is_none_or(|c| s.category == c))
        .filter(|s| agent.as_ref().is_none_or(|a| snapshot.visible_to(&s.id, a)))
        .filter(|s| {
            tag.as_deref()
                .is_none_or(|t| s.tags.iter().any(|x| x == &t.to_lowercase()))
        })
        .collect();
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "generation": snapshot.generation,
                "skills": skills.iter().map(|s| json!({
                    "id": s.id, "agent": layer_agent(&s.id), "team": layer_team(&s.id),
                    "name": s.name, "description": s.description, "category": s.category.as_str(),
                    "tags": s.tags, "version": s.version.to_string(), "created_by": s.created_by,
                    "component": s.component, "content_hash": s.content_hash,
                    "retired": s.retired,
                    "held": cx.hold(s),
                })).collect::<Vec<_>>(),
                "problems": snapshot.problems,
            }))?
        );
    } else {
        if skills.is_empty() {
            say!(
                "no skills in {} (try `metaclaw skills install-builtin`)",
                library.dir.display()
            );
        }
        for s in &skills {
            let description: String = s.description.chars().take(70).collect();
            let retired = if s.retired.is_some() {
                "[retired] "
            } else if cx.hold(s).is_some() {
                "[held] "
            } else {
                ""
            };
            say!(
                "{:<36} {:<15} {:<7} {:<10} {retired}{}",
                s.id,
                s.category.as_str(),
                s.version,
                s.created_by,
                description
            );
        }
        for p in &snapshot.problems {
            say!("problem: {}: {}", p.path.display(), p.error);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills show --json`: the skill, or why its file does not parse.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    skill: Option<&'a skill::Skill>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    path: PathBuf,
    files: Vec<serde_json::Value>,
    links: &'a [PathBuf],
    #[serde(skip_serializing_if = "Option::is_none")]
    outcomes: Option<&'a [metaclaw_core::skills::stats::Row]>,
}

/// `skills show`.
fn run_show(cx: &Cx, name: String, json: bool) -> Result<ExitCode> {
    let folder = cx.dir.join(&name);
    let text = std::fs::read_to_string(folder.join("SKILL.md")).with_context(|| {
        format!(
            "no skill {name:?} in {} (see `metaclaw skills list`)",
            cx.dir.display()
        )
    })?;
    let parsed = skill::parse(&name, &text);
    let bundled = import::bundled(&folder)?;
    let outcomes = stats::rows(&cx.db, &cx.open_library().snapshot(), Some(&name), None);
    if json {
        let files: Vec<_> = bundled
            .files
            .iter()
            .map(|(path, bytes)| json!({"path": path, "bytes": bytes}))
            .collect();
        let shown = Shown {
            skill: parsed.as_ref().ok(),
            error: parsed.as_ref().err().map(|e| e.to_string()),
            path: folder.join("SKILL.md"),
            files,
            links: &bundled.links,
            outcomes: outcomes.as_ref().ok().map(|(_, rows)| rows.as_slice()),
        };
        say!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        say_raw!("{text}");
        match outcomes {
            Ok((board, rows)) => {
                say!("\noutcomes:");
                stats::print(&board, &rows);
            }
            Err(e) => say!("\noutcomes: not read: {e:#}"),
        }
        if !bundled.files.is_empty() || !bundled.links.is_empty() {
            say!(
                "\nfiles (in {}; never run or injected by metaclaw):",
                folder.display()
            );
            for (path, bytes) in &bundled.files {
                say!("  {:>9}  {}", bytes, path.display());
            }
            for path in &bundled.links {
                say!("  {:>9}  {} (symbolic link)", "-", path.display());
            }
        }
        if let Err(e) = parsed {
            say!("\nproblem: {e}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills stats`.
fn run_stats(
    cx: &Cx,
    name: Option<String>,
    agent: Option<AgentId>,
    json: bool,
) -> Result<ExitCode> {
    let library = cx.open_library();
    let snapshot = library.snapshot();
    let (board, rows) = stats::rows(&cx.db, &snapshot, name.as_deref(), agent.as_ref())?;
    if let Some(name) = &name
        && snapshot.get(name).is_none()
        && board.versions(name).is_empty()
    {
        bail!(
            "no skill {name:?} in the library and no outcomes recorded for it (see `metaclaw skills list`)"
        );
    }
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "versions": rows,
                "every_main_turn": board.all(),
                "prior": board.prior(),
            }))?
        );
    } else {
        stats::print(&board, &rows);
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills search`.
fn run_search(cx: &Cx, query: String, agent: Option<AgentId>, json: bool) -> Result<ExitCode> {
    let agent = agent.unwrap_or_default();
    let (retrieval, embedder) = Retrieval::from_config(&cx.config.config, &cx.db);
    if let Some(problem) = &retrieval.problem {
        say!("warning: embeddings are off, BM25 retrieves instead: {problem}");
    }
    let library = cx.open_library();
    let plugins = PluginHost::new(
        HostSettings::from_config(&cx.config.config, cx.home),
        embedder,
    )?;
    plugins.reload();
    let engine = plugins.engine.clone();
    let skills = Skills::new(
        library,
        Some(plugins),
        SelectionSettings::from_config(&cx.config.config),
        retrieval,
    );
    let q = Query {
        text: metaclaw_wire::text::user_words(&query),
        agent,
        ..Query::default()
    };
    let selection = engine.block_on(async {
        skills.index_now().await;
        skills.select(&q).await
    });
    let injected: Vec<&str> = selection.skills.iter().map(|s| s.id.as_str()).collect();
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "query": q.text,
                "retriever": selection.retriever,
                "min_relevance": skills.settings.min_relevance,
                "ranked": selection.ranked.iter().map(|(id, score)| json!({"id": id, "score": score, "injected": injected.contains(&id.as_str())})).collect::<Vec<_>>(),
                "injected": injected,
            }))?
        );
    } else {
        match &selection.retriever {
            Some(r) => say!(
                "retriever: {r} (min relevance {})",
                skills.settings.min_relevance
            ),
            None => match skills.answering() {
                Err(why) => say!("no retriever answered: {why}"),
                Ok(loaded) => say!(
                    "no retriever answered: {} did not (see `metaclaw plugins list` and the log)",
                    loaded.join(", ")
                ),
            },
        }
        for (id, score) in selection.ranked.iter().take(15) {
            let mark = if injected.contains(&id.as_str()) {
                "*"
            } else {
                " "
            };
            say!("{mark} {score:.3}  {id}");
        }
        say!(
            "{} skill(s) would be injected{}",
            injected.len(),
            if injected.is_empty() {
                ""
            } else {
                " (marked *)"
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills add`.
fn run_add(cx: &Cx, path: PathBuf, force: bool) -> Result<ExitCode> {
    let file = if path.is_dir() {
        path.join("SKILL.md")
    } else {
        path.clone()
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    // The name decides the folder.
    let parsed =
        skill::parse_text(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let target = cx.dir.join(&parsed.id);
    if target.join("SKILL.md").exists() && !force {
        bail!(
            "{} already exists; pass --force to replace it",
            target.display()
        );
    }
    let library = cx.new_library();
    let held = library.lock_changes();
    std::fs::create_dir_all(&target)?;
    std::fs::write(target.join("SKILL.md"), &text)?;
    library.rescan_holding(
        &held,
        Some(
            &Attribution::new("user", format!("metaclaw skills add {}", path.display()))
                .wrote(&parsed.id, &text),
        ),
    );
    say!(
        "added {} ({}, v{}) to {}",
        parsed.name,
        parsed.category.as_str(),
        parsed.version,
        target.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `skills import`.
fn run_import(cx: &Cx, path: PathBuf, force: bool, json: bool) -> Result<ExitCode> {
    let root = expand_home(&path.to_string_lossy());
    if !root.is_dir() {
        bail!(
            "{} is not a folder: give a skill folder (holding SKILL.md) or a folder of them",
            root.display()
        );
    }
    let library = cx.new_library();
    let held = library.lock_changes();
    let items = import::import(&root, &cx.dir, force);
    if items.is_empty() {
        bail!("no SKILL.md found in or under {}", root.display());
    }
    let count = |f: fn(&import::Outcome) -> bool| items.iter().filter(|i| f(&i.outcome)).count();
    let imported = count(|o| matches!(o, import::Outcome::Imported { .. }));
    let refused = count(|o| matches!(o, import::Outcome::Refused { .. }));
    let skipped = items.len() - imported - refused;
    if imported > 0 {
        let ours = items.iter().fold(
            Attribution::new(
                "import",
                format!("metaclaw skills import {}", root.display()),
            ),
            |a, item| match &item.outcome {
                import::Outcome::Imported { name, .. } => a.skill(name),
                _ => a,
            },
        );
        library.rescan_holding(&held, Some(&ours));
    }
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "library": cx.dir, "imported": imported, "skipped": skipped,
                "refused": refused, "skills": items,
            }))?
        );
    } else {
        for item in &items {
            match &item.outcome {
                import::Outcome::Imported {
                    name,
                    files,
                    links_skipped,
                    replaced,
                    spec,
                } => {
                    let mut notes = vec![format!("from {}", item.source.display())];
                    if *files > 0 {
                        notes.push(format!("{files} bundled file(s)"));
                    }
                    if *links_skipped > 0 {
                        notes.push(format!("{links_skipped} symbolic link(s) not followed"));
                    }
                    if *replaced {
                        notes.push("replaced the library's".into());
                    }
                    if metaclaw_core::skills::spec::refused(spec) {
                        notes.push(format!(
                            "as it came, an agent applying the Agent Skills spec would refuse it: {}",
                            spec_summary(spec)
                        ));
                    }
                    say!("imported  {name}  ({})", notes.join("; "));
                }
                import::Outcome::Skipped { name, why } => say!("skipped   {name}  ({why})"),
                import::Outcome::Refused { why } => {
                    say!("refused   {}: {why}", item.source.display())
                }
            }
        }
        say!(
            "{imported} imported, {skipped} skipped, {refused} refused ({})",
            cx.dir.display()
        );
    }
    // Failure only when nothing could come in because of bad skills;
    // skips alone (a second import of the same folder) are success.
    if imported == 0 && refused > 0 {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills check`.
fn run_check(cx: &Cx, path: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    check(
        path.map_or(cx.dir.clone(), |p| expand_home(&p.to_string_lossy())),
        json,
    )
}

/// `skills export`.
fn run_export(
    cx: &Cx,
    to: String,
    names: Vec<String>,
    agent: Option<AgentId>,
    sync: bool,
    dry_run: bool,
    json: bool,
) -> Result<ExitCode> {
    let agent = agent.unwrap_or_default();
    let target = metaclaw_core::skills::export::Target::parse(&to);
    let Some(home) = std::env::var_os("HOME") else {
        bail!("HOME is not set: give --to a folder");
    };
    let into = target.dir(Path::new(&home), |name| std::env::var_os(name));
    let library = cx.open_library();
    let snapshot = library.snapshot();
    let conn = cx.db.side_writer()?;
    let visible: Vec<_> = snapshot
        .skills
        .iter()
        .filter(|s| snapshot.visible_to(&s.id, &agent))
        .cloned()
        .collect();
    let export = metaclaw_core::skills::export::Export {
        library_dir: &cx.dir,
        skills: &visible,
        held: &|s: &metaclaw_core::skills::skill::Skill| cx.hold(s),
        only: &names,
        dir: &into,
        sync,
        dry_run,
    };
    let done = metaclaw_core::skills::export::export(&export, &conn)?;
    if json {
        say!("{}", serde_json::to_string_pretty(&done)?);
    } else {
        let would = if dry_run { "would be " } else { "" };
        say!(
            "{}: {} {would}written, {} {would}updated, {} unchanged, {} {would}removed, {} kept, {} skipped",
            done.dir.display(),
            done.written.len(),
            done.updated.len(),
            done.unchanged.len(),
            done.removed.len(),
            done.kept.len(),
            done.skipped.len()
        );
        for (name, why) in done.kept.iter().chain(&done.skipped) {
            say!("  {name}: {why}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills remove`.
fn run_remove(cx: &Cx, name: String) -> Result<ExitCode> {
    if !metaclaw_core::skills::layer::valid_id(&name)
        || !cx.dir.join(&name).join("SKILL.md").exists()
    {
        bail!("no skill {name:?} in {}", cx.dir.display());
    }
    let library = cx.new_library();
    let held = library.lock_changes();
    std::fs::remove_dir_all(cx.dir.join(&name))?;
    library.rescan_holding(
        &held,
        Some(&Attribution::new("user", "metaclaw skills remove").skill(&name)),
    );
    say!("removed {name}");
    Ok(ExitCode::SUCCESS)
}

/// The agent whose own layer skill `id` is in (`skills list --json`).
fn layer_agent(id: &str) -> Option<String> {
    metaclaw_core::skills::layer::split(id)
        .0
        .agent()
        .map(|a| a.to_string())
}

/// The team whose layer (or whose agent's) skill `id` is in.
fn layer_team(id: &str) -> Option<String> {
    metaclaw_core::skills::layer::split(id)
        .0
        .team()
        .map(str::to_string)
}

/// `skills share`: a skill moves one layer out (a team's agent's into its
/// team's layer; a team's or a plain agent's into the shared library).
fn run_share(cx: &Cx, id: String) -> Result<ExitCode> {
    use metaclaw_core::skills::layer::Owner;
    let (owner, name) = metaclaw_core::skills::layer::split(&id);
    let Some(outer) = owner.outer() else {
        bail!(
            "{id} is shared already; an agent's skill is @AGENT/NAME, a team's +TEAM/NAME, a team agent's +TEAM/@AGENT/NAME (see `metaclaw skills list`)"
        );
    };
    let library = cx.open_library();
    let held = library.lock_changes();
    let snapshot = library.rescan_holding(&held, None);
    if snapshot.get(&id).is_none() {
        let hint = match owner.agent() {
            Some(agent) => format!(" (see `metaclaw skills list --agent {agent}`)"),
            None => " (see `metaclaw skills list`)".to_string(),
        };
        bail!("no skill {id} in {}{hint}", cx.dir.display());
    }
    let to = outer.id_of(name);
    if snapshot.get(&to).is_some() {
        let (exists, who) = match &outer {
            Owner::Team(team) => (
                format!("team {team}'s skill {to} exists"),
                format!("every agent of team {team}"),
            ),
            _ => (
                format!("a shared skill {name} exists"),
                "every agent".to_string(),
            ),
        };
        bail!(
            "{exists}: sharing {id} would change it for {who}; edit that one, or share this one under another name (rename its folder and its name)"
        );
    }
    let target = cx.dir.join(&to);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::rename(cx.dir.join(&id), &target).with_context(|| {
        format!(
            "moving {} to {}",
            cx.dir.join(&id).display(),
            target.display()
        )
    })?;
    let text = std::fs::read(target.join("SKILL.md")).unwrap_or_default();
    library.rescan_holding(
        &held,
        Some(
            &Attribution::new("user", format!("shared from {owner}"))
                .wrote(&to, &text)
                .skill(&id),
        ),
    );
    let who = match &outer {
        Owner::Team(team) => format!("every agent of team {team}"),
        _ => "every agent".to_string(),
    };
    say!("{id} is shared now as {to}: the turns of {who} may get it");
    Ok(ExitCode::SUCCESS)
}

/// `skills restore`.
fn run_restore(cx: &Cx, name: String) -> Result<ExitCode> {
    let library = cx.open_library();
    let snapshot = library.snapshot();
    let Some(found) = snapshot.get(&name) else {
        bail!(
            "no skill {name:?} in {} (see `metaclaw skills list`)",
            cx.dir.display()
        );
    };
    let Some(why) = &found.retired else {
        bail!("{name} is not retired: retrieval already uses it");
    };
    let why = why.clone();
    let held = library.lock_changes();
    if let Some(refused) = metaclaw_core::learn::retire::set_retired(&cx.dir, found, None)? {
        bail!("{name} was not restored: {refused}; try again");
    }
    library.rescan_holding(
        &held,
        Some(&Attribution::new("user", metaclaw_core::learn::retire::RESTORED).skill(&name)),
    );
    say!("restored {name} (it was retired: {why}); this version will not be retired again");
    Ok(ExitCode::SUCCESS)
}

/// `skills history`.
fn run_history(cx: &Cx, name: String, json: bool) -> Result<ExitCode> {
    let conn = cx.db.side_writer()?;
    let changes = history(&conn, &name)?;
    if changes.is_empty() {
        bail!("no recorded history for {name:?}");
    }
    if json {
        say!("{}", serde_json::to_string_pretty(&changes)?);
    } else {
        for c in changes {
            say!(
                "{}  generation {:<4} {:<8} v{:<8} {} ({}){}",
                local_time(c.at_ms),
                c.generation,
                c.change,
                c.version.as_deref().unwrap_or("-"),
                c.who,
                c.why,
                c.content_hash
                    .map(|h| format!("  sha256 {}", &h[..12]))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills install-builtin`.
fn run_install_builtin(cx: &Cx) -> Result<ExitCode> {
    let report = builtin::install_recorded(
        &cx.dir,
        &cx.db,
        "metaclaw skills install-builtin",
        builtin::Missing::All,
    )?;
    say!(
        "{} added, {} updated, {} already current, {} kept as you edited them ({})",
        report.added.len(),
        report.updated.len(),
        report.unchanged.len(),
        report.kept.len(),
        cx.dir.display()
    );
    for name in &report.kept {
        say!("  kept your version of {name}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills review`.
fn run_review(cx: &Cx, action: Option<ReviewAction>, json: bool) -> Result<ExitCode> {
    match action {
        None => {
            let pending = review::pending(&cx.db, &cx.dir)?;
            if json {
                say!("{}", serde_json::to_string_pretty(&pending)?);
            } else if pending.is_empty() {
                say!("no skill revisions are waiting for review");
            } else {
                for p in &pending {
                    say!(
                        "revision {}: {} v{} → v{}, learned from session {}, {}",
                        p.id,
                        p.skill,
                        p.from_version.as_deref().unwrap_or("?"),
                        p.to_version.as_deref().unwrap_or("?"),
                        p.session,
                        local_time(p.at_ms)
                    );
                    if let Some(stale) = &p.stale {
                        say!("  cannot be accepted: {stale}");
                    }
                    say_raw!("{}", p.diff);
                    say!(
                        "  metaclaw skills review accept {0}  |  metaclaw skills review reject {0} [--reason TEXT]\n",
                        p.id
                    );
                }
            }
        }
        Some(ReviewAction::Accept { id }) => {
            let row = review::accept(&cx.db, &cx.dir, id)?;
            say!(
                "accepted revision {id}: {} is now v{} ({})",
                row.skill_id.as_deref().unwrap_or(&row.name),
                row.version.as_deref().unwrap_or("?"),
                cx.dir
                    .join(row.skill_id.as_deref().unwrap_or(&row.name))
                    .join("SKILL.md")
                    .display()
            );
        }
        Some(ReviewAction::Reject { id, reason }) => {
            let row = review::reject(&cx.db, id, reason.as_deref())?;
            say!(
                "rejected revision {id} of {} (v{}, from session {})",
                row.skill_id.as_deref().unwrap_or(&row.name),
                row.version.as_deref().unwrap_or("?"),
                row.session_id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
