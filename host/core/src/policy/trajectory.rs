//! Which turns of a session form one trajectory. Turn k extends turn k-1
//! when its prompt tokens start with turn k-1's prompt and sampled tokens
//! (the sequence-extension property): the trainer can then treat the
//! session as one sequence whose sampled spans are the student's. A chat
//! template that rewrites history (drops earlier reasoning, say) breaks it,
//! and the turn starts a trajectory of its own. A resend of a turn (the
//! same prompt again) extends what the first attempt extended.
//!
//! Only the last two turns of a session are kept, for the most recently
//! used sessions: after a restart a session's next turn starts a new
//! trajectory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Sessions remembered at once.
const SESSIONS: usize = 256;

#[derive(Clone)]
struct Tail {
    turn: String,
    trajectory: String,
    extends: Option<String>,
    prompt_len: usize,
    /// Prompt then sampled tokens.
    tokens: Arc<[i32]>,
}

#[derive(Default)]
struct Session {
    last: Option<Tail>,
    before: Option<Tail>,
    used: u64,
}

#[derive(Default)]
pub(super) struct Tails {
    sessions: Mutex<(HashMap<String, Session>, u64)>,
}

impl Tails {
    /// The trajectory of `turn` (its first turn's id) and the turn it
    /// extends, remembering `turn` as the session's last.
    pub(super) fn link(
        &self,
        session: &str,
        turn: &str,
        prompt: &[i32],
        sampled: &[i32],
    ) -> (String, Option<String>) {
        let Ok(mut guard) = self.sessions.lock() else {
            return (turn.to_string(), None);
        };
        let (sessions, clock) = &mut *guard;
        *clock += 1;
        let now = *clock;
        if sessions.len() >= SESSIONS && !sessions.contains_key(session) {
            let oldest = sessions
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        let entry = sessions.entry(session.to_string()).or_default();
        entry.used = now;
        let extends_tail = |t: &Tail| prompt.starts_with(&t.tokens);
        let resend_of = |t: &Tail| prompt.len() == t.prompt_len && t.tokens.starts_with(prompt);
        let (trajectory, extends, replaces_last) = match (&entry.last, &entry.before) {
            (Some(last), _) if extends_tail(last) => {
                (last.trajectory.clone(), Some(last.turn.clone()), false)
            }
            (Some(last), _) if resend_of(last) => {
                (last.trajectory.clone(), last.extends.clone(), true)
            }
            (_, Some(before)) if extends_tail(before) => {
                (before.trajectory.clone(), Some(before.turn.clone()), true)
            }
            _ => (turn.to_string(), None, false),
        };
        let tail = Tail {
            turn: turn.to_string(),
            trajectory: trajectory.clone(),
            extends: extends.clone(),
            prompt_len: prompt.len(),
            tokens: prompt.iter().chain(sampled).copied().collect(),
        };
        if !replaces_last {
            entry.before = entry.last.take();
        }
        entry.last = Some(tail);
        (trajectory, extends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_that_extend_the_last_one_form_one_trajectory() {
        let tails = Tails::default();
        assert_eq!(tails.link("s", "t1", &[1, 2], &[3, 4]), ("t1".into(), None));
        // Prompt 2 = prompt 1 + sampled 1 + the next user message.
        assert_eq!(
            tails.link("s", "t2", &[1, 2, 3, 4, 5, 6], &[7]),
            ("t1".into(), Some("t1".into()))
        );
        assert_eq!(
            tails.link("s", "t3", &[1, 2, 3, 4, 5, 6, 7, 8], &[9]),
            ("t1".into(), Some("t2".into()))
        );
        // Another session is another trajectory.
        assert_eq!(
            tails.link("other", "u1", &[1, 2, 3, 4], &[5]),
            ("u1".into(), None)
        );
    }

    #[test]
    fn a_template_that_rewrites_history_starts_a_new_trajectory() {
        let tails = Tails::default();
        tails.link("s", "t1", &[1, 2], &[30, 31, 4]);
        // The template dropped the reasoning (30, 31) from the history.
        assert_eq!(
            tails.link("s", "t2", &[1, 2, 4, 5], &[6]),
            ("t2".into(), None)
        );
        assert_eq!(
            tails.link("s", "t3", &[1, 2, 4, 5, 6, 7], &[8]),
            ("t2".into(), Some("t2".into()))
        );
    }

    #[test]
    fn a_resent_turn_takes_the_place_of_its_first_attempt() {
        let tails = Tails::default();
        tails.link("s", "t1", &[1, 2], &[3]);
        tails.link("s", "t2", &[1, 2, 3, 4], &[5]);
        // t2 resent (its answer failed at the client): same prompt.
        assert_eq!(
            tails.link("s", "t2b", &[1, 2, 3, 4], &[6]),
            ("t1".into(), Some("t1".into()))
        );
        // The next turn extends the resend, not the first attempt.
        assert_eq!(
            tails.link("s", "t3", &[1, 2, 3, 4, 6, 7], &[8]),
            ("t1".into(), Some("t2b".into()))
        );
    }
}
