//! Retrieval quality over the built-in bank: recall@6 of what would be
//! injected, for the labelled queries in tests/data/retrieval-queries.yaml,
//! and small talk and off-topic messages that share a word with a skill,
//! which must inject nothing. Prints the figures.
//!
//! The retrievers are the real wasm plugins (scripts/build-plugins), the
//! embeddings the real all-MiniLM-L6-v2 (METACLAW_TEST_MODEL_DIR, fetched by
//! scripts/test).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use metaclaw_core::config::Config;
use metaclaw_core::home::Home;
use metaclaw_core::skills::{Query, Skills};

#[derive(serde::Deserialize)]
struct Labelled {
    queries: Vec<Case>,
    small_talk: Vec<String>,
    /// Chat that shares a word with a skill ("responses to my party
    /// invitation"): one shared word must not inject a skill.
    #[serde(default)]
    off_topic: Vec<String>,
}

#[derive(serde::Deserialize)]
struct Case {
    query: String,
    expect: Vec<String>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The development set (used while tuning) and the held-out set (written
/// independently, by a different author, and evaluated only once the
/// retrievers were settled).
const SETS: [&str; 2] = [
    "tests/data/retrieval-queries.yaml",
    "tests/data/retrieval-queries-heldout.yaml",
];

fn labelled(file: &str) -> Labelled {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// The built-in bank behind the real retriever plugins, as the daemon
/// would set them up for `retrieval_mode`.
fn skills(home: &Path, config: Config) -> Arc<Skills> {
    let home = Home::at(home);
    home.ensure().unwrap();
    let skills = common::skills_over(&home, repo().join("skills"), &config);
    assert!(skills.library.snapshot().skills.len() >= 40);
    skills
}

fn select(skills: &Skills, text: &str) -> metaclaw_core::skills::Selection {
    let query = Query {
        text: text.to_string(),
        ..Query::default()
    };
    let engine = skills.plugins.as_ref().unwrap().engine.clone();
    engine.block_on(skills.select(&query))
}

struct Figures {
    recall: f64,
    small_talk_injecting: usize,
    off_topic_injecting: usize,
}

fn evaluate(name: &str, file: &str, skills: &Skills, retriever: &str) -> Figures {
    let set = labelled(file);
    let (mut found, mut expected) = (0usize, 0usize);
    let mut misses = Vec::new();
    for case in &set.queries {
        let selection = select(skills, &case.query);
        let answered = selection.retriever.clone().unwrap_or_default();
        assert!(
            answered.starts_with(retriever),
            "{name}: {answered:?} answered {:?}, not {retriever}",
            case.query
        );
        let injected: Vec<&str> = selection.skills.iter().map(|s| s.id.as_str()).collect();
        assert!(injected.len() <= 6);
        for want in &case.expect {
            expected += 1;
            if injected.contains(&want.as_str()) {
                found += 1;
            } else {
                let rank = selection.ranked.iter().position(|(id, _)| id == want);
                misses.push(format!(
                    "  missed {want} (rank {rank:?}) for {:?}; injected {injected:?}",
                    case.query
                ));
            }
        }
    }
    let mut injecting = |kind: &str, texts: &[String]| {
        let mut count = 0;
        for text in texts {
            let selection = select(skills, text);
            if !selection.skills.is_empty() {
                count += 1;
                let ids: Vec<String> = selection
                    .skills
                    .iter()
                    .map(|s| format!("{} {:.2}", s.id, s.score))
                    .collect();
                misses.push(format!("  {kind} {text:?} injected {ids:?}"));
            }
        }
        count
    };
    let small_talk_injecting = injecting("small talk", &set.small_talk);
    let off_topic_injecting = injecting("off-topic", &set.off_topic);
    let recall = found as f64 / expected as f64;
    println!(
        "{name} on {file}: recall@6 = {recall:.3} ({found}/{expected} expected skills over {} queries); small talk injecting: {small_talk_injecting}/{}; off-topic injecting: {off_topic_injecting}/{}",
        set.queries.len(),
        set.small_talk.len(),
        set.off_topic.len()
    );
    for m in &misses {
        println!("{m}");
    }
    Figures {
        recall,
        small_talk_injecting,
        off_topic_injecting,
    }
}

#[test]
fn the_labelled_sets_are_well_formed() {
    let bank = repo().join("skills");
    for file in SETS {
        let set = labelled(file);
        assert!(
            set.queries.len() >= 50,
            "{file}: at least 50 labelled queries"
        );
        assert!(set.small_talk.len() >= 10);
        assert!(
            set.off_topic.len() >= 10,
            "{file}: at least 10 off-topic messages"
        );
        for case in &set.queries {
            assert!(!case.expect.is_empty(), "{:?} expects nothing", case.query);
            for id in &case.expect {
                assert!(
                    bank.join(id).join("SKILL.md").is_file(),
                    "unknown skill {id}"
                );
            }
        }
    }
    assert!(
        labelled(SETS[0]).queries.len() + labelled(SETS[1]).queries.len() >= 60,
        "at least 60 labelled queries"
    );
}

/// Both sets meet `min_recall`, and no small talk or off-topic message
/// injects a skill.
fn assert_quality(name: &str, skills: &Skills, min_recall: f64) {
    for file in SETS {
        let f = evaluate(name, file, skills, &format!("{name}@"));
        assert!(
            f.recall >= min_recall,
            "{file}: {name} recall@6 {:.3} < {min_recall}",
            f.recall
        );
        assert_eq!(
            f.small_talk_injecting, 0,
            "{file}: small talk injected skills"
        );
        assert_eq!(
            f.off_topic_injecting, 0,
            "{file}: off-topic messages injected skills"
        );
    }
}

#[test]
fn bm25_recall_at_6_over_the_builtin_bank() {
    let tmp = tempfile::tempdir().unwrap();
    assert_quality("bm25", &skills(tmp.path(), Config::default()), 0.8);
}

#[cfg(feature = "local-embeddings")]
fn model_dir() -> String {
    std::env::var("METACLAW_TEST_MODEL_DIR").unwrap_or_else(|_| {
        panic!(
            "set METACLAW_TEST_MODEL_DIR to the all-MiniLM-L6-v2 folder (scripts/test fetches it)"
        )
    })
}

#[cfg(feature = "local-embeddings")]
#[test]
fn embedding_recall_at_6_over_the_builtin_bank() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.skills.retrieval_mode = metaclaw_core::config::RetrievalMode::Embedding;
    config.skills.embedding_model_path = Some(model_dir());
    let skills = skills(tmp.path(), config);
    assert!(skills.retrieval.embeddings.is_some());
    assert_quality("embedding", &skills, 0.9);
}
