//! What a plugin file is trusted with, decided from what it *is* (its
//! sha256, and where it came from) rather than from the name it declares:
//! a name is the plugin's own claim, and any file can make it.
//!
//! - **First-party names are reserved.** A drop-in that calls itself
//!   `guard` (or `bm25`, `embedding`, …) is refused unless the deployment
//!   names that very file: `plugins.overrides: ["guard@sha256:<hex>"]`, or
//!   a lock entry written by `metaclaw plugins lock --override guard`.
//! - **Grants bind to content.** `plugins.grants.NAME` applies to the
//!   first-party plugin NAME, or to a drop-in NAME whose sha256 the lock
//!   file pins; `plugins.grants."NAME@sha256:<hex>"` to that file only. A
//!   grant the config writes for a drop-in nobody pinned is not applied, and
//!   `plugins list` says why. No grant is implied by a name alone (the
//!   first-party `embedding` retriever gets `embed` in embedding mode as a
//!   first-party plugin, not for its name).

use std::collections::{BTreeMap, BTreeSet};

use super::loaded::{PluginInfo, Source};
use super::lock::LockFile;
use super::sandbox::Grants;
use crate::config::FilePin;

/// The plugins metaclaw ships. Their names stay reserved even when the
/// first-party folder is missing or turned off.
pub const FIRST_PARTY: &[&str] = &[
    "bm25",
    "correction",
    "dedup",
    "destructive-command-guard",
    "embedding",
    "guard",
    "redact",
    "repeated-refusals",
    "tool-error",
];

pub use crate::config::FileRef;

/// The trust rules of a deployment, from its config.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    grants: Vec<(FileRef, Grants)>,
    /// Drop-ins allowed to take a first-party name (each with its sha256).
    overrides: Vec<FilePin>,
    /// Names a drop-in may take while `metaclaw plugins lock --override`
    /// pins it (the user names the file by running it).
    pinning_overrides: Vec<String>,
    /// `skills.retrieval_mode: embedding`: the first-party `embedding`
    /// retriever gets `embed` unless the config grants it explicitly.
    embedding_retrieval: bool,
}

impl Trust {
    /// From `plugins.grants` and `plugins.overrides`, parsed (and so
    /// checked) when the config was loaded.
    pub fn new(
        grants: &BTreeMap<FileRef, Grants>,
        overrides: &[FilePin],
        embedding_retrieval: bool,
    ) -> Self {
        Self {
            grants: grants
                .iter()
                .map(|(file, granted)| (file.clone(), granted.clone()))
                .collect(),
            overrides: overrides.to_vec(),
            pinning_overrides: Vec::new(),
            embedding_retrieval,
        }
    }

    /// `metaclaw plugins lock --override NAME`: the drop-in called NAME may
    /// replace the first-party plugin of that name (and is pinned so).
    pub fn allow_overrides_for_pinning(&mut self, names: Vec<String>) {
        self.pinning_overrides = names;
    }

    /// Whether `info` may carry its name. `reserved`: the first-party
    /// names (the static list and those in the first-party folder).
    pub fn may_use_name(
        &self,
        info: &PluginInfo,
        lock: Option<&LockFile>,
        reserved: &BTreeSet<String>,
    ) -> Result<(), String> {
        if info.source == Source::Builtin
            || !reserved.contains(&info.name)
            || self.overrides(info, lock)
        {
            return Ok(());
        }
        Err(format!(
            "refused: it calls itself {name:?}, the name of a first-party plugin. A drop-in replaces one only if the deployment names that file: plugins.overrides: [\"{name}@sha256:{sha}\"] in the config, or `metaclaw plugins lock --override {name}`",
            name = info.name,
            sha = info.sha256
        ))
    }

    /// Whether `info` is a drop-in explicitly allowed to replace a
    /// first-party plugin.
    pub fn overrides(&self, info: &PluginInfo, lock: Option<&LockFile>) -> bool {
        info.source == Source::User
            && (self
                .overrides
                .iter()
                .any(|o| o.name == info.name && o.sha256 == info.sha256)
                || self.pinning_overrides.contains(&info.name)
                || lock
                    .and_then(|l| l.by_hash(&info.sha256))
                    .is_some_and(|e| e.name == info.name && e.first_party_override))
    }

    /// What `info` is granted, and a note for each grant written for its
    /// name that does not apply to this file (with what would make it).
    pub fn grants_for(&self, info: &PluginInfo, lock: Option<&LockFile>) -> (Grants, Vec<String>) {
        let mut granted = Grants::default();
        let mut notes = Vec::new();
        let pinned = lock
            .and_then(|l| l.by_hash(&info.sha256))
            .is_some_and(|e| e.name == info.name);
        let mut named_explicitly = false;
        for (file, grants) in &self.grants {
            if file.name != info.name {
                continue;
            }
            named_explicitly = true;
            let applies = match &file.sha256 {
                Some(sha) => *sha == info.sha256,
                None => info.source == Source::Builtin || pinned,
            };
            if applies {
                granted.merge(grants);
            } else if file.sha256.is_some() {
                notes.push(format!(
                    "plugins.grants.\"{}@sha256:{}…\" not applied: this file's sha256 is {}",
                    file.name,
                    file.sha256
                        .as_deref()
                        .unwrap_or_default()
                        .get(..12)
                        .unwrap_or_default(),
                    info.sha256
                ));
            } else {
                notes.push(format!(
                    "plugins.grants.{name} not applied: a grant by name alone applies to a first-party plugin or a drop-in pinned in metaclaw.lock, and any file can call itself {name:?}; run `metaclaw plugins lock`, or write the key as \"{name}@sha256:{sha}\"",
                    name = info.name,
                    sha = info.sha256
                ));
            }
        }
        if self.embedding_retrieval
            && info.name == "embedding"
            && info.source == Source::Builtin
            && !named_explicitly
        {
            granted.embed = true;
        }
        (granted, notes)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use semver::Version;

    use super::*;
    use crate::plugins::{Kind, LockEntry};

    const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn info(name: &str, sha: &str, source: Source) -> PluginInfo {
        PluginInfo {
            name: name.into(),
            version: Version::new(9, 9, 9),
            kind: Kind::Evolver,
            description: String::new(),
            asks: Vec::new(),
            package: String::new(),
            imports: Vec::new(),
            sha256: sha.into(),
            path: PathBuf::from(format!("/p/{name}.wasm")),
            size: 1,
            source,
        }
    }

    fn lock(name: &str, sha: &str, first_party_override: bool) -> LockFile {
        LockFile {
            version: 1,
            plugins: vec![LockEntry {
                name: name.into(),
                version: "9.9.9".into(),
                kind: "evolver".into(),
                sha256: sha.into(),
                file: String::new(),
                first_party_override,
            }],
        }
    }

    fn file(text: &str) -> FileRef {
        text.parse().unwrap()
    }

    fn grants(items: &[&str]) -> Grants {
        Grants::parse(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn reserved() -> BTreeSet<String> {
        FIRST_PARTY.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_drop_in_cannot_take_a_first_party_name_unless_that_file_is_named() {
        let trust = Trust::default();
        let fake = info("guard", SHA_A, Source::User);
        let err = trust.may_use_name(&fake, None, &reserved()).unwrap_err();
        assert!(
            err.contains("plugins.overrides") && err.contains(SHA_A),
            "{err}"
        );
        // Pinned without the override flag: still refused.
        assert!(
            trust
                .may_use_name(&fake, Some(&lock("guard", SHA_A, false)), &reserved())
                .is_err()
        );
        assert!(
            trust
                .may_use_name(&fake, Some(&lock("guard", SHA_A, true)), &reserved())
                .is_ok()
        );
        let by_config = Trust::new(
            &BTreeMap::new(),
            &[format!("guard@sha256:{SHA_A}").parse().unwrap()],
            false,
        );
        assert!(by_config.may_use_name(&fake, None, &reserved()).is_ok());
        // Another file under the same name gains nothing from it.
        let other = info("guard", SHA_B, Source::User);
        assert!(by_config.may_use_name(&other, None, &reserved()).is_err());
        // The first-party file and ordinary names are fine.
        assert!(
            trust
                .may_use_name(&info("guard", SHA_B, Source::Builtin), None, &reserved())
                .is_ok()
        );
        assert!(
            trust
                .may_use_name(&info("mine", SHA_B, Source::User), None, &reserved())
                .is_ok()
        );
    }

    #[test]
    fn grants_follow_the_file_not_the_name() {
        let mut config = BTreeMap::new();
        config.insert(file("notes"), grants(&["fs:/home/me/notes"]));
        config.insert(file(&format!("kv-user@sha256:{SHA_A}")), grants(&["kv"]));
        let trust = Trust::new(&config, &[], false);

        // A drop-in claiming a granted name, unpinned: nothing, and a note.
        let (g, notes) = trust.grants_for(&info("notes", SHA_B, Source::User), None);
        assert_eq!(g, Grants::default());
        assert!(notes[0].contains("not applied"), "{notes:?}");
        // Pinned by the lock under that name: granted.
        let (g, notes) = trust.grants_for(
            &info("notes", SHA_B, Source::User),
            Some(&lock("notes", SHA_B, false)),
        );
        assert_eq!(g.read_dirs, vec![PathBuf::from("/home/me/notes")]);
        assert!(notes.is_empty());
        // The lock pins another file of that name: nothing.
        let (g, _) = trust.grants_for(
            &info("notes", SHA_B, Source::User),
            Some(&lock("notes", SHA_A, false)),
        );
        assert_eq!(g, Grants::default());
        // By hash: only that file.
        assert!(
            trust
                .grants_for(&info("kv-user", SHA_A, Source::User), None)
                .0
                .kv
        );
        let (g, notes) = trust.grants_for(&info("kv-user", SHA_B, Source::User), None);
        assert!(!g.kv && notes[0].contains("not applied"));
    }

    #[test]
    fn embed_is_implied_only_for_the_first_party_embedding_retriever() {
        let trust = Trust::new(&BTreeMap::new(), &[], true);
        assert!(
            trust
                .grants_for(&info("embedding", SHA_A, Source::Builtin), None)
                .0
                .embed
        );
        assert!(
            !trust
                .grants_for(&info("embedding", SHA_A, Source::User), None)
                .0
                .embed
        );
        // Written in the config, the config wins.
        let mut config = BTreeMap::new();
        config.insert(file("embedding"), grants(&["clock"]));
        let trust = Trust::new(&config, &[], true);
        let g = trust
            .grants_for(&info("embedding", SHA_A, Source::Builtin), None)
            .0;
        assert!(g.clock && !g.embed);
    }
}
