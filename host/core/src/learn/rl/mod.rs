//! Reinforcement learning from the student's own turns (W2-F): the
//! training queue's samples (`store::train_queue`) become advantages
//! ([`advantage`]), datums ([`batch`]) and train steps whose weights are
//! served next ([`trainer`]).

pub mod advantage;
pub mod batch;
pub mod canary;
pub mod error;
pub mod health;
pub mod opd;
pub mod trainer;

/// The training step a checkpoint was saved at, from the unique name a run
/// gives it (`<run>-i<incarnation>-step<NNNNNN>…`).
pub fn checkpoint_step(path: &str) -> Option<i64> {
    let at = path.rfind("-step")? + "-step".len();
    let digits: String = path[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
