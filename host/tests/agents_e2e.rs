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
