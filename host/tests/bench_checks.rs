//! The bench's file checks, run as `bench run` runs them (`metaclaw bench
//! check-round`, the real binary): every part in the sandbox, on a scratch
//! copy of the workspace, with `python` the system's Python 3 in isolated
//! mode. Attacked as an agent that only writes files would attack them:
//! modules planted where an unconfined Python would import them (each one
//! shown to work against a plain `python3` first, so these tests fail if
//! the isolation goes), and planted code that, run inside a check, tries
//! to reach the environment, the network, metaclaw's binary, the arm's
//! home and the real workspace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use common::BIN;

/// A secret in metaclaw's environment, which no check may see.
const SECRET: &str = "sk-bench-checks-secret-4711";

/// `metaclaw bench check-round ARGS --json` through `bin`, with the
/// secret in its environment (and `PYTHONPATH=.`, which an inherited
/// environment would hand to Python).
fn check_round_with(bin: &str, home: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(["bench", "check-round", "--json"])
        .args(args)
        .env("METACLAW_HOME", home)
        .env("METACLAW_NO_WIRE", "1")
        .env("METACLAW_LLM_API_KEY", SECRET)
        .env("BENCH_SECRET", SECRET)
        .env("PYTHONPATH", ".")
        .output()
        .unwrap()
}

fn check_round(home: &Path, args: &[&str]) -> Output {
    check_round_with(BIN, home, args)
}

/// `command` checked against the workspace `ws` through `bin`: the verdict.
fn check_command(bin: &str, home: &Path, command: &str, ws: &Path) -> Vec<Value> {
    let args = ["--command", command, "--workspace", ws.to_str().unwrap()];
    verdicts(&check_round_with(bin, home, &args))
}

/// The rounds checked: the JSON on stdout (exit 0 or 1, never an error).
fn verdicts(out: &Output) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "check-round failed to check: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str::<Vec<Value>>(stdout.trim()).unwrap_or_else(|e| panic!("{stdout}: {e}"))
}

/// Every file under `dir` with its bytes (links as their targets).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                todo.push(path);
            } else if meta.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, target.into_os_string().into_encoded_bytes());
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// The Python the sandbox runs: the first `python3` of its system PATH.
fn system_python() -> PathBuf {
    ["/usr/local/bin/python3", "/usr/bin/python3", "/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("python3 in /usr/local/bin or /usr/bin (the bench's checks need it)")
}

/// `python3` run plainly (not isolated) in `dir` with `env`: what the
/// checks did before they were confined.
fn unconfined(dir: &Path, code: &str, env: &[(&str, &str)]) -> i32 {
    Command::new(system_python())
        .args(["-c", code])
        .current_dir(dir)
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .envs(env.iter().copied())
        .status()
        .unwrap()
        .code()
        .unwrap()
}

fn python_eval(expr: &str) -> String {
    let out = Command::new(system_python())
        .args(["-c", &format!("print({expr})")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// No file check passes on a day's untouched workspace (reference §8),
/// all 36 of the small set, each run confined.
#[test]
fn an_untouched_workspace_fails_every_check() {
    let home = tempfile::tempdir().unwrap();
    let mut rounds = 0;
    for day in 1..=12 {
        let day = format!("day{day:02}");
        let out = check_round(home.path(), &["--day", &day]);
        for round in verdicts(&out) {
            assert_eq!(round["passed"], false, "{round}");
            rounds += 1;
        }
        assert_eq!(out.status.code(), Some(1), "{day}");
    }
    assert_eq!(rounds, 36);
}

/// A `$(python -c …)` substitution is expanded in the sandbox (on the
/// copy) and reaches the native checker, which reads the workspace.
#[test]
fn a_substituted_path_reaches_the_checker() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("day05")).unwrap();
    let notes = ws.path().join("day05/20260330_notes.md");
    std::fs::write(
        &notes,
        "---\ncreated_at: 2026-03-30T09:00:00+08:00\nauthor: metaclaw_agent\nstatus: done\n---\n# Notes\n",
    )
    .unwrap();
    let command = r#"python -c "import glob,sys; files=sorted(glob.glob('day05/20260330_*.md')); sys.exit(0 if files else 1)" && python scripts/check_metadata.py $(python -c "import glob; print(sorted(glob.glob('day05/20260330_*.md'))[0])")"#;
    let v = check_command(BIN, home.path(), command, ws.path());
    assert_eq!(v[0]["passed"], true, "{v:?}");
    assert_eq!(v[0]["parts"][1]["checker"], "metadata");
    std::fs::write(&notes, "# Notes\n").unwrap();
    let v = check_command(BIN, home.path(), command, ws.path());
    let parts = &v[0]["parts"];
    assert_eq!(
        (parts[0]["code"].as_i64(), parts[1]["code"].as_i64()),
        (Some(0), Some(1)),
        "{v:?}"
    );
}

/// What a planted module does when imported (at startup too, where a
/// `SystemExit` would be a fatal error): the check "passes".
const PASS: &str = "import os\nos._exit(0)\n";

/// Three inline checks as the bench writes them (glob, json, re), each
/// failing honestly on [`honest_workspace`].
const CHECKS: [&str; 3] = [
    r#"python -c "import glob,sys; files=sorted(glob.glob('day05/20260330_*.md')); sys.exit(0 if files else 1)""#,
    r#"python -c "import json,sys; d=json.load(open('day05/tasks.json')); sys.exit(0 if d.get('done') else 1)""#,
    r#"python -c "import re,sys; sys.exit(0 if re.match(r'^\d{4}$', open('day05/year.txt').read()) else 1)""#,
];

/// A workspace on which every one of [`CHECKS`] fails.
fn honest_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("day05")).unwrap();
    std::fs::write(ws.path().join("day05/tasks.json"), r#"{"done": false}"#).unwrap();
    std::fs::write(ws.path().join("day05/year.txt"), "abcd").unwrap();
    ws
}

/// The check code of `CHECKS[i]` (what `python -c` runs).
fn check_code(i: usize) -> String {
    let c = CHECKS[i];
    c[c.find('"').unwrap() + 1..c.rfind('"').unwrap()].to_string()
}

/// Each planted module would make the check pass in an unconfined Python
/// (shown first, with the environment it needs); in the check sandbox the
/// same checks fail honestly, and the real workspace is not changed.
#[test]
fn planted_modules_never_make_a_check_pass() {
    let home = tempfile::tempdir().unwrap();
    let tag = python_eval("__import__('sys').implementation.cache_tag");
    let version = python_eval("'%d.%d' % __import__('sys').version_info[:2]");
    let site = format!(".local/lib/python{version}/site-packages");
    // A module compiled to bytecode: a sourceless `.pyc`, or a
    // `__pycache__` entry that is used whatever its source says.
    let compiled = |ws: &Path, name: &str, to: &str, mode: &str| {
        let src = ws.join(format!("{name}-src.py"));
        std::fs::write(&src, PASS).unwrap();
        let to = ws.join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let code = format!(
            "import py_compile; py_compile.compile({:?}, cfile={:?}, doraise=True, \
             invalidation_mode=py_compile.PycInvalidationMode.{mode})",
            src.to_str().unwrap(),
            to.to_str().unwrap()
        );
        assert_eq!(unconfined(ws, &code, &[]), 0);
        std::fs::remove_file(src).unwrap();
    };
    // (what, plant it, which check it games, the environment an
    // unconfined Python needed to fall for it)
    type Plant = Box<dyn Fn(&Path)>;
    let home_env = |ws: &Path| ws.to_str().unwrap().to_string();
    let plants: Vec<(&str, Plant, usize, bool)> = vec![
        (
            "glob.py",
            Box::new(|ws: &Path| std::fs::write(ws.join("glob.py"), PASS).unwrap()) as Plant,
            0,
            false,
        ),
        (
            "json.py",
            Box::new(|ws: &Path| std::fs::write(ws.join("json.py"), PASS).unwrap()) as Plant,
            1,
            false,
        ),
        (
            "re.py",
            Box::new(|ws: &Path| std::fs::write(ws.join("re.py"), PASS).unwrap()) as Plant,
            2,
            false,
        ),
        (
            "sitecustomize.py",
            Box::new(|ws: &Path| std::fs::write(ws.join("sitecustomize.py"), PASS).unwrap())
                as Plant,
            0,
            false,
        ),
        (
            "a user site's usercustomize.py",
            Box::new({
                let site = site.clone();
                move |ws: &Path| {
                    std::fs::create_dir_all(ws.join(&site)).unwrap();
                    std::fs::write(ws.join(&site).join("usercustomize.py"), PASS).unwrap();
                }
            }) as Plant,
            0,
            true,
        ),
        (
            "a user site's .pth",
            Box::new({
                let site = site.clone();
                move |ws: &Path| {
                    std::fs::create_dir_all(ws.join(&site)).unwrap();
                    std::fs::write(ws.join(&site).join("zz.pth"), "import os; os._exit(0)\n")
                        .unwrap();
                }
            }) as Plant,
            0,
            true,
        ),
        (
            "a sourceless glob.pyc",
            Box::new(move |ws: &Path| compiled(ws, "glob", "glob.pyc", "TIMESTAMP")) as Plant,
            0,
            false,
        ),
        (
            "__pycache__ under an innocent glob.py",
            Box::new({
                let tag = tag.clone();
                move |ws: &Path| {
                    let pyc = format!("__pycache__/glob.{tag}.pyc");
                    compiled(ws, "glob", &pyc, "UNCHECKED_HASH");
                    std::fs::write(ws.join("glob.py"), "# the real glob, honestly\n").unwrap();
                }
            }) as Plant,
            0,
            false,
        ),
    ];
    let command = CHECKS.join(" && ");
    for (what, plant, gamed, needs_home) in plants {
        let ws = honest_workspace();
        plant(ws.path());
        // Unconfined, as the checks ran before: the plant works.
        let mut env = vec![("PYTHONPATH", ".".to_string())];
        if needs_home {
            env.push(("HOME", home_env(ws.path())));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            unconfined(ws.path(), &check_code(gamed), &env),
            0,
            "{what}: the plant does not even work unconfined"
        );
        let before = snapshot(ws.path());
        let v = check_command(BIN, home.path(), &command, ws.path());
        assert_eq!(v[0]["passed"], false, "{what}: {v:?}");
        let parts = v[0]["parts"].as_array().unwrap();
        assert_eq!(parts.len(), 3);
        for part in parts {
            // The honest verdict (1), not a pass, not a crash of Python.
            assert_eq!(part["code"], 1, "{what}: {part}");
        }
        assert_eq!(snapshot(ws.path()), before, "{what}: the workspace changed");
    }
}

/// Agent code that does run inside a check (here the command runs it on
/// purpose) reaches nothing: not the secret in metaclaw's environment, not
/// a listener on the host's loopback, not metaclaw's binary or the arm's
/// home, and writes only to the scratch copy, which is thrown away.
#[test]
fn code_run_in_a_check_reaches_nothing_outside_its_scratch_copy() {
    let home = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // Another arm's home: a skill and the admin token.
    let arm = tempfile::tempdir().unwrap();
    let skill = arm.path().join("skills/p4/SKILL.md");
    std::fs::create_dir_all(skill.parent().unwrap()).unwrap();
    std::fs::write(&skill, "---\nname: p4\n---\nKeep a .bak.\n").unwrap();
    let token = arm.path().join("admin-token");
    std::fs::write(&token, "admin-token-value").unwrap();
    let outside = arm.path().join("outside.txt");
    let ws = honest_workspace();
    let evil = format!(
        r#"import json, os, socket
results = {{}}
def attempt(name, f):
    try:
        results[name] = "ok: " + repr(f())[:200]
    except BaseException as e:
        results[name] = "refused: " + type(e).__name__
attempt("env", lambda: os.environ["BENCH_SECRET"])
attempt("key", lambda: os.environ["METACLAW_LLM_API_KEY"])
attempt("connect", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=3).close())
attempt("binary", lambda: open({bin:?}, "rb").read(16))
attempt("skill", lambda: open({skill:?}).read())
attempt("token", lambda: open({token:?}).read())
attempt("write-skill", lambda: open({skill:?}, "w").write("answer key"))
attempt("write-outside", lambda: open({outside:?}, "w").write("pwned"))
attempt("write-workspace", lambda: open({real:?}, "w").write("pwned"))
attempt("write-parent", lambda: open("../escape.txt", "w").write("pwned"))
attempt("proc", lambda: os.listdir("/proc"))
attempt("write-here", lambda: open("inside.txt", "w").write("scratch"))
attempt("environ", lambda: sorted(os.environ))
print(json.dumps(results))
"#,
        bin = BIN,
        skill = skill.to_str().unwrap(),
        token = token.to_str().unwrap(),
        outside = outside.to_str().unwrap(),
        real = ws.path().join("pwned.txt").to_str().unwrap(),
    );
    std::fs::write(ws.path().join("evil.py"), evil).unwrap();
    let before = snapshot(ws.path());
    let v = check_command(BIN, home.path(), "python evil.py", ws.path());
    let part = &v[0]["parts"][0];
    assert_eq!(part["code"], 0, "{part}");
    let output = part["output"].as_str().unwrap();
    assert!(!output.contains(SECRET), "{output}");
    let results: BTreeMap<String, String> = serde_json::from_str(output).unwrap();
    for refused in [
        "env",
        "key",
        "connect",
        "binary",
        "skill",
        "token",
        "write-skill",
        "write-outside",
        "write-workspace",
        "write-parent",
        "proc",
    ] {
        assert!(
            results[refused].starts_with("refused"),
            "{refused}: {results:?}"
        );
    }
    // The code did run (the scratch copy is writable), with nothing of the
    // host's environment but the sandbox's own few variables.
    assert!(results["write-here"].starts_with("ok"), "{results:?}");
    assert_eq!(
        results["environ"],
        "ok: ['HOME', 'LANG', 'LOGNAME', 'PATH', 'PWD', 'SHELL', 'TERM', 'TMPDIR', 'USER']",
    );
    // Nothing outside was touched, and the listener was never reached.
    assert!(matches!(
        listener.accept(),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    ));
    assert_eq!(
        std::fs::read_to_string(&skill).unwrap(),
        "---\nname: p4\n---\nKeep a .bak.\n"
    );
    assert_eq!(
        std::fs::read_to_string(&token).unwrap(),
        "admin-token-value"
    );
    assert!(!outside.exists());
    assert_eq!(snapshot(ws.path()), before, "the real workspace changed");
    assert!(!ws.path().parent().unwrap().join("escape.txt").exists());
}

/// metaclaw installed under a folder the sandbox binds read-only (here a
/// copy in `/usr/local/lib`): its binary, which holds the bench's answers,
/// cannot be read inside, while the folder around it can.
#[test]
fn metaclaw_under_a_system_folder_is_hidden_in_the_sandbox() {
    struct Installed(PathBuf);
    impl Drop for Installed {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Installed(PathBuf::from(format!(
        "/usr/local/lib/metaclaw-checks-test-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let bin = dir.0.join("metaclaw");
    std::fs::copy(BIN, &bin).unwrap();
    let beside = dir.0.join("beside.txt");
    std::fs::write(&beside, "visible").unwrap();

    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let code = format!(
        r#"python -c "
print(open('{beside}').read())
try:
    data = open('{bin}', 'rb').read(4)
    print('read', len(data))
except OSError as e:
    print('refused', type(e).__name__)
""#,
        beside = beside.to_str().unwrap(),
        bin = bin.to_str().unwrap(),
    );
    let v = check_command(bin.to_str().unwrap(), home.path(), &code, ws.path());
    let output = v[0]["parts"][0]["output"].as_str().unwrap();
    assert_eq!(output, "visible\nrefused PermissionError", "{v:?}");
}

/// Without user namespaces (here the limit set to 0 in a namespace of the
/// test's own) the checks cannot be confined, so none runs: the command
/// says why instead of a verdict.
#[test]
fn without_a_sandbox_no_check_runs() {
    let home = tempfile::tempdir().unwrap();
    let ws = honest_workspace();
    let out = Command::new("unshare")
        .args(["-Ur", "sh", "-c"])
        .arg(r#"echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@""#)
        .arg(BIN)
        .args(["bench", "check-round", "--json", "--command", CHECKS[0]])
        .arg("--workspace")
        .arg(ws.path())
        .env("METACLAW_HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("the checks cannot run confined, so none was run")
            && stderr.contains("max_user_namespaces"),
        "{stderr}"
    );
}
