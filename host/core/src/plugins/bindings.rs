//! Host bindings, one `bindgen!` per world. The first generates the shared
//! interfaces (types and the host capabilities); the others reuse them, so a
//! `FinishedTurn` is one Rust type whichever world it crosses.
//!
//! The retriever world alone imports `outcomes` (since 0.1.1): its
//! bindings generate that interface.
//!
//! Exports are called asynchronously (wasmtime's fibers): a guest that waits
//! — on `embed`, or on a WASI clock or poll — suspends instead of blocking a
//! host thread, so a deadline can always end it. Only `embed` is an async
//! host function; the other imports answer at once.

pub mod scorer {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "scorer",
        // Host functions may trap (an ungranted capability ends the call).
        imports: {
            "metaclaw:plugin/embed.embed": async | trappable,
            default: trappable,
        },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
    });
}

/// A world whose shared interfaces come from the `scorer` bindings.
macro_rules! world {
    ($module:ident, $world:literal) => {
        pub mod $module {
            wasmtime::component::bindgen!({
                path: "../../wit",
                world: $world,
                imports: { default: trappable },
                exports: { default: async },
                additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
                with: {
                    "metaclaw:plugin/types": super::scorer::metaclaw::plugin::types,
                    "metaclaw:plugin/log": super::scorer::metaclaw::plugin::log,
                    "metaclaw:plugin/embed": super::scorer::metaclaw::plugin::embed,
                    "metaclaw:plugin/clock": super::scorer::metaclaw::plugin::clock,
                    "metaclaw:plugin/kv": super::scorer::metaclaw::plugin::kv,
                },
            });
        }
    };
}

world!(retriever, "retriever");
world!(evolver, "evolver");
world!(skill, "skill");

pub use retriever::metaclaw::plugin::outcomes;
pub use scorer::metaclaw::plugin::types;
pub use scorer::metaclaw::plugin::{clock, embed, kv, log};
