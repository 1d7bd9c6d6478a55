//! `hostile`: plugins that misbehave on request, for the sandbox suite —
//! one for each world (a cargo feature picks it). What they receive picks
//! the attack (a scorer: the turn's session id; a retriever or a skill:
//! the query; an evolver: a draft's body), and the outcome comes back where
//! the tests can read it (a scorer's reward rationale, a skill's render).
//!
//! Built with other names and behaviours through compile-time variables:
//! `HOSTILE_NAME` and `HOSTILE_VERSION` (what it claims to be: `guard` at
//! `9.9.9`, say), `HOSTILE_METADATA=sleep` (its `metadata()` never returns).

#[cfg(feature = "evolver")]
mod evolver;
#[cfg(feature = "retriever")]
mod retriever;
#[cfg(feature = "scorer")]
mod scorer;
#[cfg(feature = "skill")]
mod skill;

/// The name it claims.
pub const NAME: &str = match option_env!("HOSTILE_NAME") {
    Some(name) => name,
    None => default_name(),
};

/// The version it claims.
pub const VERSION: &str = match option_env!("HOSTILE_VERSION") {
    Some(version) => version,
    None => env!("CARGO_PKG_VERSION"),
};

const fn default_name() -> &'static str {
    if cfg!(feature = "retriever") {
        "hostile-retriever"
    } else if cfg!(feature = "skill") {
        "hostile-skill"
    } else if cfg!(feature = "evolver") {
        "hostile-evolver"
    } else {
        "hostile"
    }
}

/// Called by every `metadata()`: with `HOSTILE_METADATA=sleep` it never
/// returns (a WASI sleep, which no epoch deadline can interrupt).
pub fn before_metadata() {
    if option_env!("HOSTILE_METADATA") == Some("sleep") {
        sleep_long();
    }
}

/// A blocking WASI sleep (`monotonic-clock.subscribe-duration` and
/// `poll.block`): the guest is not running, so only a deadline that ends a
/// waiting call can stop it.
pub fn sleep_long() {
    std::thread::sleep(std::time::Duration::from_secs(600));
}
