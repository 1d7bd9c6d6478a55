//! Canaries: a new skill or new weights serve a random share of sessions
//! beside a control share until a sequential test says they help
//! (promote), hurt (roll back) or time runs out.

pub mod decide;
