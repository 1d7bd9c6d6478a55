//! This instance among the others sharing its store (W3-G).
//!
//! On SQLite's file the instance is alone ([`Team::solo`]): it leads
//! everything and nothing beats. On a shared store (Postgres,
//! `store.url`) it joins the deployment ([`Team::join`]): a thread beats
//! every [`HEARTBEAT`] (the `instances` row), renews the leases of the
//! work it would lead (the trainer of each RL run, whose steps are also
//! the only ones that ask the training scheduler for windows) and hands the learning jobs of instances silent for longer
//! than [`TTL`] back to the queue. A lease that is not renewed runs out
//! after [`TTL`], and another instance takes it at its next beat: a dead
//! leader is replaced within `TTL + HEARTBEAT` (12 s).
//!
//! Whether this instance leads is answered from what its last renewal
//! said, held for [`TRUST`] after the renewal was sent (before the lease
//! can run out in the database), so leading work asks no query. The
//! trainer looks before each step, and every write of its step (the
//! training queue, the run's record) is fenced in its transaction by the
//! lease's epoch ([`Team::fence`], `store::instances::Fence`): a step
//! still running when its instance lost the lead (silent past the TTL yet
//! alive) writes nothing once another instance holds it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::store::Db;
use crate::store::instances::{self, Fence, Instance};
use crate::work::Work;

/// Another instance leads a lease (its id, or "none yet").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherLeads(pub String);

/// How often an instance says it is alive and renews its leases.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long an instance silent is still taken as alive, and how long a
/// lease lasts unrenewed. Five heartbeats: a stall of a few seconds (a
/// busy machine, a slow commit) does not pass the lead around.
pub const TTL: Duration = Duration::from_secs(10);
/// How long after a renewal was sent this instance takes itself to lead:
/// well inside the lease's TTL, so two instances never both believe it.
const TRUST: Duration = Duration::from_secs(7);
/// Stopped or silent instances are listed this long, then forgotten.
const KEEP_GONE: Duration = Duration::from_secs(24 * 3600);

/// The lease of the trainer of the RL run of `agent` ("" is the default
/// agent's run).
pub fn trainer_lease(agent: &str) -> String {
    match agent {
        "" => "trainer".to_string(),
        agent => format!("trainer:{agent}"),
    }
}

/// This instance, and what it leads. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Team {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    /// `None`: alone on its store.
    shared: Option<Shared>,
}

#[derive(Debug)]
struct Shared {
    db: Db,
    me: Instance,
    /// The leases it would hold, and what the last renewal said.
    leases: Mutex<BTreeMap<String, Held>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Held {
    /// Epoch and when the renewal that granted it was sent.
    granted: Option<(i64, Instant)>,
}

/// Who leads what, for `status`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Deployment {
    pub this: String,
    pub instances: Vec<InstanceView>,
    pub leases: Vec<instances::Lease>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InstanceView {
    #[serde(flatten)]
    pub instance: Instance,
    pub alive: bool,
    /// Seconds since its last heartbeat (database time).
    pub silent_s: f64,
}

impl Team {
    /// Alone on its store: leads everything.
    pub fn solo() -> Self {
        Self {
            inner: Arc::new(Inner {
                id: new_id(),
                shared: None,
            }),
        }
    }

    /// Joins the deployment on `db`'s shared store, serving at `listen`
    /// with its skill library in `skills_dir`: registered before it serves,
    /// beating on a thread of `work` until it stops (then marked stopped,
    /// its leases and running jobs let go).
    ///
    /// Refused when a living instance keeps its skill library in another
    /// folder: the library's history is kept once, in the store, and an
    /// instance reading another folder would record every skill it lacks
    /// as removed.
    pub fn join(
        db: &Db,
        listen: String,
        skills_dir: Option<String>,
        work: &Work,
    ) -> anyhow::Result<Self> {
        let id = new_id();
        let me = Instance {
            id: id.clone(),
            host: hostname(),
            pid: i64::from(std::process::id()),
            version: env!("CARGO_PKG_VERSION").to_string(),
            listen,
            skills_dir,
            started_ms: now_ms(),
            heartbeat_ms: now_ms(),
            clock_offset_ms: 0,
            stopped_ms: None,
        };
        let conn = db.side_writer()?;
        let now = instances::db_now_ms(&conn)?;
        let ttl = TTL.as_millis() as i64;
        let elsewhere = instances::list(&conn)?.into_iter().find(|other| {
            instances::is_alive(other, now, ttl)
                && other.skills_dir.is_some()
                && me.skills_dir.is_some()
                && other.skills_dir != me.skills_dir
        });
        if let Some(other) = elsewhere {
            anyhow::bail!(
                "instance {} ({}) keeps the skill library in {}, this one in {}: every instance sharing {} must use the same skills folder (skills.dir, on a shared filesystem) — set skills.dir to it",
                other.id,
                other.listen,
                other.skills_dir.as_deref().unwrap_or_default(),
                me.skills_dir.as_deref().unwrap_or_default(),
                db.display()
            );
        }
        instances::register(&conn, &me, now_ms())?;
        if let Err(e) = instances::forget_gone(&conn, KEEP_GONE.as_millis() as i64) {
            tracing::warn!("cannot forget long-gone instances: {e}");
        }
        drop(conn);
        let team = Self {
            inner: Arc::new(Inner {
                id,
                shared: Some(Shared {
                    db: db.clone(),
                    me,
                    leases: Mutex::new(BTreeMap::new()),
                }),
            }),
        };
        tracing::info!(instance = %team.id(), "joined the deployment on {}", db.display());
        let beating = team.clone();
        let worker = work.clone();
        work.thread("metaclaw-team", move || beating.beat(&worker))?;
        Ok(team)
    }

    /// This instance's id (the owner of the jobs it claims).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Whether other instances may share the store.
    pub fn is_shared(&self) -> bool {
        self.inner.shared.is_some()
    }

    /// This instance would lead `lease`: from the next heartbeat on it
    /// takes it whenever it is free.
    pub fn want(&self, lease: &str) {
        if let Some(shared) = &self.inner.shared
            && let Ok(mut leases) = shared.leases.lock()
        {
            leases.entry(lease.to_string()).or_default();
        }
    }

    /// The epoch under which this instance leads `lease` now, if it does
    /// (alone on its store: always, epoch 0).
    pub fn leads(&self, lease: &str) -> Option<i64> {
        let Some(shared) = &self.inner.shared else {
            return Some(0);
        };
        let leases = shared.leases.lock().ok()?;
        let (epoch, sent) = leases.get(lease)?.granted?;
        (sent.elapsed() < TRUST).then_some(epoch)
    }

    /// The fence of the writes this instance makes as `lease`'s leader:
    /// `Ok(None)` alone on its store (nothing to fence); `Err` names who
    /// leads instead (or "none yet").
    pub fn fence(&self, lease: &str) -> Result<Option<Fence>, OtherLeads> {
        match (self.is_shared(), self.leads(lease)) {
            (false, _) => Ok(None),
            (true, Some(epoch)) => Ok(Some(Fence {
                lease: lease.to_string(),
                holder: self.id().to_string(),
                epoch,
            })),
            (true, None) => Err(OtherLeads(
                self.leader_of(lease).unwrap_or_else(|| "none yet".into()),
            )),
        }
    }

    /// Who leads: the holder of `lease`, if anyone (for messages).
    pub fn leader_of(&self, lease: &str) -> Option<String> {
        let shared = self.inner.shared.as_ref()?;
        let conn = shared.db.read().ok()?;
        instances::leases(&conn)
            .ok()?
            .into_iter()
            .find(|l| l.name == lease)
            .map(|l| l.holder)
    }

    /// The deployment as the store says (`status`): `None` alone.
    pub fn deployment(&self) -> Option<anyhow::Result<Deployment>> {
        let shared = self.inner.shared.as_ref()?;
        Some((|| {
            let conn = shared.db.read()?;
            let now = instances::db_now_ms(&conn)?;
            let ttl = TTL.as_millis() as i64;
            let instances = instances::list(&conn)?
                .into_iter()
                .map(|instance| InstanceView {
                    alive: instances::is_alive(&instance, now, ttl),
                    silent_s: (now - instance.heartbeat_ms).max(0) as f64 / 1000.0,
                    instance,
                })
                .collect();
            Ok(Deployment {
                this: self.inner.id.clone(),
                instances,
                leases: instances::leases(&conn)?,
            })
        })())
    }

    /// The heartbeat thread's loop, until the work stops.
    fn beat(&self, work: &Work) {
        let Some(shared) = &self.inner.shared else {
            return;
        };
        loop {
            if let Err(e) = self.beat_once(shared) {
                tracing::warn!("cannot reach the shared store to beat: {e:#}");
            }
            if !work.nap(HEARTBEAT) {
                break;
            }
        }
        match shared.db.side_writer() {
            Ok(mut conn) => {
                if let Err(e) = instances::stopped(&mut conn, &self.inner.id) {
                    tracing::warn!("cannot mark this instance stopped: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot mark this instance stopped: {e:#}"),
        }
    }

    fn beat_once(&self, shared: &Shared) -> anyhow::Result<()> {
        let conn = shared.db.side_writer()?;
        if instances::heartbeat(&conn, &self.inner.id, now_ms())?.is_none() {
            // Its row was forgotten (silent for a day, or removed by hand):
            // registered again.
            instances::register(&conn, &shared.me, now_ms())?;
        }
        let wanted: Vec<String> = match shared.leases.lock() {
            Ok(leases) => leases.keys().cloned().collect(),
            Err(_) => Vec::new(),
        };
        let ttl = TTL.as_millis() as i64;
        for name in wanted {
            let sent = Instant::now();
            let granted = instances::acquire(&conn, &name, &self.inner.id, ttl)?;
            let was = self.leads(&name);
            if let Ok(mut leases) = shared.leases.lock() {
                leases.insert(
                    name.clone(),
                    Held {
                        granted: granted.map(|epoch| (epoch, sent)),
                    },
                );
            }
            match (was, granted) {
                (None, Some(epoch)) => tracing::info!(lease = %name, epoch, "this instance leads"),
                (Some(_), None) => tracing::warn!(lease = %name, "another instance leads now"),
                _ => {}
            }
        }
        let back = crate::store::jobs::recover_from_gone(&conn, ttl)?;
        if back > 0 {
            tracing::info!("{back} learning job(s) of a silent instance queued again");
        }
        Ok(())
    }
}

/// A new instance id: host, process and a random part (a restarted
/// process is a new instance: the old one's claims are not its own).
fn new_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{}-{}-{}", hostname(), std::process::id(), &random[..8])
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string())
}

/// What `doctor` finds about a shared store: each check's finding, or what
/// is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Ok(String),
    Warning { problem: String, fix: String },
    Error { problem: String, fix: String },
}

/// Checks a shared store for `doctor`: reachable, migrated, the
/// privileges metaclaw needs, and the clocks of this machine and of the
/// living instances against the database's. One finding per check, named.
pub fn check_database(db: &Db) -> Vec<(&'static str, Finding)> {
    use crate::store::sql::Conn;
    let mut out = Vec::new();
    let shown = db.display().to_string();
    let conn = match db.connect() {
        Ok(conn) => conn,
        Err(e) => {
            out.push((
                "database",
                Finding::Error {
                    problem: format!("cannot reach {shown}: {e:#}"),
                    fix: "start Postgres, or correct store.url (best set as METACLAW_STORE_URL)"
                        .into(),
                },
            ));
            return out;
        }
    };
    out.push(("database", Finding::Ok(format!("{shown} answers"))));
    let (version, latest) = match db.schema_version(&conn) {
        Ok(v) => v,
        Err(e) => {
            out.push((
                "schema",
                Finding::Error {
                    problem: format!("cannot read the schema's version: {e:#}"),
                    fix: "give store.url's user access to the database".into(),
                },
            ));
            return out;
        }
    };
    let create = || -> crate::store::sql::Result<bool> {
        conn.query_row(
            "SELECT has_database_privilege(current_database(), 'CREATE')
                    AND has_schema_privilege(current_schema(), 'CREATE')",
            (),
            |r| r.get(0),
        )
    };
    let schema = match version {
        0 => match create() {
            Ok(true) => Finding::Ok("no metaclaw data yet: the first `metaclaw start` creates the schema".into()),
            Ok(false) => Finding::Error {
                problem: "no metaclaw data yet, and store.url's user cannot create tables".into(),
                fix: "grant it CREATE on the database and its schema, or run the first start as the database's owner".into(),
            },
            Err(e) => Finding::Error { problem: format!("cannot read privileges: {e}"), fix: "check store.url's user".into() },
        },
        v if v > latest => Finding::Error {
            problem: format!("the schema is at version {v}, written by a newer metaclaw (this one knows {latest})"),
            fix: "upgrade this metaclaw to the version the other instances run".into(),
        },
        v if v < latest => match create() {
            Ok(true) => Finding::Ok(format!("schema version {v}: the next `metaclaw start` migrates it to {latest} (once, whichever instance starts first)")),
            _ => Finding::Error {
                problem: format!("schema version {v} needs migrating to {latest}, and store.url's user cannot create tables"),
                fix: "grant it CREATE on the database and its schema, or start once as the database's owner".into(),
            },
        },
        v => Finding::Ok(format!("schema version {v}, up to date")),
    };
    out.push(("schema", schema));
    if version > 0 {
        out.push(("privileges", table_privileges(&conn)));
    }
    out.push(("clock", clocks(&conn, version > 0)));
    fn table_privileges(conn: &Conn) -> Finding {
        let missing = (|| -> crate::store::sql::Result<Vec<String>> {
            let mut stmt = conn.prepare(
                "SELECT c.relname::TEXT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = current_schema() AND c.relkind = 'r'
                   -- (one privilege a call: a list is true if any is held)
                   AND NOT (has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
                            AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE'))
                 ORDER BY 1",
            )?;
            let rows = stmt.query_map((), |r| r.get(0))?;
            rows.collect()
        })();
        match missing {
            Ok(missing) if missing.is_empty() => {
                Finding::Ok("store.url's user reads and writes every table".into())
            }
            Ok(missing) => Finding::Error {
                problem: format!(
                    "store.url's user cannot read and write {}",
                    missing.join(", ")
                ),
                fix: "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO that user (and USAGE on its sequences)".into(),
            },
            Err(e) => Finding::Error {
                problem: format!("cannot read the tables' privileges: {e}"),
                fix: "check store.url's user".into(),
            },
        }
    }
    fn clocks(conn: &Conn, migrated: bool) -> Finding {
        // Leases and heartbeats use the database's clock; a turn's times
        // and an idle end use the instance's: skew moves those.
        const SKEW_MS: i64 = 2_000;
        let measured = (|| -> crate::store::sql::Result<(i64, Vec<Instance>)> {
            let before = now_ms();
            let db_now = instances::db_now_ms(conn)?;
            let after = now_ms();
            let here = (before + after) / 2 - db_now;
            let others = match migrated {
                true => instances::list(conn)?
                    .into_iter()
                    .filter(|i| instances::is_alive(i, db_now, TTL.as_millis() as i64))
                    .collect(),
                false => Vec::new(),
            };
            Ok((here, others))
        })();
        let (here, others) = match measured {
            Ok(m) => m,
            Err(e) => {
                return Finding::Error {
                    problem: format!("cannot read the database's clock: {e}"),
                    fix: "check store.url's user".into(),
                };
            }
        };
        let mut off: Vec<String> = others
            .iter()
            .filter(|i| i.clock_offset_ms.abs() > SKEW_MS)
            .map(|i| {
                format!(
                    "instance {} on {} ({:+} ms)",
                    i.id, i.host, i.clock_offset_ms
                )
            })
            .collect();
        if here.abs() > SKEW_MS {
            off.insert(0, format!("this machine ({here:+} ms)"));
        }
        let worst = others
            .iter()
            .map(|i| i.clock_offset_ms.abs())
            .chain([here.abs()])
            .max()
            .unwrap_or(0);
        match off.is_empty() {
            true => Finding::Ok(format!(
                "this machine and {} living instance(s) within {worst} ms of the database's clock",
                others.len()
            )),
            false => Finding::Warning {
                problem: format!(
                    "clocks differ from the database's by more than {SKEW_MS} ms: {}",
                    off.join(", ")
                ),
                fix: "run NTP (chrony, systemd-timesyncd) on every machine; leases use the database's clock, but turn times and idle ends use each instance's".into(),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding<'a>(found: &'a [(&'static str, Finding)], check: &str) -> &'a Finding {
        &found
            .iter()
            .find(|(c, _)| *c == check)
            .unwrap_or_else(|| panic!("no {check} finding in {found:?}"))
            .1
    }

    /// `doctor` on a team's store, always on Postgres (the test script
    /// installs it): a new database, a migrated one, a user that may not
    /// write, and a database that does not answer.
    #[test]
    fn doctor_finds_what_a_shared_store_lacks() {
        let url = metaclaw_pg_cluster::fresh_database().unwrap();
        let db = Db::postgres(&url);
        let found = check_database(&db);
        assert!(matches!(finding(&found, "database"), Finding::Ok(_)));
        assert!(
            matches!(finding(&found, "schema"), Finding::Ok(m) if m.contains("no metaclaw data yet")),
            "{found:?}"
        );
        assert!(
            matches!(finding(&found, "clock"), Finding::Ok(_)),
            "{found:?}"
        );

        drop(db.side_writer().unwrap()); // migrated
        let found = check_database(&db);
        assert!(
            matches!(finding(&found, "schema"), Finding::Ok(m) if m.contains("up to date")),
            "{found:?}"
        );
        assert!(
            matches!(finding(&found, "privileges"), Finding::Ok(_)),
            "{found:?}"
        );

        // A user that may connect and read, not write.
        let conn = db.side_writer().unwrap();
        conn.execute_batch(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'metaclaw_reader') THEN
                     CREATE ROLE metaclaw_reader LOGIN;
                 END IF;
             END $$;
             GRANT SELECT ON ALL TABLES IN SCHEMA public TO metaclaw_reader;",
        )
        .unwrap();
        let reader =
            Db::postgres(&url.replace("postgres://postgres@", "postgres://metaclaw_reader@"));
        let found = check_database(&reader);
        match finding(&found, "privileges") {
            Finding::Error { problem, .. } => {
                assert!(problem.contains("turns"), "{problem}")
            }
            other => panic!("a reader may not write: {other:?}"),
        }

        // Nothing listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let gone = Db::postgres(&format!("postgres://postgres@127.0.0.1:{port}/x"));
        let found = check_database(&gone);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(matches!(finding(&found, "database"), Finding::Error { .. }));
    }

    /// Two instances on one store: one leads a lease at a time; when the
    /// leader stops, the other leads within a heartbeat or two.
    #[test]
    fn the_lead_passes_to_another_instance_when_its_holder_stops() {
        let url = metaclaw_pg_cluster::fresh_database().unwrap();
        let db = Db::postgres(&url);
        drop(db.side_writer().unwrap());
        let (work_a, work_b) = (Work::new(), Work::new());
        let a = Team::join(&db, "127.0.0.1:1".into(), Some("/skills".into()), &work_a).unwrap();
        let b = Team::join(&db, "127.0.0.1:2".into(), Some("/skills".into()), &work_b).unwrap();
        // Another folder for the skill library is refused.
        let work_c = Work::new();
        let refused = Team::join(
            &db,
            "127.0.0.1:3".into(),
            Some("/elsewhere".into()),
            &work_c,
        );
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("same skills folder")),
            "{refused:?}"
        );
        a.want("trainer");
        // Taken at a's next beat; b wants it only once a holds it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while a.leads("trainer").is_none() {
            assert!(Instant::now() < deadline, "a never led");
            std::thread::sleep(Duration::from_millis(50));
        }
        b.want("trainer");
        std::thread::sleep(HEARTBEAT * 2);
        assert!(b.leads("trainer").is_none(), "two leaders");
        let deployment = b.deployment().unwrap().unwrap();
        assert_eq!(
            deployment.instances.iter().filter(|i| i.alive).count(),
            2,
            "{deployment:?}"
        );
        assert_eq!(deployment.leases[0].holder, a.id());
        // a stops cleanly: it lets go, and b leads (a new epoch).
        drop(tokio_free_stop(work_a));
        let deadline = Instant::now() + TTL + HEARTBEAT * 3;
        let epoch = loop {
            if let Some(epoch) = b.leads("trainer") {
                break epoch;
            }
            assert!(Instant::now() < deadline, "b never took the lead");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(epoch, 2);
        let stopped = b.deployment().unwrap().unwrap();
        assert!(
            stopped
                .instances
                .iter()
                .any(|i| i.instance.id == a.id() && !i.alive && i.instance.stopped_ms.is_some()),
            "{stopped:?}"
        );
        drop(tokio_free_stop(work_b));
    }

    /// Stops `work` from a plain thread (the test has no runtime).
    fn tokio_free_stop(work: Work) -> Work {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(work.stop(Duration::from_secs(10)));
        work
    }
}
