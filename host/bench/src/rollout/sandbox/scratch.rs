//! A scratch copy of a workspace, for a command that must not change the
//! real one (a bench check): folders, regular files, symlinks copied as
//! links (never followed, so a link the agent left cannot make the copy
//! read outside the workspace) and FIFOs made again (never opened);
//! sockets and devices are left out. Bounded: past [`MAX_BYTES`] or
//! [`MAX_ENTRIES`] the copy stops and says so.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

/// The most file content copied.
pub const MAX_BYTES: u64 = 1 << 30;
/// The most entries (files, folders, links) copied.
pub const MAX_ENTRIES: usize = 100_000;

/// Why a workspace was not copied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CopyError {
    /// Past the limits: what the agent left is too large to check.
    #[error("the workspace is too large to check: {0}")]
    TooLarge(String),
    /// Reading the workspace or writing the copy failed.
    #[error("cannot copy the workspace: {0}")]
    Io(String),
}

/// Copies the workspace `from` into the empty folder `to`.
pub fn copy_workspace(from: &Path, to: &Path) -> Result<(), CopyError> {
    let io = |what: &Path, e: std::io::Error| CopyError::Io(format!("{}: {e}", what.display()));
    let (mut bytes, mut entries) = (0u64, 0usize);
    // Relative folders still to copy: a loop, not recursion, so a deep
    // tree cannot exhaust the stack.
    let mut folders = vec![PathBuf::new()];
    while let Some(rel) = folders.pop() {
        let source = from.join(&rel);
        let mut names: Vec<_> = std::fs::read_dir(&source)
            .map_err(|e| io(&source, e))?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| io(&source, e))?;
        names.sort();
        for name in names {
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(CopyError::TooLarge(format!(
                    "more than {MAX_ENTRIES} files and folders"
                )));
            }
            let rel = rel.join(&name);
            let (src, dst) = (from.join(&rel), to.join(&rel));
            let meta = std::fs::symlink_metadata(&src).map_err(|e| io(&src, e))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                std::fs::create_dir(&dst).map_err(|e| io(&dst, e))?;
                folders.push(rel);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&src).map_err(|e| io(&src, e))?;
                std::os::unix::fs::symlink(&target, &dst).map_err(|e| io(&dst, e))?;
            } else if kind.is_file() {
                bytes = bytes.saturating_add(meta.len());
                if bytes > MAX_BYTES {
                    return Err(CopyError::TooLarge(format!(
                        "more than {} MiB of files",
                        MAX_BYTES >> 20
                    )));
                }
                copy_file(&src, &dst, &meta).map_err(|e| io(&src, e))?;
            } else if rustix::fs::FileType::from_raw_mode(std::os::unix::fs::MetadataExt::mode(
                &meta,
            )) == FileType::Fifo
            {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &dst,
                    FileType::Fifo,
                    Mode::from_raw_mode(0o644),
                    0,
                )
                .map_err(|e| io(&dst, e.into()))?;
            }
        }
    }
    Ok(())
}

/// One regular file, opened without following a link and without
/// blocking (should it have become something else since it was looked
/// at), at most its length then, with its mode and times (the sandbox's
/// [`super::mirror`] tells changed files by them).
fn copy_file(src: &Path, dst: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let flags = (OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(src)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let stat = rustix::fs::fstat(&file)?;
    let mut out = File::create_new(dst)?;
    std::io::copy(&mut file.take(meta.len()), &mut out)?;
    out.flush()?;
    out.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o777))?;
    rustix::fs::futimens(&out, &super::mirror::times(&stat))?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_files_folders_links_and_fifos_and_follows_no_link() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        let from = tempfile::tempdir().unwrap();
        let w = from.path();
        std::fs::create_dir_all(w.join("a/b")).unwrap();
        std::fs::write(w.join("a/b/file.md"), "hello").unwrap();
        std::fs::write(w.join("top.txt"), "top").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), w.join("out-file")).unwrap();
        std::os::unix::fs::symlink(outside.path(), w.join("out-dir")).unwrap();
        std::os::unix::fs::symlink("top.txt", w.join("in-link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            w.join("pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();

        let to = tempfile::tempdir().unwrap();
        copy_workspace(w, to.path()).unwrap();
        let t = to.path();
        assert_eq!(
            std::fs::read_to_string(t.join("a/b/file.md")).unwrap(),
            "hello"
        );
        assert_eq!(std::fs::read_to_string(t.join("top.txt")).unwrap(), "top");
        for (link, target) in [
            ("out-file", outside.path().join("secret")),
            ("out-dir", outside.path().to_path_buf()),
            ("in-link", PathBuf::from("top.txt")),
        ] {
            assert_eq!(std::fs::read_link(t.join(link)).unwrap(), target, "{link}");
        }
        // The folder a link points at was not copied through it.
        assert!(
            std::fs::symlink_metadata(t.join("out-dir"))
                .unwrap()
                .is_symlink()
        );
        let pipe = std::fs::symlink_metadata(t.join("pipe")).unwrap();
        assert_eq!(
            FileType::from_raw_mode(std::os::unix::fs::MetadataExt::mode(&pipe)),
            FileType::Fifo
        );
    }
}
