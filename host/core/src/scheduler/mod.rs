//! The opportunistic scheduler (W2-G): training runs only in windows when
//! the user is away. It reads time and each signal through an interface,
//! so tests drive it with a fake clock (`crate::clock`) and fake signals.
//!
//! | module | job |
//! |---|---|
//! | `calendar` | busy intervals from an iCalendar file, recurrences expanded in their zones |
//! | `gate` | the scheduler as the trainer meets it: signals read, decided, the machine moved and stored; the status report |
//! | `idle` | how long the machine has been idle, per platform (logind, X11, macOS), or why unknown |
//! | `machine` | the states (closed, open, training, closing) and their transitions, each with its reason |
//! | `rule` | whether a window is open now, why, and until when |
//! | `sleep` | the sleep window: local times in the user's zone, across midnight and DST changes |
//! | `source` | where the .ics text comes from: a file, or an address fetched and cached on disk |

pub mod calendar;
pub mod gate;
pub mod idle;
pub mod machine;
pub mod rule;
pub mod sleep;
pub mod source;
