//! The sandbox's filesystem: a root of its own, holding only what running
//! programs needs, read-only, and the workspace. Runs in the helper after
//! it entered its mount namespace (so none of this is seen outside, and
//! all of it goes away with the namespace).

use std::ffi::CStr;
use std::path::Path;

use anyhow::{Context, Result, bail};
use rustix::fs::StatVfsMountFlags as Vfs;
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};

use super::enter::WORKDIR;
use crate::cli::rollout::taskdir::TaskDir;

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
/// host's root and sits in the workspace.
pub fn enter_root(dir: &TaskDir) -> Result<()> {
    let root = dir.root();
    // Nothing done here may propagate back to the host's mounts.
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .context("cannot make the mounts private")?;
    rustix::mount::mount(
        "tmpfs",
        &root,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        ROOT_TMPFS,
    )
    .context("cannot mount the sandbox's root (tmpfs)")?;

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

    let tmp = root.join("tmp");
    std::fs::create_dir(&tmp)?;
    rustix::mount::mount(
        "tmpfs",
        &tmp,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        TMP_TMPFS,
    )
    .context("cannot mount /tmp (tmpfs)")?;

    let work = root.join(relative(WORKDIR));
    std::fs::create_dir(&work)?;
    bind(&dir.work(), &work, false)?;

    // Into the new root; the old one is detached and unreachable.
    rustix::process::chdir(&root).context("cannot enter the sandbox's root")?;
    rustix::process::pivot_root(".", ".").context("pivot_root failed")?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).context("cannot detach the host's root")?;
    rustix::process::chdir("/")?;
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
