//! Durations in the config: a number of seconds (`90`) or a string with a unit
//! (`"250ms"`, `"30s"`, `"30m"`, `"2h"`, `"1d"`, or combined: `"1m30s"`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl Dur {
    pub const fn secs(s: u64) -> Self {
        Self(Duration::from_secs(s))
    }
    pub const fn millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }
    pub fn get(self) -> Duration {
        self.0
    }
}

/// The longest duration a config may give (about 31,700 years): longer ones
/// are mistakes, and the text written for them would not read back.
const MAX_SECS: u64 = 1_000_000_000_000;

/// Why text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("duration out of range: {0:?}")]
    OutOfRange(String),
    #[error("expected a number in {0:?}")]
    NoNumber(String),
    #[error("bad number in {0:?}")]
    BadNumber(String),
    #[error("missing unit in {0:?} (use ms, s, m, h or d)")]
    NoUnit(String),
    #[error("unknown unit {unit:?} in {text:?} (use ms, s, m, h or d)")]
    UnknownUnit { unit: String, text: String },
}

/// Parses `"1m30s"`-style text. Errors say what was wrong.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let out_of_range = || DurationError::OutOfRange(text.to_string());
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(secs) = text.parse::<u64>() {
        if secs > MAX_SECS {
            return Err(out_of_range());
        }
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(DurationError::NoNumber(text.to_string()));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::BadNumber(text.to_string()))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        rest = &rest[unit_len..];
        let scale = match unit {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hours" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            "" => return Err(DurationError::NoUnit(text.to_string())),
            other => {
                return Err(DurationError::UnknownUnit {
                    unit: other.to_string(),
                    text: text.to_string(),
                });
            }
        };
        let secs = number * scale;
        if !secs.is_finite() || !(0.0..=1e12).contains(&secs) {
            return Err(out_of_range());
        }
        total += to_millis(secs);
        // The sum too, or the text written for it would not read back.
        if total > Duration::from_secs(MAX_SECS) {
            return Err(out_of_range());
        }
    }
    Ok(total)
}

/// `secs` to the millisecond, the finest unit [`format_duration`] writes:
/// what `config show` prints is then exactly the value in force, and a
/// config written from the typed value reads back the same.
fn to_millis(secs: f64) -> Duration {
    Duration::from_millis((secs * 1000.0).round() as u64)
}

/// The shortest exact text for a duration (`"30m"`, `"250ms"`, `"1m30s"`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration: seconds as a number, or text like \"30s\", \"30m\", \"250ms\"",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                if v > MAX_SECS {
                    return Err(E::custom("a duration must be at most 1e12 seconds"));
                }
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                let v = u64::try_from(v).map_err(|_| E::custom("a duration cannot be negative"))?;
                self.visit_u64(v)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                if v.is_finite() && (0.0..1e12).contains(&v) {
                    Ok(Dur(to_millis(v)))
                } else {
                    Err(E::custom(
                        "a duration must be a non-negative number of seconds",
                    ))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_write() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    }

    #[test]
    fn rejects_nonsense_with_a_reason() {
        assert!(parse_duration("").is_err());
        assert_eq!(
            parse_duration("ten").unwrap_err(),
            DurationError::NoNumber("ten".into())
        );
        assert!(
            parse_duration("5 fortnights")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
        assert!(parse_duration("5").is_ok());
    }

    #[test]
    fn formatting_round_trips() {
        for text in ["30m", "250ms", "1m30s", "1d2h", "0s", "45s"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }
}
