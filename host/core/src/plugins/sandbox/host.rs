//! metaclaw's host capabilities as a plugin sees them (`log`, `embed`,
//! `clock`, `kv`, `outcomes`): each denies what was not granted.

use super::*;

impl types::Host for PluginState {}

impl log::Host for PluginState {
    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let log = &self.shared.log;
        if self.log_budget == 0 || !log.admit() {
            if self.log_budget == 0 {
                log.dropped.fetch_add(1, Ordering::Relaxed);
            }
            if log.notice_due() {
                tracing::warn!(
                    target: "metaclaw::plugin",
                    plugin = %self.shared.label,
                    "log lines dropped ({} so far): at most {LOG_LINES_PER_CALL} a call and {} a second",
                    log.dropped.load(Ordering::Relaxed),
                    LogLimiter::PER_SEC
                );
            }
            return Ok(());
        }
        self.log_budget -= 1;
        // One line, whatever the plugin sent: nothing it writes can pass
        // for a line of metaclaw's own.
        let message = crate::untrusted::log_line(&message, LogLimiter::MAX_CHARS);
        let plugin = &*self.shared.label;
        match level {
            types::LogLevel::Debug => {
                tracing::debug!(target: "metaclaw::plugin", plugin, "{message}")
            }
            types::LogLevel::Info => {
                tracing::info!(target: "metaclaw::plugin", plugin, "{message}")
            }
            types::LogLevel::Warn => {
                tracing::warn!(target: "metaclaw::plugin", plugin, "{message}")
            }
            types::LogLevel::Error => {
                tracing::error!(target: "metaclaw::plugin", plugin, "{message}")
            }
        }
        Ok(())
    }
}

impl embed::Host for PluginState {
    async fn embed(
        &mut self,
        texts: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<Vec<f32>>, String>> {
        if !self.shared.grants.embed {
            return Ok(Err(self.denied("embed").to_string()));
        }
        let Some(embedder) = self.shared.embedder.clone() else {
            return Ok(Err(
                "no embedding backend is configured (see skills.embedding_backend)".into(),
            ));
        };
        let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
        let left = &mut self.embed_left;
        if left.calls == 0
            || texts.len() as u64 > u64::from(left.texts)
            || bytes > left.bytes
            || left.wall.is_zero()
        {
            let full = EmbedBudget::for_purpose(self.embed_purpose);
            return Ok(Err(format!(
                "this call's embedding budget is spent (at most {} calls, {} texts, {} KiB of text and {:?} of waiting per call)",
                full.calls,
                full.texts,
                full.bytes >> 10,
                full.wall
            )));
        }
        left.calls -= 1;
        left.texts -= texts.len() as u32;
        left.bytes -= bytes;
        let allowed = left.wall;
        // The plugin's own clock stands still while the host works, up to
        // what is left of the budget.
        let before = self.deadline.at();
        self.deadline.set(before + allowed);
        self.deadline.host_begins();
        // And so does a budget spanning calls (a turn's, plugins::turn).
        let outer = super::outer::host_work_begins(allowed);
        let started = Instant::now();
        let purpose = self.embed_purpose;
        let slots = self.shared.embed_slots.clone();
        // Charged to the plugin's file over time, for what no cache holds.
        let account = self.shared.embed_account.clone();
        let job = async move {
            let slot = slots
                .acquire_owned()
                .await
                .map_err(|_| "the embedding backend is shutting down".to_string())?;
            tokio::task::spawn_blocking(move || {
                let _slot = slot;
                // The plugin gets the host's failure in words (WIT's
                // `result<_, string>`).
                embedder
                    .embed_within(&texts, purpose, &*account)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| format!("the embedding backend failed: {e}"))?
        };
        let result = match tokio::time::timeout(allowed, job).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "the embedding backend did not answer within this call's budget ({allowed:?})"
            )),
        };
        let spent = started.elapsed().min(allowed);
        self.embed_left.wall = allowed.saturating_sub(spent);
        self.deadline.set(before + spent);
        self.deadline.host_ended(spent);
        if let Some(outer) = outer {
            outer.ended(spent);
        }
        if let Err(e) = &result {
            self.embed_error = Some(e.clone());
        }
        Ok(result)
    }
}

impl clock::Host for PluginState {
    fn now_ms(&mut self) -> wasmtime::Result<u64> {
        if !self.shared.grants.clock {
            return Err(self.denied("clock"));
        }
        Ok(crate::clock::now_ms().max(0) as u64)
    }
}

impl kv::Host for PluginState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        if !self.shared.grants.kv {
            return Err(self.denied("kv"));
        }
        let cache = self
            .shared
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        Ok(cache.entries.get(&key).cloned())
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        if !self.shared.grants.kv {
            return Ok(Err(self.denied("kv").to_string()));
        }
        let mut cache = self
            .shared
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        let old = cache.entries.get(&key).map(|v| kv_cost(&key, v));
        let new = kv_cost(&key, &value);
        if old.is_none() && cache.entries.len() >= KV_MAX_ENTRIES {
            return Ok(Err(format!("the cache is full ({KV_MAX_ENTRIES} entries)")));
        }
        let bytes = cache.bytes - old.unwrap_or(0) + new;
        if bytes > KV_MAX_BYTES {
            return Ok(Err(format!(
                "the cache is full ({KV_MAX_BYTES} bytes, {KV_ENTRY_OVERHEAD} of them per entry)"
            )));
        }
        cache.bytes = bytes;
        cache.entries.insert(key, value);
        Ok(Ok(()))
    }

    fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        if !self.shared.grants.kv {
            return Err(self.denied("kv"));
        }
        let mut cache = self
            .shared
            .kv
            .lock()
            .map_err(|_| wasmtime::Error::msg("kv lock poisoned"))?;
        if let Some(v) = cache.entries.remove(&key) {
            cache.bytes -= kv_cost(&key, &v);
        }
        Ok(())
    }
}

impl outcomes::Host for PluginState {
    fn outcomes(
        &mut self,
        ids: Vec<String>,
    ) -> wasmtime::Result<Vec<Option<outcomes::SkillOutcome>>> {
        if !self.shared.grants.outcomes {
            return Err(self.denied("outcomes"));
        }
        if ids.len() > MAX_OUTCOME_IDS {
            return Err(wasmtime::Error::msg(format!(
                "outcomes() was asked about {} ids; at most {MAX_OUTCOME_IDS} a call",
                ids.len()
            )));
        }
        Ok(match &self.outcomes {
            Some(source) => ids.iter().map(|id| source.outcome(id)).collect(),
            None => vec![None; ids.len()],
        })
    }
}
