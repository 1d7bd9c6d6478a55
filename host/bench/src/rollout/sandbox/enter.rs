//! The helper side of the sandbox (`metaclaw sandbox-exec`): confine this
//! process, then run the command as the first process of its own PID
//! namespace and pass on how it ended. Any step that fails stops it
//! before the command exists (exit status 125, one line saying which,
//! marked with the caller's nonce so that no command can forge it).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::io::Errno;
use rustix::process::Signal;
use rustix::thread::UnshareFlags;

use super::limits::{self, Bound, Limits};
use super::{Purpose, SETUP_EXIT, mirror, mounts, ready_line, restrict, setup_failed_line};
use crate::rollout::taskdir::TaskDir;

/// The one user inside: the caller, mapped. Not 0, so the command keeps
/// no capability in its namespaces once it is exec'd.
const INNER_ID: u32 = 1000;
/// Where the workspace is, inside.
pub const WORKDIR: &str = "/work";
/// The system folders searched for commands, in order.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
/// A check's `python` and `python3` (Python 3 in isolated mode), first on
/// its PATH ([`mounts::python_wrappers`]).
pub const CHECK_BIN: &str = "/sandbox/bin";
/// A check's probe: `python` and `python3` are Python 3, isolated (no
/// environment variables read, no user site, neither the script's folder
/// nor the working folder on `sys.path`).
const PYTHON_PROBE: &str = "for p in python python3; do $p -c \"import os, sys; \
    sys.exit(0 if sys.version_info[0] == 3 and sys.flags.isolated and sys.flags.no_user_site \
    and '' not in sys.path and os.getcwd() not in sys.path else 3)\" || exit 3; done";
/// The command's whole environment, but `PATH`.
const ENV: &[(&str, &str)] = &[
    ("HOME", WORKDIR),
    ("TMPDIR", "/tmp"),
    ("LANG", "C.UTF-8"),
    ("USER", "sandbox"),
    ("LOGNAME", "sandbox"),
    ("SHELL", "/bin/sh"),
    ("TERM", "dumb"),
];
/// The helper's exit status when it killed the command at its deadline.
pub const TIMEOUT_EXIT: u8 = 124;
/// How often the helper checks the command's deadline.
const POLL: Duration = Duration::from_millis(10);

/// One `sandbox-exec` call, its arguments read.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub dir: &'a Path,
    pub purpose: Purpose,
    pub nonce: &'a str,
    /// `None`: the probe.
    pub command: Option<&'a str>,
    pub limits: Limits,
    /// The cgroup folders metaclaw made for this call ([`super::cgroup`]);
    /// none: rlimits alone.
    pub cgroups: &'a [PathBuf],
    /// The command's wall-clock limit.
    pub timeout: Duration,
}

/// `metaclaw sandbox-exec --dir DIR [--check] --nonce N [limits] (--probe | -- COMMAND)`.
pub fn exec(req: &Request<'_>) -> ExitCode {
    // Dies with the rollout that started it.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let failed = |why: &str| {
        eprintln!("{}", setup_failed_line(req.nonce, why));
        ExitCode::from(SETUP_EXIT)
    };
    let (confined, real, cgroups) = match confine(req) {
        Ok(done) => done,
        Err(e) => return failed(&format!("{e:#}")),
    };
    let (command, probe) = match (req.command, req.purpose) {
        (Some(command), _) => (command, false),
        (None, Purpose::Run) => ("true", true),
        (None, Purpose::Check) => (PYTHON_PROBE, true),
    };
    let mut child = match shell(command, req.purpose, cgroups).spawn() {
        Ok(child) => child,
        Err(e) => return failed(&format!("cannot start /bin/sh inside: {e}")),
    };
    let ended = match wait(&mut child, req.timeout) {
        Ok(ended) => ended,
        Err(e) => return failed(&format!("lost the command: {e}")),
    };
    // The shell was the first process of the PID namespace: every process
    // it left is gone now, and nothing changes /work any more.
    if disk_full() {
        eprintln!(
            "[metaclaw-sandbox: disk limit reached: the workspace holds at most {} MiB]",
            req.limits.disk_mb
        );
    }
    if let Err(e) = mirror::mirror(Path::new(WORKDIR), real.as_fd()) {
        eprintln!("[metaclaw-sandbox: the workspace was not saved in full: {e}]");
    }
    let Some(status) = ended else {
        return ExitCode::from(TIMEOUT_EXIT);
    };
    if probe {
        if !status.success() {
            return failed(&match req.purpose {
                Purpose::Run => format!("`true` failed inside: {status}"),
                Purpose::Check => format!(
                    "`python` inside is not Python 3 in isolated mode ({status}): the checks \
                     need python3 in /usr/bin or /usr/local/bin"
                ),
            });
        }
        say!("{}", ready_line(req.nonce, &confined));
        return ExitCode::SUCCESS;
    }
    ExitCode::from(u8::try_from(super::exit_code(status)).unwrap_or(1))
}

/// The command's end; `None` when it was killed at `timeout`.
fn wait(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            // The namespace's first process: the kernel kills the rest.
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

/// Whether the workspace's copy is (nearly) full: out of space or inodes.
fn disk_full() -> bool {
    rustix::fs::statvfs(WORKDIR)
        .is_ok_and(|s| s.f_bavail.saturating_mul(s.f_frsize) < 64 * 1024 || s.f_favail == 0)
}

/// The cgroups, namespaces, limits, the new root and Landlock, in that
/// order; says what is enforced, and gives the real workspace's folder
/// (to mirror the copy back into) and the cgroups' `cgroup.procs` (for
/// the command to join).
fn confine(req: &Request<'_>) -> Result<(String, OwnedFd, Vec<OwnedFd>)> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    // Before the namespaces: the cgroup tree is the host's.
    let cgroups = req
        .cgroups
        .iter()
        .map(|dir| {
            let procs = dir.join("cgroup.procs");
            rustix::fs::open(
                &procs,
                rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .with_context(|| format!("cannot open {}", procs.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    unshare(namespaces())?;
    map_ids(uid, gid)?;
    let bound = if req.cgroups.is_empty() {
        Bound::Rlimit
    } else {
        Bound::Cgroup
    };
    let limits = limits::apply(&req.limits, bound)?;
    // Last: a child started before this (the rlimit check) would have
    // been the namespace's first process.
    unshare(UnshareFlags::NEWPID)?;
    let dir = TaskDir::at(req.dir.to_path_buf());
    let real = mirror::open_real(&dir.work())
        .with_context(|| format!("cannot open the workspace {}", dir.work().display()))?;
    let hidden = mounts::enter_root(&dir, req.purpose, &req.limits)?;
    let landlock = restrict::landlock(real.as_fd())?;
    let python = match req.purpose {
        Purpose::Run => "",
        Purpose::Check => "; `python` is Python 3 in isolated mode",
    };
    Ok((
        format!(
            "user, mount, network, PID, IPC and UTS namespaces; only the workspace and a private \
             /tmp writable; system dirs read-only{hidden}; no network; {landlock}{python}; {limits}"
        ),
        real,
        cgroups,
    ))
}

/// Every namespace but the PID one (entered last, [`confine`]).
fn namespaces() -> UnshareFlags {
    UnshareFlags::NEWUSER
        | UnshareFlags::NEWNS
        | UnshareFlags::NEWNET
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS
        | UnshareFlags::NEWCGROUP
}

#[expect(
    unsafe_code,
    reason = "rustix marks unshare unsafe because CLONE_FILES can split a multi-threaded \
              process's fd table; this passes no CLONE_FILES, in a single-threaded process"
)]
fn unshare(flags: UnshareFlags) -> Result<()> {
    // SAFETY: no CLONE_FILES (nor CLONE_FS/CLONE_SIGHAND sharing changes
    // other threads could observe), and `sandbox-exec` runs before any
    // other thread exists (cli::dispatch hands it over first).
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(|e| {
        let why = match e {
            Errno::NOSPC => "the limit user.max_user_namespaces is 0 (or reached)",
            Errno::PERM | Errno::ACCESS => {
                "unprivileged user namespaces are not allowed here (Debian's \
                 kernel.unprivileged_userns_clone=0, Ubuntu's \
                 kernel.apparmor_restrict_unprivileged_userns=1, or a container's seccomp \
                 profile)"
            }
            Errno::INVAL => "the process is not single-threaded",
            _ => "the kernel refused",
        };
        anyhow::anyhow!("cannot create user namespaces ({e}): {why}")
    })
}

/// The caller (uid, gid) as [`INNER_ID`] inside; no supplementary groups.
fn map_ids(uid: u32, gid: u32) -> Result<()> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .with_context(|| format!("cannot write /proc/self/{file}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{INNER_ID} {uid} 1\n"))?;
    write("gid_map", format!("{INNER_ID} {gid} 1\n"))?;
    Ok(())
}

/// `/bin/sh -c COMMAND` in the workspace with only [`ENV`] and the
/// purpose's PATH, no stdin; it dies with this helper.
fn shell(command: &str, purpose: Purpose, cgroups: Vec<OwnedFd>) -> Command {
    let path = match purpose {
        Purpose::Run => PATH.to_string(),
        Purpose::Check => format!("{CHECK_BIN}:{PATH}"),
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(WORKDIR)
        .env_clear()
        .env("PATH", path)
        .envs(ENV.iter().copied())
        .stdin(Stdio::null());
    die_with_parent(&mut cmd, cgroups);
    cmd
}

/// The command dies with this helper, and joins its cgroups (`cgroups`:
/// their `cgroup.procs`, opened before the namespaces; "0" is the writer):
/// the helper stays outside, so the OOM killer and the process limit
/// never pick it, and the workspace is always mirrored back.
#[expect(
    unsafe_code,
    reason = "pre_exec is unsafe; the hook makes async-signal-safe syscalls only (prctl, write)"
)]
fn die_with_parent(cmd: &mut Command, cgroups: Vec<OwnedFd>) {
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl(PR_SET_PDEATHSIG) and write(2) through rustix: raw
    // syscalls, no allocation, no lock; and this helper is
    // single-threaded anyway.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            for procs in &cgroups {
                rustix::io::write(procs, b"0")?;
            }
            Ok(())
        });
    }
}
