//! The store's SQL on either backend: SQLite (the embedded default) or
//! Postgres (a team's deployment, `store.url`).
//!
//! One connection type, [`Conn`], with the calls the store makes
//! (`execute`, `query_row`, prepared statements' `query_map`,
//! transactions), typed arguments ([`ToArg`]) and typed columns
//! ([`FromCell`]). The store's SQL is written once, in the dialect both
//! take where one exists (`ON CONFLICT … DO UPDATE`, `RETURNING`); what is
//! left of SQLite's spelling (`?N` placeholders, `INSERT OR IGNORE`, the
//! scalar `max(a, b)`) is rewritten for Postgres in [`dialect`], once per
//! statement text. A statement that has no common spelling asks
//! [`Conn::backend`] and spells it per backend where it is used.
//!
//! Two rules keep one text valid on both: an upsert's `DO UPDATE` names
//! the existing row's columns by its table (`jobs.state`; Postgres finds a
//! bare name ambiguous with `excluded`'s), and a placeholder only tested
//! for NULL is cast (`CAST(?1 AS TEXT) IS NULL OR …`: Postgres must know
//! its type where it first appears).
//!
//! Rows are read whole into [`Row`]s before the caller's closure sees them,
//! so a closure may query the same connection again.

pub mod dialect;
mod pg;
mod values;

use std::cell::RefCell;

pub use values::{Arg, Cell, FromCell, Mismatch, Params, ToArg, params_from_iter};

pub use pg::{PgConn, PgPool};

/// Which database a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// An error from the store's SQL, whichever backend raised it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres: {}", pg::describe(.0))]
    Postgres(#[from] postgres::Error),
    #[error("postgres pool: {0}")]
    Pool(String),
    /// `query_row` found no row (`.optional()` turns it into `None`).
    #[error("query returned no rows")]
    NoRows,
    /// A column's value is not what the caller reads it as.
    #[error("column {index}: {message}")]
    Column { index: usize, message: String },
    /// An argument the backend cannot take as the type its SQL asks for.
    #[error("argument: {0}")]
    Arg(String),
    /// Work fenced by a claim or a lease that another instance has taken
    /// since: nothing of it is written.
    #[error("{0}")]
    Fenced(String),
}

impl Error {
    /// A column that did not parse as what the store wrote there.
    pub fn column(index: usize, message: impl std::fmt::Display) -> Self {
        Self::Column {
            index,
            message: message.to_string(),
        }
    }

    /// Whether the database refused the write because another writer
    /// holds it (SQLite's `BUSY`/`LOCKED`; Postgres's serialization and
    /// deadlock failures): the same work may succeed if retried.
    pub fn is_contention(&self) -> bool {
        match self {
            Self::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            Self::Postgres(e) => e.code().is_some_and(|c| {
                *c == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
            }),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How many times work the database refused for contention is tried.
pub const CONTENTION_TRIES: u32 = 12;

/// Whether an error (anywhere in its chain) is the database refusing work
/// for contention ([`Error::is_contention`]).
pub fn is_contention_in(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<Error>().is_some_and(Error::is_contention))
}

/// The wait before try `attempt + 1` of work refused for contention:
/// longer with each try, and jittered so that two writers that deadlocked
/// do not meet again in step.
pub fn contention_backoff(attempt: u32) -> std::time::Duration {
    let jitter = (uuid::Uuid::new_v4().as_u128() % 40) as u64;
    std::time::Duration::from_millis(20 * u64::from(attempt.min(10)) + jitter)
}

/// `work` (one whole transaction, rolled back when it fails) tried again
/// while the database refuses it for contention: on a shared Postgres
/// store two instances' transactions can deadlock and Postgres aborts one
/// of them, which then must be tried again, not lost.
pub fn retry_contended<T, E>(
    contended: impl Fn(&E) -> bool,
    mut work: impl FnMut() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let mut attempt = 1;
    loop {
        match work() {
            Err(e) if attempt < CONTENTION_TRIES && contended(&e) => {
                std::thread::sleep(contention_backoff(attempt));
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// `query_row`'s "no row" as `None`.
pub trait Optional<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> Optional<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// `params![a, b, …]`: arguments of mixed types for one statement.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_sql_params {
    () => {
        &[] as &[&dyn $crate::store::sql::ToArg]
    };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::store::sql::ToArg),+] as &[&dyn $crate::store::sql::ToArg]
    };
}
pub use crate::__store_sql_params as params;

/// One row, read whole.
#[derive(Debug, Clone)]
pub struct Row {
    cells: Vec<Cell>,
}

impl Row {
    /// Column `index` as `T` (an error names the column when it is not).
    pub fn get<T: FromCell>(&self, index: usize) -> Result<T> {
        let cell = self
            .cells
            .get(index)
            .ok_or_else(|| Error::column(index, "no such column"))?;
        T::from_cell(cell).map_err(|m| Error::Column {
            index,
            message: m.0,
        })
    }

    /// Column `index` as it came.
    pub fn cell(&self, index: usize) -> Option<&Cell> {
        self.cells.get(index)
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

/// How a transaction starts: `Immediate` takes SQLite's write lock at once
/// (so two writers never deadlock upgrading read locks); Postgres takes
/// row locks as it writes, and starts both alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    Deferred,
    Immediate,
}

/// A connection to the store's database.
pub struct Conn {
    inner: Inner,
}

enum Inner {
    Sqlite(rusqlite::Connection),
    Postgres(Box<RefCell<PgConn>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conn({})", self.backend().as_str())
    }
}

impl From<rusqlite::Connection> for Conn {
    fn from(conn: rusqlite::Connection) -> Self {
        Self {
            inner: Inner::Sqlite(conn),
        }
    }
}

impl From<PgConn> for Conn {
    fn from(conn: PgConn) -> Self {
        Self {
            inner: Inner::Postgres(Box::new(RefCell::new(conn))),
        }
    }
}

impl Conn {
    pub fn backend(&self) -> Backend {
        match self.inner {
            Inner::Sqlite(_) => Backend::Sqlite,
            Inner::Postgres(_) => Backend::Postgres,
        }
    }

    /// The SQLite connection underneath, for what only SQLite has
    /// (pragmas, checkpoints); `None` on Postgres.
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match &self.inner {
            Inner::Sqlite(c) => Some(c),
            Inner::Postgres(_) => None,
        }
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(&self, sql: &str, params: impl Params) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// Runs statements without arguments, separated by `;`.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Inner::Postgres(c) => c.borrow_mut().batch(sql),
        }
    }

    /// The first row's `f`, or [`Error::NoRows`].
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: impl Params,
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// A statement, prepared once per connection and kept.
    pub fn prepare_cached(&self, sql: &str) -> Result<Stmt<'_>> {
        let inner = match &self.inner {
            Inner::Sqlite(c) => StmtInner::Sqlite(c.prepare_cached(sql)?),
            Inner::Postgres(c) => StmtInner::Postgres(c, c.borrow_mut().prepare(sql)?),
        };
        Ok(Stmt { inner })
    }

    /// A statement (kept like [`Conn::prepare_cached`]'s: both backends
    /// cache what they prepare).
    pub fn prepare(&self, sql: &str) -> Result<Stmt<'_>> {
        self.prepare_cached(sql)
    }

    /// A transaction that rolls back unless committed.
    pub fn transaction(&mut self) -> Result<Tx<'_>> {
        self.unchecked_transaction()
    }

    /// A transaction from a shared connection: the caller makes sure none
    /// is open on it already (the database refuses a nested `BEGIN`).
    pub fn unchecked_transaction(&self) -> Result<Tx<'_>> {
        self.begin(Behavior::Deferred)
    }

    pub fn transaction_with_behavior(&mut self, behavior: Behavior) -> Result<Tx<'_>> {
        self.begin(behavior)
    }

    /// How long a statement waits for another writer's lock before it
    /// fails (SQLite's busy timeout; Postgres's `lock_timeout`).
    pub fn busy_timeout(&self, wait: std::time::Duration) -> Result<()> {
        match &self.inner {
            Inner::Sqlite(c) => Ok(c.busy_timeout(wait)?),
            Inner::Postgres(c) => c
                .borrow_mut()
                .batch(&format!("SET lock_timeout = {}", wait.as_millis())),
        }
    }

    fn begin(&self, behavior: Behavior) -> Result<Tx<'_>> {
        let begin = match (self.backend(), behavior) {
            (Backend::Sqlite, Behavior::Immediate) => "BEGIN IMMEDIATE",
            (Backend::Sqlite, Behavior::Deferred) => "BEGIN DEFERRED",
            (Backend::Postgres, _) => "BEGIN",
        };
        self.execute_batch(begin)?;
        Ok(Tx {
            conn: self,
            done: false,
        })
    }
}

/// A transaction: the connection, inside `BEGIN`, until [`Tx::commit`] (or
/// a rollback when dropped).
pub struct Tx<'c> {
    conn: &'c Conn,
    done: bool,
}

impl Tx<'_> {
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        self.conn.execute_batch("COMMIT")
    }

    pub fn rollback(mut self) -> Result<()> {
        self.done = true;
        self.conn.execute_batch("ROLLBACK")
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Nothing to tell: the transaction's error, if any, is already
            // on its way to the caller, and a failed rollback leaves the
            // same state (the database rolls back an unfinished one).
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// A prepared statement.
pub struct Stmt<'c> {
    inner: StmtInner<'c>,
}

enum StmtInner<'c> {
    Sqlite(rusqlite::CachedStatement<'c>),
    Postgres(&'c RefCell<PgConn>, postgres::Statement),
}

impl Stmt<'_> {
    pub fn execute(&mut self, params: impl Params) -> Result<usize> {
        let args = params.args()?;
        match &mut self.inner {
            StmtInner::Sqlite(s) => Ok(s.execute(rusqlite::params_from_iter(args.iter()))?),
            StmtInner::Postgres(c, s) => c.borrow_mut().execute(s, &args),
        }
    }

    /// Every row, each through `f`.
    pub fn query_map<T>(
        &mut self,
        params: impl Params,
        mut f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let rows = self.rows(params)?;
        Ok(rows.iter().map(&mut f).collect::<Vec<_>>().into_iter())
    }

    /// The first row's `f`, or [`Error::NoRows`].
    pub fn query_row<T>(
        &mut self,
        params: impl Params,
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<T> {
        let rows = self.rows(params)?;
        rows.first().map_or(Err(Error::NoRows), f)
    }

    /// Whether the statement returns a row.
    pub fn exists(&mut self, params: impl Params) -> Result<bool> {
        Ok(!self.rows(params)?.is_empty())
    }

    fn rows(&mut self, params: impl Params) -> Result<Vec<Row>> {
        let args = params.args()?;
        match &mut self.inner {
            StmtInner::Sqlite(s) => {
                let width = s.column_count();
                let mut rows = s.query(rusqlite::params_from_iter(args.iter()))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    let cells = (0..width)
                        .map(|i| row.get_ref(i).map(Cell::from))
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    out.push(Row { cells });
                }
                Ok(out)
            }
            StmtInner::Postgres(c, s) => c.borrow_mut().query(s, &args),
        }
    }
}

#[cfg(test)]
mod tests;
