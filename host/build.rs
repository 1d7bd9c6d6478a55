//! Embeds what every install needs into the binary:
//! - the built-in skill bank (`skills/*/SKILL.md`), installed into a new
//!   library by `metaclaw setup` / the first `start`;
//! - the first-party plugins (`plugins/builtin/*.wasm`, compiled from
//!   `plugins/` by `scripts/build-plugins` and checked in with a MANIFEST of
//!   their sha256s, which CI proves the sources reproduce), so an installed
//!   binary retrieves, scores and guards with no second build step.

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest_dir.join("..");
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

/// The code listing the embedded components, after checking each file
/// against the MANIFEST (a component edited by hand, or a MANIFEST from
/// another build, stops the build).
fn plugins(root: &Path) -> Result<String, Box<dyn Error>> {
    let dir = root.join("plugins/builtin");
    let manifest_path = dir.join("MANIFEST");
    println!("cargo:rerun-if-changed={}", dir.display());
    println!("cargo:rerun-if-changed={}", manifest_path.display());
    let manifest = std::fs::read_to_string(&manifest_path).map_err(|e| {
        format!(
            "{}: {e}; the first-party plugins are built by scripts/build-plugins",
            manifest_path.display()
        )
    })?;
    let mut rustc = String::new();
    let mut listed = Vec::new();
    let mut recorded_sources = String::new();
    let mut code = String::from(
        "/// The first-party plugins compiled into this binary, from plugins/builtin.\npub static EMBEDDED: &[EmbeddedPlugin] = &[\n",
    );
    for line in manifest.lines() {
        if let Some(r) = line.strip_prefix("# rustc: ") {
            rustc = r.to_string();
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["sources", digest] => recorded_sources = digest.to_string(),
            ["plugin", name, version, sha256] => {
                let file = dir.join(format!("{name}.wasm"));
                let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
                let actual = hex(&Sha256::digest(&bytes));
                if actual != *sha256 {
                    return Err(format!(
                        "{}: sha256 {actual}, but plugins/builtin/MANIFEST says {sha256}; rebuild with scripts/build-plugins",
                        file.display()
                    )
                    .into());
                }
                listed.push(format!("{name} {version}"));
                writeln!(
                    code,
                    "    EmbeddedPlugin {{ name: {name:?}, version: {version:?}, sha256: {sha256:?}, bytes: include_bytes!({:?}) }},",
                    file.canonicalize()?.display().to_string()
                )?;
            }
            _ => {}
        }
    }
    code.push_str("];\n");
    writeln!(
        code,
        "/// The rustc that built them (the same sources and rustc give the same bytes).\npub const EMBEDDED_RUSTC: &str = {rustc:?};"
    )?;
    writeln!(
        code,
        "/// What `metaclaw --version` prints after the name.\npub const LONG_VERSION: &str = {:?};",
        format!(
            "{}\nfirst-party plugins (embedded): {}",
            std::env::var("CARGO_PKG_VERSION")?,
            listed.join(", ")
        )
    )?;
    // A developer who changed a plugin's source and forgot to rebuild is
    // told at every build (CI fails on it: scripts/build-plugins --check).
    let (files, digest) = sources_digest(root)?;
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    if digest != recorded_sources {
        println!(
            "cargo:warning=plugins/builtin is older than the plugin sources (plugins/, wit/): run scripts/build-plugins to rebuild the embedded first-party plugins"
        );
    }
    Ok(code)
}

/// The digest scripts/build-plugins records: sha256 of "<sha256 of file>
/// <path>\n" for each source file, paths sorted bytewise.
fn sources_digest(root: &Path) -> Result<(Vec<String>, String), Box<dyn Error>> {
    let mut files = Vec::new();
    for top in ["plugins", "wit"] {
        walk(root, Path::new(top), &mut files)?;
    }
    files.sort();
    let mut listing = String::new();
    for f in &files {
        let bytes = std::fs::read(root.join(f))?;
        writeln!(listing, "{} {f}", hex(&Sha256::digest(&bytes)))?;
    }
    Ok((files, hex(&Sha256::digest(listing.as_bytes()))))
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) -> Result<(), Box<dyn Error>> {
    for skip in ["plugins/target", "plugins/builtin", "plugins/hostile"] {
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
