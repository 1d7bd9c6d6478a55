//! Discovery and loading: a scan of the folders (and the embedded
//! plugins), the lock and trust checked before and after a plugin's
//! metadata is read, files probed a few at a time, and what changed since
//! the last scan.

use crate::plugins::LoadRefused;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{BuiltinSource, PluginHost, Problem, Registry};
use crate::digest::sha256_hex;
use crate::plugins::FIRST_PARTY;
use crate::plugins::embedded::{self, EmbeddedPlugin};
use crate::plugins::files::{self, Stamp};
use crate::plugins::loaded::{LoadedPlugin, Probed, Source};
use crate::plugins::lock::LockFile;
use crate::plugins::sandbox::Grants;

/// What the last scan learnt of one file, kept so that an unchanged file is
/// not read, compiled or run again.
#[derive(Clone)]
pub(super) struct FileRecord {
    stamp: Stamp,
    pub(super) sha256: String,
    probe: ProbeState,
}

#[derive(Clone)]
pub(super) enum ProbeState {
    /// Compiled and probed (loaded, or refused for what it is).
    Ready(Arc<LoadedPlugin>),
    Failed(String),
    /// Refused before compiling (the lock does not list it).
    NotYet,
}

/// Files probed at once (compiling is itself parallel; this bounds how
/// long slow `metadata()` calls can hold a scan to about one deadline).
const PROBES_AT_ONCE: usize = 4;

/// A scan's view of one loadable file.
struct Candidate {
    source: Source,
    path: PathBuf,
    record: FileRecord,
    /// The file's bytes when this scan read them (to hash a new or changed
    /// file): the probe uses them rather than reading it again.
    bytes: Option<Cow<'static, [u8]>>,
    /// Compiled into the binary: not a file, so not the lock's to check.
    embedded: Option<&'static EmbeddedPlugin>,
}

impl PluginHost {
    /// The `.wasm` entries of the folders (`only`: of one source), checked
    /// without reading them.
    fn entries(&self, only: Option<Source>) -> Vec<(Source, files::Entry)> {
        self.settings
            .dirs()
            .into_iter()
            .filter(|(source, _)| only.is_none_or(|o| o == *source))
            .flat_map(|(source, dir)| {
                files::list(&dir, self.settings.max_file_bytes)
                    .into_iter()
                    .map(move |e| (source, e))
            })
            .collect()
    }

    pub(super) fn scan(&self, previous: &Registry, only: Option<Source>) -> Registry {
        // Taken before anything is read: a change made during the scan then
        // differs from it, and the watcher scans again.
        let entries = self.entries(only);
        let mut registry = Registry {
            generation: previous.generation + 1,
            first_party_only: only.is_some(),
            fingerprint: self.fingerprint_of(&entries),
            total_memory: Some(self.engine.memory().clone()),
            ..Registry::default()
        };
        let lock = match LockFile::read(&self.settings.lock_path) {
            Ok(lock) => lock,
            Err(e) => {
                // A lock we cannot read must not become "no lock".
                registry.problems.push(Problem {
                    path: self.settings.lock_path.clone(),
                    error: format!("{e:#}; no plugin is loaded until it is fixed or removed"),
                });
                return registry;
            }
        };
        registry.locked = lock.is_some();
        let lock = lock.as_ref();
        // A name granted by name that the lock pins more than one file
        // under: no file may carry it (fail closed), and status says why.
        let ambiguous: BTreeMap<&str, String> = lock
            .map(|l| {
                l.plugins
                    .iter()
                    .filter_map(|e| {
                        Some((
                            e.name.as_str(),
                            self.settings.trust.ambiguous_pin(&e.name, l)?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        for why in ambiguous.values() {
            registry.problems.push(Problem {
                path: self.settings.lock_path.clone(),
                error: why.clone(),
            });
            registry.pin_conflicts.push(why.clone());
        }

        let candidates = self.candidates(entries, previous, only, &mut registry);

        let mut admitted = self.pinned(candidates, lock, &ambiguous, &mut registry);

        // Compile and read metadata, a few files at once.
        self.probe_all(&mut admitted);

        // What each one is, and whether it may be what it says.
        registry.reserved = FIRST_PARTY
            .iter()
            .map(|s| s.to_string())
            .chain(
                admitted
                    .iter()
                    .filter(|c| c.source == Source::Builtin)
                    .filter_map(|c| match &c.record.probe {
                        ProbeState::Ready(p) => Some(p.info.name.clone()),
                        _ => None,
                    }),
            )
            .collect();
        let accepted = self.accepted(admitted, lock, &mut registry);

        self.one_per_name(accepted, lock, &mut registry);
        registry
            .plugins
            .sort_by(|a, b| a.info.path.cmp(&b.info.path));
        registry
    }

    /// The files to consider: refused unread, reused unchanged, or read
    /// and hashed; and the first-party plugins compiled into the binary.
    fn candidates(
        &self,
        entries: Vec<(Source, files::Entry)>,
        previous: &Registry,
        only: Option<Source>,
        registry: &mut Registry,
    ) -> Vec<Candidate> {
        // Files: refused unread, reused unchanged, or read and hashed.
        let mut candidates = Vec::new();
        for (source, entry) in entries {
            let stamp = match entry.stamp {
                Ok(stamp) => stamp,
                Err(error) => {
                    registry.problems.push(Problem {
                        path: entry.path,
                        error: error.to_string(),
                    });
                    continue;
                }
            };
            let (record, bytes) = match previous.files.get(&entry.path) {
                Some(known) if known.stamp == stamp => (known.clone(), None),
                _ => match files::read(&entry.path, &stamp, self.settings.max_file_bytes) {
                    Ok(bytes) => (
                        FileRecord {
                            stamp,
                            sha256: sha256_hex(&bytes),
                            probe: ProbeState::NotYet,
                        },
                        Some(Cow::Owned(bytes)),
                    ),
                    Err(error) => {
                        registry.problems.push(Problem {
                            path: entry.path,
                            error: error.to_string(),
                        });
                        continue;
                    }
                },
            };
            candidates.push(Candidate {
                source,
                path: entry.path,
                record,
                bytes,
                embedded: None,
            });
        }
        if self.settings.builtin == BuiltinSource::Embedded
            && only.is_none_or(|o| o == Source::Builtin)
        {
            candidates.extend(embedded::EMBEDDED.iter().map(|p| {
                let path = p.path();
                let (record, bytes) = match previous.files.get(&path) {
                    Some(known) => (known.clone(), None),
                    None => (
                        FileRecord {
                            stamp: Stamp::embedded(p.bytes.len() as u64),
                            sha256: p.sha256.to_string(),
                            probe: ProbeState::NotYet,
                        },
                        Some(Cow::Borrowed(p.bytes)),
                    ),
                };
                Candidate {
                    source: Source::Builtin,
                    path,
                    record,
                    bytes,
                    embedded: Some(p),
                }
            }));
        }
        candidates
    }

    /// The candidates the lock lets through, before any code is compiled
    /// or run (the first-party plugins are not the lock's to check).
    fn pinned(
        &self,
        candidates: Vec<Candidate>,
        lock: Option<&LockFile>,
        ambiguous: &BTreeMap<&str, String>,
        registry: &mut Registry,
    ) -> Vec<Candidate> {
        // The lock, before any code is compiled or run.
        let mut admitted = Vec::new();
        for c in candidates {
            if let Some(lock) = lock
                && c.embedded.is_none()
                && lock.by_hash(&c.record.sha256).is_none()
                && !self.settings.pinning
            {
                registry.problems.push(Problem {
                    error: unpinned(lock, &c.path, &c.record.sha256),
                    path: c.path.clone(),
                });
                registry.files.insert(c.path, c.record);
                continue;
            }
            let claims = lock
                .into_iter()
                .flat_map(|l| &l.plugins)
                .find(|e| e.sha256 == c.record.sha256 && ambiguous.contains_key(e.name.as_str()));
            if let Some(entry) = claims
                && c.embedded.is_none()
            {
                registry.problems.push(Problem {
                    error: format!(
                        "refused: metaclaw.lock pins this file as {}@{} beside another file under that name, which the config grants by name (see the problem reported for {}); it was not compiled or run",
                        entry.name,
                        entry.version,
                        self.settings.lock_path.display()
                    ),
                    path: c.path.clone(),
                });
                registry.files.insert(c.path, c.record);
                continue;
            }
            admitted.push(c);
        }
        admitted
    }

    /// The probed plugins that may be what they say they are.
    fn accepted(
        &self,
        admitted: Vec<Candidate>,
        lock: Option<&LockFile>,
        registry: &mut Registry,
    ) -> Vec<Arc<LoadedPlugin>> {
        let mut accepted: Vec<Arc<LoadedPlugin>> = Vec::new();
        for c in admitted {
            registry.files.insert(c.path.clone(), c.record.clone());
            let plugin = match &c.record.probe {
                ProbeState::Ready(p) => p.clone(),
                ProbeState::Failed(error) => {
                    registry.problems.push(Problem {
                        path: c.path,
                        error: error.clone(),
                    });
                    continue;
                }
                ProbeState::NotYet => continue,
            };
            if let Err(error) = self.admit(&plugin, lock, &registry.reserved) {
                registry.problems.push(Problem {
                    path: c.path,
                    error: error.to_string(),
                });
                continue;
            }
            accepted.push(plugin);
        }
        accepted
    }

    /// One name, one file — unless the deployment said otherwise: the
    /// plugins loaded, with what they are granted.
    fn one_per_name(
        &self,
        accepted: Vec<Arc<LoadedPlugin>>,
        lock: Option<&LockFile>,
        registry: &mut Registry,
    ) {
        let mut by_name: BTreeMap<String, Vec<Arc<LoadedPlugin>>> = BTreeMap::new();
        for p in accepted {
            by_name.entry(p.info.name.clone()).or_default().push(p);
        }
        for (name, mut claimants) in by_name {
            if claimants.len() > 1 {
                let trust = &self.settings.trust;
                let replacing = claimants.iter().any(|p| trust.overrides(&p.info, lock));
                if replacing {
                    claimants.retain(|p| {
                        let replaced = p.info.source == Source::Builtin;
                        if replaced {
                            registry.notices.push(Problem {
                                path: p.info.path.clone(),
                                error: format!(
                                    "first-party {} is replaced by a drop-in the deployment named (plugins.overrides or metaclaw.lock)",
                                    p.label()
                                ),
                            });
                        }
                        !replaced
                    });
                }
            }
            // `metaclaw plugins lock` scans every claimant, and decides.
            if claimants.len() > 1 && !self.settings.pinning {
                let all_pinned = lock.is_some_and(|l| {
                    claimants.iter().all(|p| {
                        l.by_hash(&p.info.sha256)
                            .is_some_and(|e| e.name == p.info.name)
                    })
                });
                let listed = claimants
                    .iter()
                    .map(|p| format!("{} ({})", p.info.path.display(), p.info.version))
                    .collect::<Vec<_>>()
                    .join(", ");
                if all_pinned {
                    registry.notices.push(Problem {
                        path: claimants[0].info.path.clone(),
                        error: format!(
                            "{} files claim the name {name:?}: {listed}; all are pinned",
                            claimants.len()
                        ),
                    });
                } else {
                    for p in &claimants {
                        registry.problems.push(Problem {
                            path: p.info.path.clone(),
                            error: format!(
                                "refused: {} files claim the name {name:?} ({listed}); none is loaded until all but one are removed (or `metaclaw plugins lock {name}@sha256:<hex>` names the one to trust)",
                                claimants.len()
                            ),
                        });
                    }
                    continue;
                }
            }
            for p in claimants {
                let plugin = self.granted(p, lock, registry);
                registry.plugins.push(plugin);
            }
        }
    }

    /// Compiles and probes every candidate not probed before, a few at a
    /// time, each on a thread of its own (a probe blocks on its deadline).
    fn probe_all(&self, candidates: &mut [Candidate]) {
        let mut todo: Vec<&mut Candidate> = candidates
            .iter_mut()
            .filter(|c| matches!(c.record.probe, ProbeState::NotYet))
            .collect();
        for batch in todo.chunks_mut(PROBES_AT_ONCE) {
            std::thread::scope(|scope| {
                for c in batch.iter_mut() {
                    scope.spawn(|| {
                        c.record.probe = self.probe_one(c);
                    });
                }
            });
        }
    }

    fn probe_one(&self, c: &mut Candidate) -> ProbeState {
        // A file the lock refused in an earlier scan was not kept in memory.
        let bytes = match (c.bytes.take(), c.embedded) {
            (Some(bytes), _) => bytes,
            (None, Some(p)) => Cow::Borrowed(p.bytes),
            (None, None) => {
                match files::read(&c.path, &c.record.stamp, self.settings.max_file_bytes) {
                    Ok(bytes) if sha256_hex(&bytes) == c.record.sha256 => Cow::Owned(bytes),
                    Ok(_) => return ProbeState::Failed("changed while being read".into()),
                    Err(e) => return ProbeState::Failed(e.to_string()),
                }
            }
        };
        match LoadedPlugin::probe(
            &self.engine,
            c.path.clone(),
            &bytes,
            c.record.sha256.clone(),
            c.source,
            &|kind| self.settings.limits_for(kind),
        ) {
            Ok(probed) => ProbeState::Ready(Arc::new(self.ready(probed))),
            Err(e) => ProbeState::Failed(e.to_string()),
        }
    }

    /// A probed plugin with no grants yet (`granted` decides them).
    fn ready(&self, probed: Probed) -> LoadedPlugin {
        probed.ready_on(Grants::default(), self.embedder.clone(), &self.embed_ledger)
    }

    /// Whether `plugin` may be loaded as what it says it is.
    fn admit(
        &self,
        plugin: &LoadedPlugin,
        lock: Option<&LockFile>,
        reserved: &BTreeSet<String>,
    ) -> Result<(), LoadRefused> {
        let info = &plugin.info;
        if let Some(entry) = lock.and_then(|l| l.by_hash(&info.sha256))
            && (entry.name != info.name || entry.version != info.version.to_string())
        {
            return Err(LoadRefused::PinnedAsOther {
                pinned: format!("{}@{}", entry.name, entry.version),
                calls_itself: plugin.label().to_string(),
            });
        }
        self.settings.trust.may_use_name(info, lock, reserved)
    }

    /// `plugin` with what its file is granted: the loaded one itself when
    /// that has not changed (keeping its pool, statistics, a disabled flag).
    fn granted(
        &self,
        plugin: Arc<LoadedPlugin>,
        lock: Option<&LockFile>,
        registry: &mut Registry,
    ) -> Arc<LoadedPlugin> {
        let (grants, notes) = self.settings.trust.grants_for(&plugin.info, lock);
        for error in notes {
            registry.notices.push(Problem {
                path: plugin.info.path.clone(),
                error,
            });
        }
        if *plugin.grants() == grants {
            return plugin;
        }
        let regranted = Arc::new(plugin.regranted(grants, self.embedder.clone()));
        if let Some(record) = registry.files.get_mut(&plugin.info.path) {
            record.probe = ProbeState::Ready(regranted.clone());
        }
        regranted
    }

    /// Paths and stamps of everything a scan reads.
    fn fingerprint_of(&self, entries: &[(Source, files::Entry)]) -> Vec<(PathBuf, Option<Stamp>)> {
        let mut out: Vec<(PathBuf, Option<Stamp>)> = entries
            .iter()
            .map(|(_, e)| (e.path.clone(), e.stamp.as_ref().ok().copied()))
            .collect();
        out.push((
            self.settings.lock_path.clone(),
            files::stamp_of(&self.settings.lock_path),
        ));
        out
    }

    pub(super) fn fingerprint(&self) -> Vec<(PathBuf, Option<Stamp>)> {
        self.fingerprint_of(&self.entries(None))
    }
}

/// Why a file the lock does not list is refused (said without running it:
/// what the lock recorded for that path, if anything).
fn unpinned(lock: &LockFile, path: &Path, sha256: &str) -> String {
    match lock.by_file(path) {
        Some(entry) => format!(
            "refused: {} has sha256 {sha256}, but metaclaw.lock pins {}@{} at this path to sha256 {} (run `metaclaw plugins lock` if this build is intended); it was not compiled or run",
            path.display(),
            entry.name,
            entry.version,
            entry.sha256
        ),
        None => format!(
            "refused: {} (sha256 {sha256}) is not pinned in metaclaw.lock; run `metaclaw plugins lock` to pin it. It was not compiled or run",
            path.display()
        ),
    }
}

pub(super) fn report_changes(previous: &Registry, next: &Registry) {
    for p in &next.plugins {
        if !previous.plugins.iter().any(|q| Arc::ptr_eq(p, q)) {
            tracing::info!(
                "plugin loaded: {} ({}, {}, {}, sha256 {})",
                p.label(),
                p.info.kind.as_str(),
                p.info.source.as_str(),
                p.info.path.display(),
                &p.info.sha256[..12]
            );
        }
    }
    for p in &previous.plugins {
        if !next.plugins.iter().any(|q| Arc::ptr_eq(p, q)) {
            tracing::info!("plugin unloaded: {} ({})", p.label(), p.info.path.display());
        }
    }
    for problem in &next.problems {
        if !previous.problems.contains(problem) {
            tracing::warn!("plugin {}: {}", problem.path.display(), problem.error);
        }
    }
    for notice in &next.notices {
        if !previous.notices.contains(notice) {
            tracing::warn!("plugin {}: {}", notice.path.display(), notice.error);
        }
    }
}
