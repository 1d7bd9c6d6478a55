//! Samples survive what does not concern them (W3-A): a change to the
//! skill library makes a sample stale only when a skill injected into its
//! turn changed after it was sampled; the support set of an evolution is
//! never trained. Measured here as the share of judged student samples not
//! in a support set that train (goal: at least 80%).
//!
//! The real `metaclaw` daemon in `mode: rl` against the fake Tinker
//! server, with the dummy judge and evolver (`common::rl_daemon`), steps
//! only when asked. Six rounds of three sessions, as a day of an agent's
//! use goes: the three are sampled, then each ends and is learned from,
//! then a train step. In every round the first session is corrected (its
//! first answer judged −1): its learning job evolves a skill from it and
//! publishes it, so the library's generation goes up while the round's
//! other two sessions, sampled before, are still waiting for their jobs.
//! Before this rule those two were "sampled under an older skill
//! generation" and skipped: nothing at all trained. In round 3 the user
//! also edits
//! the skill evolved in round 1 while the round's sessions wait: the
//! samples that had it in their prompt go stale, the others do not.
//!
//! Everything is deterministic (scripted answers, the dummy's judge and
//! evolver, the fake's sampling): the rule is checked sample by sample and
//! the share against the goal, with no statistical margin.
//! `cargo test -p metaclaw --test sample_survival -- --nocapture` prints
//! the numbers docs/rl.md reports.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::rl_daemon::{Setup, World};

const ROUNDS: usize = 6;
/// The round whose sessions wait while the user edits round 1's skill.
const EDITED_IN: usize = 3;

/// Round `r`'s sessions: (id, question, answers, the user's reply). The
/// first is corrected (judged −1, then 0: evolved from); the others move
/// on (+1, then 0).
fn round(r: usize) -> [(String, String, [&'static str; 2], &'static str); 3] {
    const TOPICS: [(&str, &str); 6] = [
        ("France", "Paris"),
        ("Italy", "Rome"),
        ("Spain", "Madrid"),
        ("Germany", "Berlin"),
        ("Portugal", "Lisbon"),
        ("Austria", "Vienna"),
    ];
    let (country, _) = TOPICS[r];
    let (other, _) = TOPICS[(r + 1) % TOPICS.len()];
    let (third, _) = TOPICS[(r + 2) % TOPICS.len()];
    [
        (
            format!("r{r}-corrected"),
            format!("What is the capital of {country}?"),
            ["It is Lyon.", "Sorry: I checked, it is the capital."],
            "No, that's wrong. Check it.",
        ),
        (
            format!("r{r}-moved-on"),
            format!("What is the currency of {other}?"),
            ["The euro.", "About a euro."],
            "Thanks. And what does a coffee cost there?",
        ),
        (
            format!("r{r}-also"),
            format!("How many people live in {third}?"),
            ["Millions.", "It is a guess."],
            "Thanks. Is that growing?",
        ),
    ]
}

/// A sample as the rule sees it, read from the store after the run.
#[derive(Debug)]
struct Judged {
    session: String,
    turn: String,
    state: String,
    note: Option<String>,
    support: bool,
    /// A skill injected into its turn changed after it was sampled.
    stale: bool,
    generation: i64,
}

fn judged(world: &World) -> Vec<Judged> {
    let conn = world.db();
    let mut stmt = conn
        .prepare(
            "SELECT t.session_id, s.turn_id, s.train_state, s.train_note, s.skill_generation,
                    EXISTS (SELECT 1 FROM evolved_drafts d WHERE d.session_id = t.session_id
                              AND d.written_ms IS NOT NULL AND d.outcome IN ('created', 'updated')),
                    EXISTS (SELECT 1 FROM json_each(coalesce(t.injected_skills, '[]')) j
                              JOIN skill_changes c ON c.skill_id = json_extract(j.value, '$.id')
                             WHERE c.generation > s.skill_generation)
             FROM turn_samples s JOIN turns t ON t.id = s.turn_id
             WHERE t.reward IS NOT NULL ORDER BY t.started_at_ms, t.seq",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok(Judged {
            session: r.get(0)?,
            turn: r.get(1)?,
            state: r.get(2)?,
            note: r.get(3)?,
            generation: r.get(4)?,
            support: r.get(5)?,
            stale: r.get(6)?,
        })
    })
    .unwrap()
    .collect::<rusqlite::Result<_>>()
    .unwrap()
}

/// The skills injected into `session`'s turns.
fn injected(world: &World, session: &str) -> Vec<String> {
    let conn = world.db();
    let mut stmt = conn
        .prepare(
            "SELECT DISTINCT json_extract(j.value, '$.id') FROM turns t,
                    json_each(coalesce(t.injected_skills, '[]')) j
             WHERE t.session_id = ?1 ORDER BY 1",
        )
        .unwrap();
    stmt.query_map([session], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_train_unless_a_skill_in_their_prompt_changed_or_they_taught_it() {
    let started = Instant::now();
    let w = World::new(Setup::new("fake-bigram").batch_size(64).evolving()).await;
    let mut evolved_first: Option<String> = None;
    for r in 0..ROUNDS {
        let sessions = round(r);
        for (id, question, answers, reply) in &sessions {
            w.session(id, question, answers, &[reply]).await;
        }
        if r == EDITED_IN {
            // The user edits the skill evolved in round 1 while this
            // round's sessions wait for their jobs.
            let skill = evolved_first.clone().expect("round 1 evolved a skill");
            let before = w.generation().await;
            let file = w.path().join("skills").join(&skill).join("SKILL.md");
            let mut text = std::fs::read_to_string(&file).unwrap();
            text.push_str("\n\nAlso: name the source of each fact.\n");
            std::fs::write(&file, text).unwrap();
            w.until("the user's edit in the library", |s| {
                s["skills"]["generation"].as_u64() > Some(before)
            })
            .await;
        }
        for (id, ..) in &sessions {
            w.learn(id).await;
        }
        let (corrected, ..) = &sessions[0];
        let written = w.written_drafts(corrected);
        assert!(
            written.iter().any(|(_, outcome)| outcome == "created"),
            "round {r}: nothing evolved from {corrected}: {written:?}\n{}",
            w.log()
        );
        if r == 1 {
            evolved_first = Some(written[0].0.clone());
        }
        let step = w.json(&["train", "step", "--json"]).await;
        assert!(
            matches!(step["outcome"].as_str(), Some("stepped" | "waiting")),
            "round {r}: {step}\n{}",
            w.log()
        );
    }

    let samples = judged(&w);
    let eligible: Vec<&Judged> = samples.iter().filter(|s| !s.support).collect();
    let trained = eligible.iter().filter(|s| s.state == "trained").count();
    let support = samples.len() - eligible.len();
    let newest = samples.iter().map(|s| s.generation).max().unwrap_or(0);
    let older = eligible
        .iter()
        .filter(|s| s.state == "trained" && s.generation < newest)
        .count();
    let stale = eligible.iter().filter(|s| s.stale).count();
    eprintln!(
        "sample survival: {trained} of {} judged samples outside a support set trained ({:.0}%); \
         {support} in support sets; {stale} stale (a skill in their prompt edited); \
         {older} trained from an older generation than the last; {:.1}s",
        eligible.len(),
        100.0 * trained as f64 / eligible.len().max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    let edited = evolved_first.unwrap();
    for (id, ..) in round(EDITED_IN) {
        eprintln!("  {id}: injected {:?}", injected(&w, &id));
    }
    eprintln!("  edited: {edited}");

    // 6 rounds × 3 sessions × 2 turns, all judged; a third in support sets.
    assert_eq!(samples.len(), ROUNDS * 3 * 2, "{samples:#?}");
    assert_eq!(support, ROUNDS * 2, "{samples:#?}");
    // The rule, sample by sample.
    for s in &samples {
        let note = s.note.as_deref().unwrap_or("");
        match (s.support, s.stale) {
            (true, _) => assert!(
                s.state == "skipped" && note.contains("support set"),
                "{s:?}"
            ),
            (false, true) => assert!(s.state == "skipped" && note.contains("stale"), "{s:?}"),
            (false, false) => assert_eq!(s.state, "trained", "{s:?}"),
        }
    }
    // Only the edit made samples stale, and only those of the round that
    // waited while it happened with the edited skill in their prompt.
    for s in eligible.iter().filter(|s| s.stale) {
        assert!(
            s.session.starts_with(&format!("r{EDITED_IN}-")),
            "{s:?} went stale, yet only round {EDITED_IN} waited during the edit"
        );
        assert!(
            injected(&w, &s.session).contains(&edited),
            "{s:?}: {edited} was not in its prompt"
        );
    }
    assert!(older > 0, "no sample of an older generation trained");
    assert!(
        trained * 5 >= eligible.len() * 4,
        "{trained} of {} trained: below the 80% goal",
        eligible.len()
    );
}
