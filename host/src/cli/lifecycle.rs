//! `start`, `stop`, `status`, `uninstall` (with the agent wiring of
//! [`super::claws_cmd`]).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, kill_process, test_kill_process};
use serde_json::json;

use super::{JsonFlag, StartArgs, StopArgs, UninstallArgs, human_duration, load_config, runtime};
use metaclaw_core::admin::AdminClient;
use metaclaw_core::config::Mode;
use metaclaw_core::daemon::{self, DaemonOptions};
use metaclaw_core::home::Home;
use metaclaw_core::logging::RotatingLog;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The first start after an install or upgrade compiles the first-party
/// plugins (seconds to a minute on a slow machine): done here, before the
/// daemon starts, so a terminal shows progress; later starts find them in
/// the compile cache and skip this.
fn precompile_plugins(home: &Home, config: &metaclaw_core::config::Config) {
    use std::io::{IsTerminal, Write};
    let settings = metaclaw_core::plugins::HostSettings::from_config(config, home);
    let terminal = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut progress = |done: usize, total: usize, name: &str| {
        if terminal {
            eprint!(
                "\rcompiling the first-party plugins (first start only): {done}/{total} {name:<28}"
            );
            let _ = std::io::stderr().flush();
        }
    };
    match metaclaw_core::plugins::PluginHost::precompile_embedded(&settings, &mut progress) {
        Ok(0) => {}
        Ok(n) => {
            let took = started.elapsed().as_secs_f32();
            if terminal {
                eprintln!(
                    "\rcompiled the {n} first-party plugins in {took:.1}s (cached for later starts){:20}",
                    ""
                );
            } else {
                eprintln!(
                    "compiled the {n} first-party plugins in {took:.1}s (cached for later starts)"
                );
            }
        }
        // The daemon compiles them itself (and reports what fails).
        Err(e) => tracing::debug!("cannot precompile the plugins: {e:#}"),
    }
}

pub fn start(home: &Home, config_path: &Path, args: StartArgs) -> Result<ExitCode> {
    let mut loaded = load_config(config_path)?;
    if let Some(port) = args.port {
        loaded.config.proxy.port = port;
    }
    if let Some(mode) = args.mode {
        let mode = match mode.as_str() {
            "rl" => Mode::Rl,
            "auto" => Mode::Auto,
            _ => Mode::SkillsOnly,
        };
        metaclaw_core::config::inert::override_mode(&mut loaded, mode);
    }
    daemon::check_servable(&loaded, args.demo)?;
    home.ensure()?;

    let log_config = loaded.config.log.clone();
    let max_log_bytes = log_config.max_mb.saturating_mul(1 << 20);
    if args.foreground {
        return run_foreground(home, loaded, &args, max_log_bytes);
    }

    if let Some(info) = home.running()? {
        eprintln!(
            "metaclaw is already running: {} (pid {}, home {})",
            info.url,
            info.pid,
            home.root.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    if home.read_pid_file().is_some() {
        home.remove_pid_file();
        eprintln!("note: removed a stale pid file (its process is gone)");
    }
    // Here, so that the line is on the terminal; the daemon need not look.
    if !args.no_builtin_skills && !args.demo {
        super::skills_cmd::install_builtin_on(home, &loaded.config, "metaclaw start");
    }

    precompile_plugins(home, &loaded.config);

    // The daemon is this binary in the foreground, detached from the
    // terminal (own process group) with its output in the log file.
    let log_path = home.log_file();
    // The daemon rotates its log while it runs; one left over the limit by
    // an earlier run is rotated here, before the offset of this start's
    // lines is taken.
    if std::fs::metadata(&log_path).is_ok_and(|m| m.len() >= max_log_bytes)
        && let Err(e) = metaclaw_core::logging::rotate_files(&log_path, log_config.keep)
    {
        eprintln!("warning: cannot rotate {}: {e}", log_path.display());
    }
    let log = metaclaw_core::logging::open_log(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let mut child = spawn_daemon(home, config_path, &args, &log_path, log)?;

    let started = Instant::now();
    let rt = runtime()?;
    let info = wait_healthy(&mut child, home, &rt, &log_path, log_start)?;
    let ms = started.elapsed().as_millis();
    say!(
        "metaclaw is running at {} (pid {}, mode {}; healthy in {ms} ms)",
        info.url,
        info.pid,
        info.mode
    );
    say!("  OpenAI base URL: {}/v1", info.url);
    say!("  logs: {}", log_path.display());
    // A wiring failure leaves the daemon serving and the agent's files as
    // they were; it still makes `start` fail so scripts notice.
    let mut wired_ok = true;
    if !args.no_wire
        && let Err(e) = super::claws_cmd::wire_after_start(home, &loaded, &info.url, args.demo)
    {
        eprintln!("error: {e:#}");
        eprintln!(
            "metaclaw keeps running at {}; point the agent at {}/v1 yourself, or fix the file and run `metaclaw stop && metaclaw start`",
            info.url, info.url
        );
        wired_ok = false;
    }
    if args.demo
        && let Err(e) = rt.block_on(super::demo::run(
            home,
            &info,
            loaded.config.proxy.api_key.as_deref(),
        ))
    {
        bail!(
            "the demo stopped: {e:#}\nmetaclaw keeps running at {} (its log: {}); `metaclaw stop` stops it",
            info.url,
            log_path.display()
        );
    }
    Ok(if wired_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `start --foreground`: the daemon in this process, logging to the
/// terminal or to `--log-file`.
fn run_foreground(
    home: &Home,
    loaded: metaclaw_core::config::LoadedConfig,
    args: &StartArgs,
    max_log_bytes: u64,
) -> Result<ExitCode> {
    let log_config = loaded.config.log.clone();
    match &args.log_file {
        Some(path) => match RotatingLog::open(path, max_log_bytes, log_config.keep) {
            Ok(log) => metaclaw_core::logging::init_file(&log_config.level, log),
            Err(e) => {
                metaclaw_core::logging::init(&log_config.level);
                tracing::warn!("cannot open {}: {e}; logging to stderr", path.display());
            }
        },
        None => metaclaw_core::logging::init(&log_config.level),
    }
    if !args.no_builtin_skills && !args.demo {
        super::skills_cmd::install_builtin_on(home, &loaded.config, "metaclaw start");
    }
    if !args.no_wire {
        super::claws_cmd::wire_when_healthy(home.clone(), loaded.clone(), args.demo);
    }
    let rt = runtime()?;
    rt.block_on(daemon::run(DaemonOptions {
        home: home.clone(),
        loaded,
        demo: args.demo,
    }))?;
    if !args.no_wire {
        super::claws_cmd::note_still_wired(home);
    }
    Ok(ExitCode::SUCCESS)
}

/// This binary again, as `start --foreground`, detached from the terminal
/// (its own process group) with its output in `log`.
fn spawn_daemon(
    home: &Home,
    config_path: &Path,
    args: &StartArgs,
    log_path: &Path,
    log: std::fs::File,
) -> Result<std::process::Child> {
    let exe = std::env::current_exe().context("cannot find the metaclaw executable")?;
    let mut command = Command::new(exe);
    command
        .arg("--config")
        .arg(config_path)
        .arg("start")
        .arg("--foreground")
        // This process wires, once the daemon answers, and reports on the terminal.
        .arg("--no-wire")
        .arg("--no-builtin-skills")
        .arg("--log-file")
        .arg(log_path);
    if let Some(port) = args.port {
        command.arg("--port").arg(port.to_string());
    }
    if let Some(mode) = args.mode {
        command.arg("--mode").arg(mode.as_str().replace('_', "-"));
    }
    if args.demo {
        command.arg("--demo");
    }
    command
        .env("METACLAW_HOME", &home.root)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the daemon")
}

/// Waits until the daemon `child` answers `/healthz` as the pid file says,
/// or fails with its log's tail if it exits or takes too long.
fn wait_healthy(
    child: &mut std::process::Child,
    home: &Home,
    rt: &tokio::runtime::Runtime,
    log_path: &Path,
    log_start: u64,
) -> Result<metaclaw_core::home::PidInfo> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let tail = log_tail(log_path, log_start);
            bail!(
                "the daemon exited during start-up ({status}). Its log ({}):\n{tail}",
                log_path.display()
            );
        }
        if let Some(info) = home.read_pid_file().filter(|p| p.pid == child.id())
            && rt.block_on(metaclaw_core::admin::healthy(&info.url))
        {
            return Ok(info);
        }
        if started.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            bail!(
                "the daemon did not become healthy within {}s. Its log ({}):\n{}",
                START_TIMEOUT.as_secs(),
                log_path.display(),
                log_tail(log_path, log_start)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last lines the daemon wrote since `from`.
fn log_tail(path: &Path, from: u64) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    // A log rotated since `from` was taken is read from its start.
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(if from > len { 0 } else { from }));
    let mut text = String::new();
    let _ = f.take(64 << 10).read_to_string(&mut text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub fn stop(home: &Home, args: StopArgs) -> Result<ExitCode> {
    let code = stop_daemon(home, args.timeout)?;
    if args.restore {
        super::claws_cmd::restore_and_print(home)?;
    } else {
        super::claws_cmd::note_still_wired(home);
    }
    Ok(code)
}

/// Stops the daemon: SIGTERM, a clean stop within `timeout` seconds, else SIGKILL.
fn stop_daemon(home: &Home, timeout: u64) -> Result<ExitCode> {
    let Some(info) = home.running()? else {
        if home.read_pid_file().is_some() {
            home.remove_pid_file();
            say!("metaclaw is not running (removed a stale pid file)");
        } else {
            say!("metaclaw is not running");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let pid = Pid::from_raw(info.pid as i32).context("invalid pid in the pid file")?;
    kill_process(pid, Signal::TERM).with_context(|| format!("cannot signal pid {}", info.pid))?;
    let deadline = Instant::now() + Duration::from_secs(timeout);
    // Stopped means gone: the daemon lets go of the home's lock before
    // its process has finished exiting (a loaded machine shows the gap),
    // and a caller may start another one or delete the home next.
    while Instant::now() < deadline {
        if !home.is_locked()? && exited(pid) {
            say!("metaclaw stopped (pid {})", info.pid);
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "metaclaw (pid {}) did not stop within {}s; killing it",
        info.pid, timeout
    );
    let _ = kill_process(pid, Signal::KILL);
    for _ in 0..100 {
        if test_kill_process(pid).is_err() || !home.is_locked()? {
            home.remove_pid_file();
            say!("metaclaw killed (pid {})", info.pid);
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("pid {} is still alive after SIGKILL", info.pid)
}

/// Whether `pid` has exited: no such process, or a zombie waiting for a
/// parent that may never reap it (a detached daemon's is init).
fn exited(pid: Pid) -> bool {
    test_kill_process(pid).is_err()
        || std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).is_ok_and(
            |stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            },
        )
}

/// `metaclaw uninstall`: stop, put every agent config back, forget the
/// wiring; with `--purge --yes`, delete the home too.
pub fn uninstall(home: &Home, config_path: &Path, args: UninstallArgs) -> Result<ExitCode> {
    if args.purge && !args.yes {
        bail!(
            "--purge deletes {} (recorded sessions, skills, plugins, the config in it): add --yes to confirm",
            home.root.display()
        );
    }
    if home.running()?.is_some() {
        stop_daemon(home, args.timeout)?;
    }
    super::claws_cmd::restore_and_print(home)
        .context("the agent's config could not be put back; nothing was deleted")?;
    if args.purge {
        if home.root.exists() {
            std::fs::remove_dir_all(&home.root)
                .with_context(|| format!("cannot delete {}", home.root.display()))?;
        }
        say!("deleted {}", home.root.display());
        if !config_path.starts_with(&home.root) && config_path.exists() {
            say!(
                "kept the config file {} (outside the home)",
                config_path.display()
            );
        }
    } else {
        say!(
            "metaclaw is unwired; recorded data is kept in {} (`metaclaw uninstall --purge --yes` deletes it)",
            home.root.display()
        );
    }
    say!("to remove the binary: cargo uninstall metaclaw");
    Ok(ExitCode::SUCCESS)
}

pub fn status(home: &Home, config_path: &Path, args: JsonFlag) -> Result<ExitCode> {
    let running = home.running()?;
    let Some(info) = running else {
        let (sessions, turns) = db_counts(home, config_path);
        if args.json {
            say!(
                "{}",
                json!({ "running": false, "healthy": false, "home": home.root, "sessions": sessions, "turns": turns, "wiring": super::claws_cmd::wiring_json(home) })
            );
        } else {
            say!("metaclaw is not running (home {})", home.root.display());
            if let (Some(s), Some(t)) = (sessions, turns) {
                say!("  recorded: {s} sessions, {t} turns");
            }
            super::claws_cmd::print_wiring(home);
            say!("  start it with: metaclaw start");
        }
        return Ok(ExitCode::from(3));
    };
    let fetched = match AdminClient::of(home, &info) {
        Ok(admin) => runtime()?.block_on(
            admin
                .timeout(Duration::from_secs(3))
                .get_json("/admin/status"),
        ),
        Err(e) => Err(e),
    };
    let mut report = match fetched {
        Ok(v) => v,
        Err(e) => {
            let report = json!({ "running": true, "healthy": false, "pid": info.pid, "url": info.url, "error": e.to_string(), "wiring": super::claws_cmd::wiring_json(home) });
            if args.json {
                say!("{report}");
            } else {
                say!(
                    "metaclaw is running (pid {}) but not answering on {}: {e:#}",
                    info.pid,
                    info.url
                );
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    report["home"] = json!(home.root);
    report["wiring"] = super::claws_cmd::wiring_json(home);
    if args.json {
        say!("{report}");
        return Ok(ExitCode::SUCCESS);
    }
    let uptime = report["uptime_seconds"].as_f64().unwrap_or(0.0);
    say!(
        "metaclaw is running{}",
        if report["demo"] == true {
            " (demo)"
        } else {
            ""
        }
    );
    say!(
        "  url:       {}   (OpenAI base URL: {}/v1)",
        info.url,
        info.url
    );
    say!("  pid:       {}", report["pid"]);
    say!("  mode:      {}", report["mode"].as_str().unwrap_or("?"));
    say!("  uptime:    {}", human_duration(uptime));
    say!(
        "  upstream:  {}",
        report["upstream"].as_str().unwrap_or("?")
    );
    say!(
        "  sessions:  {} ({} active)",
        report["sessions"],
        report["active_sessions"]
    );
    say!("  turns:     {}", report["turns"]);
    if let Some(s) = report["skills"].as_object() {
        print_skills(s);
    }
    if let Some(p) = report["plugins"].as_object() {
        print_plugins(p);
    }
    if let Some(note) = report["learning"]["note"].as_str() {
        say!("  learning:  {note}");
    }
    if let Some(student) = report["student"].as_object() {
        print_student(student);
    }
    if let Some(training) = report["training"].as_object() {
        print_training(training);
    }
    for key in ["evolution_blocked", "evolution_unguarded"] {
        if let Some(why) = report[key].as_str() {
            say!("  warning:   {why}");
        }
    }
    super::claws_cmd::print_wiring(home);
    say!("  home:      {}", home.root.display());
    Ok(ExitCode::SUCCESS)
}

/// `status`: the skill library and retrieval.
fn print_skills(s: &serde_json::Map<String, serde_json::Value>) {
    say!(
        "  skills:    {} loaded (generation {}) from {}",
        s["loaded"],
        s["generation"],
        s["dir"].as_str().unwrap_or("?")
    );
    if let Some(r) = s["retrieval"].as_object() {
        let mode = r["mode"].as_str().unwrap_or("?");
        let mut line = match r["none_answers"].as_str() {
            Some(why) => {
                format!("  retrieval: none answers ({mode} configured, not loaded: {why})")
            }
            None => format!("  retrieval: {mode}"),
        };
        if let Some(model) = r["embeddings"].as_str() {
            line.push_str(&format!(" ({model})"));
        }
        if let Some(last) = s["last_retriever"].as_str() {
            line.push_str(&format!(", last answered by {last}"));
        }
        say!("{line}");
        let indexes: Vec<String> = s["retrievers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let state = r["index"].as_str().unwrap_or("?").replace('_', " ");
                format!("{} {state}", r["name"].as_str().unwrap_or("?"))
            })
            .collect();
        if !indexes.is_empty() {
            say!("  indexes:   {}", indexes.join(", "));
        }
        if let Some(problem) = r["problem"].as_str() {
            say!("  warning:   embeddings are off, BM25 retrieves instead: {problem}");
        }
    }
    for problem in s["problems"].as_array().into_iter().flatten() {
        say!(
            "  warning:   skill {} skipped: {}",
            problem["path"].as_str().unwrap_or("?"),
            problem["error"].as_str().unwrap_or("?")
        );
    }
}

/// `status`: the plugins, their memory and what was refused.
fn print_plugins(p: &serde_json::Map<String, serde_json::Value>) {
    let problems = p["problems"].as_u64().unwrap_or(0) + p["notices"].as_u64().unwrap_or(0);
    say!(
        "  plugins:   {} loaded{}{}{}",
        p["loaded"],
        if p["loading"] == true {
            " (still loading: more to come)"
        } else {
            ""
        },
        if p["locked"] == true {
            ", pinned by metaclaw.lock"
        } else {
            ""
        },
        if problems > 0 {
            format!(", {problems} problem(s) or notice(s): see `metaclaw plugins list`")
        } else {
            String::new()
        }
    );
    for why in p["pin_conflicts"].as_array().into_iter().flatten() {
        say!("  warning:   {}", why.as_str().unwrap_or("?"));
    }
    for d in p["disabled"].as_array().into_iter().flatten() {
        say!(
            "  warning:   plugin {} is {}",
            d["plugin"].as_str().unwrap_or("?"),
            d["why"].as_str().unwrap_or("disabled")
        );
    }
    if let Some(m) = p["memory"].as_object() {
        let mib = |v: &serde_json::Value| v.as_u64().unwrap_or(0) as f64 / f64::from(1 << 20);
        say!(
            "  plugin memory: {:.1} MiB of {:.0} MiB (plugins.total_memory_mb), peak {:.1} MiB",
            mib(&m["used"]),
            mib(&m["limit"]),
            mib(&m["peak"])
        );
    }
    for problem in p["refused_for_resources"].as_array().into_iter().flatten() {
        say!(
            "  warning:   plugin {} {}",
            problem["path"].as_str().unwrap_or("?"),
            problem["error"].as_str().unwrap_or("?")
        );
    }
}

/// `status`: training's queue, scheduler, distillation and last error.
fn print_training(training: &serde_json::Map<String, serde_json::Value>) {
    let q = &training["queue"];
    match training["note"].as_str() {
        Some(note) => say!("  training:  {note}"),
        None => say!(
            "  training:  {} ready, {} waiting for judging, {} trained, {} skipped (`metaclaw train status`)",
            q["ready"],
            q["waiting"],
            q["trained"],
            q["skipped"]
        ),
    }
    print_scheduler(&training["scheduler"]);
    if let Some(opd) = training["opd"].as_str() {
        say!("  distill:   teacher {opd}");
    }
    if let Some(error) = training["last_error"].as_str() {
        say!("  warning:   the last training step failed: {error}");
    }
}

/// The training scheduler's line: whether steps wait for windows, and
/// whether one is open and why (`metaclaw scheduler status` says more).
fn print_scheduler(s: &serde_json::Value) {
    if let Some(error) = s["error"].as_str() {
        say!("  scheduler: no step starts on its own: {error}");
    } else if s["gated"] == false {
        say!(
            "  scheduler: off: steps run whenever a batch is ready (mode rl without scheduler.enabled, or the manual trigger)"
        );
    } else if s["gated"] == true {
        let state = s["state"].as_str().unwrap_or("?");
        match (s["open"].as_bool(), s["reason"].as_str()) {
            (Some(true), Some(why)) => say!("  scheduler: window open ({why}); {state}"),
            (Some(false), Some(why)) => say!("  scheduler: window shut: {why}"),
            _ => say!("  scheduler: {state}, not assessed yet"),
        }
    }
}

/// The trainable model's line (rl/auto): on which weights it answers, or
/// why it does not and who answers instead.
fn print_student(s: &serde_json::Map<String, serde_json::Value>) {
    let base = s["base_model"].as_str().unwrap_or("?");
    let counts = format!(
        "{} sampled, {} parse error(s), {} fallback(s)",
        s["samples"], s["parse_errors"], s["fallbacks"]
    );
    match s["state"].as_str() {
        Some("ready") => say!(
            "  student:   {base} answers (sampler {}, policy version {}); {counts}",
            s["sampler"].as_str().unwrap_or("?"),
            s["policy_version"]
        ),
        state => {
            let instead = match s["fallback_to_llm"] == true {
                true => "llm answers instead",
                false => "turns fail (rl.fallback_to_llm is off)",
            };
            say!(
                "  student:   {base} is {}: {}; {instead}; {counts}",
                state.unwrap_or("?"),
                s["reason"].as_str().unwrap_or("no reason given")
            );
        }
    }
    if let Some(why) = s["last_fallback"].as_str() {
        say!("  fallback:  last: {why}");
    }
    if let Some(rendering) = s["rendering"].as_str() {
        say!(
            "  rendering: {rendering} ({} tool calls) from {}",
            s["tool_call_format"].as_str().unwrap_or("no"),
            s["tokenizer_dir"].as_str().unwrap_or("?")
        );
    }
}

fn db_counts(home: &Home, config_path: &Path) -> (Option<u64>, Option<u64>) {
    let path = super::sessions_cmd::db_path(home, config_path);
    let Ok(conn) = path.read() else {
        return (None, None);
    };
    let count = |sql: &str| {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .ok()
            .map(|n| n.max(0) as u64)
    };
    (
        count("SELECT count(*) FROM sessions"),
        count("SELECT count(*) FROM turns"),
    )
}
