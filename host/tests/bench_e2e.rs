//! `metaclaw bench run` end to end on the small set, against the dummy
//! upstream (`metaclaw dev upstream`): the real binary, real HTTP, real
//! checks in real workspaces, a real metaclaw per arm with its store,
//! skills, judge and evolver. The models are scripted, so every number the
//! report gives follows from the script and is asserted exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

mod common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use common::{BIN, cli_in, dummy};

const ROUNDS: usize = 61;
const FILE_CHECKS: usize = 36;
const MULTI_CHOICE: usize = 25;

/// `metaclaw bench` with `args`, in a home of its own with an empty
/// config (`BENCH_TEST_KEY` set, for `--api-key-env`).
fn bench_output(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(home.join("config.yaml"))
        .arg("bench")
        .args(args)
        .env("METACLAW_HOME", home)
        .env_remove("METACLAW_LLM_API_KEY")
        .env("METACLAW_NO_WIRE", "1")
        .env("BENCH_TEST_KEY", "test-key")
        .output()
        .unwrap()
}

/// The metaclaw homes of `runs` (`<arm>-<repeat>`) in the run folder
/// `dir`, with the plugins already compiled (as after a first run).
fn warm_homes(dir: &Path, runs: &[&str]) {
    for run in runs {
        let arm_home = dir.join(run).join("home");
        std::fs::create_dir_all(&arm_home).unwrap();
        common::warm_plugin_cache(&arm_home);
    }
}

/// [`bench_output`], which must succeed (else its stderr is shown).
fn bench(home: &Path, args: &[&str]) -> Output {
    let out = bench_output(home, args);
    assert!(
        out.status.success(),
        "bench {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// How many API requests the dummy has answered.
fn dummy_requests(url: &str) -> u64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(common::dummy_stats(url))["requests"]
        .as_u64()
        .unwrap()
}

/// `bench run --set small` of `model` in `arms` against `upstream`, into
/// `out`, with `extra` flags.
fn run_small(
    home: &Path,
    upstream: &str,
    model: &str,
    arms: &str,
    out: &Path,
    extra: &[&str],
) -> Output {
    let mut args = vec![
        "run",
        "--set",
        "small",
        "--model",
        model,
        "--arm",
        arms,
        "--base-url",
        upstream,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    bench(home, &args)
}

fn report(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

fn summary<'a>(report: &'a Value, arm: &str) -> &'a Value {
    report["summary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["arm"] == arm)
        .unwrap_or_else(|| panic!("no {arm} in the summary"))
}

fn rounds<'a>(report: &'a Value, arm: &str) -> Vec<&'a Value> {
    report["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["arm"] == arm)
        .collect()
}

/// Each round's day, id, pass and injected skills, in order: what two runs
/// that must agree are compared by.
fn outcomes<'a>(
    rounds: impl IntoIterator<Item = &'a Value>,
) -> Vec<(String, String, bool, Vec<String>)> {
    rounds
        .into_iter()
        .map(|x| {
            (
                x["day"].as_str().unwrap().to_string(),
                x["round"].as_str().unwrap().to_string(),
                x["score"]["passed"].as_bool().unwrap(),
                serde_json::from_value(x["skills"].clone()).unwrap_or_default(),
            )
        })
        .collect()
}

/// The run's `arms.jsonl` line of `run` (`<arm>-<repeat>`).
fn arm_record(dir: &Path, run: &str) -> Value {
    let (arm, repeat) = run.rsplit_once('-').unwrap();
    let repeat: u64 = repeat.parse().unwrap();
    std::fs::read_to_string(dir.join("arms.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|a| a["arm"] == arm && a["repeat"] == repeat)
        .unwrap_or_else(|| panic!("no {run} in arms.jsonl"))
}

/// The built-in bank's digest computed from the checkout's `skills/` as
/// docs/bench.md says: sha256 of one `<id>\t<sha256 of SKILL.md>\n` line
/// per skill, sorted.
fn bank_of_the_checkout() -> (String, u64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills");
    let mut lines: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let text = std::fs::read(e.path().join("SKILL.md")).ok()?;
            Some(format!(
                "{}\t{}\n",
                e.file_name().to_str().unwrap(),
                metaclaw_core::digest::sha256_hex(text)
            ))
        })
        .collect();
    lines.sort();
    (
        metaclaw_core::digest::sha256_hex(lines.concat()),
        lines.len() as u64,
    )
}

/// The checkout's commit, when the tests run in a git checkout.
fn checkout_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A model that says "I cannot help" scores nothing, strictly or
/// leniently, and changes no file; one that ticks every option and touches
/// no file scores the reference's lenient 24.17% and, strictly, only the
/// two questions whose every option is gold.
#[test]
fn a_null_model_and_the_all_options_exploit_score_what_they_earn() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let null = home.path().join("null");
    let out = run_small(
        home.path(),
        &upstream.url,
        "bench-null",
        "direct",
        &null,
        &[],
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("| direct | **0.0%** |"), "{md}");
    for file in ["report.md", "report.svg", "report.json"] {
        assert!(null.join(file).is_file(), "{file}");
    }
    let r = report(&null);
    let s = &summary(&r, "direct")["mean"];
    assert_eq!(s["rounds"], ROUNDS);
    assert_eq!(s["file_checks"], FILE_CHECKS);
    assert_eq!(s["multi_choice"], MULTI_CHOICE);
    for key in ["strict", "fc_completion", "mc_exact", "lenient"] {
        assert_eq!(s[key], 0.0, "{key}");
    }
    for round in rounds(&r, "direct") {
        assert_eq!(round["score"]["passed"], false);
        assert_eq!(round["files"], serde_json::json!([]), "{round}");
        if round["kind"] == "multi_choice" {
            assert!(
                round["feedback"]
                    .as_str()
                    .unwrap()
                    .starts_with("I could not find your answer")
            );
        }
    }
    assert_eq!(r["nights"].as_array().unwrap().len(), 12);

    let exploit = home.path().join("exploit");
    run_small(
        home.path(),
        &upstream.url,
        "bench-all-options",
        "direct",
        &exploit,
        &[],
    );
    let r = report(&exploit);
    let s = &summary(&r, "direct")["mean"];
    assert_eq!(s["fc_completion"], 0.0);
    assert_eq!(s["strict"], 2.0 / ROUNDS as f64);
    assert_eq!(s["mc_exact"], 2.0 / MULTI_CHOICE as f64);
    assert!(
        (s["lenient"].as_f64().unwrap() - 0.2417).abs() < 5e-5,
        "{s}"
    );
    // Exact-match credit only where every option is gold.
    for round in rounds(&r, "direct") {
        if round["score"]["passed"] == true {
            assert_eq!(
                round["gold"].as_array().unwrap().len(),
                round["options"].as_u64().unwrap() as usize,
                "{round}"
            );
        }
    }
}

/// `--repeat 2`: each repeat runs in a clean metaclaw home of its own, so
/// the second `learn` repeat starts without the skills the first one
/// evolved, and with a deterministic model both score the same, round for
/// round; the summary has both.
#[test]
fn each_repeat_starts_from_a_clean_home() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("run");
    warm_homes(&dir, &["learn-1", "learn-2"]);
    run_small(
        home.path(),
        &upstream.url,
        "bench-oracle",
        "learn",
        &dir,
        &[
            "--repeat",
            "2",
            "--days",
            "2",
            "--judge-model",
            "judge",
            "--evolver-model",
            "bench-evolver",
        ],
    );
    let r = report(&dir);
    let by_repeat = |repeat: u64| {
        let learn = rounds(&r, "learn");
        outcomes(learn.into_iter().filter(|x| x["repeat"] == repeat))
    };
    let (first, second) = (by_repeat(1), by_repeat(2));
    assert_eq!(first.len(), 10, "{first:?}");
    assert_eq!(first, second);
    // Day 1 of either repeat gets no skill evolved by a night before it;
    // day 2 of each gets the one its own first night evolved.
    let evolved = |skills: &[String]| skills.iter().any(|s| s.starts_with("orion-"));
    for repeat in [&first, &second] {
        assert!(
            !repeat
                .iter()
                .filter(|x| x.0 == "day01")
                .any(|x| evolved(&x.3))
        );
        assert!(
            repeat
                .iter()
                .filter(|x| x.0 == "day02")
                .any(|x| evolved(&x.3))
        );
    }
    for repeat in ["learn-1", "learn-2"] {
        assert!(
            dir.join(repeat).join("home/metaclaw.db").is_file(),
            "{repeat}"
        );
        // What its nights evolved is written in the Agent Skills layout:
        // an agent's own skill folder takes it as it is.
        let skills = dir.join(repeat).join("home/skills");
        let names: Vec<String> = std::fs::read_dir(&skills)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(evolved(&names), "{repeat}: {names:?}");
        let out = cli_in(home.path(), &["skills", "check", skills.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{repeat}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let s = summary(&r, "learn");
    assert_eq!(s["repeats"].as_array().unwrap().len(), 2, "{s}");
    assert_eq!(s["repeats"][0]["strict"], s["repeats"][1]["strict"]);
    assert_eq!(s["mean"]["strict"], s["repeats"][0]["strict"]);
}

/// A model call that fails for good (here a 401) stops the run with the
/// reason, where it stopped and how to go on; nothing it did not answer is
/// recorded, so the same command resumes there once the cause is fixed.
#[test]
fn a_failing_model_stops_the_run_and_records_nothing_it_did_not_answer() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("run");
    let out = bench_output(
        home.path(),
        &[
            "run",
            "--model",
            "error-401",
            "--arm",
            "direct",
            "--base-url",
            &upstream.url,
            "--out",
            dir.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for said in [
        "stopped at direct-1 day01 r1",
        "run the same command again to resume here",
        "HTTP 401",
    ] {
        assert!(err.contains(said), "{said:?} not in: {err}");
    }
    let recorded = std::fs::read_to_string(dir.join("rounds.jsonl")).unwrap_or_default();
    assert_eq!(recorded, "", "no round was answered");
    // The report says so rather than scoring a run that never ran.
    assert!(
        std::fs::read_to_string(dir.join("report.md"))
            .unwrap()
            .contains("| direct | – | – | – | – | 0 of 61 |")
    );
}

/// A run cut short resumes at the first round not recorded: the recorded
/// rounds stay as they were and are never asked again, and the day in
/// progress continues its conversation.
#[test]
fn an_interrupted_run_resumes_without_running_a_finished_round_again() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("run");
    let args = [
        "run",
        "--set",
        "small",
        "--model",
        "bench-null",
        "--arm",
        "direct",
        "--base-url",
        &upstream.url,
        "--out",
        dir.to_str().unwrap(),
    ];
    bench(home.path(), &args);
    let lines = std::fs::read_to_string(dir.join("rounds.jsonl")).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), ROUNDS);
    // Cut after round 22 (inside day05), as a crash would: the nights of
    // the days before stay, the rest goes.
    let kept = &lines[..22];
    let last: Value = serde_json::from_str(kept[21]).unwrap();
    let day_of = |l: &str| {
        serde_json::from_str::<Value>(l).unwrap()["day"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cut_day = last["day"].as_str().unwrap().to_string();
    assert_eq!(day_of(lines[22]), cut_day, "the cut falls inside a day");
    std::fs::write(dir.join("rounds.jsonl"), format!("{}\n", kept.join("\n"))).unwrap();
    let nights = std::fs::read_to_string(dir.join("nights.jsonl")).unwrap();
    let nights_kept: Vec<&str> = nights.lines().filter(|l| day_of(l) < cut_day).collect();
    std::fs::write(
        dir.join("nights.jsonl"),
        format!("{}\n", nights_kept.join("\n")),
    )
    .unwrap();

    let requests = || dummy_requests(&upstream.url);
    let before = requests();
    let out = bench(home.path(), &args);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resuming: 22 of 61 rounds already done")
    );
    let after = std::fs::read_to_string(dir.join("rounds.jsonl")).unwrap();
    let after: Vec<&str> = after.lines().collect();
    assert_eq!(after.len(), ROUNDS);
    assert_eq!(&after[..22], kept, "recorded rounds are kept as they were");
    // One call per round not recorded, one closing per day not finished.
    let days_left = 12 - nights_kept.len() as u64;
    assert_eq!(requests() - before, (ROUNDS as u64 - 22) + days_left);
    // The resumed day went on with its conversation: round 23's message
    // carries round 22's feedback.
    let next: Value = serde_json::from_str(after[22]).unwrap();
    assert!(next["message"].as_str().unwrap().starts_with(&format!(
        "[Previous Feedback] {}",
        last["feedback"].as_str().unwrap()
    )));
    let conversation: Vec<Value> = serde_json::from_slice(
        &std::fs::read(dir.join(format!("direct-1/days/{cut_day}/conversation.json"))).unwrap(),
    )
    .unwrap();
    let users = conversation.iter().filter(|m| m["role"] == "user").count();
    let day_rounds = after.iter().filter(|l| day_of(l) == cut_day).count();
    // The seed's user message, each round's, and the closing feedback.
    assert_eq!(users, 1 + day_rounds + 1);
}

/// A run records what measured it: `run.json` names the binary (version
/// and git commit) and the built-in skill bank its metaclaw arms start
/// from, `arms.jsonl` each arm's bank and models, and the report shows
/// them. A resume by another binary, or with another bank, is refused with
/// what differs and how to start afresh, and nothing recorded is touched.
#[test]
fn a_run_records_what_measured_it_and_a_resume_by_another_binary_or_bank_is_refused() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("run");
    let args = [
        "run",
        "--model",
        "bench-null",
        "--arm",
        "direct",
        "--days",
        "1",
        "--base-url",
        &upstream.url,
        "--out",
        dir.to_str().unwrap(),
    ];
    bench(home.path(), &args);
    let run_file = dir.join("run.json");
    let run: Value = serde_json::from_slice(&std::fs::read(&run_file).unwrap()).unwrap();
    let by = &run["measured_by"];
    assert_eq!(
        by["metaclaw"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{run}"
    );
    let commit = by["metaclaw"]["commit"].as_str().unwrap().to_string();
    assert_eq!(
        commit,
        checkout_commit().unwrap_or_else(|| "unknown".into()),
        "{run}"
    );
    let (digest, skills) = bank_of_the_checkout();
    assert_eq!(by["bank"]["digest"], digest.as_str(), "{run}");
    assert_eq!(by["bank"]["skills"], skills, "{run}");
    let direct = arm_record(&dir, "direct-1");
    assert_eq!(
        direct["bank"],
        Value::Null,
        "no metaclaw, no skills: {direct}"
    );
    assert_eq!(direct["serves"]["model"], "bench-null");
    assert_eq!(direct["serves"]["api"], upstream.url.as_str());
    assert_eq!(direct["judge"], Value::Null);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for said in [
        "## What was measured".to_string(),
        format!("metaclaw {} (commit {commit})", env!("CARGO_PKG_VERSION")),
        format!("built-in skill bank sha256:{digest} ({skills} skills)"),
        format!(
            "| direct-1 | bench-null at {} | – (no metaclaw) |",
            upstream.url
        ),
    ] {
        assert!(md.contains(&said), "{said:?} not in:\n{md}");
    }
    // The same binary resumes it (here: finds it finished).
    bench(home.path(), &args);
    let rounds = std::fs::read(dir.join("rounds.jsonl")).unwrap();
    let zeros = "0".repeat(64);
    let other_bank = format!(
        "skill bank sha256:{zeros} ({skills} skills), this binary's bank is sha256:{digest}"
    );
    let other_binary = "commit 0123abc), this is metaclaw".to_string();
    for (what, pointer, value, said) in [
        (
            "bank",
            "/measured_by/bank/digest",
            zeros.as_str(),
            other_bank.as_str(),
        ),
        (
            "binary",
            "/measured_by/metaclaw/commit",
            "0123abc",
            other_binary.as_str(),
        ),
    ] {
        let mut changed = run.clone();
        *changed.pointer_mut(pointer).unwrap() = Value::from(value);
        std::fs::write(&run_file, serde_json::to_vec_pretty(&changed).unwrap()).unwrap();
        let out = bench_output(home.path(), &args);
        assert!(!out.status.success(), "another {what} was resumed");
        let err = String::from_utf8_lossy(&out.stderr);
        for said in [said, "start a fresh run with another --out"] {
            assert!(err.contains(said), "{what}: {said:?} not in: {err}");
        }
        assert_eq!(std::fs::read(dir.join("rounds.jsonl")).unwrap(), rounds);
    }
}

/// The scripted oracle (`bench-oracle`) follows a rule only once it has
/// been told it: by the day's feedback, or by a skill metaclaw injects. It
/// says what it knew in every answer (`[knows: …]`), so every round's score
/// can be checked against what that knowledge implies: the file tasks
/// whose rules it knew pass (but the two no agent can pass), the questions
/// about rules it knew are answered exactly. In `direct` it knows exactly
/// what the day's feedback taught; in `skills` the built-in bank, which
/// names no hidden check, adds nothing that scores; in `learn` the evolver
/// turns each day's feedback into skills that later days retrieve. So
/// `skills` passes exactly the rounds `direct` passes, and `learn` more.
#[test]
fn the_oracle_learns_only_what_it_is_told_and_the_scores_follow() {
    use metaclaw_bench::oracle::{self as bench, Rules, Set};

    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("run");
    warm_homes(&dir, &["skills-1", "learn-1"]);
    run_small(
        home.path(),
        &upstream.url,
        "bench-oracle",
        "direct,skills,learn",
        &dir,
        &["--judge-model", "judge", "--evolver-model", "bench-evolver"],
    );
    let r = report(&dir);
    // Each metaclaw arm started from the built-in bank, served by the
    // benched model; learn's judge and evolver are the flags'.
    let bank = bank_of_the_checkout().0;
    for run in ["skills-1", "learn-1"] {
        let started = arm_record(&dir, run);
        assert_eq!(started["bank"]["digest"], bank.as_str(), "{started}");
        assert_eq!(started["serves"]["model"], "bench-oracle", "{started}");
    }
    assert_eq!(arm_record(&dir, "skills-1")["judge"], Value::Null);
    let learn = arm_record(&dir, "learn-1");
    assert_eq!(learn["judge"]["model"], "judge");
    assert_eq!(learn["evolver"]["model"], "bench-evolver");
    let mut strict = std::collections::BTreeMap::new();
    for arm in ["direct", "skills", "learn"] {
        let mut passed = 0;
        // What the day's feedback taught so far, and what the oracle knew
        // by the last round (it keeps what it once knew, within the day).
        let (mut today, mut taught, mut kept) = (String::new(), Rules::NONE, Rules::NONE);
        for round in rounds(&r, arm) {
            let (day, id) = (
                round["day"].as_str().unwrap(),
                round["round"].as_str().unwrap(),
            );
            let what = format!("{arm} {day} {id}");
            let day_n: u32 = day.trim_start_matches("day").parse().unwrap();
            if today != day {
                (today, taught, kept) = (day.to_string(), Rules::NONE, Rules::NONE);
            }
            if let Some(feedback) = bench::feedback_part(round["message"].as_str().unwrap()) {
                taught |= bench::taught(feedback);
            }
            let knew = bench::knows_tag(round["answer"].as_str().unwrap())
                .unwrap_or_else(|| panic!("{what}: no [knows] tag: {}", round["answer"]));
            let told = taught | kept;
            assert!(
                knew.contains_all(told),
                "{what}: knew {knew}, was told {told}"
            );
            if arm == "direct" {
                assert_eq!(knew, taught, "{what}: direct knows only the day's feedback");
            } else if knew != told {
                assert!(
                    !round["skills"].as_array().unwrap().is_empty(),
                    "{what}: knew {knew} beyond what it was told ({told}) without a skill"
                );
            }
            kept = knew;
            let expected = if round["kind"] == "file_check" {
                let script = bench::script(day_n, id).unwrap();
                !bench::UNPASSABLE.contains(&(day_n, id)) && knew.contains_all(script.rules)
            } else {
                let def = bench::round(Set::Small, day_n, id).unwrap();
                let answer = bench::mc_answer(def, knew);
                let letters: Vec<String> = answer
                    .trim_start_matches("\\bbox{")
                    .trim_end_matches('}')
                    .split(',')
                    .map(str::to_string)
                    .collect();
                letters == def.gold
            };
            assert_eq!(
                round["score"]["passed"], expected,
                "{what}: knew {knew}; checks {}",
                round["checks"]
            );
            passed += usize::from(expected);
        }
        let s = &summary(&r, arm)["mean"];
        assert_eq!(s["strict"], passed as f64 / ROUNDS as f64, "{arm}");
        strict.insert(arm, passed);
    }
    // The oracle scores only by the hidden rules, so a margin of `skills`
    // over `direct` could only come from a built-in skill stating one. None
    // does: round for round the same passes. (With 1.2.0 of the two file
    // skills, which suggested `file.bak`, the P4 check's file, `skills`
    // passed two rounds more: day08 r1 and day11 r3.)
    let passes = |arm: &str| -> Vec<(String, String, bool)> {
        outcomes(rounds(&r, arm))
            .into_iter()
            .map(|(day, round, passed, _)| (day, round, passed))
            .collect()
    };
    assert_eq!(passes("skills"), passes("direct"));
    assert!(
        strict["learn"] > strict["direct"],
        "learn > direct: {strict:?}"
    );
    // Only the learning arm evolved skills at night.
    let evolved = |arm: &str| -> usize {
        r["nights"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["arm"] == arm)
            .map(|n| n["night"]["evolved"].as_array().map_or(0, Vec::len))
            .sum()
    };
    assert_eq!(evolved("skills"), 0);
    assert!(evolved("learn") > 0);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Skills evolved each night"), "{md}");

    // The direct arm speaks Anthropic's Messages API too (the agent's chat
    // requests translated, tool calls and results included): the same
    // oracle passes the same rounds.
    let anthropic = home.path().join("anthropic");
    run_small(
        home.path(),
        &upstream.url,
        "bench-oracle",
        "direct",
        &anthropic,
        &[
            "--api-format",
            "anthropic",
            "--api-key-env",
            "BENCH_TEST_KEY",
        ],
    );
    let direct = |r: &Value| outcomes(rounds(r, "direct"));
    assert_eq!(direct(&report(&anthropic)), direct(&r));
}

/// The fake Tinker service, in this process (on the runtime returned).
fn fake_tinker() -> (tokio::runtime::Runtime, String) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let fake = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(metaclaw_mock_tinker::serve(listener));
        fake
    });
    (rt, fake)
}

/// A config whose `rl` arms train on the fake at `fake`.
fn rl_config(home: &Path, fake: &str) {
    std::fs::write(
        home.join("config.yaml"),
        format!(
            "rl:\n  model: fake-bigram\n  tinker_base_url: {fake}\n  tinker_api_key: tml-dummy\n  \
             tokenizer_path: {}\n  lora_rank: 4\n  batch_size: 2\n  save_every: 1\n  \
             manual_train_trigger: true\n  prm_m: 1\n",
            common::rl_daemon::fixture()
        ),
    )
    .unwrap();
}

/// The `rl+learn` arm: metaclaw in `mode: rl` serves the agent with the
/// trainable model (the fake Tinker service's, in this process), each
/// night judges the day, evolves skills and takes a train step on its
/// samples, and the next days are served by the new weights.
#[test]
fn the_rl_learn_arm_serves_the_student_and_trains_each_night() {
    let (rt, fake) = fake_tinker();
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    rl_config(home.path(), &fake);
    let dir = home.path().join("run");
    warm_homes(&dir, &["rl+learn-1"]);
    run_small(
        home.path(),
        &upstream.url,
        "echo",
        "rl+learn",
        &dir,
        &["--judge-model", "judge", "--evolver-model", "bench-evolver"],
    );
    let r = report(&dir);
    let policy = |round: &Value| -> u64 {
        let by = round["served_by"][0].as_str().unwrap_or("");
        assert!(by.starts_with("student; policy_version="), "{round}");
        by.rsplit('=').next().unwrap().parse().unwrap()
    };
    let rounds = rounds(&r, "rl+learn");
    assert_eq!(rounds.len(), ROUNDS);
    // Every night took its train step's turn: a step, or why not (too
    // few samples, or none with signal), never an error.
    let nights: Vec<&Value> = r["nights"].as_array().unwrap().iter().collect();
    assert_eq!(nights.len(), 12);
    for night in &nights {
        let outcome = night["night"]["train"]["outcome"].as_str();
        assert!(
            matches!(outcome, Some("stepped" | "waiting" | "no_signal")),
            "{night}"
        );
    }
    // After a night's step, the next day is served by its weights.
    let stepped: Vec<(String, u64)> = nights
        .iter()
        .filter(|n| n["night"]["train"]["outcome"] == "stepped")
        .map(|n| {
            (
                n["day"].as_str().unwrap().to_string(),
                n["night"]["train"]["step"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(!stepped.is_empty(), "no night stepped: {}", r["nights"]);
    // What the run records of it: the student served (its base model at
    // the training service, and the policy versions the rounds name), the
    // nights that trained and the samples they used.
    let started = arm_record(&dir, "rl+learn-1");
    assert_eq!(started["student"], true, "{started}");
    assert_eq!(started["serves"]["model"], "fake-bigram");
    assert_eq!(started["serves"]["api"], fake.as_str());
    assert_eq!(started["judge"]["model"], "judge");
    assert_eq!(started["evolver"]["model"], "bench-evolver");
    assert_eq!(started["bank"]["digest"], bank_of_the_checkout().0.as_str());
    let measured = &r["arms"][0];
    assert_eq!(measured["run"], "rl+learn-1");
    let versions: std::collections::BTreeSet<u64> = rounds.iter().map(|x| policy(x)).collect();
    assert_eq!(
        measured["policy_versions"],
        serde_json::json!(versions.iter().collect::<Vec<_>>())
    );
    let training = &measured["training"];
    assert_eq!(training["nights"], 12);
    let trained_days: Vec<&str> = stepped.iter().map(|(day, _)| day.as_str()).collect();
    assert_eq!(training["nights_trained"], serde_json::json!(trained_days));
    let samples: u64 = nights
        .iter()
        .filter_map(|n| n["night"]["trained"]["samples"].as_u64())
        .sum();
    assert!(samples > 0);
    assert_eq!(training["samples_trained"], samples);
    // Each trained sample is in the arm's store once, as trained.
    assert_eq!(training["samples"]["trained"], samples, "{training}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let said = format!(
        "rl+learn-1: {} of 12 nights trained ({}); {samples} samples trained",
        stepped.len(),
        trained_days.join(", ")
    );
    assert!(md.contains(&said), "{said:?} not in:\n{md}");
    assert!(
        md.contains("| rl+learn-1 | student: fake-bigram at "),
        "{md}"
    );
    for (day, step) in &stepped {
        let next_day = rounds
            .iter()
            .find(|r| r["day"].as_str().unwrap() > day.as_str());
        if let Some(round) = next_day {
            assert_eq!(policy(round), *step, "the day after {day}'s step {step}");
        }
    }
    drop(rt);
}

/// An agent that only writes files (`bench-planter`: in every file-check
/// round it plants `glob.py`, `json.py`, `re.py`, `sitecustomize.py` and a
/// user site's `usercustomize.py` and `.pth`, each of which, imported,
/// would pass the check, copy the environment into the workspace and write
/// an answer-key skill into the arm's library) scores what the null model
/// scores, in every arm, round for round and check for check: nothing.
#[test]
fn an_agent_that_only_plants_files_scores_what_the_null_model_scores() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let helpers = ["--judge-model", "judge", "--evolver-model", "bench-evolver"];
    let mut reports = Vec::new();
    for model in ["bench-null", "bench-planter"] {
        let dir = home.path().join(model);
        warm_homes(&dir, &["skills-1", "learn-1"]);
        run_small(
            home.path(),
            &upstream.url,
            model,
            "direct,skills,learn",
            &dir,
            &helpers,
        );
        reports.push(report(&dir));
    }
    let planted_dir = home.path().join("bench-planter");
    // Each round's verdict and each part's exit code.
    let verdicts = |rs: &[&Value]| -> Vec<(String, String, bool, Vec<i64>)> {
        rs.iter()
            .map(|r| {
                let codes = r["checks"]
                    .as_array()
                    .map(|parts| parts.iter().map(|p| p["code"].as_i64().unwrap()).collect())
                    .unwrap_or_default();
                let (day, round) = (r["day"].as_str().unwrap(), r["round"].as_str().unwrap());
                let passed = r["score"]["passed"].as_bool().unwrap();
                (day.to_string(), round.to_string(), passed, codes)
            })
            .collect()
    };
    for arm in ["direct", "skills", "learn"] {
        let (null, planter) = (rounds(&reports[0], arm), rounds(&reports[1], arm));
        assert_eq!(planter.len(), ROUNDS, "{arm}");
        assert_eq!(verdicts(&planter[..]), verdicts(&null[..]), "{arm}");
        assert_eq!(summary(&reports[1], arm)["mean"]["strict"], 0.0, "{arm}");
        for round in &planter {
            if round["kind"] == "file_check" {
                let planted = round["tools"].as_array().unwrap().iter().any(|t| {
                    t["name"] == "write_file"
                        && t["arguments"]
                            .as_str()
                            .unwrap()
                            .contains(r#""path":"glob.py""#)
                        && t["result"].as_str().unwrap().starts_with("wrote")
                });
                assert!(planted, "{arm}: {round}");
            }
        }
        // What the planted modules do, had any run: nothing of it is there.
        let arm_dir = planted_dir.join(format!("{arm}-1"));
        assert!(!arm_dir.join("home/skills/answer-key").exists(), "{arm}");
        for day in std::fs::read_dir(arm_dir.join("days")).unwrap() {
            let work = day.unwrap().path().join("work");
            assert!(work.join("glob.py").is_file(), "{}", work.display());
            assert!(!work.join("leaked-env.txt").exists(), "{}", work.display());
        }
    }
}

/// Where the checks cannot be confined (here: no user namespaces, the
/// limit set to 0 in a namespace of the test's own), the run does not
/// start: it says why up front and records nothing.
#[test]
fn without_a_sandbox_for_the_checks_the_run_does_not_start() {
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    let out_dir = home.path().join("run");
    let out = Command::new("unshare")
        .args(["-Ur", "sh", "-c"])
        .arg(r#"echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@""#)
        .arg(BIN)
        .arg("--config")
        .arg(home.path().join("config.yaml"))
        .args(["bench", "run", "--set", "small", "--model", "bench-null"])
        .args(["--arm", "direct", "--base-url", &upstream.url, "--out"])
        .arg(&out_dir)
        .env("METACLAW_HOME", home.path())
        .env("METACLAW_NO_WIRE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the file checks cannot run confined, so nothing was run")
            && stderr.contains("max_user_namespaces"),
        "{stderr}"
    );
    assert!(!out_dir.join("rounds.jsonl").exists());
    assert_eq!(dummy_requests(&upstream.url), 0);
}

/// `--split`: every second day is held out. The learning arms (`learn`
/// with the oracle and the scripted evolver; `rl`, the student trained on
/// the fake Tinker service, no skill evolved) judge, evolve and train on
/// the training days only, as their stores show: no learning job, no
/// evolved draft and no trained sample comes from a held-out day's
/// session; and the report scores the held-out days apart, labelled.
#[test]
fn with_split_the_learning_arms_learn_from_the_training_days_only() {
    let (rt, fake) = fake_tinker();
    let upstream = dummy();
    let home = tempfile::tempdir().unwrap();
    rl_config(home.path(), &fake);
    let dir = home.path().join("run");
    warm_homes(&dir, &["learn-1", "rl-1"]);
    run_small(
        home.path(),
        &upstream.url,
        "bench-oracle",
        "learn,rl",
        &dir,
        &[
            "--split",
            "--days",
            "4",
            "--judge-model",
            "judge",
            "--evolver-model",
            "bench-evolver",
        ],
    );
    let r = report(&dir);
    let held = ["day02", "day04"];
    // The nights: a held-out day's session ends held out, nothing else.
    for night in r["nights"].as_array().unwrap() {
        let day = night["day"].as_str().unwrap();
        let n = &night["night"];
        match held.contains(&day) {
            true => {
                assert_eq!(n["held_out"], true, "{night}");
                assert!(n["jobs"].is_null() && n["train"].is_null(), "{night}");
            }
            false => assert!(n["jobs"].is_array(), "{night}"),
        }
    }
    for arm in ["learn", "rl"] {
        let db = dir.join(format!("{arm}-1/home/metaclaw.db"));
        let conn = metaclaw_core::store::Db::at(&db).read().unwrap();
        let strings = |sql: &str| -> Vec<String> {
            let mut stmt = conn.prepare(sql).unwrap();
            stmt.query_map((), |r| r.get(0))
                .unwrap()
                .collect::<metaclaw_core::store::sql::Result<_>>()
                .unwrap()
        };
        let of_held = |sessions: &[String]| {
            sessions
                .iter()
                .filter(|s| held.iter().any(|d| s.ends_with(d)))
                .count()
        };
        let jobs = strings("SELECT session_id FROM learning_jobs");
        assert_eq!(jobs.len(), 2, "{arm}: {jobs:?}");
        assert_eq!(of_held(&jobs), 0, "{arm}: {jobs:?}");
        let ended = strings("SELECT id FROM sessions WHERE end_reason = 'held_out'");
        assert_eq!(of_held(&ended), 2, "{arm}: {ended:?}");
        let drafts = strings("SELECT session_id FROM evolved_drafts");
        assert_eq!(of_held(&drafts), 0, "{arm}: {drafts:?}");
        let trained = strings(
            "SELECT t.session_id FROM turn_samples s JOIN turns t ON t.id = s.turn_id
             WHERE s.train_state IN ('trained', 'in_step', 'ready')",
        );
        assert_eq!(of_held(&trained), 0, "{arm}: {trained:?}");
        match arm {
            // The oracle is told the rules on day01 and day03: skills follow.
            "learn" => assert!(!drafts.is_empty(), "learn evolved nothing"),
            // rl evolves no skill; it trains on the training days' samples.
            _ => {
                assert!(drafts.is_empty(), "rl evolved {drafts:?}");
                assert!(!trained.is_empty(), "rl trained nothing");
                let waiting = strings(
                    "SELECT t.session_id FROM turn_samples s JOIN turns t ON t.id = s.turn_id
                     WHERE s.train_state = 'waiting'",
                );
                assert!(
                    of_held(&waiting) > 0,
                    "the held-out days' samples: {waiting:?}"
                );
            }
        }
    }
    // The report: the held-out days' scores apart, labelled.
    let learn = summary(&r, "learn");
    let held_rounds: usize = rounds(&r, "learn")
        .iter()
        .filter(|x| held.contains(&x["day"].as_str().unwrap()))
        .count();
    assert_eq!(learn["held_out"]["rounds"], held_rounds, "{learn}");
    assert_eq!(
        learn["training_days"]["rounds"].as_u64().unwrap() as usize + held_rounds,
        learn["mean"]["rounds"].as_u64().unwrap() as usize
    );
    let passed = rounds(&r, "learn")
        .iter()
        .filter(|x| held.contains(&x["day"].as_str().unwrap()) && x["score"]["passed"] == true)
        .count();
    let strict = learn["held_out"]["strict"].as_f64().unwrap();
    assert!(
        (strict - passed as f64 / held_rounds as f64).abs() < 1e-9,
        "{learn}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for said in [
        "**Held-out days (`--split`)**: day02, day04 (marked H)",
        "## Held-out days: the scores that count",
        "| day02 (H) |",
        "the held-out numbers (H) score days no arm learned from",
    ] {
        assert!(md.contains(said), "{said:?} not in:\n{md}");
    }
    let settings: Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(settings["split"], true, "{settings}");
    drop(rt);
}
