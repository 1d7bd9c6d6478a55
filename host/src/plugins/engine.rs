//! One wasmtime engine for every plugin: epoch interruption for deadlines,
//! a compile cache on disk, and the linker every plugin is instantiated with.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::{clock, embed, kv, log, types};
use super::sandbox::PluginState;
use crate::proxy::request::hex;

/// How often the epoch advances while a plugin call is running. Deadlines
/// are counted in these ticks.
pub const TICK: Duration = Duration::from_millis(1);

pub struct PluginEngine {
    pub engine: Engine,
    pub linker: Linker<PluginState>,
    ticker: Arc<Ticker>,
    cache_dir: Option<PathBuf>,
    /// Distinguishes cache entries of different wasmtime builds/configs.
    compat: String,
}

impl PluginEngine {
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Arc<Self>> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // jco's QuickJS components declare (without needing) async builtins
        // such as `task.cancel`; validating them needs this on. Calls stay
        // synchronous.
        config.wasm_component_model_async(true);
        config.parallel_compilation(true);
        // Deep recursion traps cleanly instead of exhausting the host stack.
        config.max_wasm_stack(1 << 20);
        let engine = Engine::new(&config)
            .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
        let mut linker: Linker<PluginState> = Linker::new(&engine);
        // WASI is always linked (Python and JS guests import it) but the
        // context each plugin gets denies what the deployment did not grant.
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
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

        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compat = format!("{:016x}", hasher.finish());
        if let Some(dir) = &cache_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let ticker = Ticker::start(engine.clone());
        Ok(Arc::new(Self {
            engine,
            linker,
            ticker,
            cache_dir,
            compat,
        }))
    }

    /// Compiles a component, or loads it from the cache (keyed by the
    /// sha256 of its bytes and the engine's compatibility hash).
    pub fn compile(&self, bytes: &[u8], sha256: &str) -> Result<Component> {
        let Some(dir) = &self.cache_dir else {
            return Component::new(&self.engine, bytes).map_err(|e| anyhow::anyhow!("{e}"));
        };
        let artifact = dir.join(format!("{sha256}-{}.cwasm", self.compat));
        let checksum = artifact.with_extension("cwasm.sha256");
        if let (Ok(code), Ok(expected)) =
            (std::fs::read(&artifact), std::fs::read_to_string(&checksum))
        {
            if hex(&Sha256::digest(&code)) == expected.trim() {
                match self.deserialize_cached(&code) {
                    Ok(component) => return Ok(component),
                    Err(e) => {
                        tracing::warn!("ignoring unusable cache entry {}: {e}", artifact.display())
                    }
                }
            } else {
                tracing::warn!("ignoring corrupted cache entry {}", artifact.display());
            }
        }
        let code = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let component = self.deserialize_cached(&code)?;
        // Best effort: a cache we cannot write only costs a recompile.
        let written = crate::home::write_private(&artifact, &code).and_then(|()| {
            crate::home::write_private(&checksum, hex(&Sha256::digest(&code)).as_bytes())
        });
        if let Err(e) = written {
            tracing::debug!("cannot cache compiled plugin: {e:#}");
        }
        Ok(component)
    }

    /// Loads compiled code produced by `precompile_component`.
    #[expect(
        unsafe_code,
        reason = "wasmtime requires unsafe to load precompiled native code"
    )]
    fn deserialize_cached(&self, code: &[u8]) -> Result<Component> {
        // SAFETY: `code` was produced by `Engine::precompile_component` of an
        // engine with this same configuration: either just now, or earlier
        // and read back from metaclaw's own cache directory (inside the
        // 0700 home) after its sha256 matched the checksum written with it.
        // wasmtime also checks the artifact's version and configuration
        // header and refuses a mismatch.
        unsafe { Component::deserialize(&self.engine, code) }.map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Deadline in ticks for a call that may take `timeout`.
    pub fn ticks(&self, timeout: Duration) -> u64 {
        (timeout.as_micros() / TICK.as_micros()).max(1) as u64 + 1
    }

    /// Keeps the epoch advancing while the returned guard lives.
    pub fn running(&self) -> TickerGuard {
        self.ticker.activate()
    }
}

/// Advances the engine's epoch every [`TICK`], but only while at least one
/// plugin call is running: an idle daemon does not wake a thousand times a
/// second.
struct Ticker {
    active: AtomicUsize,
    wake: Mutex<()>,
    signal: Condvar,
    stop: AtomicBool,
}

impl Ticker {
    fn start(engine: Engine) -> Arc<Self> {
        let ticker = Arc::new(Self {
            active: AtomicUsize::new(0),
            wake: Mutex::new(()),
            signal: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let t = ticker.clone();
        let spawned = std::thread::Builder::new()
            .name("metaclaw-epoch".into())
            .spawn(move || {
                while !t.stop.load(Ordering::Relaxed) {
                    {
                        let Ok(mut guard) = t.wake.lock() else { return };
                        while t.active.load(Ordering::Acquire) == 0
                            && !t.stop.load(Ordering::Relaxed)
                        {
                            guard = match t.signal.wait(guard) {
                                Ok(g) => g,
                                Err(_) => return,
                            };
                        }
                    }
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            });
        if let Err(e) = spawned {
            tracing::error!(
                "cannot start the plugin deadline thread ({e}): plugin calls will not time out"
            );
        }
        ticker
    }

    fn activate(self: &Arc<Self>) -> TickerGuard {
        if self.active.fetch_add(1, Ordering::AcqRel) == 0
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
        self.ticker.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.ticker.stop.store(true, Ordering::Relaxed);
        self.ticker.signal.notify_one();
    }
}
