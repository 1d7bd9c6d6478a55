//! Components written in WAT, for what no real guest would do: a scorer
//! whose `score()` body is given, built against the WIT package in `wit/`
//! or another text of it (a release that does not exist yet).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use metaclaw_core::plugins::{Grants, Kind, Limits, LoadedPlugin, PluginEngine, Probed, Source};

/// The text of `wit/plugin.wit`.
pub fn current_wit() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/plugin.wit"))
        .unwrap()
}

/// A scorer of the current package: `score_body` runs, then the call
/// returns `none`. `fields` adds module fields (tables, …).
pub fn wat_scorer(name: &str, fields: &str, score_body: &str) -> Vec<u8> {
    wat_scorer_for(&current_wit(), name, "", fields, score_body)
}

/// A scorer built against `wit` (a package text; its version names the
/// exports), importing `imports` (core module imports, which `wit`'s
/// scorer world must have).
pub fn wat_scorer_for(
    wit: &str,
    name: &str,
    imports: &str,
    fields: &str,
    score_body: &str,
) -> Vec<u8> {
    let version = wit
        .lines()
        .find_map(|l| l.trim().strip_prefix("package metaclaw:plugin@"))
        .and_then(|v| v.strip_suffix(';'))
        .expect("a metaclaw:plugin package");
    let le = |n: usize| -> String {
        (n as u32)
            .to_le_bytes()
            .iter()
            .map(|b| format!("\\{b:02x}"))
            .collect()
    };
    let description = "grows what it can";
    // plugin-metadata at 256: name, version, kind (scorer = 1), description,
    // capabilities (empty).
    let record = [
        le(0),
        le(name.len()),
        le(64),
        le(version.len()),
        le(1),
        le(128),
        le(description.len()),
        le(0),
        le(0),
    ]
    .concat();
    let wat = format!(
        r#"(module
          {imports}
          (memory (export "memory") 1)
          {fields}
          (global $bump (mut i32) (i32.const 4096))
          (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
            (local $p i32)
            global.get $bump
            local.get 2 i32.add i32.const 1 i32.sub
            i32.const 0 local.get 2 i32.sub i32.and
            local.tee $p
            local.get 3 i32.add
            global.set $bump
            global.get $bump
            memory.size i32.const 16 i32.shl
            i32.gt_u
            if
              global.get $bump i32.const 16 i32.shr_u i32.const 1 i32.add
              memory.size i32.sub memory.grow drop
            end
            local.get $p)
          (data (i32.const 0) "{name}")
          (data (i32.const 64) "{version}")
          (data (i32.const 128) "{description}")
          (data (i32.const 256) "{record}")
          (func (export "metaclaw:plugin/plugin@{version}#metadata") (result i32) i32.const 256)
          (func (export "metaclaw:plugin/scorer-api@{version}#score") (param i32) (result i32)
            {score_body}
            i32.const 1024))"#
    );
    let mut module = wat::parse_str(&wat).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("plugin.wit", wit).unwrap();
    let world = resolve.select_world(&[package], Some("scorer")).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

/// What loading `bytes` as a drop-in finds, or why it is refused.
pub fn probe_bytes(
    engine: &Arc<PluginEngine>,
    bytes: &[u8],
    limits: Limits,
) -> Result<Probed, metaclaw_core::plugins::LoadRefused> {
    let sha = metaclaw_core::digest::sha256_hex(bytes);
    LoadedPlugin::probe(
        engine,
        PathBuf::from("wat.wasm"),
        bytes,
        sha,
        Source::User,
        &|_: Kind| limits.clone(),
    )
}

/// `bytes` loaded as a drop-in with no grant.
pub fn load_bytes(engine: &Arc<PluginEngine>, bytes: &[u8], limits: Limits) -> Arc<LoadedPlugin> {
    Arc::new(
        probe_bytes(engine, bytes, limits)
            .unwrap()
            .ready(Grants::default(), None),
    )
}
