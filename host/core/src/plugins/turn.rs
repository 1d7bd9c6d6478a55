//! A turn's plugin budget (`plugins.turn_budget`): one deadline for every
//! retriever and executable-skill call a turn makes, so that no number of
//! plugins, each within its own deadline, can add more than the budget to
//! a turn. A call still running when the budget ends is dropped (its guest
//! ends wherever it is, as at its own deadline) and the turn goes on
//! without it: a cut, not a failure of the plugin.
//!
//! Like a call's own deadline, the budget counts the plugin's time, not the
//! host's: while the host embeds for a retriever (`embed`, within its
//! per-call embedding budget), the budget's clock stands still.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::sandbox::{Deadline, outer};

/// The time left to a turn's plugin calls.
#[derive(Debug, Clone)]
pub struct TurnBudget {
    deadline: Arc<Deadline>,
}

impl TurnBudget {
    /// A budget of `budget` from now.
    pub fn start(budget: Duration) -> Self {
        Self {
            deadline: Deadline::after(budget),
        }
    }

    pub fn spent(&self) -> bool {
        self.deadline.expired()
    }

    /// Awaits `call` until the budget ends. `None`: it was cut (and
    /// dropped).
    pub async fn bound<F: Future>(&self, call: F) -> Option<F::Output> {
        self.deadline.bound(call).await
    }

    /// [`bound`](Self::bound), with the clock stopped while the host embeds
    /// for `call`. Only for calls awaited one at a time (the retrievers): a
    /// pause moves the whole turn's deadline.
    pub async fn bound_host_paused<F: Future>(&self, call: F) -> Option<F::Output> {
        outer::host_paused(self.deadline.clone(), self.deadline.bound(call)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_is_cut_when_the_budget_ends() {
        let budget = TurnBudget::start(Duration::from_millis(20));
        assert!(!budget.spent());
        let started = std::time::Instant::now();
        let slow = budget.bound(tokio::time::sleep(Duration::from_secs(5)));
        assert_eq!(slow.await, None);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(budget.spent());
    }
}
