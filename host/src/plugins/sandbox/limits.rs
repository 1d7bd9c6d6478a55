//! What one plugin may spend: embedding calls, time (its deadline), memory
//! (shared by its instances), log lines and its key-value cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
/// once it has *used* its timeout (the CPU it ran, the waits it chose), or
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

/// What a call has used of its time: the CPU its thread gave it while it
/// ran, and the waits it chose (a sleep, a poll). Not used: time the
/// machine gave to other work while the call was ready to run (other
/// processes, other calls after a yield), the wait for an instance slot,
/// and the host's work for it (`embed`).
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
    cpu: AtomicU64,
    waited: AtomicU64,
    excused: AtomicU64,
    /// Since when (nanoseconds after the deadline's base, plus one) the
    /// call waits on its own; 0: it does not.
    waiting_since: AtomicU64,
    /// This thread's CPU time (plus one) when the poll running the call
    /// began; 0: it is not running.
    poll_cpu: AtomicU64,
    /// The guest gave the runtime its turn (the epoch callback): what
    /// follows is waiting for the runtime, not the call's own wait.
    yielded: AtomicBool,
    /// Since when (as `waiting_since`) the host works for the call; 0: it
    /// does not.
    host_since: AtomicU64,
}

/// CPU time this thread has run; `None` where the clock cannot be read.
fn thread_cpu() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

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

    /// Awaits `call`, the part of a plugin call that is the plugin's own
    /// (after it got an instance slot), metering what it uses.
    pub async fn metered<F: std::future::Future>(&self, call: F) -> F::Output {
        let mut call = std::pin::pin!(call);
        self.usage
            .slot_wait
            .store(nanos(self.base.elapsed()), Ordering::Relaxed);
        self.usage.started.store(true, Ordering::Relaxed);
        std::future::poll_fn(|cx| {
            self.end_wait();
            self.usage.yielded.store(false, Ordering::Relaxed);
            let before = thread_cpu();
            if let Some(before) = before {
                self.usage
                    .poll_cpu
                    .store(nanos(before).saturating_add(1), Ordering::Relaxed);
            }
            let out = call.as_mut().poll(cx);
            self.usage.poll_cpu.store(0, Ordering::Relaxed);
            // The same thread throughout one poll: its CPU time is the
            // call's (and the little the runtime spends around it).
            if let (Some(before), Some(after)) = (before, thread_cpu()) {
                self.usage
                    .cpu
                    .fetch_add(nanos(after.saturating_sub(before)), Ordering::Relaxed);
            }
            if out.is_pending() && !self.usage.yielded.swap(false, Ordering::Relaxed) {
                let since = nanos(self.base.elapsed()).saturating_add(1);
                self.usage.waiting_since.store(since, Ordering::Relaxed);
            }
            out
        })
        .await
    }

    fn end_wait(&self) {
        let since = self.usage.waiting_since.swap(0, Ordering::Relaxed);
        self.usage
            .waited
            .fetch_add(self.since_mark(since), Ordering::Relaxed);
    }

    /// Nanoseconds on the clock since `mark` (nanoseconds after `base`,
    /// plus one; 0: no mark, so none).
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
        let now = nanos(self.base.elapsed()).saturating_add(1);
        self.usage.host_since.store(now, Ordering::Relaxed);
    }

    /// The host worked `spent` for the call (it moved the deadline as far).
    pub fn host_ended(&self, spent: Duration) {
        self.usage.host_since.store(0, Ordering::Relaxed);
        self.usage
            .excused
            .fetch_add(nanos(spent), Ordering::Relaxed);
    }

    /// What the call has used so far: a wait still going on included, and
    /// the poll running now when asked from its thread (the epoch callback).
    pub fn used(&self) -> Duration {
        let u = &self.usage;
        let waiting = self.since_mark(u.waiting_since.load(Ordering::Relaxed));
        let running = match (u.poll_cpu.load(Ordering::Relaxed), thread_cpu()) {
            (0, _) | (_, None) => 0,
            (start, Some(now)) => nanos(now).saturating_sub(start - 1),
        };
        let hosting = self.since_mark(u.host_since.load(Ordering::Relaxed));
        let used = u
            .cpu
            .load(Ordering::Relaxed)
            .saturating_add(u.waited.load(Ordering::Relaxed))
            .saturating_add(waiting)
            .saturating_add(running)
            .saturating_sub(u.excused.load(Ordering::Relaxed))
            .saturating_sub(hosting);
        Duration::from_nanos(used)
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

    /// Spins this thread until it has run `cpu` more.
    fn burn(cpu: Duration) {
        let Some(start) = thread_cpu() else {
            panic!("no thread CPU clock")
        };
        while thread_cpu().is_some_and(|now| now - start < cpu) {}
    }

    #[tokio::test]
    async fn a_call_uses_the_cpu_it_ran_and_the_waits_it_chose_not_time_given_to_others() {
        let deadline = Deadline::after(Duration::from_millis(50));
        let mut polls = 0;
        deadline
            .metered(std::future::poll_fn(|cx| {
                polls += 1;
                match polls {
                    // Ran 30 ms of CPU, then yielded at a tick.
                    1 => {
                        burn(Duration::from_millis(30));
                        deadline.yielded();
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    // Descheduled 200 ms in the middle of running (as a
                    // busy machine does): wall time, not its time.
                    2 => {
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
            "used {used:?}: 30 ms of CPU, not the 200 ms the thread slept"
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
