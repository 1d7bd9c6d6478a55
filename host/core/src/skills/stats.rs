//! Each skill version's outcomes from the store, with its estimate and
//! flag: what `metaclaw skills stats`, `skills show` and the dashboard's
//! skill pages show.

use anyhow::Result;
use serde::Serialize;

use super::library::Snapshot;
use super::outcomes::{Board, Estimate, Flag};

/// One skill version's outcomes.
#[derive(Debug, Serialize)]
pub struct Row {
    pub skill: String,
    pub version: String,
    /// The library's version of the skill now.
    pub current: bool,
    /// `builtin`, `user`, `evolved:<session>`, `imported:<source>`; none
    /// when the skill is no longer in the library.
    pub created_by: Option<String>,
    pub injected: i64,
    pub judged: i64,
    /// The judged turns' mean reward, in [-1, 1].
    pub mean_reward: Option<f64>,
    pub success: Estimate,
    pub flag: Option<Flag>,
    /// Why it is out of retrieval (`skills.auto_retire`), if it is.
    pub retired: Option<String>,
}

/// The rows of `name` (each version with outcomes, and the current one),
/// or of every library skill's current version; most injected first.
/// `agent`: of that agent's turns only, of the skills it sees.
pub fn rows(
    db: &crate::store::Db,
    snapshot: &Snapshot,
    name: Option<&str>,
    agent: Option<&crate::agent_id::AgentId>,
) -> Result<(Board, Vec<Row>)> {
    let board = match agent {
        Some(agent) => Board::read_of_agent(db, agent.as_str()),
        None => Board::read(db),
    }
    .map_err(anyhow::Error::msg)?;
    let row = |id: &str, version: &str| {
        let skill = snapshot.get(id);
        let sums = board.sums(id, version);
        Row {
            skill: id.to_string(),
            version: version.to_string(),
            current: skill.is_some_and(|s| s.version.to_string() == version),
            created_by: skill.map(|s| s.created_by.clone()),
            injected: sums.injected,
            judged: sums.judged,
            mean_reward: (sums.judged > 0).then(|| sums.reward_sum / sums.judged as f64),
            success: board.estimate(id, version),
            flag: board.flag(id, version),
            retired: skill
                .filter(|s| s.version.to_string() == version)
                .and_then(|s| s.retired.clone()),
        }
    };
    let mut rows: Vec<Row> = match name {
        Some(id) => {
            let mut versions: Vec<String> = board
                .versions(id)
                .iter()
                .map(|o| o.version.clone())
                .collect();
            if let Some(s) = snapshot.get(id) {
                versions.push(s.version.to_string());
            }
            versions.sort_by(|a, b| {
                let parse = |v: &str| semver::Version::parse(v).ok();
                parse(b).cmp(&parse(a)).then_with(|| b.cmp(a))
            });
            versions.dedup();
            versions.iter().map(|v| row(id, v)).collect()
        }
        None => snapshot
            .skills
            .iter()
            .filter(|s| agent.is_none_or(|a| snapshot.visible_to(&s.id, a)))
            .map(|s| row(&s.id, &s.version.to_string()))
            .collect(),
    };
    if name.is_none() {
        rows.sort_by(|a, b| {
            b.injected
                .cmp(&a.injected)
                .then_with(|| a.skill.cmp(&b.skill))
        });
    }
    Ok((board, rows))
}
