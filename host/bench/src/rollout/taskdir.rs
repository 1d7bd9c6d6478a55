//! A task's throwaway folder: `work/` is the workspace the tools act on
//! (mounted at `/work` in the sandbox), `root/` the empty mount point on
//! which the sandbox builds its own root. Created private (0700) under the
//! rollout's folder in the system's temp dir; removed after the task
//! unless `--keep`.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The workspace, inside a task folder.
pub const WORK: &str = "work";
/// The sandbox root's mount point, inside a task folder.
pub const ROOT: &str = "root";

/// One task's folder.
#[derive(Debug, Clone)]
pub struct TaskDir {
    path: PathBuf,
}

impl TaskDir {
    /// `parent/name/{work,root}`, new (an existing folder is an error, so
    /// two tasks never share one).
    pub fn create(parent: &Path, name: &str) -> Result<Self> {
        let path = parent.join(name);
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(0o700);
        builder
            .create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let dir = Self { path };
        for sub in [WORK, ROOT] {
            builder
                .create(dir.path.join(sub))
                .with_context(|| format!("cannot create {}", dir.path.join(sub).display()))?;
        }
        Ok(dir)
    }

    /// A task folder made by [`TaskDir::create`] (the sandbox helper's view).
    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn work(&self) -> PathBuf {
        self.path.join(WORK)
    }

    pub fn root(&self) -> PathBuf {
        self.path.join(ROOT)
    }

    /// Deletes the folder and everything the task wrote (best effort:
    /// what cannot be removed stays in the temp dir).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The rollout's own folder in the temp dir, private: `metaclaw-rollout-<run id>`.
pub fn run_dir(run_id: &str) -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("metaclaw-rollout-{run_id}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    Ok(path)
}
