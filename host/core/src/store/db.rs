//! The one handle to the store's database: [`Db`]. It names the file and
//! opens every connection beside the writer thread (a reader for a page or
//! a command, a side writer for the trainer or the skill library); nothing
//! else in metaclaw opens the database.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OpenFlags};

use super::schema;
use super::sql::Conn;

/// Where the store is, and the way to its connections. Cheap to clone:
/// handed to whatever reads or writes beside the writer thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Db {
    path: Arc<Path>,
}

impl Db {
    /// The store at `path` (nothing is opened until a connection is asked
    /// for).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            path: Arc::from(path.into()),
        }
    }

    /// The database file (for messages, and the files kept beside it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's name for messages.
    pub fn display(&self) -> std::path::Display<'_> {
        self.path.display()
    }

    /// Whether the file is there yet (a daemon that never ran has none).
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// A read-only connection, which may run beside the daemon; refused
    /// when the store has no metaclaw data yet.
    pub fn read(&self) -> Result<Conn> {
        open_read_only(&self.path).map(Conn::from)
    }

    /// A read-write connection with the schema up to date, for work that
    /// writes rarely and outside the turn writer (the skill library, the
    /// trainer, the CLI). SQLite serialises it with the writer thread.
    pub fn side_writer(&self) -> Result<Conn> {
        open_side_writer(&self.path).map(Conn::from)
    }

    /// Whether the existing store takes a write, changing nothing: a table
    /// created in a transaction that is rolled back (`doctor`). Waits for
    /// the daemon's writer like any other writer.
    pub fn probe_write(&self) -> Result<()> {
        probe_write(&self.path)
    }
}

impl std::fmt::Display for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path.display().fmt(f)
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
