//! Replays the fuzz seed corpora (`fuzz/corpus/<target>/`) and every input
//! a fuzzer ever crashed on (`fuzz/regressions/<target>/`) through the same
//! `metaclaw_fuzz_bodies` functions the cargo-fuzz targets call, so found
//! bugs stay fixed in `cargo test` (run the fuzzers with `scripts/fuzz`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use metaclaw_fuzz_bodies::TARGETS;

/// `fuzz/`: this crate is `fuzz/bodies`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files of `dir`, sorted (a missing folder has none).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != ".gitkeep"))
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn replay(kind: &str, name: &str) -> usize {
    let target = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap();
    let mut failed = Vec::new();
    let inputs = files(&root().join(kind).join(name));
    for path in &inputs {
        let data = std::fs::read(path).unwrap();
        if std::panic::catch_unwind(|| target(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{name}: failing inputs: {failed:#?}");
    inputs.len()
}

#[test]
fn every_target_has_a_seed_corpus_and_a_regressions_folder() {
    for (name, _) in TARGETS {
        assert!(
            !files(&root().join("corpus").join(name)).is_empty(),
            "fuzz/corpus/{name} has no seeds"
        );
        assert!(
            root().join("regressions").join(name).is_dir(),
            "fuzz/regressions/{name} is missing"
        );
        assert!(
            root()
                .join("fuzz_targets")
                .join(format!("{name}.rs"))
                .is_file(),
            "fuzz/fuzz_targets/{name}.rs is missing"
        );
    }
}

#[test]
fn seed_corpora_pass() {
    for (name, _) in TARGETS {
        assert!(replay("corpus", name) > 0);
    }
}

#[test]
fn found_crashes_stay_fixed() {
    for (name, _) in TARGETS {
        replay("regressions", name);
    }
}
