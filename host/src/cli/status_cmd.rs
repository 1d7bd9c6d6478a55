//! `metaclaw status`: the running daemon's [`Status`], or what the store
//! holds when none runs, and how the agents are wired.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use super::{JsonFlag, human_duration, runtime};
use metaclaw_core::admin::{AdminClient, AdminError};
use metaclaw_core::app::Status;
use metaclaw_core::app::status::{
    PluginsStatus, SchedulerStatus, SkillsStatus, StudentStatus, TrainingStatus,
};
use metaclaw_core::home::Home;

/// `status --json`: the daemon's status, with the home and the wiring.
#[derive(Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    status: &'a Status,
    home: &'a Path,
    wiring: serde_json::Value,
}

pub fn status(home: &Home, config_path: &Path, args: JsonFlag) -> Result<ExitCode> {
    let running = home.running()?;
    let Some(info) = running else {
        let (sessions, turns) = db_counts(home, config_path);
        if args.json {
            say!(
                "{}",
                json!({ "running": false, "healthy": false, "home": home.root, "sessions": sessions, "turns": turns, "wiring": super::claws_cmd::wiring_json(home) })
            );
        } else {
            say!("metaclaw is not running (home {})", home.root.display());
            if let (Some(s), Some(t)) = (sessions, turns) {
                say!("  recorded: {s} sessions, {t} turns");
            }
            super::claws_cmd::print_wiring(home);
            say!("  start it with: metaclaw start");
        }
        return Ok(ExitCode::from(3));
    };
    let fetched = match AdminClient::of(home, &info) {
        Ok(admin) => runtime()?.block_on(admin.timeout(Duration::from_secs(3)).status()),
        Err(e) => Err(e),
    };
    let status = match fetched {
        Ok(status) => status,
        Err(e) => {
            let report = json!({ "running": true, "healthy": false, "pid": info.pid, "url": info.url, "error": e.to_string(), "wiring": super::claws_cmd::wiring_json(home) });
            if args.json {
                say!("{report}");
            } else {
                // A daemon of another version answers, in another shape.
                let what = match e {
                    AdminError::Unreadable { .. } => "its status cannot be read",
                    _ => "not answering",
                };
                say!(
                    "metaclaw is running (pid {}) but {what} on {}: {e:#}",
                    info.pid,
                    info.url
                );
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    if args.json {
        let report = Report {
            status: &status,
            home: &home.root,
            wiring: super::claws_cmd::wiring_json(home),
        };
        say!("{}", serde_json::to_string(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "metaclaw is running{}",
        if status.demo { " (demo)" } else { "" }
    );
    say!(
        "  url:       {}   (OpenAI base URL: {}/v1)",
        info.url,
        info.url
    );
    say!("  pid:       {}", status.pid);
    say!("  mode:      {}", status.mode);
    say!("  uptime:    {}", human_duration(status.uptime_seconds));
    say!("  upstream:  {}", status.upstream);
    say!(
        "  sessions:  {} ({} active)",
        status.sessions,
        status.active_sessions
    );
    say!("  turns:     {}", status.turns);
    if let Some(d) = &status.deployment {
        print_deployment(d);
    }
    if let Some(s) = &status.skills {
        print_skills(s);
    }
    if let Some(p) = &status.plugins {
        print_plugins(p);
    }
    if let Some(note) = &status.learning.note {
        say!("  learning:  {note}");
    }
    if let Some(student) = &status.student {
        print_student(student);
    }
    if let Some(training) = &status.training {
        print_training(training);
    }
    for why in [&status.evolution_blocked, &status.evolution_unguarded]
        .into_iter()
        .flatten()
    {
        say!("  warning:   {why}");
    }
    super::claws_cmd::print_wiring(home);
    say!("  home:      {}", home.root.display());
    Ok(ExitCode::SUCCESS)
}

/// `status` on a shared store: the instances and who leads what.
fn print_deployment(d: &metaclaw_core::app::status::DeploymentStatus) {
    use metaclaw_core::app::status::DeploymentStatus;
    let d = match d {
        DeploymentStatus::Read(d) => d,
        DeploymentStatus::Unread { error } => {
            say!("  instances: cannot be read: {error}");
            return;
        }
    };
    let alive = d.instances.iter().filter(|i| i.alive).count();
    say!(
        "  instances: {alive} alive of {} on this store (this one: {})",
        d.instances.len(),
        d.this
    );
    for i in &d.instances {
        let state = match (i.alive, i.instance.stopped_ms) {
            (true, _) => format!("alive, beat {:.1}s ago", i.silent_s),
            (false, Some(_)) => "stopped".to_string(),
            (false, None) => format!("silent for {:.0}s", i.silent_s),
        };
        say!(
            "    {}  {}  pid {}  v{}  {state}, clock {:+} ms",
            i.instance.id,
            i.instance.listen,
            i.instance.pid,
            i.instance.version,
            i.instance.clock_offset_ms
        );
    }
    for l in &d.leases {
        say!("  leads:     {} → {} (epoch {})", l.name, l.holder, l.epoch);
    }
}

/// `status`: the skill library and retrieval.
fn print_skills(s: &SkillsStatus) {
    say!(
        "  skills:    {} loaded (generation {}) from {}",
        s.loaded,
        s.generation,
        s.dir.display()
    );
    let r = &s.retrieval;
    let mode = &r.configured.mode;
    let mut line = match &r.none_answers {
        Some(why) => format!("  retrieval: none answers ({mode} configured, not loaded: {why})"),
        None => format!("  retrieval: {mode}"),
    };
    if let Some(model) = &r.configured.embeddings {
        line.push_str(&format!(" ({model})"));
    }
    if let Some(last) = &s.last_retriever {
        line.push_str(&format!(", last answered by {last}"));
    }
    say!("{line}");
    let indexes: Vec<String> = s.retrievers.iter().map(ToString::to_string).collect();
    if !indexes.is_empty() {
        say!("  indexes:   {}", indexes.join(", "));
    }
    if let Some(problem) = &r.configured.problem {
        say!("  warning:   embeddings are off, BM25 retrieves instead: {problem}");
    }
    for problem in &s.problems {
        say!(
            "  warning:   skill {} skipped: {}",
            problem.path.display(),
            problem.error
        );
    }
}

/// `status`: the plugins, their memory and what was refused.
fn print_plugins(p: &PluginsStatus) {
    let problems = p.problems + p.notices;
    say!(
        "  plugins:   {} loaded{}{}{}",
        p.loaded,
        if p.loading {
            " (still loading: more to come)"
        } else {
            ""
        },
        if p.locked {
            ", pinned by metaclaw.lock"
        } else {
            ""
        },
        if problems > 0 {
            format!(", {problems} problem(s) or notice(s): see `metaclaw plugins list`")
        } else {
            String::new()
        }
    );
    for why in &p.pin_conflicts {
        say!("  warning:   {why}");
    }
    for d in &p.disabled {
        say!("  warning:   plugin {} is {}", d.plugin, d.why);
    }
    if let Some(m) = &p.memory {
        let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
        say!(
            "  plugin memory: {:.1} MiB of {:.0} MiB (plugins.total_memory_mb), peak {:.1} MiB",
            mib(m.used),
            mib(m.limit),
            mib(m.peak)
        );
    }
    for problem in &p.refused_for_resources {
        say!(
            "  warning:   plugin {} {}",
            problem.path.display(),
            problem.error
        );
    }
}

/// `status`: training's queue, scheduler, distillation and last error.
fn print_training(training: &TrainingStatus) {
    match (&training.note, &training.queue) {
        (Some(note), _) => say!("  training:  {note}"),
        (None, Some(q)) => say!(
            "  training:  {} ready, {} waiting for judging, {} trained, {} skipped (`metaclaw train status`)",
            q.ready,
            q.waiting,
            q.trained,
            q.skipped
        ),
        (None, None) => say!("  training:  its queue cannot be read (`metaclaw train status`)"),
    }
    if let Some(scheduler) = &training.scheduler {
        print_scheduler(scheduler);
    }
    if let Some(opd) = &training.trainer.opd {
        say!("  distill:   teacher {opd}");
    }
    if let Some(error) = &training.trainer.last_error {
        say!("  warning:   the last training step failed: {error}");
    }
}

/// The training scheduler's line: whether steps wait for windows, and
/// whether one is open and why (`metaclaw scheduler status` says more).
fn print_scheduler(s: &SchedulerStatus) {
    if let Some(error) = &s.error {
        say!("  scheduler: no step starts on its own: {error}");
    } else if !s.gated {
        say!(
            "  scheduler: off: steps run whenever a batch is ready (mode rl without scheduler.enabled, or the manual trigger)"
        );
    } else {
        let state = s.state.as_deref().unwrap_or("?");
        match (s.open, &s.reason) {
            (Some(true), Some(why)) => say!("  scheduler: window open ({why}); {state}"),
            (Some(false), Some(why)) => say!("  scheduler: window shut: {why}"),
            _ => say!("  scheduler: {state}, not assessed yet"),
        }
    }
}

/// The trainable model's line (rl/auto): on which weights it answers, or
/// why it does not and who answers instead.
fn print_student(s: &StudentStatus) {
    let base = &s.base_model;
    let h = &s.health;
    let counts = format!(
        "{} sampled, {} parse error(s), {} fallback(s)",
        h.samples, h.parse_errors, h.fallbacks
    );
    let shown = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    match &*h.state {
        "ready" => say!(
            "  student:   {base} answers (sampler {}, policy version {}); {counts}",
            h.sampler.as_deref().unwrap_or("?"),
            shown(h.policy_version.map(|v| v.to_string()))
        ),
        state => {
            let instead = match s.fallback_to_llm {
                true => "llm answers instead",
                false => "turns fail (rl.fallback_to_llm is off)",
            };
            say!(
                "  student:   {base} is {state}: {}; {instead}; {counts}",
                h.reason.as_deref().unwrap_or("no reason given")
            );
        }
    }
    if let Some(why) = &h.last_fallback {
        say!("  fallback:  last: {why}");
    }
    if let Some(rendering) = &h.rendering {
        say!(
            "  rendering: {rendering} ({} tool calls) from {}",
            h.tool_call_format.as_deref().unwrap_or("no"),
            h.tokenizer_dir.as_deref().unwrap_or("?")
        );
    }
}

fn db_counts(home: &Home, config_path: &Path) -> (Option<u64>, Option<u64>) {
    let path = super::sessions_cmd::db_path(home, config_path);
    let Ok(conn) = path.read() else {
        return (None, None);
    };
    let count = |sql: &str| {
        conn.query_row(sql, (), |r| r.get::<i64>(0))
            .ok()
            .map(|n| n.max(0) as u64)
    };
    (
        count("SELECT count(*) FROM sessions"),
        count("SELECT count(*) FROM turns"),
    )
}
