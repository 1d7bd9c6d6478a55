//! The command line, end to end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write_config(home: &std::path::Path, yaml: &str) {
    std::fs::write(home.join("config.yaml"), yaml).unwrap();
}

/// A fresh home whose config points at `upstream` and listens on any port.
fn home_for(upstream: &Proc) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    write_config(
        home.path(),
        &format!("llm:\n  api_base: {}\nproxy:\n  port: 0\n", upstream.url),
    );
    home
}

#[tokio::test]
async fn start_waits_until_healthy_then_status_second_start_and_stop_behave() {
    let up = dummy();
    let home = home_for(&up);

    let out = cli_in(home.path(), &["start"]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = text(&out);
    let url = printed
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap()
        .to_string();
    // `start` returned: the daemon answers right away.
    let health = client().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    post_chat(
        &format!("{url}/v1"),
        &chat("echo", "count me", false),
        &[("x-session-id", "cli-1")],
    )
    .await;

    let out = cli_in(home.path(), &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["running"], true);
    assert_eq!(status["healthy"], true);
    assert_eq!(status["mode"], "skills_only");
    assert_eq!(status["url"], url.as_str());
    assert!(status["pid"].as_u64().unwrap() > 0);
    assert!(status["uptime_seconds"].as_f64().unwrap() >= 0.0);
    let pid = status["pid"].as_u64().unwrap();
    // The turn is committed shortly after its answer.
    let mut counted = false;
    for _ in 0..100 {
        let out = cli_in(home.path(), &["status", "--json"]);
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        if s["turns"] == 1 && s["sessions"] == 1 {
            counted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(counted, "status never counted the turn");
    let human = text(&cli_in(home.path(), &["status"]));
    assert!(
        human.contains("metaclaw is running") && human.contains(&url),
        "{human}"
    );

    let out = cli_in(home.path(), &["start"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("already running"), "{}", text(&out));

    let out = cli_in(home.path(), &["stop"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("stopped"));
    assert!(!home.path().join("metaclaw.pid").exists());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid),
        "pid {pid} still alive"
    );

    let out = cli_in(home.path(), &["status"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out).contains("not running"));
    assert!(text(&out).contains("1 sessions, 1 turns"), "{}", text(&out));
    let out = cli_in(home.path(), &["stop"]);
    assert!(out.status.success());
    assert!(text(&out).contains("not running"));
}

fn is_zombie(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.contains(") Z "))
        .unwrap_or(true)
}

#[tokio::test]
async fn a_stale_pid_file_is_detected_and_cleaned() {
    let up = dummy();
    let home = home_for(&up);
    // A pid file left by a process that is gone.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead_pid = gone.id();
    gone.wait().unwrap();
    std::fs::write(
        home.path().join("metaclaw.pid"),
        format!(r#"{{"pid":{dead_pid},"host":"127.0.0.1","port":1,"url":"http://127.0.0.1:1","mode":"skills_only","started_at_ms":0,"version":"0"}}"#),
    )
    .unwrap();
    let out = cli_in(home.path(), &["status"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let out = cli_in(home.path(), &["start"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("stale pid file"), "{}", text(&out));
    let out = cli_in(home.path(), &["status", "--json"]);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["running"], true);
    assert_ne!(status["pid"].as_u64().unwrap(), u64::from(dead_pid));
    assert!(cli_in(home.path(), &["stop"]).status.success());
}

/// `start --demo` shows the loop (built-in skills injected, a correction,
/// the judge's verdicts, a skill evolved through guard, redact and dedup,
/// and a similar question getting it) on data of its own: the user's
/// store and library, default or configured, are never written.
#[test]
fn the_demo_shows_the_learning_loop_on_its_own_data_and_stops() {
    let home = tempfile::tempdir().unwrap();
    warm_plugin_cache(home.path());
    let mine = home.path().join("mine");
    // The user's own paths, and learning off: the demo uses neither.
    write_config(
        home.path(),
        &format!(
            "skills:\n  dir: {0}/skills\nstore:\n  path: {0}/my.db\nlearning:\n  enabled: false\n",
            mine.display()
        ),
    );
    let untouched = |when: &str| {
        for path in [
            mine.clone(),
            home.path().join("skills"),
            home.path().join("metaclaw.db"),
        ] {
            assert!(!path.exists(), "{when}: {} was written", path.display());
        }
    };

    let out = cli_in(home.path(), &["start", "--demo", "--port", "0"]);
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    let step = |n: &str| -> String {
        let mut lines = printed.lines().skip_while(|l| !l.starts_with(n));
        let first = lines
            .next()
            .unwrap_or_else(|| panic!("no step {n}: {printed}"));
        let rest: Vec<&str> = lines.take_while(|l| l.starts_with("   ")).collect();
        format!("{first}\n{}", rest.join("\n"))
    };
    assert!(printed.contains("dummies"), "{printed}");
    let demo = home.path().join("demo");
    assert!(printed.contains(&demo.display().to_string()), "{printed}");
    // 1: built-in skills injected, with their scores.
    let first = step("1. ");
    assert!(
        first.contains("built-in skills injected: git-commit-messages (0."),
        "{first}"
    );
    assert!(step("2. ").contains("wrong"), "{printed}");
    let session = printed
        .split(|c: char| c.is_whitespace() || c == '/')
        .find(|w| w.starts_with("demo-"))
        .unwrap()
        .to_string();
    assert!(
        step("3. ").contains(&format!("/v1/sessions/{session}/end")),
        "{printed}"
    );
    // 4: the judge's verdicts, the chain, the skill evolved and the
    // near-copy dedup dropped.
    let learned = step("4. ");
    for line in [
        "judge: turn 1 -1 (the user corrected the answer); turn 2 0",
        "checked by guard → redact → dedup",
        "✓ lesson-write-commit-message created (v1.0.0)",
        "rejected: dedup: near-duplicate of",
    ] {
        assert!(learned.contains(line), "{line:?} not in:\n{learned}");
    }
    // 5: the similar question in a new session gets the evolved skill first.
    let again = step("5. ");
    assert!(
        again.contains("skills injected: lesson-write-commit-message (0.")
            && again.contains("evolved in step 4"),
        "{again}"
    );
    assert!(printed.contains("Try it yourself"), "{printed}");

    assert!(demo.join("skills/git-commit-messages/SKILL.md").exists());
    assert!(
        demo.join("skills/lesson-write-commit-message/SKILL.md")
            .exists()
    );
    untouched("while the demo runs");
    // While it runs, the commands read the demo's data.
    let shown = text(&cli_in(home.path(), &["sessions", "show", &session]));
    assert!(
        shown.contains("lesson-write-commit-message created") && shown.contains("judge:     -1"),
        "{shown}"
    );
    let skill = cli_in(
        home.path(),
        &["skills", "show", "lesson-write-commit-message"],
    );
    assert!(skill.status.success(), "{}", text(&skill));

    let out = cli_in(home.path(), &["stop"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("stopped"), "{}", text(&out));
    assert_eq!(cli_in(home.path(), &["status"]).status.code(), Some(3));
    assert!(!home.path().join("metaclaw.pid").exists());
    untouched("after stop");

    // Each demo starts afresh: the same skill is evolved again.
    let out = cli_in(home.path(), &["start", "--demo", "--port", "0"]);
    assert!(
        text(&out).contains("✓ lesson-write-commit-message created"),
        "{}",
        text(&out)
    );
    assert!(cli_in(home.path(), &["stop"]).status.success());
    untouched("after a second demo");
}

#[test]
fn a_config_that_cannot_serve_is_refused_before_anything_starts() {
    let home = tempfile::tempdir().unwrap();
    // Nothing configured.
    let out = cli_in(home.path(), &["start"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("no upstream configured") && text(&out).contains("--demo"),
        "{}",
        text(&out)
    );
    // A wrong type names the key path and the expected type.
    write_config(home.path(), "proxy:\n  port: lots\n");
    let out = cli_in(home.path(), &["start"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("`proxy.port`") && text(&out).contains("u16"),
        "{}",
        text(&out)
    );
    // Exposed to the network without a token.
    write_config(
        home.path(),
        "llm:\n  api_base: http://127.0.0.1:9/v1\nproxy:\n  host: 0.0.0.0\n",
    );
    let out = cli_in(home.path(), &["start"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("proxy.api_key"), "{}", text(&out));
    assert!(!home.path().join("metaclaw.pid").exists());
}

#[test]
fn config_show_masks_secrets_get_reads_and_set_validates() {
    let home = tempfile::tempdir().unwrap();
    write_config(
        home.path(),
        "llm:\n  provider: openai\n  api_key: sk-live-abcdefghijklmnop\n  model_id: gpt-4o\nproxy:\n  prot: 1\nmemory:\n  scope: team\n",
    );
    let out = cli_in(home.path(), &["config", "show"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(!shown.contains("sk-live-abcdefghijklmnop"), "{shown}");
    assert!(
        shown.contains("api_key: '********'")
            || shown.contains("api_key: \"********\"")
            || shown.contains("********")
    );
    assert!(shown.contains("https://api.openai.com/v1") || shown.contains("provider: openai"));
    // The unknown key is a warning naming it, with a suggestion.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`proxy.prot`") && err.contains("proxy.port"),
        "{err}"
    );
    // A key accepted for compatibility that does nothing says so.
    assert!(
        err.contains("`memory.scope` is set in") && err.contains("not implemented in this version"),
        "{err}"
    );

    let get = |key: &str| {
        String::from_utf8_lossy(&cli_in(home.path(), &["config", "get", key]).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(get("llm.model_id"), "gpt-4o");
    assert_eq!(get("proxy.port"), "30000");
    assert_eq!(get("llm.api_key"), "********");

    let out = cli_in(home.path(), &["config", "set", "proxy.port", "abc"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("proxy.port"), "{}", text(&out));
    let out = cli_in(
        home.path(),
        &["config", "set", "sessions.idle_timeout", "10m"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = cli_in(home.path(), &["config", "set", "proxy.port", "31000"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(get("proxy.port"), "31000");
    assert_eq!(get("sessions.idle_timeout"), "10m");
    let out = cli_in(home.path(), &["config", "set", "llm.model_id", "1.5"]);
    assert!(out.status.success());
    assert_eq!(get("llm.model_id"), "1.5");
    let out = cli_in(home.path(), &["config", "set", "memory.scope", "team"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("note: memory.scope is not implemented in this version"),
        "{}",
        text(&out)
    );
    let out = cli_in(home.path(), &["config", "set", "nope.key", "1"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("unknown config key `nope.key`"));
    // Keys it does not know are kept.
    let file = std::fs::read_to_string(home.path().join("config.yaml")).unwrap();
    assert!(
        file.contains("scope: team") && file.contains("prot: 1"),
        "{file}"
    );
    let mode = std::fs::metadata(home.path().join("config.yaml")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
}

#[test]
fn setup_from_flags_writes_what_it_was_given_and_keeps_the_rest() {
    let home = tempfile::tempdir().unwrap();
    write_config(home.path(), "memory:\n  scope: team\nskills:\n  top_k: 9\n");
    let out = cli_in(
        home.path(),
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key-env",
            "MY_OPENAI_KEY",
            "--model",
            "gpt-4o-mini",
            "--claw",
            "none",
            "--port",
            "30123",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("https://api.openai.com/v1"),
        "{}",
        text(&out)
    );
    let get = |key: &str| {
        String::from_utf8_lossy(&cli_in(home.path(), &["config", "get", key]).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(get("llm.provider"), "openai");
    assert_eq!(get("llm.api_key_env"), "MY_OPENAI_KEY");
    assert_eq!(get("llm.model_id"), "gpt-4o-mini");
    assert_eq!(get("claw_type"), "none");
    assert_eq!(get("proxy.port"), "30123");
    assert_eq!(get("skills.top_k"), "9");
    assert_eq!(get("memory.scope"), "team");

    let out = cli_in(home.path(), &["setup", "--provider", "custom"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("--api-base"), "{}", text(&out));
    let out = cli_in(home.path(), &["setup", "--provider", "acme"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("is not one of"), "{}", text(&out));
    let out = cli_in(
        home.path(),
        &[
            "setup",
            "--provider",
            "custom",
            "--api-base",
            "http://127.0.0.1:8000/v1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(get("llm.api_base"), "http://127.0.0.1:8000/v1");
    assert_eq!(get("llm.model_id"), "gpt-4o-mini");
}

#[tokio::test]
async fn secrets_can_come_from_the_environment() {
    let up = dummy();
    let mc = Metaclaw::start_with_env(
        &up.url,
        "llm:\n  api_base: {upstream}\n",
        &[("METACLAW_LLM_API_KEY", "sk-env-key-0123456789abcdef")],
    );
    let r = post_chat(&format!("{}/v1", mc.url()), &serde_json::json!({"model": "echo-request", "messages": [{"role": "user", "content": "x"}]}), &[]).await;
    let v: Value = r.json().await.unwrap();
    let seen: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        seen["headers"]["authorization"],
        "Bearer sk-env-key-0123456789abcdef"
    );
    let out = Command::new(BIN)
        .args(["config", "show"])
        .env("METACLAW_HOME", mc.home.path())
        .env("METACLAW_LLM_API_KEY", "sk-env-key-0123456789abcdef")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("$METACLAW_LLM_API_KEY") && !shown.contains("sk-env-key"),
        "{shown}"
    );
}

#[tokio::test]
async fn stopping_drains_every_answered_turn_into_the_store() {
    let up = dummy();
    let home = home_for(&up);
    let out = cli_in(home.path(), &["start"]);
    assert!(out.status.success(), "{}", text(&out));
    let status: Value =
        serde_json::from_slice(&cli_in(home.path(), &["status", "--json"]).stdout).unwrap();
    let base = format!("{}/v1", status["url"].as_str().unwrap());
    let mut tasks = Vec::new();
    for i in 0..40 {
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let r = post_chat(
                &base,
                &chat("echo", &format!("turn {i}"), i % 2 == 0),
                &[("x-session-id", "drain")],
            )
            .await;
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Stop right away: whatever was answered must be in the store.
    assert!(cli_in(home.path(), &["stop"]).status.success());
    let out = cli_in(home.path(), &["sessions", "show", "drain", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["turns"].as_array().unwrap().len(), 40);
    let out = cli_in(home.path(), &["sessions", "list"]);
    assert!(text(&out).contains("drain"));
}

#[test]
fn version_and_sessions_on_an_empty_home() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["version"]);
    assert!(text(&out).starts_with("metaclaw "));
    let out = cli_in(home.path(), &["sessions", "list", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    let out = cli_in(home.path(), &["sessions", "show", "x"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no session"));
}

#[test]
fn learn_status_counts_every_job_in_the_store_not_only_the_page_it_lists() {
    use metaclaw_core::store::jobs;
    let home = tempfile::tempdir().unwrap();
    let mut conn = metaclaw_core::store::Db::at(home.path().join("metaclaw.db"))
        .side_writer()
        .unwrap();
    for (i, id) in ["s1", "s2", "s3", "s4"].iter().enumerate() {
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES (?1, ?1, 'header', 0, 0)",
            [id],
        )
        .unwrap();
        jobs::enqueue(&conn, id, i as i64).unwrap();
    }
    // s1 done, s2 failed for good, s3 running, s4 queued (the newest).
    let first = jobs::claim(&mut conn, 10, None, "test").unwrap().unwrap();
    jobs::finish(&conn, &first, Ok(()), 11).unwrap();
    for _ in 0..jobs::MAX_ATTEMPTS {
        let s2 = jobs::claim(&mut conn, i64::MAX / 2, Some("s2"), "test")
            .unwrap()
            .unwrap();
        jobs::finish(&conn, &s2, Err("judge: 429".into()), 12).unwrap();
    }
    jobs::claim(&mut conn, 10, Some("s3"), "test")
        .unwrap()
        .unwrap();
    drop(conn);

    let out = cli_in(home.path(), &["learn", "status", "--limit", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("1 queued, 1 running, 1 failed, 1 done (of 4; the newest 1 below"),
        "{said}"
    );
    assert!(said.contains("s4") && !said.contains("s1 "), "{said}");
    // All of them listed: no "of".
    let said = text(&cli_in(home.path(), &["learn", "status"]));
    assert!(
        said.contains("1 queued, 1 running, 1 failed, 1 done\n"),
        "{said}"
    );
    let listed: Value = serde_json::from_slice(
        &cli_in(home.path(), &["learn", "status", "--json", "--limit", "2"]).stdout,
    )
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
}

#[test]
fn a_closed_stdout_ends_the_cli_quietly_instead_of_panicking() {
    let home = tempfile::tempdir().unwrap();
    // More than a pipe's buffer: the write fails however late the reader
    // goes away.
    write_config(
        home.path(),
        &format!("llm:\n  model_id: {}\n", "m".repeat(256 << 10)),
    );
    let mut child = Command::new(BIN)
        .args(["config", "show"])
        .env("METACLAW_HOME", home.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the reading end before the command writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141));
}

#[tokio::test]
async fn recorded_data_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let up = dummy();
    let mc = Metaclaw::start(&up.url, "llm:\n  api_base: {upstream}\n");
    post_chat(
        &format!("{}/v1", mc.url()),
        &chat("echo", "private", false),
        &[("x-session-id", "p")],
    )
    .await;
    mc.turns("p", 1);
    for file in [
        "metaclaw.db",
        "metaclaw.db-wal",
        "admin.token",
        "metaclaw.pid",
    ] {
        let mode = std::fs::metadata(mc.home.path().join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{file} is {mode:o}");
    }
}

/// The daemon `start` runs rotates its own log past `log.max_mb`, while it
/// runs: whole lines, `log.keep` old files, and its stdout and stderr follow
/// the new file.
#[test]
fn the_running_daemon_rotates_its_log() {
    let up = dummy();
    let home = tempfile::tempdir().unwrap();
    write_config(
        home.path(),
        &format!(
            "llm:\n  api_base: {}\nproxy:\n  port: 0\nlog:\n  max_mb: 1\n  keep: 2\nunknown_key: 1\nmemory:\n  scope: team\n",
            up.url
        ),
    );
    let logs = home.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join("metaclaw.log");
    let numbered = |n: u32| logs.join(format!("metaclaw.log.{n}"));
    for n in 1..=3 {
        std::fs::write(numbered(n), format!("old-{n}\n")).unwrap();
    }
    // Just under 1 MiB: the daemon's first words (the config warning it
    // prints on stderr) take the log past it, so its first log line starts
    // a new file.
    let filler: String = (0..10_485).map(|i| format!("filler {i:0>92}\n")).collect();
    assert!(filler.len() < 1 << 20);
    std::fs::write(&log, &filler).unwrap();

    let out = cli_in(home.path(), &["start"]);
    assert!(out.status.success(), "{}", text(&out));
    let stop = cli_in(home.path(), &["stop"]);
    assert!(stop.status.success(), "{}", text(&stop));

    let old = std::fs::read_to_string(numbered(1)).unwrap();
    let new = std::fs::read_to_string(&log).unwrap();
    assert!(
        old.starts_with(&filler),
        "metaclaw.log.1 is not the old log"
    );
    let after = &old[filler.len()..];
    assert!(
        after.starts_with("warning: unknown config key `unknown_key`"),
        "{after}"
    );
    // `keep: 2`: the previous .1 is now .2, and no .3 is left.
    assert_eq!(std::fs::read_to_string(numbered(2)).unwrap(), "old-1\n");
    assert!(!numbered(3).exists());
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the new log is {mode:o}");
    }
    // The daemon's log lines, and the line it prints on stdout, are in the
    // new file, up to its last one.
    assert!(
        new.lines()
            .any(|l| l.contains(" WARN ") && l.contains("unknown config key `unknown_key`")),
        "{new}"
    );
    // So is a key that does nothing in this version.
    assert!(
        new.lines().any(|l| l.contains(" WARN ")
            && l.contains("`memory.scope` is set in")
            && l.contains("not implemented in this version")),
        "{new}"
    );
    assert!(
        new.lines()
            .any(|l| l.starts_with("metaclaw listening on http://")),
        "{new}"
    );
    assert!(new.contains("stopped"), "{new}");
    // Every line whole: a filler line, the warning, a log line, or the
    // printed one.
    for text in [&old, &new] {
        assert!(text.ends_with('\n'));
        for line in text.lines() {
            assert!(
                ["filler ", "warning: ", "20", "metaclaw listening on "]
                    .iter()
                    .any(|p| line.starts_with(p)),
                "cut line: {line:?}"
            );
        }
    }
}

/// A daemon that dies during start-up: `start` shows what it logged.
#[test]
fn a_failed_start_shows_the_daemons_log() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let home = tempfile::tempdir().unwrap();
    write_config(
        home.path(),
        &format!("llm:\n  api_base: http://127.0.0.1:9/v1\nproxy:\n  port: {port}\n"),
    );
    let out = cli_in(home.path(), &["start"]);
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out);
    assert!(
        shown.contains("exited during start-up")
            && shown.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{shown}"
    );
}

#[test]
fn config_show_prints_the_url_a_preset_supplies() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(
        home.path(),
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key-env",
            "OPENAI_API_KEY",
            "--model",
            "gpt-4o",
            "--claw",
            "none",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("openai → https://api.openai.com/v1"),
        "{}",
        text(&out)
    );
    // The file leaves the URL to the preset; show says which URL that is.
    let out = cli_in(home.path(), &["config", "show"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        shown.contains("\n  api_base: https://api.openai.com/v1  # preset openai\n"),
        "{shown}"
    );
    assert!(!shown.contains("api_base: \"\""), "{shown}");
    // Still YAML, with the effective value.
    let tree: Value = serde_saphyr::from_str(&shown).unwrap();
    assert_eq!(tree["llm"]["api_base"], "https://api.openai.com/v1");
    let out = cli_in(home.path(), &["config", "get", "llm.api_base"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "https://api.openai.com/v1"
    );
}

#[tokio::test]
async fn with_learning_off_a_session_end_queues_no_job_and_everything_says_so() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nlearning:\n  enabled: false\n",
    );
    let base = format!("{}/v1", mc.url());
    post_chat(
        &base,
        &chat("echo", "hello", false),
        &[("x-session-id", "off-1")],
    )
    .await;
    mc.turns("off-1", 1);
    let ended: Value = client()
        .post(format!("{base}/sessions/off-1/end"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ended["ended"], true, "{ended}");
    assert_eq!(ended["learning"]["enabled"], false, "{ended}");
    let note = ended["learning"]["note"].as_str().unwrap();
    assert!(note.contains("learning.enabled"), "{ended}");
    mc.session_until("off-1", |v| v["session"]["status"] == "ended");

    // The end is recorded, and no job waits for a learner that never runs.
    let out = mc.cli(&["learn", "status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let jobs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jobs, serde_json::json!([]), "{}", text(&out));
    assert!(text(&out).contains("learning is off"), "{}", text(&out));
    let out = mc.cli(&["learn", "status"]);
    let said = text(&out);
    assert!(
        said.contains("learning is off (learning.enabled: false)")
            && said.contains("metaclaw config set learning.enabled true"),
        "{said}"
    );
    assert!(!said.contains("no learning jobs yet"), "{said}");

    let status: Value = serde_json::from_slice(&mc.cli(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["learning"]["enabled"], false, "{status}");
    let human = text(&mc.cli(&["status"]));
    assert!(
        human.contains("learning:  learning is off (learning.enabled: false)"),
        "{human}"
    );
}

#[test]
fn status_says_no_retriever_answers_when_none_is_loaded() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\nplugins:\n  builtin: false\n",
    );
    // Plugins load in the background: wait until the scan is done.
    let status = poll_json(mc.home.path(), &["status", "--json"], |v| {
        v["skills"]["retrieval"]["none_answers"]
            .as_str()
            .is_some_and(|why| !why.contains("still loading"))
    });
    let retrieval = &status["skills"]["retrieval"];
    assert_eq!(retrieval["mode"], "bm25", "{retrieval}");
    assert_eq!(retrieval["answering"], serde_json::json!([]), "{retrieval}");
    assert_eq!(
        retrieval["none_answers"],
        "plugins.builtin is false and no drop-in bm25 retriever is loaded",
        "{retrieval}"
    );
    let human = text(&mc.cli(&["status"]));
    assert!(
        human.contains(
            "retrieval: none answers (bm25 configured, not loaded: plugins.builtin is false and no drop-in bm25 retriever is loaded)"
        ),
        "{human}"
    );

    // With the first-party plugins, bm25 answers.
    let (_up, mc) = with_bank("llm:\n  api_base: {upstream}\n");
    let status: Value = serde_json::from_slice(&mc.cli(&["status", "--json"]).stdout).unwrap();
    let retrieval = &status["skills"]["retrieval"];
    assert!(retrieval["none_answers"].is_null(), "{retrieval}");
    assert!(
        retrieval["answering"][0]
            .as_str()
            .unwrap()
            .starts_with("bm25@"),
        "{retrieval}"
    );
    let human = text(&mc.cli(&["status"]));
    assert!(human.contains("retrieval: bm25"), "{human}");
    assert!(!human.contains("none answers"), "{human}");
}

#[test]
fn without_ca_certificates_start_says_what_is_missing_and_plain_http_still_works() {
    let no_ca = NoCaCertificates::new();
    let run = |home: &std::path::Path, args: &[&str]| cli_with_env(home, args, &no_ca.env());

    // An HTTPS upstream cannot be verified: start fails and says how to fix it.
    let home = tempfile::tempdir().unwrap();
    warm_plugin_cache(home.path());
    write_config(
        home.path(),
        "llm:\n  api_base: https://127.0.0.1:9/v1\nproxy:\n  port: 0\n",
    );
    let out = run(home.path(), &["start"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let shown = text(&out);
    for expected in [
        "cannot verify HTTPS servers such as https://127.0.0.1:9/v1",
        "no CA certificate was found in SSL_CERT_FILE=",
        "apt-get install ca-certificates",
    ] {
        assert!(shown.contains(expected), "{expected:?} not in:\n{shown}");
    }
    assert!(!home.path().join("metaclaw.pid").exists());

    // A plain-HTTP upstream needs none, nor does the CLI talking to the daemon.
    let up = dummy();
    let home = home_for(&up);
    warm_plugin_cache(home.path());
    let out = run(home.path(), &["start"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(home.path(), &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["healthy"], true, "{status}");
    let out = run(home.path(), &["stop"]);
    assert!(out.status.success(), "{}", text(&out));
}
