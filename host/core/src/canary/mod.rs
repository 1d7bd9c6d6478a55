//! Canaries: a new skill (and, with a trainer, new weights) serves a random
//! share of sessions beside a control share that goes without it, until a
//! sequential test says it helps (promote), hurts (roll back) or time runs
//! out (docs/learning.md "Canaries").
//!
//! Which arm a session is in is a pure function of the experiment and the
//! session id ([`arm_for`]): the same for every turn of the session, on
//! every restart, with nothing to look up while serving. The experiments
//! under test are held in memory ([`Live`]) for the turn path; the store
//! has the record of them (`store::experiments`).

pub mod decide;

use std::sync::{Arc, RwLock};

use serde::Serialize;

/// The side of an experiment a session is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// Gets the candidate.
    Candidate,
    /// Goes without it: what it is compared with.
    Control,
    /// Neither: goes without it and is not counted.
    Outside,
}

impl Arm {
    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Candidate => "candidate",
            Arm::Control => "control",
            Arm::Outside => "outside",
        }
    }
}

/// The arm of `session` in experiment `id`, `share` of sessions in each of
/// the two arms: a uniform number from sha256(id, session) below `share`
/// is the candidate's, below `2 · share` the control's.
pub fn arm_for(id: i64, session: &str, share: f64) -> Arm {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(id.to_le_bytes())
        .chain_update(session.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let u = (u64::from_le_bytes(first) >> 11) as f64 / (1u64 << 53) as f64;
    let share = share.clamp(0.0, 0.5);
    if u < share {
        Arm::Candidate
    } else if u < 2.0 * share {
        Arm::Control
    } else {
        Arm::Outside
    }
}

/// A skill version under test.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillCandidate {
    pub experiment: i64,
    pub skill_id: String,
    pub version: String,
    pub share: f64,
}

/// The experiments under test, as the turn path reads them.
#[derive(Default)]
pub struct Live {
    skills: RwLock<Arc<Vec<SkillCandidate>>>,
}

impl Live {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The skills under test as the store at `db` has them (none if it
    /// cannot be read: then every skill is served as usual, and the log
    /// says why).
    pub fn load(db: &crate::store::Db) -> Arc<Self> {
        let live = Self::new();
        if db.exists() {
            match db.read().and_then(|c| Ok(live.reload(&c)?)) {
                Ok(()) => {}
                Err(e) => tracing::warn!("the canaries under test were not read: {e:#}"),
            }
        }
        live
    }

    /// Reads the skills under test again.
    pub fn reload(&self, conn: &crate::store::sql::Conn) -> crate::store::sql::Result<()> {
        let skills = crate::store::experiments::testing(conn, "skill")?
            .into_iter()
            .map(|e| SkillCandidate {
                experiment: e.id,
                skill_id: e.subject,
                version: e.version,
                share: e.share,
            })
            .collect();
        self.set_skills(skills);
        Ok(())
    }

    /// Replaces the skills under test (after a start or a decision).
    pub fn set_skills(&self, skills: Vec<SkillCandidate>) {
        if let Ok(mut slot) = self.skills.write() {
            *slot = Arc::new(skills);
        }
    }

    pub fn skills(&self) -> Arc<Vec<SkillCandidate>> {
        self.skills.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Whether this version of a skill is under test, and if so the
    /// session's arm: `None` means serve it as usual. On the turn path, for
    /// every relevant skill: the version is rendered only for a skill with
    /// a candidate (nearly never).
    pub fn skill_arm(
        &self,
        skill_id: &str,
        version: &dyn std::fmt::Display,
        session: &str,
    ) -> Option<(i64, Arm)> {
        let skills = self.skills();
        let c = skills
            .iter()
            .filter(|c| c.skill_id == skill_id)
            .find(|c| c.version == version.to_string())?;
        Some((c.experiment, arm_for(c.experiment, session, c.share)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_are_sticky_and_take_their_share() {
        let mut counts = [0usize; 3];
        for i in 0..20_000 {
            let session = format!("session-{i}");
            let arm = arm_for(7, &session, 0.25);
            assert_eq!(arm, arm_for(7, &session, 0.25), "sticky");
            counts[arm as usize] += 1;
        }
        // 5,000 expected in each arm; a binomial sd of 61: ±400 is 6.5 sd.
        for n in &counts[..2] {
            assert!((4600..=5400).contains(n), "{counts:?}");
        }
        // Another experiment splits the same sessions independently: the
        // same arm in 1/16 + 1/16 + 1/4 = 3/8 of them (750 of 2,000, sd 22).
        let same = (0..2000)
            .filter(|i| {
                let s = format!("session-{i}");
                arm_for(7, &s, 0.25) == arm_for(8, &s, 0.25)
            })
            .count();
        assert!((650..=850).contains(&same), "{same}");
    }

    #[test]
    fn a_skill_is_served_as_usual_unless_that_version_is_under_test() {
        let live = Live::new();
        live.set_skills(vec![SkillCandidate {
            experiment: 3,
            skill_id: "tidy".into(),
            version: "1.1.0".into(),
            share: 0.5,
        }]);
        assert_eq!(live.skill_arm("tidy", &"1.0.0", "s"), None);
        assert_eq!(live.skill_arm("other", &"1.1.0", "s"), None);
        let (id, arm) = live.skill_arm("tidy", &"1.1.0", "s").unwrap();
        assert_eq!(id, 3);
        assert_ne!(arm, Arm::Outside, "share 1/2: every session is in an arm");
    }
}
