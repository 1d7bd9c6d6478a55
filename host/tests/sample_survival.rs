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
//! generation" and skipped: nothing at all trained. From round 1 on, a
//! round's third session comes back to the last round's topic, so the
//! skill evolved from it is in its prompt; in round 3 the user edits that
//! skill while the round's sessions wait: the samples that had it in their
//! prompt go stale, the others do not (and so, by the same rule, do those
//! whose skill a round's evolution revised).
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
/// first is corrected (judged −1, then 0: evolved from; each round's
/// lesson on a topic of its own, so the evolution writes a new skill
/// rather than a near-duplicate `dedup` drops); the others move on (+1,
/// then 0).
fn round(r: usize) -> [(String, String, [&'static str; 2], &'static str); 3] {
    const CORRECTED: [(&str, &str); 6] = [
        (
            "Who designed the Louvre pyramid?",
            "No, that's wrong: Ieoh Ming Pei designed its glass and steel, opened 1989 beside the Seine.",
        ),
        (
            "Which volcano towers over Sicily?",
            "Wrong. Etna erupts often; lava reaches Catania suburbs, ash closes airports, pistachios grow there.",
        ),
        (
            "What hangs inside the Prado museum?",
            "Incorrect: Velazquez, Goya and Bosch paintings; tickets fifteen euros; closed Mondays.",
        ),
        (
            "When did the Berlin wall fall?",
            "That's not right: November 1989, Checkpoint Charlie, graffiti murals, Brandenburg gate celebrations.",
        ),
        (
            "Which tram climbs Alfama hills?",
            "No, that's wrong: yellow route 28 rattles uphill; the 1755 earthquake flattened Baixa below.",
        ),
        (
            "What dessert comes from Vienna?",
            "Mistake: Sachertorte chocolate cake with apricot jam, served at Hotel Sacher since 1832.",
        ),
    ];
    const COUNTRIES: [&str; 6] = ["France", "Italy", "Spain", "Germany", "Portugal", "Austria"];
    let (question, correction) = CORRECTED[r];
    let other = COUNTRIES[(r + 1) % COUNTRIES.len()];
    // The third comes back to the last round's lesson: its skill is
    // retrieved into the prompt.
    let third = match r {
        0 => format!("How many people live in {}?", COUNTRIES[2]),
        r => format!("Tell me again: {}", CORRECTED[r - 1].0),
    };
    [
        (
            format!("r{r}-corrected"),
            question.to_string(),
            ["I am not sure.", "Sorry: I checked it now."],
            correction,
        ),
        (
            format!("r{r}-moved-on"),
            format!("What is the currency of {other}?"),
            ["The euro.", "About a euro."],
            "Thanks. And what does a coffee cost there?",
        ),
        (
            format!("r{r}-also"),
            third,
            ["Millions.", "It is a guess."],
            "Thanks. Is that growing?",
        ),
    ]
}

/// A sample as the rule sees it, read from the store after the run.
#[derive(Debug)]
struct Judged {
    session: String,
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
            "SELECT t.session_id, s.train_state, s.train_note, s.skill_generation,
                    EXISTS (SELECT 1 FROM evolved_drafts d WHERE d.session_id = t.session_id
                              AND d.written_ms IS NOT NULL AND d.outcome IN ('created', 'updated')),
                    EXISTS (SELECT 1 FROM json_each(coalesce(t.injected_skills, '[]')) j
                              JOIN skill_changes c ON c.skill_id = json_extract(j.value, '$.id')
                             WHERE c.generation > s.skill_generation)
             FROM turn_samples s JOIN turns t ON t.id = s.turn_id
             WHERE t.reward IS NOT NULL ORDER BY t.started_at_ms, t.seq",
        )
        .unwrap();
    stmt.query_map((), |r| {
        Ok(Judged {
            session: r.get(0)?,
            state: r.get(1)?,
            note: r.get(2)?,
            generation: r.get(3)?,
            support: r.get(4)?,
            stale: r.get(5)?,
        })
    })
    .unwrap()
    .collect::<metaclaw_core::store::sql::Result<_>>()
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
        .collect::<metaclaw_core::store::sql::Result<_>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_train_unless_a_skill_in_their_prompt_changed_or_they_taught_it() {
    let started = Instant::now();
    let w = World::new(Setup::new("fake-bigram").batch_size(64).evolving()).await;
    let mut evolved: Vec<String> = Vec::new();
    let mut old_rule = 0;
    for r in 0..ROUNDS {
        let sessions = round(r);
        for (id, question, answers, reply) in &sessions {
            w.session(id, question, answers, &[reply]).await;
        }
        if r == EDITED_IN {
            // The user edits the skill evolved in the round before while
            // this round's sessions wait for their jobs.
            let skill = evolved[EDITED_IN - 1].clone();
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
            !written.is_empty(),
            "round {r}: nothing evolved from {corrected}\n{}",
            w.log()
        );
        evolved.push(written[0].0.clone());
        // What the rule before this one would have let this step train:
        // only samples of the generation the library is at now.
        let now = w.generation().await as i64;
        old_rule += judged(&w)
            .iter()
            .filter(|s| s.session.starts_with(&format!("r{r}-")) && !s.support)
            .filter(|s| s.generation == now)
            .count();
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
         {support} in support sets; {stale} stale (a skill in their prompt changed); \
         {older} trained from an older generation than the last; \
         under the old rule (older generations skipped) {old_rule} would have; {:.1}s",
        eligible.len(),
        100.0 * trained as f64 / eligible.len().max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    let edited = &evolved[EDITED_IN - 1];
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
    // Only samples with a skill in their prompt can go stale (the third
    // sessions'), and the edit staled the one that had the edited skill.
    // (A round's evolution may revise the last round's skill too: the
    // dummy evolver's near-copy of it, merged into it; that stales the
    // third session that had it in its prompt, by the same rule.)
    for s in eligible.iter().filter(|s| s.stale) {
        assert!(s.session.ends_with("-also"), "{s:?}");
    }
    let edited_in = format!("r{EDITED_IN}-also");
    assert!(injected(&w, &edited_in).contains(edited));
    assert!(
        eligible.iter().any(|s| s.stale && s.session == edited_in),
        "{samples:#?}"
    );
    assert!(older > 0, "no sample of an older generation trained");
    assert!(
        trained * 5 >= eligible.len() * 4,
        "{trained} of {} trained: below the 80% goal",
        eligible.len()
    );
}
