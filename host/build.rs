//! Embeds the built-in skill bank (`skills/*/SKILL.md`) into the binary, so
//! `metaclaw skills install-builtin` works wherever metaclaw is installed.

use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../skills");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut skills: Vec<(String, PathBuf)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&root) {
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
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("builtin_skills.rs");
    std::fs::write(out, code)?;
    Ok(())
}
