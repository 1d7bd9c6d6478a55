//! The Postgres backend: a pool of connections (r2d2 over the `postgres`
//! driver), each keeping the statements it prepared, and the conversions
//! between the store's SQLite-shaped values and the types Postgres infers
//! for a statement's arguments and columns.

use std::collections::HashMap;
use std::time::Duration;

use bytes::BufMut;
use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use postgres::{NoTls, Statement};
use r2d2_postgres::PostgresConnectionManager;

use super::values::{Arg, Cell};
use super::{Error, Result, Row, dialect};

/// A pool of connections to one Postgres database.
#[derive(Clone)]
pub struct PgPool {
    pool: r2d2::Pool<Manager>,
}

impl std::fmt::Debug for PgPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.pool.state();
        write!(
            f,
            "PgPool({} connections, {} idle)",
            state.connections, state.idle_connections
        )
    }
}

impl PgPool {
    /// A pool for `url` (`postgres://user:password@host:port/db`, or the
    /// key-value form); connects lazily, up to `size` connections, and
    /// gives up on one after `wait`.
    pub fn new(url: &str, size: u32, wait: Duration) -> Result<Self> {
        let config: postgres::Config = url
            .parse()
            .map_err(|e: postgres::Error| Error::Pool(format!("store.url: {}", describe(&e))))?;
        let manager = Manager(PostgresConnectionManager::new(config, NoTls));
        let pool = r2d2::Pool::builder()
            .max_size(size.max(1))
            .min_idle(Some(0))
            .connection_timeout(wait)
            // r2d2 logs every failed connect itself; the store's callers
            // report the error they get.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        Ok(Self { pool })
    }

    /// A connection from the pool (a new one if none is idle).
    pub fn get(&self) -> Result<PgConn> {
        let conn = off_runtime(|| self.pool.get()).map_err(|e| Error::Pool(e.to_string()))?;
        Ok(PgConn { conn })
    }
}

struct Manager(PostgresConnectionManager<NoTls>);

/// A pooled client and the statements it has prepared (the text as the
/// store wrote it, before the dialect's rewrite).
pub struct Pooled {
    /// Always `Some` but while being dropped (see `Drop`).
    client: Option<postgres::Client>,
    prepared: HashMap<String, Statement>,
}

impl Pooled {
    fn client(&mut self) -> Result<&mut postgres::Client> {
        self.client
            .as_mut()
            .ok_or_else(|| Error::Pool("the connection is closed".to_owned()))
    }
}

impl Drop for Pooled {
    /// The driver's client says goodbye to the server on its runtime when
    /// dropped, which it cannot start on an async thread (a pool dropped
    /// there): it is dropped where `off_runtime` puts it.
    fn drop(&mut self) {
        self.prepared.clear();
        if let Some(client) = self.client.take() {
            off_runtime(move || drop(client));
        }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = postgres::Error;

    fn connect(&self) -> std::result::Result<Pooled, postgres::Error> {
        Ok(Pooled {
            client: Some(self.0.connect()?),
            prepared: HashMap::new(),
        })
    }

    fn is_valid(&self, conn: &mut Pooled) -> std::result::Result<(), postgres::Error> {
        match conn.client.as_mut() {
            Some(client) => self.0.is_valid(client),
            None => Ok(()),
        }
    }

    fn has_broken(&self, conn: &mut Pooled) -> bool {
        conn.client.as_ref().is_none_or(postgres::Client::is_closed)
    }
}

/// One connection, borrowed from the pool until dropped.
pub struct PgConn {
    conn: r2d2::PooledConnection<Manager>,
}

impl PgConn {
    pub(super) fn prepare(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.conn.prepared.get(sql) {
            return Ok(s.clone());
        }
        let client = self.conn.client()?;
        let statement = off_runtime(|| client.prepare(&dialect::to_postgres(sql)))?;
        self.conn.prepared.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    pub(super) fn batch(&mut self, sql: &str) -> Result<()> {
        let client = self.conn.client()?;
        Ok(off_runtime(|| {
            client.batch_execute(&dialect::to_postgres(sql))
        })?)
    }

    pub(super) fn execute(&mut self, statement: &Statement, args: &[Arg<'_>]) -> Result<usize> {
        let args: Vec<PgArg<'_>> = args.iter().map(PgArg).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let client = self.conn.client()?;
        let n = off_runtime(|| client.execute(statement, &refs))?;
        usize::try_from(n).map_err(|_| Error::Arg(format!("{n} rows")))
    }

    pub(super) fn query(&mut self, statement: &Statement, args: &[Arg<'_>]) -> Result<Vec<Row>> {
        let args: Vec<PgArg<'_>> = args.iter().map(PgArg).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as _).collect();
        let client = self.conn.client()?;
        let rows = off_runtime(|| client.query(statement, &refs))?;
        rows.iter()
            .map(|row| {
                let cells = (0..row.len())
                    .map(|i| row.try_get::<_, PgCell>(i).map(|c| c.0))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(Row { cells })
            })
            .collect()
    }

    /// The client, for what only Postgres has (advisory locks, `LISTEN`).
    pub fn client(&mut self) -> Result<&mut postgres::Client> {
        self.conn.client()
    }
}

/// Runs `f` where the driver may block: the `postgres` driver drives each
/// connection with a runtime of its own, which cannot start on a thread
/// already running async tasks. The store is called from such threads too
/// (as SQLite's, it blocks briefly), so there the call runs on a scoped
/// thread of its own and the caller waits for it.
fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// A Postgres error as one line: the server's message and its SQLSTATE,
/// or the driver's own words.
pub(super) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({}; {detail})", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => e.to_string(),
    }
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

/// An argument sent as the type Postgres inferred for its placeholder,
/// converting as SQLite's column affinity would (an integer into a
/// `DOUBLE PRECISION` column, a whole real into a `BIGINT` one).
#[derive(Debug)]
struct PgArg<'a>(&'a Arg<'a>);

impl ToSql for PgArg<'_> {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        match (self.0, ty) {
            (Arg::Null, _) => Ok(IsNull::Yes),
            (Arg::Int(i), t) if *t == Type::INT8 => i.to_sql(ty, out),
            (Arg::Int(i), t) if *t == Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
            (Arg::Int(i), t) if *t == Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
            (Arg::Int(i), t) if *t == Type::BOOL => (*i != 0).to_sql(ty, out),
            (Arg::Int(i), t) if *t == Type::FLOAT8 => (*i as f64).to_sql(ty, out),
            (Arg::Int(i), t) if *t == Type::FLOAT4 => (*i as f32).to_sql(ty, out),
            (Arg::Real(r), t) if *t == Type::FLOAT8 => r.to_sql(ty, out),
            (Arg::Real(r), t) if *t == Type::FLOAT4 => (*r as f32).to_sql(ty, out),
            (Arg::Real(r), t) if *t == Type::INT8 && r.fract() == 0.0 && r.is_finite() => {
                (*r as i64).to_sql(ty, out)
            }
            (Arg::Text(s), t) if is_text(t) => s.as_ref().to_sql(ty, out),
            (Arg::Int(i), t) if is_text(t) => i.to_string().as_str().to_sql(&Type::TEXT, out),
            (Arg::Real(r), t) if is_text(t) => r.to_string().as_str().to_sql(&Type::TEXT, out),
            (Arg::Text(s), t) if *t == Type::JSON => {
                out.put_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            (Arg::Text(s), t) if *t == Type::JSONB => {
                // JSONB's binary form: a version byte, then the text.
                out.put_u8(1);
                out.put_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            (Arg::Blob(b), t) if *t == Type::BYTEA => b.as_ref().to_sql(ty, out),
            (arg, t) => Err(format!("cannot send {arg:?} as Postgres type {t}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn is_text(t: &Type) -> bool {
    *t == Type::TEXT
        || *t == Type::VARCHAR
        || *t == Type::BPCHAR
        || *t == Type::NAME
        || *t == Type::UNKNOWN
}

/// A column read as the SQLite storage class its type stands for.
struct PgCell(Cell);

impl<'a> FromSql<'a> for PgCell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        let cell = match ty {
            t if *t == Type::BOOL => Cell::Int(i64::from(bool::from_sql(ty, raw)?)),
            t if *t == Type::INT2 => Cell::Int(i64::from(i16::from_sql(ty, raw)?)),
            t if *t == Type::INT4 => Cell::Int(i64::from(i32::from_sql(ty, raw)?)),
            t if *t == Type::INT8 => Cell::Int(i64::from_sql(ty, raw)?),
            t if *t == Type::OID => Cell::Int(i64::from(u32::from_sql(ty, raw)?)),
            t if *t == Type::FLOAT4 => Cell::Real(f64::from(f32::from_sql(ty, raw)?)),
            t if *t == Type::FLOAT8 => Cell::Real(f64::from_sql(ty, raw)?),
            t if *t == Type::NUMERIC => numeric(raw)?,
            t if is_text(t) || *t == Type::JSON => Cell::Text(String::from_sql(&Type::TEXT, raw)?),
            t if *t == Type::JSONB => match raw.split_first() {
                Some((1, text)) => Cell::Text(std::str::from_utf8(text)?.to_owned()),
                _ => return Err("unknown JSONB version".into()),
            },
            t if *t == Type::BYTEA => Cell::Blob(raw.to_vec()),
            // What `SELECT pg_advisory_xact_lock(…)` and its like return.
            t if *t == Type::VOID => Cell::Null,
            t => return Err(format!("the store reads no column of Postgres type {t}").into()),
        };
        Ok(Self(cell))
    }

    fn from_sql_null(_: &Type) -> Result<Self, BoxError> {
        Ok(Self(Cell::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// NUMERIC's binary form (what `SUM` of integers returns): whole values
/// that fit as integers, the rest as reals.
fn numeric(raw: &[u8]) -> Result<Cell, BoxError> {
    let word = |i: usize| -> Result<u16, BoxError> {
        raw.get(i * 2..i * 2 + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "short NUMERIC".into())
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(1)? as i16);
    let sign = word(2)?;
    let scale = word(3)?;
    if sign == 0xC000 {
        return Ok(Cell::Real(f64::NAN));
    }
    let negative = sign == 0x4000;
    let mut whole: Option<i64> = (scale == 0).then_some(0);
    let mut real = 0.0f64;
    for i in 0..ndigits {
        let digit = word(4 + i)?;
        let power = weight - i32::try_from(i)?;
        real += f64::from(digit) * 10_000f64.powi(power);
        whole = match whole {
            Some(w) if power >= 0 => u32::try_from(power)
                .ok()
                .and_then(|p| 10_000i64.checked_pow(p))
                .and_then(|m| i64::from(digit).checked_mul(m))
                .and_then(|d| w.checked_add(d)),
            _ => None,
        };
    }
    if let Some(w) = whole {
        return Ok(Cell::Int(if negative { -w } else { w }));
    }
    Ok(Cell::Real(if negative { -real } else { real }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(ndigits: u16, weight: i16, sign: u16, scale: u16, digits: &[u16]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [ndigits, weight as u16, sign, scale].iter().chain(digits) {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn numerics_read_as_integers_when_whole_and_reals_otherwise() {
        // 123456789 = 1·10000² + 2345·10000 + 6789
        let n = numeric(&encode(3, 2, 0, 0, &[1, 2345, 6789])).ok();
        assert_eq!(n, Some(Cell::Int(123_456_789)));
        let n = numeric(&encode(1, 1, 0x4000, 0, &[7])).ok();
        assert_eq!(n, Some(Cell::Int(-70_000)));
        let zero = numeric(&encode(0, 0, 0, 0, &[])).ok();
        assert_eq!(zero, Some(Cell::Int(0)));
        // 1.5 = 1 + 5000·10000⁻¹, scale 1
        let n = numeric(&encode(2, 0, 0, 1, &[1, 5000])).ok();
        assert_eq!(n, Some(Cell::Real(1.5)));
    }
}
