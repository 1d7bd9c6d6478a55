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
//! can run out in the database), so leading work asks no query. Work that
//! writes as the leader also checks the lease's epoch in its transaction
//! (`store::instances::holds`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::store::Db;
use crate::store::instances::{self, Instance};
use crate::work::Work;

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
