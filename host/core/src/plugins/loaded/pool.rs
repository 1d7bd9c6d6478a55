//! The instance pool and the rules of a call: the deadline, the budgets,
//! the failures counted against a plugin (and disabling it), and what a
//! trap means.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use wasmtime::{Store, UpdateDeadline};

use super::LoadedPlugin;
use crate::plugins::bindings::{evolver, retriever, scorer, skill};
use crate::plugins::sandbox::{Deadline, EmbedPurpose, PluginState};

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Disabled by hand, after `max_failures` in a row, or for failing
    /// more than `max_failure_rate` of its recent calls: why.
    #[error("disabled: {0} (fix the plugin, then replace its file or restart)")]
    Disabled(String),
    #[error("deadline of {0:?} exceeded")]
    Deadline(Duration),
    #[error("memory cap of {} MiB reached", .0 >> 20)]
    Memory(usize),
    /// The plugins together hold `plugins.total_memory_mb`: counted as a
    /// failure, but never toward disabling the plugin (others hold it).
    #[error("plugins.total_memory_mb ({} MiB, all plugins together) reached", .0 >> 20)]
    TotalMemory(usize),
    #[error("trapped: {0}")]
    Trap(String),
    /// More data than `plugins.max_call_mb` crossed into the host in one
    /// call (a huge result, a huge host-call argument).
    #[error("copied more than plugins.max_call_mb ({} MiB) into the host in one call", .0 >> 20)]
    TooLarge(usize),
    #[error("cannot instantiate: {0}")]
    Instantiate(String),
    #[error("wrong kind: this plugin is a {0}")]
    WrongKind(&'static str),
    /// The host's embedding backend failed during the call, or the
    /// plugin's embedding budget for the hour is spent: not counted as a
    /// failure of the plugin (the turn goes to the next retriever).
    #[error("embedding failed: {0}")]
    Embed(String),
    /// The retriever has no index of the library yet (at start, after a
    /// change): this turn goes to the next retriever, or without skills,
    /// while the index is built in the background.
    #[error("still indexing the skills")]
    Indexing,
    /// Every instance was busy for most of the deadline: the call never
    /// started, or started with less than half of its time left, so it is
    /// not counted against the plugin.
    #[error("busy: {0} calls already running, none ended before the deadline")]
    Busy(usize),
    /// The machine ran other work until the call's time was up on the
    /// clock ([`crate::plugins::sandbox::STARVED_GRACE`] times its timeout):
    /// it used less than half of its own time, so it is not counted against
    /// the plugin.
    #[error(
        "starved: the machine gave the call only {used:?} of its {timeout:?} (not the plugin's fault)"
    )]
    Starved { used: Duration, timeout: Duration },
}

impl CallError {
    /// The call never had its chance (every instance busy, the machine
    /// busy with other work): asking again later may well succeed.
    pub fn not_the_plugins(&self) -> bool {
        matches!(self, CallError::Busy(_) | CallError::Starved { .. })
    }

    /// Failures the plugin is blamed for (counted toward disabling it).
    fn counts(&self) -> bool {
        matches!(
            self,
            CallError::Deadline(_)
                | CallError::Memory(_)
                | CallError::TotalMemory(_)
                | CallError::Trap(_)
                | CallError::TooLarge(_)
                | CallError::Instantiate(_)
        )
    }
}

#[derive(Clone)]
pub(super) enum Pre {
    Retriever(retriever::RetrieverPre<PluginState>),
    Scorer(scorer::ScorerPre<PluginState>),
    Evolver(evolver::EvolverPre<PluginState>),
    Skill(skill::SkillPre<PluginState>),
}

pub(super) enum Bindings {
    Retriever(retriever::Retriever),
    Scorer(scorer::Scorer),
    Evolver(evolver::Evolver),
    Skill(skill::Skill),
}

pub(super) struct Instance {
    pub(super) store: Store<PluginState>,
    pub(super) bindings: Bindings,
    calls: u32,
    /// For a retriever: the library generation this instance has indexed
    /// (each instance has its own memory, so each needs the index).
    pub(super) indexed: Option<u64>,
}

/// Which pooled instance a call wants.
#[derive(Clone, Copy)]
pub(super) enum Want {
    /// Any (a new one if none is ready).
    Any,
    /// A retriever instance with an index, of `generation` by preference
    /// (an older index serves while the new one is built); never a new one.
    Indexed(u64),
    /// One whose index is older than `generation`, or none (a new one if
    /// none is ready).
    Unindexed(u64),
}

#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    /// Calls that found every instance busy until their deadline.
    pub busy: AtomicU64,
    /// Calls whose deadline passed while the machine ran other work.
    pub starved: AtomicU64,
    pub consecutive_failures: AtomicU32,
    pub disabled: AtomicBool,
    pub busy_nanos: AtomicU64,
    /// Calls a turn stopped waiting for when `plugins.turn_budget` ran out
    /// (`plugins::turn`): legal, so not failures.
    pub turn_cuts: AtomicU64,
    #[serde(skip)]
    pub last_error: Mutex<Option<String>>,
    /// The outcomes of its recent calls, for its failure rate.
    #[serde(skip)]
    pub recent: Mutex<FailureWindow>,
}

/// Whether each of a plugin's last calls failed: a plugin that fails every
/// other call never fails `max_failures` in a row, but its rate shows.
#[derive(Debug, Default)]
pub struct FailureWindow {
    failed: VecDeque<bool>,
    failures: usize,
}

impl FailureWindow {
    /// Records one call; `Some(failures)` once the last `size` calls hold
    /// more than `max_rate` of them failed (a window not yet full never
    /// does: a plugin's first calls are no rate).
    pub fn record(&mut self, failed: bool, size: usize, max_rate: f64) -> Option<usize> {
        self.failed.push_back(failed);
        self.failures += usize::from(failed);
        while self.failed.len() > size.max(1) {
            if self.failed.pop_front() == Some(true) {
                self.failures -= 1;
            }
        }
        (self.failed.len() >= size && self.failures as f64 > max_rate * size as f64)
            .then_some(self.failures)
    }

    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

impl LoadedPlugin {
    async fn instantiate(
        &self,
        deadline: &Arc<Deadline>,
        purpose: EmbedPurpose,
    ) -> Result<Instance, CallError> {
        let mut state = PluginState::new(self.shared.clone());
        state.begin_call(deadline.clone(), purpose);
        let mut store = Store::new(&self.engine.flavor(self.flavor).engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(self.limits.max_copy_bytes);
        // Every tick: stop at the deadline, else let the runtime run
        // others (and the caller notice a deadline of its own).
        store.epoch_deadline_callback(|ctx| {
            let deadline = &ctx.data().deadline;
            Ok(if deadline.expired() {
                UpdateDeadline::Interrupt
            } else {
                deadline.yielded();
                UpdateDeadline::Yield(1)
            })
        });
        store.set_epoch_deadline(1);
        let bindings = match &self.pre {
            Pre::Retriever(p) => p
                .instantiate_async(&mut store)
                .await
                .map(Bindings::Retriever),
            Pre::Scorer(p) => p.instantiate_async(&mut store).await.map(Bindings::Scorer),
            Pre::Evolver(p) => p.instantiate_async(&mut store).await.map(Bindings::Evolver),
            Pre::Skill(p) => p.instantiate_async(&mut store).await.map(Bindings::Skill),
        };
        let bindings = match bindings {
            Ok(b) => b,
            Err(e) if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) => {
                return Err(CallError::Deadline(self.limits.timeout));
            }
            Err(_) if store.data().limiter.total_hit => {
                return Err(CallError::TotalMemory(self.engine.memory().limit()));
            }
            Err(_) if store.data().limiter.hit => {
                return Err(CallError::Memory(self.limits.memory_bytes));
            }
            Err(e) => {
                return Err(CallError::Instantiate(crate::untrusted::log_line(
                    &format!("{e:#}"),
                    1000,
                )));
            }
        };
        Ok(Instance {
            store,
            bindings,
            calls: 0,
            indexed: None,
        })
    }

    /// An instance from the pool as `want` asks, or a new one.
    fn take_pooled(&self, want: Want) -> Result<Option<Instance>, CallError> {
        let Ok(mut pool) = self.pool.lock() else {
            return Ok(None);
        };
        let pick = match want {
            Want::Any => pool.len().checked_sub(1),
            Want::Indexed(generation) => pool
                .iter()
                .position(|i| i.indexed == Some(generation))
                .or_else(|| {
                    pool.iter()
                        .enumerate()
                        .filter(|(_, i)| i.indexed.is_some())
                        .max_by_key(|(_, i)| i.indexed)
                        .map(|(n, _)| n)
                }),
            // Never one holding a newer library than asked.
            Want::Unindexed(generation) => pool
                .iter()
                .position(|i| i.indexed.is_none_or(|g| g < generation)),
        };
        match (pick, want) {
            (Some(n), _) => Ok(Some(pool.swap_remove(n))),
            (None, Want::Indexed(_)) => Err(CallError::Indexing),
            (None, _) => Ok(None),
        }
    }

    /// Runs `f` on an instance under the deadline and the budgets. A trap
    /// or a missed deadline ends only this call: the instance is dropped,
    /// the failure counted, and the plugin disabled after too many in a
    /// row.
    pub(super) async fn call<R>(
        &self,
        timeout: Duration,
        want: Want,
        purpose: EmbedPurpose,
        f: impl AsyncFnOnce(&mut Instance) -> Result<wasmtime::Result<R>, CallError>,
    ) -> Result<R, CallError> {
        if self.is_disabled() {
            let why = self.status();
            let why = why.strip_prefix("disabled: ").unwrap_or(&why);
            return Err(CallError::Disabled(why.to_string()));
        }
        let deadline = Deadline::for_call(timeout);
        let outcome = deadline
            .bound(async {
                let _permit = self
                    .permits
                    .acquire()
                    .await
                    .map_err(|_| CallError::Busy(self.limits.pool_size))?;
                let _ticking = self.engine.flavor(self.flavor).running();
                deadline
                    .metered(async {
                        let mut instance = match self.take_pooled(want)? {
                            Some(instance) => instance,
                            // The deadline covers instantiation (the guest's
                            // start-up code runs there).
                            None => self
                                .instantiate(&deadline, purpose)
                                .await
                                .map_err(|e| self.classify_start(e))?,
                        };
                        instance
                            .store
                            .data_mut()
                            .begin_call(deadline.clone(), purpose);
                        // The next tick from now (a pooled instance's
                        // deadline is from its last call: without this every
                        // call would start by yielding).
                        instance.store.set_epoch_deadline(1);
                        let result = f(&mut instance).await;
                        Ok::<_, CallError>((instance, result))
                    })
                    .await
            })
            .await;
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.stats
            .busy_nanos
            .fetch_add(deadline.elapsed().as_nanos() as u64, Ordering::Relaxed);
        // The plugin is blamed for a missed deadline only when it used at
        // least half of its time: a call that waited for a slot (busy), or
        // that a machine busy with other work ran too little (starved), was
        // crowded out.
        let not_its_fault = || {
            let used = deadline.used();
            (used < timeout / 2).then(|| {
                if deadline.started() && deadline.slot_wait() < timeout / 2 {
                    self.stats.starved.fetch_add(1, Ordering::Relaxed);
                    CallError::Starved { used, timeout }
                } else {
                    self.stats.busy.fetch_add(1, Ordering::Relaxed);
                    CallError::Busy(self.limits.pool_size)
                }
            })
        };
        let (instance, result) = match outcome {
            None => {
                return Err(
                    not_its_fault().unwrap_or_else(|| self.failed(CallError::Deadline(timeout)))
                );
            }
            Some(Err(CallError::Deadline(_))) if let Some(excused) = not_its_fault() => {
                return Err(excused);
            }
            Some(Err(e)) => return Err(if e.counts() { self.failed(e) } else { e }),
            Some(Ok(done)) => done,
        };
        match result {
            Ok(Ok(value)) => {
                self.stats.consecutive_failures.store(0, Ordering::Relaxed);
                if let Ok(mut recent) = self.stats.recent.lock() {
                    recent.record(
                        false,
                        self.limits.failure_window,
                        self.limits.max_failure_rate,
                    );
                }
                self.give_back(instance);
                Ok(value)
            }
            Ok(Err(trap)) => {
                let error = self.trapped(&instance, &trap, timeout);
                // A trapped instance is poisoned: drop it.
                drop(instance);
                if matches!(error, CallError::Deadline(_))
                    && let Some(excused) = not_its_fault()
                {
                    return Err(excused);
                }
                Err(self.failed(error))
            }
            // What the call reported itself (the embedding backend failed,
            // index() refused, wrong kind). Only the plugin's own failures
            // count; the instance is dropped either way.
            Err(e) => Err(if e.counts() { self.failed(e) } else { e }),
        }
    }

    /// A failed instantiation. The memory budget is shared by the plugin's
    /// instances: with others running, no room for one more only means
    /// busy.
    fn classify_start(&self, error: CallError) -> CallError {
        let others = self
            .limits
            .pool_size
            .saturating_sub(self.permits.available_permits() + 1);
        match error {
            CallError::Memory(_) if others > 0 => CallError::Busy(self.limits.pool_size),
            error => error,
        }
    }

    fn give_back(&self, mut instance: Instance) {
        instance.calls += 1;
        // While the plugins together hold more than half of their total,
        // an idle instance is not kept: the memory goes to running calls.
        if instance.calls < self.limits.recycle_after
            && !self.engine.memory().pressed()
            && let Ok(mut pool) = self.pool.lock()
            && pool.len() < self.limits.pool_size
        {
            pool.push(instance);
        }
    }

    /// What a trap means: the deadline, the memory cap, or the plugin's own
    /// failure (with the tail of what it wrote to stderr).
    fn trapped(&self, instance: &Instance, trap: &wasmtime::Error, timeout: Duration) -> CallError {
        let state = instance.store.data();
        if trap.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
            return CallError::Deadline(timeout);
        }
        if state.limiter.total_hit {
            return CallError::TotalMemory(self.engine.memory().limit());
        }
        if state.limiter.hit {
            return CallError::Memory(self.limits.memory_bytes);
        }
        // wasmtime's own words when the copy limit (hostcall fuel) is hit.
        if format!("{trap:#}").contains("fuel allocated for hostcalls has been exhausted") {
            return CallError::TooLarge(self.limits.max_copy_bytes);
        }
        let stderr = String::from_utf8_lossy(&state.stderr.contents())
            .trim()
            .to_string();
        let tail: String = stderr
            .chars()
            .rev()
            .take(300)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let mut msg = format!("{trap:#}");
        if !tail.is_empty() {
            msg.push_str(&format!(" (stderr: {tail})"));
        }
        // Function names in the backtrace and stderr are the guest's words.
        CallError::Trap(crate::untrusted::log_line(&msg, 2000))
    }

    /// Linear memory and tables held by all of the plugin's instances.
    pub fn memory_in_use(&self) -> usize {
        self.shared.memory.used()
    }

    fn failed(&self, error: CallError) -> CallError {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(plugin = %self.label(), "plugin call failed: {error}");
        // Others hold the memory: never counted toward disabling this one.
        if matches!(error, CallError::TotalMemory(_)) {
            if let Ok(mut last) = self.stats.last_error.lock() {
                *last = Some(error.to_string());
            }
            return error;
        }
        let n = self
            .stats
            .consecutive_failures
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        let rate = self.stats.recent.lock().ok().and_then(|mut recent| {
            recent.record(
                true,
                self.limits.failure_window,
                self.limits.max_failure_rate,
            )
        });
        if let Ok(mut last) = self.stats.last_error.lock() {
            *last = Some(match rate {
                Some(failures) => format!(
                    "{failures} of its last {} calls failed (over plugins.max_failure_rate {}); the last: {error}",
                    self.limits.failure_window, self.limits.max_failure_rate
                ),
                None => error.to_string(),
            });
        }
        if n >= self.limits.max_failures && !self.stats.disabled.swap(true, Ordering::Relaxed) {
            tracing::error!(plugin = %self.label(), "disabled after {n} consecutive failures; replace the file or restart to retry");
        }
        if let Some(failures) = rate
            && !self.stats.disabled.swap(true, Ordering::Relaxed)
        {
            tracing::error!(
                plugin = %self.label(),
                "disabled: {failures} of its last {} calls failed (plugins.max_failure_rate {}); replace the file or restart to retry",
                self.limits.failure_window,
                self.limits.max_failure_rate
            );
        }
        error
    }
}

#[cfg(test)]
mod tests {
    use super::FailureWindow;

    #[test]
    fn the_failure_rate_counts_only_the_last_calls_of_a_full_window() {
        let mut w = FailureWindow::default();
        // Every other call fails: never three in a row, but half of them.
        let tripped = (0..50).position(|i| w.record(i % 2 == 1, 10, 0.25).is_some());
        assert_eq!(tripped, Some(9), "only once the window of 10 is full");
        // One failure in ten stays under the rate however long it goes on.
        let mut w = FailureWindow::default();
        for i in 0..1000 {
            assert_eq!(w.record(i % 10 == 0, 10, 0.25), None, "call {i}");
        }
        // Old failures roll out: three early ones, then only successes.
        let mut w = FailureWindow::default();
        for _ in 0..3 {
            w.record(true, 10, 0.25);
        }
        for _ in 0..6 {
            assert_eq!(w.record(false, 10, 0.25), None, "not full yet");
        }
        assert_eq!(w.record(false, 10, 0.25), Some(3), "3 of 10 is over 25%");
        assert_eq!(w.record(false, 10, 0.25), None, "2 of the last 10");
        w.clear();
        assert_eq!(w.record(true, 1, 0.5), Some(1));
    }
}
