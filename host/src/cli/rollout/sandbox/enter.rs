//! The helper side of the sandbox (`metaclaw sandbox-exec`): confine this
//! process, then run the command as the first process of its own PID
//! namespace and pass on how it ended. Any step that fails stops it
//! before the command exists (exit status 125, one line saying which,
//! marked with the caller's nonce so that no command can forge it).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result};
use rustix::io::Errno;
use rustix::process::{Resource, Rlimit, Signal};
use rustix::thread::UnshareFlags;

use super::{Purpose, SETUP_EXIT, mounts, ready_line, restrict, setup_failed_line};
use crate::cli::rollout::taskdir::TaskDir;

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
/// The largest file the command may write (RLIMIT_FSIZE).
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// `metaclaw sandbox-exec --dir DIR [--check] --nonce N (--probe | -- COMMAND)`.
pub fn exec(dir: &Path, purpose: Purpose, nonce: &str, command: Option<&str>) -> ExitCode {
    // Dies with the rollout that started it.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let failed = |why: &str| {
        eprintln!("{}", setup_failed_line(nonce, why));
        ExitCode::from(SETUP_EXIT)
    };
    let confined = match confine(&TaskDir::at(dir.to_path_buf()), purpose) {
        Ok(what) => what,
        Err(e) => return failed(&format!("{e:#}")),
    };
    let (command, probe) = match (command, purpose) {
        (Some(command), _) => (command, false),
        (None, Purpose::Run) => ("true", true),
        (None, Purpose::Check) => (PYTHON_PROBE, true),
    };
    let status = match shell(command, purpose).status() {
        Ok(status) => status,
        Err(e) => return failed(&format!("cannot start /bin/sh inside: {e}")),
    };
    if probe {
        if !status.success() {
            return failed(&match purpose {
                Purpose::Run => format!("`true` failed inside: {status}"),
                Purpose::Check => format!(
                    "`python` inside is not Python 3 in isolated mode ({status}): the checks \
                     need python3 in /usr/bin or /usr/local/bin"
                ),
            });
        }
        say!("{}", ready_line(nonce, &confined));
        return ExitCode::SUCCESS;
    }
    ExitCode::from(u8::try_from(super::exit_code(status)).unwrap_or(1))
}

/// Namespaces, the new root, Landlock and limits, in that order; says
/// what is enforced.
fn confine(dir: &TaskDir, purpose: Purpose) -> Result<String> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare()?;
    map_ids(uid, gid)?;
    let hidden = mounts::enter_root(dir, purpose)?;
    let landlock = restrict::landlock()?;
    limits()?;
    let python = match purpose {
        Purpose::Run => "",
        Purpose::Check => "; `python` is Python 3 in isolated mode",
    };
    Ok(format!(
        "user, mount, network, PID, IPC and UTS namespaces; only the workspace and a private \
         /tmp writable; system dirs read-only{hidden}; no network; {landlock}{python}"
    ))
}

#[expect(
    unsafe_code,
    reason = "rustix marks unshare unsafe because CLONE_FILES can split a multi-threaded \
              process's fd table; this passes no CLONE_FILES, in a single-threaded process"
)]
fn unshare() -> Result<()> {
    let flags = UnshareFlags::NEWUSER
        | UnshareFlags::NEWNS
        | UnshareFlags::NEWNET
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS
        | UnshareFlags::NEWCGROUP;
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

/// No core dumps (they would land in the workspace), and no file past
/// [`MAX_FILE`].
fn limits() -> Result<()> {
    let set = |resource, limit: u64| {
        rustix::process::setrlimit(
            resource,
            Rlimit {
                current: Some(limit),
                maximum: Some(limit),
            },
        )
        .with_context(|| format!("cannot set {resource:?}"))
    };
    set(Resource::Core, 0)?;
    set(Resource::Fsize, MAX_FILE)?;
    Ok(())
}

/// `/bin/sh -c COMMAND` in the workspace with only [`ENV`] and the
/// purpose's PATH, no stdin; it dies with this helper.
fn shell(command: &str, purpose: Purpose) -> Command {
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
    die_with_parent(&mut cmd);
    cmd
}

#[expect(
    unsafe_code,
    reason = "pre_exec is unsafe; the hook makes one async-signal-safe syscall (prctl)"
)]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl(PR_SET_PDEATHSIG) through rustix: a raw syscall, no
    // allocation, no lock; and this helper is single-threaded anyway.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
}
