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

impl Cgroup {
    /// A new cgroup named `name` under this process's own, with `limits`
    /// written; `Err` says why there is none.
    pub fn create(name: &str, limits: &Limits) -> Result<Self, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mut why = Vec::new();
        match v2(&own, &mounts, name, limits) {
            Ok(cgroup) => return Ok(cgroup),
            Err(e) => why.push(format!("cgroup v2: {e}")),
        }
        match v1(&own, &mounts, name, limits) {
            Ok(cgroup) => return Ok(cgroup),
            Err(e) => why.push(format!("cgroup v1: {e}")),
        }
        Err(why.join("; "))
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
fn v2(own: &str, mounts: &str, name: &str, limits: &Limits) -> Result<Cgroup, String> {
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no v2 cgroup")?;
    let (root, mount) = mount_of(mounts, "cgroup2", None).ok_or("not mounted")?;
    let parent = under(&mount, &root, path)?;
    let controllers = std::fs::read_to_string(parent.join("cgroup.controllers"))
        .map_err(|e| format!("cannot read {}: {e}", parent.display()))?;
    for needed in ["memory", "pids"] {
        if !controllers.split_whitespace().any(|c| c == needed) {
            return Err(format!("no {needed} controller at {}", parent.display()));
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
        std::fs::write(&subtree, "+memory +pids").map_err(|e| {
            format!(
                "cannot enable memory and pids in {}: {e}",
                subtree.display()
            )
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
fn v1(own: &str, mounts: &str, name: &str, limits: &Limits) -> Result<Cgroup, String> {
    let dir_of = |controller: &str| -> Result<PathBuf, String> {
        let path = own
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',').any(|c| c == controller).then_some(path)
            })
            .ok_or_else(|| format!("this process is in no {controller} cgroup"))?;
        let (root, mount) = mount_of(mounts, "cgroup", Some(controller))
            .ok_or_else(|| format!("no {controller} hierarchy mounted"))?;
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
fn under(mount: &Path, root: &str, path: &str) -> Result<PathBuf, String> {
    let rel = path
        .strip_prefix(root.trim_end_matches('/'))
        .ok_or_else(|| format!("{path} is outside the mounted {root}"))?;
    let dir = mount.join(rel.trim_start_matches('/'));
    if dir.is_dir() {
        Ok(dir)
    } else {
        Err(format!("{} is not there", dir.display()))
    }
}

fn make(parent: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn write(dir: &Path, file: &str, value: u64) -> Result<(), String> {
    let path = dir.join(file);
    std::fs::write(&path, value.to_string())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
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
