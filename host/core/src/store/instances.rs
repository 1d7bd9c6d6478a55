//! The instances sharing one store, and the leases through which one of
//! them at a time leads the work that must run once per deployment.
//!
//! Every time here is the database's clock ([`db_now_ms`]): instances on
//! different machines disagree about the time, the database does not. An
//! instance is alive while its heartbeat is younger than the TTL it is
//! judged by; a lease is held until its `expires_ms`, renewed by its holder
//! and taken by another instance only once it has run out. A new holder
//! raises the lease's `epoch`: work fenced by the epoch it started under
//! commits only while that epoch still holds ([`Fence`]).

use super::sql::{Backend, Conn, Optional, Result, params};

/// One instance, as it last said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Instance {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub version: String,
    /// Where it serves (`host:port`).
    pub listen: String,
    /// The skill library's folder (`None`: skills are off).
    pub skills_dir: Option<String>,
    pub started_ms: i64,
    pub heartbeat_ms: i64,
    /// Its clock minus the database's, at its last heartbeat.
    pub clock_offset_ms: i64,
    /// Set when it stopped cleanly.
    pub stopped_ms: Option<i64>,
}

/// A lease and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub epoch: i64,
    pub acquired_ms: i64,
    pub expires_ms: i64,
}

/// The database's clock, in ms since the epoch (SQLite's store is one
/// machine's file: that machine's clock).
pub fn db_now_ms(conn: &Conn) -> Result<i64> {
    match conn.backend() {
        Backend::Sqlite => Ok(crate::clock::now_ms()),
        Backend::Postgres => conn.query_row(
            "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            (),
            |r| r.get(0),
        ),
    }
}

/// Records this instance as started (its first heartbeat); `local_ms` is
/// its own clock, for the offset.
pub fn register(conn: &Conn, me: &Instance, local_ms: i64) -> Result<i64> {
    let now = db_now_ms(conn)?;
    conn.execute(
        "INSERT INTO instances (id, host, pid, version, listen, started_ms, heartbeat_ms, clock_offset_ms,
                                skills_dir)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8)
         ON CONFLICT(id) DO UPDATE SET heartbeat_ms = excluded.heartbeat_ms,
             clock_offset_ms = excluded.clock_offset_ms, stopped_ms = NULL",
        params![
            me.id,
            me.host,
            me.pid,
            me.version,
            me.listen,
            now,
            local_ms - now,
            me.skills_dir
        ],
    )?;
    Ok(now)
}

/// This instance is alive: its heartbeat, and its clock's offset. Returns
/// the database's time, or `None` when its row is gone (a `forget`).
pub fn heartbeat(conn: &Conn, id: &str, local_ms: i64) -> Result<Option<i64>> {
    let now = db_now_ms(conn)?;
    let n = conn.execute(
        "UPDATE instances SET heartbeat_ms = ?2, clock_offset_ms = ?3, stopped_ms = NULL WHERE id = ?1",
        params![id, now, local_ms - now],
    )?;
    Ok((n > 0).then_some(now))
}

/// This instance stopped cleanly: marked stopped, its leases let go (so
/// another instance leads at once, not after the TTL), its running jobs
/// handed back.
pub fn stopped(conn: &mut Conn, id: &str) -> Result<()> {
    let tx = conn.transaction()?;
    let now = db_now_ms(&tx)?;
    tx.execute(
        "UPDATE instances SET stopped_ms = ?2 WHERE id = ?1",
        params![id, now],
    )?;
    // Let go, not forgotten: the next holder's epoch is still higher.
    tx.execute("UPDATE leases SET expires_ms = 0 WHERE holder = ?1", [id])?;
    tx.execute(
        "UPDATE learning_jobs SET state = 'queued', not_before_ms = ?2, claimed_by = NULL
         WHERE state = 'running' AND claimed_by = ?1",
        params![id, now],
    )?;
    tx.commit()
}

/// Every instance that ever started on this store, the newest first.
pub fn list(conn: &Conn) -> Result<Vec<Instance>> {
    let mut stmt = conn.prepare(
        "SELECT id, host, pid, version, listen, started_ms, heartbeat_ms, clock_offset_ms, stopped_ms,
                skills_dir
         FROM instances ORDER BY started_ms DESC, id",
    )?;
    let rows = stmt.query_map((), |r| {
        Ok(Instance {
            id: r.get(0)?,
            host: r.get(1)?,
            pid: r.get(2)?,
            version: r.get(3)?,
            listen: r.get(4)?,
            started_ms: r.get(5)?,
            heartbeat_ms: r.get(6)?,
            clock_offset_ms: r.get(7)?,
            stopped_ms: r.get(8)?,
            skills_dir: r.get(9)?,
        })
    })?;
    rows.collect()
}

/// Whether `instance` is alive at `now` (database time) for a heartbeat
/// TTL of `ttl_ms`.
pub fn is_alive(instance: &Instance, now: i64, ttl_ms: i64) -> bool {
    instance.stopped_ms.is_none() && instance.heartbeat_ms >= now - ttl_ms
}

/// Drops the rows of instances stopped or silent for longer than
/// `keep_ms` (their history is in the log, not here). Returns how many.
pub fn forget_gone(conn: &Conn, keep_ms: i64) -> Result<usize> {
    let now = db_now_ms(conn)?;
    conn.execute(
        "DELETE FROM instances WHERE heartbeat_ms < ?1",
        [now - keep_ms],
    )
}

/// Takes or renews lease `name` for `holder` for `ttl_ms`: granted when it
/// is free, run out, or already `holder`'s. Returns the epoch held (the
/// same while renewed in time, one more at each new grant), or `None` when
/// another instance holds it.
pub fn acquire(conn: &Conn, name: &str, holder: &str, ttl_ms: i64) -> Result<Option<i64>> {
    let now = db_now_ms(conn)?;
    conn.prepare_cached(
        "INSERT INTO leases (name, holder, epoch, acquired_ms, expires_ms)
         VALUES (?1, ?2, 1, ?3, ?4)
         ON CONFLICT(name) DO UPDATE SET
             epoch = CASE WHEN leases.holder = excluded.holder AND leases.expires_ms >= excluded.acquired_ms
                          THEN leases.epoch ELSE leases.epoch + 1 END,
             acquired_ms = CASE WHEN leases.holder = excluded.holder AND leases.expires_ms >= excluded.acquired_ms
                                THEN leases.acquired_ms ELSE excluded.acquired_ms END,
             holder = excluded.holder,
             expires_ms = excluded.expires_ms
         WHERE leases.holder = excluded.holder OR leases.expires_ms < excluded.acquired_ms
         RETURNING epoch",
    )?
    .query_row(params![name, holder, now, now + ttl_ms], |r| r.get(0))
    .optional()
}

/// Lets go of lease `name` if `holder` holds it (it runs out now; the row
/// stays, so the next grant's epoch is higher).
pub fn release(conn: &Conn, name: &str, holder: &str) -> Result<()> {
    conn.execute(
        "UPDATE leases SET expires_ms = 0 WHERE name = ?1 AND holder = ?2",
        params![name, holder],
    )?;
    Ok(())
}

/// A leader's hold on a lease, as it was granted: the fence of the
/// leader's writes. A write made under it commits only while the lease is
/// still this holder's under this epoch ([`fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub lease: String,
    pub holder: String,
    pub epoch: i64,
}

impl Fence {
    /// In the caller's transaction: the lease is still held under this
    /// fence's epoch and has not run out, and its row is locked until the
    /// commit (on Postgres another instance's grant waits for that commit,
    /// so a write is either before the new epoch or refused).
    pub fn check(&self, conn: &Conn) -> Result<()> {
        let now = db_now_ms(conn)?;
        let n = conn
            .prepare_cached(
                "UPDATE leases SET holder = holder
                 WHERE name = ?1 AND holder = ?2 AND epoch = ?3 AND expires_ms >= ?4",
            )?
            .execute(params![self.lease, self.holder, self.epoch, now])?;
        match n {
            0 => Err(super::sql::Error::Fenced(format!(
                "this instance no longer leads {} (epoch {} has passed or run out): \
                 nothing of the write was kept",
                self.lease, self.epoch
            ))),
            _ => Ok(()),
        }
    }
}

/// `write` in one transaction, after checking `fence` in it (`None`: an
/// instance alone on its store, or work that is nobody's lead). `conn` must
/// not be inside a transaction already.
pub fn fenced<T, E: From<super::sql::Error>>(
    conn: &Conn,
    fence: Option<&Fence>,
    write: impl FnOnce(&Conn) -> Result<T, E>,
) -> Result<T, E> {
    let tx = conn.unchecked_transaction()?;
    if let Some(fence) = fence {
        fence.check(&tx)?;
    }
    let out = write(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// The leases held now, by name.
pub fn leases(conn: &Conn) -> Result<Vec<Lease>> {
    let now = db_now_ms(conn)?;
    let mut stmt = conn.prepare(
        "SELECT name, holder, epoch, acquired_ms, expires_ms FROM leases
         WHERE expires_ms >= ?1 ORDER BY name",
    )?;
    let rows = stmt.query_map([now], |r| {
        Ok(Lease {
            name: r.get(0)?,
            holder: r.get(1)?,
            epoch: r.get(2)?,
            acquired_ms: r.get(3)?,
            expires_ms: r.get(4)?,
        })
    })?;
    rows.collect()
}

/// An instance as a test registers it.
#[cfg(test)]
pub(crate) fn test_instance(id: &str) -> Instance {
    Instance {
        id: id.into(),
        host: "h".into(),
        pid: 1,
        version: "0".into(),
        listen: "127.0.0.1:1".into(),
        skills_dir: None,
        started_ms: 0,
        heartbeat_ms: 0,
        clock_offset_ms: 0,
        stopped_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(id: &str) -> Instance {
        test_instance(id)
    }

    fn db() -> (tempfile::TempDir, Conn) {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(dir.path().join("s.db"));
        let conn = db.side_writer().unwrap();
        (dir, conn)
    }

    #[test]
    fn a_lease_is_held_by_one_until_it_runs_out_and_a_new_holder_raises_its_epoch() {
        let (_dir, conn) = db();
        let a = acquire(&conn, "trainer", "a", 60_000).unwrap();
        assert_eq!(a, Some(1));
        assert_eq!(acquire(&conn, "trainer", "b", 60_000).unwrap(), None);
        // Renewing keeps the epoch.
        assert_eq!(acquire(&conn, "trainer", "a", 60_000).unwrap(), Some(1));
        let fence = |holder: &str, epoch| Fence {
            lease: "trainer".into(),
            holder: holder.into(),
            epoch,
        };
        let holds = |holder: &str, epoch| fence(holder, epoch).check(&conn).is_ok();
        assert!(holds("a", 1));
        // Run out (a TTL in the past): b takes it, and a's fence fails.
        assert_eq!(acquire(&conn, "trainer", "a", -10).unwrap(), Some(1));
        assert_eq!(acquire(&conn, "trainer", "b", 60_000).unwrap(), Some(2));
        assert!(!holds("a", 1));
        assert!(holds("b", 2));
        // Other leases are independent; a release frees at once, and the
        // next grant is a new epoch (a fence of b's never passes again).
        assert_eq!(acquire(&conn, "scheduler", "a", 60_000).unwrap(), Some(1));
        release(&conn, "trainer", "b").unwrap();
        assert!(!holds("b", 2));
        assert_eq!(acquire(&conn, "trainer", "a", 60_000).unwrap(), Some(3));
        let names: Vec<_> = leases(&conn).unwrap().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["scheduler", "trainer"]);
    }

    #[test]
    fn instances_beat_and_a_clean_stop_lets_go_of_what_they_held() {
        let (_dir, mut conn) = db();
        let now = register(&conn, &me("a"), 1_000).unwrap();
        register(&conn, &me("b"), 1_000).unwrap();
        assert!(heartbeat(&conn, "a", now + 250).unwrap().is_some());
        assert_eq!(heartbeat(&conn, "nobody", now).unwrap(), None);
        acquire(&conn, "scheduler", "a", 60_000).unwrap();
        stopped(&mut conn, "a").unwrap();
        let all = list(&conn).unwrap();
        let a = all.iter().find(|i| i.id == "a").unwrap();
        let b = all.iter().find(|i| i.id == "b").unwrap();
        let now = db_now_ms(&conn).unwrap();
        assert!(!is_alive(a, now, 10_000), "a stopped");
        assert!(is_alive(b, now, 10_000));
        assert!(!is_alive(b, now + 20_000, 10_000), "b went silent");
        assert!(leases(&conn).unwrap().is_empty(), "a's lease is free");
    }
}
