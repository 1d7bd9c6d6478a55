//! The workspace's way back: after the command and every process it
//! started are gone, the helper makes the real workspace what the
//! command left in its size-limited copy (`/work`, a tmpfs): changed
//! files written, missing ones removed, folders made, symlinks copied as
//! links and FIFOs made again (never followed, never opened), sockets and
//! devices left out, modes without setuid, setgid or sticky bits (the
//! helper writes as the user who runs metaclaw). Files whose size, modification time and mode are
//! those of the real one are not rewritten (the copy was made with the
//! real files' times).
//!
//! The real workspace is reached only through a directory fd opened
//! before the sandbox's root replaced the host's, and every path under it
//! is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: a
//! link the command left can never lead the helper outside.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat, Timestamps};

/// What an entry is, as far as mirroring cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Fifo,
    Other,
}

fn kind(stat: &Stat) -> Kind {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Directory => Kind::Dir,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Link,
        FileType::Fifo => Kind::Fifo,
        _ => Kind::Other,
    }
}

/// Opens the workspace folder `path` (before the root changes): the fd
/// [`mirror`] writes through.
pub fn open_real(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Makes the folder behind `real` hold what `copy` holds.
/// A folder of the copy that could not be mirrored: which, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {error}", .path.display())]
pub struct MirrorFailed {
    pub path: PathBuf,
    pub error: std::io::Error,
}

pub fn mirror(copy: &Path, real: BorrowedFd<'_>) -> Result<(), MirrorFailed> {
    let copy_root = open_real(copy).map_err(|error| MirrorFailed {
        path: copy.to_path_buf(),
        error,
    })?;
    // Folders still to mirror: a loop, so a deep tree cannot exhaust the
    // stack.
    let mut folders = vec![PathBuf::new()];
    while let Some(rel) = folders.pop() {
        sync(copy_root.as_fd(), real, &rel, &mut folders).map_err(|error| MirrorFailed {
            path: Path::new("/work").join(&rel),
            error,
        })?;
    }
    Ok(())
}

/// One folder `rel` of the copy onto the real one; its subfolders go on
/// `folders`.
fn sync(
    copy_root: BorrowedFd<'_>,
    real: BorrowedFd<'_>,
    rel: &Path,
    folders: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let from = open_dir(copy_root, rel)?;
    let to = open_dir(real, rel)?;
    let wanted = entries(&from)?;
    let present = entries(&to)?;
    for (name, stat) in &present {
        let keep = wanted
            .iter()
            .find(|(n, _)| n == name)
            .is_some_and(|(_, s)| kind(s) == kind(stat));
        if !keep {
            remove(to.as_fd(), name, kind(stat))?;
        }
    }
    for (name, stat) in wanted {
        let old = present.iter().find(|(n, _)| *n == name).map(|(_, s)| s);
        let old = old.filter(|s| kind(s) == kind(&stat));
        let mode = Mode::from_raw_mode(stat.st_mode & 0o777);
        match kind(&stat) {
            Kind::Dir => {
                match old {
                    None => rustix::fs::mkdirat(&to, name.as_c_str(), mode)?,
                    Some(old) if old.st_mode & 0o777 != stat.st_mode & 0o777 => {
                        rustix::fs::chmodat(&to, name.as_c_str(), mode, AtFlags::empty())?
                    }
                    Some(_) => {}
                }
                folders.push(rel.join(OsStr::from_bytes(name.as_bytes())));
            }
            Kind::File => {
                let same = old.is_some_and(|old| {
                    old.st_size == stat.st_size
                        && old.st_mtime == stat.st_mtime
                        && old.st_mtime_nsec == stat.st_mtime_nsec
                        && old.st_mode & 0o777 == stat.st_mode & 0o777
                });
                if !same {
                    copy_file(&from, &to, &name, &stat)?;
                }
            }
            Kind::Link => {
                let target = rustix::fs::readlinkat(&from, name.as_c_str(), Vec::new())?;
                if let Some(_old) = old {
                    let current = rustix::fs::readlinkat(&to, name.as_c_str(), Vec::new())?;
                    if current == target {
                        continue;
                    }
                    rustix::fs::unlinkat(&to, name.as_c_str(), AtFlags::empty())?;
                }
                rustix::fs::symlinkat(target.as_c_str(), &to, name.as_c_str())?;
            }
            Kind::Fifo => {
                if old.is_none() {
                    rustix::fs::mknodat(&to, name.as_c_str(), FileType::Fifo, mode, 0)?;
                }
            }
            Kind::Other => {}
        }
    }
    Ok(())
}

/// A folder under `root`, never through a symlink or out of it.
fn open_dir(root: BorrowedFd<'_>, rel: &Path) -> std::io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    Ok(rustix::fs::openat2(
        root,
        rel,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )?)
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

/// A folder's entries (not `.` and `..`), as they are (links not followed).
fn entries(dir: &OwnedFd) -> std::io::Result<Vec<(CString, Stat)>> {
    let mut list = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        list.push((name.to_owned(), stat));
    }
    Ok(list)
}

/// Removes `name` from `dir`, a folder with everything in it.
fn remove(dir: BorrowedFd<'_>, name: &CStr, kind: Kind) -> std::io::Result<()> {
    if kind == Kind::Dir {
        let sub = open_dir(dir, Path::new(OsStr::from_bytes(name.to_bytes())))?;
        for (child, stat) in entries(&sub)? {
            remove(sub.as_fd(), &child, self::kind(&stat))?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    } else {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
    }
    Ok(())
}

/// `name` of `from` over `name` of `to`, with its mode and times.
fn copy_file(from: &OwnedFd, to: &OwnedFd, name: &CStr, stat: &Stat) -> std::io::Result<()> {
    let rel = Path::new(OsStr::from_bytes(name.to_bytes()));
    let source = rustix::fs::openat2(
        from,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )?;
    if FileType::from_raw_mode(rustix::fs::fstat(&source)?.st_mode) != FileType::RegularFile {
        return Err(std::io::Error::other("not a regular file"));
    }
    let target = rustix::fs::openat2(
        to,
        rel,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
        beneath(),
    )?;
    let (mut source, mut target) = (File::from(source), File::from(target));
    std::io::copy(&mut source, &mut target)?;
    rustix::fs::fchmod(&target, Mode::from_raw_mode(stat.st_mode & 0o777))?;
    rustix::fs::futimens(&target, &times(stat))?;
    Ok(())
}

/// `stat`'s access and modification times.
pub(super) fn times(stat: &Stat) -> Timestamps {
    Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: stat.st_atime as _,
            tv_nsec: stat.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: stat.st_mtime as _,
            tv_nsec: stat.st_mtime_nsec as _,
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_real_folder_becomes_the_copy_and_no_link_is_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        let real = tempfile::tempdir().unwrap();
        let r = real.path();
        std::fs::create_dir_all(r.join("gone/deep")).unwrap();
        std::fs::write(r.join("gone/deep/f"), "x").unwrap();
        std::fs::write(r.join("kept.txt"), "old").unwrap();
        std::fs::write(r.join("same.txt"), "same").unwrap();
        // A link in the real folder where the copy has a folder: replaced,
        // never written through.
        std::os::unix::fs::symlink(outside.path(), r.join("was-link")).unwrap();

        let copy = tempfile::tempdir().unwrap();
        crate::rollout::sandbox::copy_workspace(r, copy.path()).unwrap();
        let c = copy.path();
        std::fs::remove_dir_all(c.join("gone")).unwrap();
        std::fs::write(c.join("kept.txt"), "new content").unwrap();
        std::fs::create_dir_all(c.join("new/dir")).unwrap();
        std::fs::write(c.join("new/dir/file"), "made").unwrap();
        std::fs::remove_file(c.join("was-link")).unwrap();
        std::fs::create_dir(c.join("was-link")).unwrap();
        std::fs::write(c.join("was-link/secret"), "mine").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), c.join("out")).unwrap();

        let fd = open_real(r).unwrap();
        mirror(c, fd.as_fd()).unwrap();
        assert!(!r.join("gone").exists());
        assert_eq!(
            std::fs::read_to_string(r.join("kept.txt")).unwrap(),
            "new content"
        );
        assert_eq!(std::fs::read_to_string(r.join("same.txt")).unwrap(), "same");
        assert_eq!(
            std::fs::read_to_string(r.join("new/dir/file")).unwrap(),
            "made"
        );
        assert!(
            std::fs::symlink_metadata(r.join("was-link"))
                .unwrap()
                .is_dir()
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "secret"
        );
        assert_eq!(
            std::fs::read_link(r.join("out")).unwrap(),
            outside.path().join("secret")
        );
        // Mirrored again unchanged: nothing to do, nothing lost.
        mirror(c, fd.as_fd()).unwrap();
        assert_eq!(
            std::fs::read_to_string(r.join("kept.txt")).unwrap(),
            "new content"
        );
    }
}
