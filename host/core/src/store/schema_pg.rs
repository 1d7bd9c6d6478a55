//! The Postgres store's schema: SQLite's as of its version 25 in one step
//! (`schema_pg.sql`), then a migration for each later SQLite version,
//! numbered alike, so both backends are always at the same version (a test
//! holds them to it).
//!
//! Many instances start against one database at once: the migration runs
//! inside a transaction holding an advisory lock, so one of them migrates
//! and the others find it done.

use super::sql::{Conn, Error, Optional, Result};

/// The SQLite version `schema_pg.sql` matches.
const BASE_VERSION: u32 = 25;
const BASE: &str = include_str!("schema_pg.sql");

/// Migrations after the base: version `BASE_VERSION + 1 + i`.
const MIGRATIONS: &[&str] = &[
    // 26: several instances on one store (see SQLite's 26).
    r#"
    ALTER TABLE learning_jobs ADD COLUMN claimed_by TEXT COLLATE "C";
    CREATE TABLE instances (
        id              TEXT COLLATE "C" PRIMARY KEY,
        host            TEXT COLLATE "C" NOT NULL,
        pid             BIGINT NOT NULL,
        version         TEXT COLLATE "C" NOT NULL,
        listen          TEXT COLLATE "C" NOT NULL,
        skills_dir      TEXT COLLATE "C",
        started_ms      BIGINT NOT NULL,
        heartbeat_ms    BIGINT NOT NULL,
        clock_offset_ms BIGINT NOT NULL DEFAULT 0,
        stopped_ms      BIGINT
    );
    CREATE TABLE leases (
        name        TEXT COLLATE "C" PRIMARY KEY,
        holder      TEXT COLLATE "C" NOT NULL,
        epoch       BIGINT NOT NULL,
        acquired_ms BIGINT NOT NULL,
        expires_ms  BIGINT NOT NULL
    );
    "#,
];

/// The advisory lock key migrations hold ("metaclaw" in ASCII, truncated).
const MIGRATION_LOCK: i64 = 0x6d65_7461_636c_6177;

pub fn latest_version() -> u32 {
    BASE_VERSION + MIGRATIONS.len() as u32
}

/// The database's schema version (0: no metaclaw data yet).
pub fn version(conn: &Conn) -> Result<u32> {
    let exists: bool = conn.query_row(
        "SELECT to_regclass('metaclaw_schema') IS NOT NULL",
        (),
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(0);
    }
    Ok(conn
        .query_row("SELECT version FROM metaclaw_schema", (), |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// Brings the schema up to date; the version it is at. A database written
/// by a newer metaclaw is refused.
pub fn migrate(conn: &mut Conn) -> Result<u32> {
    let tx = conn.transaction()?;
    tx.query_row("SELECT pg_advisory_xact_lock(?1)", [MIGRATION_LOCK], |_| {
        Ok(())
    })?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS metaclaw_schema (version BIGINT NOT NULL)")?;
    let mut current = version(&tx)?;
    if current > latest_version() {
        return Err(Error::Arg(format!(
            "the store was written by a newer metaclaw (schema {current}, this build knows {}): upgrade metaclaw",
            latest_version()
        )));
    }
    if current == 0 {
        tx.execute_batch(BASE)?;
        current = BASE_VERSION;
    }
    for sql in MIGRATIONS.iter().skip((current - BASE_VERSION) as usize) {
        tx.execute_batch(sql)?;
        current += 1;
    }
    tx.execute("DELETE FROM metaclaw_schema", ())?;
    tx.execute(
        "INSERT INTO metaclaw_schema (version) VALUES (?1)",
        [current],
    )?;
    tx.commit()?;
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_is_at_sqlites_version() {
        assert_eq!(
            latest_version(),
            super::super::schema::latest_version(),
            "a SQLite migration needs its Postgres one in schema_pg.rs"
        );
    }

    #[test]
    fn migrating_twice_and_from_two_connections_is_one_migration() -> anyhow::Result<()> {
        let url = metaclaw_pg_cluster::fresh_database()?;
        let pool = super::super::sql::PgPool::new(&url, 4, std::time::Duration::from_secs(30))?;
        let (a, b) = (pool.clone(), pool.clone());
        let one = std::thread::spawn(move || a.get().and_then(|c| migrate(&mut Conn::from(c))));
        let two = std::thread::spawn(move || b.get().and_then(|c| migrate(&mut Conn::from(c))));
        for handle in [one, two] {
            let migrated = handle
                .join()
                .map_err(|_| anyhow::anyhow!("a migration thread died"))?;
            assert_eq!(migrated?, latest_version());
        }
        let mut conn = Conn::from(pool.get()?);
        assert_eq!(migrate(&mut conn)?, latest_version());
        assert_eq!(version(&conn)?, latest_version());
        let rows: i64 = conn.query_row("SELECT count(*) FROM metaclaw_schema", (), |r| r.get(0))?;
        assert_eq!(rows, 1);
        Ok(())
    }
}
