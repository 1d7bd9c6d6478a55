//! The slow-skills attack, shared by `host/tests/turn_budget.rs` and the
//! attacks bench: forty executable skills whose `applies()` sleeps just
//! under its deadline (copies of the hostile skill, each renamed), against
//! `plugins.turn_budget`. Asked one after another they would add
//! `SKILLS × SLEEP_MS` = 3.2 s to every turn; under the budget, at most
//! `BUDGET_MS` plus a scheduling margin.
#![allow(dead_code)]

use std::path::Path;

/// Executable skills in the attack.
pub const SKILLS: usize = 40;
/// Each one's `applies()` sleeps this long, under its deadline
/// (`plugins.timeouts.skill`): slow, but legal.
pub const SLEEP_MS: u64 = 80;
pub const DEADLINE_MS: u64 = 100;
/// `plugins.turn_budget` (its default).
pub const BUDGET_MS: u64 = 250;
/// What a turn may take above the budget on a loaded 2-core machine: the
/// timer that ends the budget, the plugin runtime and the upstream call
/// being scheduled. The bound (600 ms) is five times under the 3.2 s of
/// asking the skills one after another.
pub const MARGIN_MS: u64 = 350;

/// What the attacking turns say (`plugins/hostile`'s skill world).
pub fn query() -> String {
    format!("hostile:slow:{SLEEP_MS}")
}

/// Whether a plugin (by name) is one of the attack's skills.
pub fn is_slow_skill(name: &str) -> bool {
    name.starts_with("slow-skill-")
}

/// Writes the `SKILLS` copies of the built hostile skill into `dir`, each
/// named `slow-skill-NN` (the name is the only change: the same length, in
/// its data).
pub fn place(hostile_skill: &Path, dir: &Path) {
    let bytes = std::fs::read(hostile_skill).unwrap();
    let name = b"hostile-skill";
    let at: Vec<usize> = bytes
        .windows(name.len())
        .enumerate()
        .filter(|(_, w)| w == name)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the hostile skill names itself once");
    for n in 0..SKILLS {
        let mut copy = bytes.clone();
        copy[at[0]..at[0] + name.len()].copy_from_slice(format!("slow-skill-{n:02}").as_bytes());
        std::fs::write(dir.join(format!("slow-skill-{n:02}.wasm")), copy).unwrap();
    }
}

/// A config.yaml for the attack: the skills in `dir` as drop-ins.
pub fn config(upstream: &str, dir: &Path) -> String {
    format!(
        "llm:\n  api_base: {upstream}\nplugins:\n  dir: {}\n  turn_budget: {BUDGET_MS}ms\n  timeouts:\n    skill: {DEADLINE_MS}ms\n  threads: 2\n",
        dir.display()
    )
}

/// Whether `plugins list --json` shows every slow skill loaded.
pub fn all_loaded(list: &serde_json::Value) -> bool {
    list["loading"] == false
        && list["plugins"].as_array().is_some_and(|plugins| {
            plugins
                .iter()
                .filter(|p| p["name"].as_str().is_some_and(is_slow_skill))
                .count()
                == SKILLS
        })
}
