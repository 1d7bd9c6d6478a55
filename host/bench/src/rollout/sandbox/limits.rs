//! What one sandboxed command may use: processes, memory, CPU time and
//! disk. Each is bounded by the strongest mechanism this host allows, and
//! the probe says which (see [`super`] and docs/rl.md):
//!
//! - **processes**: `pids.max` of the command's cgroup ([`super::cgroup`])
//!   where metaclaw can make one; always also `RLIMIT_NPROC`, which since
//!   Linux 5.14 counts the processes of the sandbox's own user namespace
//!   only. Without a cgroup the helper checks that the rlimit holds (it
//!   does not for root, whom the kernel exempts, nor before 5.14) and
//!   refuses to run the command if it does not;
//! - **memory**: `memory.max` of the cgroup (a true total); without one,
//!   `RLIMIT_AS` per process, so the total is at most processes × memory;
//! - **CPU time**: `RLIMIT_CPU` per process (SIGXCPU, then SIGKILL a
//!   second later), besides the wall-clock deadline of the whole call;
//! - **disk**: the workspace is a size-limited tmpfs holding a copy
//!   ([`super::mirror`]), so writes past the limit fail with ENOSPC; no
//!   file over 64 MiB (`RLIMIT_FSIZE`); `/tmp` is a 64 MiB tmpfs.

use anyhow::{Context, Result, bail};
use rustix::process::{Resource, Rlimit};

/// The largest file the command may write (RLIMIT_FSIZE).
pub const MAX_FILE: u64 = 64 * 1024 * 1024;
/// The most files and folders the workspace's copy may hold (tmpfs
/// `nr_inodes`), as many as a workspace may hold to be copied.
pub const MAX_INODES: usize = super::scratch::MAX_ENTRIES;

/// The limits of one `run` call (rollout flags `--run-processes`,
/// `--run-memory-mb`, `--run-cpu-secs`, `--run-disk-mb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Processes (and threads) at once, the shell included.
    pub processes: u32,
    /// Memory of the whole command (per process without a cgroup).
    pub memory_mb: u64,
    /// CPU seconds per process.
    pub cpu_secs: u64,
    /// What the workspace may hold after the command (its size-limited
    /// copy), what was there before included.
    pub disk_mb: u64,
}

impl Default for Limits {
    /// Room for a build or a test suite of a small project (a compiler
    /// with a few hundred threads and processes, a GiB of memory), far
    /// below what would trouble the host.
    fn default() -> Self {
        Self {
            processes: 256,
            memory_mb: 1024,
            cpu_secs: 60,
            disk_mb: 256,
        }
    }
}

impl Limits {
    pub fn memory_bytes(&self) -> u64 {
        self.memory_mb.saturating_mul(1024 * 1024)
    }

    pub fn disk_bytes(&self) -> u64 {
        self.disk_mb.saturating_mul(1024 * 1024)
    }
}

/// What bounds the command's processes and memory in this call: a cgroup
/// the helper joined, or rlimits alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Cgroup,
    Rlimit,
}

/// Sets the rlimits of the helper (and so of the command): no core dumps,
/// files, CPU time, processes, and (without a memory cgroup) address
/// space per process. Without a pids cgroup, checks that `RLIMIT_NPROC`
/// holds. Says what bounds what.
pub fn apply(limits: &Limits, bound: Bound) -> Result<String> {
    set(Resource::Core, 0, 0)?;
    set(Resource::Fsize, MAX_FILE, MAX_FILE)?;
    // SIGXCPU at the limit, SIGKILL a second later.
    set(
        Resource::Cpu,
        limits.cpu_secs,
        limits.cpu_secs.saturating_add(1),
    )?;
    let processes = u64::from(limits.processes);
    set(Resource::Nproc, processes, processes)?;
    let (processes, memory) = match bound {
        Bound::Cgroup => (
            format!("{} processes (cgroup pids.max)", limits.processes),
            format!("{} MiB in all (cgroup memory limit)", limits.memory_mb),
        ),
        Bound::Rlimit => {
            set(Resource::As, limits.memory_bytes(), limits.memory_bytes())?;
            nproc_holds()?;
            (
                format!(
                    "{} processes (RLIMIT_NPROC of the user namespace)",
                    limits.processes
                ),
                format!(
                    "{} MiB a process (RLIMIT_AS; no cgroup, so at most {} MiB in all)",
                    limits.memory_mb,
                    limits.memory_mb.saturating_mul(u64::from(limits.processes))
                ),
            )
        }
    };
    Ok(format!(
        "limits: {processes}, {memory}, {} CPU s a process (RLIMIT_CPU), {} MiB of workspace \
         (tmpfs copy) and 64 MiB of /tmp, files up to {} MiB",
        limits.cpu_secs,
        limits.disk_mb,
        MAX_FILE >> 20
    ))
}

fn set(resource: Resource, current: u64, maximum: u64) -> Result<()> {
    rustix::process::setrlimit(
        resource,
        Rlimit {
            current: Some(current),
            maximum: Some(maximum),
        },
    )
    .with_context(|| format!("cannot set {resource:?}"))
}

/// A shell whose `RLIMIT_NPROC` is 1 must not be able to start a process
/// (the helper and the shell already count 2 in the user namespace).
/// Root is exempt from the limit, and kernels before 5.14 count all of
/// the user's processes: there, without a cgroup, nothing bounds them.
#[expect(
    unsafe_code,
    reason = "pre_exec is unsafe; the hook makes one async-signal-safe syscall (setrlimit)"
)]
fn nproc_holds() -> Result<()> {
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "/bin/true && exit 7; exit 0"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: runs in the forked child before exec and only calls
    // setrlimit through rustix (a raw syscall, no allocation, no lock);
    // the helper is single-threaded.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            rustix::process::setrlimit(
                Resource::Nproc,
                Rlimit {
                    current: Some(1),
                    maximum: Some(1),
                },
            )
            .map_err(std::io::Error::from)
        });
    }
    let status = cmd
        .status()
        .context("cannot check RLIMIT_NPROC (/bin/sh)")?;
    // 7: the shell started `true`; anything else but a signal: it could not.
    if matches!(status.code(), Some(7) | None) {
        bail!(
            "cannot bound the number of processes: no cgroup could be made for the command, and \
             RLIMIT_NPROC does not hold here (metaclaw runs as root, whom the kernel exempts, or \
             Linux is older than 5.14); run metaclaw as an ordinary user, or as root with a \
             writable cgroup tree"
        );
    }
    Ok(())
}
