//! `start`, `stop`, `status`, `uninstall` (with the agent wiring of
//! [`super::claws_cmd`]).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, kill_process, test_kill_process};

use super::{StartArgs, StopArgs, UninstallArgs, load_config, runtime};
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
    let loaded = start_config(config_path, &args)?;
    daemon::check_servable(&loaded, args.demo)?;
    home.ensure()?;

    let log_config = loaded.config.log.clone();
    let max_log_bytes = log_config.max_mb.saturating_mul(1 << 20);
    if args.foreground {
        return run_foreground(home, loaded, &args, max_log_bytes);
    }

    if already_running(home)? {
        return Ok(ExitCode::FAILURE);
    }
    // Here, so that the line is on the terminal; the daemon need not look.
    if !args.no_builtin_skills && !args.demo {
        super::skills_cmd::install_builtin_on(home, &loaded.config, "metaclaw start");
    }

    precompile_plugins(home, &loaded.config);

    // The daemon is this binary in the foreground, detached from the
    // terminal (own process group) with its output in the log file.
    let log_path = home.log_file();
    let (log, log_start) = open_start_log(&log_path, max_log_bytes, log_config.keep)?;
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
    let wired_ok = args.no_wire || wire_agent(home, &loaded, &info, args.demo);
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

/// Whether a daemon already runs on `home` (said so); a stale pid file
/// is removed.
fn already_running(home: &Home) -> Result<bool> {
    if let Some(info) = home.running()? {
        eprintln!(
            "metaclaw is already running: {} (pid {}, home {})",
            info.url,
            info.pid,
            home.root.display()
        );
        return Ok(true);
    }
    if home.read_pid_file().is_some() {
        home.remove_pid_file();
        eprintln!("note: removed a stale pid file (its process is gone)");
    }
    Ok(false)
}

/// The config, with `start`'s `--port` and `--mode` over it.
fn start_config(
    config_path: &Path,
    args: &StartArgs,
) -> Result<metaclaw_core::config::LoadedConfig> {
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
    Ok(loaded)
}

/// The daemon's log, opened for appending, and its length before this
/// start's lines.
fn open_start_log(log_path: &Path, max_log_bytes: u64, keep: u32) -> Result<(std::fs::File, u64)> {
    // The daemon rotates its log while it runs; one left over the limit by
    // an earlier run is rotated here, before the offset of this start's
    // lines is taken.
    if std::fs::metadata(log_path).is_ok_and(|m| m.len() >= max_log_bytes)
        && let Err(e) = metaclaw_core::logging::rotate_files(log_path, keep)
    {
        eprintln!("warning: cannot rotate {}: {e}", log_path.display());
    }
    let log = metaclaw_core::logging::open_log(log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((log, log_start))
}

/// Points the agent at the running daemon; false when that failed.
fn wire_agent(
    home: &Home,
    loaded: &metaclaw_core::config::LoadedConfig,
    info: &metaclaw_core::home::PidInfo,
    demo: bool,
) -> bool {
    let Err(e) = super::claws_cmd::wire_after_start(home, loaded, &info.url, demo) else {
        return true;
    };
    eprintln!("error: {e:#}");
    eprintln!(
        "metaclaw keeps running at {}; point the agent at {}/v1 yourself, or fix the file and run `metaclaw stop && metaclaw start`",
        info.url, info.url
    );
    false
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
