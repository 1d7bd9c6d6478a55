//! Retrieval that learns from outcomes (docs/skills.md, "Outcomes"): among
//! skills equally relevant to a query, the one whose turns were judged
//! well is injected first, an untried one is still tried before one that
//! failed, and `skills.outcome_weight: 0` leaves relevance alone; a
//! retriever plugin granted `outcomes` reads the same figures. The real
//! BM25 plugin over a real library and store; the outcomes are the
//! store's sums as learning leaves them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::Arc;

use metaclaw_core::config::Config;
use metaclaw_core::home::Home;
use metaclaw_core::skills::{Query, Skills};

const NAMES: [&str; 3] = [
    "deploy-check-alpha",
    "deploy-check-bravo",
    "deploy-check-charlie",
];

/// Three skills that say the same about deploying (so BM25 scores them
/// alike), the store, and the skills over the real BM25 plugin.
fn setup(home: &Path, top_k: u32, weight: f32) -> Arc<Skills> {
    setup_by(home, top_k, weight, |_| "user")
}

/// [`setup`], each skill made by `created_by(name)`.
fn setup_by(
    home: &Path,
    top_k: u32,
    weight: f32,
    created_by: impl Fn(&str) -> &'static str,
) -> Arc<Skills> {
    setup_with(home, top_k, weight, created_by, |_| {})
}

/// [`setup_by`], the config changed by `configure`.
fn setup_with(
    home: &Path,
    top_k: u32,
    weight: f32,
    created_by: impl Fn(&str) -> &'static str,
    configure: impl FnOnce(&mut Config),
) -> Arc<Skills> {
    common::warm_plugin_cache(home);
    let home = Home::at(home);
    home.ensure().unwrap();
    let dir = home.skills_dir();
    for name in NAMES {
        let by = created_by(name);
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: Check the deploy pipeline and its rollback before releasing a service.\n\
                 category: general\nversion: 1.0.0\ncreated_by: {by}\n---\n\
                 # Deploy check\n\nRun the deploy pipeline's checks and confirm the rollback works before releasing.\n"
            ),
        )
        .unwrap();
    }
    let db = home.db_file();
    drop(metaclaw_core::store::Db::at(&db).side_writer().unwrap());
    let mut config = Config::default();
    config.skills.top_k = top_k;
    config.skills.outcome_weight = weight;
    configure(&mut config);
    common::skills_over(&home, dir, &config)
}

/// `plus` turns judged +1 and `minus` judged −1 for `name` 1.0.0, and the
/// same turns in every main turn's row, as learning leaves them.
fn judged(db: &Path, name: &str, plus: i64, minus: i64) {
    let conn = metaclaw_core::store::Db::at(db).side_writer().unwrap();
    let (n, sum) = (plus + minus, (plus - minus) as f64);
    for (id, version) in [(name, "1.0.0"), ("", "")] {
        conn.execute(
            "INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
             VALUES (?1, ?2, ?3, ?3, ?4, ?3)
             ON CONFLICT (skill_id, version) DO UPDATE SET injected = injected + ?3,
                 judged = judged + ?3, reward_sum = reward_sum + ?4, reward_sq = reward_sq + ?3",
            metaclaw_core::store::sql::params![id, version, n, sum],
        )
        .unwrap();
    }
}

fn injected(skills: &Skills) -> (Vec<String>, Vec<String>) {
    injected_for(
        skills,
        "check the deploy pipeline before releasing the billing service",
    )
}

/// The skills injected for `text`, and the retriever's ranking.
fn injected_for(skills: &Skills, text: &str) -> (Vec<String>, Vec<String>) {
    let query = Query {
        text: text.into(),
        ..Query::default()
    };
    let engine = skills.plugins.as_ref().unwrap().engine.clone();
    let selection = engine.block_on(skills.select(&query));
    let ranked: Vec<String> = selection.ranked.iter().map(|(id, _)| id.clone()).collect();
    (
        selection.skills.iter().map(|s| s.id.clone()).collect(),
        ranked,
    )
}

fn refresh(skills: &Skills, db: &Path) {
    let conn = metaclaw_core::store::Db::at(db).read().unwrap();
    skills.outcomes.refresh(&conn).unwrap();
}

#[test]
fn the_skill_that_helped_comes_first_and_an_untried_one_is_still_tried() {
    let home = tempfile::tempdir().unwrap();
    let skills = setup(home.path(), 1, 0.3);
    let db = Home::at(home.path()).db_file();
    let (_, ranked) = injected(&skills);
    assert_eq!(ranked.len(), 3, "all three are relevant: {ranked:?}");

    // Bravo's turns went well, alpha's badly (whichever BM25 puts first).
    judged(&db, "deploy-check-bravo", 20, 0);
    judged(&db, "deploy-check-alpha", 0, 20);
    refresh(&skills, &db);
    let (chosen, _) = injected(&skills);
    assert_eq!(chosen, ["deploy-check-bravo"]);

    // Two slots: the good one and the untried one, not the one that failed.
    let two = tempfile::tempdir().unwrap();
    let skills = setup(two.path(), 2, 0.3);
    let db = Home::at(two.path()).db_file();
    judged(&db, "deploy-check-bravo", 20, 0);
    judged(&db, "deploy-check-alpha", 0, 20);
    refresh(&skills, &db);
    let (chosen, _) = injected(&skills);
    assert_eq!(chosen, ["deploy-check-bravo", "deploy-check-charlie"]);
}

#[test]
fn outcomes_read_at_start_and_weight_zero_keeps_relevance_alone() {
    let home = tempfile::tempdir().unwrap();
    let db = Home::at(home.path()).db_file();
    let plain = setup(home.path(), 1, 0.0);
    let (before, ranked) = injected(&plain);
    assert_eq!(before, ranked[..1], "the retriever's first");
    // The retriever's first failed, the last helped.
    judged(&db, &ranked[0], 0, 20);
    judged(&db, &ranked[2], 20, 0);
    refresh(&plain, &db);
    assert_eq!(injected(&plain).0, before, "weight 0: relevance alone");

    // A new process reads the outcomes at start.
    let weighted = setup(home.path(), 1, 0.3);
    assert_eq!(injected(&weighted).0, [ranked[2].clone()]);
}

/// The hostile retriever, for `hostile:outcomes`, ranks the skills by the
/// `mean` its `outcomes()` call returns: granted, that is this turn's
/// snapshot of the store's sums.
#[test]
fn a_retriever_granted_outcomes_ranks_by_the_stores_figures() {
    let home = tempfile::tempdir().unwrap();
    let drop_in = home.path().join("plugins/hostile-retriever.wasm");
    std::fs::create_dir_all(drop_in.parent().unwrap()).unwrap();
    std::fs::copy(
        common::built_plugin("testing/hostile-retriever.wasm"),
        &drop_in,
    )
    .unwrap();
    let sha = metaclaw_core::digest::sha256_hex(std::fs::read(&drop_in).unwrap());
    // Weight 0: the order is the plugin's alone.
    let skills = setup_with(
        home.path(),
        1,
        0.0,
        |_| "user",
        |c| {
            c.plugins.retriever = vec!["hostile-retriever".parse().unwrap()];
            c.plugins.grants.insert(
                format!("hostile-retriever@sha256:{sha}").parse().unwrap(),
                metaclaw_core::plugins::Grants::parse(&["outcomes".to_string()]).unwrap(),
            );
        },
    );
    let db = Home::at(home.path()).db_file();
    judged(&db, "deploy-check-alpha", 0, 20);
    judged(&db, "deploy-check-charlie", 20, 0);
    refresh(&skills, &db);
    let (chosen, ranked) = injected_for(&skills, "hostile:outcomes");
    assert_eq!(
        ranked,
        [
            "deploy-check-charlie",
            "deploy-check-bravo",
            "deploy-check-alpha"
        ],
        "best mean first; bravo untried, at the prior"
    );
    assert_eq!(chosen, ["deploy-check-charlie"]);
}

#[test]
fn an_evolved_skill_that_hurt_is_retired_the_users_only_flagged_and_restore_brings_it_back() {
    let home = tempfile::tempdir().unwrap();
    let skills = setup_by(home.path(), 2, 0.3, |name| match name {
        "deploy-check-charlie" => "user",
        _ => "evolved:s1",
    });
    let db = Home::at(home.path()).db_file();
    judged(&db, "deploy-check-alpha", 0, 20);
    judged(&db, "deploy-check-charlie", 0, 20);
    judged(&db, "deploy-check-bravo", 40, 0);
    refresh(&skills, &db);

    let retired = metaclaw_core::learn::retire::retire_flagged(&skills).unwrap();
    assert_eq!(
        retired,
        ["deploy-check-alpha"],
        "the user's own is only flagged"
    );
    let file = Home::at(home.path())
        .skills_dir()
        .join("deploy-check-alpha/SKILL.md");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("retired: "), "{text}");
    assert!(text.contains("20 judged turns"), "{text}");
    // Out of retrieval: the good one and the user's flagged one remain.
    assert_eq!(
        injected(&skills).0,
        ["deploy-check-bravo", "deploy-check-charlie"]
    );
    let history = common::cli_in(
        home.path(),
        &["skills", "history", "deploy-check-alpha", "--json"],
    );
    let history: serde_json::Value = serde_json::from_slice(&history.stdout).unwrap();
    assert!(
        history
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["who"] == "retired:outcomes"),
        "{history:#}"
    );
    let (stats, alpha) = common::skill_stats(home.path(), "deploy-check-alpha");
    let (_, charlie) = common::skill_stats(home.path(), "deploy-check-charlie");
    assert!(alpha["retired"].is_string(), "{stats:#}");
    assert!(charlie["flag"].is_object(), "{stats:#}");
    assert!(charlie["retired"].is_null(), "{stats:#}");

    // Restored by the user: back in retrieval, and not retired again.
    let out = common::cli_in(home.path(), &["skills", "restore", "deploy-check-alpha"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    skills.library.rescan(None);
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("retired: ")
    );
    assert!(
        metaclaw_core::learn::retire::retire_flagged(&skills)
            .unwrap()
            .is_empty()
    );
    let again = common::cli_in(home.path(), &["skills", "restore", "deploy-check-alpha"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not retired"));
}
