//! What time it is, behind a trait: the system clock in the product, a
//! clock a test sets in tests.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

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
pub struct FakeClock(Mutex<DateTime<Utc>>);

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

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        self.0.lock().map(|t| *t).unwrap_or_else(|_| Utc::now())
    }
}
