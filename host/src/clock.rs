//! Wall-clock time as the store and plugins record it.

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
        self.0
            .fetch_max(now_ms(), std::sync::atomic::Ordering::Relaxed);
    }

    pub fn at_ms(&self) -> Option<i64> {
        Some(self.0.load(std::sync::atomic::Ordering::Relaxed)).filter(|ms| *ms > 0)
    }
}
