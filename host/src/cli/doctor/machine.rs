//! The machine: the home folder and the free space under it, the store,
//! and the port the proxy listens on.

use super::report::{Report, Verdict};
use crate::cli::runtime;
use anyhow::Result;
use metaclaw_core::config::{self, LoadedConfig};
use metaclaw_core::home::Home;
use metaclaw_core::untrusted::log_line;
use metaclaw_wire::Obj;
use metaclaw_wire::recorded::lenient;
use serde::Deserialize;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Free space under the home below which doctor warns, and errs.
const DISK_WARN: u64 = 1 << 30;
const DISK_ERROR: u64 = 100 << 20;

/// Creates and removes a file in `dir`: what writing there needs.
fn probe_dir(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(format!(".metaclaw-doctor-{}", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(b"ok"));
    let removed = fs::remove_file(&path);
    written.and(removed)
}

/// `path` does not exist (or a folder above it is a file).
pub(super) fn is_missing(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// The nearest folder of `path` (itself included) that exists: where a
/// missing home would be created.
fn existing_ancestor(path: &Path) -> Option<&Path> {
    path.ancestors()
        .find(|p| !p.as_os_str().is_empty() && fs::symlink_metadata(p).is_ok())
}

/// Whether the missing `path` could be created: the nearest folder above
/// it takes a new file. `Err` says why not.
/// Why a missing path could not be created.
#[derive(Debug, thiserror::Error)]
enum NotCreatable {
    #[error("{} cannot be created: no folder above it exists", .0.display())]
    NoFolderAbove(PathBuf),
    #[error("{} cannot be created: {}: it is not a folder", .path.display(), .parent.display())]
    NotAFolder { path: PathBuf, parent: PathBuf },
    #[error("{} cannot be created: {}: {error}", .path.display(), .parent.display())]
    Refused {
        path: PathBuf,
        parent: PathBuf,
        error: std::io::Error,
    },
}

fn creatable(path: &Path) -> Result<(), NotCreatable> {
    let Some(parent) = existing_ancestor(path) else {
        return Err(NotCreatable::NoFolderAbove(path.to_path_buf()));
    };
    if !parent.is_dir() {
        return Err(NotCreatable::NotAFolder {
            path: path.to_path_buf(),
            parent: parent.to_path_buf(),
        });
    }
    probe_dir(parent).map_err(|error| NotCreatable::Refused {
        path: path.to_path_buf(),
        parent: parent.to_path_buf(),
        error,
    })
}

pub(super) fn check_home(report: &mut Report, home: &Home) {
    let root = &home.root;
    let fix_folder = "set METACLAW_HOME to a folder you can write (or move what is there away)";
    match fs::metadata(root) {
        Ok(meta) if !meta.is_dir() => {
            report.error("home", format!("{} is not a folder", root.display()), fix_folder);
        }
        Ok(meta) => match probe_dir(root) {
            Err(e) => report.error(
                "home",
                format!("{} cannot be written: {e}", root.display()),
                format!(
                    "give your user write access (`chmod u+w {}`), or {fix_folder}",
                    root.display()
                ),
            ),
            Ok(()) if meta.permissions().mode() & 0o077 != 0 => report.warning(
                "home",
                format!(
                    "{} is writable, and readable by other users (mode {:o}); it holds conversations and keys",
                    root.display(),
                    meta.permissions().mode() & 0o777
                ),
                format!("`chmod 700 {}`", root.display()),
            ),
            Ok(()) => report.ok("home", format!("{} is writable", root.display())),
        },
        // `start` (and `setup`) create it.
        Err(e) if is_missing(&e) => match creatable(root) {
            Ok(()) => report.ok(
                "home",
                format!(
                    "{} does not exist yet; `metaclaw start` creates it",
                    root.display()
                ),
            ),
            Err(why) => report.error("home", why.to_string(), fix_folder),
        },
        Err(e) => report.error("home", format!("{}: {e}", root.display()), fix_folder),
    }
}

/// The verdict for `free` bytes available.
fn disk_verdict(free: u64) -> Verdict {
    if free < DISK_ERROR {
        Verdict::Error
    } else if free < DISK_WARN {
        Verdict::Warning
    } else {
        Verdict::Ok
    }
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", n >> 20)
    }
}

pub(super) fn check_disk(report: &mut Report, home: &Home) {
    let Some(at) = existing_ancestor(&home.root) else {
        report.skipped("disk", "no folder of the home exists to measure");
        return;
    };
    let stat = match rustix::fs::statvfs(at) {
        Ok(stat) => stat,
        Err(e) => {
            report.warning(
                "disk",
                format!("cannot measure the free space under {}: {e}", at.display()),
                "check the file system holding the home (`df -h`)",
            );
            return;
        }
    };
    if stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        report.error(
            "disk",
            format!("{} is on a file system mounted read-only", at.display()),
            "set METACLAW_HOME to a folder on a writable file system",
        );
        return;
    }
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    let message = format!("{} free under {}", human_bytes(free), at.display());
    let fix =
        "free some space (old logs and sessions are in the home), or move the home (METACLAW_HOME)";
    match disk_verdict(free) {
        Verdict::Error => report.error(
            "disk",
            format!("only {message}: recording stops when it runs out"),
            fix,
        ),
        Verdict::Warning => report.warning("disk", format!("only {message}"), fix),
        _ => report.ok("disk", message),
    }
}

pub(super) fn check_store(report: &mut Report, home: &Home, loaded: &LoadedConfig) {
    let db = metaclaw_core::skills::paths(home, &loaded.config).1;
    if db.backend() == metaclaw_core::store::sql::Backend::Postgres {
        check_shared_store(report, &db);
        return;
    }
    let path = db.path();
    let fix_path =
        "set store.path to a file in a writable folder (`metaclaw config set store.path PATH`)";
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            report.error(
                "store",
                format!(
                    "{} is a folder, not the store's database file",
                    path.display()
                ),
                format!("move the folder away, or {fix_path}"),
            );
        }
        Ok(_) => match db.probe_write() {
            Ok(()) => report.ok("store", format!("{} takes writes", path.display())),
            Err(e) => report.error(
                "store",
                format!("{}: {e:#}", path.display()),
                format!("give your user write access to it and its folder, or {fix_path}"),
            ),
        },
        // The home is checked on its own; a store elsewhere is not.
        Err(e) if is_missing(&e) => match creatable(path) {
            Ok(()) => report.ok(
                "store",
                format!(
                    "{} does not exist yet; `metaclaw start` creates it",
                    path.display()
                ),
            ),
            Err(why) => report.error("store", why.to_string(), fix_path),
        },
        Err(e) => report.error("store", format!("{}: {e}", path.display()), fix_path),
    }
}

pub(super) fn check_port(report: &mut Report, home: &Home, loaded: &LoadedConfig) -> Result<()> {
    let proxy = &loaded.config.proxy;
    let port = proxy.port;
    let fix_port = "stop it, or give metaclaw another port: `metaclaw config set proxy.port N`";
    // A home that cannot be read is reported by the home check.
    if let Some(info) = home.running().ok().flatten() {
        if runtime()?.block_on(metaclaw_core::admin::healthy(&info.url)) {
            let note = if port != 0 && info.port != port {
                format!(" (proxy.port says {port}: it was started with another)")
            } else {
                String::new()
            };
            report.ok(
                "port",
                format!(
                    "metaclaw is running at {}, pid {}{note}",
                    info.url, info.pid
                ),
            );
        } else {
            report.error(
                "port",
                format!(
                    "metaclaw (pid {}) holds this home but does not answer at {}",
                    info.pid, info.url
                ),
                format!(
                    "`metaclaw stop` then `metaclaw start`; its log is {}",
                    home.log_file().display()
                ),
            );
        }
        return Ok(());
    }
    if port == 0 {
        report.ok(
            "port",
            "proxy.port is 0: `metaclaw start` takes any free port",
        );
        return Ok(());
    }
    let Some(ip) = config::parse_host(&proxy.host) else {
        // Validation refuses such a host; nothing to bind.
        return Ok(());
    };
    let address = std::net::SocketAddr::new(ip, port);
    match std::net::TcpListener::bind(address) {
        Ok(listener) => {
            drop(listener);
            report.ok("port", format!("{address} is free"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let url = format!(
                "http://{}:{port}",
                metaclaw_core::http::url_host(&ip.to_string())
            );
            match runtime()?.block_on(metaclaw_at(&url)) {
                Some(version) => report.error(
                    "port",
                    format!("another metaclaw ({version}, not this home's) listens on {address}"),
                    format!(
                        "stop it with `metaclaw stop` under its own METACLAW_HOME, or {}",
                        "give this one another port: `metaclaw config set proxy.port N`"
                    ),
                ),
                None => report.error(
                    "port",
                    format!("something else listens on {address}: `metaclaw start` would fail"),
                    fix_port,
                ),
            }
        }
        Err(e) => report.error(
            "port",
            format!("cannot listen on {address}: {e}"),
            "use a port above 1023 that nothing else uses: `metaclaw config set proxy.port N`",
        ),
    }
    Ok(())
}

/// The version of the metaclaw answering `/healthz` at `url`, if it is one.
async fn metaclaw_at(url: &str) -> Option<String> {
    let admin = metaclaw_core::admin::AdminClient::at(url).ok()?;
    let body = admin.timeout(Duration::from_secs(2)).health().await.ok()?;
    // metaclaw's /healthz names its version and mode.
    match Obj::<Healthz>::read(&body)? {
        Healthz {
            version: Some(v),
            mode: Some(_),
        } => Some(format!("version {}", log_line(&v, 40))),
        _ => None,
    }
}

/// `/healthz`'s answer, each field none unless a string.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Healthz {
    #[serde(deserialize_with = "lenient")]
    version: Option<String>,
    #[serde(deserialize_with = "lenient")]
    mode: Option<String>,
}

/// A team's store (`store.url`): reachable, migrated, the privileges
/// metaclaw needs, the clocks against the database's; the instances
/// sharing it and who leads what are in `status`.
fn check_shared_store(report: &mut Report, db: &metaclaw_core::store::Db) {
    use metaclaw_core::team::Finding;
    for (check, finding) in metaclaw_core::team::check_database(db) {
        match finding {
            Finding::Ok(message) => report.ok(check, message),
            Finding::Warning { problem, fix } => report.warning(check, problem, fix),
            Finding::Error { problem, fix } => report.error(check, problem, fix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_thresholds() {
        assert_eq!(disk_verdict(50 << 20), Verdict::Error);
        assert_eq!(disk_verdict(500 << 20), Verdict::Warning);
        assert_eq!(disk_verdict(2 << 30), Verdict::Ok);
    }

    #[test]
    fn a_missing_home_is_judged_by_the_folder_that_would_hold_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        fs::write(&file, "x").unwrap();
        let mut report = Report::default();
        check_home(&mut report, &Home::at(dir.path().join("a/b")));
        check_home(&mut report, &Home::at(file.join("home")));
        check_home(&mut report, &Home::at(&file));
        let verdicts: Vec<(Verdict, &str)> = report
            .checks
            .iter()
            .map(|c| (c.verdict, c.message.as_str()))
            .collect();
        assert_eq!(verdicts[0].0, Verdict::Ok, "{verdicts:?}");
        assert!(verdicts[0].1.contains("creates it"), "{verdicts:?}");
        assert_eq!(verdicts[1].0, Verdict::Error, "{verdicts:?}");
        assert!(verdicts[1].1.contains("not a folder"), "{verdicts:?}");
        assert_eq!(verdicts[2].0, Verdict::Error, "{verdicts:?}");
        assert!(verdicts[2].1.contains("is not a folder"), "{verdicts:?}");
    }
}
