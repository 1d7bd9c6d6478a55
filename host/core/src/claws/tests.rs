#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::config::ClawType;

struct Setup {
    _dir: tempfile::TempDir,
    user: PathBuf,
    home: Home,
    env: Env,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user");
    fs::create_dir_all(&user).unwrap();
    let home = Home::at(dir.path().join("metaclaw"));
    home.ensure().unwrap();
    let env = Env::isolated(&user);
    Setup {
        _dir: dir,
        user,
        home,
        env,
    }
}

fn target(port: u16) -> Target {
    Target {
        base_url: format!("http://127.0.0.1:{port}"),
        api_key: "metaclaw-local".into(),
        model: "gpt-test".into(),
        context_window: 0,
    }
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Every backup file metaclaw holds.
fn backups(home: &Home) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(&home.root.join("claws").join("backups"), &mut out);
    out
}

/// Files named `<name>.metaclaw-replaced-*` beside `path`.
fn set_aside_copies(path: &Path) -> Vec<PathBuf> {
    let name = format!(
        "{}.metaclaw-replaced-",
        path.file_name().unwrap().to_string_lossy()
    );
    fs::read_dir(path.parent().unwrap())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&name))
        .collect()
}

/// Removes a dotted key from a JSON tree (for "everything else is equal").
fn without(mut v: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    if let Some(obj) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
        obj.remove(key);
    }
    v
}

const OPENCLAW_JSON5: &str = r#"// My OpenClaw config
{
  update: { checkOnStart: false },
  agents: {
    defaults: {
      model: { primary: "anthropic/claude-sonnet-4-6", fallbacks: ["openai/gpt-4o",], },
      sandbox: { mode: "all", workspaceAccess: "rw", docker: { image: "openclaw-sandbox" } },
      heartbeat: { every: "30m" },
    },
  },
  tools: { profile: "coding", deny: ["browser"], exec: { security: "allowlist" } },
  models: {
    mode: "merge",
    providers: {
      /* a provider of the user's own */
      mine: { baseUrl: 'http://10.0.0.2:8000/v1', apiKey: "sk-mine", api: "openai-completions", models: [] },
    },
  },
  gateway: { mode: "local", port: 18789 },
}
"#;

fn openclaw_file(s: &Setup) -> PathBuf {
    s.user.join(".openclaw").join("openclaw.json")
}

#[test]
fn openclaw_gets_the_provider_and_primary_model_and_nothing_else_changes() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, OPENCLAW_JSON5);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let original: Value = json5::from_str(OPENCLAW_JSON5).unwrap();

    let report = wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    assert_eq!(report.files.len(), 1);
    assert_eq!(report.files[0].action, Action::Updated);
    let wired: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();

    let provider = &wired["models"]["providers"]["metaclaw"];
    assert_eq!(
        *provider,
        json!({
            "baseUrl": "http://127.0.0.1:30123/v1",
            "apiKey": "metaclaw-local",
            "api": "openai-completions",
            "models": [{
                "id": "gpt-test",
                "name": "MetaClaw (gpt-test)",
                "reasoning": false,
                "input": ["text"],
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                "contextWindow": 128000,
                "maxTokens": 8192,
                "compat": {"supportsPromptCacheKey": true},
            }],
        })
    );
    assert_eq!(
        wired["agents"]["defaults"]["model"]["primary"],
        "metaclaw/gpt-test"
    );
    // Everything else, sandbox, tools and fallbacks included, is unchanged.
    assert_eq!(
        wired["agents"]["defaults"]["model"]["fallbacks"],
        json!(["openai/gpt-4o"])
    );
    assert_eq!(
        wired["agents"]["defaults"]["sandbox"],
        original["agents"]["defaults"]["sandbox"]
    );
    assert_eq!(wired["tools"], original["tools"]);
    assert_eq!(
        without(
            without(wired.clone(), "/models/providers/metaclaw"),
            "/agents/defaults/model/primary"
        ),
        without(original.clone(), "/agents/defaults/model/primary"),
    );
    // Key order is kept, so the file reads as before.
    let keys: Vec<&String> = wired.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["update", "agents", "tools", "models", "gateway"]);

    // The backup is the exact original, private; the wired file is private.
    let b = backups(&s.home);
    assert_eq!(b.len(), 1);
    assert_eq!(fs::read_to_string(&b[0]).unwrap(), OPENCLAW_JSON5);
    assert_eq!(report.files[0].backup.as_deref(), Some(b[0].as_path()));
    assert_eq!(mode(&b[0]), 0o600);
    assert_eq!(mode(&file), 0o600);

    // The state says what is wired.
    let st = state(&s.home).unwrap();
    assert_eq!(st.agents.len(), 1);
    assert_eq!(st.agents[0].claw, "openclaw");
    assert_eq!(st.agents[0].base_url, "http://127.0.0.1:30123");
    assert_eq!(st.agents[0].files[0].path, file);
    assert_eq!(mode(&s.home.root.join("claws").join("state.json")), 0o600);

    // Restore: the original bytes and mode, and the state is gone.
    let report = restore(&s.home, &s.env).unwrap();
    assert_eq!(report.files[0].action, Action::Restored);
    assert_eq!(fs::read_to_string(&file).unwrap(), OPENCLAW_JSON5);
    assert_eq!(mode(&file), 0o644);
    assert!(state(&s.home).is_none());
    assert!(!s.home.root.join("claws").exists());
    assert!(set_aside_copies(&file).is_empty());
}

#[test]
fn wiring_twice_changes_nothing_and_a_new_port_keeps_the_original_backup() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, OPENCLAW_JSON5);
    wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    let first = fs::read(&file).unwrap();
    let state_before = state(&s.home).unwrap();

    let again = wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    assert_eq!(again.files[0].action, Action::Unchanged);
    assert!(!again.changed());
    assert_eq!(fs::read(&file).unwrap(), first);
    assert_eq!(backups(&s.home).len(), 1);
    assert_eq!(state(&s.home).unwrap(), state_before);

    // A new port and model update the file; the backup is still the original.
    let mut moved = target(30999);
    moved.model = "other-model".into();
    moved.context_window = 200_000;
    let report = wire(&s.home, &ClawType::Openclaw, &moved, &s.env).unwrap();
    assert_eq!(report.files[0].action, Action::Updated);
    let wired: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    let provider = &wired["models"]["providers"]["metaclaw"];
    assert_eq!(provider["baseUrl"], "http://127.0.0.1:30999/v1");
    assert_eq!(provider["models"][0]["id"], "other-model");
    assert_eq!(provider["models"][0]["contextWindow"], 200_000);
    assert_eq!(
        wired["agents"]["defaults"]["model"]["primary"],
        "metaclaw/other-model"
    );
    let b = backups(&s.home);
    assert_eq!(b.len(), 1);
    assert_eq!(fs::read_to_string(&b[0]).unwrap(), OPENCLAW_JSON5);
    // Metaclaw wrote both versions: nothing is set aside.
    assert!(report.files[0].set_aside.is_none());

    restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), OPENCLAW_JSON5);
}

#[test]
fn a_file_edited_after_wiring_is_kept_beside_it_on_restore() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, OPENCLAW_JSON5);
    wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    let edited = String::from_utf8(fs::read(&file).unwrap())
        .unwrap()
        .replace("\"heartbeat\"", "\"heartbeatX\"");
    fs::write(&file, &edited).unwrap();

    let report = restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), OPENCLAW_JSON5);
    let copies = set_aside_copies(&file);
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(fs::read_to_string(&copies[0]).unwrap(), edited);
    assert_eq!(
        report.files[0].set_aside.as_deref(),
        Some(copies[0].as_path())
    );
    let lines = report.lines(&s.user).join("\n");
    assert!(lines.contains("metaclaw-replaced-"), "{lines}");
    assert!(lines.contains("~/.openclaw/openclaw.json"), "{lines}");
    assert!(state(&s.home).is_none());
}

#[test]
fn a_rewire_after_an_edit_keeps_the_edited_version_aside() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, OPENCLAW_JSON5);
    wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    let mut v: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    v["gateway"]["port"] = json!(1);
    let edited = serde_json::to_string(&v).unwrap();
    fs::write(&file, &edited).unwrap();

    let report = wire(&s.home, &ClawType::Openclaw, &target(30124), &s.env).unwrap();
    let aside = report.files[0].set_aside.clone().unwrap();
    assert_eq!(fs::read_to_string(aside).unwrap(), edited);
    // The user's change survives in the wired file too.
    let wired: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    assert_eq!(wired["gateway"]["port"], 1);
    restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), OPENCLAW_JSON5);
}

#[test]
fn openclaw_without_a_file_creates_it_and_restore_removes_it() {
    let s = setup();
    let file = openclaw_file(&s);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let report = wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    assert_eq!(report.files[0].action, Action::Created);
    assert!(backups(&s.home).is_empty());
    let wired: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        wired["agents"]["defaults"]["model"]["primary"],
        "metaclaw/gpt-test"
    );
    let report = restore(&s.home, &s.env).unwrap();
    assert_eq!(report.files[0].action, Action::Removed);
    assert!(!file.exists());
    // The directory was the user's: it stays.
    assert!(file.parent().unwrap().is_dir());
}

#[test]
fn openclaw_not_set_up_is_skipped_with_a_message() {
    let s = setup();
    let report = wire(&s.home, &ClawType::Openclaw, &target(30123), &s.env).unwrap();
    let why = report.skipped.unwrap();
    assert!(
        why.contains("not set up") && why.contains(".openclaw"),
        "{why}"
    );
    assert!(!s.user.join(".openclaw").exists());
    assert!(state(&s.home).is_none());
}

#[test]
fn openclaw_env_overrides_pick_the_file() {
    let s = setup();
    let custom = s.user.join("elsewhere").join("oc.json");
    write(&custom, "{}");
    let env = s
        .env
        .clone()
        .with_var("OPENCLAW_CONFIG_PATH", custom.to_string_lossy());
    wire(&s.home, &ClawType::Openclaw, &target(1), &env).unwrap();
    let v: Value = serde_json::from_slice(&fs::read(&custom).unwrap()).unwrap();
    assert_eq!(
        v["agents"]["defaults"]["model"]["primary"],
        "metaclaw/gpt-test"
    );
    restore(&s.home, &env).unwrap();
    assert_eq!(fs::read_to_string(&custom).unwrap(), "{}");

    let state_dir = s.user.join("state");
    fs::create_dir_all(&state_dir).unwrap();
    let env = s
        .env
        .clone()
        .with_var("OPENCLAW_STATE_DIR", state_dir.to_string_lossy());
    let report = wire(&s.home, &ClawType::Openclaw, &target(1), &env).unwrap();
    assert_eq!(report.files[0].path, state_dir.join("openclaw.json"));
    restore(&s.home, &env).unwrap();
    assert!(!state_dir.join("openclaw.json").exists());
}

#[test]
fn openclaw_short_model_form_becomes_primary() {
    let s = setup();
    let file = openclaw_file(&s);
    write(
        &file,
        r#"{"agents": {"defaults": {"model": "openai/gpt-4o"}}}"#,
    );
    wire(&s.home, &ClawType::Openclaw, &target(1), &s.env).unwrap();
    let v: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        v["agents"]["defaults"]["model"],
        json!({"primary": "metaclaw/gpt-test"})
    );
}

#[test]
fn a_broken_config_fails_and_nothing_is_touched() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, "{ agents: { defaults: ");
    let err = wire(&s.home, &ClawType::Openclaw, &target(1), &s.env).unwrap_err();
    assert!(format!("{err:#}").contains("JSON5"), "{err:#}");
    assert_eq!(fs::read_to_string(&file).unwrap(), "{ agents: { defaults: ");
    assert!(state(&s.home).is_none());
    assert!(backups(&s.home).is_empty());

    write(&file, r#"{"agents": {"defaults": "oops"}}"#);
    let err = wire(&s.home, &ClawType::Openclaw, &target(1), &s.env).unwrap_err();
    assert!(format!("{err:#}").contains("agents.defaults"), "{err:#}");
    assert!(state(&s.home).is_none());
}

#[test]
fn a_symlinked_config_is_edited_through_the_link() {
    let s = setup();
    let real = s.user.join("dotfiles").join("openclaw.json");
    write(&real, "{}\n");
    let link = openclaw_file(&s);
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    wire(&s.home, &ClawType::Openclaw, &target(1), &s.env).unwrap();
    assert!(link.is_symlink());
    assert!(
        fs::read_to_string(&real)
            .unwrap()
            .contains("metaclaw/gpt-test")
    );
    restore(&s.home, &s.env).unwrap();
    assert!(link.is_symlink());
    assert_eq!(fs::read_to_string(&real).unwrap(), "{}\n");
}

const HERMES_YAML: &str = "# Hermes config\nmodel:\n  default: anthropic/claude-opus-4.6\n  provider: anthropic\n  api_mode: anthropic_messages\nterminal:\n  backend: local\n  timeout: 180\ntoolsets:\n- hermes-cli\n- web\nmemory:\n  memory_enabled: true\n  user_char_limit: 1375\nagent:\n  max_turns: 90\n  reasoning_effort: 'on'\n";

#[test]
fn hermes_model_points_at_the_proxy_and_other_keys_stay() {
    let s = setup();
    let file = s.user.join(".hermes").join("config.yaml");
    write(&file, HERMES_YAML);
    let original: Value = serde_saphyr::from_str(HERMES_YAML).unwrap();
    let mut t = target(30123);
    t.context_window = 64_000;
    let report = wire(&s.home, &ClawType::Hermes, &t, &s.env).unwrap();
    assert_eq!(report.files[0].action, Action::Updated);
    let wired: Value = serde_saphyr::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(wired["model"]["provider"], "custom");
    assert_eq!(wired["model"]["default"], "gpt-test");
    assert_eq!(wired["model"]["base_url"], "http://127.0.0.1:30123/v1");
    assert_eq!(wired["model"]["api_key"], "metaclaw-local");
    assert_eq!(wired["model"]["context_length"], 64_000);
    // Not one of metaclaw's keys: left alone.
    assert_eq!(wired["model"]["api_mode"], "anthropic_messages");
    let mut rest = wired.clone();
    rest.as_object_mut().unwrap().remove("model");
    let mut orig_rest = original.clone();
    orig_rest.as_object_mut().unwrap().remove("model");
    assert_eq!(rest, orig_rest);
    // A string that YAML would read as a boolean stays a string.
    assert_eq!(wired["agent"]["reasoning_effort"], "on");

    let bytes = fs::read(&file).unwrap();
    let again = wire(&s.home, &ClawType::Hermes, &t, &s.env).unwrap();
    assert_eq!(again.files[0].action, Action::Unchanged);
    assert_eq!(fs::read(&file).unwrap(), bytes);
    assert_eq!(backups(&s.home).len(), 1);

    restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), HERMES_YAML);
}

#[test]
fn hermes_short_model_form_and_hermes_home() {
    let s = setup();
    let dir = s.user.join("hh");
    let file = dir.join("config.yaml");
    write(&file, "model: openrouter/some-model\n");
    let env = s.env.clone().with_var("HERMES_HOME", dir.to_string_lossy());
    wire(&s.home, &ClawType::Hermes, &target(5), &env).unwrap();
    let wired: Value = serde_saphyr::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(wired["model"]["default"], "gpt-test");
    assert_eq!(wired["model"]["provider"], "custom");
    assert!(wired["model"].get("context_length").is_none());
    restore(&s.home, &env).unwrap();
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "model: openrouter/some-model\n"
    );
}

const ZEROCLAW_TOML: &str = r#"# ZeroClaw
api_key = "sk-or-old"   # my OpenRouter key
default_provider = "openrouter"
default_model = "anthropic/claude-sonnet-4-6"
default_temperature = 0.7

[autonomy]
level = "supervised"   # never "full"
workspace_only = true

[gateway]
port = 3000
"#;

#[test]
fn zeroclaw_keys_change_in_place_and_comments_stay() {
    let s = setup();
    let file = s.user.join(".zeroclaw").join("config.toml");
    write(&file, ZEROCLAW_TOML);
    wire(&s.home, &ClawType::Zeroclaw, &target(30123), &s.env).unwrap();
    let text = fs::read_to_string(&file).unwrap();
    assert_eq!(
        text,
        ZEROCLAW_TOML
            .replace("\"sk-or-old\"", "\"metaclaw-local\"")
            .replace("\"openrouter\"", "\"custom:http://127.0.0.1:30123/v1\"")
            .replace("\"anthropic/claude-sonnet-4-6\"", "\"gpt-test\"")
    );
    let again = wire(&s.home, &ClawType::Zeroclaw, &target(30123), &s.env).unwrap();
    assert_eq!(again.files[0].action, Action::Unchanged);
    assert_eq!(fs::read_to_string(&file).unwrap(), text);
    restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), ZEROCLAW_TOML);
}

#[test]
fn zeroclaw_missing_keys_are_added_at_the_top_level() {
    let s = setup();
    let file = s.user.join(".zeroclaw").join("config.toml");
    write(&file, "# only tables\n[gateway]\nport = 3000\n");
    wire(&s.home, &ClawType::Zeroclaw, &target(7), &s.env).unwrap();
    let doc: toml_edit::DocumentMut = fs::read_to_string(&file).unwrap().parse().unwrap();
    assert_eq!(
        doc["default_provider"].as_str(),
        Some("custom:http://127.0.0.1:7/v1")
    );
    assert_eq!(doc["default_model"].as_str(), Some("gpt-test"));
    assert_eq!(doc["api_key"].as_str(), Some("metaclaw-local"));
    assert_eq!(doc["gateway"]["port"].as_integer(), Some(3000));
    assert!(fs::read_to_string(&file).unwrap().contains("# only tables"));
}

const IRONCLAW_ENV: &str = "# IronClaw settings\nDATABASE_URL=postgres://localhost/ironclaw\n\n# LLM\nLLM_BACKEND=nearai   # default\nLLM_MODEL=old-model\nexport SECRET_THING='x y'\n";

#[test]
fn ironclaw_env_lines_change_in_place() {
    let s = setup();
    let file = s.user.join(".ironclaw").join(".env");
    write(&file, IRONCLAW_ENV);
    wire(&s.home, &ClawType::Ironclaw, &target(30123), &s.env).unwrap();
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "# IronClaw settings\nDATABASE_URL=postgres://localhost/ironclaw\n\n# LLM\nLLM_BACKEND=openai_compatible   # default\nLLM_MODEL=gpt-test\nexport SECRET_THING='x y'\nLLM_BASE_URL=http://127.0.0.1:30123/v1\nLLM_API_KEY=metaclaw-local\n"
    );
    let bytes = fs::read(&file).unwrap();
    let again = wire(&s.home, &ClawType::Ironclaw, &target(30123), &s.env).unwrap();
    assert!(!again.changed());
    assert_eq!(fs::read(&file).unwrap(), bytes);
    restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), IRONCLAW_ENV);
}

#[test]
fn picoclaw_model_list_is_upserted() {
    let s = setup();
    let file = s.user.join(".picoclaw").join("config.json");
    let original = json!({
        "version": 2,
        "agents": {"defaults": {"workspace": "~/.picoclaw/workspace", "model_name": "gpt4", "max_tokens": 8192}},
        "model_list": [
            {"model_name": "gpt4", "model": "openai/gpt-5.2", "api_key": "sk-x", "api_base": "https://api.openai.com/v1"},
            {"model_name": "metaclaw", "model": "openai/stale", "api_key": "old", "api_base": "http://127.0.0.1:1/v1"},
        ],
        "tools": {"exec": {"enabled": false}},
    });
    let text = serde_json::to_string(&original).unwrap();
    write(&file, &text);
    wire(&s.home, &ClawType::Picoclaw, &target(30123), &s.env).unwrap();
    let wired: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    let list = wired["model_list"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0], original["model_list"][0]);
    assert_eq!(
        list[1],
        json!({"model_name": "metaclaw", "model": "openai/gpt-test", "api_key": "metaclaw-local", "api_base": "http://127.0.0.1:30123/v1"})
    );
    assert_eq!(wired["agents"]["defaults"]["model_name"], "metaclaw");
    assert_eq!(wired["agents"]["defaults"]["max_tokens"], 8192);
    assert_eq!(wired["tools"], original["tools"]);
    assert_eq!(wired["version"], 2);
    restore(&s.home, &s.env).unwrap();
    assert_eq!(fs::read_to_string(&file).unwrap(), text);
}

#[test]
fn nanoclaw_env_is_found_through_the_systemd_unit() {
    let s = setup();
    let project = s.user.join("src").join("nano");
    fs::create_dir_all(&project).unwrap();
    write(
        &s.user.join(".config/systemd/user/nanoclaw.service"),
        "[Service]\nWorkingDirectory=%h/src/nano\nExecStart=/usr/bin/node dist/index.js\n",
    );
    // A decoy the unit takes precedence over.
    fs::create_dir_all(s.user.join("nanoclaw")).unwrap();
    let env_file = project.join(".env");
    write(
        &env_file,
        "# keys\nANTHROPIC_API_KEY=sk-ant-real\nASSISTANT_NAME=Andy\n",
    );
    wire(&s.home, &ClawType::Nanoclaw, &target(30123), &s.env).unwrap();
    assert_eq!(
        fs::read_to_string(&env_file).unwrap(),
        "# keys\nANTHROPIC_API_KEY=metaclaw-local\nASSISTANT_NAME=Andy\nANTHROPIC_BASE_URL=http://127.0.0.1:30123\n"
    );
    assert!(!s.user.join("nanoclaw").join(".env").exists());
    restore(&s.home, &s.env).unwrap();
    assert_eq!(
        fs::read_to_string(&env_file).unwrap(),
        "# keys\nANTHROPIC_API_KEY=sk-ant-real\nASSISTANT_NAME=Andy\n"
    );
}

#[test]
fn nanoclaw_without_a_project_is_skipped() {
    let s = setup();
    let report = wire(&s.home, &ClawType::Nanoclaw, &target(1), &s.env).unwrap();
    assert!(report.skipped.unwrap().contains("no project"));
}

#[test]
fn copaw_provider_files_are_created_and_removed_with_their_directories() {
    let s = setup();
    let secret = s.user.join(".copaw.secret");
    fs::create_dir_all(&secret).unwrap();
    let report = wire(&s.home, &ClawType::Copaw, &target(30123), &s.env).unwrap();
    assert_eq!(report.files.len(), 2);
    let provider_file = secret.join("providers/custom/metaclaw.json");
    let active_file = secret.join("providers/active_model.json");
    let provider: Value = serde_json::from_slice(&fs::read(&provider_file).unwrap()).unwrap();
    assert_eq!(provider["id"], "metaclaw");
    assert_eq!(provider["base_url"], "http://127.0.0.1:30123/v1");
    assert_eq!(provider["api_key"], "metaclaw-local");
    assert_eq!(provider["chat_model"], "OpenAIChatModel");
    assert_eq!(provider["is_custom"], true);
    assert_eq!(provider["models"][0]["id"], "gpt-test");
    let active: Value = serde_json::from_slice(&fs::read(&active_file).unwrap()).unwrap();
    assert_eq!(
        active,
        json!({"provider_id": "metaclaw", "model": "gpt-test"})
    );
    assert_eq!(mode(&provider_file), 0o600);

    // CoPaw encrypts the key in place when it loads the provider: still
    // wired, and restore removes the file without keeping a copy.
    let mut encrypted = provider.clone();
    encrypted["api_key"] = json!("ENC:abcdef");
    encrypted["models"][0]["supports_multimodal"] = json!(false);
    fs::write(
        &provider_file,
        serde_json::to_vec_pretty(&encrypted).unwrap(),
    )
    .unwrap();
    let again = wire(&s.home, &ClawType::Copaw, &target(30123), &s.env).unwrap();
    assert!(!again.changed(), "{again:?}");

    restore(&s.home, &s.env).unwrap();
    assert!(!provider_file.exists() && !active_file.exists());
    assert!(!secret.join("providers").exists());
    assert!(set_aside_copies(&provider_file).is_empty());
    assert!(secret.is_dir());
}

#[test]
fn copaw_existing_active_model_comes_back() {
    let s = setup();
    let secret = s.user.join("sec");
    let active_file = secret.join("providers/active_model.json");
    let before = "{\n  \"provider_id\": \"openai\",\n  \"model\": \"gpt-4o\"\n}";
    write(&active_file, before);
    let env = s
        .env
        .clone()
        .with_var("COPAW_SECRET_DIR", secret.to_string_lossy());
    wire(&s.home, &ClawType::Copaw, &target(2), &env).unwrap();
    assert!(
        fs::read_to_string(&active_file)
            .unwrap()
            .contains("metaclaw")
    );
    restore(&s.home, &env).unwrap();
    assert_eq!(fs::read_to_string(&active_file).unwrap(), before);
    assert!(!secret.join("providers/custom").exists());
}

/// A fake command on PATH that logs its arguments.
fn fake_command(dir: &Path, name: &str, log: &Path) {
    let path = dir.join(name);
    write(
        &path,
        &format!("#!/bin/sh\necho \"{name} $*\" >> {}\n", log.display()),
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fake `/proc` with one process.
fn fake_proc(root: &Path, pid: u32, argv: &[&str]) {
    let mut raw = argv.join("\0");
    raw.push('\0');
    write(&root.join(pid.to_string()).join("cmdline"), &raw);
}

#[test]
fn the_gateway_is_restarted_only_when_it_runs() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, "{}");
    let bin = s.user.join("bin");
    let log = s.user.join("calls.log");
    fake_command(&bin, "openclaw", &log);
    let procs = s.user.join("proc");
    fs::create_dir_all(&procs).unwrap();
    let env = s
        .env
        .clone()
        .with_path(vec![bin.clone()])
        .with_proc_dir(&procs);

    // Not running: no restart, and the report says when it takes effect.
    let report = wire(&s.home, &ClawType::Openclaw, &target(1), &env).unwrap();
    assert!(!log.exists());
    assert!(
        report.notes.iter().any(|n| n.contains("not running")),
        "{:?}",
        report.notes
    );
    restore(&s.home, &env).unwrap();
    assert!(!log.exists());

    // Running: restarted once after wiring, not again when nothing changes.
    fake_proc(
        &procs,
        4242,
        &[
            "node",
            "/usr/lib/node_modules/openclaw/openclaw.mjs",
            "gateway",
            "run",
        ],
    );
    let report = wire(&s.home, &ClawType::Openclaw, &target(1), &env).unwrap();
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "openclaw gateway restart\n"
    );
    assert!(
        report.notes.iter().any(|n| n.contains("restarted")),
        "{:?}",
        report.notes
    );
    wire(&s.home, &ClawType::Openclaw, &target(1), &env).unwrap();
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "openclaw gateway restart\n"
    );
    restore(&s.home, &env).unwrap();
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "openclaw gateway restart\nopenclaw gateway restart\n"
    );

    // Running but the command is missing: reported, not fatal.
    let env = env.with_path(Vec::new());
    let report = wire(&s.home, &ClawType::Openclaw, &target(1), &env).unwrap();
    assert!(
        report.notes.iter().any(|n| n.contains("not on PATH")),
        "{:?}",
        report.notes
    );
    restore(&s.home, &env).unwrap();
}

#[test]
fn nemoclaw_runs_openshell_and_says_what_restore_cannot_undo() {
    let s = setup();
    let file = s.user.join(".nemoclaw").join("config.json");
    write(
        &file,
        "{\"sandboxName\": \"my-box\", \"model\": \"nvidia/old\"}",
    );
    let bin = s.user.join("bin");
    let log = s.user.join("calls.log");
    fake_command(&bin, "openshell", &log);
    let mut t = target(30123);
    t.api_key = "secret-proxy-key".into();
    let env = s.env.clone().with_path(vec![bin]);
    wire(&s.home, &ClawType::Nemoclaw, &t, &env).unwrap();
    let wired: Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        wired,
        json!({"sandboxName": "my-box", "model": "gpt-test", "endpointType": "custom",
               "endpointUrl": "http://127.0.0.1:30123/v1", "profile": "ncp", "credentialEnv": "OPENAI_API_KEY"})
    );
    let calls = fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls,
        "openshell provider create --name metaclaw --type openai --credential OPENAI_API_KEY=secret-proxy-key --config OPENAI_BASE_URL=http://127.0.0.1:30123/v1\nopenshell inference set --provider metaclaw --model gpt-test\n"
    );
    // The key is not kept in metaclaw's state.
    let st = fs::read_to_string(s.home.root.join("claws/state.json")).unwrap();
    assert!(
        !st.contains("secret-proxy-key") && st.contains("OPENAI_API_KEY=***"),
        "{st}"
    );
    // Same target again: nothing re-run.
    wire(&s.home, &ClawType::Nemoclaw, &t, &env).unwrap();
    assert_eq!(fs::read_to_string(&log).unwrap(), calls);

    let report = restore(&s.home, &env).unwrap();
    let text = report.lines(&s.user).join("\n");
    assert!(
        text.contains("cannot undo exactly") && text.contains("openshell inference set"),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "{\"sandboxName\": \"my-box\", \"model\": \"nvidia/old\"}"
    );
}

#[test]
fn two_agents_wired_are_both_restored() {
    let s = setup();
    let oc = openclaw_file(&s);
    write(&oc, OPENCLAW_JSON5);
    let zc = s.user.join(".zeroclaw").join("config.toml");
    write(&zc, ZEROCLAW_TOML);
    wire(&s.home, &ClawType::Openclaw, &target(1), &s.env).unwrap();
    wire(&s.home, &ClawType::Zeroclaw, &target(1), &s.env).unwrap();
    let st = state(&s.home).unwrap();
    assert_eq!(
        st.agents
            .iter()
            .map(|a| a.claw.as_str())
            .collect::<Vec<_>>(),
        ["openclaw", "zeroclaw"]
    );
    let report = restore(&s.home, &s.env).unwrap();
    assert_eq!(report.files.len(), 2);
    assert_eq!(fs::read_to_string(&oc).unwrap(), OPENCLAW_JSON5);
    assert_eq!(fs::read_to_string(&zc).unwrap(), ZEROCLAW_TOML);
    assert!(state(&s.home).is_none());
    // Nothing left to restore is not an error.
    let report = restore(&s.home, &s.env).unwrap();
    assert!(report.skipped.unwrap().contains("nothing to restore"));
}

#[test]
fn a_deleted_backup_fails_restore_and_keeps_the_state() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, OPENCLAW_JSON5);
    wire(&s.home, &ClawType::Openclaw, &target(1), &s.env).unwrap();
    for b in backups(&s.home) {
        fs::write(b, "tampered").unwrap();
    }
    let err = restore(&s.home, &s.env).unwrap_err();
    assert!(format!("{err:#}").contains("does not match"), "{err:#}");
    assert!(state(&s.home).is_some());
}

#[test]
fn none_and_an_empty_model_wire_nothing() {
    let s = setup();
    let report = wire(&s.home, &ClawType::None, &target(1), &s.env).unwrap();
    assert!(report.skipped.is_some());
    let mut t = target(1);
    t.model = String::new();
    assert!(wire(&s.home, &ClawType::Openclaw, &t, &s.env).is_err());
}

#[test]
fn a_wired_file_is_checked_for_edits_that_unwire_it_and_for_its_backup() {
    let s = setup();
    let file = openclaw_file(&s);
    write(&file, OPENCLAW_JSON5);
    wire(&s.home, &ClawType::Openclaw, &target(30124), &s.env).unwrap();
    let agent = state(&s.home).unwrap().agents[0].clone();
    let record = &agent.files[0];
    assert_eq!(check_file(record, &agent.base_url), vec![]);

    // An edit that keeps the proxy's URL is worth a note only.
    let wired = fs::read_to_string(&file).unwrap();
    fs::write(&file, wired.replace("\"heartbeat\"", "\"heartbeatX\"")).unwrap();
    let findings = check_file(record, &agent.base_url);
    assert!(
        matches!(&findings[..], [Finding::Changed(w)] if w.contains("still names http://127.0.0.1:30124")),
        "{findings:?}"
    );
    // One that points the agent elsewhere is broken wiring.
    fs::write(&file, wired.replace("127.0.0.1:30124", "api.example.com")).unwrap();
    let findings = check_file(record, &agent.base_url);
    assert!(
        matches!(&findings[..], [Finding::Broken(w)] if w.contains("no longer names")),
        "{findings:?}"
    );
    // A backup that would not restore the original is too.
    fs::write(&file, &wired).unwrap();
    for b in backups(&s.home) {
        fs::write(b, "tampered").unwrap();
    }
    let findings = check_file(record, &agent.base_url);
    assert!(
        matches!(&findings[..], [Finding::Broken(w)] if w.contains("does not match the original") && w.contains("--restore")),
        "{findings:?}"
    );
    fs::remove_file(&file).unwrap();
    assert!(
        check_file(record, &agent.base_url)
            .iter()
            .any(|f| matches!(f, Finding::Broken(w) if w.contains("it is gone"))),
    );
}
