//! Each agent's own skills: a layer over the shared library; a team's
//! agents share their team's layer besides.
//!
//! The shared skills are `<skills.dir>/<name>/`; an agent's are
//! `<skills.dir>/@<agent>/<name>/`, with the id `@<agent>/<name>` (the path
//! under the library, so every writer and reader finds the file by id). A
//! team's (agents named `team/agent`, docs/team.md) are under
//! `<skills.dir>/+<team>/`: the team's layer `+<team>/<name>/`, shared by
//! its agents, and each agent's own `+<team>/@<agent>/<name>/`.
//!
//! A turn sees the shared skills, its team's and its own agent's; where a
//! nearer layer has a skill of the same name, that one (own over team over
//! shared). Skills learned from an agent's sessions go into its own layer;
//! `metaclaw skills share` moves one a layer out (a team agent's into its
//! team's, a team's or a plain agent's into the shared library).

use crate::agent_id::AgentId;

/// What starts an agent's layer folder.
pub const MARK: char = '@';
/// What starts a team's folder.
pub const TEAM_MARK: char = '+';

/// Whose layer a skill id is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The shared library.
    Shared,
    /// An agent's own layer (a plain agent's or a team agent's).
    Agent(AgentId),
    /// A team's layer, shared by its agents.
    Team(String),
}

impl Owner {
    /// The agent whose own layer it is.
    pub fn agent(&self) -> Option<&AgentId> {
        match self {
            Self::Agent(agent) => Some(agent),
            _ => None,
        }
    }

    /// The team whose layer (or whose agent's layer) it is.
    pub fn team(&self) -> Option<&str> {
        match self {
            Self::Agent(agent) => agent.team(),
            Self::Team(team) => Some(team),
            Self::Shared => None,
        }
    }

    /// Whether a turn of `agent` reads this layer.
    pub fn seen_by(&self, agent: &AgentId) -> bool {
        match self {
            Self::Shared => true,
            Self::Agent(owner) => owner == agent,
            Self::Team(team) => agent.team() == Some(team.as_str()),
        }
    }

    /// The id of skill `name` in this layer.
    pub fn id_of(&self, name: &str) -> String {
        match self {
            Self::Shared => name.to_string(),
            Self::Agent(agent) => id_in(agent, name),
            Self::Team(team) => format!("{TEAM_MARK}{team}/{name}"),
        }
    }

    /// The layer a skill of this one is shared into (`skills share`).
    pub fn outer(&self) -> Option<Owner> {
        match self {
            Self::Shared => None,
            Self::Agent(agent) => Some(match agent.team() {
                Some(team) => Self::Team(team.to_string()),
                None => Self::Shared,
            }),
            Self::Team(_) => Some(Self::Shared),
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shared => f.write_str("the shared library"),
            Self::Agent(agent) => write!(f, "agent {agent}'s skills"),
            Self::Team(team) => write!(f, "team {team}'s skills"),
        }
    }
}

/// The id of `name` in `agent`'s own layer; the shared id for the default
/// agent (whose layer is the shared library).
pub fn id_in(agent: &AgentId, name: &str) -> String {
    match agent.team() {
        _ if agent.as_str() == crate::agent_id::DEFAULT => name.to_string(),
        Some(team) => format!("{TEAM_MARK}{team}/{MARK}{}/{name}", agent.name()),
        None => format!("{MARK}{agent}/{name}"),
    }
}

/// Whose layer `id` is in, and the skill's name. An id that names no
/// valid layer is taken as it is (as shared; [`valid_id`] refuses it).
pub fn split(id: &str) -> (Owner, &str) {
    if let Some(rest) = id.strip_prefix(TEAM_MARK)
        && let Some((team, rest)) = rest.split_once('/')
    {
        if let Some(rest) = rest.strip_prefix(MARK)
            && let Some((agent, name)) = rest.split_once('/')
            && let Ok(agent) = AgentId::parse(&format!("{team}/{agent}"))
        {
            return (Owner::Agent(agent), name);
        }
        return (Owner::Team(team.to_string()), rest);
    }
    if let Some(rest) = id.strip_prefix(MARK)
        && let Some((agent, name)) = rest.split_once('/')
        && let Ok(agent) = AgentId::parse(agent)
    {
        return (Owner::Agent(agent), name);
    }
    (Owner::Shared, id)
}

/// Whether `id` names a skill: a valid name, in the shared library or in
/// a valid layer, spelled as its layer spells it (never a path anywhere
/// else).
pub fn valid_id(id: &str) -> bool {
    let (owner, name) = split(id);
    super::skill::valid_name(name) && owner.id_of(name) == id && valid_owner(&owner)
}

fn valid_owner(owner: &Owner) -> bool {
    match owner {
        Owner::Shared => true,
        Owner::Agent(_) => true,
        Owner::Team(team) => {
            matches!(AgentId::parse(team), Ok(t) if t.as_str() == team && t.team().is_none())
        }
    }
}

/// A folder named like a layer (`@…`, `+…`) that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a layer: after '{MARK}' (an agent's) or '{TEAM_MARK}' (a team's), 1 to {max} of a-z, 0-9, '-' and '_'",
    max = crate::agent_id::MAX_LEN
)]
pub struct NotALayer(pub String);

/// The layer a folder's name opens, if it is named like one: `@work` (an
/// agent's) or `+ops` (a team's) at the top of the library; `@alice`
/// (that team's agent's) inside team `team`'s folder.
pub fn folder_owner(folder: &str, team: Option<&str>) -> Option<Result<Owner, NotALayer>> {
    let bad = || NotALayer(folder.to_string());
    if let Some(agent) = folder.strip_prefix(MARK) {
        let id = match team {
            Some(team) => format!("{team}/{agent}"),
            None => agent.to_string(),
        };
        return Some(match AgentId::parse(&id) {
            Ok(a) if a.as_str() == id => Ok(Owner::Agent(a)),
            _ => Err(bad()),
        });
    }
    let name = folder.strip_prefix(TEAM_MARK)?;
    if team.is_some() {
        return Some(Err(bad()));
    }
    Some(match AgentId::parse(name) {
        Ok(t) if t.as_str() == name && t.team().is_none() => Ok(Owner::Team(name.to_string())),
        _ => Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_the_layer_and_the_skill() {
        let work = AgentId::parse("work").unwrap();
        assert_eq!(id_in(&work, "deploy"), "@work/deploy");
        assert_eq!(id_in(&AgentId::default_agent(), "deploy"), "deploy");
        assert_eq!(
            split("@work/deploy"),
            (Owner::Agent(work.clone()), "deploy")
        );
        assert_eq!(split("deploy"), (Owner::Shared, "deploy"));
        assert_eq!(
            folder_owner("@work", None),
            Some(Ok(Owner::Agent(work.clone())))
        );
        assert!(matches!(folder_owner("@Work", None), Some(Err(_))));
        assert!(folder_owner("work", None).is_none());
        assert!(valid_id("deploy") && valid_id("@work/deploy"));
        for bad in [
            "@work/../x",
            "@../x",
            "@Work/deploy",
            "../deploy",
            "@work/a/b",
            "+ops/@al/x/y",
            "+Ops/x",
            "+ops/../x",
            "+a/b/x",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_teams_agents_share_its_layer_and_keep_their_own() {
        let alice = AgentId::parse("ops/alice").unwrap();
        let bob = AgentId::parse("ops/bob").unwrap();
        let eve = AgentId::parse("sales/eve").unwrap();
        assert_eq!(id_in(&alice, "deploy"), "+ops/@alice/deploy");
        assert_eq!(
            split("+ops/@alice/deploy"),
            (Owner::Agent(alice.clone()), "deploy")
        );
        assert_eq!(split("+ops/deploy"), (Owner::Team("ops".into()), "deploy"));
        assert!(valid_id("+ops/@alice/deploy") && valid_id("+ops/deploy"));
        let team = Owner::Team("ops".into());
        assert!(team.seen_by(&alice) && team.seen_by(&bob) && !team.seen_by(&eve));
        let own = Owner::Agent(alice.clone());
        assert!(own.seen_by(&alice) && !own.seen_by(&bob));
        assert_eq!(own.outer(), Some(team.clone()));
        assert_eq!(team.outer(), Some(Owner::Shared));
        assert_eq!(
            Owner::Agent(AgentId::parse("work").unwrap()).outer(),
            Some(Owner::Shared)
        );
        assert_eq!(folder_owner("+ops", None), Some(Ok(team)));
        assert_eq!(folder_owner("@alice", Some("ops")), Some(Ok(own)));
        assert!(matches!(folder_owner("+x", Some("ops")), Some(Err(_))));
    }
}
