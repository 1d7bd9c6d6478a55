//! A retriever's index of the skill library: each pooled instance indexes
//! the library in the background, and a turn is answered only by an
//! instance that has an index (an older one serves while the new one is
//! built, not once building it has failed).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::LoadedPlugin;
use super::pool::{Bindings, CallError, Instance, Want};
use crate::plugins::bindings::types;
use crate::plugins::sandbox::{EmbedPurpose, OutcomeSource};

/// A retriever's index of the current skill library, as `status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexState {
    /// Turns are answered from it.
    Ready,
    /// Being built; meanwhile turns go to the next retriever.
    Indexing,
    /// The last attempt failed; a later turn tries again.
    Failed,
    /// Not started for this library yet (it starts with the next turn or
    /// change).
    NotStarted,
}

impl std::fmt::Display for IndexState {
    /// In words: `ready`, `indexing`, `failed`, `not started`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Ready => "ready",
            Self::Indexing => "indexing",
            Self::Failed => "failed",
            Self::NotStarted => "not started",
        })
    }
}

impl LoadedPlugin {
    /// The newest library generation one of its instances has indexed: a
    /// retriever answers turns once it has one.
    pub fn indexed_generation(&self) -> Option<u64> {
        match self.indexed.load(Ordering::Acquire) {
            u64::MAX => None,
            generation => Some(generation),
        }
    }

    /// Where this retriever's index of library `generation` stands (for
    /// `status`: tests and tools wait for the retriever they need).
    pub fn index_state(&self, generation: u64) -> IndexState {
        if self.indexed_generation().is_some_and(|g| g >= generation) {
            IndexState::Ready
        } else if self.index_failed.load(Ordering::Acquire) == generation {
            IndexState::Failed
        } else if self.warming.load(Ordering::Acquire) == generation {
            IndexState::Indexing
        } else {
            IndexState::NotStarted
        }
    }

    /// Retrieves the `k` best skills, from an instance that has indexed the
    /// library. None has yet (at start, after a change): `Indexing`, and
    /// the index is built in the background — a turn never waits for one.
    /// `outcomes` is what the plugin's `outcomes()` answers from, if it is
    /// granted them.
    pub async fn retrieve(
        self: &Arc<Self>,
        skills: &Arc<Vec<types::Skill>>,
        generation: u64,
        context: &types::TurnContext,
        k: u32,
        outcomes: Option<Arc<dyn OutcomeSource>>,
    ) -> Result<Vec<types::ScoredSkill>, CallError> {
        let mut embed_failed = None;
        let ranked = self
            .call(
                self.limits.timeout,
                Want::Indexed(generation),
                EmbedPurpose::Query,
                async |Instance {
                           store,
                           bindings,
                           indexed,
                           ..
                       }| {
                    let Bindings::Retriever(b) = bindings else {
                        return Err(CallError::WrongKind(self.info.kind.as_str()));
                    };
                    let stale = *indexed != Some(generation);
                    store.data_mut().outcomes = outcomes;
                    let ranked = b
                        .metaclaw_plugin_retriever_api()
                        .call_retrieve(&mut *store, context, k)
                        .await;
                    embed_failed = store.data_mut().embed_error.take();
                    Ok(ranked.map(|r| (r, stale)))
                },
            )
            .await;
        let (mut ranked, stale) = match ranked {
            Err(CallError::Indexing) => {
                self.refresh(skills, generation);
                return Err(CallError::Indexing);
            }
            other => other?,
        };
        if stale {
            self.refresh(skills, generation);
            if self.index_failed.load(Ordering::Acquire) == generation {
                return Err(CallError::Indexing);
            }
        }
        // A ranking made without the query's embedding is no ranking: let
        // the next retriever answer.
        if let Some(error) = embed_failed {
            return Err(CallError::Embed(error));
        }
        ranked.truncate(k as usize);
        Ok(ranked)
    }

    /// No indexed instance was left (never made, or dropped after a
    /// failure), or the one a turn got was of an older library: index,
    /// unless an index is under way.
    fn refresh(self: &Arc<Self>, skills: &Arc<Vec<types::Skill>>, generation: u64) {
        if self.indexing.try_lock().is_ok() {
            self.warming.store(u64::MAX, Ordering::Release);
        }
        self.warm_in_background(skills, generation);
    }

    /// Starts indexing `generation` unless that was already started (one
    /// background index at a time). One that fails lets a later turn try
    /// again: a plugin that keeps failing is disabled by then, and a
    /// failing embedding backend backs off by itself.
    fn warm_in_background(self: &Arc<Self>, skills: &Arc<Vec<types::Skill>>, generation: u64) {
        if self.warming.swap(generation, Ordering::AcqRel) == generation {
            return;
        }
        let (this, skills) = (self.clone(), skills.clone());
        self.engine.detach(async move {
            if let Err(e) = this.warm(&skills, generation).await {
                tracing::warn!(retriever = this.label(), "cannot index the skills: {e}");
                let _ = this.warming.compare_exchange(
                    generation,
                    u64::MAX,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        });
    }

    /// Indexes `skills` on up to `pool_size` instances (reusing pooled ones,
    /// creating the rest), so that turns find ready indexes. One index at a
    /// time; each `index()` has `limits.index_timeout` of its own time.
    pub async fn warm(&self, skills: &[types::Skill], generation: u64) -> Result<(), CallError> {
        let outcome = self.index_instances(skills, generation).await;
        if outcome.is_ok() {
            let _ = self.index_failed.compare_exchange(
                generation,
                u64::MAX,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        } else {
            // Indexes may end in any order: the newest failure counts.
            let _ = self
                .index_failed
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                    (now == u64::MAX || now < generation).then_some(generation)
                });
        }
        outcome
    }

    async fn index_instances(
        &self,
        skills: &[types::Skill],
        generation: u64,
    ) -> Result<(), CallError> {
        let _one_at_a_time = self.indexing.lock().await;
        // Background indexes may run in any order: an older library's
        // index is not wanted once a newer one is ready.
        if self.indexed_generation().is_some_and(|g| g > generation) {
            return Ok(());
        }
        for _ in 0..self.limits.pool_size.max(1) {
            // Enough indexed instances, counting those busy in calls (each
            // index of a large library is seconds of work).
            let ready = self.pool.lock().map_or(0, |p| {
                p.iter().filter(|i| i.indexed == Some(generation)).count()
            });
            let busy = self
                .limits
                .pool_size
                .saturating_sub(self.permits.available_permits());
            if ready + busy >= self.limits.pool_size {
                break;
            }
            let done = self
                .call(
                    self.limits.index_timeout,
                    Want::Unindexed(generation),
                    EmbedPurpose::Index,
                    async |Instance {
                               store,
                               bindings,
                               indexed,
                               ..
                           }| {
                        let Bindings::Retriever(b) = bindings else {
                            return Err(CallError::WrongKind(self.info.kind.as_str()));
                        };
                        let outcome = b
                            .metaclaw_plugin_retriever_api()
                            .call_index(&mut *store, skills, generation)
                            .await;
                        let state = store.data_mut();
                        match outcome {
                            Ok(Ok(())) => {
                                *indexed = Some(generation);
                                Ok(Ok(()))
                            }
                            // The host's embedding backend failed, not the
                            // plugin.
                            Ok(Err(_)) if state.embed_error.is_some() => Err(CallError::Embed(
                                state.embed_error.take().unwrap_or_default(),
                            )),
                            Ok(Err(message)) => Err(CallError::Trap(format!(
                                "index() refused: {}",
                                crate::untrusted::log_line(&message, 500)
                            ))),
                            Err(trap) => Ok(Err(trap)),
                        }
                    },
                )
                .await;
            match done {
                // Said only now, with the instance back in the pool: a turn
                // that reads "indexed" (the demo, `status`) and asks at once
                // finds it there (said from inside the call, a turn could
                // come between and find no indexed instance).
                Ok(()) => {
                    let _ = self
                        .indexed
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                            (now == u64::MAX || now < generation).then_some(generation)
                        });
                }
                // The memory budget has room for fewer instances.
                Err(CallError::Busy(_)) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
