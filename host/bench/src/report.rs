//! `bench report`: the run's records turned into `report.md` (tables a
//! person reads), `report.svg` (accuracy per day per arm, compliance per
//! rule) and `report.json` (the summary and every round and night).
//!
//! The headline is **strict accuracy**: file checks passed plus
//! multiple-choice answers whose letters are exactly the gold set, over all
//! rounds. The reference report's `Accuracy` (partial credit on multiple
//! choice) is shown too, labelled lenient: an agent that ticks every option
//! and touches no file gets about a quarter of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::arms::Arm;
use super::data::Bench;
use super::day::RoundRecord;
use super::provenance::{ArmRecord, Bank};
use super::run::{AgentKind, NightRecord, Records, RunSettings};
use crate::lenient;
use metaclaw_core::ui::chart::{Chart, Series, XAxis};

/// The five rules, as the report names them.
pub const RULES: [&str; 5] = [
    "P1 timestamps (+08:00)",
    "P2 file names (YYYYMMDD_)",
    "P3 metadata",
    "P4 .bak before edits",
    "P5 done.log",
];

/// One arm's numbers (one repeat, or the mean of its repeats).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Metrics {
    pub rounds: usize,
    pub file_checks: usize,
    pub multi_choice: usize,
    /// (FC passed + MC exact) / rounds.
    pub strict: f64,
    /// FC passed / FC rounds.
    pub fc_completion: f64,
    /// MC exact / MC rounds.
    pub mc_exact: f64,
    /// The reference report's `Accuracy`: Σ score / rounds with partial
    /// credit on multiple choice.
    pub lenient: f64,
    /// Per rule (P1..P5): that rule's checker calls that passed / made;
    /// `None` when none was made.
    pub compliance: [Option<f64>; 5],
    /// Strict accuracy per arc and per day.
    pub per_arc: BTreeMap<String, f64>,
    pub per_day: BTreeMap<String, f64>,
    /// The agent's model calls and tokens (the judge's and evolver's are
    /// metaclaw's, not counted here).
    pub calls: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// The metrics of a set of rounds.
pub fn metrics(rounds: &[&RoundRecord]) -> Metrics {
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let n = rounds.len();
    let fc: Vec<_> = rounds.iter().filter(|r| r.kind == "file_check").collect();
    let mc: Vec<_> = rounds.iter().filter(|r| r.kind == "multi_choice").collect();
    let passed = |rs: &[&&RoundRecord]| rs.iter().filter(|r| r.score.passed).count();
    let mut rule_counts = [(0usize, 0usize); 5];
    for part in rounds.iter().flat_map(|r| &r.checks) {
        if let Some(checker) = part.checker {
            let c = &mut rule_counts[checker.rule() as usize - 1];
            c.0 += usize::from(part.passed());
            c.1 += 1;
        }
    }
    let strict_of = |keep: &dyn Fn(&RoundRecord) -> Option<String>| {
        let mut groups: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for r in rounds {
            if let Some(key) = keep(r) {
                let g = groups.entry(key).or_default();
                g.0 += usize::from(r.score.passed);
                g.1 += 1;
            }
        }
        groups
            .into_iter()
            .map(|(k, (p, n))| (k, ratio(p, n)))
            .collect()
    };
    Metrics {
        rounds: n,
        file_checks: fc.len(),
        multi_choice: mc.len(),
        strict: ratio(rounds.iter().filter(|r| r.score.passed).count(), n),
        fc_completion: ratio(passed(&fc), fc.len()),
        mc_exact: ratio(passed(&mc), mc.len()),
        lenient: if n == 0 {
            0.0
        } else {
            rounds.iter().map(|r| r.score.lenient).sum::<f64>() / n as f64
        },
        compliance: rule_counts.map(|(p, n)| (n > 0).then(|| ratio(p, n))),
        per_arc: strict_of(&|r| Some(r.arc.clone())),
        per_day: strict_of(&|r| Some(r.day.clone())),
        calls: rounds.iter().map(|r| u64::from(r.steps)).sum(),
        tokens_in: rounds.iter().map(|r| r.tokens.input).sum(),
        tokens_out: rounds.iter().map(|r| r.tokens.output).sum(),
    }
}

/// The mean of several repeats' metrics (compliance over the repeats that
/// have it).
fn mean(runs: &[Metrics]) -> Metrics {
    let k = runs.len().max(1) as f64;
    let avg = |f: &dyn Fn(&Metrics) -> f64| runs.iter().map(f).sum::<f64>() / k;
    let avg_map = |f: &dyn Fn(&Metrics) -> &BTreeMap<String, f64>| {
        let keys: BTreeSet<&String> = runs.iter().flat_map(|m| f(m).keys()).collect();
        keys.into_iter()
            .map(|key| {
                let vals: Vec<f64> = runs.iter().filter_map(|m| f(m).get(key).copied()).collect();
                (
                    key.clone(),
                    vals.iter().sum::<f64>() / vals.len().max(1) as f64,
                )
            })
            .collect()
    };
    let mut compliance = [None; 5];
    for (i, slot) in compliance.iter_mut().enumerate() {
        let vals: Vec<f64> = runs.iter().filter_map(|m| m.compliance[i]).collect();
        if !vals.is_empty() {
            *slot = Some(vals.iter().sum::<f64>() / vals.len() as f64);
        }
    }
    Metrics {
        rounds: runs.first().map(|m| m.rounds).unwrap_or(0),
        file_checks: runs.first().map(|m| m.file_checks).unwrap_or(0),
        multi_choice: runs.first().map(|m| m.multi_choice).unwrap_or(0),
        strict: avg(&|m| m.strict),
        fc_completion: avg(&|m| m.fc_completion),
        mc_exact: avg(&|m| m.mc_exact),
        lenient: avg(&|m| m.lenient),
        compliance,
        per_arc: avg_map(&|m| &m.per_arc),
        per_day: avg_map(&|m| &m.per_day),
        calls: avg(&|m| m.calls as f64).round() as u64,
        tokens_in: avg(&|m| m.tokens_in as f64).round() as u64,
        tokens_out: avg(&|m| m.tokens_out as f64).round() as u64,
    }
}

/// Each arm's summary: the mean over its repeats, and each repeat.
#[derive(Debug, Clone, Serialize)]
pub struct ArmSummary {
    pub arm: Arm,
    pub mean: Metrics,
    pub repeats: Vec<Metrics>,
    /// With `--split`: the held-out days' rounds alone (the scores that
    /// count), and the training days' (what the learning arms learned
    /// from), each the mean over repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out: Option<Metrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training_days: Option<Metrics>,
}

/// The days held out of learning (`--split`).
fn held_out_days(settings: &RunSettings) -> BTreeSet<String> {
    settings
        .bench()
        .map(|b| {
            b.days
                .iter()
                .enumerate()
                .filter(|(i, _)| settings.held_out(*i))
                .map(|(_, d)| d.id.clone())
                .collect()
        })
        .unwrap_or_default()
}

pub fn summarise(settings: &RunSettings, records: &Records) -> Vec<ArmSummary> {
    let held = held_out_days(settings);
    settings
        .arms
        .iter()
        .map(|&arm| {
            let of = |keep: &dyn Fn(&RoundRecord) -> bool| -> Vec<Metrics> {
                (1..=settings.repeat)
                    .map(|repeat| {
                        let rounds: Vec<&RoundRecord> = records
                            .rounds
                            .iter()
                            .filter(|r| r.arm == arm.as_str() && r.repeat == repeat && keep(r))
                            .collect();
                        metrics(&rounds)
                    })
                    .filter(|m| m.rounds > 0)
                    .collect()
            };
            let repeats = of(&|_| true);
            let split = |held_out: bool| {
                settings
                    .split
                    .then(|| mean(&of(&|r| held.contains(&r.day) == held_out)))
            };
            ArmSummary {
                arm,
                mean: mean(&repeats),
                repeats,
                held_out: split(true),
                training_days: split(false),
            }
        })
        .collect()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Mean, and the range over repeats when there are several.
fn spread(s: &ArmSummary, f: impl Fn(&Metrics) -> f64) -> String {
    let mean = pct(f(&s.mean));
    if s.repeats.len() < 2 {
        return mean;
    }
    let vals: Vec<f64> = s.repeats.iter().map(&f).collect();
    let (lo, hi) = vals
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    format!("{mean} ({}–{})", pct(lo), pct(hi))
}

/// Writes `report.md`, `report.svg` and `report.json` into `dir`; the
/// Markdown's text.
pub fn write(dir: &Path, settings: &RunSettings, records: &Records) -> Result<String> {
    let bench = settings.bench()?;
    let summary = summarise(settings, records);
    let arms = measured(settings, records);
    let md = markdown(&bench, settings, records, &summary, &arms);
    let svg = plot(&bench, &summary);
    let report = json!({
        "settings": settings,
        "measured_by": records.measured_by,
        "arms": arms,
        "summary": summary,
        "rounds": records.rounds,
        "nights": records.nights,
    });
    for (name, bytes) in [
        ("report.md", md.clone().into_bytes()),
        ("report.svg", svg.into_bytes()),
        ("report.json", serde_json::to_vec_pretty(&report)?),
    ] {
        let file = dir.join(name);
        std::fs::write(&file, bytes).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(md)
}

fn markdown(
    bench: &Bench,
    settings: &RunSettings,
    records: &Records,
    summary: &[ArmSummary],
    arms: &[ArmMeasured],
) -> String {
    let mut md = String::new();
    let total = bench.rounds();
    let agent = match settings.agent {
        AgentKind::Builtin if settings.arms.iter().any(|a| a.trains()) => format!(
            "the built-in agent at temperature {} (in the rl arms {}: the student trains only on answers sampled at temperature 1), seed {}",
            settings.temperature, settings.rl_temperature, settings.seed
        ),
        AgentKind::Builtin => format!(
            "the built-in agent at temperature {}, seed {}",
            settings.temperature, settings.seed
        ),
        AgentKind::Openclaw => "OpenClaw with the reference harness's config (its own \
                                sampling settings; it puts the real date before each message)"
            .to_string(),
    };
    // Writing to a String cannot fail.
    let _ = writeln!(
        md,
        "# MetaClaw-Bench ({} set): {}\n\n{} days, {total} rounds; {agent}; {} repeat(s); arms: \
         {}. Strict scoring: a file check passes when its checks pass, a multiple-choice answer \
         when its letters are exactly the gold set.\n",
        settings.set.as_str(),
        settings.model,
        bench.days.len(),
        settings.repeat,
        settings
            .arms
            .iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let held = held_out_days(settings);
    if settings.split {
        let _ = writeln!(
            md,
            "**Held-out days (`--split`)**: {} (marked H) were scored and never learned from: \
             the learning arms judged, evolved and trained on the other days (T) only. The \
             held-out scores are the ones that count.\n",
            held.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    md.push_str(&measured_markdown(records, arms));
    if settings.split {
        held_out_markdown(&mut md, bench, summary, &held);
    }
    summary_table(&mut md, settings, summary, total);
    compliance_table(&mut md, summary);
    arc_table(&mut md, bench, summary);
    day_table(&mut md, bench, summary, &held);
    nights_table(&mut md, records);
    paper_note(&mut md, settings);
    md
}

/// The summary: each arm's strict, file-check, multiple-choice and lenient scores, calls and tokens.
fn summary_table(md: &mut String, settings: &RunSettings, summary: &[ArmSummary], total: usize) {
    let _ = writeln!(
        md,
        "## Summary\n\n| arm | strict accuracy | file checks passed | multiple choice exact | lenient (reference `Accuracy`, partial credit) | rounds done | model calls | tokens in / out |\n|---|---|---|---|---|---|---|---|"
    );
    for s in summary {
        let done: usize = s.repeats.iter().map(|m| m.rounds).sum();
        if done == 0 {
            // No score for an arm that has not answered yet, rather than 0%.
            let _ = writeln!(
                md,
                "| {} | – | – | – | – | 0 of {} | – | – |",
                s.arm.as_str(),
                total * settings.repeat as usize
            );
            continue;
        }
        let _ = writeln!(
            md,
            "| {} | **{}** | {} | {} | {} | {done} of {} | {} | {} / {} |",
            s.arm.as_str(),
            spread(s, |m| m.strict),
            spread(s, |m| m.fc_completion),
            spread(s, |m| m.mc_exact),
            spread(s, |m| m.lenient),
            total * settings.repeat as usize,
            s.mean.calls,
            s.mean.tokens_in,
            s.mean.tokens_out,
        );
    }
    let _ = writeln!(
        md,
        "\nThe lenient column is the reference report's `Accuracy`: it gives partial credit to \
         multiple-choice answers, so an agent that ticks every option and never touches a file \
         scores about 24% on the small set and 21% on the full one. Read the strict column. Model \
         calls and tokens are the agent's (per repeat; tokens as the API reported them).\n"
    );
}

/// The share of each rule's checker calls that passed, per arm.
fn compliance_table(md: &mut String, summary: &[ArmSummary]) {
    let _ = writeln!(
        md,
        "## Compliance per rule\n\nThe share of each rule's checker calls (in the file-check \
         commands) that passed.\n\n| arm | {} |\n|---|---|---|---|---|---|",
        RULES.join(" | ")
    );
    for s in summary {
        let cells: Vec<String> = s
            .mean
            .compliance
            .iter()
            .map(|c| c.map(pct).unwrap_or_else(|| "–".into()))
            .collect();
        let _ = writeln!(md, "| {} | {} |", s.arm.as_str(), cells.join(" | "));
    }
}

/// Strict accuracy per arc, per arm.
fn arc_table(md: &mut String, bench: &Bench, summary: &[ArmSummary]) {
    let arcs: BTreeSet<&String> = bench.days.iter().map(|d| &d.arc).collect();
    let _ = writeln!(
        md,
        "\n## Strict accuracy per arc\n\n| arm | {} |\n|---|{}",
        arcs.iter()
            .map(|a| a.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(arcs.len())
    );
    for s in summary {
        let cells: Vec<String> = arcs
            .iter()
            .map(|a| {
                s.mean
                    .per_arc
                    .get(*a)
                    .map(|v| pct(*v))
                    .unwrap_or_else(|| "–".into())
            })
            .collect();
        let _ = writeln!(md, "| {} | {} |", s.arm.as_str(), cells.join(" | "));
    }
}

/// Strict accuracy per day (held-out days marked H), per arm.
fn day_table(md: &mut String, bench: &Bench, summary: &[ArmSummary], held: &BTreeSet<String>) {
    let _ = writeln!(
        md,
        "\n## Strict accuracy per day\n\n![accuracy per day and compliance per rule](report.svg)\n\n| day | arc | rules | {} |\n|---|---|---|{}",
        summary
            .iter()
            .map(|s| s.arm.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(summary.len())
    );
    for day in &bench.days {
        let cells: Vec<String> = summary
            .iter()
            .map(|s| {
                s.mean
                    .per_day
                    .get(&day.id)
                    .map(|v| pct(*v))
                    .unwrap_or_else(|| "–".into())
            })
            .collect();
        let _ = writeln!(
            md,
            "| {}{} | {} | {} | {} |",
            day.id,
            if held.contains(&day.id) { " (H)" } else { "" },
            day.arc,
            day.tags.join(", "),
            cells.join(" | ")
        );
    }
}

/// What the report reads of a night's record (`nights.jsonl`, runs of
/// before included: a part absent or of another shape reads as none).
#[derive(Deserialize, Default)]
#[serde(default)]
struct NightSeen {
    #[serde(deserialize_with = "lenient::field")]
    evolved: Option<Vec<Value>>,
    #[serde(deserialize_with = "lenient::obj")]
    train: StepSeen,
    #[serde(deserialize_with = "lenient::obj")]
    trained: StepSeen,
    samples: Value,
}

/// A train step's outcome (`train`), or what the night's steps trained
/// (`trained`).
#[derive(Deserialize, Default)]
#[serde(default)]
struct StepSeen {
    #[serde(deserialize_with = "lenient::field")]
    outcome: Option<String>,
    #[serde(deserialize_with = "lenient::field")]
    samples: Option<u64>,
}

impl NightSeen {
    fn of(record: &NightRecord) -> Self {
        lenient::object(&record.night)
    }
}

/// The skills each arm evolved each night.
fn nights_table(md: &mut String, records: &Records) {
    let nights: Vec<_> = records
        .nights
        .iter()
        .map(|n| (n, NightSeen::of(n)))
        .filter(|(_, seen)| seen.evolved.as_ref().is_some_and(|e| !e.is_empty()))
        .collect();
    if !nights.is_empty() {
        let _ = writeln!(
            md,
            "\n## Skills evolved each night\n\n| arm | day | skills |\n|---|---|---|"
        );
        for (n, seen) in nights {
            let skills: Vec<&str> = seen
                .evolved
                .iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let _ = writeln!(
                md,
                "| {}-{} | {} | {} |",
                n.arm,
                n.repeat,
                n.day,
                skills.join(", ")
            );
        }
    }
}

/// How this run compares with the paper's numbers and protocol.
fn paper_note(md: &mut String, settings: &RunSettings) {
    let _ = writeln!(
        md,
        "\n## Compared with the paper\n\nThe MetaClaw paper reports Kimi-K2.5 going from 21.4% \
         to 40.6% with the full pipeline, on 934 questions over 44 days (a larger set than the \
         346 rounds released) and with an unconfirmed metric; the archived full-set runs of the \
         original repository give, for Kimi-K2.5, a strict accuracy of 30.3% (baseline) and \
         35.5% (skills only), and for GPT-5.2 37.0% (baseline). docs/bench.md has the whole \
         table and how these arms map to the paper's.\n"
    );
    let _ = writeln!(
        md,
        "{}\n",
        match settings.split {
            true =>
                "The paper scores its full arm on the days it trained on, as this report's \
                     all-days and training-day (T) numbers do; the held-out numbers (H) score \
                     days no arm learned from, which the paper's do not.",
            false =>
                "This run holds no day out: like the paper's, its learning arms are scored \
                      on the days they learned from (`--split` holds every second day out and \
                      scores those apart).",
        }
    );
}

/// The held-out days' scores (`--split`): per arm, the held-out and the
/// training days' strict accuracy, and the held-out curve, day by day.
fn held_out_markdown(
    md: &mut String,
    bench: &Bench,
    summary: &[ArmSummary],
    held: &BTreeSet<String>,
) {
    let days: Vec<&str> = bench
        .days
        .iter()
        .filter(|d| held.contains(&d.id))
        .map(|d| d.id.as_str())
        .collect();
    let _ = writeln!(
        md,
        "## Held-out days: the scores that count\n\n| arm | held out (H), strict | training days (T), strict | {} |\n|---|---|---|{}",
        days.iter()
            .map(|d| format!("{d} (H)"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(days.len())
    );
    for s in summary {
        let score = |m: &Option<Metrics>| match m {
            Some(m) if m.rounds > 0 => format!("{} of {} rounds", pct(m.strict), m.rounds),
            _ => "–".into(),
        };
        let cells: Vec<String> = days
            .iter()
            .map(|d| {
                s.mean
                    .per_day
                    .get(*d)
                    .map(|v| pct(*v))
                    .unwrap_or_else(|| "–".into())
            })
            .collect();
        let _ = writeln!(
            md,
            "| {} | **{}** | {} | {} |",
            s.arm.as_str(),
            score(&s.held_out),
            score(&s.training_days),
            cells.join(" | ")
        );
    }
    md.push('\n');
}

/// What one arm and repeat ran with: its record as it started, who served
/// its rounds, and in `rl` what trained.
#[derive(Debug, Clone, Serialize)]
pub struct ArmMeasured {
    pub run: String,
    /// `None` for an arm not started yet, or a run from before arms were
    /// recorded.
    pub started: Option<ArmRecord>,
    /// Rounds by who served their model calls: `student; policy_version=N`,
    /// `llm; student_fallback`, or `model` (the model as configured).
    pub served_by: BTreeMap<String, usize>,
    /// The student's policy versions that served (`rl`).
    pub policy_versions: Vec<u64>,
    pub training: Option<Training>,
}

/// What the `rl` arm trained, night by night.
#[derive(Debug, Clone, Serialize)]
pub struct Training {
    pub nights: usize,
    /// The days whose night took a train step.
    pub nights_trained: Vec<String>,
    /// Samples the steps trained on.
    pub samples_trained: u64,
    /// The student's samples in the arm's store after the last night, by
    /// state (`trained`, `skipped`, `waiting`, …, `skipped_by_reason`).
    pub samples: Value,
}

fn measured(settings: &RunSettings, records: &Records) -> Vec<ArmMeasured> {
    let mut out = Vec::new();
    for &arm in &settings.arms {
        for repeat in 1..=settings.repeat {
            let mine = |a: &str, r: u32| a == arm.as_str() && r == repeat;
            let mut served_by: BTreeMap<String, usize> = BTreeMap::new();
            let mut versions = BTreeSet::new();
            for round in records.rounds.iter().filter(|r| mine(&r.arm, r.repeat)) {
                if round.served_by.is_empty() {
                    *served_by.entry("model".into()).or_default() += 1;
                }
                for by in &round.served_by {
                    *served_by.entry(by.clone()).or_default() += 1;
                    if let Some(v) = by.strip_prefix("student; policy_version=") {
                        versions.extend(v.parse::<u64>().ok());
                    }
                }
            }
            let nights: Vec<_> = records
                .nights
                .iter()
                .filter(|n| mine(&n.arm, n.repeat))
                .map(|n| (n, NightSeen::of(n)))
                .collect();
            let training = arm.trains().then(|| {
                let stepped: Vec<_> = nights
                    .iter()
                    .filter(|(_, seen)| seen.train.outcome.as_deref() == Some("stepped"))
                    .collect();
                Training {
                    nights: nights.len(),
                    nights_trained: stepped.iter().map(|(n, _)| n.day.clone()).collect(),
                    // Every step of the night (`trained`), or the one
                    // step a record written before nights stepped on had.
                    samples_trained: stepped
                        .iter()
                        .filter_map(|(_, seen)| seen.trained.samples.or(seen.train.samples))
                        .sum(),
                    samples: nights
                        .last()
                        .map(|(_, seen)| seen.samples.clone())
                        .unwrap_or(Value::Null),
                }
            });
            out.push(ArmMeasured {
                run: format!("{}-{repeat}", arm.as_str()),
                started: records
                    .arms
                    .iter()
                    .find(|a| mine(&a.arm, a.repeat))
                    .cloned(),
                served_by,
                policy_versions: versions.into_iter().collect(),
                training,
            });
        }
    }
    out
}

/// The report's "What was measured": the binary, the bank each arm
/// started from, the models, and what `rl` trained.
fn measured_markdown(records: &Records, arms: &[ArmMeasured]) -> String {
    let mut md = String::from("## What was measured\n\n");
    let builtin = records.measured_by.as_ref().map(|m| &m.bank);
    match &records.measured_by {
        Some(m) => {
            let _ = writeln!(
                md,
                "{}; the metaclaw arms start from its built-in skill bank {}.\n",
                m.metaclaw, m.bank
            );
        }
        None => md.push_str(
            "Not recorded: this run was started by a metaclaw from before runs recorded their \
             binary and skill bank.\n\n",
        ),
    }
    let short = |b: &Bank| {
        let mut said = format!(
            "sha256:{}… ({})",
            &b.digest[..b.digest.len().min(12)],
            b.skills
        );
        if Some(b) == builtin {
            said.push_str(", the built-in bank");
        }
        said
    };
    let _ = writeln!(
        md,
        "| run | the agent's model | skill bank at start | judge | evolver | who served the rounds |\n|---|---|---|---|---|---|"
    );
    for a in arms {
        let rounds = a
            .served_by
            .iter()
            .map(|(by, n)| format!("{by}: {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let Some(r) = &a.started else {
            let _ = writeln!(md, "| {} | – | – | – | – | {rounds} |", a.run);
            continue;
        };
        let model = if r.student {
            let versions: Vec<String> = a.policy_versions.iter().map(u64::to_string).collect();
            format!(
                "student: {} (policy versions {})",
                r.serves,
                if versions.is_empty() {
                    "none yet".into()
                } else {
                    versions.join(", ")
                }
            )
        } else {
            r.serves.to_string()
        };
        let or_dash = |m: &Option<super::provenance::ModelAt>| {
            m.as_ref().map_or_else(|| "–".into(), ToString::to_string)
        };
        let _ = writeln!(
            md,
            "| {} | {model} | {} | {} | {} | {rounds} |",
            a.run,
            r.bank
                .as_ref()
                .map_or_else(|| "– (no metaclaw)".into(), short),
            or_dash(&r.judge),
            or_dash(&r.evolver),
        );
    }
    for a in arms {
        let Some(t) = &a.training else { continue };
        let count = |state: &str| t.samples[state].as_u64().unwrap_or(0);
        let total: u64 = ["waiting", "ready", "in_step", "trained", "skipped"]
            .iter()
            .map(|s| count(s))
            .sum();
        let _ = writeln!(
            md,
            "\n{}: {} of {} nights trained{}; {} samples trained, of {total} the student served \
             ({} skipped, {} not trained yet).",
            a.run,
            t.nights_trained.len(),
            t.nights,
            if t.nights_trained.is_empty() {
                String::new()
            } else {
                format!(" ({})", t.nights_trained.join(", "))
            },
            t.samples_trained,
            count("skipped"),
            count("waiting") + count("ready") + count("in_step"),
        );
    }
    md.push('\n');
    md
}

/// Accuracy per day per arm, and compliance per rule per arm, as one SVG.
fn plot(bench: &Bench, summary: &[ArmSummary]) -> String {
    let days = chart(
        "Strict accuracy per day (%)",
        260,
        summary,
        |m: &Metrics| {
            bench
                .days
                .iter()
                .map(|d| m.per_day.get(&d.id).copied())
                .collect()
        },
    );
    let rules = chart(
        "Compliance per rule (%), x: P1…P5",
        220,
        summary,
        |m: &Metrics| m.compliance.to_vec(),
    );
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="720" height="500" viewBox="0 0 720 500"><rect width="720" height="500" fill="white"/><g>{}</g><g transform="translate(0,270)">{}</g></svg>"#,
        days.svg(),
        rules.svg()
    )
}

/// One line per arm: `values` of its mean metrics at x = 1, 2, … as
/// percentages (a missing value is a gap).
fn chart(
    title: &str,
    height: u32,
    summary: &[ArmSummary],
    values: impl Fn(&Metrics) -> Vec<Option<f64>>,
) -> Chart {
    Chart {
        title: title.into(),
        y_label: "%".into(),
        x_axis: XAxis::Steps,
        series: summary
            .iter()
            .map(|s| Series {
                name: s.arm.as_str().into(),
                points: values(&s.mean)
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| ((i + 1) as f64, v.map_or(f64::NAN, |v| v * 100.0)))
                    .collect(),
            })
            .collect(),
        markers: Vec::new(),
        width: 720,
        height,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::checks::Checker;
    use crate::command::PartResult;
    use crate::score::Score;

    fn record(
        day: &str,
        kind: &str,
        passed: bool,
        lenient: f64,
        checks: Vec<(Checker, i32)>,
    ) -> RoundRecord {
        RoundRecord {
            arm: "skills".into(),
            repeat: 1,
            day: day.into(),
            arc: "A".into(),
            round: "r1".into(),
            index: 0,
            kind: kind.into(),
            message: String::new(),
            answer: String::new(),
            tools: Vec::new(),
            steps: 1,
            tokens: Default::default(),
            files: Vec::new(),
            checks: checks
                .into_iter()
                .map(|(c, code)| PartResult {
                    checker: Some(c),
                    command: String::new(),
                    code,
                    output: String::new(),
                })
                .collect(),
            score: Score {
                passed,
                lenient,
                chosen: None,
            },
            gold: None,
            options: None,
            feedback: String::new(),
            skills: Vec::new(),
            served_by: Vec::new(),
            messages: 0,
            ms: 0,
        }
    }

    #[test]
    fn strict_lenient_and_compliance_are_counted_apart() {
        let rounds = [
            record(
                "day01",
                "file_check",
                true,
                1.0,
                vec![(Checker::Iso8601, 0)],
            ),
            record(
                "day01",
                "file_check",
                false,
                0.0,
                vec![(Checker::Iso8601, 0), (Checker::DoneLog, 1)],
            ),
            record("day02", "multi_choice", false, 0.5, vec![]),
            record("day02", "multi_choice", true, 1.0, vec![]),
        ];
        let m = metrics(&rounds.iter().collect::<Vec<_>>());
        assert_eq!((m.rounds, m.file_checks, m.multi_choice), (4, 2, 2));
        assert_eq!(m.strict, 0.5);
        assert_eq!(m.fc_completion, 0.5);
        assert_eq!(m.mc_exact, 0.5);
        assert_eq!(m.lenient, 2.5 / 4.0);
        assert_eq!(m.compliance, [Some(1.0), None, None, None, Some(0.0)]);
        assert_eq!(m.per_day["day01"], 0.5);
        let both = mean(&[m.clone(), metrics(&[])]);
        assert_eq!(both.strict, 0.25);
        assert_eq!(both.compliance[0], Some(1.0));
    }

    /// `--repeat N`: the summary gives each metric's mean over the repeats
    /// and, with several, their range.
    #[test]
    fn repeats_show_their_mean_and_range() {
        let pass = record("day01", "file_check", true, 1.0, vec![]);
        let fail = record("day01", "file_check", false, 0.0, vec![]);
        let (one, two) = (metrics(&[&pass, &pass]), metrics(&[&pass, &fail]));
        let both = ArmSummary {
            arm: Arm::Skills,
            mean: mean(&[one.clone(), two.clone()]),
            repeats: vec![one.clone(), two],
            held_out: None,
            training_days: None,
        };
        assert_eq!(spread(&both, |m| m.strict), "75.0% (50.0%–100.0%)");
        let single = ArmSummary {
            arm: Arm::Skills,
            mean: one.clone(),
            repeats: vec![one],
            held_out: None,
            training_days: None,
        };
        assert_eq!(spread(&single, |m| m.strict), "100.0%");
    }
}
