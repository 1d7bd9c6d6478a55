//! Database schema, as ordered migrations. `PRAGMA user_version` is the
//! number of migrations applied; each runs in its own transaction.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: sessions, turns, content-addressed message blobs, session events.
    r#"
    CREATE TABLE sessions (
        id                 TEXT PRIMARY KEY,
        base_key           TEXT NOT NULL,
        agent_session_id   TEXT,
        source             TEXT NOT NULL,
        window_index       INTEGER NOT NULL DEFAULT 0,
        status             TEXT NOT NULL DEFAULT 'active',
        started_at_ms      INTEGER NOT NULL,
        last_activity_ms   INTEGER NOT NULL,
        ended_at_ms        INTEGER,
        end_reason         TEXT,
        turn_count         INTEGER NOT NULL DEFAULT 0,
        main_turns         INTEGER NOT NULL DEFAULT 0,
        last_message_count INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_base ON sessions(base_key, window_index);
    CREATE INDEX sessions_by_activity ON sessions(last_activity_ms);
    CREATE INDEX sessions_by_agent ON sessions(agent_session_id);
    CREATE INDEX sessions_by_status ON sessions(status);

    CREATE TABLE turns (
        id               TEXT PRIMARY KEY,
        session_id       TEXT NOT NULL REFERENCES sessions(id),
        seq              INTEGER NOT NULL,
        turn_type        TEXT NOT NULL,
        api              TEXT NOT NULL,
        model            TEXT,
        upstream_model   TEXT,
        stream           INTEGER NOT NULL,
        status           TEXT NOT NULL,
        http_status      INTEGER,
        error            TEXT,
        request_messages TEXT NOT NULL,
        tools_blob       TEXT,
        request_params   TEXT NOT NULL,
        response         TEXT,
        usage            TEXT,
        user_summary     TEXT,
        response_summary TEXT,
        started_at_ms    INTEGER NOT NULL,
        finished_at_ms   INTEGER NOT NULL,
        total_ms         REAL NOT NULL,
        upstream_ms      REAL,
        ttft_ms          REAL
    );
    CREATE INDEX turns_by_session ON turns(session_id, seq);

    -- Messages, tool lists and system prompts, stored once by the sha256 of
    -- their JSON: an agent resends its whole history (and a ~50 KB system
    -- prompt) on every call, so storing turns whole would grow as O(n^2).
    CREATE TABLE blobs (
        hash TEXT PRIMARY KEY,
        json TEXT NOT NULL
    ) WITHOUT ROWID;

    -- Lifecycle events later stages consume (a session's end starts learning).
    CREATE TABLE session_events (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        kind       TEXT NOT NULL,
        reason     TEXT,
        at_ms      INTEGER NOT NULL
    );
    CREATE INDEX session_events_by_session ON session_events(session_id);
    "#,
    // 2: rewards per turn (scorer plugins now, the judge later).
    r#"
    CREATE TABLE turn_rewards (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        turn_id       TEXT NOT NULL REFERENCES turns(id),
        source        TEXT NOT NULL,
        value         REAL NOT NULL,
        label         TEXT NOT NULL,
        rationale     TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL
    );
    CREATE INDEX turn_rewards_by_turn ON turn_rewards(turn_id);
    -- When the turn's outcome was scored (its next state known).
    ALTER TABLE turns ADD COLUMN scored_at_ms INTEGER;
    "#,
    // 3: the skill library's state, its change history, and what each turn
    // was given.
    r#"
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    -- The library as last seen: a change is any difference from this.
    CREATE TABLE skill_state (
        skill_id      TEXT PRIMARY KEY,
        version       TEXT NOT NULL,
        content_hash  TEXT NOT NULL,
        created_by    TEXT NOT NULL,
        updated_at_ms INTEGER NOT NULL
    );
    CREATE TABLE skill_changes (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        skill_id     TEXT NOT NULL,
        change       TEXT NOT NULL,
        version      TEXT,
        content_hash TEXT,
        who          TEXT NOT NULL,
        why          TEXT NOT NULL,
        generation   INTEGER NOT NULL,
        at_ms        INTEGER NOT NULL
    );
    CREATE INDEX skill_changes_by_skill ON skill_changes(skill_id, id);
    -- [{"id", "version", "score"}] of the skills injected into the turn.
    ALTER TABLE turns ADD COLUMN injected_skills TEXT;
    "#,
    // 4: embeddings of indexed texts, by model and content hash.
    r#"
    CREATE TABLE embeddings (
        key       BLOB PRIMARY KEY,   -- sha256(model id, 0, text)
        model     TEXT NOT NULL,
        dim       INTEGER NOT NULL,
        vector    BLOB NOT NULL,      -- little-endian f32
        used_ms   INTEGER NOT NULL
    ) WITHOUT ROWID;
    "#,
    // 5: learning from ended sessions: jobs and their stages, the judge's
    // verdicts, combined turn rewards, and what evolution made.
    r#"
    CREATE TABLE learning_jobs (
        session_id    TEXT PRIMARY KEY REFERENCES sessions(id),
        state         TEXT NOT NULL,      -- queued | running | done | failed
        -- A session that reopens and ends again is learned from again: the
        -- next round (its stages are recorded per round).
        round         INTEGER NOT NULL DEFAULT 1,
        -- Ended again while running: queue the next round when this one ends.
        again         INTEGER NOT NULL DEFAULT 0,
        attempts      INTEGER NOT NULL DEFAULT 0,
        not_before_ms INTEGER NOT NULL,   -- queued: not to start before this
        enqueued_ms   INTEGER NOT NULL,
        started_ms    INTEGER,
        finished_ms   INTEGER,
        error         TEXT
    );
    CREATE INDEX learning_jobs_ready ON learning_jobs(state, not_before_ms);
    -- A stage writes its results and its row here in one transaction: after
    -- a crash the job resumes at the first stage without a row, so nothing
    -- is done twice.
    CREATE TABLE learning_stages (
        session_id TEXT NOT NULL REFERENCES learning_jobs(session_id),
        round      INTEGER NOT NULL,
        stage      TEXT NOT NULL,
        done_ms    INTEGER NOT NULL,
        summary    TEXT,
        PRIMARY KEY (session_id, round, stage)
    ) WITHOUT ROWID;
    -- The judge's verdict on a main turn: the majority of its votes.
    CREATE TABLE turn_judgments (
        turn_id        TEXT PRIMARY KEY REFERENCES turns(id),
        value          INTEGER NOT NULL,  -- -1, 0 or 1
        votes          TEXT NOT NULL,     -- [{"score", "rationale"}], JSON
        rationale      TEXT NOT NULL,
        -- What the verdict could see after the answer: next-user-message,
        -- tool-results, both, or none (the session's last turn).
        evidence       TEXT NOT NULL,
        model          TEXT NOT NULL,
        prompt_version TEXT NOT NULL,
        at_ms          INTEGER NOT NULL
    );
    -- The turn's one reward: judge and scorers combined (learning.reward).
    ALTER TABLE turns ADD COLUMN reward REAL;
    -- Skill drafts from a session's evolution and what became of them. A
    -- kept draft carries the SKILL.md to write; `written_ms` is set once it
    -- is on disk, so a crash between the two writes it at the next start.
    CREATE TABLE evolved_drafts (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id  TEXT NOT NULL,
        round       INTEGER NOT NULL,
        name        TEXT NOT NULL,
        outcome     TEXT NOT NULL,        -- created | updated | rejected
        skill_id    TEXT,
        version     TEXT,
        reason      TEXT,
        content     TEXT,
        -- sha256 of the SKILL.md an update replaces (NULL for a new skill).
        base_hash   TEXT,
        written_ms  INTEGER,
        at_ms       INTEGER NOT NULL
    );
    CREATE INDEX evolved_drafts_by_session ON evolved_drafts(session_id);
    "#,
    // 6: an evolved revision of a built-in or user-written skill is not
    // written but held for review: outcome `pending-review`, then `updated`
    // (accepted and written) or `rejected` (the reason says it was in
    // review). The version it revises is kept to show it.
    r#"
    ALTER TABLE evolved_drafts ADD COLUMN base_version TEXT;
    ALTER TABLE evolved_drafts ADD COLUMN reviewed_ms INTEGER;
    CREATE INDEX evolved_drafts_pending ON evolved_drafts(id) WHERE outcome = 'pending-review';
    "#,
    // 7: attempts. An agent's resend of a request whose answer failed is an
    // attempt of the same turn: it names the first attempt (`retry_of`),
    // and the attempts it supersedes get turn_type `retried`.
    r#"
    ALTER TABLE turns ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE turns ADD COLUMN retry_of TEXT;
    "#,
    // 8: training runs on a Tinker-compatible service (tinker::run): the
    // model being trained, the steps its weights have had, the last saved
    // state, and one row per step with what the service answered.
    r#"
    CREATE TABLE training_runs (
        id            TEXT PRIMARY KEY,
        service       TEXT NOT NULL,
        base_model    TEXT NOT NULL,
        lora_rank     INTEGER NOT NULL,
        model_id      TEXT,
        last_seq      INTEGER NOT NULL DEFAULT 0,
        step          INTEGER NOT NULL DEFAULT 0,
        incarnation   INTEGER NOT NULL DEFAULT 0,
        pending       TEXT,
        state_path    TEXT,
        state_step    INTEGER,
        sampler_path  TEXT,
        sampler_step  INTEGER,
        started_from  TEXT,
        status        TEXT NOT NULL DEFAULT 'active',
        created_ms    INTEGER NOT NULL,
        updated_ms    INTEGER NOT NULL
    );
    CREATE INDEX training_runs_active ON training_runs(service, base_model) WHERE status = 'active';
    CREATE TABLE training_steps (
        run_id      TEXT NOT NULL REFERENCES training_runs(id),
        step        INTEGER NOT NULL,
        incarnation INTEGER NOT NULL,
        model_id    TEXT NOT NULL,
        samples     INTEGER NOT NULL,
        loss        REAL,
        metrics     TEXT NOT NULL,
        at_ms       INTEGER NOT NULL,
        PRIMARY KEY (run_id, step, incarnation)
    );
    "#,
    // 9: serving from the trainable model (store::samples): who answered a
    // turn (the student, llm, or llm because the student could not), and
    // what the student sampled, token for token.
    r#"
    ALTER TABLE turns ADD COLUMN served_by TEXT;
    ALTER TABLE turns ADD COLUMN fallback_reason TEXT;
    CREATE TABLE turn_samples (
        turn_id          TEXT PRIMARY KEY REFERENCES turns(id),
        base_model       TEXT NOT NULL,
        sampler          TEXT NOT NULL,
        policy_version   INTEGER NOT NULL,
        rendering        TEXT NOT NULL,
        skill_generation INTEGER NOT NULL,
        prompt_tokens    BLOB NOT NULL,   -- little-endian i32
        sampled_tokens   BLOB NOT NULL,   -- little-endian i32
        logprobs         BLOB NOT NULL,   -- little-endian f32, one per sampled token
        prompt_len       INTEGER NOT NULL,
        sampled_len      INTEGER NOT NULL,
        stop_reason      TEXT NOT NULL,
        parsed           INTEGER NOT NULL,
        parse_error      TEXT,
        -- Why the tokens were not kept (a secret in the prompt or answer):
        -- the blobs are then empty and the turn is not trainable.
        withheld         TEXT,
        trajectory_id    TEXT NOT NULL,
        extends_turn     TEXT,
        at_ms            INTEGER NOT NULL
    );
    CREATE INDEX turn_samples_by_trajectory ON turn_samples(trajectory_id);
    "#,
    // 10: the training queue (store::train_queue): each sample's way to at
    // most one training step, and the running reward baselines.
    r#"
    ALTER TABLE turn_samples ADD COLUMN train_state TEXT NOT NULL DEFAULT 'waiting';
    ALTER TABLE turn_samples ADD COLUMN train_note TEXT;
    ALTER TABLE turn_samples ADD COLUMN advantage REAL;
    ALTER TABLE turn_samples ADD COLUMN run_id TEXT;
    ALTER TABLE turn_samples ADD COLUMN train_step INTEGER;
    CREATE INDEX turn_samples_by_state ON turn_samples(train_state);
    CREATE TABLE rl_baselines (
        skill_generation INTEGER NOT NULL,
        policy_version   INTEGER NOT NULL,
        value            REAL NOT NULL,
        count            INTEGER NOT NULL,
        PRIMARY KEY (skill_generation, policy_version)
    );
    "#,
    // 11: group sampling (rl.group_size): the answers sampled with a
    // turn's served one and not served, and each member's group reward (all
    // judged alike, without the next state only the served one caused).
    r#"
    ALTER TABLE turn_samples ADD COLUMN group_reward REAL;
    ALTER TABLE turn_samples ADD COLUMN group_judged INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE turn_siblings (
        turn_id       TEXT NOT NULL REFERENCES turns(id),
        idx           INTEGER NOT NULL,
        tokens        BLOB NOT NULL,   -- little-endian i32
        logprobs      BLOB NOT NULL,   -- little-endian f32
        stop_reason   TEXT NOT NULL,
        message       TEXT NOT NULL,   -- the answer as an assistant message (JSON), redacted
        finish_reason TEXT NOT NULL,
        parse_error   TEXT,
        reward        REAL,
        PRIMARY KEY (turn_id, idx)
    );
    "#,
    // 12: the training scheduler's transitions (store::scheduler), each
    // with why; a window's close carries the steps run in it.
    r#"
    CREATE TABLE scheduler_transitions (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms        INTEGER NOT NULL,
        from_state   TEXT NOT NULL,
        to_state     TEXT NOT NULL,
        reason       TEXT NOT NULL,
        window_steps INTEGER
    );
    "#,
    // 13: outcomes per skill version (store::outcomes): running sums over
    // the main turns each version was injected into, and the judged ones'
    // final rewards; the row ('', '') is every main turn. Filled here once
    // from the turns recorded so far, then kept by what moves them.
    r#"
    CREATE TABLE skill_outcomes (
        skill_id   TEXT NOT NULL,
        version    TEXT NOT NULL,
        injected   INTEGER NOT NULL DEFAULT 0,
        judged     INTEGER NOT NULL DEFAULT 0,
        reward_sum REAL NOT NULL DEFAULT 0,
        reward_sq  REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (skill_id, version)
    );
    INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
    SELECT id, version, count(*), count(reward), coalesce(sum(reward), 0),
           coalesce(sum(reward * reward), 0)
    FROM (SELECT DISTINCT t.id AS turn, json_extract(j.value, '$.id') AS id,
                 json_extract(j.value, '$.version') AS version, t.reward AS reward
          FROM turns t, json_each(t.injected_skills) j
          WHERE t.turn_type = 'main' AND t.injected_skills IS NOT NULL
            AND json_valid(t.injected_skills))
    WHERE id IS NOT NULL AND version IS NOT NULL
    GROUP BY id, version;
    INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
    SELECT '', '', count(*), count(reward), coalesce(sum(reward), 0),
           coalesce(sum(reward * reward), 0)
    FROM turns WHERE turn_type = 'main';
    "#,
    // 14: the dashboard's pages walk indexes (store::browse): sessions by
    // when they started, a page at a time.
    r#"
    CREATE INDEX sessions_by_start ON sessions(started_at_ms, id);
    "#,
    // 15: the dashboard's sessions filter by the agent that sent them (its
    // first turn's: OpenClaw, or the client's User-Agent product); a
    // skill's page shows its versions as diffs (each version's SKILL.md, by
    // its sha256, kept from when the library first saw it) and the turns it
    // was injected into, newest first (filled here from the turns so far).
    r#"
    ALTER TABLE sessions ADD COLUMN agent TEXT;
    CREATE INDEX sessions_by_agent_name ON sessions(agent, started_at_ms, id);
    CREATE TABLE skill_texts (
        content_hash TEXT PRIMARY KEY,
        text         TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE turn_skills (
        skill_id TEXT NOT NULL,
        at_ms    INTEGER NOT NULL,
        turn_id  TEXT NOT NULL,
        version  TEXT NOT NULL,
        PRIMARY KEY (skill_id, at_ms, turn_id)
    ) WITHOUT ROWID;
    INSERT OR IGNORE INTO turn_skills (skill_id, at_ms, turn_id, version)
    SELECT json_extract(j.value, '$.id'), t.started_at_ms, t.id, json_extract(j.value, '$.version')
    FROM turns t, json_each(t.injected_skills) j
    WHERE t.injected_skills IS NOT NULL AND json_valid(t.injected_skills)
      AND json_extract(j.value, '$.id') IS NOT NULL
      AND json_extract(j.value, '$.version') IS NOT NULL;
    -- The learning page lists jobs newest first, and a skill's page its
    -- drafts (kept and rejected).
    CREATE INDEX learning_jobs_by_enqueued ON learning_jobs(enqueued_ms);
    -- A sessions page works out each session's rewards from this index
    -- alone (a reward filter few sessions pass walks many sessions).
    CREATE INDEX turns_session_rewards ON turns(session_id, turn_type, reward);
    CREATE INDEX evolved_drafts_by_skill ON evolved_drafts(skill_id);
    CREATE INDEX evolved_drafts_by_name ON evolved_drafts(name);
    "#,
    // 16: the running reward baselines are per policy version alone
    // (learn/rl/advantage.rs): a batch mixes skill generations. Each
    // version goes on from its newest generation's baseline.
    r#"
    CREATE TABLE rl_policy_baselines (
        policy_version INTEGER PRIMARY KEY,
        value          REAL NOT NULL,
        count          INTEGER NOT NULL
    );
    INSERT INTO rl_policy_baselines (policy_version, value, count)
    SELECT policy_version, value, count FROM rl_baselines b
    WHERE skill_generation = (SELECT max(skill_generation) FROM rl_baselines
                              WHERE policy_version = b.policy_version);
    DROP TABLE rl_baselines;
    "#,
    // 17: provenance per file: a learning job records the exact text it is
    // about to write (its sha256, before the rename), so whichever rescan
    // finds that file credits that job and no other (store::skills). And
    // a turn whose upstream failed is never judged, rewarded or counted in
    // the skills' outcomes: rewards such turns got before are cleared and
    // the outcomes recounted without them; a judgment names the model whose
    // answer it judged (a fallback's, when one answered).
    r#"
    ALTER TABLE evolved_drafts ADD COLUMN content_hash TEXT;
    ALTER TABLE evolved_drafts ADD COLUMN writing_ms INTEGER;
    CREATE INDEX evolved_drafts_by_content ON evolved_drafts(skill_id, content_hash)
        WHERE content_hash IS NOT NULL;
    ALTER TABLE turn_judgments ADD COLUMN answer_model TEXT;
    UPDATE turns SET reward = NULL WHERE status != 'ok' AND reward IS NOT NULL;
    DELETE FROM skill_outcomes;
    INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
    SELECT id, version, count(*), count(reward), coalesce(sum(reward), 0),
           coalesce(sum(reward * reward), 0)
    FROM (SELECT DISTINCT t.id AS turn, json_extract(j.value, '$.id') AS id,
                 json_extract(j.value, '$.version') AS version, t.reward AS reward
          FROM turns t, json_each(t.injected_skills) j
          WHERE t.turn_type = 'main' AND t.status = 'ok' AND t.injected_skills IS NOT NULL
            AND json_valid(t.injected_skills))
    WHERE id IS NOT NULL AND version IS NOT NULL
    GROUP BY id, version;
    INSERT INTO skill_outcomes (skill_id, version, injected, judged, reward_sum, reward_sq)
    SELECT '', '', count(*), count(reward), coalesce(sum(reward), 0),
           coalesce(sum(reward * reward), 0)
    FROM turns WHERE turn_type = 'main' AND status = 'ok';
    "#,
    // 18: a sample whose recorded logprobs are not those of the
    // distribution it was sampled from (the agent asked for a temperature
    // or top-p the service's logprobs do not reflect) says why; it is never
    // trained as on-policy (store::train_queue).
    r#"
    ALTER TABLE turn_samples ADD COLUMN off_policy TEXT;
    "#,
    // 19: explicit feedback from the user on a turn or a whole session
    // (store::feedback): it outranks the judge in the turns' rewards.
    r#"
    CREATE TABLE feedback (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        turn_id    TEXT REFERENCES turns(id),   -- NULL: the whole session
        value      REAL NOT NULL,               -- in [-1, 1]; a thumb is ±1
        rating     TEXT,                        -- up | down; NULL for a score
        comment    TEXT,                        -- redacted
        source     TEXT NOT NULL,               -- api | cli | dashboard
        at_ms      INTEGER NOT NULL
    );
    CREATE INDEX feedback_by_session ON feedback(session_id, id);
    "#,
    // 20: canaries (store::experiments): each candidate under test and how
    // it was decided; each session's arm of it (the first turn that met
    // it says), and each turn's arms as served.
    r#"
    CREATE TABLE experiments (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT NOT NULL,      -- skill (later: weights)
        subject     TEXT NOT NULL,      -- the skill's id
        version     TEXT NOT NULL,      -- the version under test
        share       REAL NOT NULL,      -- of new sessions, in each arm
        state       TEXT NOT NULL,      -- testing | promoted | rolled_back | superseded | abandoned
        started_ms  INTEGER NOT NULL,
        origin      TEXT NOT NULL,      -- what made it (evolved:<session>)
        decided_ms  INTEGER,
        decided_by  TEXT,               -- test | timeout | user
        reason      TEXT
    );
    CREATE INDEX experiments_by_state ON experiments(state, kind);
    CREATE TABLE session_arms (
        experiment_id INTEGER NOT NULL REFERENCES experiments(id),
        session_id    TEXT NOT NULL,
        arm           TEXT NOT NULL,    -- candidate | control
        at_ms         INTEGER NOT NULL,
        PRIMARY KEY (experiment_id, session_id)
    ) WITHOUT ROWID;
    -- [{"experiment": ID, "arm": "candidate"|"control"}] of the turn.
    ALTER TABLE turns ADD COLUMN arms TEXT;
    "#,
    // 21: skills written into an agent's own skill folder (skills::export):
    // what metaclaw wrote there, so that it updates or removes only that.
    r#"
    CREATE TABLE skill_exports (
        target  TEXT NOT NULL,      -- the folder, absolute
        name    TEXT NOT NULL,      -- the skill's folder in it
        sha256  TEXT NOT NULL,      -- of the SKILL.md metaclaw wrote
        version TEXT NOT NULL,
        at_ms   INTEGER NOT NULL,
        PRIMARY KEY (target, name)
    ) WITHOUT ROWID;
    "#,
    // 22: agents as namespaces (crate::agent_id): the agent a session
    // belongs to, its first turn's (`default` for every earlier one).
    r#"
    ALTER TABLE sessions ADD COLUMN agent_id TEXT NOT NULL DEFAULT 'default';
    CREATE INDEX sessions_by_agent_id ON sessions(agent_id, started_at_ms, id);
    "#,
    // 23: an agent's own training run (`agents.<id>.rl`): a run, a sample
    // and a reward baseline belong to the shared run ('') or to one agent's
    // run, and a run trains only its own samples.
    r#"
    ALTER TABLE training_runs ADD COLUMN agent TEXT NOT NULL DEFAULT '';
    DROP INDEX training_runs_active;
    CREATE INDEX training_runs_active ON training_runs(service, base_model, agent)
        WHERE status = 'active';
    ALTER TABLE turn_samples ADD COLUMN run_agent TEXT NOT NULL DEFAULT '';
    CREATE INDEX turn_samples_by_run_agent ON turn_samples(run_agent, train_state);
    CREATE TABLE rl_run_baselines (
        run_agent      TEXT NOT NULL,
        policy_version INTEGER NOT NULL,
        value          REAL NOT NULL,
        count          INTEGER NOT NULL,
        PRIMARY KEY (run_agent, policy_version)
    ) WITHOUT ROWID;
    INSERT INTO rl_run_baselines (run_agent, policy_version, value, count)
    SELECT '', policy_version, value, count FROM rl_policy_baselines;
    DROP TABLE rl_policy_baselines;
    "#,
    // 24: skills from other tools (`skills.untrusted`) as the guard judged
    // them, by the sha256 of the exact SKILL.md it read: an edit is checked
    // again, a restart is not (skills::untrusted).
    r#"
    CREATE TABLE skill_checks (
        sha256     TEXT PRIMARY KEY,
        skill_id   TEXT NOT NULL,
        passed     INTEGER NOT NULL,   -- 1: guard kept it; 0: refused
        reason     TEXT,               -- guard's reason for a refusal
        checker    TEXT NOT NULL,      -- the plugin, name@version
        at_ms      INTEGER NOT NULL
    ) WITHOUT ROWID;
    "#,
    // 25: evolved skills offered to OpenClaw's Skill Workshop
    // (`skills.deliver`, skills::workshop), by the sha256 of the SKILL.md
    // offered: recorded before the file is written, proposed through
    // OpenClaw's CLI, then the owner's verdict.
    r#"
    CREATE TABLE skill_proposals (
        sha256         TEXT PRIMARY KEY,
        skill_id       TEXT NOT NULL,
        version        TEXT,
        content        TEXT NOT NULL,
        openclaw_agent TEXT NOT NULL,
        -- to_offer | pending | applied | rejected | quarantined | stale | failed
        state          TEXT NOT NULL,
        proposal_id    TEXT,
        reason         TEXT,
        attempts       INTEGER NOT NULL DEFAULT 0,
        created_at_ms  INTEGER NOT NULL,
        updated_at_ms  INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX skill_proposals_by_state ON skill_proposals(state, skill_id);
    "#,
    // 26: several instances on one store (W3-G; on SQLite there is one).
    // Each instance says it is alive (`instances.heartbeat_ms`, the
    // database's clock); a learning job is claimed by one (`claimed_by`),
    // and taken back only from one that stopped beating; the work that
    // must run once per deployment is led through a lease (`leases`), its
    // epoch rising with each new holder.
    r#"
    ALTER TABLE learning_jobs ADD COLUMN claimed_by TEXT;
    CREATE TABLE instances (
        id              TEXT PRIMARY KEY,
        host            TEXT NOT NULL,
        pid             INTEGER NOT NULL,
        version         TEXT NOT NULL,
        listen          TEXT NOT NULL,
        -- the skill library's folder, shared by every instance
        skills_dir      TEXT,
        started_ms      INTEGER NOT NULL,
        heartbeat_ms    INTEGER NOT NULL,
        -- its clock minus the database's at the last heartbeat
        clock_offset_ms INTEGER NOT NULL DEFAULT 0,
        stopped_ms      INTEGER
    ) WITHOUT ROWID;
    CREATE TABLE leases (
        name        TEXT PRIMARY KEY,
        holder      TEXT NOT NULL,
        epoch       INTEGER NOT NULL,
        acquired_ms INTEGER NOT NULL,
        expires_ms  INTEGER NOT NULL
    ) WITHOUT ROWID;
    "#,
];

pub fn configure(conn: &Connection) -> rusqlite::Result<()> {
    // WAL: readers (the CLI) never block the writer. synchronous=NORMAL in WAL
    // survives a process crash (kill -9); only an OS crash can lose the last
    // commits.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}

pub fn migrate(conn: &mut Connection) -> rusqlite::Result<u32> {
    let current: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as u32)?;
        tx.commit()?;
    }
    Ok(MIGRATIONS.len() as u32)
}

pub fn latest_version() -> u32 {
    MIGRATIONS.len() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory store as schema version `version` left it.
    fn at_version(version: usize) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..version] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", version as i64)
            .unwrap();
        conn
    }

    /// A database from before review (schema 5) keeps its drafts.
    #[test]
    fn the_review_migration_keeps_existing_drafts() {
        let mut conn = at_version(5);
        conn.execute(
            "INSERT INTO evolved_drafts (session_id, round, name, outcome, skill_id, version, content, base_hash, written_ms, at_ms)
             VALUES ('s', 1, 'tidy', 'updated', 'tidy', '1.2.0', 'text', 'abc', 7, 5)",
            (),
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), latest_version());
        let conn = crate::store::sql::Conn::from(conn);
        let drafts = crate::store::learning::drafts(&conn, "s").unwrap();
        assert_eq!(drafts.len(), 1);
        let d = &drafts[0];
        assert_eq!(
            (d.outcome.as_str(), d.content.as_deref(), d.written_ms),
            ("updated", Some("text"), Some(7))
        );
        assert_eq!((d.base_version.as_deref(), d.reviewed_ms), (None, None));
        assert!(
            crate::store::learning::pending_reviews(&conn)
                .unwrap()
                .is_empty()
        );
    }

    /// A store from before per-version baselines (schema 15) keeps, for
    /// each policy version, the baseline of its newest skill generation.
    #[test]
    fn the_baselines_migration_keeps_each_versions_newest_baseline() {
        let mut conn = at_version(15);
        conn.execute_batch(
            "INSERT INTO rl_baselines (skill_generation, policy_version, value, count)
             VALUES (1, 0, 0.5, 3), (2, 0, -0.5, 2), (1, 1, 0.25, 1);",
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), latest_version());
        let conn = crate::store::sql::Conn::from(conn);
        let mut kept = crate::store::train_queue::baselines(&conn, "").unwrap();
        kept.sort_by_key(|(v, _)| *v);
        assert_eq!(kept, [(0, (-0.5, 2)), (1, (0.25, 1))]);
    }

    /// A store from before outcomes (schema 12) gets its skills' outcomes
    /// from the turns it recorded: main turns only, a skill once a turn.
    #[test]
    fn the_outcomes_migration_counts_the_turns_already_recorded() {
        let mut conn = at_version(12);
        conn.execute(
            "INSERT INTO sessions (id, base_key, source, started_at_ms, last_activity_ms)
             VALUES ('s', 's', 'test', 0, 0)",
            (),
        )
        .unwrap();
        let tidy = r#"[{"id":"tidy","version":"1.0.0","score":0.9}]"#;
        let both = r#"[{"id":"tidy","version":"1.0.0","score":0.9},{"id":"terse","version":"0.2.0","score":0.5},{"id":"tidy","version":"1.0.0","score":0.9}]"#;
        for (i, (kind, skills, reward)) in [
            ("main", Some(tidy), Some(1.0)),
            ("main", Some(both), Some(-1.0)),
            ("main", None, Some(0.5)),
            ("main", Some(tidy), None),
            ("side", Some(tidy), Some(1.0)),
            ("retried", Some(tidy), Some(-1.0)),
        ]
        .into_iter()
        .enumerate()
        {
            conn.execute(
                "INSERT INTO turns (id, session_id, seq, turn_type, api, stream, status, request_messages,
                                    request_params, started_at_ms, finished_at_ms, total_ms, injected_skills, reward)
                 VALUES (?1, 's', ?1, ?2, 'openai', 0, 'ok', '[]', '{}', 0, 0, 0, ?3, ?4)",
                rusqlite::params![i as i64, kind, skills, reward],
            )
            .unwrap();
        }
        assert_eq!(migrate(&mut conn).unwrap(), latest_version());
        let conn = crate::store::sql::Conn::from(conn);
        let all = crate::store::outcomes::all(&conn).unwrap();
        let get = |id: &str, v: &str| all[&(id.to_string(), v.to_string())];
        let tidy = get("tidy", "1.0.0");
        assert_eq!((tidy.injected, tidy.judged, tidy.reward_sum), (3, 2, 0.0));
        let terse = get("terse", "0.2.0");
        assert_eq!(
            (terse.injected, terse.judged, terse.reward_sum),
            (1, 1, -1.0)
        );
        let every = get("", "");
        assert_eq!(
            (every.injected, every.judged, every.reward_sum),
            (4, 3, 0.5)
        );
    }
}
