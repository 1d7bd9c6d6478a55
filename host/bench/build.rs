//! Embeds what `metaclaw bench` needs into the bench library:
//! - MetaClaw-Bench's data (`host/bench/data/`), so a run works from an
//!   installed binary;
//! - the git commit it was built from (`METACLAW_GIT_COMMIT`), which a
//!   bench run records beside the version.

use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    // host/bench: the checkout is two folders up.
    let root = manifest_dir.join("../..");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo:rustc-env=METACLAW_GIT_COMMIT={}", git_commit(&root));
    std::fs::write(
        out.join("bench_data.rs"),
        bench_data(&manifest_dir.join("data"))?,
    )?;
    Ok(())
}

/// The commit the checkout is at (`git rev-parse HEAD`), or what
/// `METACLAW_GIT_COMMIT` says (a packager building from a tarball), else
/// `unknown` (no git, or not a checkout of metaclaw). Rebuilt when HEAD moves: the files
/// `HEAD` and the branch it names are watched where git keeps them (a
/// worktree's HEAD is not under `.git/`).
fn git_commit(root: &Path) -> String {
    println!("cargo:rerun-if-env-changed=METACLAW_GIT_COMMIT");
    if let Ok(commit) = std::env::var("METACLAW_GIT_COMMIT") {
        let commit = commit.trim();
        if !commit.is_empty() {
            return commit.to_string();
        }
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    // Only this checkout's own commit: a source tree unpacked inside some
    // other repository is not that repository's commit.
    let own = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .is_some_and(|top| root.canonicalize().is_ok_and(|root| root == top));
    let commit = git(&["rev-parse", "--verify", "--quiet", "HEAD"]).filter(|_| own);
    let Some(commit) = commit else {
        return "unknown".into();
    };
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "--quiet", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]) {
            // A file that does not exist would make cargo rerun every build.
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    commit
}
/// MetaClaw-Bench's two sets (`host/bench/data/`), so `metaclaw bench run`
/// works from an installed binary: (path under bench-data, bytes).
fn bench_data(root: &Path) -> Result<String, Box<dyn Error>> {
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    for set in ["metaclaw-bench", "metaclaw-bench-small"] {
        walk_all(&root.join(set), Path::new(set), &mut files)?;
    }
    files.sort();
    let mut code = String::from(
        "/// MetaClaw-Bench's files: (path under host/bench/data, bytes).\npub static FILES: &[(&str, &[u8])] = &[\n",
    );
    for rel in &files {
        let file = root.join(rel).canonicalize()?;
        writeln!(
            code,
            "    ({rel:?}, include_bytes!({:?})),",
            file.display().to_string()
        )?;
    }
    code.push_str("];\n");
    Ok(code)
}
/// Every file under `root/rel`, as paths relative to `root` with `/`.
fn walk_all(abs: &Path, rel: &Path, out: &mut Vec<String>) -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={}", abs.display());
    for entry in std::fs::read_dir(abs)? {
        let entry = entry?;
        let path = rel.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk_all(&abs.join(entry.file_name()), &path, out)?;
        } else if kind.is_file() {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    Ok(())
}
