//! The scheduler's states and their transitions, each with its reason:
//!
//! | from | on | to |
//! |---|---|---|
//! | closed | the rule opens a window | open |
//! | open | a step starts | training |
//! | training | the step ends | open |
//! | training | the window closes | closing (the step finishes; nothing waits) |
//! | closing | the window opens again | training |
//! | closing | the step ends | closed |
//! | open | the window closes | closed |
//!
//! A step starts only in `open`. Unlike the original, closing never holds
//! anything back from serving: the running step just finishes, and the
//! trainer asks again before the next one.

use chrono::{DateTime, Utc};

use super::rule::Decision;
use crate::store::scheduler::Transition;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed,
    Open,
    Training,
    Closing,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::Training => "training",
            Self::Closing => "closing",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Closed, Self::Open, Self::Training, Self::Closing]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

#[derive(Debug, Clone)]
pub struct Machine {
    state: State,
    /// Steps ended in the current window.
    window_steps: i64,
}

impl Machine {
    /// As the last process left it. A window does not outlive the process
    /// that had it: one left open (or a step left running) is closed now,
    /// and the transition says so.
    pub fn restore(last: Option<&Transition>, now: DateTime<Utc>) -> (Self, Option<Transition>) {
        let machine = Self {
            state: State::Closed,
            window_steps: 0,
        };
        let left = last.and_then(|t| State::parse(&t.to));
        match left {
            None | Some(State::Closed) => (machine, None),
            Some(state) => {
                let t = transition(
                    now,
                    state,
                    State::Closed,
                    "metaclaw stopped during the window".into(),
                    Some(0),
                );
                (machine, Some(t))
            }
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Whether a step may start now.
    pub fn may_step(&self) -> bool {
        self.state == State::Open
    }

    /// The rule's latest decision.
    pub fn observe(&mut self, decision: &Decision, now: DateTime<Utc>) -> Option<Transition> {
        let (to, reason) = match (self.state, decision.open) {
            (State::Closed, true) => (State::Open, format!("window opens: {}", decision.reason)),
            (State::Open, false) => (State::Closed, format!("window closes: {}", decision.reason)),
            (State::Training, false) => (
                State::Closing,
                format!(
                    "window closes during a step ({}): the step finishes, no new one starts",
                    decision.reason
                ),
            ),
            (State::Closing, true) => (
                State::Training,
                format!("window opens again during the step: {}", decision.reason),
            ),
            _ => return None,
        };
        Some(self.go(to, reason, now))
    }

    /// A step starts (only from `open`).
    pub fn step_started(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        (self.state == State::Open).then(|| self.go(State::Training, "a step starts".into(), now))
    }

    /// The step ended (ran, or failed).
    pub fn step_ended(&mut self, outcome: &str, now: DateTime<Utc>) -> Option<Transition> {
        match self.state {
            State::Training => {
                self.window_steps += 1;
                Some(self.go(State::Open, format!("the step ended: {outcome}"), now))
            }
            State::Closing => {
                self.window_steps += 1;
                Some(self.go(
                    State::Closed,
                    format!("the step ended ({outcome}); the window had closed"),
                    now,
                ))
            }
            State::Open | State::Closed => None,
        }
    }

    fn go(&mut self, to: State, reason: String, now: DateTime<Utc>) -> Transition {
        let steps = (to == State::Closed).then_some(self.window_steps);
        let t = transition(now, self.state, to, reason, steps);
        if to == State::Closed {
            self.window_steps = 0;
        }
        self.state = to;
        t
    }
}

fn transition(
    now: DateTime<Utc>,
    from: State,
    to: State,
    reason: String,
    window_steps: Option<i64>,
) -> Transition {
    Transition {
        at_ms: now.timestamp_millis(),
        from: from.as_str().into(),
        to: to.as_str().into(),
        reason,
        window_steps,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn decision(open: bool) -> Decision {
        Decision {
            open,
            reason: if open {
                "sleep window"
            } else {
                "a calendar event"
            }
            .into(),
            until: None,
        }
    }

    #[test]
    fn a_window_that_closes_mid_step_lets_the_step_finish_and_starts_no_new_one() {
        let now = Utc::now();
        let mut m = Machine::restore(None, now).0;
        assert!(!m.may_step(), "closed until a window opens");
        assert_eq!(m.observe(&decision(true), now).unwrap().to, "open");
        assert!(m.may_step());
        m.step_started(now).unwrap();
        assert!(!m.may_step(), "one step at a time");
        let closing = m.observe(&decision(false), now).unwrap();
        assert_eq!(
            (closing.from.as_str(), closing.to.as_str()),
            ("training", "closing")
        );
        assert!(
            closing.reason.contains("the step finishes"),
            "{}",
            closing.reason
        );
        // The step is not stopped: it ends when it ends, and the window is
        // then closed, with the steps run in it.
        let closed = m.step_ended("step 3", now).unwrap();
        assert_eq!(closed.to, "closed");
        assert_eq!(closed.window_steps, Some(1));
        assert!(!m.may_step());
        assert!(m.step_started(now).is_none(), "no step starts while closed");
        // Unchanged decisions are not transitions.
        assert!(m.observe(&decision(false), now).is_none());
    }

    #[test]
    fn a_window_counts_its_steps_and_a_restart_closes_the_window_it_left() {
        let now = Utc::now();
        let mut m = Machine::restore(None, now).0;
        m.observe(&decision(true), now);
        for _ in 0..2 {
            m.step_started(now).unwrap();
            assert_eq!(m.step_ended("stepped", now).unwrap().to, "open");
        }
        let closed = m.observe(&decision(false), now).unwrap();
        assert_eq!(closed.window_steps, Some(2));

        m.observe(&decision(true), now);
        let left = m.step_started(now).unwrap();
        let (restored, t) = Machine::restore(Some(&left), now);
        assert_eq!(restored.state(), State::Closed);
        let t = t.unwrap();
        assert_eq!((t.from.as_str(), t.to.as_str()), ("training", "closed"));
        assert!(t.reason.contains("stopped"), "{}", t.reason);
    }
}
