//! Skill libraries for the benches: the built-in bank, and any number of
//! generated skills drawn from the bank's own vocabulary (so term
//! frequencies look like real skills'), plus the evaluation queries.
#![allow(dead_code)]

use std::path::Path;

use metaclaw_core::plugins::types::Skill;

/// A small deterministic generator (xorshift).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn pick<'a>(&mut self, words: &'a [String]) -> &'a str {
        &words[(self.next() % words.len() as u64) as usize]
    }
    pub fn phrase(&mut self, words: &[String], n: usize) -> String {
        (0..n)
            .map(|_| self.pick(words).to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

pub fn builtin_bank() -> Vec<Skill> {
    let tmp = tempfile::tempdir().unwrap();
    let library = metaclaw_core::skills::library::Library::open(
        repo().join("skills"),
        metaclaw_core::store::Db::at(tmp.path().join("db")),
    );
    library
        .snapshot()
        .skills
        .iter()
        .map(|s| metaclaw_core::skills::to_wit(s))
        .collect()
}

/// `n` skills written from the built-in bank's vocabulary, with bodies of
/// 80–160 words.
pub fn generated(n: usize, bank: &[Skill]) -> Vec<Skill> {
    let mut words: Vec<String> = bank
        .iter()
        .flat_map(|s| {
            format!("{} {} {}", s.description, s.tags.join(" "), s.body)
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() > 2)
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .collect();
    words.sort();
    words.dedup();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|i| {
            let name = format!("{}-{i}", rng.phrase(&words, 3).replace(' ', "-"));
            let body_words = 80 + (rng.next() % 80) as usize;
            Skill {
                id: name.clone(),
                name,
                description: rng.phrase(&words, 12),
                category: "general".into(),
                tags: (0..3).map(|_| rng.pick(&words).to_string()).collect(),
                version: "1.0.0".into(),
                body: rng.phrase(&words, body_words),
            }
        })
        .collect()
}

/// Writes `skills` as a skill folder (`<dir>/<name>/SKILL.md`), the form
/// metaclaw reads, in the Agent Skills layout (metaclaw's keys under
/// `metadata`, as [`render`](metaclaw_core::skills::skill::render) writes
/// them). In the older layout the first metaclaw started on the folder
/// would rewrite every file on its start (`skills::upgrade::once`) and keep
/// that work's freed heap resident (about 50–70 MiB with 10,000 skills),
/// and a second binary started on the same folder would not: the sides of
/// a comparison would differ by which started first.
pub fn write_library(dir: &Path, skills: &[Skill]) {
    for (i, s) in skills.iter().enumerate() {
        // Names are lowercase ASCII, digits and dashes; the generated ones
        // may hold words of other scripts from the bank's tags.
        let ascii: String = s
            .name
            .split('-')
            .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
            .collect::<Vec<_>>()
            .join("-")
            .to_ascii_lowercase();
        let name: String = format!("s{i}-{ascii}").chars().take(64).collect();
        let name = name.trim_end_matches('-');
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let text = format!(
            "---\nname: {}\ndescription: {}\ncategory: {}\ntags: [{}]\nversion: {}\n---\n{}\n",
            name,
            s.description,
            s.category,
            s.tags.join(", "),
            s.version,
            s.body
        );
        // A skill that does not parse (a tag YAML reads as a number, say)
        // is written as it is: metaclaw skips it, and the upgrade too.
        let text = match metaclaw_core::skills::skill::parse(name, &text) {
            Ok(skill) => metaclaw_core::skills::skill::render(&skill),
            Err(_) => text,
        };
        std::fs::write(folder.join("SKILL.md"), text).unwrap();
    }
}

/// The 107 queries of `tests/data/retrieval-queries.yaml`.
pub fn queries() -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Set {
        queries: Vec<Case>,
    }
    #[derive(serde::Deserialize)]
    struct Case {
        query: String,
    }
    let text = std::fs::read_to_string(repo().join("tests/data/retrieval-queries.yaml")).unwrap();
    let set: Set = serde_saphyr::from_str(&text).unwrap();
    set.queries.into_iter().map(|c| c.query).collect()
}
