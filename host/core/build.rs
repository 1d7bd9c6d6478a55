//! Embeds what every install needs into the core:
//! - the built-in skill bank (`skills/*/SKILL.md`), installed into a new
//!   library by `metaclaw setup` / the first `start`;
//! - the first-party plugins, built here from `plugins/` for wasm32-wasip2
//!   (a nested cargo build into the target dir), so an installed binary
//!   retrieves, scores and guards with no second build step.

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    // host/core: the checkout is two folders up.
    let root = manifest_dir.join("../..");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("builtin_skills.rs"), skills(&root.join("skills"))?)?;
    std::fs::write(out.join("builtin_plugins.rs"), plugins(&root)?)?;
    Ok(())
}

fn skills(root: &Path) -> Result<String, Box<dyn Error>> {
    println!("cargo:rerun-if-changed={}", root.display());
    let mut skills: Vec<(String, PathBuf)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let file = entry.path().join("SKILL.md");
            if file.is_file() {
                let name = entry.file_name().to_string_lossy().into_owned();
                skills.push((name, file.canonicalize()?));
            }
        }
    }
    skills.sort();
    let mut code = String::from(
        "/// The built-in skills: (folder name, SKILL.md text).\npub static BUILTIN: &[(&str, &str)] = &[\n",
    );
    for (name, file) in &skills {
        writeln!(
            code,
            "    ({name:?}, include_str!({:?})),",
            file.display().to_string()
        )?;
    }
    code.push_str("];\n");
    Ok(code)
}

/// The first-party plugins, by package: each is built on its own (one
/// plugin is one world of the SDK, and one cargo invocation would unify
/// their features).
const FIRST_PARTY: &[&str] = &[
    "tool-error",
    "correction",
    "repeated-refusals",
    "bm25",
    "embedding",
    "destructive-command-guard",
    "guard",
    "redact",
    "dedup",
];

/// Builds the first-party plugins from `plugins/` for wasm32-wasip2 and
/// returns the code embedding them.
fn plugins(root: &Path) -> Result<String, Box<dyn Error>> {
    let workspace = root.join("plugins");
    // Rebuilt when a plugin's source or the WIT interfaces change.
    for f in sources(root)? {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    ensure_wasm_target()?;
    // Shared by every profile and feature set of this build (debug, release,
    // clippy): the plugins are always built the same way, so once.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let target_dir = out
        .ancestors()
        .nth(4)
        .map(|t| t.join("first-party-plugins"))
        .unwrap_or_else(|| out.join("first-party-plugins"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root_abs = root.canonicalize()?;
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    // SIMD: the embedding retriever's dot products are four times faster.
    // The checkout and the registry are remapped, so no local path ends up
    // in a component (panic locations).
    let rustflags = format!(
        "-C target-feature=+simd128 --remap-path-prefix={}=/metaclaw --remap-path-prefix={}=/cargo",
        root_abs.display(),
        cargo_home.join("registry/src").display()
    );
    let versions = versions(&cargo, &workspace)?;
    let mut code = String::from(
        "/// The first-party plugins, built from plugins/ by host/core/build.rs.\npub static EMBEDDED: &[EmbeddedPlugin] = &[\n",
    );
    let mut listed = Vec::new();
    for name in FIRST_PARTY {
        let package = format!("metaclaw-{name}");
        let status = Command::new(&cargo)
            .args(["build", "--quiet", "--locked", "--release"])
            .args(["--target", "wasm32-wasip2", "-p", &package])
            .arg("--manifest-path")
            .arg(workspace.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir)
            // This build's own flags are for the host, not for wasm.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env("CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS", &rustflags)
            .status()
            .map_err(|e| format!("cannot run {cargo}: {e}"))?;
        if !status.success() {
            return Err(
                format!("building the first-party plugin {package} failed ({status})").into(),
            );
        }
        let built = target_dir
            .join("wasm32-wasip2/release")
            .join(format!("{}.wasm", package.replace('-', "_")));
        // Copied at once: building a later plugin that depends on this one
        // (embedding uses bm25) rewrites its file as a plain dependency.
        let file = out.join(format!("{name}.wasm"));
        std::fs::copy(&built, &file).map_err(|e| format!("{}: {e}", built.display()))?;
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let sha256 = hex(&Sha256::digest(&bytes));
        let version = versions
            .get(&package)
            .ok_or_else(|| format!("{package}: not in plugins/Cargo.toml"))?;
        listed.push(format!("{name} {version}"));
        writeln!(
            code,
            "    EmbeddedPlugin {{ name: {name:?}, version: {version:?}, sha256: {sha256:?}, bytes: include_bytes!({:?}) }},",
            file.display().to_string()
        )?;
    }
    code.push_str("];\n");
    writeln!(
        code,
        "/// What `metaclaw --version` prints after the name.\npub const LONG_VERSION: &str = {:?};",
        format!(
            "{}\nfirst-party plugins (embedded): {}",
            std::env::var("CARGO_PKG_VERSION")?,
            listed.join(", ")
        )
    )?;
    Ok(code)
}

/// The wasm32-wasip2 standard library: added with rustup if it is missing
/// (the one thing a Rust toolchain may lack to build metaclaw).
fn ensure_wasm_target() -> Result<(), Box<dyn Error>> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output()?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib/wasm32-wasip2").is_dir() {
        return Ok(());
    }
    println!(
        "cargo:warning=adding the wasm32-wasip2 target (rustup target add wasm32-wasip2): metaclaw's first-party plugins are built for it"
    );
    let added = Command::new("rustup")
        .args(["target", "add", "wasm32-wasip2"])
        .status();
    match added {
        Ok(status) if status.success() => Ok(()),
        _ => Err("the first-party plugins are built for wasm32-wasip2, which this Rust toolchain lacks: run `rustup target add wasm32-wasip2` (or install that target's standard library) and build again".into()),
    }
}

/// Each plugin package's version, from `cargo metadata` of the plugins
/// workspace.
fn versions(
    cargo: &str,
    workspace: &Path,
) -> Result<std::collections::HashMap<String, String>, Box<dyn Error>> {
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata of plugins/: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["name"].as_str()?.to_string(),
                p["version"].as_str()?.to_string(),
            ))
        })
        .collect())
}

/// The files the plugins are built from: the plugins workspace (not its
/// build output, not the test-only plugins: the attackers and the learning
/// proof's scorer) and the WIT interfaces.
fn sources(root: &Path) -> Result<Vec<String>, Box<dyn Error>> {
    let mut files = Vec::new();
    for top in ["plugins", "wit"] {
        walk(root, Path::new(top), &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) -> Result<(), Box<dyn Error>> {
    for skip in ["plugins/target", "plugins/hostile", "plugins/capital-start"] {
        if rel == Path::new(skip) {
            return Ok(());
        }
    }
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let path = rel.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() && path.extension().is_none_or(|x| x != "md") {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
