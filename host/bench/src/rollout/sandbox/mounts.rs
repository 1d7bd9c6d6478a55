//! The sandbox's filesystem: a root of its own, holding only what running
//! programs needs, read-only, and the workspace. Runs in the helper after
//! it entered its mount namespace (so none of this is seen outside, and
//! all of it goes away with the namespace).
//!
//! metaclaw's own binary holds the bench's data, gold answers included:
//! when it lies under a system folder bound here (installed as
//! `/usr/local/bin/metaclaw`), `/dev/null` is bound over it, read-only
//! and `nodev`, so it cannot be opened inside; the helper checks that
//! before anything runs.

use std::ffi::{CStr, CString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rustix::fs::StatVfsMountFlags as Vfs;
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use super::Purpose;
use super::enter::{CHECK_BIN, PATH, WORKDIR};
use super::limits::{Limits, MAX_INODES};
use crate::rollout::taskdir::TaskDir;

/// Bound read-only at the same place (a symlink, as merged-/usr systems
/// have for `/bin`, is copied as a symlink; a missing one is skipped).
pub const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// Of the host's `/etc`, only these, read-only: the loader's cache and
/// Debian's alternatives (`awk`, `editor`: symlinks into `/usr`).
const ETC: &[&str] = &["/etc/ld.so.cache", "/etc/alternatives"];
/// The devices a program may expect; bound from the host's `/dev`.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];
/// The only users and groups inside: the sandbox's and nobody (files of
/// unmapped owners show as nobody).
const PASSWD: &str = "sandbox:x:1000:1000:metaclaw rollout sandbox:/work:/bin/sh\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "sandbox:x:1000:\nnogroup:x:65534:\n";
const ROOT_TMPFS: &CStr = c"mode=0755,size=4m";
const TMP_TMPFS: &CStr = c"mode=1777,size=64m";

/// Builds the new root on `dir`'s mount point, moves into it, drops the
/// host's root and sits in the workspace; for a check, with `python`
/// wrappers. Says what of metaclaw was hidden ("" when nothing was
/// under the system folders).
pub fn enter_root(dir: &TaskDir, purpose: Purpose, limits: &Limits) -> Result<String> {
    let root = dir.root();
    mount_root(&root)?;
    bind_system(&root)?;
    // Before anything else is mounted in the root: only the system
    // folders can hold the binary's path.
    let hidden = hide_own_binary(&root)?;
    synthetic_etc(&root)?;
    bind_devices(&root)?;
    mount_tmp(&root)?;

    let work = root.join(relative(WORKDIR));
    std::fs::create_dir(&work)?;
    workspace_copy(&dir.work(), &work, limits)?;

    pivot_into(&root, purpose)?;
    confirm_hidden(hidden)
}

/// A private tmpfs on `root`, the new root's filesystem.
fn mount_root(root: &Path) -> Result<()> {
    // Nothing done here may propagate back to the host's mounts.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .context("cannot make the mounts private")?;
    rustix::mount::mount(
        "tmpfs",
        root,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        ROOT_TMPFS,
    )
    .context("cannot mount the sandbox's root (tmpfs)")
}

/// [`SYSTEM`]'s folders bound read-only in `root`, its symlinks copied.
fn bind_system(root: &Path) -> Result<()> {
    for system in SYSTEM {
        let source = Path::new(system);
        let target = root.join(relative(system));
        match std::fs::symlink_metadata(source) {
            Err(_) => continue,
            Ok(meta) if meta.file_type().is_symlink() => {
                let to = std::fs::read_link(source)
                    .with_context(|| format!("cannot read the symlink {system}"))?;
                std::os::unix::fs::symlink(&to, &target)
                    .with_context(|| format!("cannot copy the symlink {system}"))?;
            }
            Ok(meta) if meta.is_dir() => {
                std::fs::create_dir(&target)?;
                bind(source, &target, true)?;
            }
            Ok(_) => continue,
        }
    }
    Ok(())
}

/// `root`'s `/etc`: the sandbox's users and names, and [`ETC`] bound
/// read-only.
fn synthetic_etc(root: &Path) -> Result<()> {
    let etc = root.join("etc");
    std::fs::create_dir(&etc)?;
    std::fs::write(etc.join("passwd"), PASSWD)?;
    std::fs::write(etc.join("group"), GROUP)?;
    std::fs::write(etc.join("hostname"), "sandbox\n")?;
    std::fs::write(etc.join("hosts"), "127.0.0.1 localhost sandbox\n")?;
    for file in ETC {
        let source = Path::new(file);
        let target = root.join(relative(file));
        match std::fs::metadata(source) {
            Ok(meta) if meta.is_dir() => std::fs::create_dir(&target)?,
            Ok(meta) if meta.is_file() => drop(std::fs::File::create(&target)?),
            _ => continue,
        }
        bind(source, &target, true)?;
    }
    Ok(())
}

/// `root`'s `/dev`: the host's [`DEVICES`] that exist, bound.
fn bind_devices(root: &Path) -> Result<()> {
    let dev = root.join("dev");
    std::fs::create_dir(&dev)?;
    for device in DEVICES {
        let source = Path::new("/dev").join(device);
        if !source.exists() {
            continue;
        }
        let target = dev.join(device);
        drop(std::fs::File::create(&target)?);
        rustix::mount::mount_bind(&source, &target)
            .with_context(|| format!("cannot bind {}", source.display()))?;
    }
    Ok(())
}

/// `root`'s `/tmp`: a private tmpfs.
fn mount_tmp(root: &Path) -> Result<()> {
    let tmp = root.join("tmp");
    std::fs::create_dir(&tmp)?;
    rustix::mount::mount(
        "tmpfs",
        &tmp,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        TMP_TMPFS,
    )
    .context("cannot mount /tmp (tmpfs)")
}

/// Moves into `root` (for a check, adding the `python` wrappers), makes
/// it read-only and sits in the workspace; fails if the host's `/proc`
/// is still there.
fn pivot_into(root: &Path, purpose: Purpose) -> Result<()> {
    // Into the new root; the old one is detached and unreachable.
    rustix::process::chdir(root).context("cannot enter the sandbox's root")?;
    rustix::process::pivot_root(".", ".").context("pivot_root failed")?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).context("cannot detach the host's root")?;
    rustix::process::chdir("/")?;
    if purpose == Purpose::Check {
        python_wrappers()?;
    }
    // The root itself (its /etc, the mount points) read-only too.
    rustix::mount::mount_remount(
        "/",
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        "",
    )
    .context("cannot make the sandbox's root read-only")?;
    rustix::process::chdir(WORKDIR).context("cannot enter the workspace")?;
    if std::fs::metadata("/proc/self").is_ok() {
        bail!("the host's /proc is still visible");
    }
    Ok(())
}

/// Inside the new root: fails if metaclaw's binary, `hidden`, can still
/// be read; what [`enter_root`] says of it.
fn confirm_hidden(hidden: Option<PathBuf>) -> Result<String> {
    match hidden {
        None => Ok(String::new()),
        Some(exe) => {
            let mut byte = [0u8; 1];
            let readable = std::fs::File::open(&exe)
                .and_then(|mut f| std::io::Read::read(&mut f, &mut byte))
                .is_ok_and(|n| n > 0);
            if readable {
                bail!("metaclaw's own binary {} is still readable", exe.display());
            }
            Ok(format!("; metaclaw's binary ({}) hidden", exe.display()))
        }
    }
}

/// `/work`: a tmpfs of the disk limit's size holding a copy of the
/// workspace (mirrored back after the command, [`super::mirror`]), so a
/// command that fills it gets ENOSPC and the host's disk is never
/// touched.
fn workspace_copy(from: &Path, to: &Path, limits: &Limits) -> Result<()> {
    let options = CString::new(format!(
        "mode=0700,size={},nr_inodes={}",
        limits.disk_bytes(),
        MAX_INODES + 16
    ))?;
    rustix::mount::mount(
        "tmpfs",
        to,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        options.as_c_str(),
    )
    .context("cannot mount the workspace's copy (tmpfs)")?;
    match super::copy_workspace(from, to) {
        Ok(()) => Ok(()),
        Err(e)
            if e.to_string().contains("No space left")
                || e.to_string().contains("(os error 28)") =>
        {
            bail!(
                "the workspace holds more than the disk limit of {} MiB: remove files, or raise \
             --run-disk-mb",
                limits.disk_mb
            )
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

/// Binds `/dev/null` over metaclaw's own binary when it is under a bound
/// system folder; its path then, `None` when it is not there.
fn hide_own_binary(root: &Path) -> Result<Option<PathBuf>> {
    let link = std::fs::read_link("/proc/self/exe").context("cannot read /proc/self/exe")?;
    // A binary replaced since it started: its path may hold the new one.
    let text = link.to_string_lossy();
    let exe = PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(&text));
    let bound = SYSTEM
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .any(|dir| exe.starts_with(dir));
    if !bound {
        return Ok(None);
    }
    let target = root.join(relative(&exe.to_string_lossy()));
    if std::fs::symlink_metadata(&target).is_ok() {
        bind(Path::new("/dev/null"), &target, true)
            .with_context(|| format!("cannot hide metaclaw's binary {}", exe.display()))?;
    }
    Ok(Some(exe))
}

/// `CHECK_BIN/python` and `python3`: the system's Python 3 in isolated
/// mode (`-I`: no `PYTHON*` variables, no user site, neither the script's
/// folder nor the working folder on `sys.path`, so nothing in the
/// workspace can stand in for a module) and writing no bytecode. Run
/// inside the new root, before it is made read-only.
fn python_wrappers() -> Result<()> {
    let python3 = PATH
        .split(':')
        .map(|dir| Path::new(dir).join("python3"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the bench's checks run Python, and there is no python3 in the sandbox's system \
                 folders ({PATH}): install python3"
            )
        })?;
    let bin = Path::new(CHECK_BIN);
    std::fs::create_dir_all(bin).with_context(|| format!("cannot create {CHECK_BIN}"))?;
    let script = format!("#!/bin/sh\nexec {} -I -B \"$@\"\n", python3.display());
    for name in ["python", "python3"] {
        let file = bin.join(name);
        std::fs::write(&file, &script)
            .and_then(|()| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o555)))
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

/// Binds `source` on `target`, then remounts it `nosuid,nodev` (and
/// read-only if `read_only`), keeping the flags the host's mount has:
/// inside a user namespace, those are locked and a remount that drops one
/// is refused.
fn bind(source: &Path, target: &Path, read_only: bool) -> Result<()> {
    rustix::mount::mount_bind(source, target)
        .with_context(|| format!("cannot bind {}", source.display()))?;
    let host = rustix::fs::statvfs(source)
        .with_context(|| format!("cannot read the mount flags of {}", source.display()))?
        .f_flag;
    let mut flags = MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV;
    if read_only || host.contains(Vfs::RDONLY) {
        flags |= MountFlags::RDONLY;
    }
    for (vfs, mount) in [
        (Vfs::NOEXEC, MountFlags::NOEXEC),
        (Vfs::NOATIME, MountFlags::NOATIME),
        (Vfs::NODIRATIME, MountFlags::NODIRATIME),
        (Vfs::RELATIME, MountFlags::RELATIME),
        (Vfs::SYNCHRONOUS, MountFlags::SYNCHRONOUS),
    ] {
        if host.contains(vfs) {
            flags |= mount;
        }
    }
    if !host.intersects(Vfs::NOATIME | Vfs::RELATIME) {
        flags |= MountFlags::STRICTATIME;
    }
    rustix::mount::mount_remount(target, flags, "")
        .with_context(|| format!("cannot remount {}", target.display()))
}

/// `/usr` → `usr`: a path under the new root.
fn relative(path: &str) -> &str {
    path.trim_start_matches('/')
}
