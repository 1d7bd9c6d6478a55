//! `feedback`: the user's verdict on a turn or a session, written straight
//! to the store (daemon or not). It outranks the judge in the rewards that
//! learning, the skills' outcomes and the canaries use (store::feedback).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};

use super::sessions_cmd::db_path;
use super::{FeedbackArgs, load_config};
use metaclaw_core::app::feedback::{self, FeedbackRequest, Rating};
use metaclaw_core::home::Home;
use metaclaw_core::redact::Redactor;

pub fn run(home: &Home, config_path: &Path, args: FeedbackArgs) -> Result<ExitCode> {
    let loaded = load_config(config_path)?;
    let path = db_path(home, config_path);
    if !path.exists() {
        bail!(
            "no sessions recorded yet ({} does not exist): feedback names a recorded turn or session",
            path.display()
        );
    }
    let rating = match (args.up, args.down) {
        (true, _) => Some(Rating::Up),
        (_, true) => Some(Rating::Down),
        _ => None,
    };
    let request = FeedbackRequest {
        turn_id: args.turn,
        session_id: args.session,
        rating,
        score: args.score,
        comment: args.comment,
    };
    let redactor = Redactor::new(loaded.config.secrets());
    let recorded = feedback::checked(request, &redactor, "cli")
        .and_then(|new| feedback::store(&path, &new))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&recorded)?);
        return Ok(ExitCode::SUCCESS);
    }
    let f = &recorded.feedback;
    let target = match &f.turn_id {
        Some(turn) => format!("turn {turn} of session {}", f.session_id),
        None => format!("session {}", f.session_id),
    };
    say!("feedback {:+} recorded on {target}", f.value);
    match recorded.rewarded_turns.len() {
        0 => say!("no answered main turn takes it as its reward (failed or not a main turn)"),
        n => say!(
            "{n} turn(s) now take it as their reward, ahead of the judge: {}",
            recorded.rewarded_turns.join(", ")
        ),
    }
    Ok(ExitCode::SUCCESS)
}
