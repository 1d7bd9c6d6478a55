//! What a skill version's outcomes say (docs/skills.md, "Outcomes"): a
//! success estimate with a prior and its uncertainty, the optimistic
//! value retrieval ranks by, and the test that flags a version clearly
//! worse than the turns without it. Pure arithmetic over the store's
//! running sums ([`crate::store::outcomes::Sums`]).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use crate::store::outcomes::{ALL, Key, Sums};

/// How many turns' worth of weight the prior has: a new version starts at
/// the library's success rate, and its own turns outweigh that after a
/// few judgments.
pub const PRIOR_TURNS: f64 = 2.0;
/// How far above its estimate a version is ranked, in standard
/// deviations: the less tried, the more room (exploration).
pub const EXPLORATION: f64 = 1.0;
/// The fewest judged turns, with the skill and without it, before a
/// version can be flagged.
pub const MIN_EVIDENCE: i64 = 10;
/// How much lower (on the reward's [-1, 1] scale) a version's mean reward
/// must be than the turns without it to be flagged.
pub const MIN_GAP: f64 = 0.25;
/// The one-sided z a gap must reach to be flagged (p < 0.01).
pub const FLAG_Z: f64 = 2.326;

/// A reward in [-1, 1] as a success in [0, 1].
fn success(reward_sum: f64, judged: i64) -> f64 {
    (reward_sum + judged as f64) / 2.0
}

/// A skill version's success estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// The posterior mean success rate, in [0, 1].
    pub mean: f64,
    /// Its standard deviation.
    pub sd: f64,
    /// A 95% interval, `mean ± 1.96 sd` within [0, 1].
    pub low: f64,
    pub high: f64,
    /// Judged turns behind it.
    pub judged: i64,
}

impl Estimate {
    /// `mean + EXPLORATION · sd`: what retrieval ranks by.
    pub fn optimistic(&self) -> f64 {
        (self.mean + EXPLORATION * self.sd).min(1.0)
    }
}

/// The prior's mean: the success rate of every judged main turn, itself
/// pulled towards 1/2 by one success and one failure (a new library has
/// no turns).
pub fn prior_mean(all: &Sums) -> f64 {
    (success(all.reward_sum, all.judged) + 1.0) / (all.judged as f64 + 2.0)
}

/// The Beta posterior of a version's success rate: the prior (mean
/// `prior`, weight [`PRIOR_TURNS`]) updated by its judged turns, each
/// counting `(reward + 1) / 2` successes.
pub fn estimate(sums: &Sums, prior: f64) -> Estimate {
    let prior = prior.clamp(0.01, 0.99);
    let n = sums.judged.max(0) as f64;
    let s = success(sums.reward_sum, sums.judged).clamp(0.0, n);
    let a = PRIOR_TURNS * prior + s;
    let b = PRIOR_TURNS * (1.0 - prior) + (n - s);
    let total = a + b;
    let mean = a / total;
    let sd = (a * b / (total * total * (total + 1.0))).sqrt();
    Estimate {
        mean,
        sd,
        low: (mean - 1.96 * sd).max(0.0),
        high: (mean + 1.96 * sd).min(1.0),
        judged: sums.judged,
    }
}

/// A version's rank among the relevant: `relevance` (the retriever's
/// score over the best one's, in (0, 1]) and its optimistic estimate
/// ([`Estimate::optimistic`]), weighted by `weight`
/// (`skills.outcome_weight`; 0: relevance alone).
pub fn rank(relevance: f64, optimistic: f64, weight: f64) -> f64 {
    let w = weight.clamp(0.0, 1.0);
    (1.0 - w) * relevance + w * optimistic
}

/// Why a version was flagged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flag {
    /// Mean reward of its judged turns, and of the turns without it.
    pub mean_with: f64,
    pub mean_without: f64,
    /// The gap in standard errors.
    pub z: f64,
    pub reason: String,
}

/// The mean and the sample variance of rewards from their sums.
fn moments(s: &Sums) -> (f64, f64) {
    let n = s.judged.max(1) as f64;
    let mean = s.reward_sum / n;
    let var = if s.judged > 1 {
        ((s.reward_sq - n * mean * mean) / (n - 1.0)).max(0.0)
    } else {
        0.0
    };
    (mean, var)
}

/// Flags a version whose judged turns are clearly worse than the main
/// turns without it: both have [`MIN_EVIDENCE`] judged turns, its mean
/// reward is at least [`MIN_GAP`] lower, and the gap is [`FLAG_Z`]
/// standard errors (Welch's, one-sided).
pub fn flag(with: &Sums, all: &Sums) -> Option<Flag> {
    let gap = Gap::of(with, all)?;
    (gap.z <= -FLAG_Z && gap.mean_without - gap.mean_with >= MIN_GAP).then(|| Flag {
        mean_with: gap.mean_with,
        mean_without: gap.mean_without,
        z: -gap.z,
        reason: format!(
            "mean reward {:+.2} over {} judged turns, against {:+.2} over {} without it (z = {:.1})",
            gap.mean_with, with.judged, gap.mean_without, gap.judged_without, -gap.z
        ),
    })
}

/// A version's judged turns against the main turns without it: the means
/// and the gap (with − without) in standard errors (Welch's); `None` with
/// fewer than [`MIN_EVIDENCE`] judged turns on either side.
struct Gap {
    mean_with: f64,
    mean_without: f64,
    judged_without: i64,
    z: f64,
}

impl Gap {
    fn of(with: &Sums, all: &Sums) -> Option<Self> {
        let without = all.without(with);
        if with.judged < MIN_EVIDENCE || without.judged < MIN_EVIDENCE {
            return None;
        }
        let (mean_with, var_with) = moments(with);
        let (mean_without, var_without) = moments(&without);
        // A floor on the error: rewards that never vary would make any gap
        // infinitely sure.
        let se = (var_with / with.judged as f64 + var_without / without.judged as f64)
            .sqrt()
            .max(1e-3);
        Some(Self {
            mean_with,
            mean_without,
            judged_without: without.judged,
            z: (mean_with - mean_without) / se,
        })
    }
}

/// A version's effect as the dashboard's overview says it: its judged
/// turns' mean reward against the main turns without it, called `helping`
/// or `worse` by the rule [`flag`] uses (one-sided Welch at [`FLAG_Z`],
/// p < 0.01, and a gap of at least [`MIN_GAP`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Effect {
    /// `None`: no judged turn on that side.
    pub mean_with: Option<f64>,
    pub mean_without: Option<f64>,
    pub judged_with: i64,
    pub judged_without: i64,
    /// The gap (with − without) in standard errors; `None` with fewer
    /// than [`MIN_EVIDENCE`] judged turns on either side.
    pub z: Option<f64>,
    /// `helping`, `worse`, `no clear difference` or `too few judged turns`.
    pub verdict: &'static str,
}

pub fn effect(with: &Sums, all: &Sums) -> Effect {
    let without = all.without(with);
    let gap = Gap::of(with, all);
    // Called either way by the rule that flags a version: sure (z) and
    // large enough ([`MIN_GAP`]).
    let verdict = match &gap {
        None => "too few judged turns",
        Some(g) if g.z >= FLAG_Z && g.mean_with - g.mean_without >= MIN_GAP => "helping",
        Some(_) if flag(with, all).is_some() => "worse",
        Some(_) => "no clear difference",
    };
    Effect {
        mean_with: (with.judged > 0).then(|| moments(with).0),
        mean_without: (without.judged > 0).then(|| moments(&without).0),
        judged_with: with.judged,
        judged_without: without.judged,
        z: gap.map(|g| g.z),
        verdict,
    }
}

/// Why the skills' outcomes could not be read from the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutcomesUnread {
    #[error("{0}")]
    Store(String),
    #[error("reading {whose} outcomes from {db}: {error}")]
    Read {
        whose: String,
        db: crate::store::Db,
        error: String,
    },
}

/// The outcomes as retrieval reads them: a snapshot of the store's sums,
/// replaced whole after each learning job that judged turns (retrieval
/// never touches the store).
#[derive(Debug)]
pub struct Board {
    by_skill: HashMap<String, Vec<VersionOutcome>>,
    all: Sums,
    prior: f64,
    /// A version with no judged turn: the prior's optimistic value.
    fresh: f64,
}

/// One version's sums, and what retrieval ranks by, worked out once per
/// board (a turn only looks it up).
#[derive(Debug)]
pub struct VersionOutcome {
    pub version: String,
    parsed: Option<semver::Version>,
    pub sums: Sums,
    optimistic: f64,
}

/// No turn yet: every version at the prior's ½.
impl Default for Board {
    fn default() -> Self {
        Board::new(HashMap::new())
    }
}

impl Board {
    pub fn new(rows: HashMap<Key, Sums>) -> Self {
        let all = rows
            .get(&(ALL.to_string(), ALL.to_string()))
            .copied()
            .unwrap_or_default();
        let prior = prior_mean(&all);
        let mut by_skill: HashMap<String, Vec<VersionOutcome>> = HashMap::new();
        for ((id, version), sums) in rows {
            if id == ALL {
                continue;
            }
            by_skill.entry(id).or_default().push(VersionOutcome {
                parsed: semver::Version::parse(&version).ok(),
                version,
                sums,
                optimistic: estimate(&sums, prior).optimistic(),
            });
        }
        Board {
            by_skill,
            all,
            prior,
            fresh: estimate(&Sums::default(), prior).optimistic(),
        }
    }

    /// The outcomes in the store at `db` (a store not made yet has none).
    pub fn read(db: &crate::store::Db) -> Result<Self, OutcomesUnread> {
        if !db.exists() {
            return Ok(Self::default());
        }
        let conn = db
            .read()
            .map_err(|e| OutcomesUnread::Store(format!("{e:#}")))?;
        let rows = crate::store::outcomes::all(&conn).map_err(|e| OutcomesUnread::Read {
            whose: "the skills'".into(),
            db: db.clone(),
            error: e.to_string(),
        })?;
        Ok(Self::new(rows))
    }

    /// The board of one agent's turns only (`skills stats --agent`).
    pub fn read_of_agent(db: &crate::store::Db, agent: &str) -> Result<Self, OutcomesUnread> {
        if !db.exists() {
            return Ok(Self::default());
        }
        let conn = db
            .read()
            .map_err(|e| OutcomesUnread::Store(format!("{e:#}")))?;
        let rows =
            crate::store::outcomes::of_agent(&conn, agent).map_err(|e| OutcomesUnread::Read {
                whose: format!("agent {agent}'s"),
                db: db.clone(),
                error: e.to_string(),
            })?;
        Ok(Self::new(rows))
    }

    /// One version's sums (none yet: zeros).
    pub fn sums(&self, id: &str, version: &str) -> Sums {
        self.by_skill
            .get(id)
            .and_then(|v| v.iter().find(|o| o.version == version))
            .map_or_else(Sums::default, |o| o.sums)
    }

    /// What retrieval ranks this version by ([`Estimate::optimistic`]),
    /// without formatting or arithmetic: a turn's lookup.
    pub fn optimistic(&self, id: &str, version: &semver::Version) -> f64 {
        self.by_skill
            .get(id)
            .and_then(|v| v.iter().find(|o| o.parsed.as_ref() == Some(version)))
            .map_or(self.fresh, |o| o.optimistic)
    }

    /// [`Board::optimistic`] of a version with no judged turn.
    pub fn fresh(&self) -> f64 {
        self.fresh
    }

    pub fn estimate(&self, id: &str, version: &str) -> Estimate {
        estimate(&self.sums(id, version), self.prior)
    }

    pub fn flag(&self, id: &str, version: &str) -> Option<Flag> {
        flag(&self.sums(id, version), &self.all)
    }

    /// Every version of `id` with outcomes recorded.
    pub fn versions(&self, id: &str) -> &[VersionOutcome] {
        self.by_skill.get(id).map_or(&[], Vec::as_slice)
    }

    /// Every main turn's sums.
    pub fn all(&self) -> &Sums {
        &self.all
    }

    pub fn prior(&self) -> f64 {
        self.prior
    }
}

/// The outcomes a retriever granted `outcomes` sees in one turn: each
/// skill's current version in that turn's library, on that turn's board.
pub struct View {
    pub board: Arc<Board>,
    pub snapshot: Arc<crate::skills::library::Snapshot>,
}

impl crate::plugins::OutcomeSource for View {
    fn outcome(&self, id: &str) -> Option<crate::plugins::outcomes::SkillOutcome> {
        let skill = self.snapshot.get(id)?;
        let version = skill.version.to_string();
        let sums = self.board.sums(id, &version);
        let estimate = estimate(&sums, self.board.prior);
        Some(crate::plugins::outcomes::SkillOutcome {
            injected: sums.injected.max(0) as u64,
            judged: sums.judged.max(0) as u64,
            mean: estimate.mean,
            sd: estimate.sd,
            low: estimate.low,
            high: estimate.high,
            flagged: flag(&sums, &self.board.all).is_some(),
            version,
        })
    }
}

/// The board shared by retrieval (reads) and learning (replaces it).
#[derive(Debug, Default)]
pub struct Outcomes(RwLock<Arc<Board>>);

impl Outcomes {
    /// The outcomes recorded in the store at `db` (none in a store not
    /// made yet; one that cannot be read is ranked by relevance alone
    /// until learning reads it again, and the log says why).
    pub fn load(db: &crate::store::Db) -> Self {
        let board = Board::read(db).unwrap_or_else(|e| {
            tracing::warn!(
                "the skills' outcomes were not read (relevance alone ranks them until the next judged session): {e}"
            );
            Board::default()
        });
        Self(RwLock::new(Arc::new(board)))
    }

    pub fn board(&self) -> Arc<Board> {
        self.0.read().map(|b| b.clone()).unwrap_or_default()
    }

    /// Reads the store's sums again (a table of one row per version).
    pub fn refresh(&self, conn: &crate::store::sql::Conn) -> crate::store::sql::Result<()> {
        let board = Arc::new(Board::new(crate::store::outcomes::all(conn)?));
        if let Ok(mut b) = self.0.write() {
            *b = board;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `plus` turns judged +1 and `minus` judged −1.
    fn sums(plus: i64, minus: i64) -> Sums {
        Sums {
            injected: plus + minus,
            judged: plus + minus,
            reward_sum: (plus - minus) as f64,
            reward_sq: (plus + minus) as f64,
        }
    }

    #[test]
    fn an_effect_is_called_only_when_the_gap_is_sure() {
        let every = |with: Sums, others: Sums| Sums {
            injected: with.injected + others.injected,
            judged: with.judged + others.judged,
            reward_sum: with.reward_sum + others.reward_sum,
            reward_sq: with.reward_sq + others.reward_sq,
        };
        let (good, poor) = (sums(25, 5), sums(10, 20));
        let helping = effect(&good, &every(good, poor));
        assert_eq!(helping.verdict, "helping", "{helping:?}");
        assert_eq!((helping.judged_with, helping.judged_without), (30, 30));
        assert!((helping.mean_with.unwrap() - 20.0 / 30.0).abs() < 1e-9);
        assert_eq!(effect(&poor, &every(poor, good)).verdict, "worse");
        let even = sums(15, 15);
        assert_eq!(
            effect(&even, &every(even, sums(16, 14))).verdict,
            "no clear difference"
        );
        let few = effect(&sums(3, 0), &every(sums(3, 0), poor));
        assert_eq!((few.verdict, few.z), ("too few judged turns", None));
        let none = effect(&Sums::default(), &Sums::default());
        assert_eq!((none.mean_with, none.mean_without), (None, None));
    }

    fn add(a: &Sums, b: &Sums) -> Sums {
        Sums {
            injected: a.injected + b.injected,
            judged: a.judged + b.judged,
            reward_sum: a.reward_sum + b.reward_sum,
            reward_sq: a.reward_sq + b.reward_sq,
        }
    }

    #[test]
    fn a_new_version_starts_at_the_prior_and_is_uncertain() {
        let e = estimate(&Sums::default(), 0.5);
        assert!((e.mean - 0.5).abs() < 1e-9);
        // Beta(1, 1): sd = sqrt(1/12).
        assert!((e.sd - (1.0f64 / 12.0).sqrt()).abs() < 1e-9, "{e:?}");
        assert_eq!((e.low, e.judged), (0.0, 0));
        // The prior follows the library: mostly good turns, a high prior.
        let p = prior_mean(&sums(18, 2));
        assert!((p - 19.0 / 22.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn judged_turns_move_the_estimate_and_shrink_the_interval() {
        let good = estimate(&sums(20, 0), 0.5);
        let bad = estimate(&sums(0, 20), 0.5);
        assert!((good.mean - 21.0 / 22.0).abs() < 1e-9, "{good:?}");
        assert!((bad.mean - 1.0 / 22.0).abs() < 1e-9, "{bad:?}");
        let new = estimate(&Sums::default(), 0.5);
        assert!(good.sd < new.sd / 3.0);
        // A zero reward is half a success.
        let zero = Sums {
            injected: 4,
            judged: 4,
            reward_sum: 0.0,
            reward_sq: 0.0,
        };
        assert!((estimate(&zero, 0.5).mean - 0.5).abs() < 1e-9);
        // Ranked: the good first, the untried above the bad (it is tried).
        let r = |e: &Estimate| rank(1.0, e.optimistic(), 0.5);
        assert!(r(&good) > r(&new) && r(&new) > r(&bad));
        // Weight 0: relevance alone.
        assert_eq!(rank(0.7, good.optimistic(), 0.0), 0.7);
        assert_eq!(rank(0.7, bad.optimistic(), 0.0), 0.7);
    }

    /// What a retriever granted `outcomes` is told: the current version's
    /// (an earlier one's turns are not its), none for an id not in the
    /// library, and the flag.
    #[test]
    fn a_retriever_sees_the_current_versions_outcomes() {
        use crate::plugins::OutcomeSource;
        let text = "---\nname: alpha\ndescription: About alpha.\n---\nDo it.\n";
        let alpha = crate::skills::skill::parse("alpha", text).unwrap();
        let current = alpha.version.to_string();
        let bad = sums(0, 12);
        let rows = HashMap::from([
            ((ALL.to_string(), ALL.to_string()), add(&bad, &sums(40, 0))),
            (("alpha".to_string(), current.clone()), bad),
            (("alpha".to_string(), "0.0.1".to_string()), sums(30, 0)),
        ]);
        let board = Arc::new(Board::new(rows));
        let view = View {
            board: board.clone(),
            snapshot: Arc::new(crate::skills::library::Snapshot::new(
                vec![Arc::new(alpha)],
                Vec::new(),
                1,
            )),
        };
        let seen = view.outcome("alpha").unwrap();
        let expected = board.estimate("alpha", &current);
        assert_eq!(seen.version, current);
        assert_eq!((seen.injected, seen.judged), (12, 12));
        assert_eq!(
            (seen.mean, seen.sd, seen.low, seen.high),
            (expected.mean, expected.sd, expected.low, expected.high)
        );
        assert!(seen.flagged, "12 of 12 judged -1 against 40 of 40 +1");
        assert!(view.outcome("ghost").is_none());
    }

    #[test]
    fn only_a_clear_and_well_evidenced_gap_flags() {
        let others = sums(40, 10);
        // 12 turns, all −1, against the others' +0.6: flagged.
        let bad = sums(0, 12);
        let f = flag(&bad, &add(&bad, &others)).unwrap();
        assert!(
            f.mean_with < -0.99 && (f.mean_without - 0.6).abs() < 1e-9,
            "{f:?}"
        );
        assert!(f.reason.contains("12 judged turns"), "{}", f.reason);
        // Too few turns.
        let few = sums(0, 9);
        assert_eq!(flag(&few, &add(&few, &others)), None);
        // As good as the others.
        let fine = sums(16, 4);
        assert_eq!(flag(&fine, &add(&fine, &others)), None);
        // Worse, but within the noise of a handful of mixed turns.
        let mixed = sums(7, 5);
        assert_eq!(flag(&mixed, &add(&mixed, &others)), None);
        // No turns without it: nothing to compare with.
        assert_eq!(flag(&bad, &bad), None);
    }
}
