//! What a plugin may spend on the embedding backend over time, across all
//! its instances and every re-index: a rolling window per plugin file
//! (its sha256), held by the host and never by an instance. A new instance
//! starts with a fresh per-call budget ([`super::EmbedBudget`]); this one
//! it cannot reset, whatever it makes the host throw away.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::EmbedFailed;

/// Upstream embedding spend one plugin file may make per rolling window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedAllowance {
    /// Requests to the backend (one per batch of up to 32 texts that no
    /// cache holds).
    pub requests: u64,
    /// Bytes of text sent to the backend.
    pub bytes: u64,
    pub window: Duration,
}

impl EmbedAllowance {
    /// `plugins.embed_requests_per_hour` and `plugins.embed_mb_per_hour`
    /// by default: see `PluginsConfig`.
    pub const DEFAULT: Self = Self {
        requests: 4_000,
        bytes: 32 << 20,
        window: Duration::from_secs(3600),
    };
}

impl Default for EmbedAllowance {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Approves spend on the embedding backend before it is made: the backend
/// (its cache) asks for what it is about to send upstream, and nothing
/// served from a cache is asked for.
pub trait Spend: Send + Sync {
    /// Takes `requests` and `bytes` from what is left, all or nothing; the
    /// error says why not.
    fn charge(&self, requests: u64, bytes: u64) -> Result<(), EmbedFailed>;
}

/// Approves everything (a host with no per-plugin budget: `plugins call`).
pub struct Unmetered;

impl Spend for Unmetered {
    fn charge(&self, _: u64, _: u64) -> Result<(), EmbedFailed> {
        Ok(())
    }
}

/// Spend in one window: when each charge was made, and how much.
#[derive(Debug, Default)]
struct Window {
    charges: VecDeque<(Instant, u64, u64)>,
    requests: u64,
    bytes: u64,
}

impl Window {
    fn forget_before(&mut self, cutoff: Option<Instant>) {
        let Some(cutoff) = cutoff else { return };
        while let Some(&(at, requests, bytes)) = self.charges.front() {
            if at > cutoff {
                break;
            }
            self.charges.pop_front();
            self.requests -= requests;
            self.bytes -= bytes;
        }
    }
}

/// Every plugin file's spend in the current window: one per plugin host
/// (the daemon), shared by every instance and every reload of a file.
#[derive(Debug)]
pub struct EmbedLedger {
    allowance: EmbedAllowance,
    by_file: Mutex<HashMap<String, Window>>,
}

impl EmbedLedger {
    pub fn new(allowance: EmbedAllowance) -> Arc<Self> {
        Arc::new(Self {
            allowance,
            by_file: Mutex::new(HashMap::new()),
        })
    }

    pub fn allowance(&self) -> EmbedAllowance {
        self.allowance
    }

    /// Charges `file` for `requests` and `bytes` at `now`, unless that would
    /// take it past its allowance for the window ending at `now`. Each
    /// charge that passes holds at least one request, so a window keeps at
    /// most `allowance.requests` of them.
    pub fn charge_at(
        &self,
        file: &str,
        requests: u64,
        bytes: u64,
        now: Instant,
    ) -> Result<(), EmbedFailed> {
        if requests == 0 && bytes == 0 {
            return Ok(());
        }
        let a = self.allowance;
        let mut by_file = self
            .by_file
            .lock()
            .map_err(|_| EmbedFailed::LedgerUnavailable)?;
        let window = by_file.entry(file.to_string()).or_default();
        window.forget_before(now.checked_sub(a.window));
        let over_requests = window.requests + requests.max(1) > a.requests;
        let over_bytes = window.bytes + bytes > a.bytes;
        if over_requests || over_bytes {
            return Err(EmbedFailed::BudgetSpent {
                requests: window.requests,
                bytes: window.bytes,
                window_min: a.window.as_secs() / 60,
                max_requests: a.requests,
                max_bytes: a.bytes,
            });
        }
        window.charges.push_back((now, requests.max(1), bytes));
        window.requests += requests.max(1);
        window.bytes += bytes;
        Ok(())
    }

    /// What `file` spent in the window ending now: (requests, bytes).
    pub fn spent(&self, file: &str) -> (u64, u64) {
        let Ok(mut by_file) = self.by_file.lock() else {
            return (0, 0);
        };
        let Some(window) = by_file.get_mut(file) else {
            return (0, 0);
        };
        window.forget_before(Instant::now().checked_sub(self.allowance.window));
        (window.requests, window.bytes)
    }
}

/// One plugin file's account in the ledger, as its `embed` calls spend.
pub struct Account {
    pub ledger: Arc<EmbedLedger>,
    pub file: Arc<str>,
}

impl Spend for Account {
    fn charge(&self, requests: u64, bytes: u64) -> Result<(), EmbedFailed> {
        self.ledger
            .charge_at(&self.file, requests, bytes, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(requests: u64, bytes: u64) -> Arc<EmbedLedger> {
        EmbedLedger::new(EmbedAllowance {
            requests,
            bytes,
            window: Duration::from_secs(3600),
        })
    }

    #[test]
    fn the_window_holds_requests_and_bytes_per_file_and_rolls() {
        let l = ledger(10, 1000);
        let t0 = Instant::now();
        for i in 0..10 {
            l.charge_at("a", 1, 10, t0 + Duration::from_secs(i))
                .unwrap();
        }
        let e = l
            .charge_at("a", 1, 10, t0 + Duration::from_secs(60))
            .unwrap_err();
        assert!(
            matches!(e, EmbedFailed::BudgetSpent { requests: 10, .. }),
            "{e}"
        );
        let e = e.to_string();
        assert!(e.contains("10 requests") && e.contains("plugins.embed_requests_per_hour"));
        // All or nothing: a charge that does not fit takes nothing.
        assert!(
            l.charge_at("a", 5, 0, t0 + Duration::from_secs(61))
                .is_err()
        );
        // Another file has its own window.
        l.charge_at("b", 10, 900, t0).unwrap();
        assert!(
            l.charge_at("b", 1, 101, t0).is_err(),
            "bytes are bounded too"
        );
        // An hour after the first charge, it has rolled out of the window.
        let later = t0 + Duration::from_secs(3600);
        l.charge_at("a", 1, 10, later).unwrap();
        assert!(
            l.charge_at("a", 1, 10, later).is_err(),
            "only one had rolled out"
        );
        l.charge_at("a", 2, 10, t0 + Duration::from_secs(3602))
            .unwrap();
    }

    #[test]
    fn no_charge_is_free_and_nothing_spent_costs_nothing() {
        let l = ledger(3, 1 << 20);
        let t0 = Instant::now();
        // Empty: served from the cache, nothing to charge.
        for _ in 0..100 {
            l.charge_at("a", 0, 0, t0).unwrap();
        }
        // A charge of bytes without requests still counts one request.
        for _ in 0..3 {
            l.charge_at("a", 0, 1, t0).unwrap();
        }
        assert!(l.charge_at("a", 0, 1, t0).is_err());
        assert_eq!(l.spent("b"), (0, 0));
    }
}
