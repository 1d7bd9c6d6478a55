//! `metaclaw rollout`, end to end: the real binary runs task files
//! through a real daemon against the dummy upstream, whose `agent` and
//! `tool-call-<k>` models call the tools the instruction names with the
//! JSON it carries. The sandbox tests attack from inside a task, the way a
//! model-written command would, and check the host: files, secrets,
//! network, processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const CONFIG: &str = "llm:\n  api_base: {upstream}\n  model_id: agent\nrl:\n  prm_model: judge\n  evolver_model: evolver\n";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A tasks folder with one `tasks.jsonl` of `(task_id, instruction)`.
fn tasks(list: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = list
        .iter()
        .map(|(id, instruction)| json!({"task_id": id, "instruction": instruction}).to_string())
        .collect();
    std::fs::write(dir.path().join("tasks.jsonl"), lines.join("\n")).unwrap();
    dir
}

/// An instruction the dummy's tool-calling models turn into `tool(args)`.
fn call(tool: &str, args: Value) -> String {
    format!("{tool} {args}")
}

/// `metaclaw rollout --tasks DIR ARGS…` against `mc`'s daemon.
fn rollout(mc: &Metaclaw, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = vec!["rollout", "--tasks", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let tmp = scratch(mc);
    let mut env = env.to_vec();
    env.push(("TMPDIR", tmp.to_str().unwrap()));
    cli_with_env(mc.home.path(), &all, &env)
}

/// The rollouts' temp dir, inside the daemon's home: whatever a failing
/// test leaves there (kept workspaces) goes with the home.
fn scratch(mc: &Metaclaw) -> PathBuf {
    let tmp = mc.home.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// The `--json` lines, by task id.
fn summaries(out: &Output) -> std::collections::HashMap<String, Value> {
    assert!(out.status.success(), "{}", text(out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .map(|v| (v["task_id"].as_str().unwrap().to_string(), v))
        .collect()
}

/// The `tool` messages the session's last turn sent the model.
fn tool_results(mc: &Metaclaw, session: &str) -> Vec<String> {
    let s = mc.session_until(session, |v| v["session"]["status"] == "ended");
    let turns = s["turns"].as_array().unwrap();
    turns.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// The only tool result of task `id`.
fn result_of(mc: &Metaclaw, runs: &std::collections::HashMap<String, Value>, id: &str) -> String {
    let run = &runs[id];
    assert_eq!(run["finished"], "answered", "{run}");
    let results = tool_results(mc, run["session_id"].as_str().unwrap());
    assert_eq!(results.len(), 1, "{results:?}");
    results[0].clone()
}

fn start() -> (Proc, Metaclaw) {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, CONFIG);
    (up, mc)
}

#[test]
fn a_task_runs_through_the_proxy_as_a_session_that_ends_and_is_judged() {
    let (_up, mc) = start();
    let dir = tasks(&[
        (
            "write",
            call(
                "write_file",
                json!({"path": "notes/a.txt", "content": "hello from the task"}),
            ),
        ),
        ("plain", "Say PONG".to_string()),
    ]);
    let out = rollout(&mc, dir.path(), &["--json", "--keep"], &[]);
    let runs = summaries(&out);
    let write = &runs["write"];
    assert_eq!(write["finished"], "answered", "{write}");
    assert_eq!(
        (write["steps"].as_u64(), write["tool_calls"].as_u64()),
        (Some(2), Some(1))
    );
    let session = write["session_id"].as_str().unwrap();
    assert!(
        session.starts_with("rollout-") && session.ends_with("-write"),
        "{session}"
    );
    // The tool wrote into the task's workspace, kept with --keep.
    let workspace = PathBuf::from(write["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes/a.txt")).unwrap(),
        "hello from the task"
    );
    let plain = &runs["plain"];
    assert_eq!(
        (plain["steps"].as_u64(), plain["tool_calls"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(plain["finished"], "answered");

    // Recorded under the task's session, ended through the API, with the
    // tool's result shown to the model and the tools offered.
    let s = mc.session_until(session, |v| {
        v["session"]["status"] == "ended" && v["turns"].as_array().is_some_and(|t| t.len() == 2)
    });
    assert_eq!(s["session"]["end_reason"], "api", "{s:#}");
    let messages = s["turns"][1]["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[1]["content"], write_instruction());
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["content"], "wrote 19 bytes to notes/a.txt");
    // The end queued the learning job: the judge scores every turn.
    let learned = poll_json(
        mc.home.path(),
        &["sessions", "show", session, "--json"],
        |v| v["learning"]["state"] == "done",
    );
    for turn in learned["turns"].as_array().unwrap() {
        assert!(turn["judgment"].is_object(), "{turn:#}");
    }

    // The plain output: a row per task, the totals, what confines `run`.
    let out = rollout(&mc, dir.path(), &[], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("run tool: sandboxed ("), "{printed}");
    assert!(printed.contains("2 task(s): 2 answered"), "{printed}");
    let row = printed.lines().find(|l| l.starts_with("write ")).unwrap();
    assert!(
        row.contains("answered") && row.contains("rollout-"),
        "{row}"
    );
}

fn write_instruction() -> String {
    call(
        "write_file",
        json!({"path": "notes/a.txt", "content": "hello from the task"}),
    )
}

#[test]
fn a_model_that_keeps_calling_tools_stops_at_max_steps_and_errors_are_reported() {
    let (_up, mc) = start();
    let dir = tasks(&[("loop", call("list_dir", json!({"path": "."})))]);
    let out = rollout(
        &mc,
        dir.path(),
        &["--json", "--model", "tool-call", "--max-steps", "1"],
        &[],
    );
    let run = &summaries(&out)["loop"];
    assert_eq!(run["finished"], "max_steps", "{run}");
    assert_eq!(
        (run["steps"].as_u64(), run["tool_calls"].as_u64()),
        (Some(1), Some(1))
    );

    // Every task failing is a failed rollout, each error said.
    let out = rollout(&mc, dir.path(), &["--json", "--model", "error-500"], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["finished"], "error");
    assert!(line["error"].as_str().unwrap().contains("500"), "{line}");
}

#[test]
fn bad_task_lines_are_named_by_file_and_line_and_a_stopped_daemon_says_how_to_start() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"task_id\": \"ok\", \"instruction\": \"fine\"}\n{\"task_id\": \"x\"}\nnot json\n",
    )
    .unwrap();
    let args = ["rollout", "--tasks", dir.path().to_str().unwrap()];
    let out = cli_in(home.path(), &args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.jsonl:2: no \"instruction\""), "{err}");
    assert!(err.contains("bad.jsonl:3: not a JSON object"), "{err}");
    assert!(!err.contains("bad.jsonl:1"), "{err}");

    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"task_id\": \"ok\", \"instruction\": \"fine\"}\n",
    )
    .unwrap();
    let out = cli_in(home.path(), &args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("metaclaw is not running") && err.contains("metaclaw start"),
        "{err}"
    );
}

/// `cat /etc/passwd`, the user's `~/.ssh`, the daemon's home and the
/// environment: nothing of the host's is there.
#[test]
fn run_sees_no_host_files_and_no_secrets() {
    let (_up, mc) = start();
    let fake_home = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake_home.path().join(".ssh")).unwrap();
    std::fs::write(
        fake_home.path().join(".ssh/id_ed25519"),
        "PLANTED-PRIVATE-KEY",
    )
    .unwrap();
    let fake_home_path = fake_home.path().to_str().unwrap();
    let daemon_home = mc.home.path().to_str().unwrap();
    let commands = [
        ("passwd", "cat /etc/passwd".to_string()),
        (
            "ssh",
            format!("echo HOME=$HOME; ls -la ~/.ssh; cat {fake_home_path}/.ssh/id_ed25519"),
        ),
        (
            "daemon",
            format!("cat {daemon_home}/admin.token; ls {daemon_home}; ls /root /home /proc /run"),
        ),
        ("env", "env; cat /proc/self/environ".to_string()),
    ];
    let list: Vec<(&str, String)> = commands
        .iter()
        .map(|(id, cmd)| (*id, call("run", json!({"command": cmd}))))
        .collect();
    let dir = tasks(&list);
    let env = [
        ("HOME", fake_home_path),
        ("OPENAI_API_KEY", "sk-PLANTED-secret-0123456789"),
    ];
    let runs = summaries(&rollout(&mc, dir.path(), &["--json"], &env));

    let passwd = result_of(&mc, &runs, "passwd");
    assert!(passwd.contains("sandbox:x:1000:1000"), "{passwd}");
    assert!(!passwd.contains("root:"), "{passwd}");
    assert!(passwd.ends_with("[exit status 0]"), "{passwd}");

    let ssh = result_of(&mc, &runs, "ssh");
    assert!(ssh.contains("HOME=/work"), "{ssh}");
    assert!(!ssh.contains("PLANTED"), "{ssh}");
    assert!(ssh.contains("No such file or directory"), "{ssh}");

    let daemon = result_of(&mc, &runs, "daemon");
    let token = std::fs::read_to_string(mc.home.path().join("admin.token")).unwrap();
    assert!(!daemon.contains(token.trim()), "{daemon}");
    assert!(!daemon.contains("config.yaml"), "{daemon}");
    for gone in ["/root", "/home", "/proc", "/run"] {
        assert!(
            daemon.contains(&format!("cannot access '{gone}'")),
            "{gone}: {daemon}"
        );
    }

    let env = result_of(&mc, &runs, "env");
    assert!(
        !env.contains("PLANTED") && !env.contains("METACLAW"),
        "{env}"
    );
    assert!(env.contains("HOME=/work") && env.contains("PATH="), "{env}");
}

/// TCP to a listener of the test's and to the daemon, UDP to a socket of
/// the test's: nothing arrives.
#[test]
fn run_has_no_network() {
    let (_up, mc) = start();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let udp_port = udp.local_addr().unwrap().port();
    let daemon_port = mc.url().rsplit(':').next().unwrap().to_string();
    let commands = [
        (
            "tcp",
            format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{tcp_port} && echo CONNECTED'"),
        ),
        (
            "daemon",
            format!(
                "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{daemon_port} && echo CONNECTED'; \
                 python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{daemon_port}/healthz\").read())'"
            ),
        ),
        (
            "udp",
            format!(
                "python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                 s.sendto(b\"x\", (\"127.0.0.1\", {udp_port})); print(\"SENT\")'"
            ),
        ),
        (
            "links",
            "cat /proc/net/dev; ip -o link 2>&1 || true".to_string(),
        ),
    ];
    let list: Vec<(&str, String)> = commands
        .iter()
        .map(|(id, cmd)| (*id, call("run", json!({"command": cmd}))))
        .collect();
    let runs = summaries(&rollout(
        &mc,
        tasks(&list).path(),
        &["--json", "--concurrency", "4"],
        &[],
    ));

    for id in ["tcp", "daemon", "udp"] {
        let result = result_of(&mc, &runs, id);
        assert!(
            !result.contains("CONNECTED")
                && !result.contains("SENT")
                && !result.contains("version"),
            "{id}: {result}"
        );
        assert!(!result.ends_with("[exit status 0]"), "{id}: {result}");
    }
    let links = result_of(&mc, &runs, "links");
    assert!(!links.contains("eth") && !links.contains("ens"), "{links}");
    assert_eq!(
        tcp.accept().err().map(|e| e.kind()),
        Some(std::io::ErrorKind::WouldBlock),
        "the sandbox connected to the test's listener"
    );
    let mut buf = [0u8; 16];
    assert_eq!(
        udp.recv(&mut buf).err().map(|e| e.kind()),
        Some(std::io::ErrorKind::WouldBlock),
        "the sandbox's datagram arrived"
    );
}

/// A file of the test's by its absolute path, the system dirs, the root:
/// all out of reach; the workspace is writable.
#[test]
fn run_cannot_write_outside_the_workspace() {
    let (_up, mc) = start();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    let victim_path = victim.to_str().unwrap();
    // Unique names, removed whatever happens: should the sandbox break,
    // this test must not leave files in the host's system dirs.
    let probes = Probes(
        ["/usr", "/etc", ""]
            .iter()
            .map(|dir| format!("{dir}/metaclaw-sandbox-probe-{}", std::process::id()))
            .collect(),
    );
    let [usr, etc, root] = [&probes.0[0], &probes.0[1], &probes.0[2]];
    let command = format!(
        "echo pwned > {victim_path}; echo pwned > {usr}; echo pwned > {etc}; touch {root}; \
         mkdir {root}.d; echo ok > inside.txt && echo WROTE-INSIDE"
    );
    let dir = tasks(&[("write", call("run", json!({"command": command})))]);
    let runs = summaries(&rollout(&mc, dir.path(), &["--json", "--keep"], &[]));
    let result = result_of(&mc, &runs, "write");
    assert!(result.contains("WROTE-INSIDE"), "{result}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    for probe in &probes.0 {
        assert!(!Path::new(probe).exists(), "{probe}");
    }
    assert!(!Path::new(&format!("{root}.d")).exists());
    assert_eq!(
        result.matches("Read-only file system").count(),
        4,
        "{result}"
    );
    let workspace = PathBuf::from(runs["write"]["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("inside.txt")).unwrap(),
        "ok\n"
    );
}

/// Host paths a broken sandbox would have written; removed on drop.
struct Probes(Vec<String>);

impl Drop for Probes {
    fn drop(&mut self) {
        for probe in &self.0 {
            let _ = std::fs::remove_file(probe);
            let _ = std::fs::remove_dir(format!("{probe}.d"));
        }
    }
}

/// The file tools refuse `..` out of the workspace and every symlink, even
/// one a `run` just planted pointing at a file or folder of the host.
#[test]
fn file_tools_refuse_escapes_by_dotdot_and_by_symlink() {
    let (_up, mc) = start();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "original").unwrap();
    let dotdot = tasks(&[
        (
            "up",
            call("read_file", json!({"path": "../../../../etc/passwd"})),
        ),
        ("abs", call("read_file", json!({"path": "/etc/passwd"}))),
        (
            "upw",
            call(
                "write_file",
                json!({"path": "a/../../x", "content": "pwned"}),
            ),
        ),
    ]);
    let runs = summaries(&rollout(&mc, dotdot.path(), &["--json"], &[]));
    let up = result_of(&mc, &runs, "up");
    assert!(
        up.starts_with("error:") && up.contains("leaves the workspace"),
        "{up}"
    );
    let abs = result_of(&mc, &runs, "abs");
    assert!(
        abs.starts_with("error: absolute paths are refused"),
        "{abs}"
    );
    let upw = result_of(&mc, &runs, "upw");
    assert!(upw.contains("leaves the workspace"), "{upw}");

    // `tool-call-3` calls run, read_file and write_file, in that order,
    // each with the same arguments: the link exists before the file tools
    // try it.
    let link = |target: &str, path: &str| {
        call(
            "run",
            json!({"command": format!("ln -s {target} link && echo LINKED"), "path": path, "content": "pwned"}),
        )
    };
    let outside_dir = outside.path().to_str().unwrap();
    let symlinks = tasks(&[
        ("file", link(victim.to_str().unwrap(), "link")),
        ("dir", link(outside_dir, "link/victim.txt")),
        ("new", link(outside_dir, "link/new.txt")),
        ("etc", link("/etc", "link/passwd")),
    ]);
    let runs = summaries(&rollout(
        &mc,
        symlinks.path(),
        &["--json", "--model", "tool-call-3"],
        &[],
    ));
    for id in ["file", "dir", "new", "etc"] {
        let run = &runs[id];
        assert_eq!(run["tool_calls"], 3, "{run}");
        let results = tool_results(&mc, run["session_id"].as_str().unwrap());
        assert!(results[0].contains("LINKED"), "{id}: {results:?}");
        for refused in &results[1..] {
            assert!(
                refused.starts_with("error:") && refused.contains("symlinks are not followed"),
                "{id}: {refused}"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original");
    assert!(!outside.path().join("new.txt").exists());
}

/// Past `--run-timeout` the command and everything it started are killed
/// (a detached `setsid` child too), and endless output is capped.
#[test]
fn a_runaway_command_is_killed_at_the_timeout() {
    let (_up, mc) = start();
    let marker = 40_000 + std::process::id() % 20_000;
    let dir = tasks(&[
        (
            "sleep",
            call(
                "run",
                json!({"command": format!("setsid sleep {marker} & sleep {}", marker + 1)}),
            ),
        ),
        (
            "yes",
            call(
                "run",
                json!({"command": format!("yes metaclaw-marker-{marker}")}),
            ),
        ),
    ]);
    let started = Instant::now();
    let runs = summaries(&rollout(
        &mc,
        dir.path(),
        &["--json", "--run-timeout", "1"],
        &[],
    ));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let sleep = result_of(&mc, &runs, "sleep");
    assert!(
        sleep.ends_with("[killed: still running after 1 s]"),
        "{sleep}"
    );
    let yes = result_of(&mc, &runs, "yes");
    assert!(
        yes.ends_with("[killed: still running after 1 s]"),
        "{}",
        &yes[yes.len() - 200..]
    );
    assert!(yes.contains("[output cut: "), "{}", &yes[yes.len() - 200..]);
    assert!(yes.len() < 17 * 1024, "{}", yes.len());
    // Nothing of either is left running.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(&[
            format!("sleep\0{marker}"),
            format!("sleep\0{}", marker + 1),
            format!("yes\0metaclaw-marker-{marker}"),
        ]);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes whose command line is one of `cmdlines` (arguments
/// joined by NUL), as `pid cmdline`.
fn processes_with(cmdlines: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let mut cmdline = String::new();
        let read = std::fs::File::open(entry.path().join("cmdline"))
            .and_then(|mut f| f.read_to_string(&mut cmdline));
        if read.is_ok() && cmdlines.iter().any(|c| cmdline.trim_end_matches('\0') == c) {
            found.push(format!("{:?} {cmdline:?}", entry.file_name()));
        }
    }
    found
}

/// Where the sandbox cannot be set up (here: user namespaces limited to 0
/// inside a user namespace of the test's), `run` runs nothing and says
/// why, the file tools still work, and the rollout says the run tool is
/// disabled.
#[test]
fn without_user_namespaces_run_is_refused_never_run_unconfined() {
    let unshare_works = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !unshare_works {
        eprintln!("skipped: `unshare --user` is not available here");
        return;
    }
    let (_up, mc) = start();
    let dir = tasks(&[
        (
            "run",
            call("run", json!({"command": "touch RAN; echo RAN"})),
        ),
        (
            "write",
            call("write_file", json!({"path": "a.txt", "content": "x"})),
        ),
    ]);
    let (runs, err) = rollout_in(
        &mc,
        dir.path(),
        &["--user", "--map-root-user"],
        "echo 0 > /proc/sys/user/max_user_namespaces",
    );
    assert!(
        err.contains("run tool: DISABLED: ") && err.contains("user namespaces"),
        "{err}"
    );
    assert!(err.contains("the run tool was disabled:"), "{err}");
    refused(&mc, &runs);
    assert_eq!(result_of(&mc, &runs, "write"), "wrote 1 bytes to a.txt");
}

/// `metaclaw rollout --tasks DIR --json --keep` in `unshare ARGS sh -c
/// 'SETUP && exec …'`: the tasks' summaries and what it said on stderr.
fn rollout_in(
    mc: &Metaclaw,
    dir: &Path,
    unshare: &[&str],
    setup: &str,
) -> (std::collections::HashMap<String, Value>, String) {
    let script = format!(
        "{setup} && exec {BIN} rollout --tasks {} --json --keep",
        dir.display()
    );
    let out = std::process::Command::new("unshare")
        .args(unshare)
        .args(["sh", "-c", &script])
        .env("METACLAW_HOME", mc.home.path())
        .env("TMPDIR", scratch(mc))
        .env("METACLAW_NO_WIRE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (summaries(&out), err)
}

/// Task `run`'s `touch RAN; echo RAN` was refused: nothing ran.
fn refused(mc: &Metaclaw, runs: &std::collections::HashMap<String, Value>) {
    let run = result_of(mc, runs, "run");
    assert!(
        run.starts_with("error: the run tool is disabled:") && !run.contains("\nRAN"),
        "{run}"
    );
    let workspace = PathBuf::from(runs["run"]["workspace"].as_str().unwrap());
    assert!(!workspace.join("RAN").exists());
}

/// The result of the `run` task `id` whose tool ran `n` times (the
/// `tool-call-<n>` model), each result.
fn results_of(
    mc: &Metaclaw,
    runs: &std::collections::HashMap<String, Value>,
    id: &str,
) -> Vec<String> {
    let run = &runs[id];
    assert_eq!(run["finished"], "answered", "{run}");
    tool_results(mc, run["session_id"].as_str().unwrap())
}

/// A fork loop, a memory bomb, a CPU spinner and a disk filler, each in
/// `run` with small limits: each stops at its limit with a result that
/// says so, nothing it started is left, nothing past the disk limit
/// reaches the host's disk, and the workspace is still usable after.
#[test]
fn run_is_bounded_in_processes_memory_cpu_and_disk() {
    let (_up, mc) = start();
    let marker = 40_000 + std::process::id() % 20_000;
    // Forks until refused; each child becomes `sleep MARKER`.
    let fork = format!(
        "python3 -c \"\nimport os\nn = 0\ntry:\n    while n < 5000:\n        if os.fork() == 0:\n            os.execvp('sleep', ['sleep', '{marker}'])\n        n += 1\nexcept OSError as e:\n    print('forked', n, 'then', e.errno)\n\""
    );
    let memory = "python3 -c \"\nheld = []\nwhile True:\n    held.append(bytearray(16 << 20))\n    print('held', 16 * len(held), flush=True)\n\"";
    let disk = "if [ -e f0 ]; then du -sk .; rm -f f*; echo CLEANED; else i=0; \
                while dd if=/dev/zero of=f$i bs=1M count=3 2>/dev/null; do i=$((i+1)); done; \
                echo WROTE $i; fi";
    let dir = tasks(&[
        ("fork", call("run", json!({ "command": fork }))),
        ("memory", call("run", json!({ "command": memory }))),
        (
            "cpu",
            call("run", json!({ "command": "python3 -c 'while True: pass'" })),
        ),
        ("disk", call("run", json!({ "command": disk }))),
    ]);
    let limits = [
        "--run-processes",
        "32",
        "--run-memory-mb",
        "128",
        "--run-cpu-secs",
        "1",
        "--run-disk-mb",
        "16",
        "--run-timeout",
        "20",
    ];
    // `tool-call-7`: run, the five file tools, run again (with the same
    // arguments: the file tools' calls fail but `list_dir`, which lists
    // the workspace).
    let mut args = vec![
        "--json",
        "--keep",
        "--concurrency",
        "4",
        "--model",
        "tool-call-7",
    ];
    args.extend(limits);
    let started = Instant::now();
    let out = rollout(&mc, dir.path(), &args, &[]);
    let runs = summaries(&out);
    // No call waited for its deadline: each was stopped by its limit.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("limits: 32 processes"), "{said}");

    let fork = &results_of(&mc, &runs, "fork")[0];
    let forked: u32 = fork
        .split_whitespace()
        .skip_while(|w| *w != "forked")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{fork}"));
    // Python (and the shell, unless it exec'd python) count too.
    assert!(forked < 32, "{fork}");
    assert!(fork.contains("then 11"), "EAGAIN: {fork}");
    let memory = &results_of(&mc, &runs, "memory")[0];
    let held = memory
        .lines()
        .filter_map(|l| l.strip_prefix("held "))
        .filter_map(|n| n.trim().parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    assert!(held > 0 && held <= 128, "{memory}");
    assert!(
        memory.contains("memory limit reached") || memory.contains("MemoryError"),
        "{memory}"
    );
    assert!(!memory.ends_with("[exit status 0]"), "{memory}");
    let cpu = &results_of(&mc, &runs, "cpu")[0];
    // SIGXCPU; a shell that exec'd python made it PID 1 of its namespace,
    // which ignores SIGXCPU: then SIGKILL at the hard limit a second on.
    assert!(
        cpu.ends_with("(killed by signal 24: the CPU time limit)]")
            || cpu.ends_with("(killed by signal 9)]"),
        "{cpu}"
    );

    let disk = results_of(&mc, &runs, "disk");
    // 3 MiB files: five whole ones, the sixth cut at 16 MiB.
    assert!(disk[0].contains("WROTE 5"), "{disk:?}");
    assert!(
        disk[0].contains("disk limit reached: the workspace holds at most 16 MiB"),
        "{disk:?}"
    );
    // The file tools and the second call found what the first left
    // (mirrored back), within the limit, and it could clean it up.
    assert!(disk[3].contains("f5"), "{disk:?}");
    let kib: u64 = disk[6]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{disk:?}"));
    assert!((15 * 1024..=16 * 1024).contains(&kib), "{disk:?}");
    assert!(disk[6].contains("CLEANED"), "{disk:?}");
    let workspace = PathBuf::from(runs["disk"]["workspace"].as_str().unwrap());
    assert_eq!(std::fs::read_dir(&workspace).unwrap().count(), 0);

    // Nothing of the fork loop is left running.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(&[format!("sleep\0{marker}")]);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The daemon served every step throughout.
    let healthy = cli_in(mc.home.path(), &["status"]);
    assert!(healthy.status.success(), "{}", text(&healthy));
}

/// Past `--max-tool-calls-per-step` the calls of one answer are answered
/// with an error and not run; past `--max-tool-calls` the task ends,
/// saying why.
#[test]
fn tool_calls_are_capped_per_step_and_per_task() {
    let (_up, mc) = start();
    let dir = tasks(&[(
        "many",
        call("run", json!({"command": "echo RAN >> log.txt; echo RAN"})),
    )]);
    // `tool-call-5`: run, read_file, write_file, list_dir, copy_file.
    let out = rollout(
        &mc,
        dir.path(),
        &[
            "--json",
            "--model",
            "tool-call-5",
            "--max-tool-calls-per-step",
            "2",
        ],
        &[],
    );
    let runs = summaries(&out);
    assert_eq!(runs["many"]["tool_calls"], 2, "{}", runs["many"]);
    let results = results_of(&mc, &runs, "many");
    assert_eq!(results.len(), 5, "{results:?}");
    assert!(results[0].contains("RAN"), "{results:?}");
    for refused in &results[2..] {
        assert!(
            refused.starts_with("error: not run: at most 2 tool calls are run from one answer"),
            "{refused}"
        );
    }

    let out = rollout(
        &mc,
        dir.path(),
        &["--json", "--model", "tool-call-5", "--max-tool-calls", "3"],
        &[],
    );
    let run = &summaries(&out)["many"];
    assert_eq!(run["finished"], "max_tool_calls", "{run}");
    assert_eq!(run["tool_calls"], 3, "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .contains("more than 3 tool calls"),
        "{run}"
    );
}

/// Where no cgroup can be made and `RLIMIT_NPROC` does not hold (here:
/// root, whom the kernel exempts, with the cgroup tree hidden by a
/// mount namespace of the test's), `run` runs nothing and says why.
/// Run by anyone else, the kernel holds the rlimit: `run` goes ahead,
/// bounded by it or by a cgroup, and says which.
#[test]
fn without_a_process_limit_run_is_refused() {
    let (_up, mc) = start();
    let dir = tasks(&[(
        "run",
        call("run", json!({"command": "touch RAN; echo RAN"})),
    )]);
    if !rustix::process::geteuid().is_root() {
        let out = rollout(&mc, dir.path(), &["--json"], &[]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("limits: 256 processes (RLIMIT_NPROC")
                || said.contains("limits: 256 processes (cgroup"),
            "{said}"
        );
        assert!(
            result_of(&mc, &summaries(&out), "run").contains("RAN"),
            "{said}"
        );
        return;
    }
    let (runs, err) = rollout_in(
        &mc,
        dir.path(),
        &["--mount", "--propagation", "private"],
        "mount -t tmpfs none /sys/fs/cgroup",
    );
    assert!(
        err.contains("run tool: DISABLED: ")
            && err.contains("cannot bound the number of processes"),
        "{err}"
    );
    refused(&mc, &runs);
}
