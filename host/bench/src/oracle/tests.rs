use super::*;

fn rules(text: &str) -> Rules {
    Rules::parse(text).unwrap()
}

/// What a round's check command needs, read off the command: each checker's
/// rule (metadata and done.log also need P1 timestamps), inline `+08:00`
/// checks, and `YYYYMMDD_*` globs.
fn command_rules(command: &str) -> Rules {
    let mut k = Rules::NONE;
    let has = |s: &str| command.contains(s);
    if has("check_iso8601") || has("+08:00") {
        k = k.with(Rule::P1);
    }
    if has("check_filename") || has_date_glob(command) {
        k = k.with(Rule::P2);
    }
    if has("check_metadata") {
        k = k.with(Rule::P3).with(Rule::P1);
    }
    if has("check_backup") {
        k = k.with(Rule::P4);
    }
    if has("check_done_log") {
        k = k.with(Rule::P5).with(Rule::P1);
    }
    k
}

fn has_date_glob(command: &str) -> bool {
    command
        .as_bytes()
        .windows(10)
        .any(|w| w[..8].iter().all(u8::is_ascii_digit) && &w[8..] == b"_*")
}

fn small_fc() -> Vec<&'static Round> {
    rounds()
        .iter()
        .filter(|r| r.set == Set::Small && r.kind == Kind::FileCheck)
        .collect()
}

fn text_of(reply: &Reply) -> &str {
    match reply {
        Reply::Text(t) => t,
        Reply::Calls { calls, .. } => panic!("tool calls, not text: {calls:?}"),
    }
}

fn calls_of(reply: &Reply) -> &[ToolCall] {
    match reply {
        Reply::Calls { calls, .. } => calls,
        Reply::Text(t) => panic!("text, not tool calls: {t}"),
    }
}

fn written<'a>(calls: &'a [ToolCall], path: &str) -> Option<&'a str> {
    calls
        .iter()
        .rev()
        .find(|c| c.name == "write_file" && c.arguments["path"] == path)
        .and_then(|c| c.arguments["content"].as_str())
}

const SYSTEM: &str =
    "You are MetaClaw Agent. Times in Beijing are +08:00 (this is the identity, not a skill).";

fn with_skills(skills: &str) -> String {
    format!("{SYSTEM}\n\n<!-- metaclaw:skills -->\n## Skills\n{skills}\n<!-- /metaclaw:skills -->")
}

fn conversation(system: &str, users: &[String]) -> Vec<Value> {
    let mut m = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Good morning! Today is Monday, March 16, 2026."}),
        json!({"role": "assistant", "content": "Good morning!"}),
    ];
    for (i, u) in users.iter().enumerate() {
        if i > 0 {
            m.push(json!({"role": "assistant", "content": "ok"}));
        }
        m.push(json!({"role": "user", "content": u}));
    }
    m
}

fn small(day: u32, id: &str) -> &'static Round {
    round(Set::Small, day, id).unwrap()
}

#[test]
fn rules_show_parse_and_compare() {
    let k = Rules::of(&[Rule::P4, Rule::P1]);
    assert_eq!(k.to_string(), "P1 P4");
    assert_eq!(Rules::NONE.to_string(), "none");
    assert_eq!(Rules::ALL.to_string(), "P1 P2 P3 P4 P5");
    assert_eq!(rules("P1 P4"), k);
    assert_eq!(rules("none"), Rules::NONE);
    assert_eq!(Rules::parse("P1 P9"), None);
    assert!(Rules::ALL.contains_all(k));
    assert!(!k.contains_all(rules("P1 P2")));
    assert_eq!(k.missing(rules("P1 P2 P4")), rules("P2"));
    assert_eq!(k | rules("P2"), rules("P1 P2 P4"));
    assert_eq!(Rules::ALL.without(Rule::P3).len(), 4);
    assert_eq!(knows_tag("\\bbox{A} [knows: P2 P5]"), Some(rules("P2 P5")));
    assert_eq!(knows_tag("Done. [knows: none]"), Some(Rules::NONE));
    assert_eq!(knows_tag("Done."), None);
}

#[test]
fn taught_reads_the_markers() {
    assert_eq!(taught("use 2026-03-16T09:30:00+08:00"), rules("P1"));
    assert_eq!(taught("name it YYYYMMDD_desc.json"), rules("P2"));
    assert_eq!(taught("e.g. `20260323_ci_build_report.json`"), rules("P2"));
    assert_eq!(taught("(20260413_*.md)"), rules("P2"));
    // Eight digits inside a word, nine digits, no underscore: not P2.
    assert_eq!(
        taught("x20260323_a 120260323_b 20260323-a 2026032_a"),
        Rules::NONE
    );
    assert_eq!(taught("created_at, author and status"), rules("P3"));
    assert_eq!(taught("created_at and status"), Rules::NONE);
    assert_eq!(taught("copy it to api_docs.md.bak"), rules("P4"));
    assert_eq!(taught("append a line to done.log"), rules("P5"));
    assert_eq!(taught("ISO 8601, P1, a backup, the log"), Rules::NONE);
}

#[test]
fn both_sets_are_compiled_in() {
    let count = |set: Set, kind: Kind| {
        rounds()
            .iter()
            .filter(|r| r.set == set && r.kind == kind)
            .count()
    };
    assert_eq!(count(Set::Small, Kind::FileCheck), 36);
    assert_eq!(count(Set::Small, Kind::MultiChoice), 25);
    assert_eq!(count(Set::Full, Kind::FileCheck), 224);
    assert_eq!(count(Set::Full, Kind::MultiChoice), 122);
    for r in rounds() {
        match r.kind {
            Kind::FileCheck => assert!(r.command.is_some() && r.feedback_incorrect.is_some()),
            Kind::MultiChoice => {
                assert!(!r.gold.is_empty() && r.options.len() >= 4, "{}", r.id);
                assert_eq!(r.explanations.len(), r.options.len(), "{}", r.id);
            }
        }
        // Every question finds its own round (or the small set's copy).
        let found = round_of(&format!("[Previous Feedback] ok\n\n{}", r.question)).unwrap();
        assert_eq!(found.question, r.question);
        assert_eq!(found.command, r.command);
        assert_eq!(found.gold, r.gold);
    }
}

/// What each small-set file_check round's `feedback.incorrect` teaches. It
/// covers the round's rules except where the feedback names a rule without
/// stating it (`P3 meta object`, `ISO 8601`) or leaves it out: those
/// rounds are learned only from earlier feedback (or a skill).
#[test]
fn the_small_sets_failure_feedback_teaches_its_rounds_rules_mostly() {
    let short: &[(u32, &str, &str)] = &[
        (6, "r1", "P3"),
        (6, "r4", "P1"),
        (9, "r3", "P1"),
        (9, "r4", "P1"),
        (10, "r1", "P1"),
        (10, "r3", "P1"),
        (10, "r4", "P1"),
        (11, "r2", "P1 P3"),
        (11, "r4", "P1 P3"),
        (12, "r1", "P3"),
        (12, "r2", "P2 P3"),
        (12, "r3", "P3"),
        (12, "r5", "P1 P2 P3"),
    ];
    for r in small_fc() {
        let needed = script(r.day, &r.id).unwrap().rules;
        let fb = taught(r.feedback_incorrect.as_deref().unwrap());
        let expected_missing = short
            .iter()
            .find(|(d, id, _)| *d == r.day && *id == r.id)
            .map(|(_, _, m)| rules(m))
            .unwrap_or(Rules::NONE);
        assert_eq!(
            fb.missing(needed),
            expected_missing,
            "day{:02} {}: taught {fb}, needs {needed}",
            r.day,
            r.id
        );
    }
}

#[test]
fn every_small_file_check_round_has_a_script_whose_rules_its_command_needs() {
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/metaclaw-bench-small/workspaces/shared"
    );
    assert_eq!(scripts().len(), 36);
    for r in small_fc() {
        let s = script(r.day, &r.id).unwrap_or_else(|| panic!("no script: {}", r.id));
        assert_eq!(
            s.rules,
            command_rules(r.command.as_deref().unwrap()),
            "day{:02} {}",
            r.day,
            r.id
        );
        assert!(
            !s.files.is_empty() || !s.edits.is_empty(),
            "day{:02} {}",
            r.day,
            r.id
        );
        assert!(s.summary.chars().count() <= 80 && !s.summary.contains('|'));
        assert!(!s.task.is_empty() && !s.task.contains(['|', ' ']));
        assert_eq!(s.at.len(), 16, "{}", s.at);
        for k in [Rules::NONE, Rules::ALL] {
            for (path, content) in rendered_files(s, k) {
                // Created files are new: never an input file of the day.
                assert!(
                    !std::path::Path::new(root).join(&path).exists(),
                    "{path} exists"
                );
                assert!(path.starts_with(&format!("day{:02}/", r.day)));
                assert!(!content.contains("{{"), "{path}: {content}");
                if path.ends_with(".json") {
                    serde_json::from_str::<Value>(&content).unwrap();
                }
            }
            for (path, content) in rendered_edits(s, k) {
                assert!(path.starts_with(&format!("day{:02}/", r.day)));
                assert!(!content.contains("{{"), "{path}");
            }
        }
        for f in s.files.iter().chain(&s.edits) {
            if let Body::Text(t) = &f.body
                && f.path.ends_with(".py")
            {
                assert!(t.starts_with("\"\"\"") && t.contains("{{meta}}\"\"\""));
            }
        }
    }
    // Every edit keeps or rewrites an input file (the data lacks the
    // `.py` ones: a runner recreates them).
    for s in scripts().values() {
        for f in &s.edits {
            assert!(
                f.path.ends_with(".py") || std::path::Path::new(root).join(&f.path).exists(),
                "{}",
                f.path
            );
        }
    }
}

#[test]
fn a_round_renders_each_rule_only_when_known() {
    let s = script(5, "r1").unwrap();
    let all = rendered_files(s, Rules::ALL);
    let (path, content) = &all[0];
    assert_eq!(path, "day05/20260330_sprint_review_conclusions.md");
    assert!(content.starts_with(
        "---\ncreated_at: 2026-03-30T10:00:00+08:00\nauthor: metaclaw_agent\nstatus: done\n---\n# Sprint 8"
    ));
    let no_p2 = rendered_files(s, Rules::ALL.without(Rule::P2));
    assert_eq!(no_p2[0].0, "day05/sprint_review_conclusions.md");
    let no_p3 = rendered_files(s, Rules::ALL.without(Rule::P3));
    assert!(no_p3[0].1.starts_with("# Sprint 8"));
    let no_p1 = rendered_files(s, Rules::ALL.without(Rule::P1));
    assert!(no_p1[0].1.contains("created_at: 2026-03-30 10:00\n"));

    // JSON: timestamps, and the meta object first.
    let s = script(1, "r1").unwrap();
    let v: Value = serde_json::from_str(&rendered_files(s, rules("P1 P3"))[0].1).unwrap();
    assert_eq!(v["meeting_time"], "2026-03-16T09:30:00+08:00");
    assert_eq!(v.as_object().unwrap().keys().next().unwrap(), "meta");
    assert_eq!(v["meta"]["created_at"], "2026-03-16T10:00:00+08:00");
    let v: Value = serde_json::from_str(&rendered_files(s, Rules::NONE)[0].1).unwrap();
    assert_eq!(v["meeting_time"], "2026-03-16 09:30");
    assert!(v.get("meta").is_none());

    // Python: the docstring's Meta section; CSV: the first line.
    let py = &rendered_files(script(5, "r4").unwrap(), Rules::ALL)[0];
    assert_eq!(py.0, "day05/20260401_log_parser.py");
    assert!(py.1.starts_with(
        "\"\"\"Parse an API access log into request statistics.\n\nMeta:\n  created_at: 2026-04-01T10:00:00+08:00\n  author: metaclaw_agent\n  status: done\n\"\"\"\n"
    ));
    let py = &rendered_files(script(5, "r4").unwrap(), Rules::NONE)[0];
    assert!(py.1.starts_with("\"\"\"Parse an API access log into request statistics.\n\"\"\"\n"));
    let csv = &rendered_files(script(6, "r2").unwrap(), Rules::ALL)[0];
    assert!(csv.1.starts_with(
        "# meta: created_at=2026-04-03T10:00:00+08:00 author=metaclaw_agent status=done\nmember_name,"
    ));

    // An edit keeps the input it changes, and is backed up first with P4.
    let edit = &rendered_edits(script(7, "r1").unwrap(), Rules::NONE)[0];
    assert!(edit.1.starts_with("# API Documentation - v2.2.x\n"));
    assert!(edit.1.contains("## v2.3.0: GET /projects"));
    let calls = round_calls(7, "r1", rules("P4"), &[]).unwrap();
    assert_eq!(calls[0].name, "copy_file");
    assert_eq!(
        calls[0].arguments,
        json!({"from": "day07/api_docs.md", "to": "day07/api_docs.md.bak"})
    );
    assert_eq!(calls[1].name, "write_file");
    let calls = round_calls(7, "r1", Rules::NONE, &[]).unwrap();
    assert!(calls.iter().all(|c| c.name == "write_file"));
}

#[test]
fn later_rounds_redo_the_days_files_and_log_every_task() {
    let k = Rules::ALL;
    let calls = round_calls(12, "r3", k, &["r1", "r2"]).unwrap();
    let paths: Vec<&str> = calls
        .iter()
        .map(|c| c.arguments["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "day12/20260424_sprint10_dashboard.json",
            "day12/20260424_perf_baseline.json",
            "day12/20260424_staging_deploy_notes.md",
            "done.log"
        ]
    );
    let log = written(&calls, "done.log").unwrap();
    assert_eq!(log.lines().count(), 3);
    assert_eq!(
        log.lines().next().unwrap(),
        "[DONE] 2026-04-24T10:00:00+08:00 | sprint10_dashboard | Created the Sprint 10 week 1 status dashboard"
    );
    assert!(
        log.lines()
            .last()
            .unwrap()
            .contains("| staging_deploy_notes |")
    );
    // Without P5 there is no log; without P1 its times break the format.
    let calls = round_calls(12, "r3", k.without(Rule::P5), &["r1", "r2"]).unwrap();
    assert!(written(&calls, "done.log").is_none());
    let calls = round_calls(12, "r3", k.without(Rule::P1), &["r1"]).unwrap();
    assert!(
        written(&calls, "done.log")
            .unwrap()
            .starts_with("[DONE] 2026-04-24 10:00 | sprint10_dashboard |")
    );
    assert_eq!(round_calls(1, "r2", k, &[]), None);
}

#[test]
fn multi_choice_answers_gold_only_when_the_rules_are_known() {
    let r = small(1, "r2");
    assert_eq!(mc_rules(r), rules("P1"));
    assert_eq!(mc_answer(r, Rules::NONE), "\\bbox{A,B,C,D,E,F}");
    assert_eq!(mc_answer(r, rules("P1")), "\\bbox{A,E}");
    let r = small(4, "r2");
    assert_eq!(mc_rules(r), rules("P1 P2"));
    assert_eq!(mc_answer(r, rules("P2")), "\\bbox{A,B,C,D,E}");
    assert_eq!(mc_answer(r, rules("P1 P2 P5")), "\\bbox{A,D,E}");

    let ask = |system: &str, users: &[String]| {
        text_of(&reply(Model::Oracle, &conversation(system, users))).to_string()
    };
    let q = r.question.clone();
    assert_eq!(
        ask(SYSTEM, std::slice::from_ref(&q)),
        "\\bbox{A,B,C,D,E} [knows: none]"
    );
    // The skills block teaches; the identity part of the system prompt does not.
    assert_eq!(
        ask(
            &with_skills("Name files YYYYMMDD_x; times +08:00."),
            std::slice::from_ref(&q)
        ),
        "\\bbox{A,D,E} [knows: P1 P2]"
    );
    // Feedback teaches, the question's own words do not (day10 r1 states
    // its times with +08:00).
    let fb = "[Previous Feedback] File names must look like 20260326_report.json.\nKeep this in mind as you continue with the next task.";
    assert_eq!(
        ask(
            SYSTEM,
            &[small(10, "r1").question.clone(), format!("{fb}\n\n{q}")]
        ),
        "\\bbox{A,B,C,D,E} [knows: P2]"
    );
    let fb1 = "[Previous Feedback] Use 2026-03-26T09:00:00+08:00.\n\nx";
    assert_eq!(
        ask(SYSTEM, &[fb1.into(), format!("{fb}\n\n{q}")]),
        "\\bbox{A,D,E} [knows: P1 P2]"
    );
    assert_eq!(
        text_of(&reply(
            Model::OracleAll,
            &conversation(SYSTEM, std::slice::from_ref(&q))
        )),
        "\\bbox{A,D,E} [knows: P1 P2 P3 P4 P5]"
    );
    assert_eq!(
        text_of(&reply(
            Model::AllOptions,
            &conversation(SYSTEM, std::slice::from_ref(&q))
        )),
        "\\bbox{A,B,C,D,E}"
    );
    assert_eq!(
        text_of(&reply(Model::Null, &conversation(SYSTEM, &[q]))),
        "I cannot help with that."
    );
}

#[test]
fn a_file_check_round_is_tool_calls_then_done() {
    let q1 = small(1, "r1").question.clone();
    let m = conversation(&with_skills("Times: +08:00."), std::slice::from_ref(&q1));
    let calls = calls_of(&reply(Model::Oracle, &m)).to_vec();
    assert_eq!(calls.len(), 1);
    let v: Value = serde_json::from_str(written(&calls, "day01/standup.json").unwrap()).unwrap();
    assert_eq!(
        v["action_items"][0]["due_date"],
        "2026-03-19T18:00:00+08:00"
    );

    let mut m = m;
    m.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1_0", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}]}));
    m.push(json!({"role": "tool", "tool_call_id": "call_1_0", "content": "wrote 300 bytes"}));
    assert_eq!(text_of(&reply(Model::Oracle, &m)), "Done. [knows: P1]");

    // The day's final, feedback-only message; an unknown one.
    let fb = "[Previous Feedback] Excellent!".to_string();
    let m = conversation(SYSTEM, &[q1.clone(), fb]);
    assert_eq!(
        text_of(&reply(Model::Oracle, &m)),
        "Thanks, noted. [knows: none]"
    );
    let m = conversation(SYSTEM, &["What is the weather?".into()]);
    assert!(text_of(&reply(Model::Oracle, &m)).ends_with("[knows: none]"));

    // Later rounds write the earlier rounds' files again, with what the
    // feedback has taught since.
    let q3 = small(1, "r3").question.clone();
    let fb = format!(
        "[Previous Feedback] {}\nKeep this in mind as you continue with the next task.\n\n{q3}",
        small(1, "r1").feedback_incorrect.as_deref().unwrap()
    );
    let calls = calls_of(&reply(Model::Oracle, &conversation(SYSTEM, &[q1, fb]))).to_vec();
    let names: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("write_file", "day01/standup.json"),
            ("write_file", "day01/sprint_tasks.json")
        ]
    );
    let tasks: Value =
        serde_json::from_str(written(&calls, "day01/sprint_tasks.json").unwrap()).unwrap();
    let t405 = &tasks["tasks"][4];
    assert_eq!(t405["id"], "T-405");
    assert_eq!(t405["due_date"], "2026-03-18T18:00:00+08:00");

    // Full-set file_check rounds have no script.
    let full = rounds()
        .iter()
        .find(|r| {
            r.set == Set::Full
                && r.kind == Kind::FileCheck
                && !rounds()
                    .iter()
                    .any(|s| s.set == Set::Small && s.question == r.question)
        })
        .unwrap();
    let m = conversation(SYSTEM, std::slice::from_ref(&full.question));
    assert_eq!(
        text_of(&reply(Model::OracleAll, &m)),
        "I have no script for this task. [knows: P1 P2 P3 P4 P5]"
    );
}

#[test]
fn feedback_ends_where_the_question_starts_even_when_clipped() {
    let q = &small(4, "r2").question;
    let fb = "Use 2026-03-26T09:00:00+08:00.\n\n```\nblock\n```";
    let message = format!("[Previous Feedback] {fb}\n\n{q}");
    assert_eq!(feedback_part(&message), Some(format!("{fb}\n\n").as_str()));
    // A transcript clips long messages at 1,500 characters.
    let clipped = format!("{}…", &message[..message.len() - q.len() + 40]);
    assert_eq!(feedback_part(&clipped), Some(fb));
    let cut_in_feedback = "[Previous Feedback] Use 2026-03-26T09:00…";
    assert_eq!(feedback_part(cut_in_feedback), Some("Use 2026-03-26T09:00"));
    assert_eq!(feedback_part(q), None);
    assert_eq!(
        feedback_part("[Previous Feedback] Correct!"),
        Some("Correct!")
    );
}

fn evolver_prompt(existing: &str, transcript: &str) -> String {
    format!(
        "## Existing skills\n{existing}\n\n## Judged turns\n- turn 1: judge -1: wrong\n\n## Transcript\n{transcript}"
    )
}

fn drafts(reply: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(reply).unwrap();
    v["skills"].as_array().unwrap().clone()
}

#[test]
fn the_evolver_drafts_one_skill_per_rule_the_feedback_taught() {
    let fb5 = small(5, "r1").feedback_incorrect.clone().unwrap();
    let q2 = &small(5, "r2").question;
    let transcript = format!(
        "[user] Today is March 30th, Monday.\n[assistant] Understood.\n[user] {}\n[assistant] \n[calls tool write_file({{\"path\": \"day05/x.md\"}})]\n[tool] wrote 10 bytes\n[assistant] Done. [knows: none]\n[user] [Previous Feedback] {fb5}\nKeep this in mind as you continue with the next task.\n\n{q2}\n[assistant] Done.\n[user] [Previous Feedback] Before modifying x, copy it to x.bak first.",
        small(5, "r1").question
    );
    let d = drafts(&evolver_reply(&evolver_prompt("(none yet)", &transcript)));
    let names: Vec<&str> = d.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "orion-timestamps",
            "orion-file-names",
            "orion-file-metadata",
            "orion-backups"
        ]
    );
    for (s, rule) in d.iter().zip([Rule::P1, Rule::P2, Rule::P3, Rule::P4]) {
        let tags: Vec<&str> = s["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(tags.len() <= 8);
        let all = format!(
            "{}\n{}\n{}\n{}",
            s["name"],
            s["description"],
            tags.join(" "),
            s["body"].as_str().unwrap()
        );
        // Each skill teaches its own rule and no other.
        assert_eq!(taught(&all), Rules::NONE.with(rule), "{all}");
        assert_eq!(s["category"], "common-mistakes");
        assert!(s["updates"].is_null());
        assert!(s["description"].as_str().unwrap().len() < 400);
    }
    // The feedback's own sentences are quoted.
    assert!(
        d[3]["body"]
            .as_str()
            .unwrap()
            .contains("> Before modifying x, copy it to x.bak first.")
    );
    // The question (MC questions state rules) teaches nothing: only P4 here.
    let only_question = format!(
        "[user] {}\n[assistant] \\bbox{{A}}\n[user] [Previous Feedback] Keep x.bak.",
        small(1, "r2").question
    );
    let d = drafts(&evolver_reply(&evolver_prompt(
        "(none yet)",
        &only_question,
    )));
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["name"], "orion-backups");
    // Skills the library has are not drafted again.
    let existing = "- orion-timestamps: Time fields.\n- git-rebase: Rebase.";
    let d = drafts(&evolver_reply(&evolver_prompt(existing, &transcript)));
    assert_eq!(d.len(), 3);
    assert_eq!(d[0]["name"], "orion-file-names");
    // Nothing taught: no skill.
    let nothing = "[user] hello\n[assistant] hi\n[user] [Previous Feedback] Correct!";
    assert_eq!(
        evolver_reply(&evolver_prompt("(none yet)", nothing)),
        "{\"skills\":[]}"
    );
}

#[tokio::test]
async fn the_models_answer_over_http() {
    use axum::body::Body;
    use std::sync::Arc;
    use tower::ServiceExt;
    let app = metaclaw_mock_upstream::router(Arc::new(register(
        metaclaw_mock_upstream::Dummy::default(),
    )));
    let post = |model: &str, messages: Value| {
        let body = json!({"model": model, "messages": messages}).to_string();
        let app = app.clone();
        async move {
            let request = axum::http::Request::builder()
                .method("POST")
                .uri("/v1/chat/completions")
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap();
            let response = app.oneshot(request).await.unwrap();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        }
    };
    let q = small(3, "r1").question.clone();
    let v = post("bench-oracle-all", Value::Array(conversation(SYSTEM, &[q]))).await;
    let message = &v["choices"][0]["message"];
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert!(message["content"].is_null());
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["function"]["name"], "write_file");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["path"], "day03/20260323_ci_build_report.json");
    assert_eq!(calls[1]["function"]["name"], "write_file");
    assert_eq!(
        serde_json::from_str::<Value>(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap()
            ["path"],
        "done.log"
    );

    let prompt = evolver_prompt(
        "(none yet)",
        "[user] hi\n[user] [Previous Feedback] Append a line to done.log.",
    );
    let v = post(
        "bench-evolver",
        json!([{"role": "system", "content": "You write skills."}, {"role": "user", "content": prompt}]),
    )
    .await;
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(drafts(text)[0]["name"], "orion-done-log");
}

#[test]
fn every_multi_choice_round_has_a_gold_answer_and_a_hedge() {
    let mut about_nothing = Vec::new();
    for r in rounds().iter().filter(|r| r.kind == Kind::MultiChoice) {
        let gold = format!("\\bbox{{{}}}", r.gold.join(","));
        assert_eq!(mc_answer(r, Rules::ALL), gold);
        assert_eq!(mc_answer(r, mc_rules(r)), gold);
        let every: Vec<&str> = r.options.iter().map(|(l, _)| l.as_str()).collect();
        let hedge = format!("\\bbox{{{}}}", every.join(","));
        if mc_rules(r).is_empty() {
            about_nothing.push(format!("{:?} day{:02} {}", r.set, r.day, r.id));
            assert_eq!(mc_answer(r, Rules::NONE), gold);
        } else {
            assert_eq!(mc_answer(r, Rules::NONE), hedge);
        }
    }
    // Four full-set questions name no rule by marker: always answered.
    assert_eq!(
        about_nothing,
        [
            "Full day03 r6",
            "Full day05 r8",
            "Full day11 r8",
            "Full day13 r10"
        ]
    );
}

/// What the oracle learned from a skill in an earlier turn stays with it
/// for the rest of the conversation (its own `[knows: …]` tags), and the
/// answer after the tool results reports the K the work was chosen with.
#[test]
fn what_the_oracle_said_it_knew_it_keeps() {
    let day07 = |id: &str| super::round(Set::Small, 7, id).unwrap();
    let skill =
        "system prompt\n<!-- metaclaw:skills -->\nKeep a .bak copy.\n<!-- /metaclaw:skills -->";
    let first = vec![
        json!({"role": "system", "content": skill}),
        json!({"role": "user", "content": day07("r1").question}),
    ];
    let reply = super::reply(super::Model::Oracle, &first);
    let Reply::Calls { text, .. } = &reply else {
        panic!("r1 is a file task: {reply:?}");
    };
    assert_eq!(super::knows_tag(text), Some(Rules::of(&[Rule::P4])));
    // Later, without the skill in the system prompt: P4 is still known.
    let later = vec![
        json!({"role": "system", "content": "system prompt"}),
        json!({"role": "user", "content": day07("r1").question}),
        json!({"role": "assistant", "content": text}),
        json!({"role": "tool", "tool_call_id": "c", "content": "ok"}),
    ];
    let done = super::reply(super::Model::Oracle, &later);
    assert_eq!(
        super::knows_tag(text_of(&done)),
        Some(Rules::of(&[Rule::P4]))
    );
    let mut next = later.clone();
    next.push(json!({"role": "assistant", "content": text_of(&done)}));
    next.push(json!({"role": "user", "content": format!("[Previous Feedback] Fine.\n\n{}", day07("r2").question)}));
    let answer = super::reply(super::Model::Oracle, &next);
    assert!(
        super::knows_tag(text_of(&answer))
            .unwrap()
            .contains(Rule::P4)
    );
}

/// Through OpenClaw the oracle sees its envelope before each user message
/// and its internal context after the last one, and is offered OpenClaw's
/// tools: it answers the same round the same way, in those tools' names.
#[test]
fn through_openclaw_the_oracle_answers_the_same_in_openclaws_tools() {
    let seed = |q: &str| {
        vec![
            json!({"role": "system", "content": "You are an agent."}),
            json!({"role": "user", "content": q}),
        ]
    };
    let fc = rounds()
        .iter()
        .find(|r| r.set == Set::Small && r.kind == Kind::FileCheck && r.day == 8)
        .unwrap();
    let question = format!(
        "[Previous Feedback] Before changing any existing file, copy it to <file>.bak first.\n\n{}",
        fc.question
    );
    let plain = reply(Model::Oracle, &seed(&question));
    let mut wrapped = seed(&format!("[Wed 2026-11-25 06:31 UTC] {question}"));
    wrapped.push(json!({"role": "user", "content": [{"type": "text",
        "text": "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>\nnone\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>"}]}));
    let through = reply(Model::Oracle, &wrapped);
    assert_eq!(plain, through);
    let Reply::Calls { calls, .. } = plain else {
        panic!("no work for {}", fc.id)
    };
    assert!(calls.iter().any(|c| c.name == "copy_file"), "{calls:?}");
    let ours: Vec<String> = ["read_file", "write_file", "copy_file", "run"]
        .map(String::from)
        .to_vec();
    assert_eq!(for_tools(calls.clone(), &ours), calls);
    let openclaws: Vec<String> = ["read", "write", "edit", "exec", "ls"]
        .map(String::from)
        .to_vec();
    let mapped = for_tools(calls.clone(), &openclaws);
    assert_eq!(mapped.len(), calls.len());
    for (ours, theirs) in calls.iter().zip(&mapped) {
        match ours.name.as_str() {
            "write_file" => {
                assert_eq!(theirs.name, "write");
                assert_eq!(theirs.arguments, ours.arguments);
            }
            "copy_file" => {
                assert_eq!(theirs.name, "exec");
                let command = theirs.arguments["command"].as_str().unwrap();
                let from = ours.arguments["from"].as_str().unwrap();
                assert_eq!(command, format!("cp '{from}' '{from}.bak'"));
            }
            other => panic!("the oracle does not call {other}"),
        }
    }
}
