//! The WIT package across releases (wit/README.md): plugins built for the
//! first release (`metaclaw:plugin@0.1.0`, wit/released/) load in this
//! host and answer as their current builds do; a plugin of a later release
//! that imports what this host lacks is refused, saying so; and what 0.1.1
//! added, `outcomes`, answers a retriever only when it is granted. In
//! process, through the real plugin host, with components built from source
//! by scripts/build-plugins.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use metaclaw_core::plugins::outcomes::SkillOutcome;
use metaclaw_core::plugins::types::{Skill, ToolCall};
use metaclaw_core::plugins::{
    CallError, Grants, Limits, LoadedPlugin, OutcomeSource, PluginEngine,
};

use common::wat::{current_wit, probe_bytes, wat_scorer_for};
use common::wit::{context, finished_turn, message, skill};
use common::{engine_with_cache, load_built};

fn load(engine: &Arc<PluginEngine>, rel: &str, grants: Grants) -> Arc<LoadedPlugin> {
    load_built(engine, rel, grants, None, Limits::default())
}

fn library() -> Arc<Vec<Skill>> {
    Arc::new(vec![
        skill(
            "git-rebase",
            "Rebase a branch onto main",
            "Fetch first, then git rebase origin/main; resolve conflicts file by file.",
        ),
        skill(
            "docker-cleanup",
            "Free disk space taken by Docker",
            "docker system prune removes stopped containers and dangling images.",
        ),
        skill(
            "python-venv",
            "Create a Python virtual environment",
            "python3 -m venv .venv, then activate it before pip install.",
        ),
    ])
}

#[test]
fn plugins_built_for_the_first_release_load_and_answer_as_their_current_builds() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with_cache(dir.path());

    let old = load(&engine, "testing/bm25-wit-0.1.0.wasm", Grants::default());
    let new = load(&engine, "builtin/bm25.wasm", Grants::default());
    assert_eq!(old.info.package, "metaclaw:plugin@0.1.0");
    assert_eq!(
        new.info.package,
        format!(
            "metaclaw:plugin@{}",
            metaclaw_core::plugins::PACKAGE_VERSION
        )
    );
    assert_ne!(old.info.package, new.info.package, "two releases compared");
    // What the old build imports is of its own release: the host links it
    // to this release's implementations.
    assert!(
        old.info
            .imports
            .iter()
            .filter(|i| i.starts_with("metaclaw:plugin/"))
            .all(|i| i.ends_with("@0.1.0")),
        "{:?}",
        old.info.imports
    );
    let skills = library();
    for query in [
        "how do I rebase my branch onto main",
        "docker is eating my disk",
        "set up a python venv",
    ] {
        let ranked = |p: &Arc<LoadedPlugin>| {
            engine
                .block_on(async {
                    p.warm(&skills, 1).await?;
                    p.retrieve(&skills, 1, &context(query), 3, None).await
                })
                .unwrap()
        };
        let (was, is) = (ranked(&old), ranked(&new));
        assert!(!was.is_empty(), "{query}: the 0.1.0 build ranked nothing");
        assert_eq!(was, is, "{query}");
    }

    let old = load(
        &engine,
        "testing/tool-error-wit-0.1.0.wasm",
        Grants::default(),
    );
    let new = load(&engine, "builtin/tool-error.wasm", Grants::default());
    assert_eq!(old.info.package, "metaclaw:plugin@0.1.0");
    let mut response = message("assistant", "");
    response.tool_calls = vec![ToolCall {
        id: "c1".into(),
        name: "shell".into(),
        arguments: r#"{"cmd":"ls /nope"}"#.into(),
    }];
    let mut result = message(
        "tool",
        "ls: cannot access '/nope': No such file or directory\nexit code 2",
    );
    result.tool_call_id = Some("c1".into());
    let turn = finished_turn("s", response, vec![result], None);
    let was = engine.block_on(old.score(&turn)).unwrap();
    assert!(
        was.as_ref().is_some_and(|r| r.value < 0.0),
        "the 0.1.0 build saw the tool error: {was:?}"
    );
    assert_eq!(was, engine.block_on(new.score(&turn)).unwrap());
}

/// This host's WIT text as a release that does not exist yet (the next
/// patch): one more interface, imported by the scorer world. The text and
/// its version.
fn a_later_release() -> (String, String) {
    let v = &metaclaw_core::plugins::PACKAGE_VERSION;
    let version = format!("{}.{}.{}", v.major, v.minor, v.patch + 1);
    let current = format!("@{v};");
    let wit = current_wit();
    assert!(wit.contains(&current));
    let wit = wit.replacen(&current, &format!("@{version};"), 1).replacen(
        "world scorer {",
        "interface weather {\n    today: func() -> u32;\n}\n\nworld scorer {\n    import weather;",
        1,
    );
    (wit, version)
}

#[test]
fn a_later_release_loads_unless_it_imports_what_this_host_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with_cache(dir.path());
    let (later, version) = a_later_release();

    // Built for the later release, importing nothing new: it loads.
    let plain = wat_scorer_for(&later, "plain", "", "", "");
    let probed = probe_bytes(&engine, &plain, Limits::default()).unwrap();
    assert_eq!(probed.info.package, format!("metaclaw:plugin@{version}"));
    let plain = Arc::new(probed.ready(Grants::default(), None));
    let turn = finished_turn("s", message("assistant", "hello"), Vec::new(), None);
    assert_eq!(engine.block_on(plain.score(&turn)).unwrap(), None);

    // Importing the interface this host does not have: refused, by name.
    let weather = wat_scorer_for(
        &later,
        "weather",
        &format!(r#"(import "metaclaw:plugin/weather@{version}" "today" (func (result i32)))"#),
        "",
        "",
    );
    let Err(refused) = probe_bytes(&engine, &weather, Limits::default()) else {
        panic!("a plugin importing an interface this host lacks was loaded");
    };
    assert!(
        matches!(
            refused,
            metaclaw_core::plugins::LoadRefused::MissingImport { .. }
        ),
        "{refused}"
    );
    let refused = refused.to_string();
    assert!(
        refused.contains(&format!("imports metaclaw:plugin/weather@{version}"))
            && refused.contains("upgrade metaclaw"),
        "{refused}"
    );
}

fn outcome(version: &str, mean: f64) -> SkillOutcome {
    SkillOutcome {
        version: version.into(),
        injected: 12,
        judged: 10,
        mean,
        sd: 0.1,
        low: (mean - 0.2).max(0.0),
        high: (mean + 0.2).min(1.0),
        flagged: mean < 0.3,
    }
}

#[test]
fn a_retriever_reads_outcomes_only_when_granted() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_with_cache(dir.path());
    let skills = library();
    let known: Arc<dyn OutcomeSource> = Arc::new(HashMap::from([
        ("git-rebase".to_string(), outcome("1.0.0", 0.2)),
        ("python-venv".to_string(), outcome("1.0.0", 0.9)),
    ]));
    let retrieve = |p: &Arc<LoadedPlugin>, source: Option<Arc<dyn OutcomeSource>>| {
        engine.block_on(async {
            p.warm(&skills, 1).await?;
            p.retrieve(&skills, 1, &context("hostile:outcomes"), 3, source)
                .await
        })
    };

    // Not granted: the call traps, and says how to grant it.
    let ungranted = load(&engine, "testing/hostile-retriever.wasm", Grants::default());
    match retrieve(&ungranted, Some(known.clone())) {
        Err(CallError::Trap(e)) => assert!(
            e.contains("capability `outcomes` is not granted")
                && e.contains("plugins.grants.hostile-retriever: [outcomes]"),
            "{e}"
        ),
        other => panic!("an ungranted outcomes() answered: {other:?}"),
    }

    // Granted: each id's outcomes, none for a skill without any.
    let grants = Grants::parse(&["outcomes".to_string()]).unwrap();
    let granted = load(&engine, "testing/hostile-retriever.wasm", grants);
    let ranked = retrieve(&granted, Some(known)).unwrap();
    let ids: Vec<(&str, f32)> = ranked.iter().map(|r| (r.id.as_str(), r.score)).collect();
    assert_eq!(ids, [("python-venv", 0.9), ("git-rebase", 0.2)]);

    // Granted, in a call with no outcomes to give (`plugins call` without
    // them): every id has none.
    assert!(retrieve(&granted, None).unwrap().is_empty());
}
