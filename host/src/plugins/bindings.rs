//! Host bindings, one `bindgen!` per world. The first generates the shared
//! interfaces (types and the host capabilities); the others reuse them, so a
//! `FinishedTurn` is one Rust type whichever world it crosses.

pub mod scorer {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "scorer",
        // Host functions may trap (an ungranted capability ends the call).
        imports: { default: trappable },
        additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
    });
}

pub mod retriever {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "retriever",
        imports: { default: trappable },
        with: {
            "metaclaw:plugin/types": super::scorer::metaclaw::plugin::types,
            "metaclaw:plugin/log": super::scorer::metaclaw::plugin::log,
            "metaclaw:plugin/embed": super::scorer::metaclaw::plugin::embed,
            "metaclaw:plugin/clock": super::scorer::metaclaw::plugin::clock,
            "metaclaw:plugin/kv": super::scorer::metaclaw::plugin::kv,
        },
    });
}

pub mod evolver {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "evolver",
        imports: { default: trappable },
        with: {
            "metaclaw:plugin/types": super::scorer::metaclaw::plugin::types,
            "metaclaw:plugin/log": super::scorer::metaclaw::plugin::log,
            "metaclaw:plugin/embed": super::scorer::metaclaw::plugin::embed,
            "metaclaw:plugin/clock": super::scorer::metaclaw::plugin::clock,
            "metaclaw:plugin/kv": super::scorer::metaclaw::plugin::kv,
        },
    });
}

pub mod skill {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "skill",
        imports: { default: trappable },
        with: {
            "metaclaw:plugin/types": super::scorer::metaclaw::plugin::types,
            "metaclaw:plugin/log": super::scorer::metaclaw::plugin::log,
            "metaclaw:plugin/embed": super::scorer::metaclaw::plugin::embed,
            "metaclaw:plugin/clock": super::scorer::metaclaw::plugin::clock,
            "metaclaw:plugin/kv": super::scorer::metaclaw::plugin::kv,
        },
    });
}

pub use scorer::metaclaw::plugin::types;
pub use scorer::metaclaw::plugin::{clock, embed, kv, log};
