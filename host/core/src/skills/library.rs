//! The skill library: every `<skills.dir>/<name>/SKILL.md`, re-read when
//! the folder changes, with its generation and change history kept in the
//! store. A bad file is reported and skipped; the rest of the library stays.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use serde::Serialize;

use super::inject;
use super::skill::{self, Skill};
use crate::clock::now_ms;
use crate::store::skills::{Attribution, SkillVersion};

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SkillProblem {
    pub id: String,
    pub path: PathBuf,
    pub error: String,
}

/// The library at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Sorted by id (a stable order for injection and for retrievers).
    pub skills: Vec<Arc<Skill>>,
    pub problems: Vec<SkillProblem>,
    pub generation: u64,
    /// Position in `skills` by id: a turn looks up each candidate the
    /// retriever ranked, and a hash beats comparing ids through 10,000
    /// skills.
    index: HashMap<String, usize>,
    /// Each skill's part of the skills block, made the first time it is
    /// injected and kept for this generation (an edit is a new generation,
    /// so a new snapshot with new entries).
    entries: Vec<OnceLock<Arc<str>>>,
}

impl Snapshot {
    /// `skills` sorted by id.
    pub fn new(skills: Vec<Arc<Skill>>, problems: Vec<SkillProblem>, generation: u64) -> Self {
        let index = skills
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        let entries = skills.iter().map(|_| OnceLock::new()).collect();
        Self {
            skills,
            problems,
            generation,
            index,
            entries,
        }
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Skill>> {
        self.index.get(id).and_then(|&i| self.skills.get(i))
    }

    /// Whether a turn of `agent` sees skill `id`: its own layer's, its
    /// team's unless its own layer has one of that name, and a shared one
    /// unless a nearer layer (its own, its team's) has one of that name.
    pub fn visible_to(&self, id: &str, agent: &crate::agent_id::AgentId) -> bool {
        use super::layer::Owner;
        let (owner, name) = super::layer::split(id);
        if !owner.seen_by(agent) {
            return false;
        }
        if agent.as_str() == crate::agent_id::DEFAULT {
            return true;
        }
        let own = || self.index.contains_key(&super::layer::id_in(agent, name));
        let team = || {
            agent.team().is_some_and(|t| {
                self.index
                    .contains_key(&Owner::Team(t.to_string()).id_of(name))
            })
        };
        match owner {
            Owner::Agent(_) => true,
            Owner::Team(_) => !own(),
            Owner::Shared => !own() && !team(),
        }
    }

    /// The part of the skills block of skill `id` ([`inject::entry`] of
    /// its body), made the first time it is asked for in this snapshot.
    pub fn entry(&self, id: &str) -> Option<Arc<str>> {
        let &i = self.index.get(id)?;
        let skill = self.skills.get(i)?;
        let entry = self.entries.get(i)?.get_or_init(|| {
            inject::entry_of(
                &skill.name,
                &skill.version.to_string(),
                &skill.description,
                &skill.body,
            )
            .into()
        });
        Some(entry.clone())
    }
}

/// Reads every skill folder under `dir`, every agent's layer
/// (`@<agent>/<name>/`) and every team's (`+<team>/<name>/`, its agents'
/// `+<team>/@<agent>/<name>/`; [`super::layer`]).
pub fn scan(dir: &Path) -> (Vec<Skill>, Vec<SkillProblem>) {
    let mut skills = Vec::new();
    let mut problems = Vec::new();
    scan_layer(
        dir,
        &super::layer::Owner::Shared,
        &mut skills,
        &mut problems,
    );
    skills.sort_by(|a, b| a.id.cmp(&b.id));
    (skills, problems)
}

/// Reads the skill folders of one layer: the shared one (where a
/// `@<agent>` folder is that agent's layer and a `+<team>` folder that
/// team's), a team's (where a `@<agent>` folder is its agent's) or an
/// agent's.
fn scan_layer(
    dir: &Path,
    owner: &super::layer::Owner,
    skills: &mut Vec<Skill>,
    problems: &mut Vec<SkillProblem>,
) {
    use super::layer::Owner;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for path in dirs {
        let id = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        // Hidden folders (editor and VCS state) are not skills.
        if id.starts_with('.') {
            continue;
        }
        let opens = match owner {
            Owner::Shared => super::layer::folder_owner(&id, None),
            Owner::Team(team) => super::layer::folder_owner(&id, Some(team)),
            Owner::Agent(_) => None,
        };
        if let Some(layer) = opens {
            match layer {
                Ok(inner) => scan_layer(&path, &inner, skills, problems),
                Err(error) => problems.push(SkillProblem {
                    id: owner.id_of(&id),
                    path,
                    error: error.to_string(),
                }),
            }
            continue;
        }
        let id = owner.id_of(&id);
        if !path.join("SKILL.md").is_file() {
            problems.push(SkillProblem {
                id,
                path: path.clone(),
                error: "no SKILL.md in this folder".into(),
            });
            continue;
        }
        match skill::load(&path) {
            Ok(s) => skills.push(Skill { id, ..s }),
            Err(error) => problems.push(SkillProblem {
                id,
                path: path.join("SKILL.md"),
                error: error.to_string(),
            }),
        }
    }
}

pub struct Library {
    pub dir: PathBuf,
    db: crate::store::Db,
    current: RwLock<Arc<Snapshot>>,
    loaded: std::sync::atomic::AtomicBool,
    /// Times the folder was read (each reads every SKILL.md).
    scans: std::sync::atomic::AtomicU64,
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
    /// Set with `canary.user_skills`: the skills the user writes are tested.
    user_tests: RwLock<Option<UserTests>>,
}

/// How the skills the user writes are tested (`canary.user_skills`).
#[derive(Clone)]
struct UserTests {
    share: f64,
    /// The turn path's canaries, read again when the library moves.
    live: Arc<crate::canary::Live>,
}

impl Library {
    /// An empty library over `dir`; [`Library::rescan`] reads it.
    pub fn new(dir: PathBuf, db: crate::store::Db) -> Arc<Self> {
        Arc::new(Self {
            dir,
            db,
            current: RwLock::new(Arc::new(Snapshot::default())),
            loaded: std::sync::atomic::AtomicBool::new(false),
            scans: std::sync::atomic::AtomicU64::new(0),
            watcher: Mutex::new(None),
            user_tests: RwLock::new(None),
        })
    }

    /// From now on a skill the user adds or changes (by hand in the folder,
    /// `metaclaw skills add|import`) starts as a candidate under test, like
    /// an evolved one (`canary.user_skills`), `share` of sessions in each
    /// arm; `live` is read again whenever the library moves, whoever moved
    /// it (another process's test is then served here too).
    pub fn test_user_changes(&self, share: f64, live: Arc<crate::canary::Live>) {
        if let Ok(mut slot) = self.user_tests.write() {
            *slot = Some(UserTests { share, live });
        }
    }

    /// Reads the folder and records what changed since the store last saw it.
    pub fn open(dir: PathBuf, db: crate::store::Db) -> Arc<Self> {
        let library = Self::new(dir, db);
        library.rescan(None);
        library
    }

    /// The store its changes are recorded in.
    pub fn db(&self) -> &crate::store::Db {
        &self.db
    }

    /// Whether the folder has been read once.
    pub fn loaded(&self) -> bool {
        self.loaded.load(std::sync::atomic::Ordering::Acquire)
    }

    /// How many times the folder has been read.
    pub fn scans(&self) -> u64 {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// Held while the folder is changed and while it is read and recorded
    /// (see [`ChangeLock`]). A writer takes it before writing and records
    /// its change with [`Library::rescan_holding`] before letting go.
    pub fn lock_changes(&self) -> ChangeLock {
        ChangeLock::take(&self.db)
    }

    /// Re-reads the folder now; `attribution` names who changed it and why
    /// when the caller knows (a CLI command), otherwise "on disk".
    pub fn rescan(&self, attribution: Option<&Attribution>) -> Arc<Snapshot> {
        let held = self.lock_changes();
        self.rescan_holding(&held, attribution)
    }

    /// [`Library::rescan`] by a caller that holds the change lock (taking it
    /// again here would wait on itself).
    pub fn rescan_holding(
        &self,
        _held: &ChangeLock,
        attribution: Option<&Attribution>,
    ) -> Arc<Snapshot> {
        let (skills, problems) = scan(&self.dir);
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let versions: Vec<SkillVersion> = skills
            .iter()
            .map(|s| SkillVersion {
                id: s.id.clone(),
                version: s.version.to_string(),
                content_hash: s.content_hash.clone(),
                created_by: s.created_by.clone(),
            })
            .collect();
        let previous = self.snapshot();
        let generation = match record(&self.dir, &self.db, &versions, attribution) {
            Ok((generation, changes)) => {
                if generation != previous.generation {
                    self.test_users_changes(&changes, &skills);
                }
                if changes.len() <= 10 {
                    for c in &changes {
                        tracing::info!(skill = %c.skill_id, "skill {} ({}: {}), generation {}", c.change, c.who, c.why, c.generation);
                    }
                } else {
                    tracing::info!(
                        "{} skills added, changed or removed; generation {generation}",
                        changes.len()
                    );
                }
                generation
            }
            Err(e) => {
                tracing::error!("cannot record skill changes: {e:#}");
                previous.generation + 1
            }
        };
        for p in &problems {
            if !previous
                .problems
                .iter()
                .any(|q| q.path == p.path && q.error == p.error)
            {
                tracing::warn!("skill {} skipped: {}", p.path.display(), p.error);
            }
        }
        let next = Arc::new(Snapshot::new(
            skills.into_iter().map(Arc::new).collect(),
            problems,
            generation,
        ));
        if let Ok(mut current) = self.current.write() {
            *current = next.clone();
        }
        self.loaded
            .store(true, std::sync::atomic::Ordering::Release);
        next
    }

    /// With `canary.user_skills`: starts the test of each skill the user
    /// added or changed in `changes`, then reads the canaries under test
    /// again. Not the built-in bank's skills, not learning's (the publish
    /// stage starts those), not a retirement or a retired skill, not an
    /// executable skill (its component chooses it; nothing withholds it),
    /// and not the library as a store first finds it (what the user had
    /// before is not withheld from them).
    fn test_users_changes(&self, changes: &[crate::store::skills::SkillChange], skills: &[Skill]) {
        let Some(tests) = self.user_tests.read().ok().and_then(|t| t.clone()) else {
            return;
        };
        let users = |c: &&crate::store::skills::SkillChange| {
            c.change != "removed"
                && c.generation > 1
                && written_by_user(&c.who)
                && skills
                    .iter()
                    .any(|s| s.id == c.skill_id && s.retired.is_none() && s.component.is_none())
        };
        let result = (|| -> anyhow::Result<()> {
            let conn = self.db.side_writer()?;
            for c in changes.iter().filter(users) {
                let Some(version) = &c.version else { continue };
                let origin = format!("{}: {}", c.who, c.why);
                let id = crate::store::experiments::start_skill(
                    &conn,
                    &c.skill_id,
                    version,
                    tests.share,
                    &origin,
                    now_ms(),
                )?;
                tracing::info!(skill = %c.skill_id, version, experiment = id, "a skill you wrote is under test (canary.user_skills)");
            }
            tests.live.reload(&conn)?;
            Ok(())
        })();
        if let Err(e) = result {
            // Fails open on serving (the skill serves everyone, as with the
            // canary off), and says so.
            tracing::error!("the skills you wrote were not put under test: {e:#}");
        }
    }

    /// Watches the folder; after a burst of changes settles (`debounce`), the
    /// library is re-read and `on_change` told when the generation moved.
    /// The watching thread belongs to `work` and ends when it stops.
    pub fn watch(
        self: &Arc<Self>,
        work: &crate::work::Work,
        debounce: Duration,
        on_change: impl Fn(Arc<Snapshot>) + Send + 'static,
    ) {
        use notify::{RecursiveMode, Watcher};
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::error!(
                "cannot create {}: {e}; skill edits need a restart",
                self.dir.display()
            );
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let tx_stop = tx.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| changes_files(&e.kind)) {
                let _ = tx.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(
                    "cannot watch {}: {e}; skill edits need a restart",
                    self.dir.display()
                );
                return;
            }
        };
        if let Err(e) = watcher.watch(&self.dir, RecursiveMode::Recursive) {
            tracing::error!(
                "cannot watch {}: {e}; skill edits need a restart",
                self.dir.display()
            );
            return;
        }
        if let Ok(mut slot) = self.watcher.lock() {
            *slot = Some(watcher);
        }
        let library = Arc::downgrade(self);
        let stop = work.token();
        // A stop sends one more message: the thread then finds the token
        // cancelled and ends (no polling for it).
        work.on_stop(move || {
            let _ = tx_stop.send(());
        });
        let spawned = work.thread("metaclaw-skills", move || {
            while rx.recv().is_ok() && !stop.is_cancelled() {
                loop {
                    // Let a burst (an editor's save, a copy of many folders) finish.
                    while rx.recv_timeout(debounce).is_ok() {}
                    if stop.is_cancelled() {
                        return;
                    }
                    let Some(library) = library.upgrade() else {
                        return;
                    };
                    let before = library.snapshot().generation;
                    let after = library.rescan(None);
                    if after.generation == before {
                        break;
                    }
                    on_change(after);
                    // Files written into a folder created moments ago can
                    // land before inotify watches that folder, and then
                    // nothing reports them: look again until nothing moves.
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!("cannot start the skills watcher: {e}");
        }
    }
}

impl Library {
    /// On a shared store: other instances change the library (an evolved
    /// skill, a retirement, a user's edit through another instance), and a
    /// shared folder's watch does not see another machine's writes. Every
    /// `every` the store's generation is read; when it moved, the folder
    /// is read again and `on_change` told. An instance injects what another
    /// wrote within `every` plus a rescan.
    pub fn follow_store(
        self: &Arc<Self>,
        work: &crate::work::Work,
        every: Duration,
        on_change: impl Fn(Arc<Snapshot>) + Send + 'static,
    ) {
        let library = Arc::downgrade(self);
        let worker = work.clone();
        let spawned = work.thread("metaclaw-skills-follow", move || {
            while worker.nap(every) {
                let Some(library) = library.upgrade() else {
                    return;
                };
                let stored = library
                    .db
                    .read()
                    .and_then(|c| Ok(crate::store::skills::generation(&c)?));
                let stored = match stored {
                    Ok(generation) => generation,
                    Err(e) => {
                        tracing::warn!("cannot read the skill library's generation: {e:#}");
                        continue;
                    }
                };
                if stored != library.snapshot().generation {
                    on_change(library.rescan(None));
                }
            }
        });
        if let Err(e) = spawned {
            tracing::error!("cannot follow the shared skill library: {e}");
        }
    }
}

/// Whether a change's author is the user (by hand, a CLI command, an
/// import) rather than metaclaw (the built-in bank, learning, a retirement).
fn written_by_user(who: &str) -> bool {
    !(who == "builtin" || who.starts_with("evolved:") || who.starts_with("retired:"))
}

/// The store's `skills` lock ([`crate::store::Db::lock`]: a `flock` on
/// `<store>.skills-lock`, an advisory lock on Postgres), shared by every
/// process and thread over that store. Without it a rescan could read the
/// folder before a change and record that read after the change was
/// recorded (the old text credited to the user as an edit, and the
/// snapshot reverted), or find a command's file before the command records
/// who wrote it. If it cannot be taken, changes are recorded unlocked and
/// a warning says so: provenance may then be wrong under concurrency;
/// nothing else depends on it.
pub struct ChangeLock {
    _held: Option<crate::store::StoreLock>,
}

impl ChangeLock {
    fn take(db: &crate::store::Db) -> Self {
        match db.lock("skills") {
            Ok(held) => Self { _held: Some(held) },
            Err(e) => {
                tracing::warn!(
                    "{e:#}; skill changes are recorded without it (who made a change may be misread while two writers race)"
                );
                Self { _held: None }
            }
        }
    }
}

/// Whether a file event can change the library. Reads are not: inotify
/// reports every open, so without this filter a rescan (which reads every
/// SKILL.md) by this process or by another one watching the same folder
/// would trigger the next rescan, forever.
fn changes_files(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

fn record(
    dir: &Path,
    db: &crate::store::Db,
    versions: &[SkillVersion],
    attribution: Option<&Attribution>,
) -> anyhow::Result<(u64, Vec<crate::store::skills::SkillChange>)> {
    let mut conn = db.side_writer()?;
    Ok(crate::store::skills::sync(
        &mut conn,
        versions,
        &|v| std::fs::read_to_string(dir.join(&v.id).join("SKILL.md")).ok(),
        attribution,
        now_ms(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, id: &str, text: &str) {
        std::fs::create_dir_all(dir.join(id)).unwrap();
        std::fs::write(dir.join(id).join("SKILL.md"), text).unwrap();
    }

    fn skill(id: &str, body: &str) -> String {
        format!("---\nname: {id}\ndescription: About {id}.\n---\n{body}\n")
    }

    #[test]
    fn each_agent_sees_the_shared_skills_and_its_own_layer_in_their_place() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        write(&dir, "alpha", &skill("alpha", "shared"));
        write(&dir, "beta", &skill("beta", "shared"));
        write(&dir, "@work/alpha", &skill("alpha", "work's own"));
        write(&dir, "@work/gamma", &skill("gamma", "work only"));
        write(&dir, "@Work/delta", &skill("delta", "not a layer"));
        write(&dir, "@home/misnamed", &skill("other", "wrong name"));
        let lib = Library::open(dir.clone(), crate::store::test_db(home.path().join("m.db")));
        let s = lib.snapshot();
        let ids: Vec<&str> = s.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["@work/alpha", "@work/gamma", "alpha", "beta"]);
        assert_eq!(s.get("@work/alpha").unwrap().name, "alpha");
        let problems: Vec<&str> = s.problems.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(problems, ["@Work", "@home/misnamed"], "{:?}", s.problems);
        let sees = |agent: &str| -> Vec<&str> {
            let agent = crate::agent_id::AgentId::parse(agent).unwrap();
            ids.iter()
                .copied()
                .filter(|id| s.visible_to(id, &agent))
                .collect()
        };
        assert_eq!(sees("work"), ["@work/alpha", "@work/gamma", "beta"]);
        assert_eq!(sees("default"), ["alpha", "beta"]);
        assert_eq!(sees("home"), ["alpha", "beta"]);
    }

    #[test]
    fn a_teams_agents_see_the_teams_layer_and_their_own_in_their_place() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        write(&dir, "alpha", &skill("alpha", "shared"));
        write(&dir, "beta", &skill("beta", "shared"));
        write(&dir, "gamma", &skill("gamma", "shared"));
        write(&dir, "+ops/alpha", &skill("alpha", "the team's"));
        write(&dir, "+ops/runbook", &skill("runbook", "the team's only"));
        write(&dir, "+ops/@alice/alpha", &skill("alpha", "alice's own"));
        write(&dir, "+ops/@alice/beta", &skill("beta", "alice's own"));
        write(&dir, "+ops/+nested/x", &skill("x", "not a layer"));
        write(&dir, "+Ops/y", &skill("y", "not a team"));
        let lib = Library::open(dir.clone(), crate::store::test_db(home.path().join("m.db")));
        let s = lib.snapshot();
        let ids: Vec<&str> = s.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "+ops/@alice/alpha",
                "+ops/@alice/beta",
                "+ops/alpha",
                "+ops/runbook",
                "alpha",
                "beta",
                "gamma"
            ]
        );
        let problems: Vec<&str> = s.problems.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(problems, ["+Ops", "+ops/+nested"], "{:?}", s.problems);
        let sees = |agent: &str| -> Vec<&str> {
            let agent = crate::agent_id::AgentId::parse(agent).unwrap();
            ids.iter()
                .copied()
                .filter(|id| s.visible_to(id, &agent))
                .collect()
        };
        // Her own over the team's over the shared.
        assert_eq!(
            sees("ops/alice"),
            [
                "+ops/@alice/alpha",
                "+ops/@alice/beta",
                "+ops/runbook",
                "gamma"
            ]
        );
        assert_eq!(
            sees("ops/bob"),
            ["+ops/alpha", "+ops/runbook", "beta", "gamma"]
        );
        assert_eq!(sees("sales/eve"), ["alpha", "beta", "gamma"]);
        assert_eq!(
            sees("ops"),
            ["alpha", "beta", "gamma"],
            "a plain agent is no team"
        );
    }

    /// Another machine's write reaches an instance through the store alone
    /// (no file watch here): within the poll's period and a rescan.
    #[test]
    fn a_library_following_the_store_reads_what_another_instance_wrote() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        write(&dir, "alpha", &skill("alpha", "A"));
        let db = crate::store::test_db(home.path().join("m.db"));
        let writer = Library::open(dir.clone(), db.clone());
        let follower = Library::open(dir.clone(), db);
        let work = crate::work::Work::new();
        let (told, heard) = std::sync::mpsc::channel();
        let every = Duration::from_millis(200);
        follower.follow_store(&work, every, move |s| {
            let _ = told.send(s.generation);
        });
        write(&dir, "beta", &skill("beta", "B"));
        let written = std::time::Instant::now();
        let generation = writer.rescan(None).generation;
        let seen = heard.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(seen, generation);
        assert!(follower.snapshot().get("beta").is_some());
        // One period and a rescan; generous for a loaded machine.
        assert!(written.elapsed() < every * 10, "{:?}", written.elapsed());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work.stop(Duration::from_secs(5)));
    }

    #[test]
    fn changes_are_recorded_once_with_a_generation() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        let db = crate::store::test_db(home.path().join("m.db"));
        write(&dir, "alpha", &skill("alpha", "A"));
        write(&dir, "beta", &skill("beta", "B"));
        write(&dir, "broken", "not a skill");
        let lib = Library::open(dir.clone(), db.clone());
        let s = lib.snapshot();
        assert_eq!(
            s.skills.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            vec!["alpha", "beta"]
        );
        assert_eq!(s.problems.len(), 1);
        assert_eq!(s.generation, 1);
        // Nothing changed: same generation.
        assert_eq!(lib.rescan(None).generation, 1);
        write(&dir, "alpha", &skill("alpha", "A, edited"));
        std::fs::remove_dir_all(dir.join("beta")).unwrap();
        let s = lib.rescan(Some(
            &Attribution::new("user", "test")
                .skill("alpha")
                .skill("beta"),
        ));
        assert_eq!(s.generation, 2);
        let conn = db.side_writer().unwrap();
        let alpha = crate::store::skills::history(&conn, "alpha").unwrap();
        assert_eq!(
            alpha.iter().map(|c| c.change.as_str()).collect::<Vec<_>>(),
            vec!["added", "changed"]
        );
        assert_eq!(alpha[1].why, "test");
        let beta = crate::store::skills::history(&conn, "beta").unwrap();
        assert_eq!(beta.last().unwrap().change, "removed");
        // A second library over the same store sees the same generation.
        assert_eq!(Library::open(dir, db).snapshot().generation, 2);
    }

    /// Provenance per file: two learning jobs, a CLI command and a user's
    /// edit interleave; each rescan, whoever runs it, credits each file
    /// to what wrote it.
    #[test]
    fn each_change_is_credited_to_what_made_it_whoever_rescans() {
        use crate::store::learning;
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        let db = crate::store::test_db(home.path().join("m.db"));
        write(&dir, "gamma", &skill("gamma", "G"));
        let lib = Library::open(dir.clone(), db.clone());
        let conn = db.side_writer().unwrap();
        let evolved = |id: &str, session: &str| {
            format!(
                "---\nname: {id}\ndescription: About {id}.\ncreated_by: \"evolved:{session}\"\n---\nLearned in {session}.\n"
            )
        };
        // A job's draft, its intent recorded, then its file renamed in.
        let draft = |id: &str, session: &str| {
            let text = evolved(id, session);
            let row: i64 = conn
                .query_row(
                    "INSERT INTO evolved_drafts (session_id, round, name, outcome, skill_id, content, at_ms)
                     VALUES (?1, 1, ?2, 'created', ?2, ?3, 0) RETURNING id",
                    crate::store::sql::params![session, id, text],
                    |r| r.get(0),
                )
                .unwrap();
            learning::writing(&conn, row, &crate::digest::sha256_hex(text.as_bytes()), 1).unwrap();
            write(&dir, id, &text);
            text
        };
        let alpha = draft("alpha", "chat-001");
        draft("beta", "chat-002");
        // The user edits gamma meanwhile; a skill no job wrote claims one.
        write(&dir, "gamma", &skill("gamma", "G, edited"));
        write(&dir, "forged", &evolved("forged", "chat-001"));
        // chat-001's rescan finds all four; it claims alpha alone.
        lib.rescan(Some(
            &Attribution::new("evolved:chat-001", "learned from session chat-001")
                .wrote("alpha", &alpha),
        ));
        // Then the watcher (no attribution) finds a third job's file, and a
        // CLI command that removed delta finds a user's removal of gamma.
        draft("delta", "chat-003");
        lib.rescan(None);
        std::fs::remove_dir_all(dir.join("delta")).unwrap();
        std::fs::remove_dir_all(dir.join("gamma")).unwrap();
        lib.rescan(Some(
            &Attribution::new("user", "metaclaw skills remove").skill("delta"),
        ));
        let last = |id: &str| {
            let h = crate::store::skills::history(&conn, id).unwrap();
            let c = h.last().unwrap().clone();
            (c.change, c.who)
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(last("alpha"), pair("added", "evolved:chat-001"));
        assert_eq!(last("beta"), pair("added", "evolved:chat-002"));
        assert_eq!(last("forged"), pair("added", "user"));
        let gamma = crate::store::skills::history(&conn, "gamma").unwrap();
        assert_eq!(
            gamma
                .iter()
                .map(|c| (c.change.as_str(), c.who.as_str()))
                .collect::<Vec<_>>(),
            vec![("added", "user"), ("changed", "user"), ("removed", "user")]
        );
        assert_eq!(gamma[1].why, "edited in the skills folder");
        assert_eq!(gamma[2].why, "removed from the skills folder");
        let delta = crate::store::skills::history(&conn, "delta").unwrap();
        assert_eq!(
            delta
                .iter()
                .map(|c| (c.change.as_str(), c.who.as_str()))
                .collect::<Vec<_>>(),
            vec![("added", "evolved:chat-003"), ("removed", "user")]
        );
        assert_eq!(delta[1].why, "metaclaw skills remove");
    }

    /// A writer (a CLI command, a learning job) changes a skill over and
    /// over while another process's watcher rescans the same folder and
    /// store without pause: every version is credited to the writer, in
    /// order, and both end on the last one. Unlocked, the watcher's read of
    /// an older text was recorded after the writer's change ("edited in the
    /// skills folder", the version reverted), or found the writer's file
    /// before the writer could say who wrote it.
    #[test]
    fn a_rescan_racing_a_writer_never_reverts_or_misattributes_a_change() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        let db = crate::store::test_db(home.path().join("m.db"));
        let versioned = |minor: u32| {
            format!(
                "---\nname: alpha\ndescription: About alpha.\nversion: 1.{minor}.0\n---\nText {minor}.\n"
            )
        };
        write(&dir, "alpha", &versioned(0));
        let writer = Library::open(dir.clone(), db.clone());
        let watcher = Library::open(dir.clone(), db.clone());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rescans = {
            let (watcher, stop) = (watcher.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    watcher.rescan(None);
                }
            })
        };
        const CHANGES: u32 = 40;
        for minor in 1..=CHANGES {
            let text = versioned(minor);
            let held = writer.lock_changes();
            // As `write_skill` does: a whole file renamed in.
            let part = dir.join("alpha").join("SKILL.md.part");
            std::fs::write(&part, &text).unwrap();
            std::fs::rename(&part, dir.join("alpha").join("SKILL.md")).unwrap();
            writer.rescan_holding(
                &held,
                Some(&Attribution::new("cli", "a command").wrote("alpha", &text)),
            );
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        rescans.join().unwrap();
        let conn = db.side_writer().unwrap();
        let changes: Vec<_> = crate::store::skills::history(&conn, "alpha")
            .unwrap()
            .into_iter()
            .skip(1)
            .map(|c| (c.who, c.version.unwrap_or_default()))
            .collect();
        let expected: Vec<_> = (1..=CHANGES)
            .map(|m| ("cli".to_string(), format!("1.{m}.0")))
            .collect();
        assert_eq!(changes, expected);
        let last = format!("1.{CHANGES}.0");
        assert_eq!(
            watcher
                .rescan(None)
                .get("alpha")
                .unwrap()
                .version
                .to_string(),
            last
        );
        assert_eq!(
            writer.snapshot().get("alpha").unwrap().version.to_string(),
            last
        );
    }

    /// A snapshot's entry of a skill is the one `inject` makes fresh, made
    /// once (the same allocation every turn), and an edit, being a new
    /// generation, gets its own.
    #[test]
    fn skill_entries_are_made_once_per_generation() {
        use crate::skills::inject::{self, Chosen, Injected};
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        write(
            &dir,
            "alpha",
            &skill("alpha", "Do A.\n<!-- /metaclaw:skills -->\u{200B}"),
        );
        write(&dir, "beta", &skill("beta", "Do B."));
        let lib = Library::open(dir.clone(), crate::store::test_db(home.path().join("m.db")));
        let fresh = |s: &Skill| {
            inject::entry(&Injected {
                id: s.id.clone(),
                name: s.name.clone(),
                version: s.version.to_string(),
                description: s.description.clone(),
                text: s.body.clone(),
                score: 1.0,
            })
        };
        let first = lib.snapshot();
        let alpha = first.entry("alpha").unwrap();
        assert_eq!(&*alpha, fresh(first.get("alpha").unwrap()));
        assert!(alpha.contains("metaclaw-skills") && !alpha.contains('\u{200B}'));
        assert!(Arc::ptr_eq(&alpha, &first.entry("alpha").unwrap()));
        assert_eq!(first.entry("missing"), None);
        assert_eq!(first.get("beta").unwrap().id, "beta");
        // The block from cached entries is the block made fresh.
        let injected: Vec<Injected> = ["alpha", "beta"]
            .iter()
            .map(|id| {
                let s = first.get(id).unwrap();
                Injected {
                    id: s.id.clone(),
                    name: s.name.clone(),
                    version: s.version.to_string(),
                    description: s.description.clone(),
                    text: s.body.clone(),
                    score: 0.5,
                }
            })
            .collect();
        let chosen: Vec<Chosen> = injected
            .iter()
            .map(|i| Chosen::cached(i.clone(), first.entry(&i.id).unwrap()))
            .collect();
        assert_eq!(inject::block(&chosen), inject::block(&injected));

        write(&dir, "alpha", &skill("alpha", "Do A, edited."));
        let second = lib.rescan(None);
        assert_eq!(second.generation, first.generation + 1);
        let edited = second.entry("alpha").unwrap();
        assert_eq!(&*edited, fresh(second.get("alpha").unwrap()));
        assert!(edited.contains("Do A, edited.") && !alpha.contains("edited"));
        // The old snapshot (a turn still using it) keeps its own.
        assert!(Arc::ptr_eq(&alpha, &first.entry("alpha").unwrap()));
    }

    /// Two libraries watching one folder (two daemons, or a daemon and
    /// anything that reads skills) must not wake each other: reading is
    /// not a change. Writing is.
    #[test]
    fn reads_do_not_trigger_rescans_but_writes_do() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        for i in 0..20 {
            write(&dir, &format!("s{i}"), &skill(&format!("s{i}"), "S"));
        }
        let a = Library::open(dir.clone(), crate::store::test_db(home.path().join("a.db")));
        let b = Library::open(dir.clone(), crate::store::test_db(home.path().join("b.db")));
        let work = crate::work::Work::new();
        a.watch(&work, Duration::from_millis(20), |_| {});
        b.watch(&work, Duration::from_millis(20), |_| {});
        // Each reads the whole folder, as a rescan does.
        a.rescan(None);
        b.rescan(None);
        for i in 0..20 {
            std::fs::read(dir.join(format!("s{i}/SKILL.md"))).unwrap();
        }
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!((a.scans(), b.scans()), (2, 2), "reads caused rescans");
        write(&dir, "s0", &skill("s0", "S, edited"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while a.scans() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(a.scans() >= 3, "a write did not cause a rescan");
        // ...and the rescans it caused settle instead of feeding each other.
        std::thread::sleep(Duration::from_millis(500));
        let settled = (a.scans(), b.scans());
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!((a.scans(), b.scans()), settled);
    }

    /// `canary.user_skills`: what the user adds or edits is put under test
    /// (and the turn path told); learning's, the built-in bank's, a
    /// retirement and the library as first found are not. Without it
    /// nothing of the user's is.
    #[test]
    fn the_users_skills_are_tested_only_when_asked() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("skills");
        let db = crate::store::test_db(home.path().join("m.db"));
        write(&dir, "mine", &skill("mine", "M"));
        let testing = || {
            let conn = db.side_writer().unwrap();
            crate::store::experiments::testing(&conn, "skill")
                .unwrap()
                .into_iter()
                .map(|e| (e.subject, e.origin))
                .collect::<Vec<_>>()
        };
        // Not asked: an edit serves everyone at once.
        let plain = Library::open(dir.clone(), db.clone());
        write(&dir, "mine", &skill("mine", "M, edited"));
        plain.rescan(None);
        assert!(testing().is_empty());
        drop(plain);

        let live = crate::canary::Live::new();
        let lib = Library::new(dir.clone(), db.clone());
        lib.test_user_changes(0.5, live.clone());
        lib.rescan(None);
        assert!(
            testing().is_empty(),
            "nothing changed since the store saw it"
        );
        // An edit by hand and a skill added by a command: both tested.
        write(&dir, "mine", &skill("mine", "M, edited again"));
        let text = skill("added", "A");
        write(&dir, "added", &text);
        lib.rescan(Some(
            &Attribution::new("user", "metaclaw skills add added").wrote("added", &text),
        ));
        assert_eq!(
            testing(),
            vec![
                (
                    "added".to_string(),
                    "user: metaclaw skills add added".to_string()
                ),
                (
                    "mine".to_string(),
                    "user: edited in the skills folder".to_string()
                )
            ]
        );
        // The turn path knows at once.
        assert_eq!(live.skills().len(), 2);
        assert!(live.skill_arm("added", &"1.0.0", "s").is_some());
        // Learning's own skill, the built-in bank's, a retirement: none.
        let (evolved, builtin) = (skill("learned", "L"), skill("shipped", "S"));
        write(&dir, "learned", &evolved);
        lib.rescan(Some(
            &Attribution::new("evolved:s-1", "learned from session s-1").wrote("learned", &evolved),
        ));
        write(&dir, "shipped", &builtin);
        lib.rescan(Some(
            &Attribution::new("builtin", "the bank").wrote("shipped", &builtin),
        ));
        let retired = skill("mine", "M, edited again").replace(
            "description: About mine.\n",
            "description: About mine.\nretired: by hand\n",
        );
        write(&dir, "mine", &retired);
        lib.rescan(None);
        let conn = db.side_writer().unwrap();
        let all = crate::store::experiments::list(&conn, 100).unwrap();
        assert_eq!(all.len(), 2, "{all:?}");
    }
}
