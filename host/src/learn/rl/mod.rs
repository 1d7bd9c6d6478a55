//! Reinforcement learning from the student's own turns (W2-F): the
//! training queue's samples (`store::train_queue`) become advantages
//! ([`advantage`]), datums ([`batch`]) and train steps whose weights are
//! served next ([`trainer`]).

pub mod advantage;
pub mod batch;
pub mod trainer;

use crate::tinker::types::LossFn;

/// `rl.loss_fn`: the policy-gradient losses (`cross_entropy` is for
/// supervised data, not samples with advantages).
pub fn loss_fn(name: &str) -> Option<LossFn> {
    match name.trim() {
        "importance_sampling" => Some(LossFn::ImportanceSampling),
        "ppo" => Some(LossFn::Ppo),
        "cispo" => Some(LossFn::Cispo),
        _ => None,
    }
}
