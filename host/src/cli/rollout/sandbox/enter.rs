//! The helper side of the sandbox (`metaclaw sandbox-exec`): confine this
//! process, then run the command as the first process of its own PID
//! namespace and pass on how it ended. Any step that fails stops it
//! before the command exists (exit status 125, one line saying which).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result};
use rustix::io::Errno;
use rustix::process::{Resource, Rlimit, Signal};
use rustix::thread::UnshareFlags;

use super::{READY, SETUP_EXIT, SETUP_FAILED, mounts, restrict};
use crate::cli::rollout::taskdir::TaskDir;

/// The one user inside: the caller, mapped. Not 0, so the command keeps
/// no capability in its namespaces once it is exec'd.
const INNER_ID: u32 = 1000;
/// Where the workspace is, inside.
pub const WORKDIR: &str = "/work";
/// The command's whole environment.
const ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    ),
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

/// `metaclaw sandbox-exec --dir DIR (--probe | -- COMMAND)`.
pub fn exec(dir: &Path, command: Option<&str>) -> ExitCode {
    // Dies with the rollout that started it.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let confined = match confine(&TaskDir::at(dir.to_path_buf())) {
        Ok(what) => what,
        Err(e) => {
            eprintln!("{SETUP_FAILED} {e:#}");
            return ExitCode::from(SETUP_EXIT);
        }
    };
    let (command, probe) = match command {
        Some(command) => (command, false),
        None => ("true", true),
    };
    let status = match shell(command).status() {
        Ok(status) => status,
        Err(e) => {
            eprintln!("{SETUP_FAILED} cannot start /bin/sh inside: {e}");
            return ExitCode::from(SETUP_EXIT);
        }
    };
    if probe {
        if !status.success() {
            eprintln!("{SETUP_FAILED} `true` failed inside: {status}");
            return ExitCode::from(SETUP_EXIT);
        }
        say!("{READY} {confined}");
        return ExitCode::SUCCESS;
    }
    ExitCode::from(u8::try_from(super::exit_code(status)).unwrap_or(1))
}

/// Namespaces, the new root, Landlock and limits, in that order; says
/// what is enforced.
fn confine(dir: &TaskDir) -> Result<String> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare()?;
    map_ids(uid, gid)?;
    mounts::enter_root(dir)?;
    let landlock = restrict::landlock()?;
    limits()?;
    Ok(format!(
        "user, mount, network, PID, IPC and UTS namespaces; only the workspace and a private \
         /tmp writable; system dirs read-only; no network; {landlock}"
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

/// `/bin/sh -c COMMAND` in the workspace with only [`ENV`], no stdin; it
/// dies with this helper.
fn shell(command: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(WORKDIR)
        .env_clear()
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
