//! The WebAssembly plugin host, end to end: real components built from
//! source by scripts/build-plugins (Rust, Python, JavaScript, and a hostile
//! one), loaded by the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

// These tests load plugins, not race the compile deadline (sandbox_e2e does
// that): on a loaded 2-core machine the Python plugin's compile alone has
// taken over the default 60 s.
const WATCHING: &str = "llm:\n  api_base: {upstream}\nplugins:\n  watch_interval: 200ms\n  timeouts:\n    compile: 10m\n";

fn finished_turn(session: &str, next: Option<&str>, response: &str) -> Value {
    json!({
        "session_id": session,
        "turn_id": "t1",
        "request": [{"role": "user", "content": "hello", "tool_call_id": null, "tool_calls": []}],
        "response": {"role": "assistant", "content": response, "tool_call_id": null, "tool_calls": []},
        "tool_results": [],
        "next_user_message": next,
        "status": "ok",
    })
}

/// `plugins call` on a home, returning the JSON it prints (or the error).
fn call(home: &Path, plugin: &str, input: &Value) -> Result<Value, String> {
    let out = cli_in(
        home,
        &["plugins", "call", plugin, "--input", &input.to_string()],
    );
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

/// Copies a built plugin into the running daemon's drop-in folder and
/// waits until the daemon lists it.
fn drop_in(mc: &Metaclaw, rel: &str, name: &str) {
    let dir = mc.home.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let file = Path::new(rel).file_name().unwrap();
    std::fs::copy(built_plugin(rel), dir.join(file)).unwrap();
    poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == name)
    });
}

/// The hostile plugin's reward for the first turn of `session`.
fn hostile_reward(mc: &Metaclaw, session: &str) -> Value {
    let s = mc.session_until(session, |v| {
        v["turns"][0]["rewards"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["source"].as_str().unwrap().contains("hostile"))
        })
    });
    s["turns"][0]["rewards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["source"].as_str().unwrap().contains("hostile"))
        .unwrap()
        .clone()
}

fn rationale(v: &Value) -> String {
    v["rationale"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn python_and_javascript_plugins_dropped_into_a_running_metaclaw_are_loaded_and_called() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, WATCHING);
    // The first-party Rust scorer is there from the start.
    let list = poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        v["plugins"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "tool-error"))
    });
    assert!(
        !list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "refusals")
    );

    // Drop both in, while it runs.
    let dir = mc.home.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        built_plugin("examples/frustration.wasm"),
        dir.join("frustration.wasm"),
    )
    .unwrap();
    std::fs::copy(
        built_plugin("examples/refusals.wasm"),
        dir.join("refusals.wasm"),
    )
    .unwrap();
    let list = poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        let names: Vec<&str> = v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        names.contains(&"frustration") && names.contains(&"refusals")
    });
    for p in list["plugins"].as_array().unwrap() {
        assert_eq!(p["status"], "ok", "{p}");
        if p["name"] == "frustration" || p["name"] == "refusals" {
            assert_eq!(p["kind"], "scorer");
        }
    }

    // A refusal, then a correction: both plugins judge the first turn.
    let base = format!("{}/v1", mc.url());
    let refusal = "I am sorry, but I cannot do that.";
    post_chat(
        &base,
        &chat("echo", refusal, false),
        &[("x-session-id", "langs")],
    )
    .await;
    let body = json!({"model": "echo", "messages": [
        {"role": "user", "content": refusal},
        {"role": "assistant", "content": refusal},
        {"role": "user", "content": "No, that's wrong. Try again."},
    ]});
    post_chat(&base, &body, &[("x-session-id", "langs")]).await;
    let session = mc.session_until("langs", |v| {
        v["turns"][0]["rewards"]
            .as_array()
            .is_some_and(|r| r.len() >= 2)
    });
    let rewards = session["turns"][0]["rewards"].as_array().unwrap();
    let by = |name: &str| {
        rewards
            .iter()
            .find(|r| r["source"].as_str().unwrap().contains(name))
            .cloned()
            .unwrap()
    };
    assert_eq!(by("refusals@0.1.0")["label"], "refusal");
    assert!(by("refusals")["value"].as_f64().unwrap() < 0.0);
    assert!(
        by("frustration@0.1.0")["value"].as_f64().unwrap() < 0.0,
        "{rewards:?}"
    );
    assert!(rationale(&by("frustration")).contains("wrong"));

    // The live list counts their calls.
    let list = poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "frustration" || p["name"] == "refusals")
            .all(|p| p["calls"].as_u64().unwrap() >= 1)
    });
    assert!(
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["failures"] == 0)
    );

    // Removing a file unloads it, still without a restart.
    std::fs::remove_file(dir.join("refusals.wasm")).unwrap();
    poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        !v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "refusals")
    });
}

#[tokio::test]
async fn a_lock_pins_plugins_by_hash_and_a_replaced_build_is_refused() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, WATCHING);
    let home = mc.home.path();
    let dir = home.join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let original = built_plugin("examples/refusals.wasm");
    std::fs::copy(&original, dir.join("refusals.wasm")).unwrap();

    let out = cli_in(home, &["plugins", "lock"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The drop-in is pinned; the first-party plugins compiled into the
    // binary are not (they change only with it), and the output says so.
    let lock = std::fs::read_to_string(home.join("metaclaw.lock")).unwrap();
    assert!(
        lock.contains("name: refusals") && !lock.contains("name: tool-error"),
        "{lock}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("first-party plugins compiled into metaclaw"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let verify = cli_in(home, &["plugins", "verify"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // Same plugin, same version, a different build.
    let pinned = poll_json(home, &["plugins", "list", "--json"], |v| {
        v["locked"] == true
            && v["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "refusals")
    });
    let pinned_hash = listed_plugin(&pinned, "refusals")["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    rebuilt_copy(&original, &dir.join("refusals.wasm"));
    let refused = poll_json(home, &["plugins", "list", "--json"], |v| {
        !v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "refusals")
            && v["problems"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["error"].as_str().unwrap().contains("refused"))
    });
    let problem = refused["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["error"].as_str().unwrap().contains("refused"))
        .unwrap();
    let message = problem["error"].as_str().unwrap();
    let bytes = std::fs::read(dir.join("refusals.wasm")).unwrap();
    let new_hash = metaclaw_core::digest::sha256_hex(&bytes);
    assert!(
        message.contains(&pinned_hash) && message.contains(&new_hash),
        "both hashes must be named: {message}"
    );
    assert!(problem["path"].as_str().unwrap().ends_with("refusals.wasm"));
    // The first-party plugin, still pinned, is still loaded.
    assert!(
        refused["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "tool-error")
    );

    let verify = cli_in(home, &["plugins", "verify"]);
    assert!(!verify.status.success());
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(
        report.contains("MISMATCH refusals@0.1.0")
            && report.contains(&new_hash)
            && report.contains(&pinned_hash),
        "{report}"
    );

    // Putting the pinned build back makes it load again.
    std::fs::copy(&original, dir.join("refusals.wasm")).unwrap();
    poll_json(home, &["plugins", "list", "--json"], |v| {
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "refusals")
    });
    assert!(cli_in(home, &["plugins", "verify"]).status.success());
}

/// `plugins list` right after `start` says the plugins are still loading,
/// not that none is loaded: here a drop-in whose `metadata()` never returns
/// holds the daemon's first scan until the load deadline (10 minutes), so
/// the scan is certainly unfinished when the daemon answers. A scan that
/// finished with no plugin still says none.
#[test]
fn plugins_list_right_after_start_says_they_are_loading_and_none_once_done() {
    let up = dummy();
    let slow = tempfile::tempdir().unwrap();
    std::fs::copy(
        built_plugin("testing/slow-metadata.wasm"),
        slow.path().join("slow-metadata.wasm"),
    )
    .unwrap();
    let config = |dir: &Path, load: &str| {
        format!(
            "llm:\n  api_base: {{upstream}}\nplugins:\n  builtin: false\n  dir: {}\n  timeouts:\n    load: {load}\n",
            dir.display()
        )
    };
    let mc = Metaclaw::start(&up.url, &config(slow.path(), "10m"));
    let out = mc.cli(&["plugins", "list"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}");
    assert!(said.contains("the plugins are still loading"), "{said}");
    assert!(!said.contains("no plugins loaded"), "{said}");
    let listed: Value =
        serde_json::from_slice(&mc.cli(&["plugins", "list", "--json"]).stdout).unwrap();
    assert_eq!(listed["loading"], true, "{listed}");
    let status: Value = serde_json::from_slice(&mc.cli(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["plugins"]["loading"], true, "{status}");
    drop(mc);

    // Nothing to load: once the scan is done, none is what it says.
    let empty = tempfile::tempdir().unwrap();
    let mc = Metaclaw::start(&up.url, &config(empty.path(), "2s"));
    let listed = poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        v["loading"] == false
    });
    assert_eq!(listed["plugins"], json!([]), "{listed}");
    let said = String::from_utf8_lossy(&mc.cli(&["plugins", "list"]).stdout).to_string();
    assert!(said.contains("no plugins loaded"), "{said}");
    assert!(!said.contains("loading"), "{said}");
}

#[test]
fn without_grants_a_plugin_cannot_read_files_open_sockets_read_the_environment_or_the_clock() {
    let home = hostile_home("{}\n");
    let h = home.path();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();

    let r = rationale(&call(h, "hostile", &finished_turn("read-file", None, "")).unwrap());
    assert!(r.starts_with("Err("), "reading /etc/passwd: {r}");
    let r = rationale(&call(h, "hostile", &finished_turn("list-dir", None, "")).unwrap());
    assert!(r.starts_with("Err("), "listing /: {r}");
    let r = rationale(&call(h, "hostile", &finished_turn("write-file", None, "")).unwrap());
    assert!(r.starts_with("Err("), "writing /tmp: {r}");
    assert!(!Path::new("/tmp/metaclaw-hostile").exists());
    let r = rationale(&call(h, "hostile", &finished_turn("open-socket", Some(&addr), "")).unwrap());
    assert!(r.starts_with("Err("), "connecting to {addr}: {r}");
    let r = rationale(&call(h, "hostile", &finished_turn("read-env", None, "")).unwrap());
    assert_eq!(r, "vars=0 HOME=None");
    // The WASI clock is frozen at the epoch; the host clock is refused.
    let r = rationale(&call(h, "hostile", &finished_turn("wasi-clock", None, "")).unwrap());
    assert_eq!(r, "0");
    let e = call(h, "hostile", &finished_turn("host-clock", None, "")).unwrap_err();
    assert!(
        e.contains("capability `clock` is not granted") && e.contains("plugins.grants.hostile"),
        "{e}"
    );
}

/// The sha256 of a plugin scripts/build-plugins built.
fn built_sha(rel: &str) -> String {
    metaclaw_core::digest::sha256_hex(std::fs::read(built_plugin(rel)).unwrap())
}

#[test]
fn granted_capabilities_work_and_only_those() {
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("note.txt"), "hello from the host").unwrap();
    // Granted to this very file (a drop-in nobody pinned: by its hash).
    let config = format!(
        "plugins:\n  grants:\n    \"hostile@sha256:{}\": [clock, \"env:PATH\", \"fs:{}\"]\n",
        built_sha("testing/hostile.wasm"),
        shared.path().display()
    );
    let home = hostile_home(&config);
    let h = home.path();
    let note = shared.path().join("note.txt");
    let r = rationale(
        &call(
            h,
            "hostile",
            &finished_turn("read-file", Some(note.to_str().unwrap()), ""),
        )
        .unwrap(),
    );
    assert_eq!(r, "Ok(19)");
    // Only the granted folder.
    let r = rationale(&call(h, "hostile", &finished_turn("read-file", None, "")).unwrap());
    assert!(r.starts_with("Err("), "{r}");
    let r = rationale(&call(h, "hostile", &finished_turn("read-env", None, "")).unwrap());
    assert!(r.starts_with("vars=1 HOME=None"), "only PATH: {r}");
    let r = rationale(&call(h, "hostile", &finished_turn("host-clock", None, "")).unwrap());
    let now_ms: u64 = r.parse().unwrap();
    assert!(now_ms > 1_700_000_000_000, "{r}");
    let r = rationale(&call(h, "hostile", &finished_turn("wasi-clock", None, "")).unwrap());
    assert!(r.parse::<u64>().unwrap() > 1_700_000_000, "{r}");
    // Not granted: the network.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let r = rationale(&call(h, "hostile", &finished_turn("open-socket", Some(&addr), "")).unwrap());
    assert!(r.starts_with("Err("), "{r}");
}

#[test]
fn runaway_plugins_are_cut_off_and_their_host_keeps_going() {
    let home = hostile_home("{}\n");
    let h = home.path();
    let started = Instant::now();
    let e = call(h, "hostile", &finished_turn("loop", None, "")).unwrap_err();
    // Cut off at its deadline; on a machine so loaded that the call ran
    // less than half of its 50 ms in four times that on the clock, cut off
    // all the same, and said to be the machine's fault, not the plugin's.
    assert!(
        e.contains("deadline of 50ms exceeded")
            || (e.contains("starved: the machine gave the call only") && e.contains("of its 50ms")),
        "{e}"
    );
    // Uncut, the loop would never end; the bound leaves a loaded machine
    // room to start the CLI and compile the scorer.
    assert!(started.elapsed() < Duration::from_secs(60));

    // Memory attacks get a long deadline, so the cap is what stops them.
    let roomy = hostile_home("plugins:\n  memory_mb: 64\n  timeouts:\n    scorer: 10s\n");
    let h = roomy.path();
    let e = call(h, "hostile", &finished_turn("bomb", None, "")).unwrap_err();
    assert!(e.contains("memory cap of 64 MiB reached"), "{e}");
    let r = rationale(&call(h, "hostile", &finished_turn("bomb-observe", None, "")).unwrap());
    let mib: u32 = r
        .trim_start_matches("refused after ")
        .trim_end_matches(" MiB")
        .parse()
        .unwrap();
    assert!((40..64).contains(&mib), "the cap is 64 MiB: {r}");

    let e = call(h, "hostile", &finished_turn("recurse", None, "")).unwrap_err();
    assert!(
        e.contains("trapped") && e.to_lowercase().contains("stack"),
        "{e}"
    );
    let e = call(h, "hostile", &finished_turn("trap", None, "")).unwrap_err();
    assert!(e.contains("trapped"), "{e}");

    // A large return value is cut to size by the host; one over
    // plugins.max_call_mb (4 MiB) is refused before the host copies it.
    let r = rationale(&call(h, "hostile", &finished_turn("huge", Some("2000000"), "")).unwrap());
    assert!(r.chars().count() <= 1001, "{}", r.len());
    let e = call(h, "hostile", &finished_turn("huge", Some("20000000"), "")).unwrap_err();
    assert!(e.contains("plugins.max_call_mb"), "{e}");
}

#[tokio::test]
async fn a_hostile_scorer_is_cut_off_disabled_and_never_stalls_the_proxy() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, WATCHING);
    drop_in(&mc, "testing/hostile.wasm", "hostile");
    drop_in(&mc, "examples/refusals.wasm", "refusals");
    let base = format!("{}/v1", mc.url());

    // Each "loop" session turn that finishes runs the looping scorer. While
    // that happens, ordinary requests keep being answered promptly.
    let mut worst = Duration::ZERO;
    for round in 0..4 {
        let session = "loop";
        post_chat(
            &base,
            &chat("echo", &format!("round {round}"), false),
            &[("x-session-id", session)],
        )
        .await;
        for i in 0..10 {
            // One-turn sessions: nothing of theirs is scored meanwhile.
            let bystander = format!("bystander-{round}-{i}");
            let t = Instant::now();
            let r = post_chat(
                &base,
                &chat("echo", "still there?", false),
                &[("x-session-id", &bystander)],
            )
            .await;
            assert_eq!(r.status(), 200);
            worst = worst.max(t.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(
        worst < Duration::from_millis(1000),
        "a bystander waited {worst:?}"
    );
    // After three deadline failures in a row it is disabled; the others run.
    let list = poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        v["plugins"].as_array().unwrap().iter().any(|p| {
            p["name"] == "hostile" && p["status"].as_str().unwrap().starts_with("disabled")
        })
    });
    let hostile = listed_plugin(&list, "hostile");
    assert!(
        hostile["status"].as_str().unwrap().contains("deadline"),
        "{hostile}"
    );
    assert_eq!(hostile["failures"], 3);
    let refusals = listed_plugin(&list, "refusals");
    assert_eq!(refusals["status"], "ok");
    assert!(refusals["calls"].as_u64().unwrap() >= 3);
}

/// A plugin call made for a turn logs inside that turn's span: its log
/// line names the turn's id (the plugin runs on the plugin runtime, another
/// thread pool than the turn's).
#[tokio::test]
async fn a_plugin_calls_log_line_carries_its_turns_id() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        &format!("{WATCHING}  retriever: [hostile-retriever]\n"),
    );
    drop_in(&mc, "testing/hostile-retriever.wasm", "hostile-retriever");
    // A skill to retrieve (an empty library asks no retriever).
    let skill = mc.home.path().join("skills/traced");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: traced\ndescription: A skill to retrieve.\n---\nBe traced.\n",
    )
    .unwrap();
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 1) && retriever_ready(v, "hostile-retriever")
    });
    let base = format!("{}/v1", mc.url());
    // Every second retrieve() of an instance traps: the pool logs the
    // failed call. Turns go on until one did (each instance traps on its
    // second call, so a handful at most).
    let mut ids = Vec::new();
    let failed = |log: &str| {
        log.lines()
            .find(|l| l.contains("plugin call failed"))
            .map(str::to_string)
    };
    for i in 0..20 {
        let r = post_chat(
            &base,
            &chat("echo", "hostile:trap-every-second please", false),
            &[("x-session-id", &format!("traced-{i}"))],
        )
        .await;
        assert_eq!(r.status(), 200);
        ids.push(
            r.headers()["x-metaclaw-turn-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
        if failed(&mc.log()).is_some() {
            break;
        }
    }
    let log = mc.log();
    let Some(line) = failed(&log) else {
        panic!("no plugin call failed in 20 turns; the log:\n{log}");
    };
    assert!(
        ids.iter()
            .any(|id| line.contains(&format!("turn{{id={id}"))),
        "the failed call's line names none of the turns {ids:?}: {line}"
    );
}

#[test]
fn inspect_add_and_remove() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let out = cli_in(
        h,
        &[
            "plugins",
            "inspect",
            built_plugin("examples/refusals.wasm").to_str().unwrap(),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["name"], "refusals");
    assert_eq!(info["world"], "metaclaw:plugin/scorer");
    // Built from wit/ by scripts/build-plugins: this host's release.
    let release = metaclaw_core::plugins::PACKAGE_VERSION;
    assert_eq!(info["package"], format!("metaclaw:plugin@{release}"));
    assert!(
        info["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| *i == format!("metaclaw:plugin/clock@{release}"))
    );

    // Not a plugin at all.
    let junk = h.join("junk.wasm");
    std::fs::write(&junk, b"\0asm not really").unwrap();
    let out = cli_in(h, &["plugins", "inspect", junk.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid component"));

    let out = cli_in(
        h,
        &[
            "plugins",
            "add",
            built_plugin("examples/refusals.wasm").to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(h.join("plugins/refusals-0.1.0.wasm").is_file());
    // A different build of the same name and version needs --force.
    let other = h.join("other.wasm");
    rebuilt_copy(&built_plugin("examples/refusals.wasm"), &other);
    let out = cli_in(h, &["plugins", "add", other.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    let list: Value =
        serde_json::from_slice(&cli_in(h, &["plugins", "list", "--json"]).stdout).unwrap();
    assert!(
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "refusals" && p["source"] == "user")
    );

    let out = cli_in(h, &["plugins", "remove", "refusals@0.1.0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!h.join("plugins/refusals-0.1.0.wasm").exists());
    let out = cli_in(h, &["plugins", "remove", "refusals"]);
    assert!(!out.status.success());
    let out = cli_in(h, &["plugins", "remove", "tool-error"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("first-party"));
    assert!(
        built_plugin("builtin/tool-error.wasm").is_file(),
        "a first-party plugin is never deleted"
    );
}

#[test]
fn the_first_party_tool_error_scorer_flags_failed_tool_calls() {
    let home = tempfile::tempdir().unwrap();
    let turn = json!({
        "session_id": "s", "turn_id": "t", "status": "ok", "next_user_message": null,
        "request": [{"role": "user", "content": "run it", "tool_call_id": null, "tool_calls": []}],
        "response": {"role": "assistant", "content": "", "tool_call_id": null,
                     "tool_calls": [{"id": "c1", "name": "exec", "arguments": "{\"cmd\":\"pyhton x.py\"}"}]},
        "tool_results": [{"role": "tool", "content": "bash: pyhton: command not found", "tool_call_id": "c1", "tool_calls": []}],
    });
    let r = call(home.path(), "tool-error", &turn).unwrap();
    assert_eq!(r["label"], "tool-error");
    assert!(r["value"].as_f64().unwrap() <= -0.5);
    assert!(rationale(&r).contains("exec") && rationale(&r).contains("command not found"));
    let mut ok = turn.clone();
    ok["tool_results"][0]["content"] = json!("hello world");
    assert_eq!(call(home.path(), "tool-error", &ok).unwrap(), Value::Null);
}

#[tokio::test]
async fn every_attack_runs_inside_the_daemon_while_the_proxy_keeps_serving() {
    let up = dummy();
    // Keep the attacker enabled through every attack.
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nplugins:\n  watch_interval: 200ms\n  max_failures: 100\n",
    );
    drop_in(&mc, "testing/hostile.wasm", "hostile");
    let base = format!("{}/v1", mc.url());
    let attacks = [
        "loop",
        "bomb",
        "recurse",
        "trap",
        "huge",
        "read-file",
        "open-socket",
        "read-env",
        "write-file",
    ];
    let mut worst = Duration::ZERO;
    for attack in attacks {
        // Two turns: the second finishes the first, which the scorers judge.
        post_chat(
            &base,
            &chat("echo", "one", false),
            &[("x-session-id", attack)],
        )
        .await;
        post_chat(
            &base,
            &chat("echo", "two", false),
            &[("x-session-id", attack)],
        )
        .await;
        for i in 0..5 {
            let t = Instant::now();
            let r = post_chat(
                &base,
                &chat("echo", "still there?", true),
                &[("x-session-id", &format!("by-{attack}-{i}"))],
            )
            .await;
            assert_eq!(r.status(), 200);
            let events = read_sse(r, t).await;
            assert_eq!(content_of(&events), "still there?");
            worst = worst.max(t.elapsed());
        }
    }
    assert!(
        worst < Duration::from_secs(1),
        "a bystander waited {worst:?}"
    );
    // The four crashing attacks and the 8 MiB answer (over
    // plugins.max_call_mb) failed; the probes ran and reported denials.
    let list = poll_json(mc.home.path(), &["plugins", "list", "--json"], |v| {
        v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "hostile" && p["calls"].as_u64().unwrap() >= 9)
    });
    let hostile = listed_plugin(&list, "hostile");
    assert_eq!(hostile["failures"], 5, "{hostile}");
    assert_eq!(hostile["status"], "ok");
    for probe in ["read-file", "open-socket", "write-file"] {
        let r = hostile_reward(&mc, probe);
        assert!(
            r["rationale"].as_str().unwrap().starts_with("Err("),
            "{probe}: {r}"
        );
    }
    assert_eq!(
        hostile_reward(&mc, "read-env")["rationale"],
        "vars=0 HOME=None"
    );

    // And the daemon is healthy.
    let health = client()
        .get(format!("{}/healthz", mc.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}
