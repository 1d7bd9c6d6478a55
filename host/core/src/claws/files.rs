//! One wired file on disk: written atomically with its own mode bits,
//! someone else's version set aside, symlinks followed, its backup checked;
//! and checking (`doctor`) or restoring (`stop --restore`) one file.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::state::FileRecord;
use super::{Action, FileOutcome, read_opt};
use crate::digest::sha256_hex;
use crate::home::write_private;

pub(super) fn ensure_private_dir(path: &Path) -> Result<()> {
    if !path.exists() {
        fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot set permissions on {}", path.display()))?;
    }
    Ok(())
}

pub(super) fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()
}

/// Writes `bytes` to `path` atomically with `mode`: an owner-only file
/// (its folder created if need be), or an agent's file with its own bits.
pub(super) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if mode & 0o777 == 0o600 {
        return write_private(path, bytes);
    }
    crate::home::write_atomic(path, bytes, Some(mode))
}

/// A free name beside `path`: `<file>.metaclaw-replaced-<time>[-N]`.
fn aside_name(path: &Path) -> PathBuf {
    let base = format!("{}.metaclaw-replaced-{}", path.display(), stamp());
    let mut candidate = PathBuf::from(&base);
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    candidate
}

/// Copies `bytes` (someone else's version of `path`) beside it.
pub(super) fn set_aside(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let aside = aside_name(path);
    write_private(&aside, bytes)
        .with_context(|| format!("cannot keep a copy of {}", path.display()))?;
    Ok(aside)
}

/// The file itself when `path` is a symlink (dotfile managers link configs):
/// replacing the link with a file would cut it from its target.
pub(super) fn resolve(path: &Path) -> Result<PathBuf> {
    if path.is_symlink() {
        return fs::canonicalize(path)
            .with_context(|| format!("{} is a broken symlink", path.display()));
    }
    Ok(path.to_path_buf())
}

/// The directories `create_dir_all(dir)` would create, outermost first.
pub(super) fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(Path::to_path_buf)
        .collect();
    out.reverse();
    out
}

/// The original bytes of a file that existed before wiring, from its
/// backup, checked against the hash taken when the backup was made.
fn read_backup(file: &FileRecord) -> Result<Vec<u8>> {
    let Some(backup) = &file.backup else {
        bail!("its backup is not recorded");
    };
    let bytes =
        fs::read(backup).with_context(|| format!("cannot read its backup {}", backup.display()))?;
    if file.original_sha256.as_deref() != Some(sha256_hex(&bytes).as_str()) {
        bail!(
            "its backup {} does not match the original",
            backup.display()
        );
    }
    Ok(bytes)
}

/// Something wrong with a wired file (`metaclaw doctor`).
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// The agent no longer goes through metaclaw, or restore would fail.
    Broken(String),
    /// Worth knowing; wiring still works.
    Changed(String),
}

/// How a file metaclaw wired for an agent at `base_url` stands now:
/// nothing when it is as metaclaw wrote it and its backup (if it had an
/// original) would put it back.
pub fn check_file(file: &FileRecord, base_url: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    match read_opt(&file.path) {
        Ok(None) => findings.push(Finding::Broken(
            "it is gone: the agent no longer reads metaclaw's settings".into(),
        )),
        Err(e) => findings.push(Finding::Broken(format!("{e:#}"))),
        Ok(Some(bytes)) if sha256_hex(&bytes) != file.written_sha256 => {
            // Edited since (by the user or the agent): whether it still
            // names the proxy is the question that matters.
            if String::from_utf8_lossy(&bytes).contains(base_url) {
                findings.push(Finding::Changed(format!(
                    "edited since metaclaw wrote it; it still names {base_url}"
                )));
            } else {
                findings.push(Finding::Broken(format!(
                    "edited since metaclaw wrote it, and it no longer names {base_url}: the agent does not go through metaclaw"
                )));
            }
        }
        Ok(Some(_)) => {}
    }
    if file.existed
        && let Err(e) = read_backup(file)
    {
        findings.push(Finding::Broken(format!(
            "{e:#}: `metaclaw stop --restore` cannot put the original back"
        )));
    }
    findings
}

pub(super) fn restore_file(file: &FileRecord) -> Result<FileOutcome> {
    let current = read_opt(&file.path)?;
    let current_sha = current.as_deref().map(sha256_hex);
    // Someone else's version (the user's edit, or the agent's own rewrite)
    // is kept beside the file before the original comes back.
    let set_aside = match (&current, &current_sha) {
        (Some(bytes), Some(sha))
            if !file.owned
                && *sha != file.written_sha256
                && Some(sha) != file.original_sha256.as_ref() =>
        {
            Some(set_aside(&file.path, bytes)?)
        }
        _ => None,
    };
    let action = if file.existed {
        let bytes = read_backup(file)?;
        if current.as_deref() != Some(bytes.as_slice())
            || fs::metadata(&file.path)
                .map(|m| m.permissions().mode() & 0o7777)
                .ok()
                != file.mode
        {
            if let Some(parent) = file.path.parent() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            write_atomic(&file.path, &bytes, file.mode.unwrap_or(0o600))?;
        }
        if let Some(backup) = &file.backup {
            let _ = fs::remove_file(backup);
        }
        Action::Restored
    } else {
        if current.is_some() {
            fs::remove_file(&file.path)
                .with_context(|| format!("cannot remove {}", file.path.display()))?;
        }
        for d in file.created_dirs.iter().rev() {
            // Only if empty: the agent may have put its own files there since.
            let _ = fs::remove_dir(d);
        }
        Action::Removed
    };
    Ok(FileOutcome {
        claw: String::new(),
        path: file.path.clone(),
        action,
        backup: None,
        set_aside,
    })
}
