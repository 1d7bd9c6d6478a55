//! Who owns each thread and task. Every one metaclaw starts is started here,
//! so none runs without someone who stops it (`clippy.toml` refuses a bare
//! `tokio::spawn` or `std::thread::spawn` anywhere else):
//!
//! - [`Work`]: the daemon's background work. The app handle holds it;
//!   shutdown cancels its token, waits for its tasks and joins its threads.
//! - [`thread`]: a thread whose handle the caller keeps and joins (the
//!   store's writer, a child process's pipe reader).
//! - [`unjoined`]: a thread that ends on terms its caller states (a flag,
//!   a closed channel, a deadline) and nobody joins (the plugin engine's
//!   epoch ticker).
//! - [`OwnedTask`]: a task that ends when its owner drops it (a Tinker
//!   session's heartbeat).
//!
//! Tasks and threads start inside the caller's tracing span, so what they
//! log carries the turn, job or step that started them.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The daemon's background work: cloned into whatever starts more of it.
#[derive(Clone, Default)]
pub struct Work {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancel: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Set with the token, for threads asleep in [`Work::nap`].
    stopped: Mutex<bool>,
    wake: Condvar,
    /// What a stop runs: each closes what a thread of this work waits on
    /// (a channel), so no thread polls for the stop.
    on_stop: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl Work {
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancelled when the work stops: long loops on other threads watch it.
    pub fn token(&self) -> CancellationToken {
        self.inner.cancel.clone()
    }

    pub fn is_stopping(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Runs `work` on the current tokio runtime until it ends or the work
    /// stops. Outside a runtime nothing runs, and that is logged.
    pub fn task(&self, what: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("{what} did not start: no async runtime on this thread");
            return;
        };
        let cancel = self.inner.cancel.clone();
        let work = async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = work => {}
            }
        }
        .in_current_span();
        let Ok(mut tasks) = self.inner.tasks.lock() else {
            tracing::error!("{what} did not start: the task set's lock is poisoned");
            return;
        };
        // Finished tasks are dropped as new ones start, so a long-running
        // daemon's set holds only what still runs.
        while tasks.try_join_next().is_some() {}
        tasks.spawn_on(work, &runtime);
    }

    /// Runs `work` on a named thread, joined when the work stops. The
    /// thread should watch [`Work::token`] (or a channel that closes on
    /// shutdown) so that it ends.
    pub fn thread(&self, name: &str, work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        self.adopt(thread(name, work)?);
        Ok(())
    }

    /// Takes over a thread started with [`thread`]: joined when the work
    /// stops.
    pub fn adopt(&self, handle: std::thread::JoinHandle<()>) {
        if let Ok(mut threads) = self.inner.threads.lock() {
            threads.retain(|t| !t.is_finished());
            threads.push(handle);
        }
    }

    /// Sleeps `d` on a thread of this work; `false` when the work stopped
    /// meanwhile (a stop wakes it at once).
    pub fn nap(&self, d: Duration) -> bool {
        let Ok(stopped) = self.inner.stopped.lock() else {
            return false;
        };
        match self.inner.wake.wait_timeout_while(stopped, d, |s| !*s) {
            Ok((stopped, _)) => !*stopped,
            Err(_) => false,
        }
    }

    /// Runs `hook` when the work stops (at once, if it has): it closes or
    /// signals what one of its threads waits on, so that the thread ends.
    pub fn on_stop(&self, hook: impl FnOnce() + Send + 'static) {
        let Ok(mut hooks) = self.inner.on_stop.lock() else {
            return;
        };
        match self.is_stopping() {
            true => {
                drop(hooks);
                hook();
            }
            false => hooks.push(Box::new(hook)),
        }
    }

    /// Stops the work: cancels the token, waits for every task, then for
    /// every thread until `grace` has passed. A thread still running then
    /// (blocked in a call that cannot be cut short) is named in the log and
    /// left to end with the process.
    pub async fn stop(&self, grace: Duration) {
        // The token first: a hook's signal finds it cancelled.
        self.inner.cancel.cancel();
        if let Ok(mut stopped) = self.inner.stopped.lock() {
            *stopped = true;
        }
        self.inner.wake.notify_all();
        for hook in take(&self.inner.on_stop) {
            hook();
        }
        let mut tasks = take(&self.inner.tasks);
        let deadline = Instant::now() + grace;
        while !tasks.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, tasks.join_next()).await {
                Ok(Some(Err(e))) if e.is_panic() => tracing::error!("a background task panicked"),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!("{} background task(s) cut short at shutdown", tasks.len());
                    tasks.abort_all();
                    break;
                }
            }
        }
        for handle in take(&self.inner.threads) {
            while !handle.is_finished() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let name = handle.thread().name().unwrap_or("unnamed").to_string();
            match handle.is_finished() {
                true => {
                    if handle.join().is_err() {
                        tracing::error!("thread {name} panicked");
                    }
                }
                false => tracing::warn!("thread {name} still running at shutdown"),
            }
        }
    }
}

/// What `held` holds, leaving it empty (nothing, if its lock is poisoned:
/// a panic while starting work left nothing worth waiting for).
fn take<T: Default>(held: &Mutex<T>) -> T {
    held.lock()
        .map(|mut t| std::mem::take(&mut *t))
        .unwrap_or_default()
}

/// A named thread in the caller's span; the caller owns the handle and
/// joins it.
#[must_use = "the caller owns the thread: keep its handle and join it"]
#[allow(clippy::disallowed_methods)] // the one place threads start
pub fn thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let span = tracing::Span::current();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || span.in_scope(work))
}

/// A named thread that nobody joins and that ends on terms its caller
/// states: a flag its owner sets, a channel or pipe that closes, a deadline
/// of its own. For owners that must never block (an engine dropped in async
/// code) and for work that cannot be cut short but is bounded otherwise (a
/// compile holding its slot).
pub fn unjoined(name: &str, work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    thread(name, work).map(drop)
}

/// A task that is aborted when this is dropped: its owner's lifetime is
/// its own.
pub struct OwnedTask(tokio::task::JoinHandle<()>);

impl OwnedTask {
    /// Starts `work` on the current runtime (panics outside one, as
    /// `tokio::spawn` does: only async code starts these).
    #[allow(clippy::disallowed_methods)] // the one place owned tasks start
    pub fn start(work: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(work.in_current_span()))
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn stop_cancels_tasks_and_joins_threads_that_watch_the_token() {
        let work = Work::new();
        let task_ended = Arc::new(AtomicBool::new(false));
        // Set when the task's future is dropped, whether or not it ran.
        let guard = SetOnDrop(task_ended.clone());
        work.task("a loop", async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        let thread_ended = Arc::new(AtomicBool::new(false));
        let (token, ended) = (work.token(), thread_ended.clone());
        work.thread("metaclaw-test-loop", move || {
            while !token.is_cancelled() {
                std::thread::sleep(Duration::from_millis(5));
            }
            ended.store(true, Ordering::SeqCst);
        })
        .unwrap();
        work.stop(Duration::from_secs(30)).await;
        assert!(
            task_ended.load(Ordering::SeqCst),
            "the task was not stopped"
        );
        assert!(
            thread_ended.load(Ordering::SeqCst),
            "the thread was not joined"
        );
    }

    #[tokio::test]
    async fn a_stop_wakes_a_napping_thread_and_runs_its_hooks() {
        let work = Work::new();
        let (napped, woke) = std::sync::mpsc::channel();
        let sleeper = work.clone();
        work.thread("metaclaw-test-nap", move || {
            let _ = napped.send(sleeper.nap(Duration::from_secs(3600)));
        })
        .unwrap();
        let (closed, waiting) = std::sync::mpsc::channel::<()>();
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        work.thread("metaclaw-test-channel", move || {
            let _ = waiting.recv();
            flag.store(true, Ordering::SeqCst);
        })
        .unwrap();
        work.on_stop(move || drop(closed));
        work.stop(Duration::from_secs(30)).await;
        // Both ended within the grace (an hour's nap and a wait on a channel
        // nobody writes to would not): the nap woken by the stop (false:
        // stopped), the channel closed by its hook.
        assert_eq!(woke.try_recv(), Ok(false));
        assert!(
            ended.load(Ordering::SeqCst),
            "the hook did not end the wait"
        );
        let late = Arc::new(AtomicBool::new(false));
        let ran = late.clone();
        work.on_stop(move || ran.store(true, Ordering::SeqCst));
        assert!(
            late.load(Ordering::SeqCst),
            "a hook added after the stop runs at once"
        );
    }

    #[tokio::test]
    async fn a_thread_that_never_ends_does_not_hold_up_shutdown() {
        let work = Work::new();
        let (_keep, never) = std::sync::mpsc::channel::<()>();
        work.thread("metaclaw-test-stuck", move || {
            let _ = never.recv();
        })
        .unwrap();
        let started = Instant::now();
        work.stop(Duration::from_millis(100)).await;
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[tokio::test]
    async fn an_owned_task_ends_with_its_owner() {
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let task = OwnedTask::start(async move {
            let _guard = SetOnDrop(flag);
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
        });
        started.await.unwrap();
        drop(task);
        // Abort is delivered at the task's next poll: wait for it, bounded.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ended.load(Ordering::SeqCst) && Instant::now() < deadline {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(ended.load(Ordering::SeqCst));
    }

    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}
