//! One wasmtime engine for every plugin: calls run asynchronously on a
//! runtime of their own, epoch ticks let a running guest yield and meet its
//! deadline, compiled code is cached on disk under a MAC, and one linker
//! serves every plugin.
//!
//! Why a runtime of their own: a plugin call can wait (on `embed`, on a WASI
//! clock or poll), and with wasmtime's async support that wait suspends the
//! guest instead of blocking a thread. Calls are futures on this runtime;
//! whoever waits for one — a turn, a scorer, the learning job — stops
//! waiting at the deadline and drops it, which ends the guest wherever it
//! is. Serving threads and tokio's shared blocking pool never run guest
//! code.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::Instrument;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::{clock, embed, kv, log, outcomes, types};
use super::cache::{CacheOptions, CompileCache};
use super::sandbox::{MemoryPool, PluginState};

/// How often the epoch advances while a plugin call is running: a running
/// guest checks its deadline (and yields to the runtime) this often.
pub const TICK: Duration = Duration::from_millis(1);

/// How the engine is set up.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Compiled components are kept here; `None` compiles every time.
    pub cache: Option<CacheOptions>,
    /// Worker threads that run plugin calls (0: one per core, at least 2).
    pub threads: usize,
    /// Bytes every plugin's instances and compiled code may hold together
    /// (`plugins.total_memory_mb`).
    pub total_memory: usize,
    /// Compiles running at once (`plugins.max_compiles`).
    pub max_compiles: usize,
    /// How long one compile may take before its plugin is refused
    /// (`plugins.timeouts.compile`); `None`: as long as it takes.
    pub compile_timeout: Option<Duration>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        let plugins = crate::config::PluginsConfig::default();
        Self {
            cache: None,
            threads: 0,
            total_memory: (plugins.total_memory_mb as usize) << 20,
            max_compiles: plugins.max_compiles,
            compile_timeout: Some(plugins.timeouts.compile.get()),
        }
    }
}

/// A compile ran past `plugins.timeouts.compile`: its plugin is refused.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error(
    "compiling it took longer than plugins.timeouts.compile ({0:?}); it was refused and its compiled code discarded"
)]
pub struct CompileTimedOut(pub Duration);

pub struct PluginEngine {
    /// Most plugins: components of the stable component model.
    plain: Flavor,
    /// Components built with the component model's async ABI (jco's
    /// QuickJS components declare its builtins): calls into them go through
    /// wasmtime's concurrency machinery, which costs about half a
    /// microsecond a call, so only they get this engine.
    concurrent: Flavor,
    cache: Option<CompileCache>,
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    /// Every plugin's instances and compiled code together.
    memory: Arc<MemoryPool>,
    compiles: Arc<CompileSlots>,
    compile_timeout: Option<Duration>,
}

/// The package's interfaces the linker below provides, by name: what a
/// plugin may import (`outcomes` since 0.1.1). A plugin importing another
/// is refused at load, naming it.
pub const HOST_INTERFACES: [&str; 6] = ["types", "log", "embed", "clock", "kv", "outcomes"];

/// Which of the engine's two wasmtime engines a component was compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlavorId {
    Plain,
    Concurrent,
}

/// One wasmtime engine, its linker and its epoch ticker.
pub struct Flavor {
    pub engine: Engine,
    pub linker: Linker<PluginState>,
    ticker: Arc<Ticker>,
    /// Distinguishes compiled artifacts of different wasmtime builds and
    /// configurations.
    compat: String,
}

impl Flavor {
    fn new(concurrent: bool) -> Result<Self> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        config.wasm_component_model_async(concurrent);
        config.concurrency_support(concurrent);
        config.parallel_compilation(true);
        // Deep recursion traps cleanly instead of exhausting the host stack
        // (the guest runs on a fiber stack of `async_stack_size`).
        config.max_wasm_stack(1 << 20);
        config.async_stack_size(2 << 20);
        let engine = Engine::new(&config)
            .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
        let mut linker: Linker<PluginState> = Linker::new(&engine);
        // WASI is always linked (Python and JS guests import it) but the
        // context each plugin gets denies what the deployment did not grant.
        // The async flavour: a guest's sleep or poll suspends its call.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| anyhow::anyhow!("cannot link WASI: {e}"))?;
        // metaclaw's host interfaces; each function checks the plugin's
        // grants and denies (trap or error) what was not granted.
        let link = |r: wasmtime::Result<()>| {
            r.map_err(|e| anyhow::anyhow!("cannot link host interfaces: {e}"))
        };
        link(types::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut linker,
            |s| s,
        ))?;
        link(log::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut linker,
            |s| s,
        ))?;
        link(embed::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut linker,
            |s| s,
        ))?;
        link(clock::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut linker,
            |s| s,
        ))?;
        link(kv::add_to_linker::<PluginState, HasSelf<PluginState>>(
            &mut linker,
            |s| s,
        ))?;
        link(outcomes::add_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |s| s))?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compat = format!("{:016x}", hasher.finish());
        let ticker = Ticker::start(engine.clone());
        Ok(Self {
            engine,
            linker,
            ticker,
            compat,
        })
    }

    /// Keeps the epoch advancing while the returned guard lives.
    pub fn running(&self) -> TickerGuard {
        self.ticker.activate()
    }
}

impl PluginEngine {
    pub fn new(options: EngineOptions) -> Result<Arc<Self>> {
        let plain = Flavor::new(false)?;
        let concurrent = Flavor::new(true)?;
        let cache = match &options.cache {
            Some(c) => match CompileCache::open(c) {
                Ok(cache) => Some(cache),
                Err(e) => {
                    // Fail closed: without a key no artifact can be trusted.
                    tracing::warn!("compiled plugins are not cached: {e:#}");
                    None
                }
            },
            None => None,
        };
        let threads = match options.threads {
            0 => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .max(2),
            n => n,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            // `embed` runs the host's (synchronous) embedding backend here;
            // each plugin may have few such calls outstanding at once.
            .max_blocking_threads(16)
            .thread_name("metaclaw-plugin")
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("cannot start the plugin runtime: {e}"))?;
        let handle = runtime.handle().clone();
        Ok(Arc::new(Self {
            plain,
            concurrent,
            cache,
            runtime: Some(runtime),
            handle,
            memory: MemoryPool::new(options.total_memory),
            compiles: CompileSlots::new(options.max_compiles),
            compile_timeout: options.compile_timeout,
        }))
    }

    /// The process-wide memory budget of plugins (`plugins.total_memory_mb`).
    pub fn memory(&self) -> &Arc<MemoryPool> {
        &self.memory
    }

    /// Compiles running now, those that ran out of time included.
    pub fn compiles_running(&self) -> usize {
        self.compiles.running()
    }

    pub fn flavor(&self, id: FlavorId) -> &Flavor {
        match id {
            FlavorId::Plain => &self.plain,
            FlavorId::Concurrent => &self.concurrent,
        }
    }

    /// Compiles a component, or loads it from the cache (keyed by the
    /// sha256 of its bytes and the engine's compatibility hash, and
    /// accepted only if its MAC verifies): for the plain engine, or, if it
    /// needs the component model's async ABI, the concurrent one.
    pub fn compile(&self, bytes: &[u8], sha256: &str) -> Result<(Component, FlavorId)> {
        match self.compile_for(FlavorId::Plain, bytes, sha256) {
            Ok(component) => Ok((component, FlavorId::Plain)),
            Err(late) if late.is::<CompileTimedOut>() => Err(late),
            Err(plain) => match self.compile_for(FlavorId::Concurrent, bytes, sha256) {
                Ok(component) => Ok((component, FlavorId::Concurrent)),
                // Out of time in the concurrent engine (its slot held by
                // other compiles on a loaded machine): that is the reason,
                // not the plain engine's refusal of the async ABI.
                Err(late) if late.is::<CompileTimedOut>() => Err(late),
                // Not an async-ABI component either: the plain engine's
                // reason is the one that applies.
                Err(_) => Err(plain),
            },
        }
    }

    fn compile_for(&self, id: FlavorId, bytes: &[u8], sha256: &str) -> Result<Component> {
        let flavor = self.flavor(id);
        if let Some(cache) = &self.cache
            && let Some(code) = cache.load(sha256, &flavor.compat, artifact_limit(bytes.len()))
            && let Ok(component) = deserialize_verified(&flavor.engine, &code)
        {
            return Ok(component);
        }
        let code = self.precompile(&flavor.engine, bytes)?;
        let component = deserialize_verified(&flavor.engine, &code)?;
        if let Some(cache) = &self.cache {
            cache.store(sha256, &flavor.compat, &code);
        }
        Ok(component)
    }

    /// Compiles `bytes` in one of the compile slots, within the compile
    /// deadline (see the module's comment for what that bounds).
    fn precompile(&self, engine: &Engine, bytes: &[u8]) -> Result<Vec<u8>> {
        let compile = |engine: &Engine, bytes: &[u8]| {
            engine
                .precompile_component(bytes)
                .map_err(|e| anyhow::anyhow!("{e:?}"))
        };
        let slot = self.compiles.acquire();
        let Some(limit) = self.compile_timeout else {
            return compile(engine, bytes);
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (engine, bytes) = (engine.clone(), bytes.to_vec());
        // Not joined: a compile cannot be cut short, and one past its
        // deadline runs to its end holding its slot, which bounds them.
        crate::work::unjoined("metaclaw-compile", move || {
            // Held until the compile ends, whether or not anyone still
            // waits for it.
            let _slot = slot;
            let _ = tx.send(compile(&engine, &bytes));
        })
        .map_err(|e| anyhow::anyhow!("cannot start a compile thread: {e}"))?;
        let started = Instant::now();
        match rx.recv_timeout(limit) {
            Ok(result) => result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!(
                    "a plugin compile passed plugins.timeouts.compile ({limit:?}) after {:?}; it runs to its end in the background, holding its compile slot",
                    started.elapsed()
                );
                Err(CompileTimedOut(limit).into())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                anyhow::bail!("the compile thread ended without a result")
            }
        }
    }

    /// The compile cache, if there is one.
    pub fn cache(&self) -> Option<&CompileCache> {
        self.cache.as_ref()
    }

    /// The compatibility hashes of the two engines (cache entries of
    /// others are stale).
    pub fn compats(&self) -> [&str; 2] {
        [&self.plain.compat, &self.concurrent.compat]
    }

    /// Runs `future` on the plugin runtime. Dropping what this returns
    /// cancels it (a turn whose client left stops its plugin calls). It runs
    /// in the caller's span: a turn's plugin calls log with its id.
    pub fn spawn<F>(&self, future: F) -> Spawned<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Spawned(self.handle.spawn(future.in_current_span()))
    }

    /// The threads that run plugin calls (`plugins.threads`).
    pub fn threads(&self) -> usize {
        self.handle.metrics().num_workers()
    }

    /// Runs `future` on the plugin runtime in the background, to its end
    /// (its own deadlines bound it).
    pub fn detach<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.handle.spawn(future.in_current_span()));
    }

    /// Runs `future` to completion on this thread, with the plugin runtime
    /// driving its timers. For synchronous callers (the CLI, the scoring
    /// thread, tests); never call it from an async task: await the plugin's
    /// async method, or `spawn`, instead.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }
}

/// Loads compiled code produced by `precompile_component`.
#[expect(
    unsafe_code,
    reason = "wasmtime requires unsafe to load precompiled native code"
)]
fn deserialize_verified(engine: &Engine, code: &[u8]) -> Result<Component> {
    // SAFETY: `code` was produced by `Engine::precompile_component` of an
    // engine with this same configuration: either just now, or earlier and
    // read back from the compile cache after its MAC — keyed by a secret
    // outside the cache folder — verified over these exact bytes, the
    // source's sha256 and this engine's compatibility hash (cache.rs).
    // wasmtime also checks the artifact's version and configuration header.
    unsafe { Component::deserialize(engine, code) }.map_err(|e| anyhow::anyhow!("{e}"))
}

/// Compiled code is a few times larger than the component; a cached
/// artifact far beyond that is not ours and is not read.
pub fn artifact_limit(wasm_len: usize) -> u64 {
    (wasm_len as u64).saturating_mul(32) + (16 << 20)
}

/// The host memory a compiled component's code takes (its image: machine
/// code and the data beside it), what loading it charges to
/// `plugins.total_memory_mb`.
pub fn code_bytes(component: &Component) -> usize {
    let image = component.image_range();
    image.end.addr().saturating_sub(image.start.addr())
}

/// At most `limit` compiles at once: a counting semaphore for the threads
/// that compile (plain threads, not async tasks).
struct CompileSlots {
    limit: usize,
    running: Mutex<usize>,
    freed: Condvar,
}

/// One compile slot, given back when dropped.
struct CompileSlot(Arc<CompileSlots>);

impl CompileSlots {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            running: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    /// Waits for a slot.
    fn acquire(self: &Arc<Self>) -> CompileSlot {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        while *running >= self.limit {
            running = self.freed.wait(running).unwrap_or_else(|p| p.into_inner());
        }
        *running += 1;
        CompileSlot(self.clone())
    }

    fn running(&self) -> usize {
        *self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for CompileSlot {
    fn drop(&mut self) {
        let mut running = self.0.running.lock().unwrap_or_else(|p| p.into_inner());
        *running = running.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

/// A plugin-runtime task; aborted when dropped.
pub struct Spawned<T>(tokio::task::JoinHandle<T>);

impl<T> Spawned<T> {
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl<T> Future for Spawned<T> {
    /// `None` if the task was cancelled or panicked.
    type Output = Option<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        Pin::new(&mut self.0).poll(cx).map(Result::ok)
    }
}

impl<T> Drop for Spawned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Advances the engine's epoch every [`TICK`] while plugin calls run, then
/// waits to be woken by the next call: the epoch only has to move while a
/// guest runs (for its deadline and its yields), and a ticker that lingered
/// after each call would never rest under steady traffic.
struct Ticker {
    active: AtomicUsize,
    /// The ticker waits on `signal` (only then does a call need to wake it).
    idle: AtomicBool,
    wake: Mutex<()>,
    signal: Condvar,
    stop: AtomicBool,
    /// Epoch increments so far.
    ticks: AtomicU64,
}

/// Ticks with no call running before the ticker goes idle: one, so a call
/// shorter than a tick costs it one wake-up and one tick. (Fifty kept it
/// ticking without pause at 100 requests a second: ten wake-ups a request.)
const IDLE_AFTER_TICKS: u32 = 1;

impl Ticker {
    fn start(engine: Engine) -> Arc<Self> {
        let ticker = Arc::new(Self {
            active: AtomicUsize::new(0),
            idle: AtomicBool::new(true),
            wake: Mutex::new(()),
            signal: Condvar::new(),
            stop: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
        });
        let t = ticker.clone();
        // Ended by `stop`, which the engine sets when dropped (never
        // joined: an engine may be dropped in async code).
        let spawned = crate::work::unjoined("metaclaw-epoch", move || {
            let mut quiet = IDLE_AFTER_TICKS;
            while !t.stop.load(Ordering::Relaxed) {
                if quiet >= IDLE_AFTER_TICKS {
                    let Ok(mut guard) = t.wake.lock() else { return };
                    t.idle.store(true, Ordering::SeqCst);
                    while t.active.load(Ordering::SeqCst) == 0 && !t.stop.load(Ordering::Relaxed) {
                        guard = match t.signal.wait(guard) {
                            Ok(g) => g,
                            Err(_) => return,
                        };
                    }
                    t.idle.store(false, Ordering::SeqCst);
                    quiet = 0;
                }
                std::thread::sleep(TICK);
                engine.increment_epoch();
                t.ticks.fetch_add(1, Ordering::Relaxed);
                if t.active.load(Ordering::SeqCst) == 0 {
                    quiet += 1;
                } else {
                    quiet = 0;
                }
            }
        });
        if let Err(e) = spawned {
            // Deadlines still hold (the waiter drops the call), but a guest
            // spinning in a loop would hold its worker until then.
            tracing::error!(
                "cannot start the plugin epoch thread ({e}): running plugins will not yield"
            );
        }
        ticker
    }

    fn activate(self: &Arc<Self>) -> TickerGuard {
        self.active.fetch_add(1, Ordering::SeqCst);
        // Woken only if it went to sleep; the lock orders this against its
        // check of `active` before it waits.
        if self.idle.load(Ordering::SeqCst)
            && let Ok(_guard) = self.wake.lock()
        {
            self.signal.notify_one();
        }
        TickerGuard {
            ticker: self.clone(),
        }
    }
}

pub struct TickerGuard {
    ticker: Arc<Ticker>,
}

impl Drop for TickerGuard {
    fn drop(&mut self) {
        self.ticker.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        for flavor in [&self.plain, &self.concurrent] {
            flavor.ticker.stop.store(true, Ordering::Relaxed);
            if let Ok(_guard) = flavor.ticker.wake.lock() {
                flavor.ticker.signal.notify_one();
            }
        }
        // Never blocks, so the engine may be dropped anywhere (an async
        // task included); calls still running are cancelled.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At most `limit` compiles hold a slot; one whose caller stopped
    /// waiting keeps its slot until its thread ends.
    #[test]
    fn compile_slots_bound_compiles_even_after_their_deadline() {
        let slots = CompileSlots::new(2);
        let first = slots.acquire();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        // A "compile" that ran out of time: its thread holds the slot.
        let late = std::thread::spawn(move || {
            let _slot = first;
            let _ = wait.recv();
        });
        let second = slots.acquire();
        assert_eq!(slots.running(), 2);
        let (got, got_rx) = std::sync::mpsc::channel();
        let third = {
            let slots = slots.clone();
            std::thread::spawn(move || {
                let slot = slots.acquire();
                got.send(()).unwrap();
                drop(slot);
            })
        };
        assert!(
            got_rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a third compile started while two held their slots"
        );
        drop(release);
        late.join().unwrap();
        got_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        third.join().unwrap();
        drop(second);
        assert_eq!(slots.running(), 0);
    }

    /// A compile past its deadline is refused at the deadline, its slot
    /// stays taken until the compile ends, and nothing is cached.
    #[test]
    fn a_compile_past_its_deadline_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let engine = PluginEngine::new(EngineOptions {
            cache: Some(CacheOptions {
                dir: dir.path().join("cache"),
                key_file: dir.path().join("key"),
            }),
            threads: 2,
            max_compiles: 1,
            compile_timeout: Some(Duration::from_micros(1)),
            ..EngineOptions::default()
        })
        .unwrap();
        // A module of many functions: far more than a microsecond.
        let funcs: String = (0..2000)
            .map(|i| {
                format!("(func (export \"f{i}\") (result i32) i32.const {i} i32.const 1 i32.add)")
            })
            .collect();
        let bytes = wat::parse_str(format!("(component (core module {funcs}))")).unwrap();
        let started = std::time::Instant::now();
        let err = engine.compile(&bytes, "aa").err().unwrap();
        assert!(err.is::<CompileTimedOut>(), "{err:#}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // The refused compile still holds its slot, or has just ended.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while engine.compiles_running() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the slot was never freed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let cached = std::fs::read_dir(dir.path().join("cache")).unwrap().count();
        assert_eq!(cached, 0, "a refused compile is not cached");
    }

    /// The epoch moves while a call runs and stops within a tick of the
    /// last one ending (the ticker waits for the next call, not 50 ms).
    #[test]
    fn the_ticker_ticks_only_while_a_call_runs() {
        let engine = Engine::default();
        let ticker = Ticker::start(engine);
        let wait_for = |what: &str, done: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !done() {
                assert!(std::time::Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        wait_for("the ticker never went idle", &|| {
            ticker.idle.load(Ordering::SeqCst)
        });
        assert_eq!(
            ticker.ticks.load(Ordering::Relaxed),
            0,
            "ticked with no call"
        );
        for round in 1..=3 {
            let call = ticker.activate();
            let before = ticker.ticks.load(Ordering::Relaxed);
            wait_for("no tick while a call ran", &|| {
                ticker.ticks.load(Ordering::Relaxed) >= before + 3
            });
            drop(call);
            let ended = ticker.ticks.load(Ordering::Relaxed);
            wait_for("the ticker did not rest after the call", &|| {
                ticker.idle.load(Ordering::SeqCst)
            });
            // Parked: at most the tick under way when the call ended, and
            // the one after it.
            let rested = ticker.ticks.load(Ordering::Relaxed);
            assert!(rested <= ended + 2, "round {round}: {ended} -> {rested}");
        }
        ticker.stop.store(true, Ordering::Relaxed);
        if let Ok(_guard) = ticker.wake.lock() {
            ticker.signal.notify_one();
        }
    }
}
