//! A cgroup for one sandboxed command, made by metaclaw (the caller) before
//! the helper starts and removed after it is gone: a true total over all
//! the command's processes for memory (`memory.max`, or v1's
//! `memory.limit_in_bytes`) and processes (`pids.max`). The helper joins
//! it before it confines itself. Made only where metaclaw may write the
//! cgroup tree (root, or a delegated cgroup v2 subtree with the memory and
//! pids controllers); elsewhere [`Cgroup::create`] says why and the helper
//! bounds the command with rlimits alone ([`super::limits`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::limits::Limits;

/// How long removing the cgroup waits for the command's last processes
/// (killed with the helper's PID namespace) to be gone.
const REMOVE_WAIT: Duration = Duration::from_secs(2);

/// Which cgroup hierarchy holds the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// One command's cgroup: a folder per hierarchy (v2: one; v1: the memory
/// and the pids hierarchies').
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    memory: PathBuf,
    pids: PathBuf,
}

/// Why no cgroup was made for a run (the run goes without, said so).
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// This process is in no cgroup of that kind (v2, or a v1 controller).
    #[error("this process is in no {0} cgroup")]
    NotIn(String),
    #[error("not mounted")]
    NotMounted,
    #[error("no {0} hierarchy mounted")]
    NoHierarchy(String),
    #[error("no {needed} controller at {}", .at.display())]
    NoController { needed: &'static str, at: PathBuf },
    #[error("cannot enable memory and pids in {}: {error}", .path.display())]
    NotDelegated {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} is outside the mounted {root}")]
    Outside { path: String, root: String },
    #[error("{} is not there", .0.display())]
    Missing(PathBuf),
    #[error("cannot create {}: {error}", .dir.display())]
    Create { dir: PathBuf, error: std::io::Error },
    #[error("cannot write {}: {error}", .path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Neither version could be used: why not, each.
    #[error("cgroup v2: {v2}; cgroup v1: {v1}")]
    Neither {
        v2: Box<CgroupError>,
        v1: Box<CgroupError>,
    },
}

fn read(path: &str) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|error| CgroupError::Read {
        path: path.into(),
        error,
    })
}

impl Cgroup {
    /// A new cgroup named `name` under this process's own, with `limits`
    /// written; `Err` says why there is none.
    pub fn create(name: &str, limits: &Limits) -> Result<Self, CgroupError> {
        let own = read("/proc/self/cgroup")?;
        let mounts = read("/proc/self/mountinfo")?;
        let v2 = match v2(&own, &mounts, name, limits) {
            Ok(cgroup) => return Ok(cgroup),
            Err(e) => e,
        };
        match v1(&own, &mounts, name, limits) {
            Ok(cgroup) => Ok(cgroup),
            Err(v1) => Err(CgroupError::Neither {
                v2: Box::new(v2),
                v1: Box::new(v1),
            }),
        }
    }

    /// The folders the helper joins (`--cgroup`).
    pub fn dirs(&self) -> Vec<&Path> {
        if self.memory == self.pids {
            vec![self.memory.as_path()]
        } else {
            vec![self.memory.as_path(), self.pids.as_path()]
        }
    }

    /// The limits the command ran into, in words: the memory limit (a
    /// process killed by the OOM killer) and the process limit (forks
    /// refused).
    pub fn hits(&self, limits: &Limits) -> Vec<String> {
        let mut hits = Vec::new();
        let (memory_file, oom_key) = match self.version {
            Version::V2 => ("memory.events", "oom_kill"),
            Version::V1 => ("memory.oom_control", "oom_kill"),
        };
        let oom = counter(&self.memory.join(memory_file), oom_key);
        if oom > 0 {
            hits.push(format!(
                "memory limit reached ({} MiB for the whole command): {oom} process(es) killed",
                limits.memory_mb
            ));
        }
        let forks = counter(&self.pids.join("pids.events"), "max");
        if forks > 0 {
            hits.push(format!(
                "process limit reached ({} at once): {forks} fork(s) refused",
                limits.processes
            ));
        }
        hits
    }

    /// The limits the command ran into ([`Self::hits`]), then the
    /// folders removed ([`Self::remove`]).
    pub fn finish(self, limits: &Limits) -> Vec<String> {
        let hits = self.hits(limits);
        self.remove();
        hits
    }

    /// Removes the folders, waiting briefly for the last processes to go.
    pub fn remove(self) {
        let until = Instant::now() + REMOVE_WAIT;
        for dir in self.dirs() {
            loop {
                match std::fs::remove_dir(dir) {
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => {
                        if Instant::now() >= until {
                            eprintln!(
                                "warning: the sandbox's cgroup {} is still busy; left in place",
                                dir.display()
                            );
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    _ => break,
                }
            }
        }
    }
}

/// `key N` in a flat-keyed cgroup file (0 when absent).
fn counter(file: &Path, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
        })
        .unwrap_or(0)
}

/// The unified hierarchy, where it has the memory and pids controllers
/// for a child of this process's cgroup.
fn v2(own: &str, mounts: &str, name: &str, limits: &Limits) -> Result<Cgroup, CgroupError> {
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| CgroupError::NotIn("v2".into()))?;
    let (root, mount) = mount_of(mounts, "cgroup2", None).ok_or(CgroupError::NotMounted)?;
    let parent = under(&mount, &root, path)?;
    let controllers =
        std::fs::read_to_string(parent.join("cgroup.controllers")).map_err(|error| {
            CgroupError::Read {
                path: parent.clone(),
                error,
            }
        })?;
    for needed in ["memory", "pids"] {
        if !controllers.split_whitespace().any(|c| c == needed) {
            return Err(CgroupError::NoController { needed, at: parent });
        }
    }
    // Enabled for children (refused where this cgroup holds processes and
    // is not the root: then there is no v2 cgroup to make).
    let subtree = parent.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
    if !["memory", "pids"]
        .iter()
        .all(|c| enabled.split_whitespace().any(|e| e == *c))
    {
        std::fs::write(&subtree, "+memory +pids").map_err(|error| CgroupError::NotDelegated {
            path: subtree.clone(),
            error,
        })?;
    }
    let dir = make(&parent, name)?;
    let cgroup = Cgroup {
        version: Version::V2,
        memory: dir.clone(),
        pids: dir,
    };
    let written = write(&cgroup.memory, "memory.max", limits.memory_bytes())
        .and_then(|()| write(&cgroup.pids, "pids.max", u64::from(limits.processes)));
    if let Err(e) = written {
        cgroup.remove();
        return Err(e);
    }
    // No swap beyond the limit, where swap is accounted.
    let _ = write(&cgroup.memory, "memory.swap.max", 0);
    Ok(cgroup)
}

/// The v1 memory and pids hierarchies.
fn v1(own: &str, mounts: &str, name: &str, limits: &Limits) -> Result<Cgroup, CgroupError> {
    let dir_of = |controller: &str| -> Result<PathBuf, CgroupError> {
        let path = own
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',').any(|c| c == controller).then_some(path)
            })
            .ok_or_else(|| CgroupError::NotIn(controller.to_string()))?;
        let (root, mount) = mount_of(mounts, "cgroup", Some(controller))
            .ok_or_else(|| CgroupError::NoHierarchy(controller.to_string()))?;
        under(&mount, &root, path)
    };
    let memory_parent = dir_of("memory")?;
    let pids_parent = dir_of("pids")?;
    let memory = make(&memory_parent, name)?;
    let pids = match make(&pids_parent, name) {
        Ok(pids) => pids,
        Err(e) => {
            let _ = std::fs::remove_dir(&memory);
            return Err(e);
        }
    };
    let cgroup = Cgroup {
        version: Version::V1,
        memory,
        pids,
    };
    let written = write(
        &cgroup.memory,
        "memory.limit_in_bytes",
        limits.memory_bytes(),
    )
    .and_then(|()| write(&cgroup.pids, "pids.max", u64::from(limits.processes)));
    if let Err(e) = written {
        cgroup.remove();
        return Err(e);
    }
    // Memory and swap together, where swap is accounted.
    let _ = write(
        &cgroup.memory,
        "memory.memsw.limit_in_bytes",
        limits.memory_bytes(),
    );
    Ok(cgroup)
}

/// The mount of `fstype` (for v1, the one holding `controller`): its root
/// within the hierarchy and its mount point.
fn mount_of(mounts: &str, fstype: &str, controller: Option<&str>) -> Option<(String, PathBuf)> {
    mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        if right.next()? != fstype {
            return None;
        }
        let options = right.nth(1).unwrap_or("");
        if let Some(c) = controller
            && !options.split(',').any(|o| o == c)
        {
            return None;
        }
        let mut left = left.split_whitespace();
        let root = left.nth(3)?.to_string();
        let point = left.next()?;
        Some((root, PathBuf::from(point)))
    })
}

/// `path` (as /proc/self/cgroup shows it) as a folder under the mount.
fn under(mount: &Path, root: &str, path: &str) -> Result<PathBuf, CgroupError> {
    let rel = path
        .strip_prefix(root.trim_end_matches('/'))
        .ok_or_else(|| CgroupError::Outside {
            path: path.to_string(),
            root: root.to_string(),
        })?;
    let dir = mount.join(rel.trim_start_matches('/'));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(CgroupError::Missing(dir))
    }
}

fn make(parent: &Path, name: &str) -> Result<PathBuf, CgroupError> {
    let dir = parent.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(dir),
        Err(error) => Err(CgroupError::Create { dir, error }),
    }
}

fn write(dir: &Path, file: &str, value: u64) -> Result<(), CgroupError> {
    let path = dir.join(file);
    match std::fs::write(&path, value.to_string()) {
        Ok(()) => Ok(()),
        Err(error) => Err(CgroupError::Write { path, error }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_found_by_type_and_controller() {
        let mounts = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                      31 25 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                      32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mount_of(mounts, "cgroup", Some("pids")),
            Some(("/".into(), PathBuf::from("/sys/fs/cgroup/pids")))
        );
        assert_eq!(
            mount_of(mounts, "cgroup2", None),
            Some(("/".into(), PathBuf::from("/sys/fs/cgroup/unified")))
        );
        assert_eq!(mount_of(mounts, "cgroup", Some("cpu")), None);
    }

    #[test]
    fn counters_are_read_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.events");
        std::fs::write(&file, "low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(counter(&file, "oom_kill"), 2);
        assert_eq!(counter(&file, "max"), 12);
        assert_eq!(counter(&file, "absent"), 0);
    }
}
