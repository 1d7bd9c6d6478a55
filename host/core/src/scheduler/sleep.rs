//! The sleep window (`scheduler.sleep_start` / `sleep_end`): local times of
//! day in the user's time zone. A window whose end is not after its start
//! crosses midnight (23:00–07:00 runs from one evening to the next
//! morning). Around daylight-saving changes each edge is resolved on its
//! own day: a local time the clocks skip (the spring gap) starts at the
//! first minute that exists after it; one they pass twice (the autumn
//! overlap) at its first occurrence. So the window keeps its local times
//! and its length in hours changes with the clocks, as a person's night
//! does.

use chrono::{DateTime, Days, LocalResult, NaiveDate, NaiveTime, TimeZone, Utc};

/// The zone local times are read in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Zone {
    /// An IANA zone (`Europe/Berlin`).
    Named(chrono_tz::Tz),
    /// The machine's own zone.
    Local,
}

/// A time zone name that is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0:?} is not an IANA time zone (for example Europe/Berlin or America/New_York)")]
pub struct UnknownZone(pub String);

/// Why a sleep window's settings are not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("scheduler.{key}: {text:?} is not a time of day as HH:MM (for example 23:00)")]
    NotATime { key: &'static str, text: String },
    #[error("scheduler.sleep_start and sleep_end are the same time: the window would be empty")]
    Empty,
    #[error(transparent)]
    Zone(#[from] UnknownZone),
}

impl Zone {
    /// An IANA name, or empty for the machine's zone.
    pub fn parse(name: &str) -> Result<Self, UnknownZone> {
        match name.trim() {
            "" => Ok(Self::Local),
            name => name
                .parse::<chrono_tz::Tz>()
                .map(Self::Named)
                .map_err(|_| UnknownZone(name.to_string())),
        }
    }

    /// The instant of local `time` on local `date`: the first minute that
    /// exists at or after it (a spring-forward gap), the earlier of two (an
    /// autumn overlap).
    pub fn instant(self, date: NaiveDate, time: NaiveTime) -> Option<DateTime<Utc>> {
        let local = date.and_time(time);
        // A gap is at most a few hours; step through it a minute at a time.
        (0..=24 * 60).find_map(|minutes| {
            let t = local + chrono::Duration::minutes(minutes);
            match self {
                Self::Named(tz) => earliest(tz.from_local_datetime(&t)),
                Self::Local => earliest(chrono::Local.from_local_datetime(&t)),
            }
        })
    }

    fn date_of(self, now: DateTime<Utc>) -> NaiveDate {
        match self {
            Self::Named(tz) => now.with_timezone(&tz).date_naive(),
            Self::Local => now.with_timezone(&chrono::Local).date_naive(),
        }
    }
}

fn earliest<T: TimeZone>(r: LocalResult<DateTime<T>>) -> Option<DateTime<Utc>> {
    match r {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => Some(a.min(b).with_timezone(&Utc)),
        LocalResult::None => None,
    }
}

/// A sleep window: from `start` to `end`, local times, every day.
#[derive(Debug, Clone, PartialEq)]
pub struct SleepWindow {
    pub start: NaiveTime,
    pub end: NaiveTime,
    pub zone: Zone,
}

/// Where `now` is with respect to the sleep window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sleep {
    /// Inside a window that ends at this instant.
    Inside { until: DateTime<Utc> },
    /// Outside; the next window opens at this instant.
    Outside { next: DateTime<Utc> },
}

impl SleepWindow {
    /// `HH:MM` times and a zone name (empty: the machine's zone).
    pub fn parse(start: &str, end: &str, zone: &str) -> Result<Self, WindowError> {
        let time = |key: &'static str, text: &str| {
            NaiveTime::parse_from_str(text.trim(), "%H:%M").map_err(|_| WindowError::NotATime {
                key,
                text: text.to_string(),
            })
        };
        let (start, end) = (time("sleep_start", start)?, time("sleep_end", end)?);
        if start == end {
            return Err(WindowError::Empty);
        }
        Ok(Self {
            start,
            end,
            zone: Zone::parse(zone)?,
        })
    }

    /// The window that starts on local `date`, as instants.
    fn on(&self, date: NaiveDate) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let end_date = match self.end > self.start {
            true => date,
            false => date.checked_add_days(Days::new(1))?,
        };
        Some((
            self.zone.instant(date, self.start)?,
            self.zone.instant(end_date, self.end)?,
        ))
    }

    /// Whether `now` is in a window, and until when; else when the next
    /// one opens.
    pub fn at(&self, now: DateTime<Utc>) -> Sleep {
        let today = self.zone.date_of(now);
        // The window that began yesterday may still be open; today's and
        // tomorrow's are the next candidates.
        let mut next = None;
        for offset in [-1i64, 0, 1, 2] {
            let date = match offset {
                -1 => today.checked_sub_days(Days::new(1)),
                n => today.checked_add_days(Days::new(n as u64)),
            };
            let Some((start, end)) = date.and_then(|d| self.on(d)) else {
                continue;
            };
            if start <= now && now < end {
                return Sleep::Inside { until: end };
            }
            if start > now && next.is_none() {
                next = Some(start);
            }
        }
        Sleep::Outside {
            next: next.unwrap_or(now + chrono::Duration::days(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::clock::utc;

    fn berlin(start: &str, end: &str) -> SleepWindow {
        SleepWindow::parse(start, end, "Europe/Berlin").unwrap()
    }

    #[test]
    fn a_window_across_midnight_runs_from_evening_to_morning() {
        let w = berlin("23:00", "07:00");
        // 23:30 in Berlin (CET, UTC+1): inside until 07:00 local next day.
        assert_eq!(
            w.at(utc("2026-11-24T22:30:00Z")),
            Sleep::Inside {
                until: utc("2026-11-25T06:00:00Z")
            }
        );
        // 02:00 local: still inside, the window that began yesterday.
        assert_eq!(
            w.at(utc("2026-11-25T01:00:00Z")),
            Sleep::Inside {
                until: utc("2026-11-25T06:00:00Z")
            }
        );
        // Noon: outside; the next opens at 23:00 local.
        assert_eq!(
            w.at(utc("2026-11-25T11:00:00Z")),
            Sleep::Outside {
                next: utc("2026-11-25T22:00:00Z")
            }
        );
        // The edges: the start is in, the end is out.
        assert!(matches!(
            w.at(utc("2026-11-25T22:00:00Z")),
            Sleep::Inside { .. }
        ));
        assert!(matches!(
            w.at(utc("2026-11-25T06:00:00Z")),
            Sleep::Outside { .. }
        ));
    }

    #[test]
    fn a_window_within_a_day_does_not_cross_midnight() {
        let w = berlin("13:00", "14:30");
        assert_eq!(
            w.at(utc("2026-11-24T12:10:00Z")),
            Sleep::Inside {
                until: utc("2026-11-24T13:30:00Z")
            }
        );
        assert_eq!(
            w.at(utc("2026-11-24T22:00:00Z")),
            Sleep::Outside {
                next: utc("2026-11-25T12:00:00Z")
            }
        );
    }

    /// Berlin springs forward on 2026-03-29 at 02:00 (to 03:00) and falls
    /// back on 2026-10-25 at 03:00 (to 02:00).
    #[test]
    fn daylight_saving_changes_keep_the_local_times() {
        // 23:00–07:00 over the spring night: 23:00 CET (22:00Z) to 07:00
        // CEST (05:00Z): seven hours, not eight.
        let w = berlin("23:00", "07:00");
        assert_eq!(
            w.at(utc("2026-03-28T23:00:00Z")),
            Sleep::Inside {
                until: utc("2026-03-29T05:00:00Z")
            }
        );
        // Over the autumn night: 23:00 CEST (21:00Z) to 07:00 CET (06:00Z):
        // nine hours.
        assert_eq!(
            w.at(utc("2026-10-24T21:00:00Z")),
            Sleep::Inside {
                until: utc("2026-10-25T06:00:00Z")
            }
        );
        // A start the clocks skip (02:30 on the spring night) opens at the
        // first minute that exists: 03:00 CEST (01:00Z).
        let gap = berlin("02:30", "06:00");
        assert_eq!(
            gap.at(utc("2026-03-29T00:45:00Z")),
            Sleep::Outside {
                next: utc("2026-03-29T01:00:00Z")
            }
        );
        // A start the clocks pass twice (02:30 on the autumn night) opens
        // at its first occurrence: 02:30 CEST (00:30Z).
        let twice = berlin("02:30", "06:00");
        assert_eq!(
            twice.at(utc("2026-10-25T00:40:00Z")),
            Sleep::Inside {
                until: utc("2026-10-25T05:00:00Z")
            }
        );
    }

    #[test]
    fn bad_settings_say_what_to_write() {
        let e = SleepWindow::parse("11pm", "07:00", "")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("scheduler.sleep_start") && e.contains("HH:MM"),
            "{e}"
        );
        let e = SleepWindow::parse("07:00", "07:00", "").unwrap_err();
        assert_eq!(e, WindowError::Empty);
        assert!(e.to_string().contains("empty"), "{e}");
        let e = SleepWindow::parse("23:00", "07:00", "Mars/Olympus").unwrap_err();
        assert_eq!(e, WindowError::Zone(UnknownZone("Mars/Olympus".into())));
        assert!(e.to_string().contains("IANA"), "{e}");
        assert_eq!(Zone::parse("").unwrap(), Zone::Local);
    }
}
