//! Plugin files on disk, looked at before anything is read: only regular
//! `.wasm` files inside the folder (a symbolic link leading out of it is
//! refused without reading its target), no larger than `plugins.max_file_mb`
//! (checked on the file's metadata, so a sparse multi-GiB file costs
//! nothing), and re-read only when they change (device, inode, size,
//! modification and change times).

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Identifies one version of a file without reading it. A file replaced,
/// rewritten, or even only touched gets a new stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    pub len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(m: &fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }
}

impl Stamp {
    /// A component compiled into the binary never changes.
    pub fn embedded(len: u64) -> Self {
        Self {
            dev: 0,
            ino: 0,
            len,
            mtime_ns: 0,
            ctime_ns: 0,
        }
    }
}

/// The stamp of the file at `path` (following links), if there is one.
pub fn stamp_of(path: &Path) -> Option<Stamp> {
    fs::metadata(path).ok().map(|m| Stamp::of(&m))
}

/// Why a plugin file is not read, or not loaded as read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FileRefused {
    #[error("cannot stat: {0}")]
    Stat(String),
    #[error("a symbolic link that leads nowhere: refused")]
    LinkNowhere,
    #[error("a symbolic link leading out of the plugins folder: refused (its target was not read)")]
    LinkOutside,
    #[error("not a regular file: refused")]
    NotAFile,
    #[error(
        "{:.1} MiB, over plugins.max_file_mb ({} MiB): not read",
        *.size as f64 / f64::from(1 << 20),
        .max >> 20
    )]
    TooLarge { size: u64, max: u64 },
    #[error("larger than plugins.max_file_mb ({} MiB): not read", .0 >> 20)]
    GrewTooLarge(u64),
    #[error("cannot read: {0}")]
    Read(String),
    #[error("changed while being read; it is read again once it settles")]
    Changed,
}

/// One `.wasm` entry of a plugin folder.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    /// `Err`: refused before reading, with why.
    pub stamp: Result<Stamp, FileRefused>,
}

/// The `.wasm` entries of `dir`, sorted, each checked without being read.
pub fn list(dir: &Path, max_bytes: u64) -> Vec<Entry> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let real_dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out: Vec<Entry> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .map(|path| {
            let stamp = check(&path, &real_dir, max_bytes);
            Entry { path, stamp }
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn check(path: &Path, real_dir: &Path, max_bytes: u64) -> Result<Stamp, FileRefused> {
    let stat = |e: std::io::Error| FileRefused::Stat(e.to_string());
    let link = fs::symlink_metadata(path).map_err(stat)?;
    let target = if link.file_type().is_symlink() {
        // Where it leads, from names alone: the target is not opened.
        let real = fs::canonicalize(path).map_err(|_| FileRefused::LinkNowhere)?;
        if !real.starts_with(real_dir) {
            return Err(FileRefused::LinkOutside);
        }
        fs::metadata(&real).map_err(stat)?
    } else {
        link
    };
    loadable(&target, max_bytes)
}

/// A regular file no larger than `max_bytes`, judged from its metadata.
fn loadable(m: &fs::Metadata, max_bytes: u64) -> Result<Stamp, FileRefused> {
    if !m.file_type().is_file() {
        return Err(FileRefused::NotAFile);
    }
    if m.len() > max_bytes {
        return Err(FileRefused::TooLarge {
            size: m.len(),
            max: max_bytes,
        });
    }
    Ok(Stamp::of(m))
}

/// Reads a plugin file named on the command line (`plugins inspect`,
/// `plugins add`): the same limits, without a folder to stay inside.
pub fn read_named(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FileRefused> {
    let m = fs::metadata(path).map_err(|e| FileRefused::Read(e.to_string()))?;
    read(path, &loadable(&m, max_bytes)?, max_bytes)
}

/// Reads a file `list` accepted, if it still is what `stamp` says: never
/// more than `max_bytes`, never through a FIFO or a swapped-in link.
pub fn read(path: &Path, stamp: &Stamp, max_bytes: u64) -> Result<Vec<u8>, FileRefused> {
    let unread = |e: std::io::Error| FileRefused::Read(e.to_string());
    let real = fs::canonicalize(path).map_err(unread)?;
    let file: File = OpenOptions::new()
        .read(true)
        // Not a FIFO's open that waits for a writer; not a link swapped in
        // since `list` looked.
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW).bits() as i32)
        .open(&real)
        .map_err(unread)?;
    let m = file.metadata().map_err(unread)?;
    if !m.file_type().is_file() || Stamp::of(&m) != *stamp {
        return Err(FileRefused::Changed);
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(unread)?;
    if bytes.len() as u64 > max_bytes {
        return Err(FileRefused::GrewTooLarge(max_bytes));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_links_and_pipes_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        fs::create_dir(&plugins).unwrap();
        // A sparse 8 GiB file: refused from its metadata.
        let sparse = File::create(plugins.join("big.wasm")).unwrap();
        sparse.set_len(8 << 30).unwrap();
        // A link out of the folder, to a secret.
        fs::write(dir.path().join("secret"), "hunter2").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), plugins.join("out.wasm")).unwrap();
        // A link inside the folder is fine.
        fs::write(plugins.join("real.bin"), b"\0asm").unwrap();
        std::os::unix::fs::symlink(plugins.join("real.bin"), plugins.join("in.wasm")).unwrap();
        // A FIFO would block a plain read forever.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            plugins.join("fifo.wasm"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        fs::write(plugins.join("notes.txt"), "not a plugin").unwrap();

        let entries = list(&plugins, 64 << 20);
        let names: Vec<String> = entries
            .iter()
            .map(|e| e.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["big.wasm", "fifo.wasm", "in.wasm", "out.wasm"]);
        let by = |n: &str| {
            entries
                .iter()
                .find(|e| e.path.ends_with(n))
                .unwrap()
                .stamp
                .clone()
        };
        let big = by("big.wasm").unwrap_err();
        assert!(matches!(big, FileRefused::TooLarge { .. }), "{big}");
        assert!(big.to_string().contains("max_file_mb"));
        assert_eq!(by("fifo.wasm").unwrap_err(), FileRefused::NotAFile);
        let out = by("out.wasm").unwrap_err();
        assert_eq!(out, FileRefused::LinkOutside);
        let out = out.to_string();
        assert!(out.contains("out of the plugins folder") && !out.contains("hunter2"));
        let stamp = by("in.wasm").unwrap();
        assert_eq!(
            read(&plugins.join("in.wasm"), &stamp, 64 << 20).unwrap(),
            b"\0asm"
        );
        // Rewritten: a new stamp, and the old one no longer reads.
        fs::write(plugins.join("real.bin"), b"\0asm\x01").unwrap();
        let again = list(&plugins, 64 << 20);
        let new = again
            .iter()
            .find(|e| e.path.ends_with("in.wasm"))
            .unwrap()
            .stamp
            .clone()
            .unwrap();
        assert_ne!(new, stamp);
        assert!(read(&plugins.join("in.wasm"), &stamp, 64 << 20).is_err());
    }
}
