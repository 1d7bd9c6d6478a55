//! Outcomes per skill version: the main turns each version was injected
//! into, and the final rewards of those judged, kept as running sums in
//! `skill_outcomes`. Each sum moves in the transaction of what moves it
//! (at its end: [`Pending`]):
//! a main turn recorded (one more injection), its reward set or changed
//! (the old value out, the new one in: judging a turn again never counts
//! it twice), a turn replaced by its retry (out). A failed turn (status
//! not `ok`: the upstream failed, the answer was cut) moves none of them.
//! Nothing here reads all
//! turns; the migration that made the table filled it from them once.
//!
//! The row with an empty id and version is every main turn: what a skill's
//! turns are compared with is that row minus the skill's own.

use std::collections::{BTreeMap, HashMap};

use crate::store::sql::{Conn, Optional, params};
use serde::Serialize;

/// The id (and version) of the row that sums every main turn.
pub const ALL: &str = "";

/// The running sums of one skill version (or of every main turn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sums {
    /// Main turns it was injected into.
    pub injected: i64,
    /// Of those, the ones with a final reward.
    pub judged: i64,
    /// The sum of their rewards (each in [-1, 1]).
    pub reward_sum: f64,
    /// The sum of their squares (for the variance).
    pub reward_sq: f64,
}

impl Sums {
    /// These sums without `other`'s (the turns without a skill: every
    /// main turn's sums less the skill's own).
    pub fn without(&self, other: &Sums) -> Sums {
        Sums {
            injected: (self.injected - other.injected).max(0),
            judged: (self.judged - other.judged).max(0),
            reward_sum: self.reward_sum - other.reward_sum,
            reward_sq: (self.reward_sq - other.reward_sq).max(0.0),
        }
    }
}

/// A skill version a turn carried: `(id, version)`.
pub type Key = (String, String);

/// What one turn adds to (or, negated, takes from) its skills' sums.
#[derive(Debug, Clone, Copy, Default)]
struct Delta {
    injected: i64,
    judged: i64,
    sum: f64,
    sq: f64,
}

impl Delta {
    /// A turn with `reward` (if judged), counted once.
    fn turn(reward: Option<f64>) -> Self {
        let r = reward.unwrap_or(0.0);
        Delta {
            injected: 1,
            judged: i64::from(reward.is_some()),
            sum: r,
            sq: r * r,
        }
    }

    fn negate(self) -> Self {
        Delta {
            injected: -self.injected,
            judged: -self.judged,
            sum: -self.sum,
            sq: -self.sq,
        }
    }

    fn is_zero(&self) -> bool {
        self.injected == 0 && self.judged == 0 && self.sum == 0.0 && self.sq == 0.0
    }

    fn add(&mut self, other: Delta) {
        self.injected += other.injected;
        self.judged += other.judged;
        self.sum += other.sum;
        self.sq += other.sq;
    }
}

/// The moves of one transaction's sums, written together at its end
/// ([`Pending::apply`]). The row of every main turn is in nearly every
/// transaction that records or judges a turn, and a skill's row in many:
/// moved as they came, each transaction held them while it went on to lock
/// other rows, and two instances' writers on a shared store deadlocked.
/// Written last, once each and in key order, no two transactions wait on
/// each other's sums in a cycle.
#[derive(Debug, Default)]
#[must_use = "the sums move only when the pending moves are applied"]
pub struct Pending {
    moves: BTreeMap<Key, Delta>,
}

impl Pending {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `delta` to each of `skills` (once each: a skill injected twice
    /// into one turn is one injection) and to the row of every main turn.
    fn add(&mut self, skills: &[Key], delta: Delta) {
        if delta.is_zero() {
            return;
        }
        let mut skills: Vec<&Key> = skills.iter().collect();
        skills.sort();
        skills.dedup();
        let all = (ALL.to_string(), ALL.to_string());
        for key in skills.into_iter().chain(std::iter::once(&all)) {
            self.moves.entry(key.clone()).or_default().add(delta);
        }
    }

    /// Takes `other`'s moves too (a part of the transaction that succeeded).
    pub fn merge(&mut self, other: Pending) {
        for (key, delta) in other.moves {
            self.moves.entry(key).or_default().add(delta);
        }
    }

    /// Writes the moves, in key order; call last in the transaction.
    pub fn apply(self, conn: &Conn) -> crate::store::sql::Result<()> {
        let mut stmt = conn.prepare_cached(
            "INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (skill_id, version) DO UPDATE SET
                 injected = skill_outcomes.injected + excluded.injected,
                 judged = skill_outcomes.judged + excluded.judged,
                 reward_sum = skill_outcomes.reward_sum + excluded.reward_sum,
                 reward_sq = skill_outcomes.reward_sq + excluded.reward_sq",
        )?;
        for ((id, version), delta) in self.moves {
            if delta.is_zero() {
                continue;
            }
            stmt.execute(params![
                id,
                version,
                delta.injected,
                delta.judged,
                delta.sum,
                delta.sq
            ])?;
        }
        Ok(())
    }
}

/// The skill versions in a turn's `injected_skills` column (JSON).
fn keys(injected: Option<&str>) -> Vec<Key> {
    #[derive(serde::Deserialize)]
    struct One {
        id: String,
        version: String,
    }
    let list: Vec<One> = injected
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let keys: Vec<Key> = list.into_iter().map(|o| (o.id, o.version)).collect();
    keys
}

/// A main turn was recorded with these skills (its reward comes later).
pub fn turn_recorded(sums: &mut Pending, skills: &[Key]) {
    sums.add(skills, Delta::turn(None));
}

/// Sets a main turn's final reward, moving its skills' sums by the
/// difference from the reward it had (none: it joins the judged). A
/// failed turn (status not `ok`) gets none: it is no real answer.
pub fn set_reward(
    conn: &Conn,
    sums: &mut Pending,
    turn_id: &str,
    reward: f64,
) -> crate::store::sql::Result<()> {
    let before: Option<(Option<f64>, Option<String>, String)> = conn
        .prepare_cached(
            "SELECT reward, injected_skills, turn_type FROM turns WHERE id = ?1 AND status = 'ok'",
        )?
        .query_row([turn_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((old, injected, turn_type)) = before else {
        return Ok(());
    };
    conn.prepare_cached("UPDATE turns SET reward = ?2 WHERE id = ?1")?
        .execute(params![turn_id, reward])?;
    if turn_type != "main" || old == Some(reward) {
        return Ok(());
    }
    let (new, old) = (Delta::turn(Some(reward)), Delta::turn(old));
    let delta = Delta {
        injected: 0,
        judged: new.judged - old.judged,
        sum: new.sum - old.sum,
        sq: new.sq - old.sq,
    };
    sums.add(&keys(injected.as_deref()), delta);
    Ok(())
}

/// These main turns stop being main (a retry replaces them): their
/// injections and rewards leave the sums. Call before changing their type.
pub fn turns_replaced(
    conn: &Conn,
    sums: &mut Pending,
    session_id: &str,
    first: &str,
) -> crate::store::sql::Result<()> {
    let replaced: Vec<(Option<f64>, Option<String>)> = conn
        .prepare_cached(
            "SELECT reward, injected_skills FROM turns
             WHERE session_id = ?1 AND turn_type = 'main' AND status = 'ok'
               AND (id = ?2 OR retry_of = ?2)",
        )?
        .query_map(params![session_id, first], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<crate::store::sql::Result<_>>()?;
    for (reward, injected) in replaced {
        sums.add(&keys(injected.as_deref()), Delta::turn(reward).negate());
    }
    Ok(())
}

/// Every row: per skill version, and every main turn's under (`ALL`, `ALL`).
pub fn all(conn: &Conn) -> crate::store::sql::Result<HashMap<Key, Sums>> {
    conn.prepare_cached(
        "SELECT skill_id, version, injected, judged, reward_sum, reward_sq FROM skill_outcomes",
    )?
    .query_map((), |r| {
        Ok((
            (r.get::<String>(0)?, r.get::<String>(1)?),
            Sums {
                injected: r.get(2)?,
                judged: r.get(3)?,
                reward_sum: r.get(4)?,
                reward_sq: r.get(5)?,
            },
        ))
    })?
    .collect()
}

/// The sums of one agent's main turns only (its sessions'), read from the
/// turns themselves: the running sums pool every agent, and this is for
/// `skills stats --agent`, not a turn's path.
pub fn of_agent(conn: &Conn, agent: &str) -> crate::store::sql::Result<HashMap<Key, Sums>> {
    let mut out: HashMap<Key, Sums> = HashMap::new();
    let mut stmt = conn.prepare(
        "SELECT t.reward, t.injected_skills FROM turns t JOIN sessions s ON s.id = t.session_id
         WHERE s.agent_id = ?1 AND t.turn_type = 'main' AND t.status = 'ok'",
    )?;
    let rows = stmt.query_map([agent], |r| {
        Ok((r.get::<Option<f64>>(0)?, r.get::<Option<String>>(1)?))
    })?;
    for row in rows {
        let (reward, injected) = row?;
        let delta = Delta::turn(reward);
        let mut skills = keys(injected.as_deref());
        skills.sort();
        skills.dedup();
        for key in skills
            .into_iter()
            .chain(std::iter::once((ALL.into(), ALL.into())))
        {
            let sums = out.entry(key).or_default();
            sums.injected += delta.injected;
            sums.judged += delta.judged;
            sums.reward_sum += delta.sum;
            sums.reward_sq += delta.sq;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn db() -> Conn {
        crate::store::memory()
    }

    /// A main turn row with these skills, recorded as the writer does.
    fn turn(conn: &Conn, id: &str, skills: &[(&str, &str)]) {
        conn.execute(
            "INSERT OR IGNORE INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES ('s', 's', 'test', 0, 0)",
            (),
        )
        .unwrap();
        let json: Vec<serde_json::Value> = skills
            .iter()
            .map(|(id, v)| serde_json::json!({"id": id, "version": v, "score": 1.0}))
            .collect();
        let seq: i64 = conn
            .query_row("SELECT count(*) FROM turns", (), |r| r.get(0))
            .unwrap();
        conn.execute(
            "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status, request_messages,
                                request_params, started_at_ms, finished_at_ms, total_ms, injected_skills)
             VALUES (?1, 's', ?2, 'main', 'openai', 0, 'ok', '[]', '{}', 0, 0, 0, ?3)",
            params![id, seq, serde_json::to_string(&json).unwrap()],
        )
        .unwrap();
        let keys: Vec<Key> = skills
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let mut sums = Pending::new();
        turn_recorded(&mut sums, &keys);
        sums.apply(conn).unwrap();
    }

    /// Sets a reward in a transaction of its own.
    fn reward(conn: &Conn, turn_id: &str, value: f64) -> crate::store::sql::Result<()> {
        let mut sums = Pending::new();
        set_reward(conn, &mut sums, turn_id, value)?;
        sums.apply(conn)
    }

    fn replaced(conn: &Conn, session: &str, first: &str) -> crate::store::sql::Result<()> {
        let mut sums = Pending::new();
        turns_replaced(conn, &mut sums, session, first)?;
        sums.apply(conn)
    }

    fn sums(conn: &Conn, id: &str, version: &str) -> Sums {
        all(conn)
            .unwrap()
            .get(&(id.to_string(), version.to_string()))
            .copied()
            .unwrap_or_default()
    }

    #[test]
    fn one_agents_sums_count_only_its_own_sessions_turns() {
        let conn = db();
        turn(&conn, "t1", &[("tidy", "1.0.0")]);
        turn(&conn, "t2", &[("tidy", "1.0.0")]);
        reward(&conn, "t1", 1.0).unwrap();
        reward(&conn, "t2", -0.5).unwrap();
        // t2 moves to a session of agent `work`.
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms, agent_id)
             VALUES ('w', 'w', 'test', 0, 0, 'work')",
            (),
        )
        .unwrap();
        conn.execute("UPDATE turns SET session_id = 'w' WHERE id = 't2'", ())
            .unwrap();
        let key = ("tidy".to_string(), "1.0.0".to_string());
        let work = of_agent(&conn, "work").unwrap();
        assert_eq!(work[&key].injected, 1);
        assert_eq!(work[&key].reward_sum, -0.5);
        let default = of_agent(&conn, "default").unwrap();
        assert_eq!(default[&key].reward_sum, 1.0);
        assert_eq!(default[&(ALL.to_string(), ALL.to_string())].judged, 1);
        // The running sums pool both.
        assert_eq!(sums(&conn, "tidy", "1.0.0").injected, 2);
        assert!(of_agent(&conn, "nobody").unwrap().is_empty());
    }

    #[test]
    fn the_overview_trend_splits_judged_main_turns_by_day_and_by_skills() {
        let conn = db();
        turn(&conn, "t1", &[("tidy", "1.0.0")]);
        turn(&conn, "t2", &[("tidy", "1.0.0")]);
        turn(&conn, "t3", &[]);
        turn(&conn, "t4", &[]);
        reward(&conn, "t1", 1.0).unwrap();
        reward(&conn, "t2", -0.5).unwrap();
        reward(&conn, "t3", 1.0).unwrap();
        // t4 is not judged: not in the trend.
        conn.execute(
            "UPDATE turns SET started_at_ms = 86400000 + 5 WHERE id = 't3'",
            (),
        )
        .unwrap();
        let days = crate::store::learning::reward_trend(&conn, 0).unwrap();
        let expected = [
            crate::store::learning::DayRewards {
                day: 0,
                with_skills: 2,
                with_sum: 0.5,
                ..Default::default()
            },
            crate::store::learning::DayRewards {
                day: 1,
                without_skills: 1,
                without_sum: 1.0,
                ..Default::default()
            },
        ];
        assert_eq!(days, expected);
        assert!(
            crate::store::learning::reward_trend(&conn, 86_400_000 * 2)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_reward_set_again_or_changed_is_counted_once() {
        let conn = db();
        turn(&conn, "t1", &[("tidy", "1.0.0"), ("terse", "0.2.0")]);
        turn(&conn, "t2", &[("tidy", "1.0.0")]);
        turn(&conn, "t3", &[]);
        reward(&conn, "t1", 1.0).unwrap();
        reward(&conn, "t2", -1.0).unwrap();
        // Judged again: the same verdict, then another.
        reward(&conn, "t1", 1.0).unwrap();
        reward(&conn, "t2", 0.5).unwrap();
        reward(&conn, "t3", -1.0).unwrap();
        let tidy = sums(&conn, "tidy", "1.0.0");
        assert_eq!((tidy.injected, tidy.judged), (2, 2));
        assert!((tidy.reward_sum - 1.5).abs() < 1e-9, "{tidy:?}");
        assert!((tidy.reward_sq - 1.25).abs() < 1e-9, "{tidy:?}");
        let terse = sums(&conn, "terse", "0.2.0");
        assert_eq!((terse.injected, terse.judged), (1, 1));
        let every = sums(&conn, ALL, ALL);
        assert_eq!((every.injected, every.judged), (3, 3));
        assert!((every.reward_sum - 0.5).abs() < 1e-9, "{every:?}");
        // The turns without `tidy`: t3 alone.
        let without = every.without(&tidy);
        assert_eq!(without.judged, 1);
        assert!((without.reward_sum + 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_turn_replaced_by_its_retry_leaves_the_sums() {
        let conn = db();
        turn(&conn, "t1", &[("tidy", "1.0.0")]);
        reward(&conn, "t1", -1.0).unwrap();
        replaced(&conn, "s", "t1").unwrap();
        conn.execute("UPDATE turns SET turn_type = 'retried' WHERE id = 't1'", ())
            .unwrap();
        assert_eq!(sums(&conn, "tidy", "1.0.0"), Sums::default());
        assert_eq!(sums(&conn, ALL, ALL), Sums::default());
        // A reward set on a turn that is no longer main moves nothing.
        reward(&conn, "t1", 1.0).unwrap();
        assert_eq!(sums(&conn, "tidy", "1.0.0"), Sums::default());
    }

    /// A failed turn (recorded by the writer without moving a sum) gets
    /// no reward, and its retry takes nothing out.
    #[test]
    fn a_failed_turn_moves_no_sum() {
        let conn = db();
        turn(&conn, "t1", &[("tidy", "1.0.0")]);
        conn.execute(
            "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status, http_status,
                                request_messages, request_params, started_at_ms, finished_at_ms,
                                total_ms, injected_skills)
             VALUES ('t2', 's', 9, 'main', 'openai', 0, 'error', 500, '[]', '{}', 0, 0, 0,
                     '[{\"id\":\"tidy\",\"version\":\"1.0.0\",\"score\":1.0}]')",
            (),
        )
        .unwrap();
        reward(&conn, "t1", 1.0).unwrap();
        let before = (sums(&conn, "tidy", "1.0.0"), sums(&conn, ALL, ALL));
        reward(&conn, "t2", -1.0).unwrap();
        let reward: Option<f64> = conn
            .query_row("SELECT reward FROM turns WHERE id = 't2'", (), |r| r.get(0))
            .unwrap();
        assert_eq!(reward, None);
        replaced(&conn, "s", "t2").unwrap();
        assert_eq!(
            (sums(&conn, "tidy", "1.0.0"), sums(&conn, ALL, ALL)),
            before
        );
        assert_eq!((before.0.injected, before.0.judged), (1, 1));
    }

    #[test]
    fn sums_survive_reopening_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = crate::store::test_db(dir.path().join("metaclaw.db"));
        {
            let conn = path.side_writer().unwrap();
            turn(&conn, "t1", &[("tidy", "1.0.0")]);
            reward(&conn, "t1", 1.0).unwrap();
        }
        let conn = path.side_writer().unwrap();
        reward(&conn, "t1", 1.0).unwrap();
        let tidy = sums(&conn, "tidy", "1.0.0");
        assert_eq!((tidy.injected, tidy.judged), (1, 1));
        assert!((tidy.reward_sum - 1.0).abs() < 1e-9);
    }
}
