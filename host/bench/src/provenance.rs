//! What produced a run's numbers, recorded beside them: the binary
//! (version and git commit), the skill bank each arm's metaclaw started
//! from, and the models that answered, judged and evolved. A score that
//! does not say what produced it cannot be compared with another.
//!
//! - `run.json`'s `measured_by`: the binary, and the built-in bank its
//!   metaclaw arms start from. A resume with another binary or bank is
//!   refused ([`Measured::differences`]): one run's rounds come from one of
//!   each.
//! - `arms.jsonl`: one line per arm and repeat ([`ArmRecord`]), written when
//!   it first starts.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::arms::Arm;
use super::run::RunSettings;
use metaclaw_core::config::LoadedConfig;
use metaclaw_core::digest::sha256_hex;

/// The commit this binary was built from (host/bench/build.rs), or `unknown`.
pub const COMMIT: &str = env!("METACLAW_GIT_COMMIT");

/// A metaclaw binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binary {
    pub version: String,
    pub commit: String,
}

impl Binary {
    pub fn this() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: COMMIT.to_string(),
        }
    }
}

impl fmt::Display for Binary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metaclaw {} (commit {})", self.version, self.commit)
    }
}

/// A skill library's digest: the sha256 of one `<id>\t<sha256 of its
/// SKILL.md>\n` line per skill, sorted by id. The same bank gives the same
/// digest wherever it is installed; one changed byte changes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bank {
    pub digest: String,
    pub skills: usize,
}

impl Bank {
    /// The digest of `(id, content hash)` pairs, in any order.
    pub fn of(skills: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut lines: Vec<String> = skills
            .into_iter()
            .map(|(id, hash)| format!("{id}\t{hash}\n"))
            .collect();
        lines.sort();
        Self {
            digest: sha256_hex(lines.concat()),
            skills: lines.len(),
        }
    }

    /// The built-in bank compiled into this binary: what every metaclaw
    /// arm's library starts as.
    pub fn builtin() -> Self {
        Self::of(
            metaclaw_core::skills::builtin::BUILTIN
                .iter()
                .map(|(id, text)| (id.to_string(), sha256_hex(text))),
        )
    }

    /// The skills of the library in `dir` as metaclaw loads them.
    pub fn library(dir: &Path) -> Self {
        Self::of(
            metaclaw_core::skills::library::scan(dir)
                .0
                .into_iter()
                .map(|s| (s.id, s.content_hash)),
        )
    }
}

impl fmt::Display for Bank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{} ({} skills)", self.digest, self.skills)
    }
}

/// What measures a run: `run.json`'s `measured_by`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measured {
    pub metaclaw: Binary,
    /// The built-in skill bank the metaclaw arms start from.
    pub bank: Bank,
}

impl Measured {
    pub fn this() -> Self {
        Self {
            metaclaw: Binary::this(),
            bank: Bank::builtin(),
        }
    }

    /// What differs between what measured a run (`recorded`, `None` for a
    /// run from before runs recorded it) and `self`, said for a person;
    /// empty when nothing does.
    pub fn differences(&self, recorded: Option<&Measured>) -> Vec<String> {
        let Some(recorded) = recorded else {
            return vec![format!(
                "it records no binary or skill bank (it was started before runs recorded them); \
                 this is {}, built-in skill bank {}",
                self.metaclaw, self.bank
            )];
        };
        let mut differ = Vec::new();
        if recorded.metaclaw != self.metaclaw {
            differ.push(format!(
                "it was measured by {}, this is {}",
                recorded.metaclaw, self.metaclaw
            ));
        }
        if recorded.bank != self.bank {
            differ.push(format!(
                "its arms started from the built-in skill bank {}, this binary's bank is {}",
                recorded.bank, self.bank
            ));
        }
        differ
    }
}

/// A model and the API it was called at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelAt {
    pub model: String,
    pub api: String,
}

impl fmt::Display for ModelAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}", self.model, self.api)
    }
}

/// One arm and repeat as it started: a line of `arms.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmRecord {
    pub arm: String,
    pub repeat: u32,
    /// The skill library its metaclaw home started with (`None` in
    /// `direct`: no metaclaw, no skills).
    pub bank: Option<Bank>,
    /// Who answers the agent's calls: the model at its API (`direct`), the
    /// upstream model behind the arm's metaclaw (`skills`, `learn`), or in
    /// `rl` the student: the trainable base model at the training service
    /// (the policy versions that served are in each round's `served_by`).
    pub serves: ModelAt,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub student: bool,
    /// The learning arms' judge and evolver (`None`: the arm does not learn).
    pub judge: Option<ModelAt>,
    pub evolver: Option<ModelAt>,
}

impl ArmRecord {
    /// The record of `arm` started with `config` (its metaclaw's; `None`
    /// for `direct`) and the library `bank` it starts from.
    pub fn new(
        settings: &RunSettings,
        (arm, repeat): (Arm, u32),
        config: Option<&LoadedConfig>,
        bank: Option<Bank>,
    ) -> Self {
        let upstream = ModelAt {
            model: settings.model.clone(),
            api: settings.api_base.clone(),
        };
        let Some(loaded) = config else {
            return Self {
                arm: arm.as_str().to_string(),
                repeat,
                bank,
                serves: upstream,
                student: false,
                judge: None,
                evolver: None,
            };
        };
        let c = &loaded.config;
        // As the learning jobs pick them: the role's own model and API,
        // else the main LLM's.
        let helper = |model: &str, api: &str| ModelAt {
            model: Some(model.trim())
                .filter(|m| !m.is_empty())
                .unwrap_or(c.llm.model_id.trim())
                .to_string(),
            api: Some(api.trim())
                .filter(|a| !a.is_empty())
                .unwrap_or(settings.api_base.as_str())
                .to_string(),
        };
        let learns = arm.learns();
        Self {
            arm: arm.as_str().to_string(),
            repeat,
            bank,
            serves: if arm.trains() {
                ModelAt {
                    model: c.rl.model.clone(),
                    api: c.rl.tinker_base_url.clone(),
                }
            } else {
                upstream
            },
            student: arm.trains(),
            judge: learns.then(|| helper(&c.rl.prm_model, &c.rl.prm_url)),
            evolver: arm
                .evolves()
                .then(|| helper(&c.rl.evolver_model, &c.rl.evolver_api_base)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The digest depends on the skills' ids and contents only, not on
    /// their order, and is what the documented shell line computes.
    #[test]
    fn the_bank_digest_is_over_sorted_ids_and_contents() {
        let a = ("a".to_string(), sha256_hex("one"));
        let b = ("b".to_string(), sha256_hex("two"));
        let one = Bank::of([a.clone(), b.clone()]);
        assert_eq!(one, Bank::of([b.clone(), a.clone()]));
        assert_eq!(one.skills, 2);
        assert_eq!(
            one.digest,
            sha256_hex(format!(
                "a\t{}\nb\t{}\n",
                sha256_hex("one"),
                sha256_hex("two")
            ))
        );
        assert_ne!(one, Bank::of([a, ("b".to_string(), sha256_hex("two!"))]));
    }

    /// The built-in bank installed into a library digests as the bank
    /// compiled in: what an arm's home starts with is the binary's bank.
    #[test]
    fn an_installed_bank_digests_as_the_compiled_one() {
        let dir = tempfile::tempdir().unwrap();
        metaclaw_core::skills::builtin::install(dir.path(), &|_| Vec::new(), &|_| false).unwrap();
        let installed = Bank::library(dir.path());
        assert_eq!(installed, Bank::builtin());
        assert_eq!(
            installed.skills,
            metaclaw_core::skills::builtin::BUILTIN.len()
        );
        let (name, _) = metaclaw_core::skills::builtin::BUILTIN[0];
        let file = dir.path().join(name).join("SKILL.md");
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replace("# ", "# Edited: ")).unwrap();
        assert_ne!(Bank::library(dir.path()), Bank::builtin());
    }

    #[test]
    fn differences_name_the_binary_and_the_bank() {
        let now = Measured::this();
        assert!(now.differences(Some(&now)).is_empty());
        let mut other = now.clone();
        other.metaclaw.commit = "0123abc".into();
        other.bank.digest = "f".repeat(64);
        let said = now.differences(Some(&other)).join("; ");
        assert!(said.contains("commit 0123abc"), "{said}");
        assert!(said.contains(&format!("commit {COMMIT}")), "{said}");
        assert!(
            said.contains(&format!("skill bank sha256:{}", "f".repeat(64))),
            "{said}"
        );
        assert!(said.contains(&now.bank.digest), "{said}");
        assert!(now.differences(None)[0].contains("records no binary"));
    }
}
