//! How long the machine has been idle (no keyboard or mouse input), read
//! honestly per platform: a platform with no query a plain process can
//! make says so (`Err`, with what was tried) instead of guessing. The
//! proxy's own traffic is never used as a stand-in: an agent that is idle
//! says nothing about whether the user is at the keyboard.
//!
//! - macOS: `ioreg -c IOHIDSystem -d 4`, `HIDIdleTime` (nanoseconds).
//! - Linux: systemd-logind's `IdleHint` for the user's graphical session;
//!   else `xprintidle` on X11; Wayland has no query without logind.
//!
//! The probe is synchronous (it runs commands): callers run it on a
//! blocking thread.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};

/// Why one idle source could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceFailed {
    #[error("{0} not found")]
    NotFound(String),
    #[error("cannot run `{command}`: {error}")]
    CannotRun { command: String, error: String },
    #[error("`{command}` did not finish within {secs} s")]
    TimedOut { command: String, secs: f64 },
    #[error("cannot wait for `{command}`: {error}")]
    CannotWait { command: String, error: String },
    #[error("`{command}` exited with {code}{}", stderr_part(.stderr))]
    Exited {
        command: String,
        /// The exit code, or "a signal".
        code: String,
        stderr: String,
    },
    #[error("user {0} has no graphical session (XDG_SESSION_ID is not set)")]
    NoGraphicalSession(u32),
    #[error("IdleHint is {0:?}, not yes or no")]
    BadIdleHint(String),
    #[error("loginctl printed no IdleHint")]
    NoIdleHint,
    #[error("IdleHint=yes but no IdleSinceHint")]
    NoIdleSince,
    #[error("IdleSinceHint is {0:?}, not microseconds")]
    BadIdleSince(String),
    #[error("IdleHint=yes but IdleSinceHint is 0: idle since an unknown time")]
    UnknownIdleSince,
    #[error("IdleSinceHint {0} is out of range")]
    IdleSinceOutOfRange(i64),
    #[error("session {session}: {error}")]
    Session {
        session: String,
        error: Box<SourceFailed>,
    },
    #[error("logind: {0}")]
    Logind(Box<SourceFailed>),
    #[error("X11: DISPLAY is not set")]
    NoDisplay,
    #[error("X11: not asked under Wayland (XWayland's idle time misses input to Wayland windows)")]
    X11UnderWayland,
    #[error("X11: {0}")]
    X11(Box<SourceFailed>),
    #[error("X11: xprintidle printed {0:?}, not milliseconds")]
    BadXprintidle(String),
    #[error(
        "Wayland: no idle query a plain process can make (the ext-idle-notify protocol needs a compositor client)"
    )]
    Wayland,
    #[error("`ioreg -c IOHIDSystem -d 4` printed no HIDIdleTime")]
    NoHidIdleTime,
    #[error("ioreg: {0}")]
    Ioreg(Box<SourceFailed>),
    #[error("metaclaw has no idle query for {0}")]
    NoQuery(&'static str),
    /// The probe's thread ended without an answer.
    #[error("the idle probe failed: {0}")]
    ProbeFailed(String),
}

fn stderr_part(stderr: &str) -> String {
    match stderr {
        "" => String::new(),
        stderr => format!(": {stderr}"),
    }
}

/// No idle source could be read: each one tried, and why not.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no idle source: {}", tried(.0))]
pub struct NoIdleSource(pub Vec<SourceFailed>);

fn tried(failures: &[SourceFailed]) -> String {
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What one read found.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemIdle {
    /// How long the machine has been idle; `Err`: not available here, with
    /// what was tried and why each failed.
    pub idle: Result<Duration, NoIdleSource>,
    /// What was read ("logind session 2 (IdleHint)"); "none" when nothing
    /// was available.
    pub source: String,
}

impl SystemIdle {
    /// Nothing read: each source tried and why not.
    pub fn none(tried: Vec<SourceFailed>) -> Self {
        Self {
            idle: Err(NoIdleSource(tried)),
            source: "none".into(),
        }
    }
}

/// Reads the machine's idle time (tests put a fake behind it).
pub trait IdleProbe: Send + Sync {
    fn read(&self) -> SystemIdle;
}

/// The probe for the platform this runs on.
pub struct PlatformIdle;

impl IdleProbe for PlatformIdle {
    #[cfg(target_os = "macos")]
    fn read(&self) -> SystemIdle {
        let output = match run("ioreg", &["-c", "IOHIDSystem", "-d", "4"]) {
            Ok(output) => output,
            Err(why) => return SystemIdle::none(vec![SourceFailed::Ioreg(Box::new(why))]),
        };
        match parse_ioreg(&output) {
            Some(idle) => SystemIdle {
                idle: Ok(idle),
                source: "ioreg HIDIdleTime".into(),
            },
            None => SystemIdle::none(vec![SourceFailed::NoHidIdleTime]),
        }
    }

    /// logind's idle hint, then X11; see [`probe_linux`].
    #[cfg(target_os = "linux")]
    fn read(&self) -> SystemIdle {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let env = Env {
            session_id: var("XDG_SESSION_ID"),
            display: var("DISPLAY"),
            wayland_display: var("WAYLAND_DISPLAY"),
            session_type: var("XDG_SESSION_TYPE"),
            uid: rustix::process::getuid().as_raw(),
        };
        probe_linux(&env, &run, Utc::now())
    }

    #[cfg(not(any(target_os = "macos", target_os = "linux")))]
    fn read(&self) -> SystemIdle {
        SystemIdle::none(vec![SourceFailed::NoQuery(std::env::consts::OS)])
    }
}

/// What the Linux probe reads from the environment (a struct, so tests
/// give their own).
#[cfg(any(target_os = "linux", test))]
struct Env {
    session_id: Option<String>,
    display: Option<String>,
    wayland_display: Option<String>,
    session_type: Option<String>,
    uid: u32,
}

/// Runs a command, returns its stdout (tests give a fake).
#[cfg(any(target_os = "linux", test))]
type Run<'a> = dyn Fn(&str, &[&str]) -> Result<String, SourceFailed> + 'a;

/// Linux, in order: (a) systemd-logind's `IdleHint` for the user's
/// graphical session (`$XDG_SESSION_ID`, else the user's `Display`
/// session); (b) on X11, `xprintidle`; (c) on Wayland without logind,
/// nothing: the ext-idle-notify protocol needs a compositor client, which
/// a plain process is not.
///
/// logind's "idle since" is final. Its "active" is not on X11: a desktop
/// that never sets `IdleHint` (many window managers) leaves it at "no"
/// for ever, so there `xprintidle`, which sees every X input, has the
/// last word when it can be read. Elsewhere such a session reads as
/// active, the safe side (training waits for the sleep window instead).
#[cfg(any(target_os = "linux", test))]
fn probe_linux(env: &Env, run: &Run<'_>, now: DateTime<Utc>) -> SystemIdle {
    let mut tried = Vec::new();
    match logind(env, run, now) {
        Ok((idle, source)) => {
            if idle.is_zero()
                && let Ok((x_idle, x_source)) = x11(env, run)
            {
                return SystemIdle {
                    idle: Ok(x_idle),
                    source: format!(
                        "{x_source}; {source} says active, as it always does where the desktop never sets it"
                    ),
                };
            }
            return SystemIdle {
                idle: Ok(idle),
                source,
            };
        }
        Err(why) => tried.push(SourceFailed::Logind(Box::new(why))),
    }
    let wayland = is_wayland(env);
    match x11(env, run) {
        Ok((idle, source)) => {
            return SystemIdle {
                idle: Ok(idle),
                source,
            };
        }
        Err(why) => tried.push(why),
    }
    if wayland {
        tried.push(SourceFailed::Wayland);
    }
    SystemIdle::none(tried)
}

#[cfg(any(target_os = "linux", test))]
fn is_wayland(env: &Env) -> bool {
    env.wayland_display.is_some()
        || env
            .session_type
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("wayland"))
}

/// The X11 display's idle time from `xprintidle`, and the source; why not.
#[cfg(any(target_os = "linux", test))]
fn x11(env: &Env, run: &Run<'_>) -> Result<(Duration, String), SourceFailed> {
    let display = env.display.as_ref().ok_or(SourceFailed::NoDisplay)?;
    // XWayland's idle time only counts input to X11 windows: the user
    // typing in a Wayland window would read as idle (the unsafe side).
    if is_wayland(env) {
        return Err(SourceFailed::X11UnderWayland);
    }
    let output = run("xprintidle", &[]).map_err(|why| SourceFailed::X11(Box::new(why)))?;
    let idle = parse_xprintidle(&output)
        .ok_or_else(|| SourceFailed::BadXprintidle(output.trim().to_string()))?;
    Ok((idle, format!("xprintidle (X11 {display})")))
}

/// The user's graphical session's idle time from logind, and the source.
#[cfg(any(target_os = "linux", test))]
fn logind(
    env: &Env,
    run: &Run<'_>,
    now: DateTime<Utc>,
) -> Result<(Duration, String), SourceFailed> {
    let session = match &env.session_id {
        Some(id) => id.clone(),
        None => {
            let uid = env.uid.to_string();
            let display = run("loginctl", &["show-user", &uid, "-p", "Display", "--value"])?;
            let display = display.trim();
            if display.is_empty() {
                return Err(SourceFailed::NoGraphicalSession(env.uid));
            }
            display.to_string()
        }
    };
    let output = run(
        "loginctl",
        &[
            "show-session",
            &session,
            "-p",
            "IdleHint",
            "-p",
            "IdleSinceHint",
        ],
    )?;
    let idle = parse_logind(&output, now).map_err(|why| SourceFailed::Session {
        session: session.clone(),
        error: Box::new(why),
    })?;
    Ok((idle, format!("logind session {session} (IdleHint)")))
}

/// `HIDIdleTime` from `ioreg -c IOHIDSystem -d 4`: nanoseconds since the
/// last input (`"HIDIdleTime" = 1234567890`).
pub fn parse_ioreg(output: &str) -> Option<Duration> {
    let line = output.lines().find(|l| l.contains("\"HIDIdleTime\""))?;
    let (_, value) = line.split_once('=')?;
    let nanos: i64 = value.trim().parse().ok()?;
    (nanos >= 0).then(|| Duration::nanoseconds(nanos))
}

/// `loginctl show-session ID -p IdleHint -p IdleSinceHint` (in either
/// order). `IdleHint=no`: active (zero). `IdleHint=yes`: idle since
/// `IdleSinceHint`, microseconds since the Unix epoch; 0 there means
/// logind does not know since when, which is an error, not "idle for
/// 56 years".
pub fn parse_logind(output: &str, now: DateTime<Utc>) -> Result<Duration, SourceFailed> {
    let value = |key: &str| {
        output.lines().find_map(|l| {
            l.trim()
                .strip_prefix(key)
                .and_then(|rest| rest.strip_prefix('='))
                .map(str::trim)
        })
    };
    match value("IdleHint") {
        Some("no") => return Ok(Duration::zero()),
        Some("yes") => {}
        Some(other) => return Err(SourceFailed::BadIdleHint(other.to_string())),
        None => return Err(SourceFailed::NoIdleHint),
    }
    let since = value("IdleSinceHint").ok_or(SourceFailed::NoIdleSince)?;
    let micros: i64 = since
        .parse()
        .map_err(|_| SourceFailed::BadIdleSince(since.to_string()))?;
    if micros <= 0 {
        return Err(SourceFailed::UnknownIdleSince);
    }
    let since =
        DateTime::from_timestamp_micros(micros).ok_or(SourceFailed::IdleSinceOutOfRange(micros))?;
    // A hint ahead of our clock (skew): idle for no time yet.
    Ok((now - since).max(Duration::zero()))
}

/// `xprintidle`'s output: milliseconds since the last input.
pub fn parse_xprintidle(output: &str) -> Option<Duration> {
    let millis: i64 = output.trim().parse().ok()?;
    (millis >= 0).then(|| Duration::milliseconds(millis))
}

/// How long a command may take: these answer in milliseconds, and a hung
/// one (a stuck D-Bus, an X server that does not answer) must not hold
/// the scheduler.
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

fn run(program: &str, args: &[&str]) -> Result<String, SourceFailed> {
    run_with_timeout(program, args, COMMAND_TIMEOUT)
}

/// Runs `program args`, returns its stdout; an error names the command
/// and says what went wrong (not found, timed out, its exit and stderr).
fn run_with_timeout(
    program: &str,
    args: &[&str],
    timeout: std::time::Duration,
) -> Result<String, SourceFailed> {
    let shown = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SourceFailed::NotFound(program.to_string()),
            _ => SourceFailed::CannotRun {
                command: shown.clone(),
                error: e.to_string(),
            },
        })?;
    // Pipes are drained on their own threads, so a chatty command cannot
    // block on a full pipe; results come over a channel, so a grandchild
    // holding a pipe open cannot hold us past the deadline.
    let (tx, rx) = mpsc::channel();
    for (which, pipe) in [
        (
            0,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            1,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let Some(mut pipe) = pipe else { continue };
        let tx = tx.clone();
        // Ends when the pipe closes; not joined, since a grandchild may hold
        // it open past the deadline (a pipe not read is reported empty).
        let _ = crate::work::unjoined("metaclaw-idle-pipe", move || {
            let mut bytes = Vec::new();
            let _ = pipe.by_ref().take(1 << 20).read_to_end(&mut bytes);
            let _ = tx.send((which, String::from_utf8_lossy(&bytes).into_owned()));
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SourceFailed::TimedOut {
                    command: shown,
                    secs: timeout.as_secs_f64(),
                });
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SourceFailed::CannotWait {
                    command: shown,
                    error: e.to_string(),
                });
            }
        }
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.max(std::time::Duration::from_millis(100))) {
            Ok((0, text)) => stdout = text,
            Ok((_, text)) => stderr = text,
            Err(_) => break,
        }
    }
    if status.success() {
        Ok(stdout)
    } else {
        Err(SourceFailed::Exited {
            command: shown,
            code: status
                .code()
                .map_or_else(|| "a signal".to_string(), |c| c.to_string()),
            stderr: stderr.trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::clock::utc;

    #[test]
    fn ioreg_idle_time_is_nanoseconds() {
        let output = r#"+-o Root  <class IORegistryEntry, id 0x100000100, retain 30>
  +-o J316sAP  <class IOPlatformExpertDevice, id 0x100000210, registered>
    +-o IOResources  <class IOResources, id 0x100000104, registered>
      +-o IOHIDSystem  <class IOHIDSystem, id 0x1000004c1, registered>
          {
            "IOClass" = "IOHIDSystem"
            "HIDIdleTime" = 93847562000
            "HIDParameters" = {"HIDClickTime"=500000000}
          }
"#;
        assert_eq!(
            parse_ioreg(output),
            Some(Duration::nanoseconds(93_847_562_000))
        );
        assert_eq!(parse_ioreg("\"HIDIdleTime\" = soon"), None);
        assert_eq!(parse_ioreg("\"HIDIdleTime\" = -5"), None);
        assert_eq!(parse_ioreg("\"IOClass\" = \"IOHIDSystem\""), None);
        assert_eq!(parse_ioreg(""), None);
    }

    #[test]
    fn logind_idle_since_hint_is_microseconds_since_the_epoch() {
        let now = utc("2025-11-24T16:30:00Z");
        // 2025-11-24T16:00:00Z in microseconds; either order.
        let since = now.timestamp_micros() - 30 * 60 * 1_000_000;
        let text = format!("IdleHint=yes\nIdleSinceHint={since}\n");
        assert_eq!(parse_logind(&text, now), Ok(Duration::minutes(30)));
        let text = format!("IdleSinceHint={since}\nIdleHint=yes\n");
        assert_eq!(parse_logind(&text, now), Ok(Duration::minutes(30)));
        // A hint ahead of the clock: no idle time yet, not negative.
        let text = format!(
            "IdleHint=yes\nIdleSinceHint={}\n",
            now.timestamp_micros() + 5
        );
        assert_eq!(parse_logind(&text, now), Ok(Duration::zero()));
    }

    #[test]
    fn logind_active_session_is_zero() {
        let now = utc("2025-11-24T16:30:00Z");
        assert_eq!(
            parse_logind("IdleHint=no\nIdleSinceHint=1764000000000000\n", now),
            Ok(Duration::zero())
        );
        assert_eq!(
            parse_logind("IdleHint=no\nIdleSinceHint=0\n", now),
            Ok(Duration::zero())
        );
    }

    #[test]
    fn logind_idle_since_unknown_is_an_error() {
        let now = utc("2025-11-24T16:30:00Z");
        let e = parse_logind("IdleHint=yes\nIdleSinceHint=0\n", now).unwrap_err();
        assert_eq!(e, SourceFailed::UnknownIdleSince);
        assert!(e.to_string().contains("unknown"), "{e}");
        assert!(parse_logind("IdleHint=yes\n", now).is_err());
    }

    #[test]
    fn logind_malformed_output_is_an_error() {
        let now = utc("2025-11-24T16:30:00Z");
        for text in [
            "",
            "Failed to get session: No session '7' known",
            "IdleHint=maybe\nIdleSinceHint=1\n",
            "IdleHint=yes\nIdleSinceHint=yesterday\n",
            "IdleHint=yes\nIdleSinceHint=99999999999999999999999\n",
        ] {
            assert!(parse_logind(text, now).is_err(), "{text:?}");
        }
    }

    #[test]
    fn xprintidle_prints_milliseconds() {
        assert_eq!(
            parse_xprintidle("4521\n"),
            Some(Duration::milliseconds(4521))
        );
        assert_eq!(parse_xprintidle("0"), Some(Duration::zero()));
        assert_eq!(parse_xprintidle("couldn't open display"), None);
        assert_eq!(parse_xprintidle(""), None);
        assert_eq!(parse_xprintidle("-1"), None);
    }

    fn no_env() -> Env {
        Env {
            session_id: None,
            display: None,
            wayland_display: None,
            session_type: None,
            uid: 1000,
        }
    }

    /// A fake command runner: answers by the command line, records calls.
    struct Fake {
        answers: Vec<(&'static str, Result<String, &'static str>)>,
        calls: std::sync::Mutex<Vec<String>>,
    }

    impl Fake {
        fn new(answers: Vec<(&'static str, Result<String, &'static str>)>) -> Self {
            Self {
                answers,
                calls: std::sync::Mutex::new(Vec::new()),
            }
        }

        fn run(&self, program: &str, args: &[&str]) -> Result<String, SourceFailed> {
            let line = std::iter::once(program)
                .chain(args.iter().copied())
                .collect::<Vec<_>>()
                .join(" ");
            self.calls.lock().unwrap().push(line.clone());
            match self.answers.iter().find(|(l, _)| *l == line) {
                Some((_, answer)) => answer
                    .clone()
                    .map_err(|e| SourceFailed::ProbeFailed(e.to_string())),
                None => Err(SourceFailed::NotFound(program.to_string())),
            }
        }

        fn probe(&self, env: &Env, now: DateTime<Utc>) -> SystemIdle {
            probe_linux(env, &|p: &str, a: &[&str]| self.run(p, a), now)
        }
    }

    const SHOW_USER: &str = "loginctl show-user 1000 -p Display --value";

    #[test]
    fn linux_reads_the_users_graphical_session_from_logind() {
        let now = utc("2025-11-24T16:30:00Z");
        let since = now.timestamp_micros() - 10 * 60 * 1_000_000;
        let fake = Fake::new(vec![
            (SHOW_USER, Ok("2\n".into())),
            (
                "loginctl show-session 2 -p IdleHint -p IdleSinceHint",
                Ok(format!("IdleHint=yes\nIdleSinceHint={since}\n")),
            ),
            (
                "loginctl show-session c7 -p IdleHint -p IdleSinceHint",
                Ok("IdleHint=no\nIdleSinceHint=0\n".into()),
            ),
        ]);
        let read = fake.probe(&no_env(), now);
        assert_eq!(read.idle, Ok(Duration::minutes(10)));
        assert_eq!(read.source, "logind session 2 (IdleHint)");

        // $XDG_SESSION_ID wins; logind's "active" stands where X11
        // cannot be read.
        let env = Env {
            session_id: Some("c7".into()),
            display: Some(":0".into()),
            ..no_env()
        };
        let read = fake.probe(&env, now);
        assert_eq!(read.idle, Ok(Duration::zero()));
        assert_eq!(read.source, "logind session c7 (IdleHint)");
    }

    #[test]
    fn on_x11_xprintidle_overrules_an_idle_hint_that_is_never_set() {
        let now = utc("2025-11-24T16:30:00Z");
        let since = now.timestamp_micros() - 10 * 60 * 1_000_000;
        let fake = Fake::new(vec![
            (
                "loginctl show-session c7 -p IdleHint -p IdleSinceHint",
                Ok("IdleHint=no\nIdleSinceHint=0\n".into()),
            ),
            (
                "loginctl show-session c8 -p IdleHint -p IdleSinceHint",
                Ok(format!("IdleHint=yes\nIdleSinceHint={since}\n")),
            ),
            ("xprintidle", Ok("2400000\n".into())),
        ]);
        let env = Env {
            session_id: Some("c7".into()),
            display: Some(":0".into()),
            ..no_env()
        };
        let read = fake.probe(&env, now);
        assert_eq!(read.idle, Ok(Duration::minutes(40)));
        assert!(
            read.source
                .starts_with("xprintidle (X11 :0); logind session c7"),
            "{}",
            read.source
        );
        // logind's "idle since" is final: X11 is not asked.
        fake.calls.lock().unwrap().clear();
        let env = Env {
            session_id: Some("c8".into()),
            ..env
        };
        assert_eq!(fake.probe(&env, now).idle, Ok(Duration::minutes(10)));
        assert!(!fake.calls.lock().unwrap().iter().any(|c| c == "xprintidle"));
        // Under Wayland logind's "active" stands.
        let env = Env {
            session_id: Some("c7".into()),
            wayland_display: Some("wayland-0".into()),
            ..env
        };
        assert_eq!(fake.probe(&env, now).idle, Ok(Duration::zero()));
    }

    #[test]
    fn linux_falls_back_to_xprintidle_on_x11() {
        let now = utc("2025-11-24T16:30:00Z");
        let fake = Fake::new(vec![
            (SHOW_USER, Ok("\n".into())),
            ("xprintidle", Ok("61000\n".into())),
        ]);
        let env = Env {
            display: Some(":0".into()),
            ..no_env()
        };
        let read = fake.probe(&env, now);
        assert_eq!(read.idle, Ok(Duration::seconds(61)));
        assert_eq!(read.source, "xprintidle (X11 :0)");
    }

    #[test]
    fn linux_without_a_source_says_what_it_tried() {
        let now = utc("2025-11-24T16:30:00Z");
        let fake = Fake::new(vec![]);
        let read = fake.probe(&no_env(), now);
        assert_eq!(read.source, "none");
        let e = read.idle.unwrap_err().to_string();
        assert!(e.contains("logind: loginctl not found"), "{e}");
        assert!(e.contains("X11: DISPLAY is not set"), "{e}");

        // Wayland: XWayland's DISPLAY is not asked, and the reason is given.
        let env = Env {
            display: Some(":1".into()),
            wayland_display: Some("wayland-0".into()),
            ..no_env()
        };
        let read = fake.probe(&env, now);
        assert_eq!(read.source, "none");
        let e = read.idle.unwrap_err();
        assert!(e.0.contains(&SourceFailed::Wayland), "{e}");
        assert!(e.0.contains(&SourceFailed::X11UnderWayland), "{e}");
        let e = e.to_string();
        assert!(e.contains("ext-idle-notify"), "{e}");
        assert!(e.contains("not asked under Wayland"), "{e}");
        assert!(!fake.calls.lock().unwrap().iter().any(|c| c == "xprintidle"));

        // A broken xprintidle is an error, not a zero.
        let fake = Fake::new(vec![(
            "xprintidle",
            Ok("couldn't open display \":0\"\n".into()),
        )]);
        let env = Env {
            display: Some(":0".into()),
            ..no_env()
        };
        let read = fake.probe(&env, now);
        assert!(
            read.idle
                .unwrap_err()
                .to_string()
                .contains("not milliseconds")
        );
    }

    #[test]
    fn commands_that_fail_hang_or_are_missing_are_errors() {
        let e = run_with_timeout("metaclaw-no-such-binary", &[], COMMAND_TIMEOUT).unwrap_err();
        assert_eq!(e.to_string(), "metaclaw-no-such-binary not found");
        assert_eq!(
            run_with_timeout("sh", &["-c", "echo 42"], COMMAND_TIMEOUT).unwrap(),
            "42\n"
        );
        let e =
            run_with_timeout("sh", &["-c", "echo nope >&2; exit 3"], COMMAND_TIMEOUT).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`sh -c echo nope >&2; exit 3` exited with 3: nope"
        );
        let started = Instant::now();
        let e =
            run_with_timeout("sleep", &["5"], std::time::Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, SourceFailed::TimedOut { .. }), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(3));
    }

    #[test]
    fn this_machine_without_a_session_says_so() {
        let read = PlatformIdle.read();
        let headless =
            std::env::var_os("DISPLAY").is_none() && std::env::var_os("XDG_SESSION_ID").is_none();
        if headless && cfg!(target_os = "linux") {
            // A CI VM: no display, no logind session of ours.
            let e = read.idle.as_ref().unwrap_err();
            assert!(!e.0.is_empty(), "{e}");
            assert_eq!(read.source, "none");
        } else {
            // Whatever this desktop says: an answer or a reason.
            assert!(
                read.idle.as_ref().is_ok() || read.idle.as_ref().is_err_and(|e| !e.0.is_empty())
            );
        }
    }
}
