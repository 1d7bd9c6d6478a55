//! The report: each check's verdict, message and fix, printed for a
//! person or as JSON (`--json`), and the exit status it makes.

use anyhow::Result;
use metaclaw_core::home::Home;
use serde::Serialize;
use serde_json::json;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Verdict {
    Ok,
    /// Not checked (and why, in the message).
    Skipped,
    Warning,
    Error,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Skipped => "skipped",
            Verdict::Warning => "warning",
            Verdict::Error => "error",
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct Check {
    check: &'static str,
    pub(super) verdict: Verdict,
    pub(super) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Default)]
pub(super) struct Report {
    pub(super) checks: Vec<Check>,
}

impl Report {
    fn push(
        &mut self,
        check: &'static str,
        verdict: Verdict,
        message: String,
        fix: Option<String>,
    ) {
        self.checks.push(Check {
            check,
            verdict,
            message,
            fix,
        });
    }
    pub(super) fn ok(&mut self, check: &'static str, message: impl Into<String>) {
        self.push(check, Verdict::Ok, message.into(), None);
    }
    pub(super) fn skipped(&mut self, check: &'static str, message: impl Into<String>) {
        self.push(check, Verdict::Skipped, message.into(), None);
    }
    pub(super) fn warning(
        &mut self,
        check: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.push(check, Verdict::Warning, message.into(), Some(fix.into()));
    }
    pub(super) fn error(
        &mut self,
        check: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.push(check, Verdict::Error, message.into(), Some(fix.into()));
    }
    pub(super) fn count(&self, verdict: Verdict) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }
}

pub(super) fn print(report: &Report, home: &Home, config_path: &Path, json: bool) -> Result<()> {
    let (errors, warnings) = (report.count(Verdict::Error), report.count(Verdict::Warning));
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "home": home.root,
                "config": config_path,
                "checks": report.checks,
                "errors": errors,
                "warnings": warnings,
                "ok": errors == 0,
            }))?
        );
        return Ok(());
    }
    say!(
        "metaclaw doctor: home {}, config {}",
        home.root.display(),
        config_path.display()
    );
    let width = report
        .checks
        .iter()
        .map(|c| c.check.len())
        .max()
        .unwrap_or(0);
    for c in &report.checks {
        say!(
            "{:<8} {:<width$}  {}",
            c.verdict.label(),
            c.check,
            c.message
        );
        if let Some(fix) = &c.fix {
            say!("{:<8} {:<width$}  fix: {fix}", "", "");
        }
    }
    match (errors, warnings) {
        (0, 0) => say!("all good"),
        (0, w) => say!("{w} warning(s); metaclaw can run"),
        (e, w) => {
            say!("{e} error(s), {w} warning(s): fix the errors, then run `metaclaw doctor` again")
        }
    }
    Ok(())
}
