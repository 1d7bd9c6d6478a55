//! `metaclaw plugins list | inspect | add | remove | lock | verify | call`.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{PluginsCommand, load_config, runtime};
use metaclaw_core::admin::AdminClient;
use metaclaw_core::config::LoadedConfig;
use metaclaw_core::digest::sha256_hex;
use metaclaw_core::home::Home;
use metaclaw_core::plugins::pinning::{self, Choice};
use metaclaw_core::plugins::{
    ArtifactState, BuiltinSource, HostSettings, Kind, LoadedPlugin, LockFile, PluginHost,
    PluginInfo, PluginView, Registry, RegistryView, Source, Trust, artifact_limit, files, types,
    view,
};

fn local_host(home: &Home, config: &LoadedConfig, ignore_lock: bool) -> Result<Arc<PluginHost>> {
    let mut settings = HostSettings::from_config(&config.config, home);
    if ignore_lock {
        settings.lock_path = home.root.join(".no-lock-for-this-scan");
    }
    PluginHost::new(settings, None)
}

pub fn run(home: &Home, config_path: &Path, command: PluginsCommand) -> Result<ExitCode> {
    let config = load_config(config_path)?;
    match command {
        PluginsCommand::List { json } => list(home, &config, json),
        PluginsCommand::Inspect { file, json } => inspect(home, &config, &file, json),
        PluginsCommand::Add { file, force } => add(home, &config, &file, force),
        PluginsCommand::Remove { spec } => remove(home, &config, &spec),
        PluginsCommand::Lock { pins, overrides } => lock(home, &config, Choice { pins, overrides }),
        PluginsCommand::Verify => verify(home, &config),
        PluginsCommand::Call { spec, input } => call(home, &config, &spec, &input),
    }
}

fn list(home: &Home, config: &LoadedConfig, json: bool) -> Result<ExitCode> {
    // A running daemon knows live status (calls, failures, disabled).
    // Without one (or one that does not answer), the plugins as loaded here.
    let live = AdminClient::connect(home).ok().and_then(|admin| {
        let view = runtime().ok()?.block_on(admin.get_json("/admin/plugins"));
        serde_json::from_value::<RegistryView>(view.ok()?).ok()
    });
    let view = match live {
        Some(v) => v,
        None => {
            let host = local_host(home, config, false)?;
            let registry = host.reload();
            view(&registry)
        }
    };
    if json {
        say!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    if view.loading {
        // Right after `start`: an empty or short list is not the answer yet.
        say!(
            "the plugins are still loading (metaclaw has just started{}): run `metaclaw plugins list` again in a moment",
            if view.plugins.is_empty() {
                ""
            } else {
                "; the first-party ones below are loaded, the drop-ins are not yet"
            }
        );
    } else if view.plugins.is_empty() {
        say!("no plugins loaded");
    }
    if !view.plugins.is_empty() {
        print_table(&view.plugins);
    }
    if view.total_memory_limit > 0 {
        say!(
            "memory: {:.1} of {} MiB (plugins.total_memory_mb: every instance and every plugin's compiled code)",
            view.total_memory as f64 / f64::from(1 << 20),
            view.total_memory_limit >> 20
        );
    }
    if view.locked {
        say!("(pinned by {})", home.plugin_lock_file().display());
    }
    for problem in &view.problems {
        say!("problem: {}: {}", problem.path.display(), problem.error);
    }
    for notice in &view.notices {
        say!("notice:  {}: {}", notice.path.display(), notice.error);
    }
    Ok(ExitCode::SUCCESS)
}

/// The plugins as a table: one row each, with what it is granted and how
/// it is doing.
fn print_table(plugins: &[PluginView]) {
    say!(
        "{:<14} {:<9} {:<9} {:<13} {:<8} {:<12} {}",
        "NAME",
        "VERSION",
        "KIND",
        "SHA256",
        "SOURCE",
        "GRANTED",
        "STATUS"
    );
    for p in plugins {
        let granted = if p.granted.is_empty() {
            "-".to_string()
        } else {
            p.granted.join(",")
        };
        // Legal but slow: left out of turns by plugins.turn_budget.
        let status = match p.turn_cuts {
            0 => p.status.clone(),
            n => format!("{} (cut from {n} turns by plugins.turn_budget)", p.status),
        };
        say!(
            "{:<14} {:<9} {:<9} {:<13} {:<8} {:<12} {}",
            p.name,
            p.version,
            p.kind,
            &p.sha256[..12.min(p.sha256.len())],
            p.source,
            granted,
            status
        );
    }
}

/// Loads one file the way the host would (size, compile, check, metadata
/// under the load deadline), with what the deployment would grant it as a
/// drop-in, and the grants written for its name that would not apply.
fn load_file(host: &PluginHost, home: &Home, file: &Path) -> Result<(LoadedPlugin, Vec<String>)> {
    let settings = &host.settings;
    let bytes = files::read_named(file, settings.max_file_bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let sha = sha256_hex(&bytes);
    let probed = LoadedPlugin::probe(
        &host.engine,
        file.to_path_buf(),
        &bytes,
        sha,
        Source::User,
        &|kind| settings.limits_for(kind),
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let lock = LockFile::read(&home.plugin_lock_file()).ok().flatten();
    let (grants, notes) = settings.trust.grants_for(&probed.info, lock.as_ref());
    Ok((probed.ready(grants, None), notes))
}

fn inspect(home: &Home, config: &LoadedConfig, file: &Path, json: bool) -> Result<ExitCode> {
    let host = local_host(home, config, true)?;
    let (plugin, notes) = load_file(&host, home, file)?;
    let info = &plugin.info;
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "name": info.name, "version": info.version.to_string(), "kind": info.kind,
                "world": format!("metaclaw:plugin/{}", info.kind.as_str()), "package": info.package,
                "description": info.description, "asks": info.asks, "granted": plugin.grants().names(),
                "not_granted": notes, "imports": info.imports, "sha256": info.sha256, "size": info.size,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    say!("{} {} ({})", info.name, info.version, info.description);
    say!(
        "  world:    metaclaw:plugin/{} (built against {})",
        info.kind.as_str(),
        info.package
    );
    say!("  sha256:   {}", info.sha256);
    say!("  size:     {} bytes", info.size);
    say!(
        "  asks for: {}",
        if info.asks.is_empty() {
            "nothing".into()
        } else {
            info.asks.join(", ")
        }
    );
    let granted = plugin.grants().names();
    say!(
        "  granted:  {}",
        if granted.is_empty() {
            format!(
                "nothing (plugins.grants.\"{}@sha256:{}\" in the config)",
                info.name, info.sha256
            )
        } else {
            granted.join(", ")
        }
    );
    for note in &notes {
        say!("  note:     {note}");
    }
    let host_imports: Vec<&String> = info
        .imports
        .iter()
        .filter(|i| i.starts_with("metaclaw:"))
        .collect();
    let wasi = info
        .imports
        .iter()
        .filter(|i| i.starts_with("wasi:"))
        .count();
    say!(
        "  imports:  {}{}",
        host_imports
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        if wasi > 0 {
            format!(" and {wasi} WASI interfaces (denied unless granted)")
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn add(home: &Home, config: &LoadedConfig, file: &Path, force: bool) -> Result<ExitCode> {
    let host = local_host(home, config, true)?;
    let registry = host.reload();
    let (plugin, _) = load_file(&host, home, file)?;
    let lock = LockFile::read(&home.plugin_lock_file()).ok().flatten();
    // What the daemon would refuse, refused here with the same words.
    if let Err(e) =
        host.settings
            .trust
            .may_use_name(&plugin.info, lock.as_ref(), &registry.reserved)
    {
        bail!("{}: {e}", file.display());
    }
    let settings = &host.settings;
    std::fs::create_dir_all(&settings.user_dir)
        .with_context(|| format!("cannot create {}", settings.user_dir.display()))?;
    let dest = settings
        .user_dir
        .join(format!("{}-{}.wasm", plugin.info.name, plugin.info.version));
    // Two files claiming one name are both refused by the daemon.
    if let Some(other) = registry.plugins.iter().find(|p| {
        p.info.name == plugin.info.name && p.info.source == Source::User && p.info.path != dest
    }) {
        bail!(
            "{} is already in the plugins folder as {}: two files claiming one name are both refused. Remove it first (`metaclaw plugins remove {}`)",
            other.label(),
            other.info.path.display(),
            other.label()
        );
    }
    if let Ok(existing) = files::read_named(&dest, settings.max_file_bytes) {
        if sha256_hex(&existing) == plugin.info.sha256 {
            say!(
                "{} is already installed ({})",
                plugin.label(),
                dest.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if !force {
            bail!(
                "{} holds a different build of {}; pass --force to replace it",
                dest.display(),
                plugin.label()
            );
        }
    }
    let bytes =
        files::read_named(file, settings.max_file_bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
    metaclaw_core::home::write_private(&dest, &bytes)?;
    say!(
        "added {} ({}) as {}",
        plugin.label(),
        plugin.info.kind.as_str(),
        dest.display()
    );
    if home.plugin_lock_file().exists() {
        say!(
            "note: metaclaw.lock exists and does not pin this file yet: run `metaclaw plugins lock` to allow it"
        );
    }
    if home.running()?.is_some() {
        say!("the running metaclaw picks it up within a few seconds");
    }
    Ok(ExitCode::SUCCESS)
}

fn remove(home: &Home, config: &LoadedConfig, spec: &str) -> Result<ExitCode> {
    let (name, version) = match spec.split_once('@') {
        Some((n, v)) => (
            n,
            Some(semver::Version::parse(v).with_context(|| format!("{v:?} is not a version"))?),
        ),
        None => (spec, None),
    };
    let host = local_host(home, config, true)?;
    let registry = host.reload();
    let matching: Vec<&Arc<LoadedPlugin>> = registry
        .plugins
        .iter()
        .filter(|p| p.info.name == name && version.as_ref().is_none_or(|v| *v == p.info.version))
        .collect();
    if matching.is_empty() {
        bail!("no installed plugin {spec} (see `metaclaw plugins list`)");
    }
    let mut removed = 0;
    for p in matching {
        if !p.info.path.starts_with(&host.settings.user_dir) {
            say!(
                "{} is a first-party plugin ({}); to stop using it set plugins.builtin: false or choose the role's plugins in the config",
                p.label(),
                p.info.path.display()
            );
            continue;
        }
        std::fs::remove_file(&p.info.path)
            .with_context(|| format!("cannot remove {}", p.info.path.display()))?;
        say!("removed {} ({})", p.label(), p.info.path.display());
        removed += 1;
    }
    Ok(if removed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn lock(home: &Home, config: &LoadedConfig, choice: Choice) -> Result<ExitCode> {
    let mut settings = HostSettings::from_config(&config.config, home);
    settings.lock_path = home.root.join(".no-lock-for-this-scan");
    settings.pinning = true;
    settings
        .trust
        .allow_overrides_for_pinning(choice.override_names());
    let host = PluginHost::new(settings, None)?;
    let registry = host.reload();
    for problem in &registry.problems {
        say!("skipped {}: {}", problem.path.display(), problem.error);
    }
    for notice in &registry.notices {
        say!("note: {}: {}", notice.path.display(), notice.error);
    }
    let path = home.plugin_lock_file();
    // The lock being replaced: its pins under a granted name stand. One
    // that cannot be read confirms nothing.
    let current = match LockFile::read(&path) {
        Ok(lock) => lock,
        Err(e) => {
            say!("note: {e:#}; it is replaced, and confirms no pin");
            None
        }
    };
    // The embedded first-party plugins are the binary itself: pinning them
    // would only make the next upgrade refuse them.
    let files: Vec<&PluginInfo> = registry
        .plugins
        .iter()
        .map(|p| &p.info)
        .filter(|info| !info.embedded())
        .collect();
    let plan = pinning::plan(
        &files,
        &choice,
        &host.settings.trust,
        &registry.reserved,
        current.as_ref(),
    )
    .map_err(|errors| {
        anyhow::anyhow!(
            "{} was not written: which file to trust is yours to say\n  - {}",
            path.display(),
            errors.join("\n  - ")
        )
    })?;
    for left in &plan.left_out {
        say!("left out {left}");
    }
    let lock = plan.lock;
    home.ensure()?;
    lock.write(&path)?;
    print_pinned(&lock, &host.settings.trust);
    let embedded = registry
        .plugins
        .iter()
        .filter(|p| p.info.embedded())
        .count();
    say!(
        "wrote {} ({} plugins; the {embedded} first-party plugins compiled into metaclaw {} are not pinned: they change only with the binary)",
        path.display(),
        lock.plugins.len(),
        env!("CARGO_PKG_VERSION")
    );
    Ok(ExitCode::SUCCESS)
}

/// One line for each plugin the new lock pins, with what replacing a
/// first-party plugin or a grant by name gives it.
fn print_pinned(lock: &LockFile, trust: &Trust) {
    for e in &lock.plugins {
        let granted = trust.granted_by_name(&e.name);
        say!(
            "pinned {}@{} ({}) sha256 {}{}{}",
            e.name,
            e.version,
            e.kind,
            e.sha256,
            if e.first_party_override {
                " (replaces the first-party plugin)"
            } else {
                ""
            },
            granted
                .map(|g| format!(" (granted {} by name)", g.names().join(", ")))
                .unwrap_or_default()
        );
    }
}

/// `plugins verify`: the lock against the files, the cache and the scan;
/// one line per problem, and failure if there is any.
fn verify(home: &Home, config: &LoadedConfig) -> Result<ExitCode> {
    let path = home.plugin_lock_file();
    let Some(lock) = LockFile::read(&path)? else {
        bail!(
            "no lock file at {}: run `metaclaw plugins lock` first",
            path.display()
        );
    };
    let host = local_host(home, config, true)?;
    let mut bad = ambiguous_pins(&host, &lock) + refused_artifacts(&host, &lock);
    let registry = host.reload();
    bad += pins_not_loaded(&registry, &lock) + unpinned(&registry, &lock);
    for problem in &registry.problems {
        say!("BROKEN   {}: {}", problem.path.display(), problem.error);
        bad += 1;
    }
    if bad == 0 {
        say!(
            "ok: {} plugins match {}",
            lock.plugins.len(),
            path.display()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        say!("{bad} problem(s) against {}", path.display());
        Ok(ExitCode::FAILURE)
    }
}

/// Names the lock pins more than one file under (each is refused to every
/// file a grant names it by); how many.
fn ambiguous_pins(host: &PluginHost, lock: &LockFile) -> usize {
    let mut bad = 0;
    let names: std::collections::BTreeSet<&str> =
        lock.plugins.iter().map(|e| e.name.as_str()).collect();
    for name in names {
        if let Some(why) = host.settings.trust.ambiguous_pin(name, lock) {
            say!("AMBIGUOUS {why}");
            bad += 1;
        }
    }
    bad
}

/// Compiled code in the cache that does not verify, for the pinned files
/// and the embedded plugins: each is reported and deleted; how many.
fn refused_artifacts(host: &PluginHost, lock: &LockFile) -> usize {
    let mut bad = 0;
    // Compiled code is what actually runs: an artifact that does not verify
    // is reported (and deleted) before loading would recompile it quietly.
    // The embedded plugins' compiled code is checked too: it runs as much
    // as a pinned file's does.
    if let Some(cache) = host.engine.cache() {
        let embedded: &[_] = if host.settings.builtin == BuiltinSource::Embedded {
            metaclaw_core::plugins::embedded::EMBEDDED
        } else {
            &[]
        };
        let embedded = embedded.iter().map(|p| {
            (
                p.name.to_string(),
                p.version.to_string(),
                p.sha256.to_string(),
            )
        });
        let pinned = lock
            .plugins
            .iter()
            .map(|e| (e.name.clone(), e.version.clone(), e.sha256.clone()));
        for (name, version, sha256) in pinned.chain(embedded) {
            let limit = artifact_limit(host.settings.max_file_bytes as usize);
            if let ArtifactState::Refused(reason) =
                cache.verify(&sha256, &host.engine.compats(), limit)
            {
                say!(
                    "CACHE    {name}@{version}: the compiled code in the cache was refused ({reason}); deleted, it is recompiled from the pinned file"
                );
                cache.remove(&sha256);
                bad += 1;
            }
        }
    }
    bad
}

/// Lock entries no loaded plugin matches by hash: a file changed or gone
/// (an entry for a plugin now embedded is only noted); how many.
fn pins_not_loaded(registry: &Registry, lock: &LockFile) -> usize {
    let mut bad = 0;
    for entry in &lock.plugins {
        if !registry
            .plugins
            .iter()
            .any(|p| p.info.sha256 == entry.sha256)
        {
            // A lock written when the first-party plugins were files.
            if let Some(p) = registry
                .plugins
                .iter()
                .find(|p| p.info.embedded() && p.info.name == entry.name)
            {
                say!(
                    "note     {}@{}: now compiled into metaclaw ({}); this entry is ignored (`metaclaw plugins lock` drops it)",
                    entry.name,
                    entry.version,
                    p.label()
                );
                continue;
            }
            match registry
                .plugins
                .iter()
                .find(|p| p.info.name == entry.name && p.info.version.to_string() == entry.version)
            {
                Some(p) => say!(
                    "MISMATCH {}@{}: {} has sha256 {}, the lock pins {}",
                    entry.name,
                    entry.version,
                    p.info.path.display(),
                    p.info.sha256,
                    entry.sha256
                ),
                None => say!(
                    "MISSING  {}@{} (sha256 {}): no such file",
                    entry.name,
                    entry.version,
                    entry.sha256
                ),
            }
            bad += 1;
        }
    }
    bad
}

/// Loaded files the lock does not pin, by hash or by name and version;
/// how many.
fn unpinned(registry: &Registry, lock: &LockFile) -> usize {
    let mut bad = 0;
    for p in registry.plugins.iter().filter(|p| !p.info.embedded()) {
        if lock.by_hash(&p.info.sha256).is_none()
            && lock
                .by_name_version(&p.info.name, &p.info.version.to_string())
                .is_none()
        {
            say!(
                "UNPINNED {} ({}, sha256 {})",
                p.label(),
                p.info.path.display(),
                p.info.sha256
            );
            bad += 1;
        }
    }
    bad
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T> {
    serde_json::from_value(v.clone()).map_err(|e| anyhow::anyhow!("input: {e}"))
}

/// The parts of a `plugins call` input, by kind (see [`call`]): each part
/// null when absent, and read into its type on its own, so that an error
/// names what that part should be.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Input {
    skills: Value,
    context: Value,
    /// 5 unless a whole number.
    #[serde(deserialize_with = "metaclaw_wire::recorded::lenient")]
    k: Option<u64>,
    outcomes: Value,
    drafts: Value,
    library: Value,
}

impl Input {
    /// `value`'s parts; none of them when it is not an object.
    fn of(value: &Value) -> Self {
        metaclaw_wire::Obj::read(value).unwrap_or_default()
    }
}

/// Calls a plugin with JSON input (for plugin authors): a scorer takes a
/// finished turn; a retriever `{skills, context, k, outcomes}` (`outcomes`,
/// optional: what its `outcomes()` answers, by skill id); an evolver
/// `{drafts, library}`; a skill `{context}`.
fn call(home: &Home, config: &LoadedConfig, spec: &str, input: &str) -> Result<ExitCode> {
    // What the plugin logs (and why a call failed) on stderr, for its author.
    metaclaw_core::logging::init("warn,metaclaw::plugin=debug");
    let text = if input == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else if Path::new(input).is_file() {
        std::fs::read_to_string(input)?
    } else {
        input.to_string()
    };
    let value: Value = serde_json::from_str(&text).context("the input is not JSON")?;
    let (name, version) = match spec.split_once('@') {
        Some((n, v)) => (n, Some(semver::Version::parse(v)?)),
        None => (spec, None),
    };
    let host = local_host(home, config, false)?;
    let registry = host.reload();
    let Some(plugin) = registry.find(name, version.as_ref()) else {
        bail!("no loaded plugin {spec} (see `metaclaw plugins list`)");
    };
    let engine = plugin.engine().clone();
    let result = match plugin.info.kind {
        Kind::Scorer => {
            let turn: types::FinishedTurn = parse(&value)?;
            json!(engine.block_on(plugin.score(&turn))?)
        }
        Kind::Retriever => {
            let input = Input::of(&value);
            let skills: Arc<Vec<types::Skill>> = Arc::new(parse(&input.skills)?);
            let context: types::TurnContext = parse(&input.context)?;
            let k = input.k.unwrap_or(5) as u32;
            let outcomes: Option<Arc<dyn metaclaw_core::plugins::OutcomeSource>> =
                match &input.outcomes {
                    Value::Null => None,
                    given => Some(Arc::new(
                        parse::<HashMap<String, metaclaw_core::plugins::outcomes::SkillOutcome>>(given)
                            .context("outcomes: a map from skill id to {version, injected, judged, mean, sd, low, high, flagged}")?,
                    )),
                };
            json!(engine.block_on(async {
                plugin.warm(&skills, 1).await?;
                plugin.retrieve(&skills, 1, &context, k, outcomes).await
            })?)
        }
        Kind::Evolver => {
            let input = Input::of(&value);
            let drafts: Vec<types::SkillDraft> = parse(&input.drafts)?;
            let library: Vec<types::Skill> = parse(&input.library)?;
            json!(engine.block_on(plugin.process(&drafts, &library))?)
        }
        Kind::Skill => {
            let context: types::TurnContext = parse(&Input::of(&value).context)?;
            let (applies, render) = engine.block_on(async {
                Ok::<_, metaclaw_core::plugins::CallError>((
                    plugin.applies(&context).await?,
                    plugin.render(&context).await?,
                ))
            })?;
            json!({ "applies": applies, "render": render })
        }
    };
    say!("{}", serde_json::to_string_pretty(&result)?);
    Ok(ExitCode::SUCCESS)
}
