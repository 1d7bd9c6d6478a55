//! The Rust SDK for metaclaw plugins.
//!
//! A plugin is a `cdylib` built for `wasm32-wasip2`. Enable the SDK feature
//! of its kind (`scorer`, `retriever`, `evolver` or `skill`), implement the
//! two `Guest` traits of that module, and export:
//!
//! ```ignore
//! use metaclaw_plugin_sdk::scorer::{Guest, Metadata, FinishedTurn, Reward, PluginGuest};
//!
//! struct MyScorer;
//! impl PluginGuest for MyScorer {
//!     fn metadata() -> Metadata { metaclaw_plugin_sdk::scorer::metadata("my-scorer", env!("CARGO_PKG_VERSION"), "What it scores") }
//! }
//! impl Guest for MyScorer {
//!     fn score(turn: FinishedTurn) -> Option<Reward> { None }
//! }
//! metaclaw_plugin_sdk::scorer::export_scorer!(MyScorer);
//! ```
//!
//! A retriever granted `outcomes` reads how each skill's turns were judged
//! with `metaclaw_plugin_sdk::retriever::outcomes::outcomes(&ids)`. The
//! `wit-0-1-0` feature builds for hosts of `metaclaw:plugin@0.1.0`, which
//! lack it.

/// Bindings for one world, plus the helpers every world shares. `$since`:
/// capabilities of this world added after 0.1.0 (not in a `wit-0-1-0`
/// build).
macro_rules! world {
    ($feature:literal, $module:ident, $world:literal, $export:literal, $bindings:literal, $kind:ident, $api:ident $(, $since:ident)*) => {
        #[cfg(feature = $feature)]
        pub mod $module {
            #[cfg(not(feature = "wit-0-1-0"))]
            wit_bindgen::generate!({
                world: $world,
                path: "../../wit",
                pub_export_macro: true,
                export_macro_name: $export,
                default_bindings_module: $bindings,
            });
            // For hosts of the first release (wit/released/0.1.0.wit).
            #[cfg(feature = "wit-0-1-0")]
            wit_bindgen::generate!({
                world: $world,
                path: "../../wit/released/0.1.0.wit",
                pub_export_macro: true,
                export_macro_name: $export,
                default_bindings_module: $bindings,
            });

            pub use exports::metaclaw::plugin::$api::Guest;
            pub use exports::metaclaw::plugin::plugin::Guest as PluginGuest;
            pub use metaclaw::plugin::types::*;
            pub use metaclaw::plugin::types::PluginMetadata as Metadata;
            /// Host capabilities (each works only when the deployment grants it).
            pub use metaclaw::plugin::{clock, embed, kv};
            $(
                #[cfg(not(feature = "wit-0-1-0"))]
                pub use metaclaw::plugin::$since;
            )*

            /// Metadata for a plugin of this world that asks for no capability.
            pub fn metadata(name: &str, version: &str, description: &str) -> Metadata {
                Metadata {
                    name: name.to_string(),
                    version: version.to_string(),
                    kind: PluginKind::$kind,
                    description: description.to_string(),
                    capabilities: Vec::new(),
                }
            }

            /// Writes to the host's log.
            pub fn log(level: LogLevel, message: &str) {
                metaclaw::plugin::log::log(level, message);
            }
        }
    };
}

// One world per build: the generated export macros are crate-global, so a
// plugin enables the feature of its kind, and only that one.
#[cfg(any(
    all(
        feature = "scorer",
        any(feature = "retriever", feature = "evolver", feature = "skill")
    ),
    all(feature = "retriever", any(feature = "evolver", feature = "skill")),
    all(feature = "evolver", feature = "skill"),
))]
compile_error!(
    "enable exactly one of the features scorer, retriever, evolver, skill (one plugin is one world)"
);

world!(
    "retriever",
    retriever,
    "retriever",
    "export_retriever",
    "metaclaw_plugin_sdk::retriever",
    Retriever,
    retriever_api,
    outcomes
);
world!(
    "scorer",
    scorer,
    "scorer",
    "export_scorer",
    "metaclaw_plugin_sdk::scorer",
    Scorer,
    scorer_api
);
world!(
    "evolver",
    evolver,
    "evolver",
    "export_evolver",
    "metaclaw_plugin_sdk::evolver",
    Evolver,
    evolver_api
);
world!(
    "skill",
    skill,
    "skill",
    "export_skill",
    "metaclaw_plugin_sdk::skill",
    Skill,
    skill_api
);
