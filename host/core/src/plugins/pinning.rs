//! What `metaclaw plugins lock` pins: every loadable plugin file, except
//! where which file to trust is a choice only the user can make.
//!
//! - **Two files under one name** (two builds, two versions, or an impostor
//!   beside the real one) are pinned only as the user names them,
//!   `NAME@sha256:<hex>`: which one is meant cannot be told from the files.
//! - **A name granted by name** (`plugins.grants.NAME`) has exactly one
//!   pinned file, and a file the current lock does not already pin under
//!   that name is pinned only when named: pinning it gives it the grants.
//! - **A first-party name** is taken by a drop-in only with `--override
//!   NAME` (or `--override NAME@sha256:<hex>` when several files claim it).
//!
//! Anything else is an error that lists each choice as the command to run;
//! nothing is written until every choice is made.

use std::collections::{BTreeMap, BTreeSet};

use super::loaded::{PluginInfo, Source};
use super::lock::{LockEntry, LockFile};
use super::trust::{FileRef, Trust};
use crate::config::FilePin;

/// The files the user named on the command line.
#[derive(Debug, Clone, Default)]
pub struct Choice {
    /// `NAME@sha256:<hex>`: the file to trust under its name.
    pub pins: Vec<FilePin>,
    /// `--override NAME` or `--override NAME@sha256:<hex>`: a drop-in that
    /// replaces the first-party plugin of its name.
    pub overrides: Vec<FileRef>,
}

impl Choice {
    /// Names `--override` lets a drop-in take.
    pub fn override_names(&self) -> Vec<String> {
        self.overrides.iter().map(|o| o.name.clone()).collect()
    }

    /// Whether `info` is pinned as the replacement of a first-party plugin.
    fn overrides(&self, info: &PluginInfo) -> bool {
        info.source == Source::User
            && self.overrides.iter().any(|o| {
                o.name == info.name && o.sha256.as_ref().is_none_or(|sha| *sha == info.sha256)
            })
    }

    /// The files named by hash under `name` (as pins or overrides).
    fn named(&self, name: &str) -> BTreeSet<&str> {
        self.pins
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.sha256.as_str())
            .chain(
                self.overrides
                    .iter()
                    .filter(|o| o.name == name)
                    .filter_map(|o| o.sha256.as_deref()),
            )
            .collect()
    }

    /// The command that makes this choice and names `sha` under `name` too.
    fn command_naming(&self, name: &str, sha: &str) -> String {
        let mut words = vec!["metaclaw plugins lock".to_string()];
        let overriding = self.overrides.iter().any(|o| o.name == name);
        for o in &self.overrides {
            if !(o.name == name && o.sha256.is_none()) {
                words.push(format!("--override {o}"));
            }
        }
        words.extend(self.pins.iter().map(|p| p.to_string()));
        words.push(if overriding {
            format!("--override {name}@sha256:{sha}")
        } else {
            format!("{name}@sha256:{sha}")
        });
        words.join(" ")
    }
}

/// What to write, and what was left out because the user named another
/// file under its name.
#[derive(Debug)]
pub struct Plan {
    pub lock: LockFile,
    pub left_out: Vec<String>,
}

/// The lock for `files` (the loadable plugin files, not the plugins
/// compiled into metaclaw), or every choice still to be made. `reserved`:
/// the first-party names; `current`: the lock being replaced, whose pins
/// under a granted name stand without being named again.
pub fn plan(
    files: &[&PluginInfo],
    choice: &Choice,
    trust: &Trust,
    reserved: &BTreeSet<String>,
    current: Option<&LockFile>,
) -> Result<Plan, Vec<String>> {
    let mut errors = unknown_pins(files, choice, reserved, current);
    errors.extend(unloadable_overrides(files, choice));

    let mut by_name: BTreeMap<&str, Vec<&PluginInfo>> = BTreeMap::new();
    for f in files {
        by_name.entry(f.name.as_str()).or_default().push(f);
    }
    let inputs = Inputs {
        choice,
        trust,
        current,
    };
    let mut plugins = Vec::new();
    let mut left_out = Vec::new();
    for (name, claimants) in by_name {
        let Some(chosen) = inputs.choose(name, claimants, &mut left_out, &mut errors) else {
            continue;
        };
        plugins.extend(chosen.into_iter().map(|f| LockEntry {
            name: f.name.clone(),
            version: f.version.to_string(),
            kind: f.kind.as_str().into(),
            sha256: f.sha256.clone(),
            file: f.path.display().to_string(),
            first_party_override: choice.overrides(f),
        }));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Plan {
        lock: LockFile {
            version: 1,
            plugins,
        },
        left_out,
    })
}

/// Each file named by hash (as a pin or an override) that is not one that
/// can be pinned, with what can be.
fn unknown_pins(
    files: &[&PluginInfo],
    choice: &Choice,
    reserved: &BTreeSet<String>,
    current: Option<&LockFile>,
) -> Vec<String> {
    let mut errors = Vec::new();
    let named = choice
        .pins
        .iter()
        .map(|p| (p.name.as_str(), &p.sha256))
        .chain(
            choice
                .overrides
                .iter()
                .filter_map(|o| Some((o.name.as_str(), o.sha256.as_ref()?))),
        );
    for (name, sha) in named {
        if files.iter().any(|f| f.name == name && f.sha256 == *sha) {
            continue;
        }
        if reserved.contains(name) && !choice.overrides.iter().any(|o| o.name == name) {
            errors.push(format!(
                "{name}@sha256:{sha}: {name:?} is the name of a first-party plugin; to replace it with that file, pass `--override {name}@sha256:{sha}`"
            ));
        } else {
            errors.push(format!(
                "{name}@sha256:{sha}: no loadable plugin file called {name:?} has that sha256 ({})",
                listing(files.iter().filter(|f| f.name == name).copied(), current)
                    .unwrap_or_else(|| "none is loadable: see `metaclaw plugins list`".into())
            ));
        }
    }
    errors
}

/// Each `--override NAME` (without a hash) that no loadable drop-in takes.
fn unloadable_overrides(files: &[&PluginInfo], choice: &Choice) -> Vec<String> {
    choice
        .overrides
        .iter()
        .filter(|o| o.sha256.is_none())
        .filter(|o| {
            !files
                .iter()
                .any(|f| f.name == o.name && f.source == Source::User)
        })
        .map(|o| {
            format!(
                "--override {}: no drop-in plugin called {:?} is loadable",
                o.name, o.name
            )
        })
        .collect()
}

/// What the files to pin under each name are chosen by: the user's
/// choice, the grants, and the lock being replaced.
struct Inputs<'a> {
    choice: &'a Choice,
    trust: &'a Trust,
    current: Option<&'a LockFile>,
}

impl Inputs<'_> {
    /// The files to pin under `name` (the others claiming it go in
    /// `left_out` when some are named); `None`, with the choice still to
    /// be made in `errors`, when the user must choose first.
    fn choose<'f>(
        &self,
        name: &str,
        claimants: Vec<&'f PluginInfo>,
        left_out: &mut Vec<String>,
        errors: &mut Vec<String>,
    ) -> Option<Vec<&'f PluginInfo>> {
        let granted_words = self.granted_words(name, &claimants);
        let granted = granted_words.is_some();
        let words = granted_words.as_deref().unwrap_or_default();
        let named = self.choice.named(name);
        if !named.is_empty() {
            if granted && named.len() > 1 {
                errors.push(format!(
                    "{} files are named under {name:?}{words}: a name granted by name has exactly one pinned file. Name one: {}",
                    named.len(),
                    choices(name, &claimants, self.choice, self.current)
                ));
                return None;
            }
            let (chosen, others): (Vec<_>, Vec<_>) = claimants
                .iter()
                .copied()
                .partition(|f| named.contains(f.sha256.as_str()));
            left_out.extend(others.iter().map(|f| {
                format!(
                    "{} ({}@{}, sha256 {}): another file called {name:?} was named; while the lock stands this one is not loaded",
                    f.path.display(),
                    f.name,
                    f.version,
                    f.sha256
                )
            }));
            return Some(chosen);
        }
        let shas: BTreeSet<&str> = claimants.iter().map(|f| f.sha256.as_str()).collect();
        if shas.len() > 1 {
            errors.push(format!(
                "{n} files claim the name {name:?}{words}: which one is meant cannot be told, so none is pinned. Name the one to trust{}, or remove the others: {}",
                if granted {
                    ""
                } else {
                    " (to keep several side by side, name each)"
                },
                choices(name, &claimants, self.choice, self.current),
                n = shas.len(),
            ));
            return None;
        }
        let sha = claimants[0].sha256.as_str();
        let pinned_now = self
            .current
            .and_then(|l| l.sole_pin(name))
            .is_some_and(|e| e.sha256 == sha);
        let overridden = self.choice.overrides.iter().any(|o| o.name == name);
        if granted && !pinned_now && !overridden {
            errors.push(format!(
                "{name:?}{words}, and metaclaw.lock does not pin this file under that name yet: pinning it would give it those grants. If it is the file to trust: {}",
                choices(name, &claimants, self.choice, self.current)
            ));
            return None;
        }
        Some(claimants)
    }

    /// `, which plugins.grants.NAME grants ... by name` when `name` is
    /// granted by name to a drop-in claiming it. A first-party plugin's
    /// grants by name are its own, not the lock's to give (with a folder
    /// of first-party builds, those are files).
    fn granted_words(&self, name: &str, claimants: &[&PluginInfo]) -> Option<String> {
        let granted = self
            .trust
            .granted_by_name(name)
            .filter(|_| claimants.iter().any(|f| f.source == Source::User))?;
        Some(format!(
            ", which plugins.grants.{name} grants {} by name",
            granted.names().join(", ")
        ))
    }
}

/// Each file claiming `name`, with the command that names it.
fn choices(
    name: &str,
    claimants: &[&PluginInfo],
    choice: &Choice,
    current: Option<&LockFile>,
) -> String {
    let mut seen = BTreeSet::new();
    claimants
        .iter()
        .filter(|f| seen.insert(f.sha256.as_str()))
        .map(|f| {
            format!(
                "\n      {}\n        for {}",
                choice.command_naming(name, &f.sha256),
                describe(f, current)
            )
        })
        .collect()
}

/// The files, each described, or none when there are none.
fn listing<'a>(
    files: impl Iterator<Item = &'a PluginInfo>,
    current: Option<&LockFile>,
) -> Option<String> {
    let listed: Vec<String> = files
        .map(|f| format!("{}: sha256 {}", describe(f, current), f.sha256))
        .collect();
    (!listed.is_empty()).then(|| listed.join("; "))
}

fn describe(f: &PluginInfo, current: Option<&LockFile>) -> String {
    let pinned = current.and_then(|l| l.by_hash(&f.sha256)).is_some();
    format!(
        "{} ({}@{}{})",
        f.path.display(),
        f.name,
        f.version,
        if pinned { ", pinned now" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use semver::Version;

    use super::*;
    use crate::plugins::{FIRST_PARTY, Grants, Kind};

    const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const SHA_C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn file(name: &str, version: &str, sha: &str, path: &str) -> PluginInfo {
        PluginInfo {
            name: name.into(),
            version: Version::parse(version).unwrap(),
            kind: Kind::Scorer,
            description: String::new(),
            asks: Vec::new(),
            package: String::new(),
            imports: Vec::new(),
            sha256: sha.into(),
            path: PathBuf::from(path),
            size: 1,
            source: Source::User,
        }
    }

    /// `plugins.grants.trusted: [network, "env:SECRET_TOKEN"]`.
    fn trust() -> Trust {
        let mut grants = BTreeMap::new();
        grants.insert(
            "trusted".parse().unwrap(),
            Grants::parse(&["network".into(), "env:SECRET_TOKEN".into()]).unwrap(),
        );
        Trust::new(&grants, &[], false)
    }

    fn reserved() -> BTreeSet<String> {
        FIRST_PARTY.iter().map(|s| s.to_string()).collect()
    }

    fn pin(name: &str, sha: &str) -> FilePin {
        format!("{name}@sha256:{sha}").parse().unwrap()
    }

    fn named(pins: &[FilePin]) -> Choice {
        Choice {
            pins: pins.to_vec(),
            overrides: Vec::new(),
        }
    }

    fn pinned(plan: &Plan) -> Vec<(&str, &str)> {
        plan.lock
            .plugins
            .iter()
            .map(|e| (e.name.as_str(), e.sha256.as_str()))
            .collect()
    }

    #[test]
    fn two_files_under_a_granted_name_are_pinned_only_as_named() {
        let real = file("trusted", "0.1.0", SHA_A, "/p/trusted.wasm");
        let impostor = file("trusted", "9.9.9", SHA_B, "/p/zz.wasm");
        let other = file("notes", "1.0.0", SHA_C, "/p/notes.wasm");
        let files = [&real, &impostor, &other];

        let errors = plan(&files, &Choice::default(), &trust(), &reserved(), None).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = &errors[0];
        assert!(
            e.contains("2 files claim the name \"trusted\"")
                && e.contains("grants network, env:SECRET_TOKEN by name")
                && e.contains(&format!("metaclaw plugins lock trusted@sha256:{SHA_A}"))
                && e.contains(&format!("metaclaw plugins lock trusted@sha256:{SHA_B}"))
                && e.contains("/p/zz.wasm (trusted@9.9.9)"),
            "{e}"
        );

        // Named: only that file under the name, every other file as before.
        let plan = plan(
            &files,
            &named(&[pin("trusted", SHA_A)]),
            &trust(),
            &reserved(),
            None,
        )
        .unwrap();
        assert_eq!(pinned(&plan), vec![("notes", SHA_C), ("trusted", SHA_A)]);
        assert!(
            plan.left_out[0].contains("/p/zz.wasm"),
            "{:?}",
            plan.left_out
        );
    }

    #[test]
    fn a_granted_name_has_exactly_one_pinned_file() {
        let real = file("trusted", "0.1.0", SHA_A, "/p/trusted.wasm");
        let impostor = file("trusted", "9.9.9", SHA_B, "/p/zz.wasm");
        let both = named(&[pin("trusted", SHA_A), pin("trusted", SHA_B)]);
        let errors = plan(&[&real, &impostor], &both, &trust(), &reserved(), None).unwrap_err();
        assert!(errors[0].contains("exactly one pinned file"), "{errors:?}");
    }

    #[test]
    fn a_new_file_under_a_granted_name_is_pinned_only_when_named() {
        let impostor = file("trusted", "9.9.9", SHA_B, "/p/trusted.wasm");
        // The real one replaced by another build: the grant would move.
        let mut current = plan(
            &[&file("trusted", "0.1.0", SHA_A, "/p/trusted.wasm")],
            &named(&[pin("trusted", SHA_A)]),
            &trust(),
            &reserved(),
            None,
        )
        .unwrap()
        .lock;
        let errors = plan(
            &[&impostor],
            &Choice::default(),
            &trust(),
            &reserved(),
            Some(&current),
        )
        .unwrap_err();
        assert!(
            errors[0].contains("does not pin this file under that name yet")
                && errors[0].contains(&format!("metaclaw plugins lock trusted@sha256:{SHA_B}")),
            "{errors:?}"
        );
        // Nor on a first lock.
        assert!(
            plan(
                &[&impostor],
                &Choice::default(),
                &trust(),
                &reserved(),
                None
            )
            .is_err()
        );
        // The file the lock pins stands: re-locking needs no name.
        current.plugins[0].sha256 = SHA_B.into();
        let again = plan(
            &[&impostor],
            &Choice::default(),
            &trust(),
            &reserved(),
            Some(&current),
        )
        .unwrap();
        assert_eq!(pinned(&again), vec![("trusted", SHA_B)]);
        // A lock pinning two files there confirms neither.
        current.plugins.push(LockEntry {
            sha256: SHA_A.into(),
            ..current.plugins[0].clone()
        });
        assert!(
            plan(
                &[&impostor],
                &Choice::default(),
                &trust(),
                &reserved(),
                Some(&current)
            )
            .is_err()
        );
    }

    #[test]
    fn names_without_grants_pin_every_file_unless_two_share_one() {
        let a = file("notes", "1.0.0", SHA_A, "/p/notes-1.wasm");
        let copy = file("notes", "1.0.0", SHA_A, "/p/notes-copy.wasm");
        let b = file("notes", "2.0.0", SHA_B, "/p/notes-2.wasm");
        // One file, and identical copies of it: pinned without a word.
        let plan_one = plan(
            &[&a, &copy],
            &Choice::default(),
            &trust(),
            &reserved(),
            None,
        );
        assert_eq!(plan_one.unwrap().lock.plugins.len(), 2);
        // Two builds: only as named, and both when both are named.
        let errors = plan(&[&a, &b], &Choice::default(), &trust(), &reserved(), None).unwrap_err();
        assert!(errors[0].contains("name each"), "{errors:?}");
        let both = named(&[pin("notes", SHA_A), pin("notes", SHA_B)]);
        let plan_both = plan(&[&a, &b], &both, &trust(), &reserved(), None).unwrap();
        assert_eq!(pinned(&plan_both), vec![("notes", SHA_A), ("notes", SHA_B)]);
        // A name that no loadable file has is an error, not ignored.
        let wrong = named(&[pin("notes", SHA_C)]);
        let errors = plan(&[&a], &wrong, &trust(), &reserved(), None).unwrap_err();
        assert!(
            errors[0].contains("no loadable plugin file called \"notes\" has that sha256")
                && errors[0].contains(SHA_A),
            "{errors:?}"
        );
    }

    #[test]
    fn first_party_names_take_an_override_and_one_file() {
        let fake = file("guard", "9.9.9", SHA_A, "/p/guard.wasm");
        let other = file("guard", "9.9.8", SHA_B, "/p/guard-2.wasm");
        let by_name = Choice {
            pins: Vec::new(),
            overrides: vec!["guard".parse().unwrap()],
        };
        // One drop-in: --override NAME, as before.
        let one = plan(&[&fake], &by_name, &trust(), &reserved(), None).unwrap();
        assert!(one.lock.plugins[0].first_party_override);
        // Two: name the one, with --override NAME@sha256.
        let errors = plan(&[&fake, &other], &by_name, &trust(), &reserved(), None).unwrap_err();
        assert!(
            errors[0].contains(&format!(
                "metaclaw plugins lock --override guard@sha256:{SHA_B}"
            )),
            "{errors:?}"
        );
        let by_hash = Choice {
            pins: Vec::new(),
            overrides: vec![format!("guard@sha256:{SHA_B}").parse().unwrap()],
        };
        let chosen = plan(&[&fake, &other], &by_hash, &trust(), &reserved(), None).unwrap();
        assert_eq!(pinned(&chosen), vec![("guard", SHA_B)]);
        assert!(chosen.lock.plugins[0].first_party_override);
        // A first-party name named without --override says what to pass.
        let errors = plan(
            &[],
            &named(&[pin("guard", SHA_A)]),
            &trust(),
            &reserved(),
            None,
        )
        .unwrap_err();
        assert!(
            errors[0].contains(&format!("pass `--override guard@sha256:{SHA_A}`")),
            "{errors:?}"
        );
    }
}
