//! A throwaway Postgres cluster for tests and benches: Debian's
//! `postgresql` (found through `METACLAW_PG_BIN`, `pg_config --bindir` or
//! `/usr/lib/postgresql/<newest>/bin`), initialised in a temporary folder,
//! listening on 127.0.0.1 and a Unix socket in that folder, with `trust`
//! authentication for its one user, `postgres`.
//!
//! A watchdog started beside the server stops it, and removes the folder,
//! once the process that started it is gone (however it ended: a test
//! process is never dropped cleanly), so no test leaves a server behind.
//! Each test takes a database of its own ([`Cluster::fresh_database`]).
//!
//! Postgres refuses to run as root; as root, the cluster runs as the
//! `postgres` user that Debian's package creates.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How the server keeps what it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync` and synchronous commits on, as a deployment runs (benches).
    Durable,
    /// Neither (tests: nothing here outlives the test process).
    Fast,
}

/// A running cluster.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres_user: bool,
}

static SHARED: OnceLock<std::result::Result<Cluster, String>> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The test process's one cluster (started on first use, fast settings).
pub fn shared() -> Result<&'static Cluster> {
    SHARED
        .get_or_init(|| Cluster::start(Durability::Fast).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// A new empty database on the shared cluster: its URL. Callable from
/// async tests too: the driver's own runtime runs on a thread of its own.
pub fn fresh_database() -> Result<String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| shared()?.fresh_database())
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the test cluster's thread died")))
    })
}

impl Cluster {
    /// Initialises and starts a cluster; returns once it takes connections.
    pub fn start(durability: Durability) -> Result<Self> {
        let bin = bin_dir()?;
        let as_postgres_user = std::fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false);
        let dir = tempfile::Builder::new()
            .prefix("metaclaw-pg-")
            .tempdir()
            .context("cannot create the cluster's folder")?
            .keep();
        let mut cluster = Self {
            dir,
            bin,
            port: 0,
            as_postgres_user,
        };
        if as_postgres_user {
            let status = Command::new("chown")
                .arg("postgres:")
                .arg(&cluster.dir)
                .status()
                .context("chown")?;
            if !status.success() {
                bail!(
                    "cannot give {} to the postgres user (Debian's postgresql package creates it)",
                    cluster.dir.display()
                );
            }
        }
        cluster.initdb()?;
        // A free port can be taken between finding it and the server's
        // bind; another is tried then.
        let mut last = None;
        for _ in 0..5 {
            cluster.port = free_port()?;
            match cluster.serve(durability) {
                Ok(()) => return Ok(cluster),
                Err(e) if format!("{e}").contains("could not bind") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("the server did not start")))
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command run as the cluster's owner.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn initdb(&self) -> Result<()> {
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(self.data())
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ])
            .stdin(Stdio::null())
            .output()
            .context("cannot run initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Starts the server with its watchdog and waits until it answers.
    fn serve(&mut self, durability: Durability) -> Result<()> {
        let fast = durability == Durability::Fast;
        let settings = [
            format!("listen_addresses=127.0.0.1 port={}", self.port),
            format!("unix_socket_directories={}", self.dir.display()),
            "max_connections=300".to_owned(),
            format!("fsync={}", if fast { "off" } else { "on" }),
            format!("synchronous_commit={}", if fast { "off" } else { "on" }),
            format!("full_page_writes={}", if fast { "off" } else { "on" }),
        ];
        let mut args = vec!["-D".to_owned(), self.data().display().to_string()];
        for setting in settings.iter().flat_map(|s| s.split(' ')) {
            args.push("-c".to_owned());
            args.push(setting.to_owned());
        }
        let quoted: Vec<String> = std::iter::once(self.bin.join("postgres").display().to_string())
            .chain(args)
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        // The watchdog: the server in the background; once the test
        // process (or the server) is gone, a fast shutdown and the folder
        // removed.
        let script = format!(
            "{server} > '{dir}/server.log' 2>&1 & pg=$!\n\
             while [ -d /proc/{watch} ] && kill -0 $pg 2>/dev/null; do sleep 1; done\n\
             kill -INT $pg 2>/dev/null; wait $pg\n\
             [ -d /proc/{watch} ] || rm -rf '{dir}'",
            server = quoted.join(" "),
            dir = self.dir.display(),
            watch = std::process::id(),
        );
        let mut watchdog = if self.as_postgres_user {
            let mut c = Command::new("setsid");
            c.args(["runuser", "-u", "postgres", "--", "sh", "-c", &script]);
            c
        } else {
            let mut c = Command::new("setsid");
            c.args(["sh", "-c", &script]);
            c
        };
        watchdog
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the server's watchdog")?;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            match postgres::Client::connect(&self.url("postgres"), postgres::NoTls) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    bail!(
                        "the server did not take connections within 90 s ({e}); its log: {}",
                        self.log_tail()
                    )
                }
                Err(_) => {
                    // A server that failed to start says so in its log;
                    // one still starting refuses our connection with a
                    // FATAL of its own in the log, which is no failure.
                    let log = self.log_tail();
                    let failed = log.lines().any(|l| {
                        l.contains("could not bind")
                            || (l.contains("FATAL")
                                && !STARTING.iter().any(|starting| l.contains(starting)))
                    });
                    if failed {
                        bail!("the server did not start: {log}");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The folder holding the data and the Unix socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for `database` on 127.0.0.1.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// A new empty database: its URL.
    pub fn fresh_database(&self) -> Result<String> {
        let n = DATABASES.fetch_add(1, Ordering::Relaxed);
        let name = format!("metaclaw_test_{}_{n}", std::process::id());
        let mut client = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .context("cannot connect to the test cluster")?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .with_context(|| format!("cannot create database {name}"))?;
        Ok(self.url(&name))
    }
}

/// What the server answers a connection while it starts (logged as a
/// FATAL for that connection, not for the server).
const STARTING: &[&str] = &[
    "the database system is starting up",
    "the database system is not yet accepting connections",
];

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Where Postgres's programs are.
fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("METACLAW_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Ok(dir);
        }
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max();
    match newest {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "Postgres is not installed: the tests start a throwaway cluster of Debian's \
             postgresql (`scripts/postgres-deps` installs it; or set METACLAW_PG_BIN to a \
             folder with initdb and postgres)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_database_takes_a_table_and_is_empty_of_others() -> Result<()> {
        let a = fresh_database()?;
        let b = fresh_database()?;
        assert_ne!(a, b);
        let mut client = postgres::Client::connect(&a, postgres::NoTls)?;
        client.batch_execute("CREATE TABLE t (x BIGINT); INSERT INTO t VALUES (7)")?;
        let x: i64 = client.query_one("SELECT x FROM t", &[])?.get(0);
        assert_eq!(x, 7);
        let mut other = postgres::Client::connect(&b, postgres::NoTls)?;
        let n: i64 = other
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 't'",
                &[],
            )?
            .get(0);
        assert_eq!(n, 0);
        Ok(())
    }
}
