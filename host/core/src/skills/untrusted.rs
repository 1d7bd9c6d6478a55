//! Skills other tools drop into the folder (`skills.untrusted`: by name,
//! AutoResearchClaw's `arc-*` by default) are untrusted input, like a draft
//! of the evolver's: a poisoned one would steer every turn it is injected
//! into. Such a skill is *held* — out of every turn, of the evolver's view
//! and of exports — until the `guard` evolver has passed its exact text.
//!
//! The verdict is kept by the sha256 of the SKILL.md the guard read
//! (`store::skill_checks`): an edit is checked again, a restart is not. The
//! daemon's checker ([`Untrusted::run`]) looks again whenever the library
//! or the plugins change, and every minute while something waits.
//!
//! Fails closed: with no guard to ask (plugins off or still loading,
//! `guard` disabled, or `plugins.evolvers` leaving it out), every such
//! skill stays held and `status` says why (`skills.untrusted.blocked`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::library::{Library, Snapshot};
use super::skill::Skill;
use crate::plugins::{LoadedPlugin, PluginHost, types};
use crate::store::skill_checks::{self, Check};

/// The evolver plugin whose verdict clears a skill.
const GUARD: &str = "guard";

/// How often a held skill is tried again when nothing wakes the checker
/// (the guard still loading, a failed call).
const RETRY: Duration = Duration::from_secs(60);

/// Why a skill is out of turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// Not checked yet (or the guard could not be asked).
    Pending,
    /// The guard refused this text, saying why.
    Refused(String),
}

impl Hold {
    /// One word and the reason, for `skills list` and `status`.
    pub fn label(&self) -> String {
        match self {
            Hold::Pending => "held: waiting for the guard".into(),
            Hold::Refused(why) => format!("held: guard refused it: {why}"),
        }
    }
}

pub struct Untrusted {
    /// `skills.untrusted`.
    patterns: Vec<String>,
    db: crate::store::Db,
    /// The verdicts by the sha256 of the text judged.
    checks: RwLock<HashMap<String, Check>>,
    /// Why held skills cannot be checked now, if they cannot.
    blocked: RwLock<Option<String>>,
    wake: tokio::sync::Notify,
}

/// Skills from other tools in `status`: the patterns, how many matching
/// skills passed, are held or were refused, and why checking is blocked.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct UntrustedStatus {
    pub patterns: Vec<String>,
    pub passed: usize,
    pub held: usize,
    pub refused: Vec<RefusedSkill>,
    pub blocked: Option<String>,
}

/// A skill the guard refused, and why.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RefusedSkill {
    pub id: String,
    pub reason: String,
}

impl Untrusted {
    /// The patterns of `skills.untrusted`, with the verdicts the store at
    /// `db` holds (none when it cannot be read: everything matching stays
    /// held).
    pub fn new(patterns: Vec<String>, db: crate::store::Db) -> Arc<Self> {
        let this = Arc::new(Self {
            patterns,
            db,
            checks: RwLock::new(HashMap::new()),
            blocked: RwLock::new(None),
            wake: tokio::sync::Notify::new(),
        });
        if !this.patterns.is_empty() {
            this.reload();
        }
        this
    }

    /// Reads the verdicts again (another process may have checked).
    fn reload(&self) {
        if !self.db.exists() {
            return;
        }
        let read = self
            .db
            .read()
            .map_err(|e| format!("{e:#}"))
            .and_then(|conn| skill_checks::all(&conn).map_err(|e| e.to_string()));
        match read {
            Ok(all) => {
                if let Ok(mut checks) = self.checks.write() {
                    *checks = all.into_iter().map(|c| (c.sha256.clone(), c)).collect();
                }
            }
            // A store without the table yet (older schema, read-only):
            // nothing passed.
            Err(e) => {
                tracing::debug!("the guard's verdicts on untrusted skills were not read: {e}")
            }
        }
    }

    /// Whether a skill of this name came from another tool.
    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| glob(p, name))
    }

    /// Why `skill` is out of turns, if it is.
    pub fn hold(&self, skill: &Skill) -> Option<Hold> {
        if !self.matches(&skill.name) {
            return None;
        }
        // Fails closed: a poisoned lock holds it.
        let Ok(checks) = self.checks.read() else {
            return Some(Hold::Pending);
        };
        match checks.get(&skill.content_hash) {
            Some(c) if c.passed => None,
            Some(c) => Some(Hold::Refused(c.reason.clone().unwrap_or_default())),
            None => Some(Hold::Pending),
        }
    }

    /// Whether `skill` is held.
    pub fn held(&self, skill: &Skill) -> bool {
        self.hold(skill).is_some()
    }

    /// Asks the checker to look now (the library or the plugins changed).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// For `status`: the patterns, how many matching skills passed, are
    /// held or were refused, and why checking is blocked, if it is.
    pub fn status(&self, snapshot: &Snapshot) -> UntrustedStatus {
        let (mut passed, mut pending, mut refused) = (0, 0, Vec::new());
        for skill in &snapshot.skills {
            match self.matches(&skill.name).then(|| self.hold(skill)) {
                None => {}
                Some(None) => passed += 1,
                Some(Some(Hold::Pending)) => pending += 1,
                Some(Some(Hold::Refused(why))) => refused.push(RefusedSkill {
                    id: skill.id.clone(),
                    reason: why,
                }),
            }
        }
        UntrustedStatus {
            patterns: self.patterns.clone(),
            passed,
            held: pending + refused.len(),
            refused,
            blocked: self.blocked.read().ok().and_then(|b| b.clone()),
        }
    }

    /// Checks held skills until `cancel`led: at once, whenever woken
    /// ([`Untrusted::wake`]), and every minute while some wait.
    pub async fn run(self: Arc<Self>, library: Arc<Library>, plugins: Option<Arc<PluginHost>>) {
        if self.patterns.is_empty() {
            return;
        }
        loop {
            let waiting = self.check_held(&library, plugins.as_deref()).await;
            if waiting {
                let _ = tokio::time::timeout(RETRY, self.wake.notified()).await;
            } else {
                self.wake.notified().await;
            }
        }
    }

    /// Asks the guard about every held skill it has not judged in this
    /// text; true while some are left to ask (the guard could not be).
    pub async fn check_held(&self, library: &Library, plugins: Option<&PluginHost>) -> bool {
        if !library.loaded() {
            return true;
        }
        let snapshot = library.snapshot();
        let waiting: Vec<Arc<Skill>> = snapshot
            .skills
            .iter()
            .filter(|s| self.hold(s) == Some(Hold::Pending))
            .cloned()
            .collect();
        if waiting.is_empty() {
            self.set_blocked(None);
            return false;
        }
        let guard = match guard_of(plugins) {
            Ok(guard) => guard,
            Err(why) => {
                self.set_blocked(Some(why.to_string()));
                return true;
            }
        };
        for skill in waiting {
            match self.ask(&guard, plugins, &skill).await {
                Ok(check) => {
                    if check.passed {
                        tracing::info!(skill = %skill.id, "untrusted skill passed the guard: it may be injected");
                    } else {
                        tracing::warn!(skill = %skill.id, "untrusted skill refused by the guard, held: {}", check.reason.as_deref().unwrap_or(""));
                    }
                    if let Ok(mut checks) = self.checks.write() {
                        checks.insert(check.sha256.clone(), check);
                    }
                }
                Err(why) => {
                    self.set_blocked(Some(why.to_string()));
                    return true;
                }
            }
        }
        self.set_blocked(None);
        false
    }

    /// The guard's verdict on `skill`'s text, recorded in the store.
    async fn ask(
        &self,
        guard: &Arc<LoadedPlugin>,
        plugins: Option<&PluginHost>,
        skill: &Skill,
    ) -> Result<Check, GuardFailed> {
        let draft = types::SkillDraft {
            name: skill.name.clone(),
            description: skill.description.clone(),
            category: skill.category.as_str().into(),
            tags: skill.tags.clone(),
            body: skill.body.clone(),
            updates: None,
        };
        let call = {
            let guard = guard.clone();
            async move { guard.process(&[draft], &[]).await }
        };
        // On the plugin runtime, under the plugin's deadline.
        let outcomes = match plugins {
            Some(host) => host
                .engine
                .spawn(call)
                .await
                .ok_or(GuardFailed::Cancelled)?,
            None => call.await,
        }
        .map_err(|e| GuardFailed::Failed {
            skill: skill.id.clone(),
            error: e.to_string(),
        })?;
        let (passed, reason) = match outcomes.into_iter().next() {
            Some(types::DraftOutcome::Keep(_)) => (true, None),
            Some(types::DraftOutcome::Reject(why)) => {
                (false, Some(crate::untrusted::log_line(&why, 1000)))
            }
            None => return Err(GuardFailed::NoVerdict(skill.id.clone())),
        };
        let check = Check {
            sha256: skill.content_hash.clone(),
            skill_id: skill.id.clone(),
            passed,
            reason,
            checker: guard.label().to_string(),
            at_ms: crate::clock::now_ms(),
        };
        let unrecorded = |e: &dyn std::fmt::Display| GuardFailed::Unrecorded(format!("{e:#}"));
        let conn = self.db.side_writer().map_err(|e| unrecorded(&e))?;
        skill_checks::record(&conn, &check).map_err(|e| unrecorded(&e))?;
        Ok(check)
    }

    fn set_blocked(&self, why: Option<String>) {
        if let Ok(mut blocked) = self.blocked.write() {
            if why.is_some() && *blocked != why {
                tracing::warn!(
                    "untrusted skills stay held: {}",
                    why.as_deref().unwrap_or("")
                );
            }
            *blocked = why;
        }
    }
}

/// Why the guard gave no verdict that was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardFailed {
    #[error("the guard's call was cancelled")]
    Cancelled,
    #[error("the guard failed on {skill}: {error}")]
    Failed { skill: String, error: String },
    #[error("the guard returned no verdict on {0}")]
    NoVerdict(String),
    #[error("cannot record the guard's verdict: {0}")]
    Unrecorded(String),
}

/// Why there is no guard to ask: skills from other tools stay held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoGuard {
    #[error("no guard evolver: plugins are off (see the log at start)")]
    PluginsOff,
    #[error("the plugins are still loading")]
    Loading,
    #[error("plugins.evolvers leaves out guard, and only guard clears a skill from another tool")]
    LeftOut,
    #[error("guard is not loaded or is disabled (see `metaclaw plugins list`)")]
    NotLoaded,
}

/// The loaded, enabled `guard` evolver, or why there is none. Unlike
/// evolution, a deployment that leaves guard out of `plugins.evolvers` gets
/// no exception: nothing else could clear these skills.
fn guard_of(plugins: Option<&PluginHost>) -> Result<Arc<LoadedPlugin>, NoGuard> {
    let Some(host) = plugins else {
        return Err(NoGuard::PluginsOff);
    };
    if let Some(guard) = host.evolvers().into_iter().find(|p| p.info.name == GUARD) {
        return Ok(guard);
    }
    if host.current().generation == 0 {
        return Err(NoGuard::Loading);
    }
    Err(match &host.settings.evolvers {
        Some(list) if !list.iter().any(|s| s.name == GUARD) => NoGuard::LeftOut,
        _ => NoGuard::NotLoaded,
    })
}

/// `pattern` (with `*` for any run of characters) matches all of `name`.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    // One part: no `*` at all.
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == name;
    };
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        assert!(glob("arc-*", "arc-survey-method"));
        assert!(glob("arc-*", "arc-"));
        assert!(!glob("arc-*", "search-arc-x"));
        assert!(glob("*-import", "notes-import"));
        assert!(glob("a*b*c", "a-x-b-y-c"));
        assert!(!glob("a*b*c", "a-x-c-b"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
        assert!(glob("*", "anything"));
        assert!(!glob("ab*ba", "aba"));
    }

    fn skill(name: &str, text: &str) -> Skill {
        super::super::skill::parse(name, text).unwrap()
    }

    #[test]
    fn a_matching_skill_is_held_until_its_exact_text_passed() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(dir.path().join("m.db"));
        db.side_writer().unwrap();
        let clean = skill(
            "arc-notes",
            "---\nname: arc-notes\ndescription: Take notes.\n---\nWrite them down.\n",
        );
        let mine = skill(
            "notes",
            "---\nname: notes\ndescription: Take notes.\n---\nWrite them down.\n",
        );
        let untrusted = Untrusted::new(vec!["arc-*".into()], db.clone());
        assert_eq!(untrusted.hold(&clean), Some(Hold::Pending));
        assert!(untrusted.held(&clean));
        assert!(!untrusted.held(&mine));
        let conn = db.side_writer().unwrap();
        skill_checks::record(
            &conn,
            &Check {
                sha256: clean.content_hash.clone(),
                skill_id: clean.id.clone(),
                passed: true,
                reason: None,
                checker: "guard@0.1.0".into(),
                at_ms: 1,
            },
        )
        .unwrap();
        // A second process (the CLI) reads the verdict from the store.
        let later = Untrusted::new(vec!["arc-*".into()], db);
        assert!(!later.held(&clean));
        // An edit is another text: held again.
        let edited = skill(
            "arc-notes",
            "---\nname: arc-notes\ndescription: Take notes.\n---\nWrite them all down.\n",
        );
        assert_eq!(later.hold(&edited), Some(Hold::Pending));
        // `[]` trusts the folder.
        let trusting = Untrusted::new(Vec::new(), crate::store::test_db(dir.path().join("m.db")));
        assert!(!trusting.held(&edited));
    }
}
