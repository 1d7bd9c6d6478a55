//! The metaclaw home: `$METACLAW_HOME` or `~/.metaclaw`, and the files in it.
//!
//! One running daemon owns a home. Ownership is an exclusive `flock` on
//! `daemon.lock`, held for the daemon's life and released by the kernel when
//! the process dies, so a crash never leaves a home locked. `metaclaw.pid`
//! says who owns it and where it listens; it is only trusted while the lock is
//! held, which is how a stale pid file is told apart from a live one.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    /// `$METACLAW_HOME`, else `~/.metaclaw`.
    pub fn resolve() -> Result<Self> {
        if let Some(dir) = std::env::var_os("METACLAW_HOME").filter(|v| !v.is_empty()) {
            return Ok(Self {
                root: PathBuf::from(dir),
            });
        }
        let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) else {
            bail!("cannot find the metaclaw home: set METACLAW_HOME or HOME");
        };
        Ok(Self {
            root: PathBuf::from(home).join(".metaclaw"),
        })
    }

    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Creates the home (mode 0700: it holds conversations and secrets).
    pub fn ensure(&self) -> Result<()> {
        if !self.root.exists() {
            fs::create_dir_all(&self.root)
                .with_context(|| format!("cannot create {}", self.root.display()))?;
            fs::set_permissions(&self.root, fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot set permissions on {}", self.root.display()))?;
        }
        fs::create_dir_all(self.logs_dir())
            .with_context(|| format!("cannot create {}", self.logs_dir().display()))?;
        Ok(())
    }

    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.yaml")
    }
    pub fn db_file(&self) -> PathBuf {
        self.root.join("metaclaw.db")
    }
    pub fn pid_file(&self) -> PathBuf {
        self.root.join("metaclaw.pid")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }
    /// Plugin pins (`metaclaw plugins lock`).
    pub fn plugin_lock_file(&self) -> PathBuf {
        self.root.join("metaclaw.lock")
    }
    /// The drop-in plugin folder.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }
    /// Derived data that can be rebuilt (compiled plugins).
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }
    /// The key that signs compiled plugins in the cache: outside the cache,
    /// so that writing the cache is not enough to forge an entry.
    pub fn plugin_cache_key_file(&self) -> PathBuf {
        self.root.join("plugin-cache.key")
    }
    /// The training scheduler's calendar copy (`scheduler::source`).
    pub fn scheduler_dir(&self) -> PathBuf {
        self.root.join("scheduler")
    }
    pub fn admin_token_file(&self) -> PathBuf {
        self.root.join("admin.token")
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }
    pub fn log_file(&self) -> PathBuf {
        self.logs_dir().join("metaclaw.log")
    }
    pub fn skills_dir(&self) -> PathBuf {
        self.root.join("skills")
    }
    /// `start --demo`'s own store and skill library, apart from the user's:
    /// the demo writes a session and evolves a skill, which must not land
    /// in the user's data. Started afresh by each demo.
    pub fn demo_dir(&self) -> PathBuf {
        self.root.join("demo")
    }
    pub fn demo_db_file(&self) -> PathBuf {
        self.demo_dir().join("metaclaw.db")
    }
    pub fn demo_skills_dir(&self) -> PathBuf {
        self.demo_dir().join("skills")
    }
    /// Whether the daemon running now is `start --demo`: the commands that
    /// read the store and the library then read the demo's.
    pub fn demo_running(&self) -> bool {
        self.running().ok().flatten().is_some_and(|p| p.demo)
    }

    /// Takes the home's lock without waiting. `Ok(None)` means another live
    /// process holds it.
    pub fn try_lock(&self) -> Result<Option<HomeLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.lock_file())
            .with_context(|| format!("cannot open {}", self.lock_file().display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(HomeLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("cannot lock {}", self.lock_file().display()))
            }
        }
    }

    /// Is a daemon alive in this home? Looks at the lock, not at the pid file.
    pub fn is_locked(&self) -> Result<bool> {
        if !self.lock_file().exists() {
            return Ok(false);
        }
        Ok(self.try_lock()?.is_none())
    }

    pub fn read_pid_file(&self) -> Option<PidInfo> {
        let text = fs::read_to_string(self.pid_file()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The running daemon, if there is one: the pid file, trusted only while
    /// the lock is held.
    pub fn running(&self) -> Result<Option<PidInfo>> {
        if !self.is_locked()? {
            return Ok(None);
        }
        Ok(self.read_pid_file())
    }

    pub fn write_pid_file(&self, info: &PidInfo) -> Result<()> {
        let json = serde_json::to_string_pretty(info)?;
        write_private(&self.pid_file(), json.as_bytes())
    }

    pub fn remove_pid_file(&self) {
        let _ = fs::remove_file(self.pid_file());
    }

    /// The admin token, created on first use. Admin routes always require it,
    /// whether or not the proxy itself has a token.
    pub fn admin_token(&self) -> Result<String> {
        let path = self.admin_token_file();
        if let Ok(token) = fs::read_to_string(&path) {
            let token = token.trim().to_string();
            if token.len() >= 32 {
                return Ok(token);
            }
        }
        let token = format!("mca-{}", crate::digest::random_token());
        write_private(&path, token.as_bytes())?;
        Ok(token)
    }

    pub fn read_admin_token(&self) -> Option<String> {
        fs::read_to_string(self.admin_token_file())
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    }
}

/// Held for the daemon's life; dropping it (or dying) releases the home.
pub struct HomeLock {
    _file: File,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PidInfo {
    pub pid: u32,
    pub host: String,
    pub port: u16,
    pub url: String,
    pub mode: String,
    pub started_at_ms: i64,
    pub version: String,
    #[serde(default)]
    pub demo: bool,
}

/// Writes a file readable by its owner only, atomically (temp file + rename),
/// so a reader never sees half a file and a crash never truncates the old one.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_atomic(path, contents, None)
}

/// Writes `contents` to `path` through a temp file in the same folder and a
/// rename. The temp file is created owner-only; `mode` then sets the exact
/// permission bits (an agent's config keeps the ones it had).
pub fn write_atomic(path: &Path, contents: &[u8], mode: Option<u32>) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_string());
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(contents)?;
        if let Some(mode) = mode {
            // The open mode is masked by the umask; set the exact bits.
            f.set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
        }
        f.sync_all()?;
        fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes `dir` and everything in it; a folder that is not there is fine.
pub fn remove_dir_if_any(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot clear {}", dir.display())),
    }
}

/// `~/x` → `$HOME/x`.
pub fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_seen_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        home.ensure().unwrap();
        let lock = home.try_lock().unwrap().expect("first lock");
        assert!(home.is_locked().unwrap());
        assert!(home.try_lock().unwrap().is_none());
        drop(lock);
        assert!(!home.is_locked().unwrap());
    }

    #[test]
    fn a_pid_file_without_the_lock_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        home.ensure().unwrap();
        let info = PidInfo {
            pid: 999_999,
            host: "127.0.0.1".into(),
            port: 1,
            url: "http://127.0.0.1:1".into(),
            mode: "skills_only".into(),
            started_at_ms: 0,
            version: "0".into(),
            demo: false,
        };
        home.write_pid_file(&info).unwrap();
        assert_eq!(home.read_pid_file(), Some(info));
        assert_eq!(home.running().unwrap(), None);
    }

    #[test]
    fn private_files_are_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_private(&path, b"x").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
