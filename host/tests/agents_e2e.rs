//! Agents as namespaces, over real HTTP: which agent a turn is for (the
//! `X-Agent-Id` header, OpenClaw's own runtime line, else `default`), a
//! session that stays its first agent's, and clear errors for what cannot
//! be an agent id.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::Value;

const CONFIG: &str = "llm:\n  api_base: {upstream}\nsessions:\n  idle_timeout: 1h\n";

fn agent_of(list: &Value, session: &str) -> String {
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == session)
        .unwrap_or_else(|| panic!("no session {session} in {list}"))["agent_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn each_turn_goes_to_its_agents_sessions_and_never_into_anothers() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, CONFIG);
    let base = format!("{}/v1", mc.url());
    let echo = chat("echo", "hello", false);

    for (agent, session) in [("a", "s-a"), ("B", "s-b")] {
        let r = post_chat(
            &base,
            &echo,
            &[("x-session-id", session), ("x-agent-id", agent)],
        )
        .await;
        assert_eq!(r.status(), 200, "{agent}");
    }
    let r = post_chat(&base, &echo, &[("x-session-id", "s-none")]).await;
    assert_eq!(r.status(), 200);
    // OpenClaw's own request: its runtime line names agent `main`.
    let mut openclaw = fixture("chat_completions_stream_request.json")["body"].clone();
    openclaw["model"] = "echo".into();
    let r = post_chat(&base, &openclaw, &[]).await;
    assert_eq!(r.status(), 200);
    let openclaw_session = "1a206f6b-47b6-464c-86db-730d5d7b0316";
    for id in ["s-a", "s-b", "s-none", openclaw_session] {
        mc.turns(id, 1);
    }
    let list = poll_json(mc.home.path(), &["sessions", "list", "--json"], |v| {
        v.as_array().is_some_and(|a| a.len() == 4)
    });
    assert_eq!(agent_of(&list, "s-a"), "a");
    assert_eq!(agent_of(&list, "s-b"), "b", "ids are folded to lowercase");
    assert_eq!(agent_of(&list, "s-none"), "default");
    assert_eq!(agent_of(&list, openclaw_session), "main");
    let only_a = poll_json(
        mc.home.path(),
        &["sessions", "list", "--agent", "a", "--json"],
        |v| v.is_array(),
    );
    let ids: Vec<&str> = only_a
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s-a"]);

    // Agent b naming a's session is refused, in the client's API shape,
    // and a's session keeps only its own turn.
    let r = post_chat(
        &base,
        &echo,
        &[("x-session-id", "s-a"), ("x-agent-id", "b")],
    )
    .await;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("belongs to agent a"), "{body}");
    // What cannot be an agent id is refused, not guessed at.
    let r = post_chat(&base, &echo, &[("x-agent-id", "../etc")]).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("X-Agent-Id:"),
        "{body}"
    );
    // A third turn of a's own lands in its session: two turns, not three.
    let r = post_chat(
        &base,
        &echo,
        &[("x-session-id", "s-a"), ("x-agent-id", "a")],
    )
    .await;
    assert_eq!(r.status(), 200);
    let session = mc.turns("s-a", 2);
    assert_eq!(session["turns"].as_array().unwrap().len(), 2);

    // The header is metaclaw's: the upstream never sees it.
    let r = post_chat(
        &base,
        &chat("echo-request", "which headers?", false),
        &[("x-session-id", "s-a"), ("x-agent-id", "a")],
    )
    .await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let seen: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(seen["headers"].get("x-agent-id").is_none(), "{seen}");
    assert!(seen["headers"].get("x-session-id").is_none(), "{seen}");
}

/// A skill file in `<home>/skills/<folder>/` (`folder` may be an agent's
/// layer: `@work/NAME`) whose body carries `marker`.
fn write_skill(home: &std::path::Path, folder: &str, about: &str, marker: &str) {
    let dir = home.join("skills").join(folder);
    let name = folder.rsplit('/').next().unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: {about}.\nmetadata:\n  category: general\n  version: 1.0.0\n---\n\
             # {name}\n\n{about}. {marker}\n"
        ),
    )
    .unwrap();
}

/// The answer of one turn of `agent` (none: the default agent) in a new
/// session: the echoed system prompt, skills block included.
async fn answer(mc: &Metaclaw, session: &str, agent: Option<&str>, text: &str) -> String {
    let body = serde_json::json!({"model": "m", "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": text},
    ]});
    let mut headers = vec![("x-session-id", session)];
    headers.extend(agent.map(|a| ("x-agent-id", a)));
    let r = post_chat(&format!("{}/v1", mc.url()), &body, &headers).await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn loaded_and_indexed(mc: &Metaclaw, at_least: u64, generation_after: u64) {
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, at_least)
            && v["skills"]["generation"].as_u64().unwrap_or(0) > generation_after
    });
}

#[tokio::test]
async fn an_agents_own_skills_reach_only_its_turns_until_shared() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo-system\n  force_model: true\n\
         skills:\n  top_k: 4\nsessions:\n  idle_timeout: 1h\n",
    );
    let status = poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 0)
    });
    let before = status["skills"]["loaded"].as_u64().unwrap();
    let generation = status["skills"]["generation"].as_u64().unwrap();
    let rota = "Rotate the pager duty rota every week and hand over open incidents";
    let kiln = "Fire the pottery kiln slowly and check the glaze cones";
    write_skill(mc.home.path(), "pager-rota", rota, "SHARED-ROTA");
    write_skill(mc.home.path(), "@work/pager-rota", rota, "WORK-ROTA");
    write_skill(mc.home.path(), "@work/kiln-firing", kiln, "WORK-KILN");
    loaded_and_indexed(&mc, before + 3, generation);

    let ask = "how do I rotate the pager duty rota, and fire the pottery kiln glaze cones?";
    let default = answer(&mc, "d-1", None, ask).await;
    assert!(default.contains("SHARED-ROTA"), "{default}");
    assert!(!default.contains("WORK-"), "{default}");
    let work = answer(&mc, "w-1", Some("work"), ask).await;
    assert!(
        work.contains("WORK-ROTA") && work.contains("WORK-KILN"),
        "{work}"
    );
    assert!(
        !work.contains("SHARED-ROTA"),
        "the agent's own version in place of the shared one: {work}"
    );
    let other = answer(&mc, "o-1", Some("home"), ask).await;
    assert!(
        other.contains("SHARED-ROTA") && !other.contains("WORK-"),
        "{other}"
    );

    let listed = poll_json(
        mc.home.path(),
        &["skills", "list", "--agent", "work", "--json"],
        |v| v["skills"].is_array(),
    );
    let ids: Vec<&str> = listed["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"@work/pager-rota") && ids.contains(&"@work/kiln-firing"));
    assert!(!ids.contains(&"pager-rota"), "{ids:?}");

    // `skills search` answers as a turn of the agent it is asked for.
    for (agent, wanted, not) in [
        ("work", "@work/kiln-firing", "pager-rota"),
        ("default", "pager-rota", "@work/kiln-firing"),
    ] {
        let out = mc.cli(&["skills", "search", ask, "--agent", agent, "--json"]);
        let found: Value = serde_json::from_slice(&out.stdout).unwrap();
        let injected: Vec<&str> = found["injected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            injected.contains(&wanted) && !injected.contains(&not),
            "{agent}: {injected:?}"
        );
    }

    // Sharing never changes a shared skill behind every agent's back.
    let refused = mc.cli(&["skills", "share", "@work/pager-rota"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("a shared skill pager-rota exists"), "{said}");

    let status = poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, before + 3)
    });
    let generation = status["skills"]["generation"].as_u64().unwrap();
    let shared = mc.cli(&["skills", "share", "@work/kiln-firing"]);
    assert!(
        shared.status.success(),
        "{}",
        String::from_utf8_lossy(&shared.stderr)
    );
    assert!(mc.home.path().join("skills/kiln-firing/SKILL.md").is_file());
    loaded_and_indexed(&mc, before + 3, generation);
    let default = answer(&mc, "d-2", None, ask).await;
    assert!(default.contains("WORK-KILN"), "shared now: {default}");
    let history = mc.cli(&["skills", "history", "kiln-firing"]);
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(history.contains("shared from agent work"), "{history}");
}

/// A team's agents (`ops/alice`, `ops/bob`) share the team's layer and
/// keep their own; another team's agent sees neither; `skills share` moves
/// an agent's skill into its team's layer.
#[tokio::test]
async fn a_teams_agents_share_its_skills_and_keep_their_own() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo-system\n  force_model: true\n\
         skills:\n  top_k: 4\nsessions:\n  idle_timeout: 1h\n",
    );
    let status = poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 0)
    });
    let before = status["skills"]["loaded"].as_u64().unwrap();
    let generation = status["skills"]["generation"].as_u64().unwrap();
    let rota = "Rotate the pager duty rota every week and hand over open incidents";
    let kiln = "Fire the pottery kiln slowly and check the glaze cones";
    write_skill(mc.home.path(), "pager-rota", rota, "SHARED-ROTA");
    write_skill(mc.home.path(), "+ops/pager-rota", rota, "OPS-ROTA");
    write_skill(
        mc.home.path(),
        "+ops/@alice/kiln-firing",
        kiln,
        "ALICE-KILN",
    );
    loaded_and_indexed(&mc, before + 3, generation);

    let ask = "how do I rotate the pager duty rota, and fire the pottery kiln glaze cones?";
    let alice = answer(&mc, "a-1", Some("ops/alice"), ask).await;
    assert!(
        alice.contains("OPS-ROTA")
            && alice.contains("ALICE-KILN")
            && !alice.contains("SHARED-ROTA"),
        "the team's version in place of the shared one, and her own: {alice}"
    );
    let bob = answer(&mc, "b-1", Some("ops/bob"), ask).await;
    assert!(
        bob.contains("OPS-ROTA") && !bob.contains("ALICE-KILN"),
        "the team's, not alice's: {bob}"
    );
    let eve = answer(&mc, "e-1", Some("sales/eve"), ask).await;
    assert!(
        eve.contains("SHARED-ROTA") && !eve.contains("OPS-") && !eve.contains("ALICE-"),
        "another team's agent: {eve}"
    );
    let list = poll_json(mc.home.path(), &["sessions", "list", "--json"], |v| {
        v.as_array().is_some_and(|a| a.len() == 3)
    });
    assert_eq!(agent_of(&list, "a-1"), "ops/alice");

    // Alice's skill, shared with her team.
    let status = poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, before + 3)
    });
    let generation = status["skills"]["generation"].as_u64().unwrap();
    let shared = mc.cli(&["skills", "share", "+ops/@alice/kiln-firing"]);
    assert!(
        shared.status.success(),
        "{}",
        String::from_utf8_lossy(&shared.stderr)
    );
    assert!(
        mc.home
            .path()
            .join("skills/+ops/kiln-firing/SKILL.md")
            .is_file()
    );
    loaded_and_indexed(&mc, before + 3, generation);
    let bob = answer(&mc, "b-2", Some("ops/bob"), ask).await;
    assert!(bob.contains("ALICE-KILN"), "the team's now: {bob}");
    let eve = answer(&mc, "e-2", Some("sales/eve"), ask).await;
    assert!(!eve.contains("ALICE-KILN"), "not another team's: {eve}");
    // The team's version of a shared skill is not shared over it.
    let refused = mc.cli(&["skills", "share", "+ops/pager-rota"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("a shared skill pager-rota exists"), "{said}");
}
