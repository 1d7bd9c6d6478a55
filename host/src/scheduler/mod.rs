//! The opportunistic scheduler (W2-G): training runs only in windows when
//! the user is away. It reads time and each signal through an interface,
//! so tests drive it with a fake clock and fake signals.
//!
//! | module | job |
//! |---|---|
//! | `calendar` | busy intervals from an iCalendar file, recurrences expanded in their zones |
//! | `clock` | what time it is (the system's, or a test's) |
//! | `rule` | whether a window is open now, why, and until when |
//! | `sleep` | the sleep window: local times in the user's zone, across midnight and DST changes |

pub mod calendar;
pub mod clock;
pub mod rule;
pub mod sleep;
