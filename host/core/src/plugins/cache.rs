//! Compiled plugins on disk. Compiling a large component takes seconds, so
//! the native code is kept between runs — but loading it is deserialising
//! machine code (`unsafe`): whoever can put a file here would run native
//! code in metaclaw. So every artifact carries a MAC keyed by a secret that
//! lives outside the cache (`<home>/plugin-cache.key`, 0600), over the
//! artifact and the sha256 of the `.wasm` it was compiled from; an artifact
//! whose MAC does not verify is deleted and the plugin recompiled. A
//! checksum beside the file would not do: anyone who can swap the artifact
//! can rewrite the checksum.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use hmac::{KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::digest::hex;

type HmacSha256 = hmac::Hmac<Sha256>;

/// Where the cache lives and the file holding its key.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    pub dir: PathBuf,
    /// Outside `dir`: a cache that could hold its own key could forge MACs.
    pub key_file: PathBuf,
}

pub struct CompileCache {
    dir: PathBuf,
    key: Vec<u8>,
}

/// Why a cached compiled plugin is not used (it is deleted and the plugin
/// compiled again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactRefused {
    #[error("cannot open it: {0}")]
    Unopened(String),
    #[error("{0}")]
    Unread(String),
    #[error("{0} bytes, more than any artifact of this plugin")]
    TooLarge(u64),
    #[error("no MAC: {0}")]
    NoMac(String),
    #[error("its MAC does not verify: it was not written by this metaclaw home")]
    BadMac,
}

/// What `verify` found for one plugin's artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactState {
    Absent,
    Valid,
    /// The MAC did not verify (or the files were unreadable): refused.
    Refused(String),
}

const KEY_BYTES: usize = 32;
const DOMAIN: &[u8] = b"metaclaw plugin cache v1\0";

impl CompileCache {
    /// Opens the cache: the folder is created (or made) owner-only, and the
    /// key read, or created on first use.
    pub fn open(options: &CacheOptions) -> Result<Self> {
        fs::create_dir_all(&options.dir)
            .with_context(|| format!("cannot create {}", options.dir.display()))?;
        fs::set_permissions(&options.dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private", options.dir.display()))?;
        let key = read_or_create_key(&options.key_file)?;
        Ok(Self {
            dir: options.dir.clone(),
            key,
        })
    }

    /// `compat` distinguishes artifacts of different wasmtime builds and
    /// configurations.
    fn paths(&self, sha256: &str, compat: &str) -> (PathBuf, PathBuf) {
        let artifact = self.dir.join(format!("{sha256}-{compat}.cwasm"));
        let mac = artifact.with_extension("cwasm.mac");
        (artifact, mac)
    }

    fn mac(&self, sha256: &str, compat: &str, code: &[u8]) -> Result<Vec<u8>> {
        let mut mac =
            HmacSha256::new_from_slice(&self.key).map_err(|e| anyhow::anyhow!("cache key: {e}"))?;
        mac.update(DOMAIN);
        mac.update(sha256.as_bytes());
        mac.update(b"\0");
        mac.update(compat.as_bytes());
        mac.update(b"\0");
        mac.update(code);
        Ok(mac.finalize().into_bytes().to_vec())
    }

    /// The compiled code of the `.wasm` with this sha256, if the cache holds
    /// an artifact whose MAC verifies. `max_bytes` bounds what is read (a
    /// planted sparse file costs nothing). A refused artifact is deleted.
    pub fn load(&self, sha256: &str, compat: &str, max_bytes: u64) -> Option<Vec<u8>> {
        match self.read_verified(sha256, compat, max_bytes) {
            Ok(Some(code)) => {
                let (artifact, _) = self.paths(sha256, compat);
                // Recently used: eviction keeps it.
                if let Ok(f) = fs::File::options().write(true).open(&artifact) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Some(code)
            }
            Ok(None) => None,
            Err(reason) => {
                tracing::warn!(
                    "compiled plugin cache entry for sha256 {sha256} refused ({reason}); it is deleted and the plugin recompiled"
                );
                self.remove_one(sha256, compat);
                None
            }
        }
    }

    fn read_verified(
        &self,
        sha256: &str,
        compat: &str,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, ArtifactRefused> {
        let (artifact, mac_file) = self.paths(sha256, compat);
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&artifact)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ArtifactRefused::Unopened(e.to_string())),
        };
        let unread = |e: std::io::Error| ArtifactRefused::Unread(e.to_string());
        let len = file.metadata().map_err(unread)?.len();
        if len > max_bytes {
            return Err(ArtifactRefused::TooLarge(len));
        }
        let expected =
            fs::read_to_string(&mac_file).map_err(|e| ArtifactRefused::NoMac(e.to_string()))?;
        let mut code = Vec::with_capacity(len as usize);
        file.take(max_bytes + 1)
            .read_to_end(&mut code)
            .map_err(unread)?;
        let mac = self
            .mac(sha256, compat, &code)
            .map_err(|e| ArtifactRefused::Unread(e.to_string()))?;
        if bool::from(hex(&mac).as_bytes().ct_eq(expected.trim().as_bytes())) {
            Ok(Some(code))
        } else {
            Err(ArtifactRefused::BadMac)
        }
    }

    /// Keeps `code` for next time (best effort: a cache that cannot be
    /// written only costs a recompile).
    pub fn store(&self, sha256: &str, compat: &str, code: &[u8]) {
        let (artifact, mac_file) = self.paths(sha256, compat);
        let written = self.mac(sha256, compat, code).and_then(|mac| {
            crate::home::write_private(&artifact, code)?;
            crate::home::write_private(&mac_file, hex(&mac).as_bytes())
        });
        if let Err(e) = written {
            tracing::debug!("cannot cache compiled plugin: {e:#}");
        }
    }

    /// What the cache holds for the `.wasm` with this sha256, compiled by
    /// an engine of one of `compats`: the first refusal, else whether any
    /// artifact verifies.
    pub fn verify(&self, sha256: &str, compats: &[&str], max_bytes: u64) -> ArtifactState {
        let mut state = ArtifactState::Absent;
        for compat in compats {
            match self.read_verified(sha256, compat, max_bytes) {
                Ok(Some(_)) => state = ArtifactState::Valid,
                Ok(None) => {}
                Err(reason) => return ArtifactState::Refused(reason.to_string()),
            }
        }
        state
    }

    /// Deletes every artifact of the `.wasm` with this sha256.
    pub fn remove(&self, sha256: &str) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            if entry.file_name().to_string_lossy().starts_with(sha256) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    fn remove_one(&self, sha256: &str, compat: &str) {
        let (artifact, mac) = self.paths(sha256, compat);
        let _ = fs::remove_file(artifact);
        let _ = fs::remove_file(mac);
    }

    /// Deletes artifacts of plugins not in `keep`, or of engines other than
    /// `compats` (other builds), that were not used for `max_age`, and
    /// stray files.
    pub fn evict(&self, keep: &HashSet<String>, compats: &[&str], max_age: Duration) -> usize {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let sha = name.split('-').next().unwrap_or_default();
            let kept = keep.contains(sha) && compats.iter().any(|c| name.contains(c));
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_none_or(|age| age > max_age);
            if !kept && old && fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

fn read_or_create_key(path: &Path) -> Result<Vec<u8>> {
    match fs::read(path) {
        Ok(key) if key.len() >= KEY_BYTES => return Ok(key),
        Ok(_) => anyhow::bail!(
            "{} is too short to be a cache key; delete it (the cache is then rebuilt)",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let mut key = vec![0u8; KEY_BYTES];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .context("cannot read /dev/urandom for the plugin cache key")?;
    crate::home::write_private(path, &key)?;
    // Two processes may have raced to create it: use whichever landed.
    let key = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    anyhow::ensure!(key.len() >= KEY_BYTES, "{} is too short", path.display());
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path) -> CompileCache {
        CompileCache::open(&CacheOptions {
            dir: dir.join("cache"),
            key_file: dir.join("key"),
        })
        .unwrap()
    }

    #[test]
    fn artifacts_verify_and_swapped_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        assert_eq!(c.load("aa", "c0", 1 << 20), None);
        c.store("aa", "c0", b"native code");
        assert_eq!(
            c.load("aa", "c0", 1 << 20).as_deref(),
            Some(&b"native code"[..])
        );
        // The same key after a restart.
        assert_eq!(
            cache(dir.path()).load("aa", "c0", 1 << 20).as_deref(),
            Some(&b"native code"[..])
        );
        // Swapped code with a checksum that matches it: refused and deleted.
        let (artifact, mac) = c.paths("aa", "c0");
        std::fs::write(&artifact, b"evil code").unwrap();
        assert!(matches!(
            c.verify("aa", &["c0"], 1 << 20),
            ArtifactState::Refused(_)
        ));
        assert_eq!(c.load("aa", "c0", 1 << 20), None);
        assert!(!artifact.exists() && !mac.exists());
        // Another plugin's artifact moved under this plugin's name: refused.
        c.store("bb", "c0", b"bb code");
        let (bb, bb_mac) = c.paths("bb", "c0");
        std::fs::copy(&bb, &artifact).unwrap();
        std::fs::copy(&bb_mac, &mac).unwrap();
        assert_eq!(c.load("aa", "c0", 1 << 20), None);
        // The folder is private.
        let mode = std::fs::metadata(dir.path().join("cache"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn oversized_artifacts_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        c.store("aa", "c0", &[7u8; 4096]);
        assert!(matches!(
            c.verify("aa", &["c0"], 100),
            ArtifactState::Refused(_)
        ));
    }

    #[test]
    fn eviction_keeps_what_is_used_and_recent() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path());
        c.store("aa", "c0", b"a");
        c.store("bb", "c0", b"b");
        let keep: HashSet<String> = ["aa".to_string()].into();
        assert_eq!(
            c.evict(&keep, &["c0"], Duration::from_secs(3600)),
            0,
            "bb is recent"
        );
        assert_eq!(
            c.evict(&keep, &["c0"], Duration::ZERO),
            2,
            "bb's artifact and MAC"
        );
        assert!(c.load("aa", "c0", 1 << 20).is_some());
        assert!(c.load("bb", "c0", 1 << 20).is_none());
    }
}
