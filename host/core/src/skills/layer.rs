//! Each agent's own skills: a layer over the shared library.
//!
//! The shared skills are `<skills.dir>/<name>/`; an agent's are
//! `<skills.dir>/@<agent>/<name>/`, with the id `@<agent>/<name>` (the path
//! under the library, so every writer and reader finds the file by id). A
//! turn sees the shared skills and its own agent's; where its layer has a
//! skill of a shared one's name, that one (the agent's revision) in place
//! of the shared one. Skills learned from an agent's sessions go into its
//! layer; `metaclaw skills share` makes one shared.

use crate::agent_id::AgentId;

/// What starts a layer's folder name.
pub const MARK: char = '@';

/// The id of `name` in `agent`'s layer; the shared id for the default
/// agent (whose layer is the shared library).
pub fn id_in(agent: &AgentId, name: &str) -> String {
    if agent.as_str() == crate::agent_id::DEFAULT {
        name.to_string()
    } else {
        format!("{MARK}{agent}/{name}")
    }
}

/// The agent whose layer `id` is in (`None`: shared), and the skill's name.
pub fn split(id: &str) -> (Option<&str>, &str) {
    match id.strip_prefix(MARK).and_then(|rest| rest.split_once('/')) {
        Some((agent, name)) => (Some(agent), name),
        None => (None, id),
    }
}

/// Whether `id` names a skill: a valid name, in the shared library or in
/// a valid agent's layer (never a path anywhere else).
pub fn valid_id(id: &str) -> bool {
    let (agent, name) = split(id);
    super::skill::valid_name(name)
        && agent.is_none_or(|a| matches!(folder_agent(&format!("{MARK}{a}")), Some(Ok(_))))
}

/// A folder named like a layer (`@…`) that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an agent's layer: after '{MARK}', 1 to {max} of a-z, 0-9, '-' and '_'",
    max = crate::agent_id::MAX_LEN
)]
pub struct NotALayer(pub String);

/// The agent of a layer folder's name (`@work` → `work`), if it is one.
pub fn folder_agent(folder: &str) -> Option<Result<AgentId, NotALayer>> {
    let agent = folder.strip_prefix(MARK)?;
    Some(match AgentId::parse(agent) {
        Ok(id) if id.as_str() == agent => Ok(id),
        Ok(_) | Err(_) => Err(NotALayer(folder.to_string())),
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
        assert_eq!(split("@work/deploy"), (Some("work"), "deploy"));
        assert_eq!(split("deploy"), (None, "deploy"));
        assert!(matches!(folder_agent("@work"), Some(Ok(a)) if a.as_str() == "work"));
        assert!(matches!(folder_agent("@Work"), Some(Err(_))));
        assert!(folder_agent("work").is_none());
        assert!(valid_id("deploy") && valid_id("@work/deploy"));
        for bad in [
            "@work/../x",
            "@../x",
            "@Work/deploy",
            "../deploy",
            "@work/a/b",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
