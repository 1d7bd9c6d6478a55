//! `metaclaw skills stats` (and the outcomes part of `skills show`),
//! printed: the rows are `skills::stats`'s.

use metaclaw_core::skills::outcomes::Board;
use metaclaw_core::skills::stats::Row;
pub use metaclaw_core::skills::stats::rows;

pub fn print(board: &Board, rows: &[Row]) {
    say!(
        "{:<36} {:<9} {:>8} {:>7} {:>7}  {:<19} flag",
        "skill",
        "version",
        "injected",
        "judged",
        "reward",
        "success (95%)"
    );
    for r in rows {
        let reward = r
            .mean_reward
            .map_or_else(|| "-".to_string(), |m| format!("{m:+.2}"));
        let success = format!(
            "{:.2} ({:.2}–{:.2})",
            r.success.mean, r.success.low, r.success.high
        );
        let mut version = r.version.clone();
        if !r.current && r.created_by.is_some() {
            version.push('*');
        }
        let flag = match (&r.retired, &r.flag) {
            (Some(_), _) => "retired (metaclaw skills restore puts it back)".to_string(),
            (None, Some(f)) => {
                let kept = match r.created_by.as_deref() {
                    Some(by) if !by.starts_with("evolved:") => "; flagged only (not evolved)",
                    _ => "",
                };
                format!("worse than the turns without it: {}{kept}", f.reason)
            }
            (None, None) => String::new(),
        };
        say!(
            "{:<36} {:<9} {:>8} {:>7} {:>7}  {:<19} {flag}",
            r.skill,
            version,
            r.injected,
            r.judged,
            reward,
            success
        );
    }
    let all = board.all();
    say!(
        "every main turn: {} (judged {}{}); a version with no judged turn starts at {:.2}{}",
        all.injected,
        all.judged,
        match all.judged {
            0 => String::new(),
            n => format!(", mean reward {:+.2}", all.reward_sum / n as f64),
        },
        board.prior(),
        if rows.iter().any(|r| !r.current && r.created_by.is_some()) {
            "; * an earlier version"
        } else {
            ""
        }
    );
}
