//! The `run` tool's sandbox: a model-written command runs with no network
//! and no access to the filesystem outside its task's workspace, or it
//! does not run at all.
//!
//! metaclaw runs itself again as `metaclaw sandbox-exec --dir TASKDIR
//! [limits] -- COMMAND` (a fresh, single-threaded process: `unshare` of a
//! user namespace needs one, and nothing runs before the confinement but
//! the confinement), first making the call a cgroup of its own where it
//! can ([`cgroup`]: `memory` and `pids` limits, v2 or v1). That helper
//! ([`enter`]):
//!
//! 1. enters new user, mount, network, IPC, UTS and cgroup namespaces
//!    (the user namespace maps one user, the caller, to uid 1000 inside,
//!    so the command has no capability at all once it runs);
//! 2. sets the limits ([`limits`]): CPU seconds, processes and file size
//!    per process always, address space per process where no cgroup
//!    bounds memory; without a cgroup it checks that `RLIMIT_NPROC` holds
//!    (per user namespace, Linux 5.14+, not for root) and refuses to run
//!    the command if it does not; then a new PID namespace;
//! 3. builds a root of its own on a tmpfs ([`mounts`]): `/usr`, `/bin`,
//!    `/sbin`, `/lib*` bound read-only, a synthetic `/etc` (a passwd
//!    naming only the sandbox's user, the loader cache and
//!    `/etc/alternatives` read-only), `/dev/{null,zero,full,random,urandom}`,
//!    a private 64 MiB `/tmp`, and at `/work` a tmpfs of the disk limit's
//!    size holding a copy of the workspace; then `pivot_root`s into it and
//!    detaches the old root, so nothing else of the host (home, `/proc`,
//!    `/run`'s sockets, `/var`, the real workspace) exists;
//! 4. adds Landlock where the kernel has it ([`restrict`]): read and
//!    execute on the system dirs, everything on `/work` and `/tmp`, nothing
//!    else; TCP bind and connect denied (ABI 4+); no signals to and no
//!    abstract sockets of processes outside (ABI 6+); `no_new_privs`;
//! 5. starts `/bin/sh -c COMMAND` in `/work` with an empty environment but
//!    `PATH`, `HOME=/work`, `TMPDIR=/tmp`, `LANG`, as PID 1 of the new PID
//!    namespace, in the call's cgroup (the helper stays outside it): when
//!    it ends, or is killed at the deadline, every process it left behind
//!    is killed;
//! 6. then mirrors `/work` back into the real workspace ([`mirror`],
//!    through a directory fd opened before the root changed, no link ever
//!    followed): the model sees its writes in the next call, and a disk
//!    filler only ever filled the copy.
//!
//! The network namespace has only a loopback that is down: no address,
//! not even the host's 127.0.0.1, can be reached. This side ([`Sandbox`])
//! gives the helper an empty environment and its own process group, reads
//! its output (stdout and stderr together, capped), reads which limits
//! the cgroup counted (the OOM killer, refused forks) into the result,
//! removes the cgroup, and kills the group should the helper outlive the
//! deadline by [`GRACE`]; the helper and the command die with metaclaw
//! (`PR_SET_PDEATHSIG`).
//!
//! **Fail closed.** A rollout first probes the sandbox (the helper sets
//! everything up and runs `true`). If that fails — no user namespaces
//! (a container's seccomp profile, Ubuntu's AppArmor restriction of
//! unprivileged user namespaces, `user.max_user_namespaces = 0`), no
//! mount permission — the `run` tool answers every call with the reason
//! and runs nothing; the file tools still work. A setup failure on any
//! later call is refused the same way, and so is a call whose process
//! limit cannot be made to hold. Nothing is ever run unconfined.
//! Landlock is a second layer: without it (kernel before 5.13, or not
//! enabled) the namespaces alone confine, and the summary says so.
//!
//! **Checks.** The bench's file checks run agent-controlled files too (an
//! inline `python -c "import glob, …"` imports whatever `glob.py` the
//! workspace holds when Python looks there), so they run in this sandbox
//! with [`Purpose::Check`], on a scratch copy of the workspace
//! (`bench::command`): the same confinement, and `python`/`python3`
//! first on PATH are wrappers in the sandbox's read-only root that run
//! the system's Python 3 in isolated mode (`-I`), which the probe
//! verifies. A setup failure is told apart from a command's own output
//! by a nonce the command never sees: a check cannot pass itself off as
//! an infrastructure failure.

mod cgroup;
mod enter;
mod limits;
mod mirror;
mod mounts;
mod restrict;
mod scratch;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use enter::{Request, exec};
pub use limits::Limits;
pub use scratch::{CopyError, copy_workspace};

use super::taskdir::TaskDir;

/// What a `run` result shows of the command's output (stdout and stderr
/// together); past this it says how much was cut. Under the tools' 16 KiB
/// result, so how the command ended is always shown.
pub const MAX_OUTPUT: usize = 15 * 1024;
/// How often the deadline is checked while a command runs.
const POLL: Duration = Duration::from_millis(10);
/// How long output is waited for after the command is gone.
const DRAIN: Duration = Duration::from_secs(1);
/// What the helper gets past the command's deadline to kill it and
/// mirror the workspace back, before metaclaw kills the helper too (the
/// command's writes are then lost).
const GRACE: Duration = Duration::from_secs(30);
/// The helper's exit status when the sandbox could not be set up; its
/// output then holds [`setup_failed_line`].
const SETUP_EXIT: u8 = 125;

/// The helper's line when the sandbox could not be set up.
fn setup_failed_line(nonce: &str, why: &str) -> String {
    format!("metaclaw-sandbox {nonce}: cannot confine the command: {why}")
}

/// The probe's line on success: what is enforced.
fn ready_line(nonce: &str, what: &str) -> String {
    format!("metaclaw-sandbox {nonce}: ready: {what}")
}

/// What the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The agent's `run` tool.
    Run,
    /// A bench check's command: `python` is Python 3 in isolated mode.
    Check,
}

/// Why a command did not run in the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    /// The probe at start found the sandbox unusable here.
    #[error("{what} is disabled: {why}")]
    Disabled { what: &'static str, why: String },
    #[error("cannot start the sandbox: {0}")]
    CannotStart(std::io::Error),
    #[error("lost the sandbox: {0}")]
    Lost(std::io::Error),
    /// The helper could not set up the confinement (and, where there is
    /// none, why there is no cgroup).
    #[error("metaclaw-sandbox: cannot confine the command: {0}")]
    Unconfined(String),
}

/// The `run` tool's sandbox for one rollout (or the bench's checks'):
/// probed once, then used for every call, or disabled with the reason.
#[derive(Debug, Clone)]
pub struct Sandbox {
    exe: PathBuf,
    purpose: Purpose,
    timeout: Duration,
    limits: Limits,
    /// What is kept of each output stream.
    max_output: usize,
    state: State,
}

#[derive(Debug, Clone)]
enum State {
    /// What is enforced, in words.
    Ready(String),
    /// Why `run` is refused.
    Disabled(String),
}

/// How a sandboxed command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    /// Killed at the deadline, with its process group.
    TimedOut,
}

/// A sandboxed command's output (stdout and stderr together) and end.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub output: String,
    pub ended: Ended,
    /// The limits it ran into, in words (those its cgroup counted).
    pub limits_hit: Vec<String>,
}

/// A sandboxed command's stdout and stderr, apart, and its end.
#[derive(Debug, Clone)]
pub struct SplitOutput {
    pub stdout: String,
    pub stderr: String,
    pub ended: Ended,
    pub limits_hit: Vec<String>,
}

impl Sandbox {
    /// The `run` tool's sandbox (metaclaw's own binary as the helper),
    /// probed in a scratch task folder under `scratch`.
    pub fn probe(scratch: &Path, timeout: Duration, limits: Limits) -> Self {
        match std::env::current_exe() {
            Ok(exe) => Self::probe_with(exe, Purpose::Run, scratch, timeout, MAX_OUTPUT, limits),
            Err(e) => Self {
                exe: PathBuf::new(),
                purpose: Purpose::Run,
                timeout,
                limits,
                max_output: MAX_OUTPUT,
                state: State::Disabled(format!("cannot find metaclaw's own binary: {e}")),
            },
        }
    }

    /// Sets the sandbox up once with `exe` (a metaclaw binary) as the
    /// helper, in a scratch task folder under `scratch`, and runs the
    /// purpose's probe in it: ready, or disabled with the reason.
    pub fn probe_with(
        exe: PathBuf,
        purpose: Purpose,
        scratch: &Path,
        timeout: Duration,
        max_output: usize,
        limits: Limits,
    ) -> Self {
        let mut sandbox = Self {
            exe,
            purpose,
            timeout,
            limits,
            max_output,
            state: State::Disabled(String::new()),
        };
        let name = format!(".sandbox-probe-{}", uuid::Uuid::new_v4().simple());
        sandbox.state = match TaskDir::create(scratch, &name) {
            Err(e) => State::Disabled(format!("cannot create a scratch workspace: {e:#}")),
            Ok(dir) => {
                let nonce = nonce();
                let probed = sandbox.spawn(&dir, None, false, &nonce);
                dir.remove();
                let ready = format!("metaclaw-sandbox {nonce}: ready:");
                match probed {
                    Ok(out) if out.ended == Ended::Exited(0) => {
                        match out.stdout.lines().find_map(|l| l.strip_prefix(&ready)) {
                            Some(what) => State::Ready(what.trim().to_string()),
                            None => State::Disabled(format!(
                                "the sandbox probe said nothing: {}",
                                out.stdout.trim()
                            )),
                        }
                    }
                    Ok(out) => State::Disabled(format!(
                        "the sandbox probe failed ({}): {}",
                        describe(&out.ended),
                        out.stdout.trim()
                    )),
                    Err(why) => State::Disabled(why.to_string()),
                }
            }
        };
        sandbox
    }

    /// `Some(why)` when `run` is refused.
    pub fn disabled(&self) -> Option<&str> {
        match &self.state {
            State::Ready(_) => None,
            State::Disabled(why) => Some(why),
        }
    }

    /// What is enforced, when ready.
    pub fn enforced(&self) -> Option<&str> {
        match &self.state {
            State::Ready(what) => Some(what),
            State::Disabled(_) => None,
        }
    }

    /// One line: what confines `run`, or why it is disabled.
    pub fn describe(&self) -> String {
        match &self.state {
            State::Ready(what) => format!("sandboxed ({what})"),
            State::Disabled(why) => format!(
                "DISABLED: {why} (model-written commands are never run unconfined; the file \
                 tools still work)"
            ),
        }
    }

    /// The wall-clock limit of one command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `command` confined to `dir`'s workspace; `Err` says why it did
    /// not run ([`NotRun`]).
    pub fn run(&self, dir: &TaskDir, command: &str) -> Result<RunOutput, NotRun> {
        if let State::Disabled(why) = &self.state {
            return Err(NotRun::Disabled {
                what: "the run tool",
                why: why.to_string(),
            });
        }
        let out = self.spawn(dir, Some(command), false, &nonce())?;
        Ok(RunOutput {
            output: out.stdout,
            ended: out.ended,
            limits_hit: out.limits_hit,
        })
    }

    /// Runs `command` confined to `dir`'s workspace, its stdout and stderr
    /// kept apart; `Err` says why it did not run.
    pub fn run_split(&self, dir: &TaskDir, command: &str) -> Result<SplitOutput, NotRun> {
        if let State::Disabled(why) = &self.state {
            return Err(NotRun::Disabled {
                what: "the sandbox",
                why: why.to_string(),
            });
        }
        self.spawn(dir, Some(command), true, &nonce())
    }

    /// The helper on `dir`, with `command` (or the probe); `split` keeps
    /// stderr apart (else it goes with stdout).
    fn spawn(
        &self,
        dir: &TaskDir,
        command: Option<&str>,
        split: bool,
        nonce: &str,
    ) -> Result<SplitOutput, NotRun> {
        let failed = NotRun::CannotStart;
        let pipes = Pipes::open(split).map_err(failed)?;
        let (cgroup, no_cgroup) = self.call_cgroup(nonce);
        let limits = self.limits;
        let mut cmd = self.helper_command(dir, command, nonce, cgroup.as_ref());
        let spawned = cmd
            .env_clear()
            .stdin(Stdio::null())
            .stdout(pipes.writer)
            .stderr(pipes.err_writer)
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(cgroup) = cgroup {
                    cgroup.remove();
                }
                return Err(failed(e));
            }
        };
        // The parent's copies of the pipes' write ends go with `cmd`: the
        // readers see the end when the helper and the command are gone.
        drop(cmd);
        let (rx, err_rx) = read_output(pipes.reader, pipes.err_reader, self.max_output);

        let pid = rustix::process::Pid::from_child(&child);
        let started = Instant::now();
        // The helper ends the command at its deadline; this is the
        // backstop should the helper itself hang.
        let mut timed_out = !wait_exited(pid, started + self.timeout + GRACE);
        // Whatever is left in the group (the command's own processes die
        // with the PID namespace when its first process ends).
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        let status = child.wait();
        let limits_hit = cgroup.map_or_else(Vec::new, |cgroup| cgroup.finish(&limits));
        let status = status.map_err(NotRun::Lost)?;
        // The helper's own timeout status, after the deadline: killed.
        if status.code() == Some(i32::from(enter::TIMEOUT_EXIT))
            && started.elapsed() >= self.timeout
        {
            timed_out = true;
        }
        let (stdout, stderr) = collect_output(&rx, &err_rx, split);
        if let Some(unconfined) = setup_failure(status, nonce, &stdout, &stderr, no_cgroup) {
            return Err(unconfined);
        }
        let ended = if timed_out {
            Ended::TimedOut
        } else {
            Ended::Exited(exit_code(status))
        };
        Ok(SplitOutput {
            stdout,
            stderr,
            ended,
            limits_hit,
        })
    }

    /// A cgroup where one can be made; else the helper bounds the
    /// command with rlimits alone, or refuses it (limits.rs), and the
    /// reason is kept for a setup failure's message.
    fn call_cgroup(&self, nonce: &str) -> (Option<cgroup::Cgroup>, Option<cgroup::CgroupError>) {
        match cgroup::Cgroup::create(&format!("metaclaw-sandbox-{nonce}"), &self.limits) {
            Ok(cgroup) => (Some(cgroup), None),
            Err(why) => (None, Some(why)),
        }
    }

    /// `metaclaw sandbox-exec` with this sandbox's limits on `dir`, in
    /// `cgroup`'s dirs, running `command` (or the probe).
    fn helper_command(
        &self,
        dir: &TaskDir,
        command: Option<&str>,
        nonce: &str,
        cgroup: Option<&cgroup::Cgroup>,
    ) -> Command {
        let limits = self.limits;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("sandbox-exec")
            .arg("--dir")
            .arg(dir.path())
            .arg("--nonce")
            .arg(nonce)
            .arg("--processes")
            .arg(limits.processes.to_string())
            .arg("--memory-mb")
            .arg(limits.memory_mb.to_string())
            .arg("--cpu-secs")
            .arg(limits.cpu_secs.to_string())
            .arg("--disk-mb")
            .arg(limits.disk_mb.to_string())
            .arg("--timeout-ms")
            .arg(self.timeout.as_millis().to_string());
        for dir in cgroup.iter().flat_map(|c| c.dirs()) {
            cmd.arg("--cgroup").arg(dir);
        }
        if self.purpose == Purpose::Check {
            cmd.arg("--check");
        }
        match command {
            Some(command) => cmd.arg("--").arg(command),
            None => cmd.arg("--probe"),
        };
        cmd
    }
}

/// The helper's output pipes: stdout's, and stderr's apart when split
/// (else stderr's write end is a copy of stdout's).
struct Pipes {
    reader: std::io::PipeReader,
    writer: std::io::PipeWriter,
    err_reader: Option<std::io::PipeReader>,
    err_writer: std::io::PipeWriter,
}

impl Pipes {
    fn open(split: bool) -> std::io::Result<Self> {
        let (reader, writer) = std::io::pipe()?;
        let (err_reader, err_writer) = if split {
            let (r, w) = std::io::pipe()?;
            (Some(r), w)
        } else {
            (None, writer.try_clone()?)
        };
        Ok(Self {
            reader,
            writer,
            err_reader,
            err_writer,
        })
    }
}

/// Reads the helper's stdout (and stderr, when apart), each up to `cap`
/// bytes, on threads of their own; each text comes on its channel (none
/// comes on stderr's without its reader).
fn read_output(
    reader: std::io::PipeReader,
    err_reader: Option<std::io::PipeReader>,
    cap: usize,
) -> (mpsc::Receiver<String>, mpsc::Receiver<String>) {
    // The readers end when the pipes close (the helper and the command
    // gone); not joined, so a pipe held open past the deadline cannot hold
    // the call.
    let (tx, rx) = mpsc::channel();
    let _ = metaclaw_core::work::unjoined("metaclaw-sandbox-out", move || {
        let _ = tx.send(read_capped(reader, cap));
    });
    let (err_tx, err_rx) = mpsc::channel();
    if let Some(err_reader) = err_reader {
        let _ = metaclaw_core::work::unjoined("metaclaw-sandbox-err", move || {
            let _ = err_tx.send(read_capped(err_reader, cap));
        });
    } else {
        drop(err_tx);
    }
    (rx, err_rx)
}

/// The helper's stdout and stderr (empty unless `split`), each waited
/// for [`DRAIN`] at most.
fn collect_output(
    rx: &mpsc::Receiver<String>,
    err_rx: &mpsc::Receiver<String>,
    split: bool,
) -> (String, String) {
    let lost = |_| "[output lost: still held open]".to_string();
    let stdout = rx.recv_timeout(DRAIN).unwrap_or_else(lost);
    let stderr = if split {
        err_rx.recv_timeout(DRAIN).unwrap_or_else(lost)
    } else {
        String::new()
    };
    (stdout, stderr)
}

/// Polls until the helper `pid` has exited (true) or `deadline` passed
/// (false).
fn wait_exited(pid: rustix::process::Pid, deadline: Instant) -> bool {
    loop {
        // Exited, but not reaped: its pid (and group id) cannot be
        // reused while the caller kills the group.
        let exited = rustix::process::waitid(
            rustix::process::WaitId::Pid(pid),
            rustix::process::WaitIdOptions::EXITED
                | rustix::process::WaitIdOptions::NOHANG
                | rustix::process::WaitIdOptions::NOWAIT,
        );
        if !matches!(exited, Ok(None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// The helper's setup-failure line, when it exited with [`SETUP_EXIT`]
/// and said so, as [`NotRun::Unconfined`] (with why there is no cgroup).
fn setup_failure(
    status: std::process::ExitStatus,
    nonce: &str,
    stdout: &str,
    stderr: &str,
    no_cgroup: Option<cgroup::CgroupError>,
) -> Option<NotRun> {
    // Only the helper knows the nonce: a command printing the same
    // words is the command's output.
    let marker = setup_failed_line(nonce, "");
    if status.code() != Some(i32::from(SETUP_EXIT)) {
        return None;
    }
    let line = stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.starts_with(&marker))?;
    let cgroup = no_cgroup
        .map(|why| format!(" (no cgroup: {why})"))
        .unwrap_or_default();
    Some(NotRun::Unconfined(format!(
        "{}{cgroup}",
        &line[marker.len()..]
    )))
}

/// A fresh random token for one helper call.
fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// `run`'s result for the model: the output, then how it ended.
pub fn result_text(out: &RunOutput, timeout: Duration) -> String {
    let mut text = out.output.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for hit in &out.limits_hit {
        text.push_str(&format!("[{hit}]\n"));
    }
    match out.ended {
        Ended::TimedOut => text.push_str(&format!(
            "[killed: still running after {} s]",
            timeout.as_secs_f64()
        )),
        ref ended => text.push_str(&format!("[{}]", describe(ended))),
    }
    text
}

pub fn describe(ended: &Ended) -> String {
    match ended {
        Ended::Exited(code) if *code > 128 => {
            let why = match code - 128 {
                24 => ": the CPU time limit",
                25 => ": the file size limit",
                _ => "",
            };
            format!("exit status {code} (killed by signal {}{why})", code - 128)
        }
        Ended::Exited(code) => format!("exit status {code}"),
        Ended::TimedOut => "timed out".into(),
    }
}

/// A shell's convention: the code, or 128 + the signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Everything `reader` gives until its end, keeping the first `cap` bytes
/// (lossy UTF-8) and saying how many more were dropped.
fn read_capped(mut reader: impl Read, cap: usize) -> String {
    let mut kept = Vec::new();
    let mut dropped = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                dropped += n - room;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if dropped > 0 {
        text.push_str(&format!("\n[output cut: {dropped} more bytes]"));
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn output_is_capped_and_says_how_much_was_cut() {
        let text = read_capped(&b"abcdefghij"[..], 4);
        assert_eq!(text, "abcd\n[output cut: 6 more bytes]");
        assert_eq!(read_capped(&b"abc"[..], 4), "abc");
    }

    #[test]
    fn results_say_how_the_command_ended() {
        let out = |output: &str, ended| RunOutput {
            output: output.into(),
            ended,
            limits_hit: Vec::new(),
        };
        let t = Duration::from_secs(10);
        assert_eq!(
            result_text(&out("hi\n", Ended::Exited(0)), t),
            "hi\n[exit status 0]"
        );
        assert_eq!(
            result_text(&out("", Ended::Exited(137)), t),
            "[exit status 137 (killed by signal 9)]"
        );
        assert_eq!(
            result_text(&out("x", Ended::TimedOut), t),
            "x\n[killed: still running after 10 s]"
        );
    }
}
