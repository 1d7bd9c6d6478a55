//! The one handle to the store's database: [`Db`]. It names the file and
//! opens every connection beside the writer thread (a reader for a page or
//! a command, a side writer for the trainer or the skill library); nothing
//! else in metaclaw opens the database.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OpenFlags};

use super::sql::{Backend, Conn, PgPool};
use super::{schema, schema_pg};

/// Where the store is, and the way to its connections. Cheap to clone:
/// handed to whatever reads or writes beside the writer thread.
#[derive(Clone, Debug)]
pub struct Db {
    place: Arc<Place>,
}

#[derive(Debug)]
enum Place {
    /// The embedded default: one SQLite file.
    Sqlite(PathBuf),
    /// A team's database (`store.url`): a pool shared by every connection
    /// this process opens, and the URL without its password for messages.
    Postgres {
        pool: std::result::Result<PgPool, super::sql::Error>,
        shown: String,
        migrated: OnceLock<()>,
    },
}

impl PartialEq for Db {
    fn eq(&self, other: &Self) -> bool {
        match (&*self.place, &*other.place) {
            (Place::Sqlite(a), Place::Sqlite(b)) => a == b,
            (Place::Postgres { shown: a, .. }, Place::Postgres { shown: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl Eq for Db {}

/// Connections a process keeps to a Postgres store at most (the writer,
/// the dashboard's reader, the learner, the trainer and the CLI's share
/// them).
const PG_POOL_SIZE: u32 = 16;

impl Db {
    /// The store at `path` (nothing is opened until a connection is asked
    /// for).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            place: Arc::new(Place::Sqlite(path.into())),
        }
    }

    /// The Postgres store at `url` (`store.url`). Nothing connects until a
    /// connection is asked for; a URL that does not parse is that
    /// connection's error.
    pub fn postgres(url: &str) -> Self {
        let pool = PgPool::new(url, PG_POOL_SIZE, Duration::from_secs(10));
        Self {
            place: Arc::new(Place::Postgres {
                pool,
                shown: without_password(url),
                migrated: OnceLock::new(),
            }),
        }
    }

    pub fn backend(&self) -> Backend {
        match &*self.place {
            Place::Sqlite(_) => Backend::Sqlite,
            Place::Postgres { .. } => Backend::Postgres,
        }
    }

    /// The database file (for messages, and the files kept beside it); a
    /// Postgres store has none: its URL without the password, as a path.
    pub fn path(&self) -> &Path {
        match &*self.place {
            Place::Sqlite(path) => path,
            Place::Postgres { shown, .. } => Path::new(shown.as_str()),
        }
    }

    /// The store's name for messages (a Postgres URL without its password).
    pub fn display(&self) -> std::path::Display<'_> {
        self.path().display()
    }

    /// Whether the store is there yet (a daemon that never ran has no
    /// SQLite file; a Postgres store is asked when connected to).
    pub fn exists(&self) -> bool {
        match &*self.place {
            Place::Sqlite(path) => path.exists(),
            Place::Postgres { .. } => true,
        }
    }

    /// A read-only connection, which may run beside the daemon; refused
    /// when the store has no metaclaw data yet.
    pub fn read(&self) -> Result<Conn> {
        match &*self.place {
            Place::Sqlite(path) => open_read_only(path).map(Conn::from),
            Place::Postgres { shown, .. } => {
                let conn = self.pg()?;
                let version =
                    schema_pg::version(&conn).with_context(|| format!("cannot read {shown}"))?;
                if version == 0 {
                    bail!("{shown} has no metaclaw data yet");
                }
                if version > schema_pg::latest_version() {
                    bail!("{shown} was written by a newer metaclaw: upgrade metaclaw");
                }
                Ok(conn)
            }
        }
    }

    /// A read-write connection with the schema up to date, for work that
    /// writes rarely and outside the turn writer (the skill library, the
    /// trainer, the CLI). SQLite serialises it with the writer thread.
    pub fn side_writer(&self) -> Result<Conn> {
        match &*self.place {
            Place::Sqlite(path) => open_side_writer(path).map(Conn::from),
            Place::Postgres { .. } => self.writer(),
        }
    }

    /// The turn writer's connection, schema up to date.
    pub(super) fn writer(&self) -> Result<Conn> {
        match &*self.place {
            Place::Sqlite(path) => {
                let mut conn = open_rw(path)?;
                let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
                if version > schema::latest_version() {
                    bail!(
                        "{} was written by a newer metaclaw (schema {version}, this build knows {}): upgrade metaclaw",
                        path.display(),
                        schema::latest_version()
                    );
                }
                schema::migrate(&mut conn)
                    .with_context(|| format!("cannot migrate {}", path.display()))?;
                Ok(Conn::from(conn))
            }
            Place::Postgres {
                shown, migrated, ..
            } => {
                let mut conn = self.pg()?;
                if migrated.get().is_none() {
                    schema_pg::migrate(&mut conn)
                        .with_context(|| format!("cannot migrate {shown}"))?;
                    let _ = migrated.set(());
                }
                Ok(conn)
            }
        }
    }

    /// Whether the existing store takes a write, changing nothing: a table
    /// created in a transaction that is rolled back (`doctor`). Waits for
    /// the daemon's writer like any other writer.
    pub fn probe_write(&self) -> Result<()> {
        match &*self.place {
            Place::Sqlite(path) => probe_write(path),
            Place::Postgres { .. } => {
                let mut conn = self.pg()?;
                let tx = conn.transaction()?;
                tx.execute_batch(
                    "CREATE TABLE metaclaw_doctor_probe (x BIGINT); INSERT INTO metaclaw_doctor_probe VALUES (1);",
                )?;
                tx.rollback()?;
                Ok(())
            }
        }
    }

    /// A connection to the database as it is: not migrated, and taken
    /// even before metaclaw wrote anything there (`doctor`).
    pub fn connect(&self) -> Result<Conn> {
        match &*self.place {
            Place::Sqlite(path) => open_read_only(path).map(Conn::from),
            Place::Postgres { .. } => self.pg(),
        }
    }

    /// The schema version of the database behind `conn` (0: no metaclaw
    /// data yet) and the latest this build knows.
    pub fn schema_version(&self, conn: &Conn) -> Result<(u32, u32)> {
        match &*self.place {
            Place::Sqlite(_) => {
                let sqlite = conn
                    .sqlite()
                    .context("a SQLite store's connection is SQLite's")?;
                let version: u32 = sqlite.pragma_query_value(None, "user_version", |r| r.get(0))?;
                Ok((version, schema::latest_version()))
            }
            Place::Postgres { .. } => Ok((schema_pg::version(conn)?, schema_pg::latest_version())),
        }
    }

    /// Takes the store's lock `name`, waiting while another thread or
    /// process holds it: a `flock` on `<store>.<name>-lock` beside a
    /// SQLite file, an advisory lock on a Postgres store (which every
    /// instance sharing it honours). Held until dropped; let go by the
    /// kernel or the server when the holder dies.
    pub fn lock(&self, name: &str) -> Result<StoreLock> {
        match &*self.place {
            Place::Sqlite(path) => {
                let mut file_name = path.file_name().unwrap_or_default().to_os_string();
                file_name.push(format!(".{name}-lock"));
                let lock_path = path.with_file_name(file_name);
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .mode(0o600)
                    .open(&lock_path)
                    .and_then(|f| f.lock().map(|()| f))
                    .with_context(|| format!("cannot lock {}", lock_path.display()))?;
                Ok(StoreLock {
                    held: Held::File { _file: file },
                })
            }
            Place::Postgres { shown, .. } => {
                // A transaction's lock, not a session's: the connection
                // goes back to the pool after, and a session lock would go
                // with it if letting go failed.
                let conn = self.pg()?;
                let locked = conn.execute_batch("BEGIN").and_then(|()| {
                    conn.query_row(
                        "SELECT pg_advisory_xact_lock(?1)",
                        [advisory_key(name)],
                        |_| Ok(()),
                    )
                });
                if let Err(e) = locked {
                    let _ = conn.execute_batch("ROLLBACK");
                    return Err(e).with_context(|| format!("cannot lock {name} on {shown}"));
                }
                Ok(StoreLock {
                    held: Held::Postgres(conn),
                })
            }
        }
    }

    fn pg(&self) -> Result<Conn> {
        match &*self.place {
            Place::Postgres { pool, shown, .. } => {
                let pool = pool.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
                let conn = pool
                    .get()
                    .with_context(|| format!("cannot connect to {shown}"))?;
                Ok(Conn::from(conn))
            }
            Place::Sqlite(path) => bail!("{} is not a Postgres store", path.display()),
        }
    }
}

/// A lock on the store ([`Db::lock`]), held until dropped.
#[derive(Debug)]
pub struct StoreLock {
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// Held open: the lock goes when the file closes.
    File { _file: std::fs::File },
    /// A connection inside the transaction holding the advisory lock.
    Postgres(Conn),
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        if let Held::Postgres(conn) = &self.held {
            // Ending the transaction lets go; if that fails the connection
            // is broken, and the server lets go as it closes.
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
}

/// The advisory lock key of the store's lock `name`: the first eight bytes
/// of a hash of it (schema_pg's migration lock has a key of its own).
fn advisory_key(name: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("metaclaw lock {name}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// `url` with its password (if any) replaced by `***`, for messages.
pub fn without_password(url: &str) -> String {
    // postgres://user:password@host/db, or key=value pairs.
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((credentials, host)) = rest.rsplit_once('@')
            && let Some((user, _)) = credentials.split_once(':')
        {
            return format!("{scheme}://{user}:***@{host}");
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl std::fmt::Display for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path().display().fmt(f)
    }
}

pub(super) fn open_rw(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if !path.exists() {
        // Conversations are private: create the file (and so its -wal and
        // -shm companions, which SQLite gives the same mode) owner-only.
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
    }
    let conn = Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    schema::configure(&conn).with_context(|| format!("cannot configure {}", path.display()))?;
    Ok(conn)
}

/// The store's schema version; an error when a newer metaclaw wrote it.
pub(super) fn schema_version(conn: &Connection, path: &Path) -> Result<u32> {
    let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > schema::latest_version() {
        bail!(
            "{} was written by a newer metaclaw: upgrade metaclaw",
            path.display()
        );
    }
    Ok(version)
}

/// A connection to the existing store at `path`, which waits for the
/// daemon's writer, and its schema version (refused if newer than known).
fn open_existing(path: &Path, flags: OpenFlags) -> Result<(Connection, u32)> {
    let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_context(|| format!("cannot open {}", path.display()))?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let version = schema_version(&conn, path)?;
    Ok((conn, version))
}

fn open_read_only(path: &Path) -> Result<Connection> {
    let (conn, version) = open_existing(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    if version == 0 {
        bail!("{} has no metaclaw data yet", path.display());
    }
    Ok(conn)
}

/// Whether the existing store at `path` takes a write, changing nothing:
/// a table created in a transaction that is rolled back (`doctor`). Waits
/// for the daemon's writer like any other writer.
fn probe_write(path: &Path) -> Result<()> {
    let (mut conn, _) = open_existing(path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    // SQLite opens a file it may not write read-only, silently.
    if conn.is_readonly(rusqlite::MAIN_DB)? {
        bail!("{} can only be opened read-only", path.display());
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE metaclaw_doctor_probe (x INTEGER); INSERT INTO metaclaw_doctor_probe VALUES (1);",
    )?;
    tx.rollback()?;
    Ok(())
}

/// A read-write connection with the schema up to date, for work that
/// writes rarely and outside the turn writer (the skill library, the CLI).
/// SQLite serialises it with the writer thread.
fn open_side_writer(path: &Path) -> Result<Connection> {
    let mut conn = open_rw(path)?;
    schema_version(&conn, path)?;
    schema::migrate(&mut conn)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        assert_eq!(
            without_password("postgres://metaclaw:s3cret@db.internal:5432/team"),
            "postgres://metaclaw:***@db.internal:5432/team"
        );
        assert_eq!(
            without_password("postgres://metaclaw@db.internal/team"),
            "postgres://metaclaw@db.internal/team"
        );
        assert_eq!(
            without_password("host=db user=metaclaw password=s3cret dbname=team"),
            "host=db user=metaclaw password=*** dbname=team"
        );
    }
}
