//! The scheduler as the trainer meets it: the signals read now, the rule's
//! decision, the state machine, every transition stored and logged. The
//! trainer asks [`Gate::may_step`] before each step it starts on its own;
//! `metaclaw scheduler status` builds the same [`Report`] without a
//! machine (it shows the daemon's stored state beside the live decision).
//! Nothing here runs on the serving side: the proxy only bumps
//! [`LastActivity`] on main turns.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::calendar;
use super::idle::{IdleProbe, SourceFailed, SystemIdle};
use super::machine::{Machine, State};
use super::rule::{self, CalendarNow, Decision, Signals, WindowRule};
use super::sleep::{Sleep, SleepWindow, Zone};
use super::source::CalendarSource;
use crate::clock::{Clock, LastActivity};
use crate::config::{Config, Mode};
use crate::store::scheduler::{self as stored, Transition};

/// `scheduler.force`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Force {
    Open,
    Shut,
}

/// What the scheduler is built from (`scheduler.*`), checked.
pub struct Parts {
    pub settings: WindowRule,
    pub zone: Zone,
    pub sleep: Option<SleepWindow>,
    pub force: Option<Force>,
    pub calendar: Option<CalendarSource>,
}

/// A scheduler setting that is not one: each names its key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("scheduler.timezone: {0}")]
    Timezone(super::sleep::UnknownZone),
    #[error(transparent)]
    Sleep(#[from] super::sleep::WindowError),
    #[error(
        "scheduler.force: {0:?} is not `open` or `shut` (leave it empty to let the signals decide)"
    )]
    Force(String),
    #[error("scheduler.calendar.ics_url: {0}")]
    Calendar(super::source::SourceError),
}

impl Parts {
    /// From the config; a bad value is an error naming the key (the caller
    /// keeps training shut and says why).
    pub fn from_config(config: &Config, home: &crate::home::Home) -> Result<Self, ConfigError> {
        let s = &config.scheduler;
        let zone = Zone::parse(&s.timezone).map_err(ConfigError::Timezone)?;
        let sleep = match s.sleep_start.trim() {
            "" => None,
            start => Some(SleepWindow::parse(start, &s.sleep_end, &s.timezone)?),
        };
        let force = match s.force.trim() {
            "" => None,
            "open" => Some(Force::Open),
            "shut" => Some(Force::Shut),
            other => return Err(ConfigError::Force(other.to_string())),
        };
        let calendar = match s.calendar.ics_url.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(location) => Some(
                CalendarSource::new(
                    location,
                    &home.scheduler_dir(),
                    std::time::Duration::from_secs(
                        u64::from(s.calendar.refresh_minutes.max(1)) * 60,
                    ),
                )
                .map_err(ConfigError::Calendar)?,
            ),
        };
        Ok(Self {
            settings: WindowRule {
                idle_threshold: Duration::minutes(i64::from(s.idle_threshold_minutes)),
                min_window: Duration::minutes(i64::from(s.min_window_minutes)),
            },
            zone,
            sleep,
            force,
            calendar,
        })
    }
}

/// Whether training waits for windows in this config: always in `auto`,
/// in `rl` with `scheduler.enabled`, never with the manual trigger (steps
/// run when asked).
pub fn gates(config: &Config) -> bool {
    !config.rl.manual_train_trigger && (config.mode == Mode::Auto || config.scheduler.enabled)
}

/// One signal as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SignalReport {
    pub name: &'static str,
    pub value: String,
    pub source: String,
}

/// Everything `metaclaw scheduler status` says.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub now: DateTime<Utc>,
    pub open: bool,
    pub reason: String,
    /// Until when the window is expected to stay open.
    pub until: Option<DateTime<Utc>>,
    pub signals: Vec<SignalReport>,
    /// The next expected opening (sleep or the end of an event) and why.
    pub next_opening: Option<(DateTime<Utc>, String)>,
}

/// What the scheduler reads, besides the config.
pub struct Inputs {
    pub clock: Arc<dyn Clock>,
    pub idle: Arc<dyn IdleProbe>,
    pub activity: LastActivity,
}

/// Reads the signals and decides, without changing any state.
pub async fn assess(parts: &Parts, inputs: &Inputs) -> Report {
    let now = inputs.clock.now();
    let idle = inputs.idle.clone();
    let system = tokio::task::spawn_blocking(move || idle.read())
        .await
        .unwrap_or_else(|e| SystemIdle::none(vec![SourceFailed::ProbeFailed(e.to_string())]));
    let last_activity = inputs.activity.at_ms();
    let agent_idle = match last_activity {
        Some(ms) => {
            (now - DateTime::from_timestamp_millis(ms).unwrap_or(now)).max(Duration::zero())
        }
        // No main turn recorded, ever: the agent has been idle as long as
        // anyone knows.
        None => Duration::MAX,
    };
    let sleep = parts.sleep.as_ref().map(|w| w.at(now));
    let (calendar, busy, calendar_line) = read_calendar(parts, now).await;
    let signals = Signals {
        now,
        sleep,
        system_idle: system.idle.clone(),
        agent_idle,
        calendar,
    };
    let decision = match parts.force {
        Some(Force::Open) => Decision {
            open: true,
            reason: "forced open (scheduler.force: open)".into(),
            until: None,
        },
        Some(Force::Shut) => Decision {
            open: false,
            reason: "forced shut (scheduler.force: shut)".into(),
            until: None,
        },
        None => rule::decide(&signals, parts.settings),
    };
    let mut lines = vec![
        SignalReport {
            name: "sleep",
            value: match sleep {
                None => "off (scheduler.sleep_start is empty)".into(),
                Some(Sleep::Inside { until }) => format!("inside the window until {until}"),
                Some(Sleep::Outside { next }) => format!("outside the window; next at {next}"),
            },
            source: match &parts.sleep {
                Some(w) => format!(
                    "scheduler.sleep_start/sleep_end {}–{} ({})",
                    w.start.format("%H:%M"),
                    w.end.format("%H:%M"),
                    zone_name(parts.zone)
                ),
                None => "scheduler.sleep_start".into(),
            },
        },
        SignalReport {
            name: "system_idle",
            value: match &system.idle {
                Ok(d) => format!("idle {} min", d.num_minutes()),
                Err(why) => format!("not available: {why}"),
            },
            source: system.source,
        },
        SignalReport {
            name: "agent_idle",
            value: match last_activity {
                Some(_) => format!("idle {} min (no main turn since)", agent_idle.num_minutes()),
                None => "no main turn recorded".into(),
            },
            source: "the last main turn (side turns and heartbeats do not count)".into(),
        },
    ];
    lines.push(calendar_line);
    let next_opening = match decision.open {
        true => None,
        false => next_opening(parts, now, busy.as_ref()),
    };
    Report {
        now,
        open: decision.open,
        reason: decision.reason,
        until: decision.until,
        signals: lines,
        next_opening,
    }
}

fn zone_name(zone: Zone) -> String {
    match zone {
        Zone::Named(tz) => tz.name().to_string(),
        Zone::Local => "the machine's time zone".into(),
    }
}

/// The calendar at `now`: what the rule reads, the busy intervals (for the
/// next opening) and the line `status` shows.
async fn read_calendar(
    parts: &Parts,
    now: DateTime<Utc>,
) -> (
    Option<Result<CalendarNow, calendar::Unreadable>>,
    Option<calendar::Busy>,
    SignalReport,
) {
    let Some(source) = &parts.calendar else {
        return (
            None,
            None,
            SignalReport {
                name: "calendar",
                value: "off (no scheduler.calendar.ics_url)".into(),
                source: "scheduler.calendar.ics_url".into(),
            },
        );
    };
    let busy = match source.text(now).await {
        Err(why) => Err(calendar::Unreadable::from(why)),
        Ok(fetched) => calendar::busy(
            &fetched.ics,
            parts.zone,
            now - Duration::days(1),
            now + Duration::days(8),
        )
        .map(|busy| (busy, fetched))
        .map_err(calendar::Unreadable::from),
    };
    match busy {
        Err(why) => (
            Some(Err(why.clone())),
            None,
            SignalReport {
                name: "calendar",
                value: format!("cannot be read: {why} (windows stay shut)"),
                source: source.describe(),
            },
        ),
        Ok((busy, fetched)) => {
            let at = CalendarNow {
                busy: busy.at(now),
                next: busy.next_after(now),
            };
            let mut value = match (at.busy, at.next) {
                (Some((_, end)), _) => format!("busy until {end}"),
                (None, Some((start, _))) => format!("free; next event at {start}"),
                (None, None) => "free; no event in the next 8 days".into(),
            };
            value.push_str(&format!("; copy fetched at {}", fetched.fetched_at));
            if let Some(note) = &fetched.note {
                value.push_str(&format!("; {note}"));
            }
            if !busy.problems.is_empty() {
                value.push_str(&format!("; events not read: {}", busy.problems.join("; ")));
            }
            (
                Some(Ok(at)),
                Some(busy),
                SignalReport {
                    name: "calendar",
                    value,
                    source: source.describe(),
                },
            )
        }
    }
}

/// When a window is next expected to open by the sleep window, past any
/// event that would keep it shut (idle windows cannot be foreseen).
fn next_opening(
    parts: &Parts,
    now: DateTime<Utc>,
    busy: Option<&calendar::Busy>,
) -> Option<(DateTime<Utc>, String)> {
    if parts.force == Some(Force::Shut) {
        return None;
    }
    let window = parts.sleep.as_ref()?;
    let mut at = match window.at(now) {
        Sleep::Inside { .. } => now,
        Sleep::Outside { next } => next,
    };
    let mut why = "the sleep window starts".to_string();
    // Each pass moves past one event or into the next night: bounded.
    for _ in 0..64 {
        let end = match window.at(at) {
            Sleep::Inside { until } => until,
            Sleep::Outside { next } => {
                at = next;
                why = "the sleep window starts".into();
                continue;
            }
        };
        match busy.and_then(|b| b.at(at)) {
            Some((_, event_end)) => {
                at = event_end;
                why = "a calendar event ends in the sleep window".into();
            }
            None => {
                let cut = busy
                    .and_then(|b| b.next_after(at))
                    .map_or(end, |(start, _)| start.min(end));
                if cut - at >= parts.settings.min_window {
                    return Some((at, why));
                }
                at = cut;
            }
        }
    }
    None
}

/// The scheduler in the daemon: the machine, its store and log.
pub struct Gate {
    parts: Parts,
    inputs: Inputs,
    db: crate::store::Db,
    machine: Mutex<Machine>,
    last: Mutex<Option<Report>>,
    /// The store's last main turn joins the activity once, at the first
    /// tick (on the trainer's thread, not at start-up: it reads every turn).
    seeded: std::sync::Once,
}

impl Gate {
    /// Restores the machine from the store (a window left open by a
    /// process that stopped is closed, and says so).
    pub fn new(parts: Parts, inputs: Inputs, db: crate::store::Db) -> Arc<Self> {
        let now = inputs.clock.now();
        let last = db.read().ok().and_then(|c| stored::last(&c).ok().flatten());
        let (machine, closed) = Machine::restore(last.as_ref(), now);
        let gate = Arc::new(Self {
            parts,
            inputs,
            db,
            machine: Mutex::new(machine),
            last: Mutex::new(None),
            seeded: std::sync::Once::new(),
        });
        if let Some(t) = closed {
            gate.keep(&t);
        }
        gate
    }

    /// Reads the signals, decides, and moves the machine (in a `schedule`
    /// span that records the decision).
    #[tracing::instrument(name = "schedule", skip_all, fields(open = tracing::field::Empty, reason = tracing::field::Empty))]
    pub async fn tick(&self) -> Report {
        self.seeded.call_once(|| {
            let recorded = self
                .db
                .read()
                .ok()
                .and_then(|c| stored::last_main_turn_ms(&c).ok().flatten());
            if let Some(ms) = recorded {
                self.inputs.activity.at_least(ms);
            }
        });
        let report = assess(&self.parts, &self.inputs).await;
        let decision = Decision {
            open: report.open,
            reason: report.reason.clone(),
            until: report.until,
        };
        let span = tracing::Span::current();
        span.record("open", decision.open);
        span.record("reason", decision.reason.as_str());
        let moved = self
            .machine
            .lock()
            .ok()
            .and_then(|mut m| m.observe(&decision, report.now));
        if let Some(t) = moved {
            self.keep(&t);
        }
        if let Ok(mut last) = self.last.lock() {
            *last = Some(report.clone());
        }
        report
    }

    /// [`Gate::tick`], unless the last look is younger than `age`.
    pub async fn tick_unless_within(&self, age: std::time::Duration) {
        let now = self.inputs.clock.now();
        let recent = self
            .last
            .lock()
            .ok()
            .and_then(|l| l.as_ref().map(|r| r.now));
        let fresh = recent.is_some_and(|at| (now - at).to_std().is_ok_and(|elapsed| elapsed < age));
        if !fresh {
            self.tick().await;
        }
    }

    pub fn state(&self) -> State {
        self.machine.lock().map_or(State::Closed, |m| m.state())
    }

    pub fn may_step(&self) -> bool {
        self.machine.lock().is_ok_and(|m| m.may_step())
    }

    /// A step starts; false if the machine is not open (no step then).
    pub fn step_started(&self) -> bool {
        let now = self.inputs.clock.now();
        let moved = self
            .machine
            .lock()
            .ok()
            .and_then(|mut m| m.step_started(now));
        let started = moved.is_some();
        if let Some(t) = moved {
            self.keep(&t);
        }
        started
    }

    pub fn step_ended(&self, outcome: &str) {
        let now = self.inputs.clock.now();
        let moved = self
            .machine
            .lock()
            .ok()
            .and_then(|mut m| m.step_ended(outcome, now));
        if let Some(t) = moved {
            self.keep(&t);
        }
    }

    /// The last report (`None` before the first tick).
    pub fn last(&self) -> Option<Report> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    /// Stored and logged; a transition that cannot be stored is logged
    /// (the machine goes on: serving and the step do not depend on it).
    fn keep(&self, t: &Transition) {
        tracing::info!(from = %t.from, to = %t.to, "training scheduler: {}", t.reason);
        let stored = self
            .db
            .side_writer()
            .map_err(|e| format!("{e:#}"))
            .and_then(|c| stored::record(&c, t).map_err(|e| format!("{e:#}")));
        if let Err(e) = stored {
            tracing::warn!("the scheduler's transition was not stored: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::idle::NoIdleSource;
    use super::*;
    use crate::clock::{FakeClock, utc};

    struct FakeIdle(Result<Duration, NoIdleSource>);

    /// A machine with no idle source.
    fn no_source() -> NoIdleSource {
        NoIdleSource(vec![SourceFailed::NoDisplay])
    }

    impl IdleProbe for FakeIdle {
        fn read(&self) -> SystemIdle {
            SystemIdle {
                idle: self.0.clone(),
                source: "a test".into(),
            }
        }
    }

    /// A weekly meeting on Tuesdays 23:30–00:30 Berlin time.
    const ICS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:late-call@test\r\nDTSTAMP:20261101T000000Z\r\nDTSTART;TZID=Europe/Berlin:20261103T233000\r\nDTEND;TZID=Europe/Berlin:20261104T003000\r\nRRULE:FREQ=WEEKLY;BYDAY=TU\r\nSUMMARY:Late call\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";

    struct Setup {
        _dir: tempfile::TempDir,
        clock: Arc<FakeClock>,
        gate: Arc<Gate>,
        db: crate::store::Db,
    }

    fn setup(yaml: &str, ics: Option<&str>, idle: Result<Duration, NoIdleSource>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let home = crate::home::Home::at(dir.path().join("home"));
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, yaml).unwrap();
        let mut config = crate::config::load_with_env(&path, &|_| None)
            .unwrap()
            .config;
        if let Some(ics) = ics {
            let file = dir.path().join("calendar.ics");
            std::fs::write(&file, ics).unwrap();
            config.scheduler.calendar.ics_url = Some(file.display().to_string());
        }
        let parts = Parts::from_config(&config, &home).unwrap();
        let clock = Arc::new(FakeClock::at(utc("2026-11-24T12:00:00Z")));
        let inputs = Inputs {
            clock: clock.clone(),
            idle: Arc::new(FakeIdle(idle)),
            activity: LastActivity::default(),
        };
        let db = crate::store::test_db(dir.path().join("metaclaw.db"));
        drop(db.side_writer().unwrap());
        let gate = Gate::new(parts, inputs, db.clone());
        Setup {
            _dir: dir,
            clock,
            gate,
            db,
        }
    }

    const BERLIN: &str = "mode: auto\nscheduler:\n  sleep_start: '23:00'\n  sleep_end: '07:00'\n  timezone: Europe/Berlin\n  min_window_minutes: 20\n";

    #[tokio::test]
    async fn a_recurring_calendar_event_keeps_the_sleep_window_shut_until_it_ends() {
        let s = setup(BERLIN, Some(ICS), Err(no_source()));
        // Tuesday 24 November, 23:45 in Berlin (22:45 UTC): in the sleep
        // window, and in the weekly call.
        s.clock.set(utc("2026-11-24T22:45:00Z"));
        let r = s.gate.tick().await;
        assert!(!r.open, "{r:?}");
        assert!(r.reason.contains("calendar event"), "{}", r.reason);
        let (at, why) = r.next_opening.clone().unwrap();
        assert_eq!(
            at,
            utc("2026-11-24T23:30:00Z"),
            "the call ends at 00:30 Berlin"
        );
        assert!(why.contains("calendar event ends"), "{why}");
        assert!(!s.gate.may_step());
        // After the call, the window opens: the sleep window's reason.
        s.clock.set(utc("2026-11-24T23:31:00Z"));
        let r = s.gate.tick().await;
        assert!(r.open, "{r:?}");
        assert_eq!(r.reason, "sleep window");
        assert_eq!(r.until, Some(utc("2026-11-25T06:00:00Z")));
        assert!(s.gate.may_step());
        // Wednesday night has no call: open from 23:00.
        s.clock.set(utc("2026-11-25T22:10:00Z"));
        assert!(s.gate.tick().await.open);
    }

    #[tokio::test]
    async fn an_unreadable_calendar_keeps_windows_shut_and_says_why() {
        let s = setup(
            BERLIN,
            Some("this is not a calendar"),
            Ok(Duration::hours(2)),
        );
        s.clock.set(utc("2026-11-25T01:00:00Z"));
        let r = s.gate.tick().await;
        assert!(!r.open);
        assert!(r.reason.contains("cannot be read"), "{}", r.reason);
        let line = r.signals.iter().find(|l| l.name == "calendar").unwrap();
        assert!(line.value.contains("windows stay shut"), "{}", line.value);
    }

    #[tokio::test]
    async fn forced_shut_wins_over_every_signal_and_every_transition_is_stored() {
        let forced = format!("{BERLIN}  force: shut\n");
        let s = setup(&forced, None, Ok(Duration::hours(5)));
        s.clock.set(utc("2026-11-25T01:00:00Z"));
        let r = s.gate.tick().await;
        assert!(!r.open);
        assert!(r.reason.contains("scheduler.force: shut"), "{}", r.reason);
        assert_eq!(r.next_opening, None);

        let open = setup(BERLIN, None, Err(no_source()));
        open.clock.set(utc("2026-11-25T01:00:00Z"));
        assert!(open.gate.tick().await.open);
        assert!(open.gate.step_started());
        open.clock.set(utc("2026-11-25T06:30:00Z"));
        let r = open.gate.tick().await;
        assert!(!r.open, "the window would last under 20 min: {r:?}");
        assert_eq!(open.gate.state(), State::Closing);
        assert!(!open.gate.may_step());
        open.gate.step_ended("step 1");
        let conn = open.db.read().unwrap();
        let kept: Vec<(String, String)> = stored::recent(&conn, 10)
            .unwrap()
            .into_iter()
            .rev()
            .map(|t| (t.from, t.to))
            .collect();
        let pairs: Vec<(&str, &str)> = kept.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("closed", "open"),
                ("open", "training"),
                ("training", "closing"),
                ("closing", "closed")
            ]
        );
        assert_eq!(stored::window_totals(&conn).unwrap(), (1, 1));
    }

    #[tokio::test]
    async fn between_back_to_back_steps_a_recent_look_stands_and_an_old_one_is_renewed() {
        let s = setup(BERLIN, None, Err(no_source()));
        s.clock.set(utc("2026-11-25T01:00:00Z"));
        let first = s.gate.tick().await.now;
        s.clock.advance(Duration::seconds(4));
        s.gate
            .tick_unless_within(std::time::Duration::from_secs(5))
            .await;
        assert_eq!(s.gate.last().unwrap().now, first, "looked again too soon");
        // Past the sleep window: the next look closes it.
        s.clock.set(utc("2026-11-25T06:59:00Z"));
        s.gate
            .tick_unless_within(std::time::Duration::from_secs(5))
            .await;
        assert_eq!(s.gate.last().unwrap().now, utc("2026-11-25T06:59:00Z"));
        assert!(!s.gate.may_step());
    }

    #[tokio::test]
    async fn idle_opens_a_window_only_when_the_machine_and_the_agent_are_idle() {
        let yaml = "mode: auto\nscheduler:\n  sleep_start: ''\n  idle_threshold_minutes: 30\n";
        let s = setup(yaml, None, Ok(Duration::minutes(45)));
        // No main turn recorded: the agent is idle.
        assert!(s.gate.tick().await.open);
        let unknown = setup(yaml, None, Err(no_source()));
        let r = unknown.gate.tick().await;
        assert!(!r.open);
        assert!(
            r.reason
                .contains("unknown (no idle source: X11: DISPLAY is not set)"),
            "{}",
            r.reason
        );
        let line = r.signals.iter().find(|l| l.name == "system_idle").unwrap();
        assert!(line.value.starts_with("not available"), "{}", line.value);
    }
}
