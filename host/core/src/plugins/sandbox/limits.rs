//! What one plugin may spend: embedding calls, time (its deadline), memory
//! (shared by its instances), log lines and its key-value cache.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

use super::EmbedPurpose;

/// What one plugin call may spend on `embed`: calls, texts, bytes of text,
/// and wall time. The call's own deadline stands still while the host
/// embeds, but only up to `wall`: a slow (or paid) backend cannot be driven
/// without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedBudget {
    pub calls: u32,
    pub texts: u32,
    pub bytes: u64,
    pub wall: Duration,
}

impl EmbedBudget {
    /// A turn's call (retrieval, and every other kind).
    pub const CALL: Self = Self {
        calls: 8,
        texts: 256,
        bytes: 512 << 10,
        wall: Duration::from_secs(2),
    };
    /// Indexing the library.
    pub const INDEX: Self = Self {
        calls: 4_000,
        texts: 200_000,
        bytes: 128 << 20,
        wall: Duration::from_secs(600),
    };

    pub fn for_purpose(purpose: EmbedPurpose) -> Self {
        match purpose {
            EmbedPurpose::Query => Self::CALL,
            EmbedPurpose::Index => Self::INDEX,
        }
    }
}

/// When a call must end. Shared by the call's waiter (who drops the call
/// when it passes), the epoch callback (which stops a running guest), and
/// `embed` (which moves it while the host works).
///
/// A plain deadline ([`Deadline::after`]) is a point on the clock. A plugin
/// call's ([`Deadline::for_call`]) is the plugin's own time: the call ends
/// once it has *used* its timeout (the time it ran, the waits it chose), or
/// once [`STARVED_GRACE`] times the timeout passed on the clock, whichever
/// comes first. On a machine busy with other work a fast plugin gets its
/// time a little later instead of missing a deadline it never had (one was
/// once disabled for it), and a runaway plugin is stopped after the same
/// work however busy the machine is.
#[derive(Debug)]
pub struct Deadline {
    pub(super) base: Instant,
    /// Nanoseconds after `base`: the end on the clock (for a call, the end
    /// if it used all of its time at once).
    pub(super) at: AtomicU64,
    /// A call's own time; `None`: a plain deadline.
    budget: Option<Duration>,
    usage: Usage,
}

/// How far past its timeout, on the clock, a call the machine starved may
/// run (its work within the timeout): a 50 ms retriever ends within 200 ms
/// on a busy machine (and a turn's `plugins.turn_budget` bounds them all).
pub const STARVED_GRACE: u32 = 4;

/// What a call has used of its time: the time it ran, and the waits it
/// chose (a sleep, a poll). Not used: time the machine gave to other work
/// while the call was ready to run (other processes, other calls after a
/// yield), the wait for an instance slot, and the host's work for it
/// (`embed`).
///
/// A running guest yields at every epoch tick, so each poll of it is one
/// slice of at most a tick of its own running; a slice is charged its time
/// on the clock up to [`SLICE_CAP`], so a thread the machine took away in
/// the middle of one is not charged the wait. (The thread's CPU clock would
/// say the same exactly, but reading it is a system call: twice a poll it
/// made a 2 µs call 1.5x as slow.)
#[derive(Debug, Default)]
struct Usage {
    /// The call has its slot: its time counts from now.
    started: AtomicBool,
    /// How long it waited for the slot (nanoseconds). Not its time, but
    /// spent of its deadline all the same: otherwise each call handed a
    /// slot just before its deadline would start a full timeout afresh, and
    /// a burst of calls to a slow plugin would run it back to back for as
    /// long as the burst lasts instead of going on without it.
    slot_wait: AtomicU64,
    ran: AtomicU64,
    waited: AtomicU64,
    excused: AtomicU64,
    /// Since when (nanoseconds after the deadline's base, plus one) the
    /// call waits on its own; 0: it does not.
    waiting_since: AtomicU64,
    /// Since when (as `waiting_since`) the poll running the call runs; 0:
    /// it is not running.
    running_since: AtomicU64,
    /// The guest gave the runtime its turn (the epoch callback): what
    /// follows is waiting for the runtime, not the call's own wait.
    yielded: AtomicBool,
    /// Since when (as `waiting_since`) the host works for the call; 0: it
    /// does not.
    host_since: AtomicU64,
}

/// The most one slice of running (a poll, which a running guest ends at
/// the next epoch tick, every millisecond) is charged: two ticks.
pub const SLICE_CAP: Duration = Duration::from_millis(2);

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

impl Deadline {
    /// A point on the clock, `timeout` from now.
    pub fn after(timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            at: AtomicU64::new(nanos(timeout)),
            budget: None,
            usage: Usage::default(),
        })
    }

    /// A plugin call's: `timeout` of its own time (see [`Deadline`]). Until
    /// the call has its slot ([`Deadline::metered`] begins) it is a point on
    /// the clock: a call that never ran ends at `timeout`.
    pub fn for_call(timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            at: AtomicU64::new(nanos(timeout)),
            budget: Some(timeout),
            usage: Usage::default(),
        })
    }

    /// `call`, the part of a plugin call that is the plugin's own (after it
    /// got an instance slot), metering what it uses.
    pub fn metered<F: Future>(&self, call: F) -> Metered<'_, F> {
        Metered {
            deadline: self,
            first: true,
            call,
        }
    }

    /// Now, as a mark: nanoseconds after `base`, plus one (0 is no mark).
    fn mark(&self) -> u64 {
        nanos(self.base.elapsed()).saturating_add(1)
    }

    /// A slice of running that began at `mark`, as charged.
    fn slice(&self, mark: u64) -> u64 {
        self.since_mark(mark).min(nanos(SLICE_CAP))
    }

    /// Nanoseconds on the clock since `mark` (0: no mark, so none).
    fn since_mark(&self, mark: u64) -> u64 {
        match mark {
            0 => 0,
            mark => nanos(self.base.elapsed()).saturating_sub(mark - 1),
        }
    }

    /// The guest yields to the runtime at an epoch tick.
    pub fn yielded(&self) {
        self.usage.yielded.store(true, Ordering::Relaxed);
    }

    /// The host starts working for the call (`embed`): not the plugin's
    /// time, until [`Deadline::host_ended`].
    pub fn host_begins(&self) {
        self.usage.host_since.store(self.mark(), Ordering::Relaxed);
    }

    /// The host worked `spent` for the call (it moved the deadline as far).
    pub fn host_ended(&self, spent: Duration) {
        self.usage.host_since.store(0, Ordering::Relaxed);
        self.usage
            .excused
            .fetch_add(nanos(spent), Ordering::Relaxed);
    }

    /// What the call has used so far, the wait or the slice going on now
    /// included.
    pub fn used(&self) -> Duration {
        let u = &self.usage;
        let waiting = self.since_mark(u.waiting_since.load(Ordering::Relaxed));
        let running = self.slice(u.running_since.load(Ordering::Relaxed));
        let hosting = self.since_mark(u.host_since.load(Ordering::Relaxed));
        let used = u
            .ran
            .load(Ordering::Relaxed)
            .saturating_add(u.waited.load(Ordering::Relaxed))
            .saturating_add(waiting)
            .saturating_add(running)
            .saturating_sub(u.excused.load(Ordering::Relaxed))
            .saturating_sub(hosting);
        Duration::from_nanos(used)
    }

    /// Time on the clock since the deadline was set.
    pub fn elapsed(&self) -> Duration {
        self.base.elapsed()
    }

    /// Whether the call has had its slot.
    pub fn started(&self) -> bool {
        self.usage.started.load(Ordering::Relaxed)
    }

    /// How long the call waited for its slot (all of it, while it has none).
    pub fn slot_wait(&self) -> Duration {
        if self.started() {
            Duration::from_nanos(self.usage.slot_wait.load(Ordering::Relaxed))
        } else {
            self.base.elapsed()
        }
    }

    /// What is spent of a call's deadline: its own time and its wait for a
    /// slot.
    fn spent(&self) -> Duration {
        self.used() + self.slot_wait()
    }

    /// The end on the clock if all of the time is used at once.
    pub fn at(&self) -> Instant {
        self.base + Duration::from_nanos(self.at.load(Ordering::Acquire))
    }

    pub fn set(&self, at: Instant) {
        let nanos = at.saturating_duration_since(self.base).as_nanos();
        self.at
            .store(nanos.min(u128::from(u64::MAX)) as u64, Ordering::Release);
    }

    /// When, on the clock, it ends at the latest (for a call, the
    /// starvation grace past `at`).
    fn cap(&self) -> Instant {
        match self.budget {
            Some(budget) => self.at() + budget * (STARVED_GRACE - 1),
            None => self.at(),
        }
    }

    pub fn expired(&self) -> bool {
        let now = Instant::now();
        match self.budget {
            Some(budget) if self.started() => now >= self.cap() || self.spent() >= budget,
            _ => now >= self.at(),
        }
    }

    /// When to look again whether it passed.
    fn next_check(&self) -> Instant {
        match self.budget {
            Some(budget) if self.started() => {
                let left = budget.saturating_sub(self.spent());
                (Instant::now() + left).min(self.cap())
            }
            _ => self.at(),
        }
    }

    /// Awaits `future` until the deadline, following it if it moves.
    /// `None`: the deadline passed first (and `future` is dropped).
    pub async fn bound<F: std::future::Future>(&self, future: F) -> Option<F::Output> {
        let mut future = std::pin::pin!(future);
        loop {
            let check = self.next_check();
            match tokio::time::timeout_at(check.into(), &mut future).await {
                Ok(out) => return Some(out),
                Err(_) if !self.expired() => continue,
                Err(_) => return None,
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A plugin call metered by its [`Deadline`] (a future of its own, not
    /// an `async fn`: a plugin call's future is large, and an `async fn`
    /// moves it into its state once more on every call).
    pub struct Metered<'a, F> {
        deadline: &'a Deadline,
        first: bool,
        #[pin]
        call: F,
    }
}

impl<F: Future> Future for Metered<'_, F> {
    type Output = F::Output;

    /// One reading of the clock as a poll begins and one as it ends (a
    /// 2 µs call is polled once).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let deadline = *this.deadline;
        let u = &deadline.usage;
        let begins = deadline.mark();
        if std::mem::take(this.first) {
            u.slot_wait.store(begins - 1, Ordering::Relaxed);
            u.started.store(true, Ordering::Relaxed);
        }
        let since = u.waiting_since.swap(0, Ordering::Relaxed);
        if since > 0 {
            u.waited
                .fetch_add(begins.saturating_sub(since), Ordering::Relaxed);
        }
        u.yielded.store(false, Ordering::Relaxed);
        u.running_since.store(begins, Ordering::Relaxed);
        let out = this.call.poll(cx);
        u.running_since.store(0, Ordering::Relaxed);
        let ends = deadline.mark();
        u.ran.fetch_add(
            ends.saturating_sub(begins).min(nanos(SLICE_CAP)),
            Ordering::Relaxed,
        );
        if out.is_pending() && !u.yielded.swap(false, Ordering::Relaxed) {
            u.waiting_since.store(ends, Ordering::Relaxed);
        }
        out
    }
}

/// A memory budget: one plugin's, shared by all its instances (concurrent
/// calls cannot multiply it), or the process-wide one
/// (`plugins.total_memory_mb`) that every plugin's budget draws from as
/// well, and that each loaded plugin's compiled code is charged to.
#[derive(Debug)]
pub struct MemoryPool {
    pub(super) limit: usize,
    pub(super) used: AtomicUsize,
    /// The most it ever held.
    peak: AtomicUsize,
    /// The process-wide budget this one also draws from.
    parent: Option<Arc<MemoryPool>>,
}

/// Which budget refused a growth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The plugin's own (`plugins.memory_mb`).
    Plugin,
    /// All plugins' together (`plugins.total_memory_mb`).
    Total,
}

impl MemoryPool {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            parent: None,
        })
    }

    /// A plugin's budget of `limit` that also draws from `total`.
    pub fn within(limit: usize, total: Option<Arc<MemoryPool>>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            parent: total,
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held: by the plugin's live instances; for the process-wide
    /// budget, by every plugin's instances and compiled code.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The most it ever held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Bytes left.
    pub fn available(&self) -> usize {
        self.limit.saturating_sub(self.used())
    }

    fn take_own(&self, bytes: usize) -> bool {
        match self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            }) {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    fn give_back_own(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Takes `bytes` from this budget and the process-wide one, or from
    /// neither, saying which refused.
    pub(super) fn try_take(&self, bytes: usize) -> Result<(), Cap> {
        if !self.take_own(bytes) {
            return Err(Cap::Plugin);
        }
        if let Some(parent) = &self.parent
            && !parent.take_own(bytes)
        {
            self.give_back_own(bytes);
            return Err(Cap::Total);
        }
        Ok(())
    }

    pub(super) fn give_back(&self, bytes: usize) {
        self.give_back_own(bytes);
        if let Some(parent) = &self.parent {
            parent.give_back_own(bytes);
        }
    }

    /// Charges `bytes` (a plugin's compiled code) to this budget for as
    /// long as the returned charge lives; `None` if they do not fit.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Option<Charge> {
        self.take_own(bytes).then(|| Charge {
            pool: self.clone(),
            bytes,
        })
    }

    /// More than half of the budget is held: a finished call's instance is
    /// then dropped rather than kept for the next call, so that idle
    /// instances do not hold memory that running calls need.
    pub fn pressed(&self) -> bool {
        self.used() > self.limit / 2
    }
}

/// Bytes held against a [`MemoryPool`] until dropped (a loaded plugin's
/// compiled code, shared by the copies of it a regrant makes).
#[derive(Debug)]
pub struct Charge {
    pool: Arc<MemoryPool>,
    bytes: usize,
}

impl Charge {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pool.give_back_own(self.bytes);
    }
}

/// Per-plugin log limits: a plugin cannot flood or forge metaclaw's log.
#[derive(Debug)]
pub struct LogLimiter {
    /// Tokens (lines) left, refilled at `PER_SEC` up to `BURST`.
    pub(super) bucket: Mutex<(f64, Instant)>,
    /// Lines dropped so far (shown by `plugins list`).
    pub dropped: AtomicU64,
    /// When the last "lines dropped" notice was written.
    pub(super) noticed: Mutex<Option<Instant>>,
}

impl LogLimiter {
    /// Lines a plugin may log per second, sustained, and in one burst.
    pub const PER_SEC: f64 = 20.0;
    pub const BURST: f64 = 100.0;
    /// Characters of one log message.
    pub const MAX_CHARS: usize = 1000;

    pub(super) fn new() -> Self {
        Self {
            bucket: Mutex::new((Self::BURST, Instant::now())),
            dropped: AtomicU64::new(0),
            noticed: Mutex::new(None),
        }
    }

    pub(super) fn admit(&self) -> bool {
        let Ok(mut bucket) = self.bucket.lock() else {
            return false;
        };
        let now = Instant::now();
        let (tokens, last) = *bucket;
        let tokens =
            (tokens + now.duration_since(last).as_secs_f64() * Self::PER_SEC).min(Self::BURST);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Whether to write a "lines were dropped" notice now (one every 10 s).
    pub(super) fn notice_due(&self) -> bool {
        let Ok(mut noticed) = self.noticed.lock() else {
            return false;
        };
        let due = noticed.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if due {
            *noticed = Some(Instant::now());
        }
        due
    }
}

/// A plugin's private key-value cache, shared by its instances.
#[derive(Debug, Default)]
pub struct KvCache {
    pub(super) entries: HashMap<String, Vec<u8>>,
    pub(super) bytes: usize,
}

pub const KV_MAX_BYTES: usize = 1 << 20;
pub const KV_MAX_ENTRIES: usize = 4096;
/// What one entry costs beyond its key and value (the map's own keeping).
pub const KV_ENTRY_OVERHEAD: usize = 64;

pub(super) fn kv_cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + KV_ENTRY_OVERHEAD
}

/// One instance's share of its plugin's [`MemoryPool`] (and so of the
/// process-wide one). `StoreLimits` caps each linear memory separately, and
/// Python or JS components have several; this sums them, counts tables too
/// (a table of a million function references is 8 MiB of host memory), and
/// gives the bytes back to the pools when the instance goes.
pub struct MemoryBudget {
    pub(super) pool: Arc<MemoryPool>,
    pub(super) used: usize,
    /// A growth was refused: the call failed on a memory cap.
    pub hit: bool,
    /// ...and it was the process-wide one (`plugins.total_memory_mb`).
    pub total_hit: bool,
}

/// Host bytes per table element (a function reference is a pointer).
const TABLE_ELEMENT_BYTES: usize = 8;
/// Elements one table may have, whatever the budget.
const TABLE_MAX_ELEMENTS: usize = 1 << 20;

impl MemoryBudget {
    pub(super) fn new(pool: Arc<MemoryPool>) -> Self {
        Self {
            pool,
            used: 0,
            hit: false,
            total_hit: false,
        }
    }

    /// Bytes this instance holds.
    pub fn used(&self) -> usize {
        self.used
    }

    pub(super) fn grow(&mut self, bytes: usize) -> bool {
        match self.pool.try_take(bytes) {
            Ok(()) => {
                self.used += bytes;
                true
            }
            Err(cap) => {
                self.hit = true;
                self.total_hit |= cap == Cap::Total;
                false
            }
        }
    }
}

impl Drop for MemoryBudget {
    fn drop(&mut self) {
        self.pool.give_back(self.used);
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(desired.saturating_sub(current)))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > TABLE_MAX_ELEMENTS {
            self.hit = true;
            return Ok(false);
        }
        Ok(self.grow(
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT_BYTES),
        ))
    }

    fn instances(&self) -> usize {
        100
    }
    fn tables(&self) -> usize {
        100
    }
    fn memories(&self) -> usize {
        100
    }
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use super::*;

    /// Spins this thread for `d` on the clock.
    fn burn(d: Duration) {
        let start = Instant::now();
        while start.elapsed() < d {}
    }

    #[tokio::test]
    async fn a_call_uses_the_time_it_ran_and_the_waits_it_chose_not_time_given_to_others() {
        let deadline = Deadline::after(Duration::from_millis(50));
        let mut polls = 0;
        deadline
            .metered(std::future::poll_fn(|cx| {
                polls += 1;
                match polls {
                    // Ran 30 ms, yielding at each 1 ms tick.
                    1..=30 => {
                        burn(Duration::from_millis(1));
                        deadline.yielded();
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    // Descheduled 200 ms in the middle of running (as a
                    // busy machine does): wall time, not its time.
                    31 => {
                        std::thread::sleep(Duration::from_millis(200));
                        cx.waker().wake_by_ref();
                        deadline.yielded();
                        Poll::Pending
                    }
                    _ => Poll::Ready(()),
                }
            }))
            .await;
        let used = deadline.used();
        assert!(
            used >= Duration::from_millis(30) && used < Duration::from_millis(100),
            "used {used:?}: 30 ms of running, not the 200 ms the thread slept"
        );

        // A wait of its own (a sleep) is its time; the host's work for it
        // (`embed`, excused) is not.
        let deadline = Deadline::after(Duration::from_millis(50));
        deadline
            .metered(tokio::time::sleep(Duration::from_millis(120)))
            .await;
        assert!(
            deadline.used() >= Duration::from_millis(120),
            "{:?}",
            deadline.used()
        );
        deadline.host_begins();
        deadline.host_ended(Duration::from_millis(120));
        assert!(
            deadline.used() < Duration::from_millis(60),
            "{:?}",
            deadline.used()
        );
    }

    /// A call the machine starves (its thread descheduled: here asleep in
    /// each poll) gets its time later instead of missing its deadline; a
    /// runaway one ends after its own time however slowly it got it.
    #[tokio::test]
    async fn a_call_ends_when_it_used_its_time_or_at_the_grace_on_the_clock() {
        let timeout = Duration::from_millis(1000);
        let deadline = Deadline::for_call(timeout);
        let started = Instant::now();
        let mut polls = 0;
        let out = deadline
            .bound(deadline.metered(std::future::poll_fn(|cx| {
                polls += 1;
                if polls == 5 {
                    return Poll::Ready(());
                }
                std::thread::sleep(Duration::from_millis(300));
                deadline.yielded();
                cx.waker().wake_by_ref();
                Poll::Pending
            })))
            .await;
        assert_eq!(
            out,
            Some(()),
            "1.2 s on the clock, almost none of it the call's"
        );
        assert!(started.elapsed() > timeout);
        assert!(deadline.used() < timeout / 2, "{:?}", deadline.used());

        let timeout = Duration::from_millis(30);
        let deadline = Deadline::for_call(timeout);
        let started = Instant::now();
        let out = deadline
            .bound(deadline.metered(std::future::poll_fn(|cx| {
                burn(Duration::from_millis(5));
                deadline.yielded();
                cx.waker().wake_by_ref();
                Poll::<()>::Pending
            })))
            .await;
        assert_eq!(out, None, "a runaway call ends");
        assert!(
            deadline.used() >= timeout || started.elapsed() >= timeout * STARVED_GRACE,
            "ended after using {:?} in {:?}",
            deadline.used(),
            started.elapsed()
        );

        // The host's work for the call (`embed`) is not its time, while it
        // goes on either.
        let deadline = Deadline::for_call(Duration::from_millis(50));
        let out = deadline
            .bound(deadline.metered(async {
                deadline.host_begins();
                tokio::time::sleep(Duration::from_millis(120)).await;
                deadline.host_ended(Duration::from_millis(120));
            }))
            .await;
        assert_eq!(out, Some(()), "used {:?}", deadline.used());

        // Waiting for a slot is not the call's time, but a call that never
        // got one ends at its timeout on the clock.
        let deadline = Deadline::for_call(timeout);
        let started = Instant::now();
        assert_eq!(deadline.bound(std::future::pending::<()>()).await, None);
        assert!(started.elapsed() < timeout * STARVED_GRACE);
        assert_eq!(deadline.used(), Duration::ZERO);
    }

    /// A call handed its slot late has only the rest of its timeout: a
    /// burst of calls to a plugin that sleeps must not run it back to back
    /// (a full timeout each) for as long as the burst lasts.
    #[tokio::test]
    async fn a_call_handed_its_slot_late_has_only_the_rest_of_its_time() {
        let timeout = Duration::from_millis(200);
        let deadline = Deadline::for_call(timeout);
        let started = Instant::now();
        let out = deadline
            .bound(async {
                // The wait for a slot.
                tokio::time::sleep(Duration::from_millis(150)).await;
                // A plugin that sleeps past any deadline.
                deadline.metered(std::future::pending::<()>()).await
            })
            .await;
        assert_eq!(out, None);
        let took = started.elapsed();
        assert!(took >= timeout, "ended after {took:?}");
        assert!(
            took < timeout + Duration::from_millis(100),
            "ran {took:?}: a fresh timeout after the slot, not the rest of it"
        );
        let (used, waited) = (deadline.used(), deadline.slot_wait());
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(used < timeout / 2, "{used:?}: the plugin's own time");
    }

    #[tokio::test]
    async fn a_wait_cut_off_by_the_deadline_counts_up_to_then() {
        let deadline = Deadline::after(Duration::from_millis(40));
        let out = deadline
            .bound(deadline.metered(std::future::pending::<()>()))
            .await;
        assert_eq!(out, None);
        assert!(
            deadline.used() >= Duration::from_millis(40),
            "{:?}",
            deadline.used()
        );
    }
}
