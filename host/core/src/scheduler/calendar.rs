//! The calendar signal: busy intervals from an iCalendar file (what Google
//! Calendar, Outlook and iCloud publish as a private address). Events are
//! read with `icalendar`'s parser; recurring ones (RRULE, RDATE, EXDATE)
//! expanded with `rrule`, in their own time zone (TZID). An all-day event
//! is busy from midnight to midnight in the user's zone, not in UTC (the
//! original's mistake). Cancelled events and those marked free
//! (TRANSP:TRANSPARENT) do not count.

use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc};

use super::sleep::Zone;

/// A busy interval: from, until.
pub type Interval = (DateTime<Utc>, DateTime<Utc>);

/// Busy intervals, sorted by start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Busy {
    pub intervals: Vec<Interval>,
    /// Events that could not be read, with why (the rest still count).
    pub problems: Vec<String>,
}

impl Busy {
    /// The interval `now` falls in, if any.
    pub fn at(&self, now: DateTime<Utc>) -> Option<Interval> {
        self.intervals
            .iter()
            .copied()
            .find(|(start, end)| *start <= now && now < *end)
    }

    /// The first interval that starts after `now`.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<Interval> {
        self.intervals
            .iter()
            .copied()
            .find(|(start, _)| *start > now)
    }
}

/// One property as written: its parameters (`TZID=…;VALUE=DATE`) and value.
struct Prop {
    name: String,
    params: Vec<(String, String)>,
    value: String,
}

impl Prop {
    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }

    /// The property as a content line, for `rrule`'s parser.
    fn line(&self) -> String {
        let mut line = self.name.clone();
        for (k, v) in &self.params {
            line.push_str(&format!(";{k}={v}"));
        }
        line.push(':');
        line.push_str(&self.value);
        line
    }
}

/// What makes a calendar, or one of its events, unreadable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalendarError {
    #[error("not an iCalendar file: {0}")]
    NotICalendar(String),
    #[error("no DTSTART")]
    NoStart,
    #[error("{prop}: {value:?} is not a date")]
    NotADate { prop: String, value: String },
    #[error("{prop}: {value:?} is not a date-time")]
    NotADateTime { prop: String, value: String },
    #[error("{prop}: unknown time zone {zone:?}")]
    UnknownZone { prop: String, zone: String },
    #[error("{prop}: {value:?} does not exist in its zone")]
    NotInZone { prop: String, value: String },
    #[error("midnight of {0} does not exist in the zone")]
    NoMidnight(NaiveDate),
    #[error("DURATION: {0:?} is not a duration (for example PT1H30M)")]
    NotADuration(String),
    #[error("its recurrence: {0}")]
    Recurrence(String),
}

/// Why a configured calendar cannot be read now (training windows stay
/// shut): its text cannot be had, or it is not a calendar.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unreadable {
    #[error(transparent)]
    Source(#[from] super::source::SourceError),
    #[error(transparent)]
    Calendar(#[from] CalendarError),
}

/// The busy intervals of `ics` that overlap [`from`, `to`); `zone` is
/// where all-day and floating times are read. An unreadable file is an
/// error (the caller keeps windows shut: fail closed).
pub fn busy(
    ics: &str,
    zone: Zone,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Busy, CalendarError> {
    let unfolded = icalendar::parser::unfold(ics);
    let calendar = icalendar::parser::read_calendar(&unfolded)
        .map_err(|e| CalendarError::NotICalendar(e.lines().next().unwrap_or("").to_string()))?;
    let mut out = Busy::default();
    for component in &calendar.components {
        if !component.name.as_str().eq_ignore_ascii_case("VEVENT") {
            continue;
        }
        let props: Vec<Prop> = component
            .properties
            .iter()
            .map(|p| Prop {
                name: p.name.as_str().to_ascii_uppercase(),
                params: p
                    .params
                    .iter()
                    .map(|x| {
                        (
                            x.key.as_str().to_ascii_uppercase(),
                            x.val
                                .as_ref()
                                .map(|v| v.as_str().to_string())
                                .unwrap_or_default(),
                        )
                    })
                    .collect(),
                value: p.val.as_str().trim().to_string(),
            })
            .collect();
        let get = |name: &str| props.iter().find(|p| p.name == name);
        let summary = get("UID")
            .map_or("(no UID)", |p| p.value.as_str())
            .to_string();
        if get("STATUS").is_some_and(|p| p.value.eq_ignore_ascii_case("CANCELLED"))
            || get("TRANSP").is_some_and(|p| p.value.eq_ignore_ascii_case("TRANSPARENT"))
        {
            continue;
        }
        match event(&props, zone, from, to) {
            Ok(intervals) => out.intervals.extend(intervals),
            Err(why) => out.problems.push(format!("event {summary}: {why}")),
        }
    }
    out.intervals.sort();
    Ok(out)
}

/// An event's busy intervals in [`from`, `to`).
fn event(
    props: &[Prop],
    zone: Zone,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<Interval>, CalendarError> {
    let get = |name: &str| props.iter().find(|p| p.name == name);
    let start_prop = get("DTSTART").ok_or(CalendarError::NoStart)?;
    let all_day = start_prop
        .param("VALUE")
        .is_some_and(|v| v.eq_ignore_ascii_case("DATE"))
        || start_prop.value.len() == 8;
    let start = instant(start_prop, zone)?;
    let length = match (get("DTEND"), get("DURATION")) {
        (Some(end), _) => instant(end, zone)? - start,
        (None, Some(d)) => duration(&d.value)?,
        (None, None) if all_day => Duration::days(1),
        (None, None) => Duration::zero(),
    };
    if length <= Duration::zero() {
        return Ok(Vec::new());
    }
    let recurs = props
        .iter()
        .any(|p| matches!(p.name.as_str(), "RRULE" | "RDATE"));
    let starts = match recurs {
        false => vec![start],
        true => {
            let text: Vec<String> = props
                .iter()
                .filter(|p| matches!(p.name.as_str(), "DTSTART" | "RRULE" | "RDATE" | "EXDATE"))
                .map(Prop::line)
                .collect();
            let set = text
                .join("\n")
                .parse::<rrule::RRuleSet>()
                .map_err(|e| CalendarError::Recurrence(e.to_string()))?;
            let after = (from - length).with_timezone(&rrule::Tz::UTC);
            let before = to.with_timezone(&rrule::Tz::UTC);
            let occurrences = set.after(after).before(before).all(10_000);
            occurrences
                .dates
                .iter()
                .map(|d| match all_day {
                    // An all-day occurrence: that date in the user's zone.
                    true => midnight(d.date_naive(), zone),
                    false => Ok(d.with_timezone(&Utc)),
                })
                .collect::<Result<_, _>>()?
        }
    };
    Ok(starts
        .into_iter()
        .map(|s| (s, s + length))
        .filter(|(s, e)| *e > from && *s < to)
        .collect())
}

/// A DTSTART / DTEND value as an instant: UTC (`…Z`), in its TZID, a date
/// (midnight in `zone`), or floating (in `zone`).
fn instant(prop: &Prop, zone: Zone) -> Result<DateTime<Utc>, CalendarError> {
    let value = prop.value.as_str();
    let of = |make: fn(String, String) -> CalendarError| make(prop.name.clone(), value.to_string());
    if value.len() == 8 {
        let date = NaiveDate::parse_from_str(value, "%Y%m%d")
            .map_err(|_| of(|prop, value| CalendarError::NotADate { prop, value }))?;
        return midnight(date, zone);
    }
    let not_a_date_time = |_| of(|prop, value| CalendarError::NotADateTime { prop, value });
    if let Some(utc) = value.strip_suffix('Z') {
        let t = NaiveDateTime::parse_from_str(utc, "%Y%m%dT%H%M%S").map_err(not_a_date_time)?;
        return Ok(Utc.from_utc_datetime(&t));
    }
    let t = NaiveDateTime::parse_from_str(value, "%Y%m%dT%H%M%S").map_err(not_a_date_time)?;
    let zone = match prop.param("TZID") {
        Some(name) => Zone::parse(name).map_err(|_| CalendarError::UnknownZone {
            prop: prop.name.clone(),
            zone: name.to_string(),
        })?,
        None => zone,
    };
    zone.instant(t.date(), t.time())
        .ok_or_else(|| of(|prop, value| CalendarError::NotInZone { prop, value }))
}

fn midnight(date: NaiveDate, zone: Zone) -> Result<DateTime<Utc>, CalendarError> {
    zone.instant(date, chrono::NaiveTime::MIN)
        .ok_or(CalendarError::NoMidnight(date))
}

/// An iCalendar DURATION (`PT1H30M`, `P1D`, `P2W`, `-PT5M` is refused).
fn duration(text: &str) -> Result<Duration, CalendarError> {
    let bad = || CalendarError::NotADuration(text.to_string());
    let rest = text.trim().strip_prefix('+').unwrap_or(text.trim());
    let rest = rest.strip_prefix('P').ok_or_else(bad)?;
    let (mut total, mut number, mut in_time) = (Duration::zero(), String::new(), false);
    for c in rest.chars() {
        match c {
            'T' => in_time = true,
            '0'..='9' => number.push(c),
            unit => {
                let n: i64 = number.parse().map_err(|_| bad())?;
                number.clear();
                total += match (unit, in_time) {
                    ('W', false) => Duration::weeks(n),
                    ('D', false) => Duration::days(n),
                    ('H', true) => Duration::hours(n),
                    ('M', true) => Duration::minutes(n),
                    ('S', true) => Duration::seconds(n),
                    _ => return Err(bad()),
                };
            }
        }
    }
    match number.is_empty() {
        true => Ok(total),
        false => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::clock::utc;

    /// A weekly Monday meeting at 09:00 Berlin time, one week skipped; a
    /// one-off UTC event; an all-day event; a cancelled and a free one.
    const ICS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n\
BEGIN:VEVENT\r\nUID:standup\r\nDTSTART;TZID=Europe/Berlin:20261019T090000\r\n\
DTEND;TZID=Europe/Berlin:20261019T093000\r\nRRULE:FREQ=WEEKLY;BYDAY=MO\r\n\
EXDATE;TZID=Europe/Berlin:20261109T090000\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:call\r\nDTSTART:20261124T150000Z\r\nDURATION:PT1H\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:holiday\r\nDTSTART;VALUE=DATE:20261126\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:gone\r\nDTSTART:20261124T160000Z\r\nDURATION:PT1H\r\nSTATUS:CANCELLED\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:free\r\nDTSTART:20261124T170000Z\r\nDURATION:PT1H\r\nTRANSP:TRANSPARENT\r\nEND:VEVENT\r\n\
END:VCALENDAR\r\n";

    #[test]
    fn recurring_events_in_their_zone_all_day_and_skipped_ones() {
        let zone = Zone::parse("Europe/Berlin").unwrap();
        let busy = busy(
            ICS,
            zone,
            utc("2026-10-20T00:00:00Z"),
            utc("2026-11-30T00:00:00Z"),
        )
        .unwrap();
        assert!(busy.problems.is_empty(), "{:?}", busy.problems);
        // Mondays 09:00 Berlin: CEST (07:00Z) before 2026-10-25, CET
        // (08:00Z) after; 2026-11-09 excluded.
        let standups: Vec<_> = busy
            .intervals
            .iter()
            .filter(|(s, e)| *e - *s == Duration::minutes(30))
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(
            standups,
            [
                utc("2026-10-26T08:00:00Z"),
                utc("2026-11-02T08:00:00Z"),
                utc("2026-11-16T08:00:00Z"),
                utc("2026-11-23T08:00:00Z"),
            ]
        );
        assert_eq!(
            busy.at(utc("2026-11-24T15:30:00Z")),
            Some((utc("2026-11-24T15:00:00Z"), utc("2026-11-24T16:00:00Z")))
        );
        // Cancelled and free events do not count.
        assert_eq!(busy.at(utc("2026-11-24T16:30:00Z")), None);
        assert_eq!(busy.at(utc("2026-11-24T17:30:00Z")), None);
        // All day in Berlin: 2026-11-25T23:00Z to 2026-11-26T23:00Z.
        assert_eq!(
            busy.at(utc("2026-11-25T23:30:00Z")),
            Some((utc("2026-11-25T23:00:00Z"), utc("2026-11-26T23:00:00Z")))
        );
        assert_eq!(busy.at(utc("2026-11-25T22:30:00Z")), None);
        assert_eq!(
            busy.next_after(utc("2026-11-24T16:00:00Z")).map(|(s, _)| s),
            Some(utc("2026-11-25T23:00:00Z"))
        );
    }

    #[test]
    fn bad_input_is_an_error_or_a_named_problem() {
        let zone = Zone::parse("UTC").unwrap();
        let (from, to) = (utc("2026-11-01T00:00:00Z"), utc("2026-12-01T00:00:00Z"));
        assert!(busy("hello", zone, from, to).is_err());
        let odd = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:x\r\nDTSTART;TZID=Nowhere/City:20261124T090000\r\nDURATION:PT1H\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";
        let b = busy(odd, zone, from, to).unwrap();
        assert!(b.intervals.is_empty());
        assert!(
            b.problems[0].contains("unknown time zone"),
            "{:?}",
            b.problems
        );
        assert_eq!(duration("PT1H30M").unwrap(), Duration::minutes(90));
        assert_eq!(duration("P1W").unwrap(), Duration::weeks(1));
        assert!(duration("1H").is_err());
    }
}
