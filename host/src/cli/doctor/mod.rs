//! `metaclaw doctor`: what a working setup needs, one check at a time, each
//! `ok`, `warning` or `error` with the fix in one sentence; the exit status
//! is non-zero when any check is an error. Every check reuses the code the
//! daemon runs (config loading, the plugin host, the skill loader, the
//! wiring state, the store), so doctor and the daemon cannot disagree.
//! The upstream is only contacted with `--online`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use serde_json::{Value, json};

use super::{DoctorArgs, runtime};
use crate::claws::{self, Finding};
use crate::config::{self, ClawType, Loaded, Provider, presets};
use crate::digest::sha256_hex;
use crate::home::Home;
use crate::plugins::{FIRST_PARTY, LockFile, PluginHost, Settings, Source, files};
use crate::untrusted::log_line;

/// How long `--online` waits for the upstream (connect and answer).
const ONLINE_TIMEOUT: Duration = Duration::from_secs(5);
/// Free space under the home below which doctor warns, and errs.
const DISK_WARN: u64 = 1 << 30;
const DISK_ERROR: u64 = 100 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Verdict {
    Ok,
    /// Not checked (and why, in the message).
    Skipped,
    Warning,
    Error,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Skipped => "skipped",
            Verdict::Warning => "warning",
            Verdict::Error => "error",
        }
    }
}

#[derive(Debug, Serialize)]
struct Check {
    check: &'static str,
    verdict: Verdict,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Default)]
struct Report {
    checks: Vec<Check>,
}

impl Report {
    fn push(
        &mut self,
        check: &'static str,
        verdict: Verdict,
        message: String,
        fix: Option<String>,
    ) {
        self.checks.push(Check {
            check,
            verdict,
            message,
            fix,
        });
    }
    fn ok(&mut self, check: &'static str, message: impl Into<String>) {
        self.push(check, Verdict::Ok, message.into(), None);
    }
    fn skipped(&mut self, check: &'static str, message: impl Into<String>) {
        self.push(check, Verdict::Skipped, message.into(), None);
    }
    fn warning(&mut self, check: &'static str, message: impl Into<String>, fix: impl Into<String>) {
        self.push(check, Verdict::Warning, message.into(), Some(fix.into()));
    }
    fn error(&mut self, check: &'static str, message: impl Into<String>, fix: impl Into<String>) {
        self.push(check, Verdict::Error, message.into(), Some(fix.into()));
    }
    fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }
}

pub fn run(home: &Home, config_path: &Path, args: DoctorArgs) -> Result<ExitCode> {
    let mut report = Report::default();
    let loaded = check_config(&mut report, config_path);
    check_home(&mut report, home);
    check_disk(&mut report, home);
    match &loaded {
        Some(loaded) => {
            let upstream_set = check_upstream_settings(&mut report, loaded);
            match (args.online, upstream_set) {
                (true, true) => check_upstream_online(&mut report, loaded)?,
                (true, false) => report.skipped(
                    "online",
                    "not contacted: the upstream settings above are not complete",
                ),
                (false, _) => report.skipped(
                    "online",
                    "not contacted (`metaclaw doctor --online` sends one small request with the key)",
                ),
            }
            check_store(&mut report, home, loaded);
            check_port(&mut report, home, loaded)?;
            let plugins = check_plugins(&mut report, home, loaded);
            check_retrieval(&mut report, plugins.as_deref(), loaded);
            check_evolution(&mut report, plugins.as_deref(), loaded);
            check_skills(&mut report, home, loaded);
            check_wiring(&mut report, home, loaded);
        }
        None => report.skipped(
            "other checks",
            "upstream, store, port, plugins, skills and wiring need a valid config",
        ),
    }
    print(&report, home, config_path, args.json)?;
    Ok(if report.count(Verdict::Error) > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print(report: &Report, home: &Home, config_path: &Path, json: bool) -> Result<()> {
    let (errors, warnings) = (report.count(Verdict::Error), report.count(Verdict::Warning));
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "home": home.root,
                "config": config_path,
                "checks": report.checks,
                "errors": errors,
                "warnings": warnings,
                "ok": errors == 0,
            }))?
        );
        return Ok(());
    }
    say!(
        "metaclaw doctor: home {}, config {}",
        home.root.display(),
        config_path.display()
    );
    let width = report
        .checks
        .iter()
        .map(|c| c.check.len())
        .max()
        .unwrap_or(0);
    for c in &report.checks {
        say!(
            "{:<8} {:<width$}  {}",
            c.verdict.label(),
            c.check,
            c.message
        );
        if let Some(fix) = &c.fix {
            say!("{:<8} {:<width$}  fix: {fix}", "", "");
        }
    }
    match (errors, warnings) {
        (0, 0) => say!("all good"),
        (0, w) => say!("{w} warning(s); metaclaw can run"),
        (e, w) => {
            say!("{e} error(s), {w} warning(s): fix the errors, then run `metaclaw doctor` again")
        }
    }
    Ok(())
}

fn check_config(report: &mut Report, path: &Path) -> Option<Loaded> {
    match config::load(path) {
        Err(e) => {
            let shown = path.display().to_string();
            let message = e.to_string();
            let message = if message.contains(&shown) {
                message
            } else {
                format!("{shown}: {message}")
            };
            report.error(
                "config",
                message,
                format!(
                    "edit {shown}, or set the value with `metaclaw config set KEY VALUE` (it checks values before writing)"
                ),
            );
            None
        }
        Ok(loaded) => {
            if !loaded.file_exists {
                report.warning(
                    "config",
                    format!(
                        "{} does not exist: every value is a default",
                        path.display()
                    ),
                    "run `metaclaw setup` to choose the upstream, key and agent",
                );
            } else if loaded.warnings.is_empty() {
                report.ok("config", format!("{} is valid", path.display()));
            } else {
                report.warning(
                    "config",
                    format!("{}: {}", path.display(), loaded.warnings.join("; ")),
                    "correct or remove the keys named (`metaclaw config show` prints what is in effect)",
                );
            }
            Some(loaded)
        }
    }
}

/// The upstream's base URL, model and key source, without contacting it.
/// `false` when there is nothing to contact.
fn check_upstream_settings(report: &mut Report, loaded: &Loaded) -> bool {
    let config = &loaded.config;
    let llm = &config.llm;
    let provider = super::setup::config_name(&llm.provider);
    if let Some(reason) = presets::unsupported_reason(&llm.provider) {
        report.error(
            "upstream",
            format!("llm.provider {provider}: {reason}"),
            "choose an API provider with `metaclaw setup --provider …`",
        );
        return false;
    }
    let base = loaded.api_base();
    if base.is_empty() {
        report.error(
            "upstream",
            "no upstream: llm.api_base is empty and llm.provider has no preset",
            "run `metaclaw setup --provider openai --api-key-env OPENAI_API_KEY`, or `metaclaw config set llm.api_base https://…/v1`",
        );
        return false;
    }
    let origin = if llm.api_base.trim().is_empty() {
        format!(" (preset {provider})")
    } else {
        String::new()
    };
    let key_var = llm.api_key_env.as_deref().filter(|v| !v.is_empty());
    let key = match (
        &llm.api_key,
        loaded.secret_sources.get("llm.api_key"),
        key_var,
    ) {
        (Some(_), Some(var), _) => format!("key from ${var}"),
        (Some(_), None, _) => "key stored in the config file".to_string(),
        (None, _, Some(var)) => {
            report.error(
                "upstream",
                format!("llm.api_key_env names {var}, which is not set (or is empty) here"),
                format!("export {var}=<your key> in the shell that runs `metaclaw start`"),
            );
            return false;
        }
        (None, _, None) if config.proxy.api_key.is_some() => {
            report.warning(
                "upstream",
                format!("{base}{origin}: no key configured, and proxy.api_key stops the agent's own key from being passed on"),
                "set the upstream's key with `metaclaw setup --api-key-env VAR`",
            );
            return true;
        }
        (None, _, None) => "no key: the agent's own key is passed on".to_string(),
    };
    if llm.model_id.trim().is_empty() {
        report.warning(
            "upstream",
            format!("{base}{origin}, {key}; llm.model_id is empty: requests must name their model, and no agent can be wired"),
            "`metaclaw config set llm.model_id <model id>`",
        );
    } else {
        report.ok(
            "upstream",
            format!("{base}{origin}, model {}, {key}", llm.model_id.trim()),
        );
    }
    true
}

/// One small request with the key: `GET /models` (OpenRouter lists its
/// models to anyone, so there it is `GET /key`, which needs a valid one).
fn check_upstream_online(report: &mut Report, loaded: &Loaded) -> Result<()> {
    let base = loaded.api_base();
    let upstream = match crate::proxy::upstream::Upstream::new(loaded, base.clone()) {
        Ok(u) => u,
        Err(e) => {
            match e.downcast_ref::<crate::http::ClientError>() {
                Some(crate::http::ClientError::NoCaCertificates { problem, fix }) => {
                    report.error("online", problem.clone(), fix.clone());
                }
                _ => report.error(
                    "online",
                    format!("{e:#}"),
                    "correct the key (`metaclaw setup --api-key-env VAR`)",
                ),
            }
            return Ok(());
        }
    };
    let path = if loaded.config.llm.provider == Provider::Openrouter {
        "/key"
    } else {
        "/models"
    };
    let answer = runtime()?.block_on(async {
        tokio::time::timeout(ONLINE_TIMEOUT, async {
            let response = upstream.get_within(path, ONLINE_TIMEOUT).await?;
            let status = response.status();
            let body = response.bytes().await.unwrap_or_default();
            Ok::<_, crate::error::ApiError>((status, body))
        })
        .await
    });
    let url = format!("{base}{path}");
    let key_configured = loaded.config.llm.api_key.is_some();
    let (status, body) = match answer {
        Err(_) | Ok(Err(crate::error::ApiError::UpstreamTimeout { .. })) => {
            report.error(
                "online",
                format!(
                    "{url} did not answer within {} s",
                    ONLINE_TIMEOUT.as_secs()
                ),
                "check llm.api_base and the network between here and the upstream (a proxy or firewall?)",
            );
            return Ok(());
        }
        Ok(Err(e)) => {
            report.error(
                "online",
                log_line(&e.to_string(), 300),
                "check llm.api_base (`metaclaw config get llm.api_base`) and that the upstream is up",
            );
            return Ok(());
        }
        Ok(Ok(answer)) => answer,
    };
    let detail = error_detail(&body);
    match status.as_u16() {
        200..=299 => {
            let listed = model_listed(&body, loaded.config.llm.model_id.trim());
            match (path, listed) {
                ("/models", Some(false)) => report.warning(
                    "online",
                    format!(
                        "{url} answered {status} with the key, but does not list model {}",
                        loaded.config.llm.model_id.trim()
                    ),
                    format!(
                        "pick a model the upstream lists (GET {url}) and `metaclaw config set llm.model_id ID`"
                    ),
                ),
                _ => report.ok(
                    "online",
                    format!(
                        "{url} answered {status}{}",
                        if key_configured { " with the key" } else { "" }
                    ),
                ),
            }
        }
        401 | 403 if key_configured => report.error(
            "online",
            format!("{url} refused the key: {status}{detail}"),
            match loaded.secret_sources.get("llm.api_key") {
                Some(var) => format!("put a valid key for this upstream in ${var}"),
                None => "put a valid key for this upstream in llm.api_key, or better an environment variable (`metaclaw setup --api-key-env VAR`)".to_string(),
            },
        ),
        401 | 403 => report.warning(
            "online",
            format!("{url} wants a key: {status}{detail}; none is configured, so only the agent's own key can work"),
            "give metaclaw the key with `metaclaw setup --api-key-env VAR`",
        ),
        404 => report.warning(
            "online",
            format!("{url} answered {status}: the upstream is reachable, but the key was not checked"),
            "check llm.api_base: it is the API's base URL, which usually ends in /v1",
        ),
        _ => report.error(
            "online",
            format!("{url} answered {status}{detail}"),
            "check llm.api_base and the provider's status page",
        ),
    }
    Ok(())
}

/// `: message` from an OpenAI- or Anthropic-style error body, if any.
fn error_detail(body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let message = value["error"]["message"]
        .as_str()
        .or_else(|| value["message"].as_str());
    match message {
        Some(m) => format!(" ({})", log_line(m, 200)),
        None => String::new(),
    }
}

/// Whether a model list (`{"data": [{"id": …}]}`) names `model`; `None`
/// when the body is not such a list or no model is configured.
fn model_listed(body: &[u8], model: &str) -> Option<bool> {
    if model.is_empty() {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let ids: Vec<&str> = value["data"]
        .as_array()?
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    if ids.is_empty() {
        return None;
    }
    Some(ids.contains(&model))
}

/// Creates and removes a file in `dir`: what writing there needs.
fn probe_dir(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(format!(".metaclaw-doctor-{}", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(b"ok"));
    let removed = fs::remove_file(&path);
    written.and(removed)
}

/// `path` does not exist (or a folder above it is a file).
fn is_missing(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// The nearest folder of `path` (itself included) that exists: where a
/// missing home would be created.
fn existing_ancestor(path: &Path) -> Option<&Path> {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && fs::symlink_metadata(p).is_ok())
}

/// Whether the missing `path` could be created: the nearest folder above
/// it takes a new file. `Err` says why not.
fn creatable(path: &Path) -> Result<(), String> {
    let Some(parent) = existing_ancestor(path) else {
        return Err(format!(
            "{} cannot be created: no folder above it exists",
            path.display()
        ));
    };
    let usable = if parent.is_dir() {
        probe_dir(parent).map_err(|e| e.to_string())
    } else {
        Err("it is not a folder".to_string())
    };
    usable.map_err(|why| {
        format!(
            "{} cannot be created: {}: {why}",
            path.display(),
            parent.display()
        )
    })
}

fn check_home(report: &mut Report, home: &Home) {
    let root = &home.root;
    let fix_folder = "set METACLAW_HOME to a folder you can write (or move what is there away)";
    match fs::metadata(root) {
        Ok(meta) if !meta.is_dir() => {
            report.error("home", format!("{} is not a folder", root.display()), fix_folder);
        }
        Ok(meta) => match probe_dir(root) {
            Err(e) => report.error(
                "home",
                format!("{} cannot be written: {e}", root.display()),
                format!(
                    "give your user write access (`chmod u+w {}`), or {fix_folder}",
                    root.display()
                ),
            ),
            Ok(()) if meta.permissions().mode() & 0o077 != 0 => report.warning(
                "home",
                format!(
                    "{} is writable, and readable by other users (mode {:o}); it holds conversations and keys",
                    root.display(),
                    meta.permissions().mode() & 0o777
                ),
                format!("`chmod 700 {}`", root.display()),
            ),
            Ok(()) => report.ok("home", format!("{} is writable", root.display())),
        },
        // `start` (and `setup`) create it.
        Err(e) if is_missing(&e) => match creatable(root) {
            Ok(()) => report.ok(
                "home",
                format!(
                    "{} does not exist yet; `metaclaw start` creates it",
                    root.display()
                ),
            ),
            Err(why) => report.error("home", why, fix_folder),
        },
        Err(e) => report.error("home", format!("{}: {e}", root.display()), fix_folder),
    }
}

/// The verdict for `free` bytes available.
fn disk_verdict(free: u64) -> Verdict {
    if free < DISK_ERROR {
        Verdict::Error
    } else if free < DISK_WARN {
        Verdict::Warning
    } else {
        Verdict::Ok
    }
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", n >> 20)
    }
}

fn check_disk(report: &mut Report, home: &Home) {
    let Some(at) = existing_ancestor(&home.root) else {
        report.skipped("disk", "no folder of the home exists to measure");
        return;
    };
    let stat = match rustix::fs::statvfs(at) {
        Ok(stat) => stat,
        Err(e) => {
            report.warning(
                "disk",
                format!("cannot measure the free space under {}: {e}", at.display()),
                "check the file system holding the home (`df -h`)",
            );
            return;
        }
    };
    if stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        report.error(
            "disk",
            format!("{} is on a file system mounted read-only", at.display()),
            "set METACLAW_HOME to a folder on a writable file system",
        );
        return;
    }
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    let message = format!("{} free under {}", human_bytes(free), at.display());
    let fix =
        "free some space (old logs and sessions are in the home), or move the home (METACLAW_HOME)";
    match disk_verdict(free) {
        Verdict::Error => report.error(
            "disk",
            format!("only {message}: recording stops when it runs out"),
            fix,
        ),
        Verdict::Warning => report.warning("disk", format!("only {message}"), fix),
        _ => report.ok("disk", message),
    }
}

fn check_store(report: &mut Report, home: &Home, loaded: &Loaded) {
    let path = crate::skills::paths(home, &loaded.config).1;
    let fix_path =
        "set store.path to a file in a writable folder (`metaclaw config set store.path PATH`)";
    match fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => {
            report.error(
                "store",
                format!(
                    "{} is a folder, not the store's database file",
                    path.display()
                ),
                format!("move the folder away, or {fix_path}"),
            );
        }
        Ok(_) => match crate::store::probe_write(&path) {
            Ok(()) => report.ok("store", format!("{} takes writes", path.display())),
            Err(e) => report.error(
                "store",
                format!("{}: {e:#}", path.display()),
                format!("give your user write access to it and its folder, or {fix_path}"),
            ),
        },
        // The home is checked on its own; a store elsewhere is not.
        Err(e) if is_missing(&e) => match creatable(&path) {
            Ok(()) => report.ok(
                "store",
                format!(
                    "{} does not exist yet; `metaclaw start` creates it",
                    path.display()
                ),
            ),
            Err(why) => report.error("store", why, fix_path),
        },
        Err(e) => report.error("store", format!("{}: {e}", path.display()), fix_path),
    }
}

fn check_port(report: &mut Report, home: &Home, loaded: &Loaded) -> Result<()> {
    let proxy = &loaded.config.proxy;
    let port = proxy.port;
    let fix_port = "stop it, or give metaclaw another port: `metaclaw config set proxy.port N`";
    // A home that cannot be read is reported by the home check.
    if let Some(info) = home.running().ok().flatten() {
        if runtime()?.block_on(super::admin::healthy(&info.url)) {
            let note = if port != 0 && info.port != port {
                format!(" (proxy.port says {port}: it was started with another)")
            } else {
                String::new()
            };
            report.ok(
                "port",
                format!(
                    "metaclaw is running at {}, pid {}{note}",
                    info.url, info.pid
                ),
            );
        } else {
            report.error(
                "port",
                format!(
                    "metaclaw (pid {}) holds this home but does not answer at {}",
                    info.pid, info.url
                ),
                format!(
                    "`metaclaw stop` then `metaclaw start`; its log is {}",
                    home.log_file().display()
                ),
            );
        }
        return Ok(());
    }
    if port == 0 {
        report.ok(
            "port",
            "proxy.port is 0: `metaclaw start` takes any free port",
        );
        return Ok(());
    }
    let Some(ip) = config::parse_host(&proxy.host) else {
        // Validation refuses such a host; nothing to bind.
        return Ok(());
    };
    let address = std::net::SocketAddr::new(ip, port);
    match std::net::TcpListener::bind(address) {
        Ok(listener) => {
            drop(listener);
            report.ok("port", format!("{address} is free"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let url = format!("http://{}:{port}", crate::server::url_host(&ip.to_string()));
            match runtime()?.block_on(metaclaw_at(&url)) {
                Some(version) => report.error(
                    "port",
                    format!("another metaclaw ({version}, not this home's) listens on {address}"),
                    format!(
                        "stop it with `metaclaw stop` under its own METACLAW_HOME, or {}",
                        "give this one another port: `metaclaw config set proxy.port N`"
                    ),
                ),
                None => report.error(
                    "port",
                    format!("something else listens on {address}: `metaclaw start` would fail"),
                    fix_port,
                ),
            }
        }
        Err(e) => report.error(
            "port",
            format!("cannot listen on {address}: {e}"),
            "use a port above 1023 that nothing else uses: `metaclaw config set proxy.port N`",
        ),
    }
    Ok(())
}

/// The version of the metaclaw answering `/healthz` at `url`, if it is one.
async fn metaclaw_at(url: &str) -> Option<String> {
    let admin = super::admin::AdminClient::at(url).ok()?;
    let body = admin.timeout(Duration::from_secs(2)).health().await.ok()?;
    // metaclaw's /healthz names its version and mode.
    match (&body["version"], &body["mode"]) {
        (Value::String(v), Value::String(_)) => Some(format!("version {}", log_line(v, 40))),
        _ => None,
    }
}

/// The plugins as the daemon would load them (the lock in force), and the
/// lock checked against the files it pins.
fn check_plugins(report: &mut Report, home: &Home, loaded: &Loaded) -> Option<Arc<PluginHost>> {
    let mut settings = Settings::from_config(&loaded.config, home);
    // Doctor leaves a missing home missing: it compiles without the cache
    // (which lives in the home) rather than create it.
    if !home.root.is_dir() {
        settings.cache = None;
    }
    let host = match PluginHost::new(settings, None) {
        Ok(host) => host,
        Err(e) => {
            report.error(
                "plugins",
                format!("the plugin host cannot start: {e:#}"),
                "see `metaclaw plugins list`",
            );
            return None;
        }
    };
    let registry = host.reload();
    let lock_path = home.plugin_lock_file();
    // Pinned files whose bytes changed (or are gone): one line each, and
    // the host's own "refused" problem for the same file is not repeated.
    let mut reported: Vec<PathBuf> = Vec::new();
    if let Ok(Some(lock)) = LockFile::read(&lock_path) {
        let mut changed = 0;
        for entry in &lock.plugins {
            let file = PathBuf::from(&entry.file);
            let fix = "`metaclaw plugins verify` lists every difference; `metaclaw plugins lock` pins the files as they are now, if they are meant to be";
            match files::read_named(&file, host.settings.max_file_bytes) {
                Ok(bytes) => {
                    let sha = sha256_hex(&bytes);
                    if sha != entry.sha256 {
                        report.error(
                            "plugin pins",
                            format!(
                                "{} changed since it was pinned ({}@{}: sha256 {}…, metaclaw.lock pins {}…): it is refused",
                                file.display(),
                                entry.name,
                                entry.version,
                                &sha[..12],
                                &entry.sha256[..12.min(entry.sha256.len())]
                            ),
                            fix,
                        );
                        reported.push(file);
                        changed += 1;
                    }
                }
                Err(e) => {
                    report.error(
                        "plugin pins",
                        format!(
                            "{}@{}, pinned in metaclaw.lock, cannot be read: {e}",
                            entry.name, entry.version
                        ),
                        fix,
                    );
                    changed += 1;
                }
            }
        }
        if changed == 0 {
            report.ok(
                "plugin pins",
                format!(
                    "the {} files pinned by {} are unchanged",
                    lock.plugins.len(),
                    lock_path.display()
                ),
            );
        }
    } else if !registry.locked {
        report.ok(
            "plugin pins",
            "no metaclaw.lock: any plugin in the folders loads (`metaclaw plugins lock` pins them by sha256)",
        );
    }
    // A lock that cannot be read is among the host's problems.

    let builtin = registry
        .plugins
        .iter()
        .filter(|p| p.info.source == Source::Builtin)
        .count();
    let drop_ins = registry.plugins.len() - builtin;
    let missing: Vec<&str> = if loaded.config.plugins.builtin {
        FIRST_PARTY
            .iter()
            .copied()
            .filter(|name| !registry.plugins.iter().any(|p| p.info.name == *name))
            .collect()
    } else {
        Vec::new()
    };
    let summary = format!(
        "{} loaded ({builtin} first-party, {drop_ins} drop-in){}",
        registry.plugins.len(),
        if registry.locked {
            ", pinned by metaclaw.lock"
        } else {
            ""
        }
    );
    if missing.is_empty() {
        let off = if loaded.config.plugins.builtin {
            ""
        } else {
            " (plugins.builtin: false)"
        };
        report.ok("plugins", format!("{summary}{off}"));
    } else {
        report.error(
            "plugins",
            format!(
                "{summary}; first-party plugin(s) not loaded: {}",
                missing.join(", ")
            ),
            "`metaclaw plugins list` shows what was found and why a file was refused",
        );
    }
    for problem in &registry.problems {
        if reported.contains(&problem.path) {
            continue;
        }
        report.error(
            "plugins",
            format!(
                "{}: {}",
                problem.path.display(),
                log_line(&problem.error, 400)
            ),
            if registry.locked {
                "`metaclaw plugins verify` compares the files with metaclaw.lock; fix or remove the file, or pin it with `metaclaw plugins lock`"
            } else {
                "fix or remove the file (`metaclaw plugins remove NAME`)"
            },
        );
    }
    for notice in &registry.notices {
        report.warning(
            "plugins",
            format!(
                "{}: {}",
                notice.path.display(),
                log_line(&notice.error, 400)
            ),
            "see `metaclaw plugins list`; docs/plugins.md explains grants and overrides",
        );
    }
    Some(host)
}

fn check_retrieval(report: &mut Report, plugins: Option<&PluginHost>, loaded: &Loaded) {
    let config = &loaded.config;
    if !config.skills.enabled {
        report.ok("retrieval", "skills are off (skills.enabled: false)");
        return;
    }
    match crate::skills::answering(plugins, config.plugins.builtin) {
        Ok(list) => report.ok("retrieval", format!("answered by {}", list.join(", then "))),
        Err(why) => report.error(
            "retrieval",
            format!("none answers: no skill is injected ({why})"),
            "load a retriever: `plugins.builtin: true` (the default) or a drop-in (`metaclaw plugins add FILE`)",
        ),
    }
}

fn check_evolution(report: &mut Report, plugins: Option<&PluginHost>, loaded: &Loaded) {
    let config = &loaded.config;
    if !config.learning.enabled {
        report.ok("evolution", crate::learn::OFF);
        return;
    }
    if !config.skills.enabled || !config.skills.auto_evolve {
        report.ok(
            "evolution",
            "skills are not evolved (skills.enabled or skills.auto_evolve is false)",
        );
        return;
    }
    match crate::learn::evolver_chain(plugins) {
        Ok(chain) if let Some(why) = crate::learn::evolution_unguarded(&chain) => report.warning(
            "evolution",
            why,
            "add guard to plugins.evolvers (or remove the key: every loaded evolver runs, guard first)",
        ),
        Ok(chain) => {
            let names: Vec<&str> = chain.iter().map(|p| p.info.name.as_str()).collect();
            report.ok(
                "evolution",
                format!("evolved skills pass {}", names.join(" → ")),
            );
        }
        Err(e) => report.error(
            "evolution",
            format!("{e}; learning jobs wait"),
            "load the guard evolver (first-party, or pinned with `metaclaw plugins lock --override guard`); `metaclaw plugins list` shows it",
        ),
    }
}

fn check_skills(report: &mut Report, home: &Home, loaded: &Loaded) {
    if !loaded.config.skills.enabled {
        report.ok("skills", "skills are off (skills.enabled: false)");
        return;
    }
    let dir = crate::skills::paths(home, &loaded.config).0;
    let install = "`metaclaw skills install-builtin` installs the built-in skills";
    match fs::read_dir(&dir) {
        Err(e) if is_missing(&e) => {
            report.warning(
                "skills",
                format!("{} does not exist: no skill is injected", dir.display()),
                install,
            );
            return;
        }
        Err(e) => {
            report.error(
                "skills",
                format!("{} cannot be read: {e}", dir.display()),
                "give your user read access to it, or set skills.dir",
            );
            return;
        }
        Ok(_) => {}
    }
    let (skills, problems) = crate::skills::library::scan(&dir);
    if skills.is_empty() {
        report.warning(
            "skills",
            format!("{} holds no skills: none is injected", dir.display()),
            install,
        );
    } else {
        report.ok(
            "skills",
            format!("{} skill(s) in {}", skills.len(), dir.display()),
        );
    }
    for problem in &problems {
        report.warning(
            "skills",
            format!(
                "{} is skipped: {}",
                problem.path.display(),
                log_line(&problem.error, 300)
            ),
            format!(
                "fix the file (`metaclaw skills show {}` shows it), or `metaclaw skills remove {}`",
                problem.id, problem.id
            ),
        );
    }
}

fn check_wiring(report: &mut Report, home: &Home, loaded: &Loaded) {
    let config = &loaded.config;
    let claw = claws::claw_name(&config.claw_type);
    let state = match claws::State::load(home) {
        Ok(state) => state.unwrap_or_default(),
        Err(e) => {
            report.error(
                "wiring",
                format!("{e:#}"),
                "`metaclaw stop --restore` puts back what it can; the backups are kept",
            );
            return;
        }
    };
    let wired_claw = |name: &str| state.agents.iter().find(|a| a.claw == name);
    if config.claw_type == ClawType::None || !config.configure_openclaw {
        let why = if config.claw_type == ClawType::None {
            "claw_type: none"
        } else {
            "configure_openclaw: false"
        };
        report.ok("wiring", format!("not wired ({why})"));
    } else {
        match wired_claw(claw) {
            None => report.ok(
                "wiring",
                format!("{claw} is not wired yet: `metaclaw start` points it at the proxy"),
            ),
            Some(agent) => {
                let mut broken = 0;
                let home_dir = std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_default();
                for file in &agent.files {
                    for finding in claws::check_file(file, &agent.base_url) {
                        let shown = claws::tilde(&file.path, &home_dir);
                        match finding {
                            Finding::Broken(what) => {
                                broken += 1;
                                report.error(
                                    "wiring",
                                    format!("{claw}: {shown}: {what}"),
                                    "`metaclaw stop --restore` then `metaclaw start` wires it again (an edited file is kept beside it)",
                                );
                            }
                            Finding::Changed(what) => report.warning(
                                "wiring",
                                format!("{claw}: {shown}: {what}"),
                                "nothing to do if the edit is yours; `metaclaw stop --restore` keeps it beside the original",
                            ),
                        }
                    }
                }
                if broken == 0 {
                    report.ok(
                        "wiring",
                        format!(
                            "{claw} → {} ({} file(s) as metaclaw wrote them, backups present)",
                            agent.base_url,
                            agent.files.len()
                        ),
                    );
                }
            }
        }
    }
    for agent in state.agents.iter().filter(|a| a.claw != claw) {
        report.warning(
            "wiring",
            format!(
                "{} is still wired to {} although claw_type is now {claw}",
                agent.claw, agent.base_url
            ),
            "`metaclaw stop --restore` puts its config back",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_thresholds() {
        assert_eq!(disk_verdict(50 << 20), Verdict::Error);
        assert_eq!(disk_verdict(500 << 20), Verdict::Warning);
        assert_eq!(disk_verdict(2 << 30), Verdict::Ok);
    }

    #[test]
    fn model_lists_and_error_bodies() {
        let list = br#"{"object":"list","data":[{"id":"gpt-4o"},{"id":"echo"}]}"#;
        assert_eq!(model_listed(list, "echo"), Some(true));
        assert_eq!(model_listed(list, "gpt-5"), Some(false));
        assert_eq!(model_listed(list, ""), None);
        assert_eq!(model_listed(b"{}", "echo"), None);
        assert_eq!(
            error_detail(br#"{"error":{"message":"Incorrect API key\nprovided"}}"#),
            " (Incorrect API key\\nprovided)"
        );
        assert_eq!(error_detail(b"<html>"), "");
    }

    #[test]
    fn a_missing_home_is_judged_by_the_folder_that_would_hold_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        fs::write(&file, "x").unwrap();
        let mut report = Report::default();
        check_home(&mut report, &Home::at(dir.path().join("a/b")));
        check_home(&mut report, &Home::at(file.join("home")));
        check_home(&mut report, &Home::at(&file));
        let verdicts: Vec<(Verdict, &str)> = report
            .checks
            .iter()
            .map(|c| (c.verdict, c.message.as_str()))
            .collect();
        assert_eq!(verdicts[0].0, Verdict::Ok, "{verdicts:?}");
        assert!(verdicts[0].1.contains("creates it"), "{verdicts:?}");
        assert_eq!(verdicts[1].0, Verdict::Error, "{verdicts:?}");
        assert!(verdicts[1].1.contains("not a folder"), "{verdicts:?}");
        assert_eq!(verdicts[2].0, Verdict::Error, "{verdicts:?}");
        assert!(verdicts[2].1.contains("is not a folder"), "{verdicts:?}");
    }
}
