//! The SQL layer on both backends: the same statements, the same answers.

use super::*;

/// A connection to an empty database of each backend.
fn both() -> anyhow::Result<Vec<Conn>> {
    let sqlite = Conn::from(rusqlite::Connection::open_in_memory()?);
    let url = metaclaw_pg_cluster::fresh_database()?;
    let pool = PgPool::new(&url, 2, std::time::Duration::from_secs(30))?;
    Ok(vec![sqlite, Conn::from(pool.get()?)])
}

/// The same table on each backend, in its own types.
fn table(conn: &Conn) -> Result<()> {
    let blob = match conn.backend() {
        Backend::Sqlite => "BLOB",
        Backend::Postgres => "BYTEA",
    };
    conn.execute_batch(&format!(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, n BIGINT, r DOUBLE PRECISION, s TEXT, b {blob})"
    ))
}

#[test]
fn every_storage_class_goes_in_and_comes_out_alike() -> anyhow::Result<()> {
    for conn in both()? {
        table(&conn)?;
        let changed = conn.execute(
            "INSERT INTO t (id, n, r, s, b) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![1, -7i64, 2.5, "héllo", vec![0u8, 1, 255]],
        )?;
        assert_eq!(changed, 1);
        // An integer into a real column, nothing into the rest.
        conn.execute(
            "INSERT INTO t (id, n, r, s, b) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![2, None::<i64>, 3i64, None::<String>, None::<Vec<u8>>],
        )?;
        let row = conn.query_row("SELECT n, r, s, b FROM t WHERE id = ?1", [1], |r| {
            Ok((
                r.get::<i64>(0)?,
                r.get::<f64>(1)?,
                r.get::<String>(2)?,
                r.get::<Vec<u8>>(3)?,
            ))
        })?;
        assert_eq!(
            row,
            (-7, 2.5, "héllo".to_owned(), vec![0, 1, 255]),
            "{conn:?}"
        );
        let row = conn.query_row("SELECT n, r, s FROM t WHERE id = ?1", [2], |r| {
            Ok((
                r.get::<Option<i64>>(0)?,
                r.get::<f64>(1)?,
                r.get::<Option<String>>(2)?,
            ))
        })?;
        assert_eq!(row, (None, 3.0, None), "{conn:?}");
        // A type the column does not hold is an error naming the column.
        let wrong = conn.query_row("SELECT s FROM t WHERE id = 1", (), |r| r.get::<i64>(0));
        assert!(
            matches!(wrong, Err(Error::Column { index: 0, .. })),
            "{conn:?}: {wrong:?}"
        );
    }
    Ok(())
}

#[test]
fn aggregates_read_as_numbers_on_both() -> anyhow::Result<()> {
    for conn in both()? {
        table(&conn)?;
        for i in 1..=4i64 {
            conn.execute(
                "INSERT INTO t (id, n, r) VALUES (?1, ?2, ?3)",
                params![i, i * 10, 0.5],
            )?;
        }
        // SUM of integers is NUMERIC on Postgres; AVG too; COUNT BIGINT.
        let (sum, avg, count, total): (i64, f64, i64, f64) =
            conn.query_row("SELECT SUM(n), AVG(n), COUNT(*), SUM(r) FROM t", (), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
        assert_eq!((sum, avg, count, total), (100, 25.0, 4, 2.0), "{conn:?}");
        let greatest: i64 =
            conn.query_row("SELECT max(n, 35) FROM t WHERE id = ?1", [3], |r| r.get(0))?;
        assert_eq!(greatest, 35, "{conn:?}");
    }
    Ok(())
}

#[test]
fn insert_or_ignore_keeps_the_first_and_returning_gives_the_row() -> anyhow::Result<()> {
    for conn in both()? {
        table(&conn)?;
        conn.execute(
            "INSERT OR IGNORE INTO t (id, s) VALUES (?1, ?2)",
            params![1, "first"],
        )?;
        let again = conn.execute(
            "INSERT OR IGNORE INTO t (id, s) VALUES (?1, ?2)",
            params![1, "second"],
        )?;
        assert_eq!(again, 0, "{conn:?}");
        let s: String = conn.query_row("SELECT s FROM t WHERE id = 1", (), |r| r.get(0))?;
        assert_eq!(s, "first");
        let upserted: String = conn.query_row(
            "INSERT INTO t (id, s) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET s = t.s || excluded.s RETURNING s",
            params![1, "+more"],
            |r| r.get(0),
        )?;
        assert_eq!(upserted, "first+more", "{conn:?}");
    }
    Ok(())
}

#[test]
fn no_row_is_none_and_a_rolled_back_transaction_leaves_nothing() -> anyhow::Result<()> {
    for mut conn in both()? {
        table(&conn)?;
        let none: Option<String> = conn
            .query_row("SELECT s FROM t WHERE id = ?1", [9], |r| r.get(0))
            .optional()?;
        assert_eq!(none, None);
        {
            let tx = conn.transaction()?;
            tx.execute("INSERT INTO t (id) VALUES (1)", ())?;
            // Dropped without a commit.
        }
        let tx = conn.transaction_with_behavior(Behavior::Immediate)?;
        tx.execute("INSERT INTO t (id) VALUES (2)", ())?;
        tx.commit()?;
        let ids: Vec<i64> = conn
            .prepare_cached("SELECT id FROM t ORDER BY id")?
            .query_map((), |r| r.get(0))?
            .collect::<Result<_>>()?;
        assert_eq!(ids, vec![2], "{conn:?}");
        let mut stmt = conn.prepare_cached("SELECT 1 FROM t WHERE id = ?1")?;
        assert!(stmt.exists([2])?);
        assert!(!stmt.exists([1])?);
    }
    Ok(())
}
