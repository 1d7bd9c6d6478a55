//! `hostile`: a scorer that misbehaves on request, for the sandbox suite.
//! The turn's `session-id` picks the attack; its outcome comes back in the
//! reward's rationale so tests can check what the sandbox allowed.

use metaclaw_plugin_sdk::scorer::{
    FinishedTurn, Guest, Metadata, PluginGuest, Reward, clock, metadata,
};

struct Hostile;

impl PluginGuest for Hostile {
    fn metadata() -> Metadata {
        let mut m = metadata(
            "hostile",
            env!("CARGO_PKG_VERSION"),
            "Misbehaves on request (sandbox tests)",
        );
        m.capabilities = vec!["clock".into()];
        m
    }
}

fn reward(rationale: String) -> Option<Reward> {
    Some(Reward {
        value: 0.0,
        label: "hostile".into(),
        rationale,
    })
}

fn recurse(depth: u64) -> u64 {
    // black_box keeps the recursion real; the stack runs out long before.
    if std::hint::black_box(depth) == u64::MAX {
        return 0;
    }
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

impl Guest for Hostile {
    fn score(turn: FinishedTurn) -> Option<Reward> {
        let arg = turn.next_user_message.clone().unwrap_or_default();
        match turn.session_id.as_str() {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "bomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                }
            }
            "bomb-observe" => {
                // Grow until the host refuses, and report where.
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut chunk = Vec::new();
                    if chunk.try_reserve_exact(1 << 20).is_err() {
                        return reward(format!("refused after {} MiB", hoard.len()));
                    }
                    chunk.resize(1 << 20, 1u8);
                    hoard.push(chunk);
                }
            }
            "recurse" => reward(format!("depth {}", recurse(0))),
            "huge" => reward("x".repeat(arg.parse().unwrap_or(8 << 20))),
            "trap" => std::process::abort(),
            "read-file" => reward(format!(
                "{:?}",
                std::fs::read_to_string(if arg.is_empty() { "/etc/passwd" } else { &arg })
                    .map(|s| s.len())
            )),
            "list-dir" => reward(format!("{:?}", std::fs::read_dir("/").map(|d| d.count()))),
            "write-file" => reward(format!(
                "{:?}",
                std::fs::write("/tmp/metaclaw-hostile", b"x")
            )),
            "open-socket" => reward(format!(
                "{:?}",
                std::net::TcpStream::connect(arg.as_str()).map(|_| "connected")
            )),
            "read-env" => reward(format!(
                "vars={} HOME={:?}",
                std::env::vars().count(),
                std::env::var("HOME").ok()
            )),
            "wasi-clock" => reward(format!(
                "{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            )),
            "host-clock" => reward(format!("{}", clock::now_ms())),
            _ => reward("fine".into()),
        }
    }
}

metaclaw_plugin_sdk::scorer::export_scorer!(Hostile);
