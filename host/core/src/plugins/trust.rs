//! What a plugin file is trusted with, decided from what it *is* (its
//! sha256, and where it came from) rather than from the name it declares:
//! a name is the plugin's own claim, and any file can make it.
//!
//! - **First-party names are reserved.** A drop-in that calls itself
//!   `guard` (or `bm25`, `embedding`, …) is refused unless the deployment
//!   names that very file: `plugins.overrides: ["guard@sha256:<hex>"]`, or
//!   a lock entry written by `metaclaw plugins lock --override guard`.
//! - **Grants bind to content.** `plugins.grants.NAME` applies to the
//!   first-party plugin NAME, or to the one drop-in file the lock pins
//!   under NAME (a lock pinning several there gives the grant to none,
//!   and the scan loads none of them: `ambiguous_pin`);
//!   `plugins.grants."NAME@sha256:<hex>"` to that file only. A
//!   grant the config writes for a drop-in nobody pinned is not applied, and
//!   `plugins list` says why. No grant is implied by a name alone (the
//!   first-party `embedding` retriever gets `embed` in embedding mode as a
//!   first-party plugin, not for its name).

use crate::plugins::LoadRefused;
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
    ) -> Result<(), LoadRefused> {
        if info.source == Source::Builtin
            || !reserved.contains(&info.name)
            || self.overrides(info, lock)
        {
            return Ok(());
        }
        Err(LoadRefused::FirstPartyName {
            name: info.name.clone(),
            sha256: info.sha256.clone(),
        })
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

    /// What `plugins.grants` grants the name `name` alone (without a
    /// sha256): none when the config grants it nothing.
    pub fn granted_by_name(&self, name: &str) -> Option<Grants> {
        let mut found: Option<Grants> = None;
        for (file, grants) in &self.grants {
            if file.name == name && file.sha256.is_none() {
                found.get_or_insert_with(Grants::default).merge(grants);
            }
        }
        // A name granted nothing carries no trust to take.
        found.filter(|g| *g != Grants::default())
    }

    /// Why no file may use the name `name` under `lock`, if none may: the
    /// config grants that name by name and the lock pins more than one file
    /// under it, so which file the grant is for cannot be told. Every
    /// claimant is then refused (fail closed), whatever wrote the lock.
    pub fn ambiguous_pin(&self, name: &str, lock: &LockFile) -> Option<String> {
        let grants = self.granted_by_name(name)?;
        let shas = lock.shas_for(name);
        if shas.len() < 2 {
            return None;
        }
        let listed = shas
            .iter()
            .map(|sha| format!("sha256 {}…", sha.get(..12).unwrap_or(sha)))
            .collect::<Vec<_>>()
            .join(", ");
        Some(format!(
            "metaclaw.lock pins {n} files under the name {name:?} ({listed}), and plugins.grants.{name} grants that name {granted} by name: which file the grant is for cannot be told, so no file called {name:?} is loaded. Name the one to trust: `metaclaw plugins lock {name}@sha256:<hex>` (`metaclaw plugins inspect FILE` shows a file's sha256)",
            n = shas.len(),
            granted = grants.names().join(", "),
        ))
    }

    /// What `info` is granted, and a note for each grant written for its
    /// name that does not apply to this file (with what would make it).
    /// A grant by name reaches a drop-in only as the one file the lock pins
    /// under that name.
    pub fn grants_for(&self, info: &PluginInfo, lock: Option<&LockFile>) -> (Grants, Vec<String>) {
        let mut granted = Grants::default();
        let mut notes = Vec::new();
        let pinned = lock
            .and_then(|l| l.sole_pin(&info.name))
            .is_some_and(|e| e.sha256 == info.sha256);
        let ambiguous = lock.and_then(|l| self.ambiguous_pin(&info.name, l));
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
            } else if let Some(why) = &ambiguous {
                notes.push(format!("plugins.grants.{} not applied: {why}", info.name));
            } else {
                notes.push(format!(
                    "plugins.grants.{name} not applied: a grant by name alone applies to a first-party plugin or a drop-in pinned in metaclaw.lock, and any file can call itself {name:?}; to trust this file with it, run `metaclaw plugins lock {name}@sha256:{sha}`, or write the key as \"{name}@sha256:{sha}\"",
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
        let err = trust
            .may_use_name(&fake, None, &reserved())
            .unwrap_err()
            .to_string();
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
    fn a_lock_pinning_two_files_under_a_granted_name_grants_neither() {
        let mut config = BTreeMap::new();
        config.insert(file("trusted"), grants(&["network", "env:SECRET_TOKEN"]));
        let trust = Trust::new(&config, &[], false);
        let mut both = lock("trusted", SHA_A, false);
        both.plugins.push(LockEntry {
            sha256: SHA_B.into(),
            ..both.plugins[0].clone()
        });
        for sha in [SHA_A, SHA_B] {
            let (g, notes) = trust.grants_for(&info("trusted", sha, Source::User), Some(&both));
            assert_eq!(g, Grants::default());
            assert!(
                notes[0].contains("pins 2 files under the name \"trusted\""),
                "{notes:?}"
            );
        }
        let why = trust.ambiguous_pin("trusted", &both).unwrap();
        assert!(why.contains("network, env:SECRET_TOKEN"), "{why}");
        // One file pinned there: no conflict. A name granted nothing, or
        // not granted by name: none either (nothing to take).
        assert!(
            trust
                .ambiguous_pin("trusted", &lock("trusted", SHA_A, false))
                .is_none()
        );
        let mut config = BTreeMap::new();
        config.insert(file("trusted"), grants(&[]));
        config.insert(file(&format!("trusted@sha256:{SHA_A}")), grants(&["kv"]));
        let trust = Trust::new(&config, &[], false);
        assert!(trust.ambiguous_pin("trusted", &both).is_none());
        assert!(trust.granted_by_name("trusted").is_none());
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
