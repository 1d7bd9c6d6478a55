//! Agent wiring through the real binary: `start` points the agent's config at
//! the daemon, `status` shows it, `stop --restore` and `uninstall` give the
//! original bytes back. `HOME` is a temporary directory holding the agent's
//! files; `PATH` is empty, so no real agent command can run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

struct World {
    _up: Proc,
    up_url: String,
    home: tempfile::TempDir,
    user: tempfile::TempDir,
    empty_path: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        let up = dummy();
        let up_url = up.url.clone();
        Self {
            _up: up,
            up_url,
            home: tempfile::tempdir().unwrap(),
            user: tempfile::tempdir().unwrap(),
            empty_path: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self, extra: &str) {
        std::fs::write(
            self.home.path().join("config.yaml"),
            format!(
                "llm:\n  api_base: {}\n  model_id: echo\nproxy:\n  port: 0\n{extra}",
                self.up_url
            ),
        )
        .unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("METACLAW_HOME", self.home.path())
            .env("HOME", self.user.path())
            .env("PATH", self.empty_path.path())
            .env("METACLAW_NO_BUILTIN_SKILLS", "1");
        for var in [
            "METACLAW_LLM_API_KEY",
            "METACLAW_PROXY_API_KEY",
            "METACLAW_NO_WIRE",
            "OPENCLAW_CONFIG_PATH",
            "OPENCLAW_STATE_DIR",
            "HERMES_HOME",
            "COPAW_SECRET_DIR",
            "COPAW_WORKING_DIR",
            "XDG_CONFIG_HOME",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn file(&self, rel: &str) -> PathBuf {
        self.user.path().join(rel)
    }

    fn put(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.file(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `start`, which must succeed; returns its output and the daemon's URL.
    fn start(&self, args: &[&str]) -> (String, String) {
        let mut all = vec!["start"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let printed = text(&out);
        assert!(out.status.success(), "{printed}");
        (printed.clone(), url_in(&printed))
    }

    fn status_json(&self) -> Value {
        let out = self.run(&["status", "--json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.run(&["stop", "--timeout", "5"]);
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn url_in(printed: &str) -> String {
    printed
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap()
        .trim_end_matches(['/', ','])
        .to_string()
}

const OPENCLAW: &str = r#"// OpenClaw, hand-edited
{
  agents: {
    defaults: {
      model: { primary: "anthropic/claude-sonnet-4-6", fallbacks: ["openai/gpt-4o"] },
      sandbox: { mode: "all", scope: "agent" },
    },
  },
  tools: { profile: "coding", },
  gateway: { mode: "local" },
}
"#;

#[tokio::test]
async fn start_wires_openclaw_status_shows_it_and_stop_restore_gives_back_the_bytes() {
    let w = World::new();
    w.config("");
    let file = w.put(".openclaw/openclaw.json", OPENCLAW);

    let (printed, url) = w.start(&[]);
    assert!(
        printed.contains("wired openclaw: ~/.openclaw/openclaw.json (backup "),
        "{printed}"
    );
    let wired: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let provider = &wired["models"]["providers"]["metaclaw"];
    assert_eq!(provider["baseUrl"], format!("{url}/v1"));
    assert_eq!(provider["apiKey"], "metaclaw-local");
    assert_eq!(
        provider["models"][0]["compat"]["supportsPromptCacheKey"],
        true
    );
    assert_eq!(
        wired["agents"]["defaults"]["model"]["primary"],
        "metaclaw/echo"
    );
    assert_eq!(wired["agents"]["defaults"]["sandbox"]["mode"], "all");
    assert_eq!(wired["tools"]["profile"], "coding");

    // What the agent would now send reaches the proxy and comes back.
    let response = post_chat(
        provider["baseUrl"].as_str().unwrap(),
        &chat("echo", "through the wired config", false),
        &[("authorization", "Bearer metaclaw-local")],
    )
    .await;
    assert_eq!(response.status(), 200);

    let status = w.status_json();
    let agent = &status["wiring"]["agents"][0];
    assert_eq!(agent["claw"], "openclaw", "{status}");
    assert_eq!(agent["base_url"], url.as_str());
    assert_eq!(agent["files"][0]["path"], file.to_str().unwrap());
    let backup = agent["files"][0]["backup"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(backup).unwrap(), OPENCLAW);
    let human = text(&w.run(&["status"]));
    assert!(
        human.contains("wiring:    openclaw") && human.contains("~/.openclaw/openclaw.json"),
        "{human}"
    );

    let out = w.run(&["stop", "--restore"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("restored openclaw: ~/.openclaw/openclaw.json"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
    let out = w.run(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(status["wiring"].is_null(), "{status}");
}

#[test]
fn no_wire_and_configure_openclaw_false_leave_the_file_alone_and_plain_stop_keeps_wiring() {
    let w = World::new();
    w.config("");
    let file = w.put(".openclaw/openclaw.json", OPENCLAW);

    w.start(&["--no-wire"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
    assert!(w.status_json()["wiring"].is_null());
    let out = w.run(&["stop"]);
    assert!(!text(&out).contains("still wired"), "{}", text(&out));

    w.config("configure_openclaw: false\n");
    w.start(&[]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
    assert!(w.run(&["stop"]).status.success());

    // Wired, then a plain stop: the agent stays pointed at metaclaw, and says so.
    w.config("");
    w.start(&[]);
    let out = w.run(&["stop"]);
    assert!(
        text(&out).contains("agent still wired; `metaclaw stop --restore` puts its config back"),
        "{}",
        text(&out)
    );
    assert_ne!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
    // --restore works with the daemon already stopped.
    let out = w.run(&["stop", "--restore"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
}

#[test]
fn every_file_based_agent_is_wired_and_restored_through_the_cli() {
    struct Case {
        claw: &'static str,
        rel: &'static str,
        original: &'static str,
        /// Lines the wired file must contain, `{url}` being the daemon's URL.
        expect: &'static [&'static str],
    }
    let cases = [
        Case {
            claw: "hermes",
            rel: ".hermes/config.yaml",
            original: "# Hermes\nmodel:\n  default: anthropic/claude-opus-4.6\n  provider: anthropic\nterminal:\n  backend: local\n",
            expect: &[
                "provider: custom",
                "base_url: {url}/v1",
                "default: echo",
                "backend: local",
            ],
        },
        Case {
            claw: "picoclaw",
            rel: ".picoclaw/config.json",
            original: "{\n  \"agents\": {\"defaults\": {\"model_name\": \"gpt4\"}},\n  \"model_list\": [{\"model_name\": \"gpt4\", \"model\": \"openai/gpt-5.2\"}]\n}\n",
            expect: &[
                "\"api_base\": \"{url}/v1\"",
                "\"model\": \"openai/echo\"",
                "\"model_name\": \"gpt4\"",
            ],
        },
        Case {
            claw: "zeroclaw",
            rel: ".zeroclaw/config.toml",
            original: "# ZeroClaw\ndefault_provider = \"openrouter\"  # mine\n\n[gateway]\nport = 3000\n",
            expect: &[
                "default_provider = \"custom:{url}/v1\"  # mine",
                "default_model = \"echo\"",
                "[gateway]",
            ],
        },
        Case {
            claw: "ironclaw",
            rel: ".ironclaw/.env",
            original: "# IronClaw\nLLM_BACKEND=nearai\nDATABASE_URL=postgres://x\n",
            expect: &[
                "LLM_BACKEND=openai_compatible",
                "LLM_BASE_URL={url}/v1",
                "LLM_MODEL=echo",
                "DATABASE_URL=postgres://x",
                "# IronClaw",
            ],
        },
        Case {
            claw: "nanoclaw",
            rel: "nanoclaw/.env",
            original: "# NanoClaw\nASSISTANT_NAME=Andy\n",
            expect: &[
                "ANTHROPIC_BASE_URL={url}\n",
                "ANTHROPIC_API_KEY=metaclaw-local",
                "ASSISTANT_NAME=Andy",
            ],
        },
        Case {
            claw: "copaw",
            rel: ".copaw.secret/providers/active_model.json",
            original: "{\"provider_id\": \"openai\", \"model\": \"gpt-4o\"}",
            expect: &["\"provider_id\": \"metaclaw\"", "\"model\": \"echo\""],
        },
    ];
    let w = World::new();
    for case in &cases {
        w.config(&format!("claw_type: {}\n", case.claw));
        let file = w.put(case.rel, case.original);
        let (printed, url) = w.start(&[]);
        assert!(
            printed.contains(&format!("wired {}: ", case.claw)),
            "{}: {printed}",
            case.claw
        );
        let wired = std::fs::read_to_string(&file).unwrap();
        for e in case.expect {
            let e = e.replace("{url}", &url);
            assert!(wired.contains(&e), "{}: {e:?} not in\n{wired}", case.claw);
        }
        let status = w.status_json();
        assert_eq!(status["wiring"]["agents"][0]["claw"], case.claw, "{status}");
        let out = w.run(&["stop", "--restore"]);
        assert!(out.status.success(), "{}: {}", case.claw, text(&out));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            case.original,
            "{}: {}",
            case.claw,
            text(&out)
        );
        assert!(w.status_json()["wiring"].is_null());
        std::fs::remove_file(&file).unwrap();
    }
    // CoPaw's own provider file, created by metaclaw, is gone again.
    assert!(!w.file(".copaw.secret/providers/custom").exists());
}

#[test]
fn no_model_skips_wiring_and_a_broken_file_fails_start_but_keeps_serving() {
    let w = World::new();
    std::fs::write(
        w.home.path().join("config.yaml"),
        format!("llm:\n  api_base: {}\nproxy:\n  port: 0\n", w.up_url),
    )
    .unwrap();
    let file = w.put(".openclaw/openclaw.json", OPENCLAW);
    let (printed, _) = w.start(&[]);
    assert!(printed.contains("set llm.model_id"), "{printed}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
    assert!(w.run(&["stop"]).status.success());

    w.config("");
    let broken = "{ agents: { defaults: ";
    std::fs::write(&file, broken).unwrap();
    let out = w.run(&["start"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("JSON5") && text(&out).contains("keeps running"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), broken);
    let status = w.status_json();
    assert_eq!(status["running"], true, "{status}");
    assert!(status["wiring"].is_null());
}

#[test]
fn uninstall_restores_and_purge_needs_yes() {
    let w = World::new();
    w.config("");
    let file = w.put(".openclaw/openclaw.json", OPENCLAW);
    w.start(&[]);
    assert_ne!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);

    let out = w.run(&["uninstall"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("stopped") && text(&out).contains("restored openclaw"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
    assert!(w.home.path().join("config.yaml").exists());
    assert!(!w.home.path().join("claws").exists());

    let out = w.run(&["uninstall", "--purge"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("--yes"), "{}", text(&out));
    assert!(w.home.path().exists());

    let out = w.run(&["uninstall", "--purge", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!w.home.path().exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
}

#[test]
fn foreground_wires_once_healthy() {
    let w = World::new();
    w.config("");
    let file = w.put(".openclaw/openclaw.json", OPENCLAW);
    let mut child = w
        .command(&["start", "--foreground", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut url = None;
    let mut wired = None;
    while wired.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the foreground daemon never reported wiring");
        if let Some(u) = line.strip_prefix("metaclaw listening on ") {
            url = Some(u.trim().to_string());
        }
        if line.starts_with("wired openclaw: ") {
            wired = Some(line);
        }
    }
    let url = url.expect("the listening line comes first");
    let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        v["models"]["providers"]["metaclaw"]["baseUrl"],
        format!("{url}/v1")
    );
    let _ = child.kill();
    let _ = child.wait();
    let out = w.run(&["stop", "--restore"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), OPENCLAW);
}
