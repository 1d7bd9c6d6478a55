//! Shared by the renderer's tests: the checked-in tiny Qwen3 and the
//! Python that can render with transformers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use metaclaw_chat::render::{ModelFiles, Renderer};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// tests/fixtures/tiny-qwen3: the tokenizer and template files of the
/// model `tests/tinker/make_tiny_qwen3.py` generates.
pub fn fixture_dir() -> PathBuf {
    root().join("tests/fixtures/tiny-qwen3")
}

pub fn fixture_renderer() -> Renderer {
    Renderer::new(&ModelFiles::from_dir(&fixture_dir()).unwrap()).unwrap()
}

/// SmolLM2-135M-Instruct's folder, converted by `scripts/fetch-smollm2`,
/// from `METACLAW_TEST_SMOLLM2_DIR` (which `scripts/test` exports). `None`,
/// saying so, where the variable is unset; a test given the variable uses
/// the folder and fails on a bad one.
pub fn smollm2_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("METACLAW_TEST_SMOLLM2_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            eprintln!(
                "SKIPPED {test}: METACLAW_TEST_SMOLLM2_DIR is not set (run scripts/fetch-smollm2 \
                 and set it to the folder it prints; scripts/test does both)"
            );
            None
        }
    }
}

/// The Python of skyrl's venv (`scripts/skyrl-cpu install`: transformers,
/// tokenizers, numpy, safetensors), where `scripts/skyrl-cpu` puts it:
/// `$METACLAW_SKYRL_HOME/venv` (default `~/.cache/metaclaw/skyrl-0.3.0`).
/// `None`, saying so, where it is not installed.
pub fn venv_python(test: &str) -> Option<PathBuf> {
    let home = std::env::var_os("METACLAW_SKYRL_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/metaclaw/skyrl-0.3.0"))
        })?;
    let python = home.join("venv/bin/python");
    if python.is_file() {
        Some(python)
    } else {
        eprintln!(
            "SKIPPED {test}: no {} (run scripts/skyrl-cpu install for a Python with transformers)",
            python.display()
        );
        None
    }
}
