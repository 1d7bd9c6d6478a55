//! `<home>/metaclaw.lock`: the plugin versions a deployment runs, by name,
//! exact version and sha256. With a lock file present, the host loads only
//! files that match it.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct LockFile {
    pub version: u32,
    pub plugins: Vec<LockEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LockEntry {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub sha256: String,
    /// Where the file was when locked (for people; matching is by hash).
    pub file: String,
    /// A drop-in pinned to replace the first-party plugin of its name
    /// (`metaclaw plugins lock --override NAME`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_party_override: bool,
}

impl LockFile {
    pub fn read(path: &Path) -> Result<Option<Self>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let lock: LockFile = serde_saphyr::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a valid lock file: {e}", path.display()))?;
        Ok(Some(lock))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        let body = serde_saphyr::to_string(self)
            .map_err(|e| anyhow::anyhow!("cannot render the lock file: {e}"))?;
        let text = format!(
            "# Plugin pins for this metaclaw home, written by `metaclaw plugins lock`.\n\
             # While this file exists, only these exact files (by sha256) are loaded.\n{body}"
        );
        crate::home::write_private(path, text.as_bytes())
    }

    pub fn by_hash(&self, sha256: &str) -> Option<&LockEntry> {
        self.plugins.iter().find(|e| e.sha256 == sha256)
    }

    /// The entry written for the file at `path` when the lock was made.
    pub fn by_file(&self, path: &Path) -> Option<&LockEntry> {
        self.plugins.iter().find(|e| Path::new(&e.file) == path)
    }

    /// The distinct files (by sha256) the lock pins under `name`.
    pub fn shas_for(&self, name: &str) -> BTreeSet<&str> {
        self.plugins
            .iter()
            .filter(|e| e.name == name)
            .map(|e| e.sha256.as_str())
            .collect()
    }

    /// The one file the lock pins under `name`: none when it pins none, or
    /// more than one (then which is meant cannot be told).
    pub fn sole_pin(&self, name: &str) -> Option<&LockEntry> {
        match self.shas_for(name).len() {
            1 => self.plugins.iter().find(|e| e.name == name),
            _ => None,
        }
    }

    pub fn by_name_version(&self, name: &str, version: &str) -> Option<&LockEntry> {
        self.plugins
            .iter()
            .find(|e| e.name == name && e.version == version)
    }
}
