//! Reinforcement learning from the student's own turns (W2-F): the
//! training queue's samples (`store::train_queue`) become advantages
//! ([`advantage`]), datums ([`batch`]) and train steps whose weights are
//! served next ([`trainer`]).

pub mod advantage;
pub mod batch;
pub mod trainer;
