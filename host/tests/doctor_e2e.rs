//! `metaclaw doctor`, end to end: the real binary on temporary homes, the
//! dummy upstream (told to require a key) as the upstream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

const KEY: &str = "sk-doctor-right-4417";

/// `metaclaw [-c CONFIG] doctor ARGS` with `home` as the home and `env` set
/// (the key's variable only when given).
fn doctor_with(home: &Path, config: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    if let Some(config) = config {
        cmd.arg("-c").arg(config);
    }
    cmd.arg("doctor")
        .args(args)
        .env("METACLAW_HOME", home)
        .env_remove("METACLAW_LLM_API_KEY")
        .env_remove("DOCTOR_KEY")
        .env("METACLAW_NO_WIRE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn doctor(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    doctor_with(home, None, args, env)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The checks of a `doctor --json` run.
fn checks(out: &Output) -> Vec<Value> {
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)));
    report["checks"].as_array().unwrap().clone()
}

/// The one check called `name`.
fn check(out: &Output, name: &str) -> Value {
    let found: Vec<Value> = checks(out)
        .into_iter()
        .filter(|c| c["check"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{name}: {found:?}\n{}", text(out));
    found[0].clone()
}

/// An upstream whose key comes from $DOCTOR_KEY, no agent, any port.
fn config_for(upstream: &str) -> String {
    format!(
        "llm:\n  api_base: {upstream}\n  model_id: echo\n  api_key_env: DOCTOR_KEY\nclaw_type: none\nproxy:\n  port: 0\n"
    )
}

fn fresh_home(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    warm_plugin_cache(home.path());
    std::fs::write(home.path().join("config.yaml"), config).unwrap();
    home
}

#[test]
fn a_healthy_setup_is_all_ok_online_and_names_the_running_daemon() {
    let up = dummy_requiring_key(KEY);
    let mc = Metaclaw::start_with_env(&up.url, &config_for("{upstream}"), &[("DOCTOR_KEY", KEY)]);
    let out = mc.cli(&["skills", "install-builtin"]);
    assert!(out.status.success(), "{}", text(&out));
    // A home others can read is worth a warning (it holds conversations);
    // then the test's folder is made like the one `start` creates.
    std::fs::set_permissions(mc.home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let loose = doctor(mc.home.path(), &["--json"], &[("DOCTOR_KEY", KEY)]);
    let home = check(&loose, "home");
    assert_eq!(home["verdict"], "warning", "{home}");
    assert!(
        home["fix"].as_str().unwrap().contains("chmod 700"),
        "{home}"
    );
    std::fs::set_permissions(mc.home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

    let out = doctor(
        mc.home.path(),
        &["--online", "--json"],
        &[("DOCTOR_KEY", KEY)],
    );
    assert!(out.status.success(), "{}", text(&out));
    let all = checks(&out);
    let names: Vec<&str> = all.iter().map(|c| c["check"].as_str().unwrap()).collect();
    for name in [
        "config",
        "home",
        "disk",
        "upstream",
        "online",
        "store",
        "port",
        "plugin pins",
        "plugins",
        "retrieval",
        "evolution",
        "skills",
        "wiring",
    ] {
        assert!(names.contains(&name), "{name} is not checked: {names:?}");
    }
    for c in &all {
        assert_eq!(c["verdict"], "ok", "{c}");
    }
    let online = check(&out, "online");
    assert!(
        online["message"]
            .as_str()
            .unwrap()
            .contains("/models answered 200 OK with the key"),
        "{online}"
    );
    let pid = mc.proc.child.id();
    let port = check(&out, "port");
    assert!(
        port["message"]
            .as_str()
            .unwrap()
            .contains(&format!("metaclaw is running at {}, pid {pid}", mc.url())),
        "{port}"
    );
    assert!(
        check(&out, "evolution")["message"]
            .as_str()
            .unwrap()
            .contains("guard"),
    );

    // The text says the same, line by line, and never shows the key.
    let out = doctor(mc.home.path(), &["--online"], &[("DOCTOR_KEY", KEY)]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("key from $DOCTOR_KEY"), "{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(*lines.last().unwrap(), "all good", "{shown}");
    for line in &lines[1..lines.len() - 1] {
        assert!(line.starts_with("ok "), "{shown}");
    }
}

#[test]
fn a_wrong_key_a_missing_key_an_unreachable_upstream_and_a_taken_port_are_errors() {
    let up = dummy_requiring_key(KEY);
    let home = fresh_home(&config_for(&up.url));

    // A wrong key: the upstream answers 401, and doctor says which key to fix.
    let out = doctor(
        home.path(),
        &["--online", "--json"],
        &[("DOCTOR_KEY", "sk-wrong-1")],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("sk-wrong-1"), "{}", text(&out));
    let online = check(&out, "online");
    assert_eq!(online["verdict"], "error", "{online}");
    let message = online["message"].as_str().unwrap();
    assert!(
        message.contains("refused the key") && message.contains("401"),
        "{online}"
    );
    assert!(
        online["fix"].as_str().unwrap().contains("$DOCTOR_KEY"),
        "{online}"
    );
    // Only a failed check makes the exit status non-zero.
    for c in checks(&out) {
        if c["check"] != "online" {
            assert_ne!(c["verdict"], "error", "{c}");
        }
    }

    // An Anthropic-style upstream gets the key as `x-api-key` (with
    // `anthropic-version`): the right one passes, a wrong one is refused.
    let anthropic =
        fresh_home(&config_for(&up.url).replace("llm:\n", "llm:\n  api_format: anthropic\n"));
    let out = doctor(
        anthropic.path(),
        &["--online", "--json"],
        &[("DOCTOR_KEY", KEY)],
    );
    assert_eq!(check(&out, "online")["verdict"], "ok", "{}", text(&out));
    let out = doctor(
        anthropic.path(),
        &["--online", "--json"],
        &[("DOCTOR_KEY", "sk-wrong-2")],
    );
    let online = check(&out, "online");
    assert_eq!(online["verdict"], "error", "{online}");
    assert!(
        online["message"]
            .as_str()
            .unwrap()
            .contains("invalid x-api-key"),
        "{online}"
    );

    // Without --online nothing is sent, and the output says it was skipped.
    let out = doctor(home.path(), &[], &[("DOCTOR_KEY", "sk-wrong-1")]);
    assert!(out.status.success(), "{}", text(&out));
    let skipped = text(&out);
    let line = skipped
        .lines()
        .find(|l| l.contains(" online "))
        .unwrap_or_else(|| panic!("{skipped}"));
    assert!(
        line.starts_with("skipped") && line.contains("--online"),
        "{skipped}"
    );

    // The key's variable is not set: an error naming it; nothing is sent.
    let out = doctor(home.path(), &["--online", "--json"], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let upstream = check(&out, "upstream");
    assert_eq!(upstream["verdict"], "error", "{upstream}");
    assert!(
        upstream["message"]
            .as_str()
            .unwrap()
            .contains("DOCTOR_KEY, which is not set"),
        "{upstream}"
    );
    assert_eq!(check(&out, "online")["verdict"], "skipped");

    // An upstream that is not there: a closed port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = fresh_home(&config_for(&format!("http://127.0.0.1:{closed}/v1")));
    let out = doctor(gone.path(), &["--online", "--json"], &[("DOCTOR_KEY", KEY)]);
    assert!(!out.status.success(), "{}", text(&out));
    let online = check(&out, "online");
    assert_eq!(online["verdict"], "error", "{online}");
    assert!(
        online["message"]
            .as_str()
            .unwrap()
            .contains(&format!("http://127.0.0.1:{closed}/v1 is unreachable")),
        "{online}"
    );
    assert!(
        online["fix"].as_str().unwrap().contains("llm.api_base"),
        "{online}"
    );

    // proxy.port taken by a program that is not this home's metaclaw (the
    // dummy upstream's port).
    let taken: u16 = up
        .url
        .trim_end_matches("/v1")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let busy = fresh_home(&config_for(&up.url).replace("port: 0", &format!("port: {taken}")));
    let out = doctor(busy.path(), &["--json"], &[("DOCTOR_KEY", KEY)]);
    assert!(!out.status.success(), "{}", text(&out));
    let port = check(&out, "port");
    assert_eq!(port["verdict"], "error", "{port}");
    assert!(
        port["message"]
            .as_str()
            .unwrap()
            .contains(&format!("something else listens on 127.0.0.1:{taken}")),
        "{port}"
    );
    assert!(
        port["fix"].as_str().unwrap().contains("proxy.port"),
        "{port}"
    );
}

#[test]
fn an_https_upstream_on_a_machine_without_ca_certificates_is_an_error_with_the_fix() {
    let no_ca = NoCaCertificates::new();
    let home = fresh_home(&config_for("https://127.0.0.1:9/v1"));
    let out = doctor(
        home.path(),
        &["--online", "--json"],
        &[&[("DOCTOR_KEY", KEY)][..], &no_ca.env()].concat(),
    );
    assert!(!out.status.success(), "{}", text(&out));
    let online = check(&out, "online");
    assert_eq!(online["verdict"], "error", "{online}");
    let message = online["message"].as_str().unwrap();
    assert!(
        message.contains("cannot verify HTTPS servers such as https://127.0.0.1:9/v1")
            && message.contains("no CA certificate was found in SSL_CERT_FILE="),
        "{online}"
    );
    let fix = online["fix"].as_str().unwrap();
    assert!(
        fix.contains("point SSL_CERT_FILE and SSL_CERT_DIR at CA certificates")
            && fix.contains("ca-certificates"),
        "{online}"
    );
}

#[test]
fn a_tampered_pinned_plugin_is_an_error_naming_the_file_and_the_fix() {
    let up = dummy();
    let home = fresh_home(&format!(
        "llm:\n  api_base: {}\n  model_id: echo\nclaw_type: none\nproxy:\n  port: 0\n",
        up.url
    ));
    let dir = home.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("refusals.wasm");
    std::fs::copy(built_plugin("examples/refusals.wasm"), &file).unwrap();
    let out = cli_in(home.path(), &["plugins", "lock"]);
    assert!(out.status.success(), "{}", text(&out));

    let out = doctor(home.path(), &["--json"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let pins = check(&out, "plugin pins");
    assert_eq!(pins["verdict"], "ok", "{pins}");
    let plugins = check(&out, "plugins");
    let summary = plugins["message"].as_str().unwrap();
    assert!(
        summary.contains("1 drop-in") && summary.contains("pinned by metaclaw.lock"),
        "{plugins}"
    );

    // The same plugin, other bytes: refused, and doctor names the file and
    // the two commands that deal with it.
    rebuilt_copy(&file, &file);
    let out = doctor(home.path(), &["--json"], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let shown = file.display().to_string();
    let about_file: Vec<Value> = checks(&out)
        .into_iter()
        .filter(|c| c["message"].as_str().unwrap().contains(&shown))
        .collect();
    assert_eq!(about_file.len(), 1, "one line per problem: {about_file:?}");
    let pin = &about_file[0];
    assert_eq!(pin["check"], "plugin pins", "{pin}");
    assert_eq!(pin["verdict"], "error", "{pin}");
    assert!(
        pin["message"]
            .as_str()
            .unwrap()
            .contains("changed since it was pinned"),
        "{pin}"
    );
    let fix = pin["fix"].as_str().unwrap();
    assert!(
        fix.contains("metaclaw plugins verify") && fix.contains("metaclaw plugins lock"),
        "{pin}"
    );
    let plugins = check(&out, "plugins");
    assert!(
        plugins["message"].as_str().unwrap().contains("0 drop-in"),
        "{plugins}"
    );
    let human = text(&doctor(home.path(), &[], &[]));
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("error") && l.contains(&shown)),
        "{human}"
    );
}

#[test]
fn an_unwritable_home_or_store_is_an_error() {
    let up = dummy();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "llm:\n  api_base: {}\n  model_id: echo\nclaw_type: none\nproxy:\n  port: 0\n",
            up.url
        ),
    )
    .unwrap();

    // A home that is a file: nothing can be written in it, whoever runs
    // doctor (tests may run as root, whom permissions do not stop).
    let file_home = dir.path().join("home-is-a-file");
    std::fs::write(&file_home, "not a folder").unwrap();
    let out = doctor_with(&file_home, Some(&config), &["--json"], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let home = check(&out, "home");
    assert_eq!(home["verdict"], "error", "{home}");
    assert!(
        home["message"]
            .as_str()
            .unwrap()
            .contains("is not a folder"),
        "{home}"
    );
    assert!(
        home["fix"].as_str().unwrap().contains("METACLAW_HOME"),
        "{home}"
    );
    let store = check(&out, "store");
    assert_eq!(store["verdict"], "error", "{store}");
    assert!(
        store["message"]
            .as_str()
            .unwrap()
            .contains("cannot be created"),
        "{store}"
    );

    // A store path that is a folder: the daemon could not open it.
    let home_dir = dir.path().join("home");
    std::fs::create_dir(&home_dir).unwrap();
    warm_plugin_cache(&home_dir);
    std::fs::set_permissions(&home_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let folder = dir.path().join("db-is-a-folder");
    std::fs::create_dir(&folder).unwrap();
    let with_store = dir.path().join("store.yaml");
    std::fs::write(
        &with_store,
        format!(
            "{}store:\n  path: {}\n",
            std::fs::read_to_string(&config).unwrap(),
            folder.display()
        ),
    )
    .unwrap();
    let out = doctor_with(&home_dir, Some(&with_store), &["--json"], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let store = check(&out, "store");
    assert_eq!(store["verdict"], "error", "{store}");
    assert!(
        store["message"].as_str().unwrap().contains("is a folder"),
        "{store}"
    );
    assert_eq!(check(&out, "home")["verdict"], "ok");

    // A home without write permission. Root writes there anyway, so this
    // one assertion is made only when the test does not run as root; the
    // file-as-home case above checks the same verdict for everyone.
    std::fs::set_permissions(&home_dir, std::fs::Permissions::from_mode(0o500)).unwrap();
    let out = doctor_with(&home_dir, Some(&config), &["--json"], &[]);
    std::fs::set_permissions(&home_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let home = check(&out, "home");
    if rustix::process::geteuid().is_root() {
        eprintln!(
            "running as root: a mode 0500 home is writable for root; its verdict is not asserted"
        );
    } else {
        assert!(!out.status.success(), "{}", text(&out));
        assert_eq!(home["verdict"], "error", "{home}");
        assert!(
            home["message"]
                .as_str()
                .unwrap()
                .contains("cannot be written"),
            "{home}"
        );
    }
}

#[test]
fn evolution_and_retrieval_without_their_plugins_are_reported() {
    let base = "llm:\n  api_base: http://127.0.0.1:9/v1\n  model_id: echo\nclaw_type: none\nproxy:\n  port: 0\n";
    // No first-party plugins: no guard (evolution waits) and no retriever.
    let home = fresh_home(&format!("{base}plugins:\n  builtin: false\n"));
    let out = doctor(home.path(), &["--json"], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let evolution = check(&out, "evolution");
    assert_eq!(evolution["verdict"], "error", "{evolution}");
    assert!(
        evolution["message"]
            .as_str()
            .unwrap()
            .contains("no guard evolver is loaded"),
        "{evolution}"
    );
    let retrieval = check(&out, "retrieval");
    assert_eq!(retrieval["verdict"], "error", "{retrieval}");
    assert!(
        retrieval["message"]
            .as_str()
            .unwrap()
            .contains("plugins.builtin is false and no drop-in bm25 retriever is loaded"),
        "{retrieval}"
    );
    // A chain the config writes without guard runs as configured: a warning.
    let home = fresh_home(&format!("{base}plugins:\n  evolvers: [redact, dedup]\n"));
    let out = doctor(home.path(), &["--json"], &[]);
    let evolution = check(&out, "evolution");
    assert_eq!(evolution["verdict"], "warning", "{evolution}");
    assert!(
        evolution["fix"]
            .as_str()
            .unwrap()
            .contains("plugins.evolvers"),
        "{evolution}"
    );
    // Learning off: nothing to evolve, and doctor says which key.
    let home = fresh_home(&format!("{base}learning:\n  enabled: false\n"));
    let evolution = check(&doctor(home.path(), &["--json"], &[]), "evolution");
    assert_eq!(evolution["verdict"], "ok", "{evolution}");
    assert!(
        evolution["message"]
            .as_str()
            .unwrap()
            .contains("learning.enabled: false"),
        "{evolution}"
    );
}

/// A key accepted for compatibility that does nothing in this version is a
/// config warning naming it (and a key set to nothing is not).
#[test]
fn a_key_that_does_nothing_yet_is_a_config_warning() {
    let base = "llm:\n  api_base: http://127.0.0.1:9/v1\n  model_id: echo\nclaw_type: none\nproxy:\n  port: 0\n";
    let home = fresh_home(&format!(
        "{base}memory:\n  scope: team\nrl:\n  enabled: false\n"
    ));
    let config = check(&doctor(home.path(), &["--json"], &[]), "config");
    assert_eq!(config["verdict"], "warning", "{config}");
    let message = config["message"].as_str().unwrap();
    assert!(
        message.contains("`memory.scope` is set in")
            && message.contains("not implemented in this version")
            && !message.contains("rl.enabled"),
        "{config}"
    );
}
