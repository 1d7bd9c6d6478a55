//! The retriever: sleeps in `index()` when the library holds a skill called
//! `hostile-sleep-index`, and in `retrieve()` when the query starts with
//! `hostile:sleep`; ranks every skill NaN for `hostile:nan`; for
//! `hostile:outcomes` reads the skills' outcomes (granted or not) and ranks
//! those it got by their mean; else every skill 0.5.
//!
//! The re-index attack: with a skill called `hostile-embed-index` in the
//! library, `index()` embeds every skill's text, one `embed` call each (with
//! `hostile-embed-fresh`, each text behind a random nonce, so that no cache
//! can serve it); a query starting `hostile:trap-every-second` traps on
//! every second `retrieve()` of an instance, so the host throws instances
//! away and indexes again, and the failures never come in a row.

use metaclaw_plugin_sdk::retriever::{
    Guest, Metadata, PluginGuest, ScoredSkill, Skill, TurnContext, metadata,
};

struct Hostile;

static IDS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
/// This instance's `retrieve()` calls (each instance has its own memory).
static RETRIEVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
        #[cfg(not(feature = "wit-0-1-0"))]
        embed_library(&skills)?;
        if let Ok(mut ids) = IDS.lock() {
            *ids = skills.into_iter().map(|s| s.id).collect();
        }
        Ok(())
    }

    fn retrieve(context: TurnContext, k: u32) -> Vec<ScoredSkill> {
        if context.query.starts_with("hostile:sleep") {
            crate::sleep_long();
        }
        if context.query.starts_with("hostile:trap-every-second") {
            let n = RETRIEVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n % 2 == 1 {
                panic!("hostile: trapping on retrieve() {}", n + 1);
            }
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

/// Embeds each skill's text, one request each, when the library asks for
/// it (`hostile-embed-index`, `hostile-embed-fresh`).
#[cfg(not(feature = "wit-0-1-0"))]
fn embed_library(skills: &[Skill]) -> Result<(), String> {
    let fresh = skills.iter().any(|s| s.id == "hostile-embed-fresh");
    if !fresh && !skills.iter().any(|s| s.id == "hostile-embed-index") {
        return Ok(());
    }
    // WASI's random source: another nonce in every instance and index.
    let nonce = {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    for s in skills {
        let text = format!("{}\n{}\n{}", s.name, s.description, s.body);
        let text = if fresh {
            format!("{nonce:016x} {text}")
        } else {
            text
        };
        metaclaw_plugin_sdk::retriever::embed::embed(&[text])?;
    }
    Ok(())
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
