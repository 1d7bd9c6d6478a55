//! A deadline that spans several calls (a turn's plugin budget,
//! `plugins::turn`): while the host works for a call awaited under
//! [`host_paused`] (`embed`), it moves as the call's own deadline does, so
//! that it counts the plugin's time, not the host's.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Deadline;

tokio::task_local! {
    static OUTER: Arc<Deadline>;
}

/// Awaits `call` with `outer` standing still while the host works for it.
/// Only for calls awaited one at a time: a pause moves all of `outer`.
pub async fn host_paused<F: Future>(outer: Arc<Deadline>, call: F) -> F::Output {
    OUTER.scope(outer, call).await
}

/// The host starts working for the current call for at most `allowed`:
/// the outer deadline, if any, moves that far meanwhile.
pub(super) fn host_work_begins(allowed: Duration) -> Option<HostWork> {
    OUTER
        .try_with(|deadline| {
            let before = deadline.at();
            deadline.set(before + allowed);
            HostWork {
                deadline: deadline.clone(),
                before,
            }
        })
        .ok()
}

/// Host work under way (from [`host_work_begins`]).
pub(super) struct HostWork {
    deadline: Arc<Deadline>,
    before: Instant,
}

impl HostWork {
    /// The host's work took `spent`: the outer deadline ends that much
    /// later than it would have.
    pub(super) fn ended(self, spent: Duration) {
        self.deadline.set(self.before + spent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn host_work_moves_the_outer_deadline_only_where_asked() {
        let outer = Deadline::after(Duration::from_millis(30));
        // The host works 60 ms for the call: past the deadline, but not the
        // plugin's time.
        let call = async {
            let work = host_work_begins(Duration::from_secs(2));
            assert!(work.is_some(), "inside host_paused");
            tokio::time::sleep(Duration::from_millis(60)).await;
            if let Some(work) = work {
                work.ended(Duration::from_millis(60));
            }
            7
        };
        let bounded = outer.bound(call);
        assert_eq!(host_paused(outer.clone(), bounded).await, Some(7));
        // Outside it, host work moves nothing, and the deadline holds.
        assert!(host_work_begins(Duration::from_secs(2)).is_none());
        let outer = Deadline::after(Duration::from_millis(30));
        let call = async {
            assert!(host_work_begins(Duration::from_secs(2)).is_none());
            tokio::time::sleep(Duration::from_secs(5)).await;
        };
        assert_eq!(outer.bound(call).await, None);
    }
}
