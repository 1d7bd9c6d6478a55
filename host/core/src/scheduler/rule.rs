//! Whether a training window is open now, and why. The default rule:
//! sleep OR (system idle AND agent idle), never during a calendar event,
//! and only when the window is expected to last `min_window`. A signal
//! that is not available counts as "no" (system idle unknown is not idle);
//! a calendar that is configured but cannot be read keeps every window
//! shut (fail closed: the user asked not to be disturbed during events).

use chrono::{DateTime, Duration, Utc};

use super::calendar::Interval;
use super::sleep::Sleep;

/// The signals, read at `now`.
#[derive(Debug, Clone)]
pub struct Signals {
    pub now: DateTime<Utc>,
    /// `None`: no sleep window configured.
    pub sleep: Option<Sleep>,
    /// How long the machine has been idle; `Err`: not available here (why).
    pub system_idle: Result<Duration, super::idle::NoIdleSource>,
    /// How long since the agent's last main turn.
    pub agent_idle: Duration,
    /// `None`: no calendar configured; `Err`: configured, unreadable.
    pub calendar: Option<Result<CalendarNow, super::calendar::Unreadable>>,
}

/// What the calendar says at `now`.
#[derive(Debug, Clone, Default)]
pub struct CalendarNow {
    pub busy: Option<Interval>,
    pub next: Option<Interval>,
}

#[derive(Debug, Clone, Copy)]
pub struct WindowRule {
    pub idle_threshold: Duration,
    pub min_window: Duration,
}

/// The decision: open or not, why, and until when it is expected to stay
/// open (`None`: no known end).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub open: bool,
    pub reason: String,
    pub until: Option<DateTime<Utc>>,
}

fn minutes(d: Duration) -> i64 {
    d.num_minutes()
}

pub fn decide(s: &Signals, settings: WindowRule) -> Decision {
    let shut = |reason: String| Decision {
        open: false,
        reason,
        until: None,
    };
    let next_event = match &s.calendar {
        Some(Err(why)) => {
            return shut(format!(
                "the calendar cannot be read ({why}): windows stay shut until it can"
            ));
        }
        Some(Ok(c)) => {
            if let Some((_, end)) = c.busy {
                return shut(format!("a calendar event until {end}"));
            }
            c.next.map(|(start, _)| start)
        }
        None => None,
    };
    let thr = settings.idle_threshold;
    let (by_sleep, sleep_end) = match s.sleep {
        Some(Sleep::Inside { until }) => (true, Some(until)),
        _ => (false, None),
    };
    let system_idle = s.system_idle.as_ref().is_ok_and(|d| *d >= thr);
    let agent_idle = s.agent_idle >= thr;
    let by_idle = system_idle && agent_idle;
    if !by_sleep && !by_idle {
        let system = match &s.system_idle {
            Ok(d) => format!("the machine idle {} min", minutes(*d)),
            Err(why) => format!("the machine's idle time unknown ({why})"),
        };
        let sleep = match s.sleep {
            Some(Sleep::Outside { next }) => format!("outside the sleep window (next at {next})"),
            _ => "no sleep window".to_string(),
        };
        return shut(format!(
            "{sleep}; {system}, the agent idle {} min (both must reach {} min)",
            minutes(s.agent_idle),
            minutes(thr)
        ));
    }
    // Expected to last until the sleep window ends (when that is why) or
    // indefinitely (idle), cut by the next calendar event.
    let until = match (by_idle, sleep_end, next_event) {
        (true, _, next) => next,
        (false, end, None) => end,
        (false, Some(end), Some(next)) => Some(end.min(next)),
        (false, None, next) => next,
    };
    if let Some(until) = until
        && until - s.now < settings.min_window
    {
        return shut(format!(
            "a window would last only {} min (until {until}; scheduler.min_window_minutes is {})",
            minutes(until - s.now),
            minutes(settings.min_window)
        ));
    }
    let reason = match (by_sleep, by_idle) {
        (true, true) => "sleep window, and the machine and the agent are idle",
        (true, false) => "sleep window",
        _ => "the machine and the agent are idle",
    };
    Decision {
        open: true,
        reason: reason.to_string(),
        until,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::clock::utc;

    const SETTINGS: WindowRule = WindowRule {
        idle_threshold: Duration::minutes(30),
        min_window: Duration::minutes(20),
    };

    fn base() -> Signals {
        Signals {
            now: utc("2026-11-24T23:00:00Z"),
            sleep: None,
            system_idle: Err(super::super::idle::NoIdleSource(Vec::new())),
            agent_idle: Duration::minutes(0),
            calendar: None,
        }
    }

    #[test]
    fn sleep_opens_a_window_until_it_ends() {
        let mut s = base();
        s.sleep = Some(Sleep::Inside {
            until: utc("2026-11-25T06:00:00Z"),
        });
        let d = decide(&s, SETTINGS);
        assert!(d.open, "{d:?}");
        assert_eq!(d.until, Some(utc("2026-11-25T06:00:00Z")));
        // The end of the night too close: not worth starting.
        s.now = utc("2026-11-25T05:50:00Z");
        let d = decide(&s, SETTINGS);
        assert!(!d.open && d.reason.contains("only 10 min"), "{d:?}");
    }

    #[test]
    fn idle_needs_both_the_machine_and_the_agent() {
        let mut s = base();
        s.system_idle = Ok(Duration::minutes(45));
        s.agent_idle = Duration::minutes(5);
        let d = decide(&s, SETTINGS);
        assert!(
            !d.open && d.reason.contains("the agent idle 5 min"),
            "{d:?}"
        );
        s.agent_idle = Duration::minutes(40);
        assert!(decide(&s, SETTINGS).open);
        // The machine's idle time unknown: not idle, and said so.
        s.system_idle = Err(super::super::idle::NoIdleSource(vec![
            super::super::idle::SourceFailed::Wayland,
        ]));
        let d = decide(&s, SETTINGS);
        assert!(!d.open && d.reason.contains("unknown"), "{d:?}");
    }

    #[test]
    fn a_calendar_event_keeps_it_shut_and_an_unreadable_calendar_too() {
        let mut s = base();
        s.sleep = Some(Sleep::Inside {
            until: utc("2026-11-25T06:00:00Z"),
        });
        s.calendar = Some(Ok(CalendarNow {
            busy: Some((utc("2026-11-24T22:30:00Z"), utc("2026-11-24T23:30:00Z"))),
            next: None,
        }));
        let d = decide(&s, SETTINGS);
        assert!(!d.open && d.reason.contains("calendar event"), "{d:?}");
        // An event ahead cuts the window short.
        s.calendar = Some(Ok(CalendarNow {
            busy: None,
            next: Some((utc("2026-11-25T01:00:00Z"), utc("2026-11-25T02:00:00Z"))),
        }));
        assert_eq!(
            decide(&s, SETTINGS).until,
            Some(utc("2026-11-25T01:00:00Z"))
        );
        s.calendar = Some(Err(super::super::calendar::Unreadable::Source(
            super::super::source::SourceError::Status(reqwest::StatusCode::NOT_FOUND),
        )));
        let d = decide(&s, SETTINGS);
        assert!(!d.open && d.reason.contains("cannot be read"), "{d:?}");
    }
}
