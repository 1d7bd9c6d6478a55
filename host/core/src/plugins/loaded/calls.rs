//! The calls of each kind (metadata, score, process, applies, render):
//! one export on any pooled instance, and bounds on what the host keeps of
//! the guest's answer.

use wasmtime::Store;

use super::LoadedPlugin;
use super::pool::{Bindings, CallError, Instance, Want};
use crate::plugins::bindings::types;
use crate::plugins::sandbox::{EmbedPurpose, PluginState};

impl LoadedPlugin {
    /// One export called on any instance under the call's deadline: `f`
    /// picks it from the bindings (`None`: this plugin is of another kind).
    async fn call_export<R>(
        &self,
        f: impl AsyncFnOnce(&mut Store<PluginState>, &Bindings) -> Option<wasmtime::Result<R>>,
    ) -> Result<R, CallError> {
        self.call(
            self.limits.timeout,
            Want::Any,
            EmbedPurpose::Query,
            async |Instance {
                       store, bindings, ..
                   }| {
                f(store, bindings)
                    .await
                    .ok_or(CallError::WrongKind(self.info.kind.as_str()))
            },
        )
        .await
    }

    pub async fn metadata(&self) -> Result<types::PluginMetadata, CallError> {
        self.call_export(async |store: &mut Store<PluginState>, b: &Bindings| {
            Some(match b {
                Bindings::Retriever(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
                Bindings::Scorer(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
                Bindings::Evolver(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
                Bindings::Skill(b) => b.metaclaw_plugin_plugin().call_metadata(store).await,
            })
        })
        .await
    }

    pub async fn score(
        &self,
        turn: &types::FinishedTurn,
    ) -> Result<Option<types::Reward>, CallError> {
        let reward = self
            .call_export(
                async |store: &mut Store<PluginState>, b: &Bindings| match b {
                    Bindings::Scorer(b) => {
                        Some(b.metaclaw_plugin_scorer_api().call_score(store, turn).await)
                    }
                    _ => None,
                },
            )
            .await?;
        // Whatever the guest returns, what the host keeps is bounded.
        Ok(reward.map(|r| types::Reward {
            value: if r.value.is_finite() {
                r.value.clamp(-1.0, 1.0)
            } else {
                0.0
            },
            label: clip(&crate::untrusted::prompt_text(&r.label), 64),
            rationale: clip(&crate::untrusted::prompt_text(&r.rationale), 1000),
        }))
    }

    pub async fn process(
        &self,
        drafts: &[types::SkillDraft],
        library: &[types::Skill],
    ) -> Result<Vec<types::DraftOutcome>, CallError> {
        self.call_export(
            async |store: &mut Store<PluginState>, b: &Bindings| match b {
                Bindings::Evolver(b) => Some(
                    b.metaclaw_plugin_evolver_api()
                        .call_process(store, drafts, library)
                        .await,
                ),
                _ => None,
            },
        )
        .await
    }

    pub async fn applies(&self, context: &types::TurnContext) -> Result<f32, CallError> {
        let score = self
            .call_export(
                async |store: &mut Store<PluginState>, b: &Bindings| match b {
                    Bindings::Skill(b) => Some(
                        b.metaclaw_plugin_skill_api()
                            .call_applies(store, context)
                            .await,
                    ),
                    _ => None,
                },
            )
            .await?;
        Ok(if score.is_finite() {
            score.clamp(0.0, 1.0)
        } else {
            0.0
        })
    }

    pub async fn render(&self, context: &types::TurnContext) -> Result<String, CallError> {
        let text = self
            .call_export(
                async |store: &mut Store<PluginState>, b: &Bindings| match b {
                    Bindings::Skill(b) => Some(
                        b.metaclaw_plugin_skill_api()
                            .call_render(store, context)
                            .await,
                    ),
                    _ => None,
                },
            )
            .await?;
        Ok(clip(&crate::untrusted::prompt_text(&text), 16 << 10))
    }
}

fn clip(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(max_chars).collect();
        cut.push('…');
        cut
    }
}
