//! The retriever: sleeps in `index()` when the library holds a skill called
//! `hostile-sleep-index`, and in `retrieve()` when the query starts with
//! `hostile:sleep`; ranks every skill NaN for `hostile:nan`; for
//! `hostile:outcomes` reads the skills' outcomes (granted or not) and ranks
//! those it got by their mean; else every skill 0.5.

use metaclaw_plugin_sdk::retriever::{
    Guest, Metadata, PluginGuest, ScoredSkill, Skill, TurnContext, metadata,
};

struct Hostile;

static IDS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

impl PluginGuest for Hostile {
    fn metadata() -> Metadata {
        crate::before_metadata();
        metadata(
            crate::NAME,
            crate::VERSION,
            "Misbehaves on request (sandbox tests)",
        )
    }
}

impl Guest for Hostile {
    fn index(skills: Vec<Skill>, _generation: u64) -> Result<(), String> {
        if skills.iter().any(|s| s.id == "hostile-sleep-index") {
            crate::sleep_long();
        }
        if let Ok(mut ids) = IDS.lock() {
            *ids = skills.into_iter().map(|s| s.id).collect();
        }
        Ok(())
    }

    fn retrieve(context: TurnContext, k: u32) -> Vec<ScoredSkill> {
        if context.query.starts_with("hostile:sleep") {
            crate::sleep_long();
        }
        let score = if context.query.starts_with("hostile:nan") {
            f32::NAN
        } else {
            0.5
        };
        let ids = IDS.lock().map(|i| i.clone()).unwrap_or_default();
        #[cfg(not(feature = "wit-0-1-0"))]
        if context.query.starts_with("hostile:outcomes") {
            return by_outcome(ids, k);
        }
        ids.into_iter()
            .take(k as usize)
            .map(|id| ScoredSkill { id, score })
            .collect()
    }
}

/// The skills with outcomes, best mean first.
#[cfg(not(feature = "wit-0-1-0"))]
fn by_outcome(ids: Vec<String>, k: u32) -> Vec<ScoredSkill> {
    let outcomes = metaclaw_plugin_sdk::retriever::outcomes::outcomes(&ids);
    let mut ranked: Vec<ScoredSkill> = ids
        .into_iter()
        .zip(outcomes)
        .filter_map(|(id, o)| {
            o.map(|o| ScoredSkill {
                id,
                score: o.mean as f32,
            })
        })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    ranked.truncate(k as usize);
    ranked
}

metaclaw_plugin_sdk::retriever::export_retriever!(Hostile);
