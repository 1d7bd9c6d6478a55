//! The retriever: sleeps in `index()` when the library holds a skill called
//! `hostile-sleep-index`, and in `retrieve()` when the query starts with
//! `hostile:sleep`; ranks every skill NaN for `hostile:nan`, else 0.5.

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
        ids.into_iter()
            .take(k as usize)
            .map(|id| ScoredSkill { id, score })
            .collect()
    }
}

metaclaw_plugin_sdk::retriever::export_retriever!(Hostile);
