//! The file tools (`read_file`, `write_file`, `list_dir`, `copy_file`,
//! `move_file`) on a task's
//! workspace, in this process: a path the model names is resolved inside
//! the workspace or refused.
//!
//! Two checks, for two reasons. [`relative`] reads the path as text and
//! says clearly what is wrong with it (absolute, or `..` climbing out).
//! Then every open goes through `openat2(2)` from the workspace's own
//! directory fd with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`: the kernel itself refuses any
//! step out of the workspace, any symlink on the path (even one pointing
//! inside), and any mount crossing. Checking a canonicalised path's prefix
//! and then opening it would leave a window in which a command the model
//! ran could swap a directory for a symlink; resolving and opening in one
//! call leaves none. A FIFO or device is never opened for reading or
//! writing a file (`O_NONBLOCK`, then only regular files), so a planted
//! FIFO cannot hang the rollout.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// What a tool may read of one file; past this the result says it was cut
/// (under the tools' 16 KiB result, so that note is always shown).
pub const MAX_READ: usize = 15 * 1024;
/// The most a `write_file` may write.
pub const MAX_WRITE: usize = 1024 * 1024;
/// The most entries a `list_dir` lists.
const MAX_ENTRIES: usize = 500;

/// Why a path or a file operation was refused, in words for the model.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error("absolute paths are refused: name a path relative to the workspace")]
    Absolute,
    #[error("{0:?} leaves the workspace (`..` above its root)")]
    Escapes(String),
    #[error("the path has a NUL byte")]
    Nul,
    #[error("{0:?}: a symlink is on the path, and symlinks are not followed")]
    Symlink(String),
    #[error("{0:?}: no such file or directory")]
    NotFound(String),
    #[error("{0:?} is a directory")]
    IsDir(String),
    #[error("{0:?}: a part of the path is not a directory")]
    NotDir(String),
    #[error("{0:?} is not a regular file")]
    NotRegular(String),
    #[error("content is {0} bytes; a file written takes at most {MAX_WRITE}")]
    TooLarge(usize),
    #[error("{path:?}: {message}")]
    Io { path: String, message: String },
}

/// `path` as the model gave it, checked and normalised as text: relative,
/// without `.` parts, and never climbing above the workspace with `..`
/// (`a/../b` is `b`; `../b` is refused). The empty result is the
/// workspace itself.
pub fn relative(path: &str) -> Result<PathBuf, PathError> {
    if path.contains('\0') {
        return Err(PathError::Nul);
    }
    let mut out = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => return Err(PathError::Absolute),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(PathError::Escapes(path.to_string()));
                }
            }
            Component::Normal(part) => out.push(part),
        }
    }
    Ok(out)
}

/// A task's workspace, held open: every file tool resolves from this fd.
#[derive(Debug)]
pub struct Workspace {
    dir: OwnedFd,
}

impl Workspace {
    /// The workspace at `root` (a directory this process created).
    pub fn open(root: &Path) -> std::io::Result<Self> {
        let dir = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        Ok(Self { dir })
    }

    /// The file's text (lossy UTF-8), cut at [`MAX_READ`] bytes.
    pub fn read_file(&self, path: &str) -> Result<String, PathError> {
        let (_, file) = self.open_regular(path)?;
        let mut bytes = Vec::new();
        file.take(MAX_READ as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, &e))?;
        let cut = bytes.len() > MAX_READ;
        bytes.truncate(MAX_READ);
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if cut {
            text.push_str(&format!("\n[cut at {MAX_READ} bytes]"));
        }
        Ok(text)
    }

    /// Writes `content` to the file (created or replaced), creating its
    /// missing parent directories; says what it wrote.
    pub fn write_file(&self, path: &str, content: &str) -> Result<String, PathError> {
        let rel = self.write_bytes(path, content.as_bytes())?;
        Ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            rel.display()
        ))
    }

    /// Copies a file to `to` (created or replaced, its missing folders
    /// created): the `.bak` before an edit.
    pub fn copy_file(&self, from: &str, to: &str) -> Result<String, PathError> {
        let (rel, file) = self.open_regular(from)?;
        let mut bytes = Vec::new();
        file.take(MAX_WRITE as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(from, &e))?;
        let to_rel = self.write_bytes(to, &bytes)?;
        Ok(format!(
            "copied {} ({} bytes) to {}",
            rel.display(),
            bytes.len(),
            to_rel.display()
        ))
    }

    /// Renames a file or folder to `to` (its missing folders created,
    /// whatever is at `to` replaced as rename(2) does).
    pub fn move_file(&self, from: &str, to: &str) -> Result<String, PathError> {
        let from_rel = relative(from)?;
        let to_rel = relative(to)?;
        let (Some(from_name), Some(from_parent)) = (from_rel.file_name(), from_rel.parent()) else {
            return Err(PathError::IsDir(from.to_string()));
        };
        let (Some(to_name), Some(to_parent)) = (to_rel.file_name(), to_rel.parent()) else {
            return Err(PathError::IsDir(to.to_string()));
        };
        let source = self.resolve(from_parent, dir_flags(), Mode::empty(), from)?;
        let target = self.directories(to_parent, to)?;
        rustix::fs::renameat(&source, from_name, &target, to_name).map_err(|e| errno(e, from))?;
        Ok(format!(
            "moved {} to {}",
            from_rel.display(),
            to_rel.display()
        ))
    }

    /// A regular file beneath the workspace, opened for reading (never a
    /// FIFO or device: `O_NONBLOCK`, then its type checked).
    fn open_regular(&self, path: &str) -> Result<(PathBuf, File), PathError> {
        let rel = relative(path)?;
        if rel.as_os_str().is_empty() {
            return Err(PathError::IsDir(path.to_string()));
        }
        let fd = self.resolve(
            &rel,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
            path,
        )?;
        regular(&fd, path)?;
        Ok((rel, File::from(fd)))
    }

    /// Writes `bytes` to `path` beneath the workspace; its relative path.
    fn write_bytes(&self, path: &str, bytes: &[u8]) -> Result<PathBuf, PathError> {
        if bytes.len() > MAX_WRITE {
            return Err(PathError::TooLarge(bytes.len()));
        }
        let rel = relative(path)?;
        let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
            return Err(PathError::IsDir(path.to_string()));
        };
        let parent = self.directories(parent, path)?;
        let fd = rustix::fs::openat2(
            &parent,
            name,
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::TRUNC
                | OFlags::NONBLOCK
                | OFlags::NOCTTY
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
            beneath(),
        )
        .map_err(|e| errno(e, path))?;
        regular(&fd, path)?;
        File::from(fd)
            .write_all(bytes)
            .map_err(|e| io_error(path, &e))?;
        Ok(rel)
    }

    /// The directory's entries, sorted, one a line: `name/` for a
    /// directory, `name@` for a symlink.
    pub fn list_dir(&self, path: &str) -> Result<String, PathError> {
        let rel = relative(path)?;
        let fd = self.resolve(
            &rel,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
            path,
        )?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| errno(e, path))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| errno(e, path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let suffix = match entry.file_type() {
                rustix::fs::FileType::Directory => "/",
                rustix::fs::FileType::Symlink => "@",
                _ => "",
            };
            names.push(format!("{name}{suffix}"));
        }
        names.sort();
        if names.is_empty() {
            return Ok("(empty)".into());
        }
        let more = names.len().saturating_sub(MAX_ENTRIES);
        names.truncate(MAX_ENTRIES);
        let mut text = names.join("\n");
        if more > 0 {
            text.push_str(&format!("\n[{more} more entries not listed]"));
        }
        Ok(text)
    }

    /// Opens `rel` beneath the workspace (the workspace itself if empty).
    fn resolve(
        &self,
        rel: &Path,
        flags: OFlags,
        mode: Mode,
        shown: &str,
    ) -> Result<OwnedFd, PathError> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        rustix::fs::openat2(&self.dir, rel, flags | OFlags::CLOEXEC, mode, beneath())
            .map_err(|e| errno(e, shown))
    }

    /// The directory `rel` (created with its missing parents), opened.
    fn directories(&self, rel: &Path, shown: &str) -> Result<OwnedFd, PathError> {
        let mut current = self.resolve(Path::new(""), dir_flags(), Mode::empty(), shown)?;
        for part in rel.components() {
            let open =
                || rustix::fs::openat2(&current, part, dir_flags(), Mode::empty(), beneath());
            let next = match open() {
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(&current, part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(errno(e, shown)),
                    }
                    open()
                }
                other => other,
            };
            current = next.map_err(|e| errno(e, shown))?;
        }
        Ok(current)
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// The kernel's containment: no step out, no symlink, no mount crossing.
fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV
}

fn regular(fd: &impl AsFd, shown: &str) -> Result<(), PathError> {
    let stat = rustix::fs::fstat(fd).map_err(|e| errno(e, shown))?;
    match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
        rustix::fs::FileType::RegularFile => Ok(()),
        rustix::fs::FileType::Directory => Err(PathError::IsDir(shown.to_string())),
        _ => Err(PathError::NotRegular(shown.to_string())),
    }
}

fn errno(e: Errno, shown: &str) -> PathError {
    let shown = shown.to_string();
    match e {
        // RESOLVE_NO_SYMLINKS (and O_NOFOLLOW on the last part).
        Errno::LOOP => PathError::Symlink(shown),
        // RESOLVE_BENEATH / RESOLVE_NO_XDEV.
        Errno::XDEV => PathError::Escapes(shown),
        Errno::NOENT => PathError::NotFound(shown),
        Errno::ISDIR => PathError::IsDir(shown),
        Errno::NOTDIR => PathError::NotDir(shown),
        Errno::NOSYS => PathError::Io {
            path: shown,
            message: "the file tools need openat2 (Linux 5.6 or later)".into(),
        },
        other => PathError::Io {
            path: shown,
            message: std::io::Error::from(other).to_string(),
        },
    }
}

fn io_error(shown: &str, e: &std::io::Error) -> PathError {
    PathError::Io {
        path: shown.to_string(),
        message: e.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn paths_are_relative_and_stay_inside() {
        assert_eq!(relative("a/b.txt").unwrap(), PathBuf::from("a/b.txt"));
        assert_eq!(relative("./a//b/./c").unwrap(), PathBuf::from("a/b/c"));
        assert_eq!(relative("a/../b").unwrap(), PathBuf::from("b"));
        assert_eq!(relative(".").unwrap(), PathBuf::new());
        assert_eq!(relative("").unwrap(), PathBuf::new());
        assert_eq!(relative("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(
            relative("../x"),
            Err(PathError::Escapes("../x".to_string()))
        );
        assert_eq!(
            relative("a/../../x"),
            Err(PathError::Escapes("a/../../x".to_string()))
        );
        assert_eq!(relative("a\0b"), Err(PathError::Nul));
        // A name that only looks like a home: a folder called `~`.
        assert_eq!(relative("~/x").unwrap(), PathBuf::from("~/x"));
    }

    #[test]
    fn files_are_read_written_and_listed_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        assert_eq!(
            ws.write_file("src/deep/a.txt", "hello").unwrap(),
            "wrote 5 bytes to src/deep/a.txt"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("src/deep/a.txt")).unwrap(),
            "hello"
        );
        assert_eq!(ws.read_file("src/deep/a.txt").unwrap(), "hello");
        assert_eq!(ws.read_file("src/x/../deep/a.txt").unwrap(), "hello");
        assert_eq!(ws.list_dir("").unwrap(), "src/");
        assert_eq!(ws.list_dir("src").unwrap(), "deep/");
        assert_eq!(ws.list_dir("src/deep").unwrap(), "a.txt");
        assert!(matches!(ws.read_file("src"), Err(PathError::IsDir(_))));
        assert!(matches!(ws.read_file("nope"), Err(PathError::NotFound(_))));
        assert!(matches!(ws.read_file(""), Err(PathError::IsDir(_))));
        assert!(matches!(ws.write_file(".", "x"), Err(PathError::IsDir(_))));

        let big = "x".repeat(MAX_READ + 10);
        ws.write_file("big", &big).unwrap();
        let read = ws.read_file("big").unwrap();
        assert!(
            read.ends_with(&format!("[cut at {MAX_READ} bytes]")),
            "{read}"
        );
        assert!(matches!(
            ws.write_file("huge", &"x".repeat(MAX_WRITE + 1)),
            Err(PathError::TooLarge(_))
        ));
    }

    #[test]
    fn files_are_copied_and_moved_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        ws.write_file("day07/api_docs.md", "v1").unwrap();
        assert_eq!(
            ws.copy_file("day07/api_docs.md", "day07/api_docs.md.bak")
                .unwrap(),
            "copied day07/api_docs.md (2 bytes) to day07/api_docs.md.bak"
        );
        ws.write_file("day07/api_docs.md", "v2").unwrap();
        assert_eq!(ws.read_file("day07/api_docs.md.bak").unwrap(), "v1");
        assert_eq!(
            ws.move_file("day07/api_docs.md", "archive/20260406_api_docs.md")
                .unwrap(),
            "moved day07/api_docs.md to archive/20260406_api_docs.md"
        );
        assert_eq!(ws.read_file("archive/20260406_api_docs.md").unwrap(), "v2");
        assert!(matches!(
            ws.read_file("day07/api_docs.md"),
            Err(PathError::NotFound(_))
        ));
        assert!(matches!(
            ws.copy_file("nope", "x"),
            Err(PathError::NotFound(_))
        ));
        assert!(matches!(
            ws.move_file("../x", "y"),
            Err(PathError::Escapes(_))
        ));
        assert_eq!(
            ws.copy_file("archive/20260406_api_docs.md", "/etc/x"),
            Err(PathError::Absolute)
        );
        assert_eq!(
            ws.move_file("archive/20260406_api_docs.md", "../x"),
            Err(PathError::Escapes("../x".to_string()))
        );

        // A symlink is never copied through, nor a folder made through one.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        symlink(outside.path().join("secret"), tmp.path().join("link")).unwrap();
        symlink(outside.path(), tmp.path().join("out-dir")).unwrap();
        assert_eq!(
            ws.copy_file("link", "stolen"),
            Err(PathError::Symlink("link".to_string()))
        );
        assert_eq!(
            ws.move_file("archive/20260406_api_docs.md", "out-dir/x"),
            Err(PathError::Symlink("out-dir/x".to_string()))
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn symlinks_are_never_followed_wherever_they_point() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspace::open(tmp.path()).unwrap();
        ws.write_file("inside.txt", "inside").unwrap();
        symlink(outside.path().join("secret"), tmp.path().join("out-file")).unwrap();
        symlink(outside.path(), tmp.path().join("out-dir")).unwrap();
        symlink("inside.txt", tmp.path().join("in-file")).unwrap();
        symlink("/", tmp.path().join("root")).unwrap();

        for path in ["out-file", "out-dir/secret", "in-file", "root/etc/passwd"] {
            assert_eq!(
                ws.read_file(path),
                Err(PathError::Symlink(path.to_string())),
                "{path}"
            );
        }
        for path in ["out-file", "out-dir/new", "out-dir/deeper/new", "in-file"] {
            assert_eq!(
                ws.write_file(path, "pwned"),
                Err(PathError::Symlink(path.to_string())),
                "{path}"
            );
        }
        assert_eq!(
            ws.list_dir("out-dir"),
            Err(PathError::Symlink("out-dir".to_string()))
        );
        // Nothing outside was touched, and the listing shows the links as such.
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "secret"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        assert_eq!(
            ws.list_dir(".").unwrap(),
            "in-file@\ninside.txt\nout-dir@\nout-file@\nroot@"
        );
    }

    #[test]
    fn a_fifo_is_refused_instead_of_hanging() {
        let tmp = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(tmp.path().join("pipe"))
            .status()
            .unwrap();
        assert!(status.success());
        let ws = Workspace::open(tmp.path()).unwrap();
        assert_eq!(
            ws.read_file("pipe"),
            Err(PathError::NotRegular("pipe".to_string()))
        );
        // No reader: opening for writing fails at once (ENXIO).
        assert!(ws.write_file("pipe", "x").is_err());
    }
}
