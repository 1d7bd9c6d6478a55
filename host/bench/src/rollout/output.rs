//! What a rollout prints: a table row per task as each finishes (or one
//! JSON line with `--json`), then the totals and what confined `run`. With
//! `--json`, stdout has only the task lines; the rest goes to stderr.

use super::agent::{Agent, Finished, Summary};
use super::sandbox::Sandbox;
use super::tasks::Task;

pub struct Printer {
    json: bool,
    /// The task id column's width.
    width: usize,
}

impl Printer {
    pub fn new(json: bool, tasks: &[Task]) -> Self {
        let width = tasks
            .iter()
            .map(|t| t.id.len())
            .max()
            .unwrap_or(4)
            .clamp(4, 40);
        Self { json, width }
    }

    pub fn header(&self, agent: &Agent, tasks: usize, concurrency: u32, sandbox: &Sandbox) {
        let intro = format!(
            "rollout {}: {tasks} task(s) through {} with model {}, {concurrency} at a time, at \
             most {} model calls each",
            agent.run_id, agent.url, agent.model, agent.max_steps
        );
        let run_tool = format!("run tool: {}", sandbox.describe());
        if self.json {
            eprintln!("{intro}");
            eprintln!("{run_tool}");
            return;
        }
        say!("{intro}");
        say!("{run_tool}");
        say!();
        say!(
            "{:<w$}  {:<14}  {:>5}  {:>5}  SESSION / ERROR",
            "TASK",
            "FINISHED",
            "STEPS",
            "TOOLS",
            w = self.width
        );
    }

    /// One finished task.
    pub fn task(&self, s: &Summary) {
        if self.json {
            match serde_json::to_string(s) {
                Ok(line) => say!("{line}"),
                Err(e) => eprintln!("error: task {}: {e}", s.task_id),
            }
            return;
        }
        let mut detail = s.session_id.clone();
        if let Some(error) = &s.error {
            detail.push_str(&format!(
                ": {}",
                metaclaw_core::untrusted::log_line(error, 300)
            ));
        }
        if let Some(path) = &s.workspace {
            detail.push_str(&format!(" (workspace kept: {})", path.display()));
        }
        say!(
            "{:<w$}  {:<14}  {:>5}  {:>5}  {detail}",
            s.task_id,
            s.finished.as_str(),
            s.steps,
            s.tool_calls,
            w = self.width
        );
    }

    pub fn footer(&self, summaries: &[Summary], sandbox: &Sandbox) {
        let count = |f: Finished| summaries.iter().filter(|s| s.finished == f).count();
        let totals = format!(
            "{} task(s): {} answered, {} stopped at max steps, {} stopped at max tool calls, {} \
             failed",
            summaries.len(),
            count(Finished::Answered),
            count(Finished::MaxSteps),
            count(Finished::MaxToolCalls),
            count(Finished::Error)
        );
        let disabled = sandbox
            .disabled()
            .map(|why| format!("the run tool was disabled: {why}"));
        if self.json {
            eprintln!("{totals}");
            if let Some(line) = disabled {
                eprintln!("{line}");
            }
            return;
        }
        say!();
        say!("{totals}");
        if let Some(line) = disabled {
            say!("{line}");
        }
    }
}
