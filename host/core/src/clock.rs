//! Wall-clock time as the store and plugins record it, and as the
//! training scheduler reads it.

use chrono::{DateTime, Utc};
#[cfg(test)]
use std::sync::Mutex;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// When the user last used the agent: the start or end of its last main
/// turn, in wall-clock ms (0: not since metaclaw started and nothing
/// recorded). The session tracker writes it; the training scheduler reads
/// it. Side turns and heartbeats never touch it: they are the agent's
/// background work, not the user.
#[derive(Debug, Clone, Default)]
pub struct LastActivity(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl LastActivity {
    /// Starting from a recorded time (the store's last main turn).
    pub fn since(at_ms: i64) -> Self {
        Self(std::sync::Arc::new(std::sync::atomic::AtomicI64::new(
            at_ms,
        )))
    }

    /// The user did something now.
    pub fn bump(&self) {
        self.at_least(now_ms());
    }

    /// The user did something at `at_ms` (a turn recorded before a
    /// restart); a later time already known stays.
    pub fn at_least(&self, at_ms: i64) {
        self.0
            .fetch_max(at_ms, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn at_ms(&self) -> Option<i64> {
        Some(self.0.load(std::sync::atomic::Ordering::Relaxed)).filter(|ms| *ms > 0)
    }
}

/// What time it is, behind a trait: the system clock in the product, a
/// clock a test sets in tests (the training scheduler reads it).
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that says what it is told (tests).
#[cfg(test)]
pub struct FakeClock(Mutex<DateTime<Utc>>);

#[cfg(test)]
impl FakeClock {
    pub fn at(now: DateTime<Utc>) -> Self {
        Self(Mutex::new(now))
    }

    pub fn set(&self, now: DateTime<Utc>) {
        if let Ok(mut t) = self.0.lock() {
            *t = now;
        }
    }

    pub fn advance(&self, by: chrono::Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += by;
        }
    }
}

#[cfg(test)]
impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        self.0.lock().map(|t| *t).unwrap_or_else(|_| Utc::now())
    }
}

/// An RFC 3339 instant, for tests that name their times.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}
