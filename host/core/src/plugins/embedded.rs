//! The first-party plugins compiled into the binary (built from `plugins/`
//! and embedded by `host/core/build.rs`): every install retrieves, scores and guards
//! evolution without a second build step. They are what the binary is, so
//! the lock file does not need to list them; a drop-in replaces one only
//! where the deployment names that file (see [`super::trust`]).

use std::path::PathBuf;

/// One embedded component (its sha256 computed at build time).
pub struct EmbeddedPlugin {
    pub name: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/builtin_plugins.rs"));

/// Embedded plugins have no file: they are shown under this pseudo-path
/// (`plugins list`, logs), which no folder scan can produce.
pub const EMBEDDED_DIR: &str = "<embedded>";

impl EmbeddedPlugin {
    pub fn path(&self) -> PathBuf {
        PathBuf::from(EMBEDDED_DIR).join(format!("{}.wasm", self.name))
    }
}

/// `metaclaw version --json`: what the binary carries.
pub fn versions_json() -> serde_json::Value {
    EMBEDDED
        .iter()
        .map(|p| serde_json::json!({ "name": p.name, "version": p.version, "sha256": p.sha256 }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_first_party_plugin_is_embedded() {
        let mut names: Vec<&str> = EMBEDDED.iter().map(|p| p.name).collect();
        names.sort_unstable();
        let mut expected = super::super::FIRST_PARTY.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected);
        for p in EMBEDDED {
            assert!(p.bytes.starts_with(b"\0asm"), "{} is not wasm", p.name);
            assert_eq!(p.sha256.len(), 64);
        }
        for p in EMBEDDED {
            assert_eq!(p.sha256, crate::digest::sha256_hex(p.bytes));
        }
        assert!(LONG_VERSION.contains("guard 0.1"), "{LONG_VERSION}");
    }
}
