//! The host's layers, checked: a top-level module of `host/core/src` imports
//! only modules of its own layer or below, and no two modules import each
//! other, directly or around a loop. docs/architecture.md draws the same
//! layers; a new import that breaks them fails here, naming the file.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import its own layer (without a cycle) and
/// the layers under it.
const LAYERS: &[&[&str]] = &[
    // Leaf helpers.
    &[
        "agent_id",
        "clock",
        "digest",
        "error",
        "home",
        "http",
        "logging",
        "metrics",
        "redact",
        "term",
        "untrusted",
        "work",
    ],
    &["config"],
    &["store", "plugins", "tinker"],
    &[
        "sessions",
        "embeddings",
        "policy",
        "scheduler",
        "canary",
        "team",
    ],
    &["skills"],
    // The turn and learning.
    &["proxy", "learn"],
    // The composition root.
    &["app"],
    // The dashboard's pages (the server mounts them).
    &["ui"],
    &["server", "claws"],
    &["daemon", "admin"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules each one imports (`crate::x`, `crate::{x, …}`),
/// with a file that does, in code outside `#[cfg(test)]`.
fn imports(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let path_re = regex::Regex::new(r"crate::(\w+)").unwrap();
    let group_re = regex::Regex::new(r"crate::\{([^}]*)\}").unwrap();
    let word_re = regex::Regex::new(r"\b(\w+)").unwrap();
    let mut edges = BTreeMap::new();
    for module in modules {
        let mut files = Vec::new();
        let file = src().join(format!("{module}.rs"));
        if file.is_file() {
            files.push(file);
        }
        let dir = src().join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let mut to: BTreeMap<String, PathBuf> = BTreeMap::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let mut named: Vec<String> = path_re
                .captures_iter(&code)
                .map(|c| c[1].to_string())
                .collect();
            for group in group_re.captures_iter(&code) {
                named.extend(word_re.captures_iter(&group[1]).map(|c| c[1].to_string()));
            }
            for name in named {
                if modules.contains(&name) && &name != module {
                    to.entry(name).or_insert_with(|| file.clone());
                }
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

fn top_level_modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let name = path.file_stem()?.to_str()?.to_string();
            let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
            (module && name != "lib" && name != "main").then_some(name)
        })
        .collect()
}

#[test]
fn every_module_has_a_layer_and_imports_only_its_layer_and_below() {
    let modules = top_level_modules();
    let layer = |m: &str| LAYERS.iter().position(|l| l.contains(&m));
    let unplaced: Vec<_> = modules.iter().filter(|m| layer(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules with no layer: {unplaced:?}; add each to LAYERS in host/tests/layers.rs (and docs/architecture.md)"
    );
    let mut upward = Vec::new();
    for (from, to) in imports(&modules) {
        for (target, file) in to {
            if layer(&target) > layer(&from) {
                upward.push(format!(
                    "{from} (layer {}) imports {target} (layer {}) in {}",
                    layer(&from).unwrap_or(0),
                    layer(&target).unwrap_or(0),
                    file.display()
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that go up a layer (move the shared piece down, or pass it in from above):\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_two_modules_import_each_other() {
    let modules = top_level_modules();
    let edges = imports(&modules);
    // A module is in a cycle when it can reach itself.
    let mut cycles = Vec::new();
    for start in &modules {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = edges[start].keys().collect();
        while let Some(m) = stack.pop() {
            if m == start {
                cycles.push(start.clone());
                break;
            }
            if seen.insert(m.clone()) {
                stack.extend(edges[m].keys());
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "modules in an import cycle: {cycles:?} (edges: {:?})",
        cycles
            .iter()
            .map(|m| (m, edges[m].keys().collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    );
}
