//! `dedup`: an evolver that keeps the skill library free of near-duplicates.
//!
//! The evolver LLM drafts skills from sessions, and it often re-learns what
//! the library already knows under a new name ("git-rebase-safely-again").
//! Each near-duplicate would dilute retrieval (two skills competing for
//! the same turns) and, kept, grow the library without adding knowledge.
//! For each draft, `dedup` finds the most similar library skill (and the
//! drafts it already kept in the same call) and decides:
//!
//! - a draft whose `updates` names a library skill is a revision: kept as
//!   it is;
//! - a draft that duplicates a draft kept earlier in the same call is
//!   dropped;
//! - a near-duplicate of a library skill (the same name, or a similarity
//!   over the thresholds below) is **dropped** ("near-duplicate of <id>
//!   (similarity 0.93): adds nothing new") when its body has no line that
//!   the skill's body lacks, or **merged** into it: a draft with the
//!   skill's name, id (`updates`), description and category, the union of
//!   the tags, and the skill's body followed by a blank line and the
//!   draft's novel lines;
//! - anything else is kept as it is.
//!
//! # Similarity
//!
//! Four signals, each with its own threshold; a pair is a near-duplicate
//! when any signal reaches its threshold, candidates are ranked by the
//! signal furthest over (or nearest to) its threshold, and the similarity
//! reported is the highest of the signals:
//!
//! - **head**: the TF-IDF cosine of the heads (name with dashes as spaces,
//!   tags, description), over the tokenizer `bm25` uses (stemmed words,
//!   CJK bigrams, from `metaclaw-plugin-text`), with document frequencies
//!   from the library and the drafts: at least [`HEAD_LEXICAL`] (0.45);
//! - **description**: the TF-IDF cosine of the descriptions alone: at least
//!   [`DESCRIPTION_LEXICAL`] (0.60). Library skills carry many tags, in
//!   several languages, that a draft seldom repeats; they dilute the head
//!   enough to hide a copied description (a renamed copy's head cosine can
//!   be as low as 0.45);
//! - **whole**: the TF-IDF cosine of the whole texts (head and body): at
//!   least [`WHOLE_LEXICAL`] (0.45);
//! - **embedding**: when the host grants `embed`, the cosine of the heads'
//!   embeddings (written as the `embedding` retriever writes them): at
//!   least [`HEAD_EMBEDDING`] (0.80). When `embed` fails (no grant, or the
//!   model failed) only the lexical signals count.
//!
//! Calibration, on the 44 built-in skills (the tests read them from
//! `skills/`; the embedding figures are all-MiniLM-L6-v2's, measured
//! outside the tests):
//!
//! | | head | description | whole | embedding |
//! |---|---|---|---|---|
//! | most similar pair of distinct built-in skills | 0.29 | 0.26 | 0.31 | 0.70 |
//! | related new topics (cherry-pick, meeting notes, Docker images) | ≤ 0.14 | ≤ 0.19 | ≤ 0.31 | 0.50–0.72 |
//! | unrelated (earth–moon distance, Kubernetes ingress, bread) | ≤ 0.07 | ≤ 0.17 | ≤ 0.05 | ≤ 0.20 |
//! | renamed copy, same description, short body | ≥ 0.45 | 1.00 | ≥ 0.31 | ≥ 0.80 |
//! | copy with reworded lines and description | ≥ 0.36 | ≥ 0.54 | ≥ 0.66 | ≥ 0.66 |
//!
//! Each threshold sits above every distinct pair with a margin (0.16 for
//! head, 0.34 for description, 0.14 for whole, 0.10 for embedding), and
//! each kind of copy is caught by at least one signal with room to spare.
//! The thresholds lean towards keeping: a missed duplicate costs a little
//! retrieval noise, a wrong merge rewrites a good skill with foreign lines.

//! # Novel lines
//!
//! A draft line is novel when, normalised (lower case, list markers,
//! Markdown and punctuation removed, spaces collapsed), it is not a line of
//! the existing body, and it is not a rewording of one either: its TF-IDF
//! cosine with every existing line is below [`LINE_SIMILAR`]. Headings and
//! blank lines are structure, not content: a heading is carried over only
//! before a novel line, when the existing body lacks it.

use std::collections::HashSet;

use metaclaw_plugin_sdk::evolver::{
    DraftOutcome, Guest, LogLevel, Metadata, PluginGuest, Skill, SkillDraft, embed, log, metadata,
};
use metaclaw_plugin_text::{TermVector, Vocabulary, tokens};

/// Head (name, tags, description) TF-IDF cosine that makes a near-duplicate.
pub const HEAD_LEXICAL: f32 = 0.45;
/// Description TF-IDF cosine that makes a near-duplicate.
pub const DESCRIPTION_LEXICAL: f32 = 0.60;
/// Whole-text TF-IDF cosine that makes a near-duplicate.
pub const WHOLE_LEXICAL: f32 = 0.45;
/// Head embedding cosine that makes a near-duplicate.
pub const HEAD_EMBEDDING: f32 = 0.80;
/// Line TF-IDF cosine above which a draft line rewords an existing one.
pub const LINE_SIMILAR: f32 = 0.55;
/// Texts per call to the host's `embed`.
const BATCH: usize = 64;

/// The host's `embed`, or a stand-in in native tests.
pub type EmbedFn = dyn Fn(&[String]) -> Result<Vec<Vec<f32>>, String>;

pub struct Dedup;

impl PluginGuest for Dedup {
    fn metadata() -> Metadata {
        let mut m = metadata(
            "dedup",
            env!("CARGO_PKG_VERSION"),
            "Merges a draft that nearly duplicates a library skill into it, or drops it when it adds nothing",
        );
        m.capabilities = vec!["embed".into()];
        m
    }
}

impl Guest for Dedup {
    fn process(drafts: Vec<SkillDraft>, library: Vec<Skill>) -> Vec<DraftOutcome> {
        process(drafts, &library, &|texts| embed::embed(texts))
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::evolver::export_evolver!(Dedup);

/// How similar two skills are, by each signal.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Similarity {
    pub head: f32,
    pub description: f32,
    pub whole: f32,
    pub embedding: Option<f32>,
}

impl Similarity {
    /// The strongest signal relative to its threshold: 1 or more is a
    /// near-duplicate. Candidates are ranked by it.
    pub fn strength(&self) -> f32 {
        [
            self.head / HEAD_LEXICAL,
            self.description / DESCRIPTION_LEXICAL,
            self.whole / WHOLE_LEXICAL,
            self.embedding.unwrap_or(0.0) / HEAD_EMBEDDING,
        ]
        .into_iter()
        .fold(0.0, f32::max)
    }

    pub fn is_duplicate(&self) -> bool {
        self.strength() >= 1.0
    }

    /// The similarity reported: the highest of the signals, in [0, 1].
    pub fn value(&self) -> f32 {
        self.head
            .max(self.description)
            .max(self.whole)
            .max(self.embedding.unwrap_or(0.0))
            .clamp(0.0, 1.0)
    }
}

/// A skill or draft as compared: its texts and vectors.
struct Entry {
    id: Option<String>,
    name: String,
    head: TermVector,
    description_vector: TermVector,
    whole: TermVector,
    /// Its head embedding's row in `Embeddings`.
    embedding: Option<usize>,
}

/// The head text compared lexically: name (dashes as spaces), tags and
/// description.
pub fn head_text(name: &str, tags: &[String], description: &str) -> String {
    format!(
        "{}\n{}\n{}",
        name.replace(['-', '_'], " "),
        tags.join(" "),
        description
    )
}

/// The head text embedded (as the `embedding` retriever writes it).
pub fn embedding_text(name: &str, tags: &[String], description: &str) -> String {
    let mut head = name.replace(['-', '_'], " ");
    if !description.is_empty() {
        head.push_str(": ");
        head.push_str(description);
    }
    if !tags.is_empty() {
        head.push_str(" (");
        head.push_str(&tags.join(", "));
        head.push(')');
    }
    head
}

/// (name, tags, description, body): what is compared.
type Texts<'a> = (&'a str, &'a [String], &'a str, &'a str);

fn skill_texts(s: &Skill) -> Texts<'_> {
    (&s.name, &s.tags, &s.description, &s.body)
}

fn draft_texts(d: &SkillDraft) -> Texts<'_> {
    (&d.name, &d.tags, &d.description, &d.body)
}

fn whole_text(head: &str, body: &str) -> String {
    format!("{head}\n{body}")
}

/// Document frequencies for the three lexical signals.
struct Vocabularies {
    head: Vocabulary,
    description: Vocabulary,
    whole: Vocabulary,
}

impl Vocabularies {
    fn new<'a>(texts: impl Iterator<Item = Texts<'a>>) -> Self {
        let mut v = Vocabularies {
            head: Vocabulary::new(),
            description: Vocabulary::new(),
            whole: Vocabulary::new(),
        };
        for (name, tags, description, body) in texts {
            let head = head_text(name, tags, description);
            v.head.add(&tokens(&head));
            v.description.add(&tokens(description));
            v.whole.add(&tokens(&whole_text(&head, body)));
        }
        v
    }

    fn entry(
        &self,
        id: Option<String>,
        (name, tags, description, body): Texts,
        embedding: Option<usize>,
    ) -> Entry {
        let head = head_text(name, tags, description);
        Entry {
            id,
            name: name.to_string(),
            head: self.head.vector(&tokens(&head)),
            description_vector: self.description.vector(&tokens(description)),
            whole: self.whole.vector(&tokens(&whole_text(&head, body))),
            embedding,
        }
    }
}

/// Head embeddings, one row per library skill then one per draft, or none.
struct Embeddings(Option<Vec<Vec<f32>>>);

impl Embeddings {
    fn compute(texts: Vec<String>, embed: &EmbedFn) -> Self {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            match embed(batch) {
                Ok(vectors) if vectors.len() == batch.len() => out.extend(vectors),
                Ok(_) => return Embeddings(None),
                Err(e) => {
                    // No grant, or the host's model failed: lexical only.
                    if cfg!(target_arch = "wasm32") {
                        log(
                            LogLevel::Debug,
                            &format!("embeddings unavailable, lexical only: {e}"),
                        );
                    }
                    return Embeddings(None);
                }
            }
        }
        Embeddings(Some(out))
    }

    fn cosine(&self, a: Option<usize>, b: Option<usize>) -> Option<f32> {
        let rows = self.0.as_ref()?;
        let (a, b) = (rows.get(a?)?, rows.get(b?)?);
        if a.len() != b.len() || a.is_empty() {
            return None;
        }
        Some(
            a.iter()
                .zip(b)
                .map(|(x, y)| x * y)
                .sum::<f32>()
                .clamp(-1.0, 1.0),
        )
    }
}

fn similarity(a: &Entry, b: &Entry, embeddings: &Embeddings) -> Similarity {
    Similarity {
        head: a.head.cosine(&b.head),
        description: a.description_vector.cosine(&b.description_vector),
        whole: a.whole.cosine(&b.whole),
        embedding: embeddings.cosine(a.embedding, b.embedding),
    }
}

fn same_name(draft: &str, skill: &Entry) -> bool {
    let key = |s: &str| s.trim().to_lowercase().replace(['_', ' '], "-");
    let draft = key(draft);
    !draft.is_empty()
        && (draft == key(&skill.name) || skill.id.as_deref().is_some_and(|id| draft == key(id)))
}

/// The most similar entry: (index, similarity), ranked by strength.
fn most_similar(
    draft: &Entry,
    pool: &[Entry],
    embeddings: &Embeddings,
) -> Option<(usize, Similarity)> {
    let mut best: Option<(usize, Similarity, f32)> = None;
    for (i, candidate) in pool.iter().enumerate() {
        let s = similarity(draft, candidate, embeddings);
        let mut strength = s.strength();
        if same_name(&draft.name, candidate) {
            strength = strength.max(1.0) + 1.0;
        }
        if best.as_ref().is_none_or(|b| strength > b.2) {
            best = Some((i, s, strength));
        }
    }
    best.map(|(i, s, _)| (i, s))
}

/// One outcome per draft, in order (see the crate docs).
pub fn process(drafts: Vec<SkillDraft>, library: &[Skill], embed: &EmbedFn) -> Vec<DraftOutcome> {
    if drafts.is_empty() {
        return Vec::new();
    }
    let vocabularies = Vocabularies::new(
        library
            .iter()
            .map(skill_texts)
            .chain(drafts.iter().map(draft_texts)),
    );
    let embeddings = Embeddings::compute(
        library
            .iter()
            .map(|s| embedding_text(&s.name, &s.tags, &s.description))
            .chain(
                drafts
                    .iter()
                    .map(|d| embedding_text(&d.name, &d.tags, &d.description)),
            )
            .collect(),
        embed,
    );
    let skills: Vec<Entry> = library
        .iter()
        .enumerate()
        .map(|(i, s)| vocabularies.entry(Some(s.id.clone()), skill_texts(s), Some(i)))
        .collect();
    // Drafts kept so far in this call, as they will be written.
    let mut kept: Vec<Entry> = Vec::new();
    // Library skills an earlier draft of this call already updates.
    let mut updated: HashSet<String> = HashSet::new();
    let mut outcomes = Vec::with_capacity(drafts.len());
    for (n, draft) in drafts.into_iter().enumerate() {
        let entry = vocabularies.entry(None, draft_texts(&draft), Some(library.len() + n));
        // A revision of a library skill: the evolver meant to update it.
        if let Some(id) = draft.updates.as_deref()
            && library.iter().any(|s| s.id == id)
        {
            if updated.insert(id.to_string()) {
                kept.push(entry);
                outcomes.push(DraftOutcome::Keep(draft));
            } else {
                outcomes.push(DraftOutcome::Reject(format!(
                    "another draft in this batch already updates {id}"
                )));
            }
            continue;
        }
        if let Some((i, s)) = most_similar(&entry, &kept, &embeddings)
            && (s.is_duplicate() || same_name(&draft.name, &kept[i]))
        {
            outcomes.push(DraftOutcome::Reject(match &kept[i].id {
                Some(id) => format!(
                    "near-duplicate of {id} (similarity {:.2}), which an earlier draft in this batch already updates",
                    s.value()
                ),
                None => format!(
                    "near-duplicate of the draft \"{}\" earlier in this batch (similarity {:.2})",
                    kept[i].name,
                    s.value()
                ),
            }));
            continue;
        }
        let Some((i, s)) = most_similar(&entry, &skills, &embeddings)
            .filter(|(i, s)| s.is_duplicate() || same_name(&draft.name, &skills[*i]))
        else {
            kept.push(entry);
            outcomes.push(DraftOutcome::Keep(draft));
            continue;
        };
        let skill = &library[i];
        let novel = novel_lines(&draft.body, &skill.body, &vocabularies.whole);
        if novel.is_empty() {
            outcomes.push(DraftOutcome::Reject(format!(
                "near-duplicate of {} (similarity {:.2}): adds nothing new",
                skill.id,
                s.value()
            )));
            continue;
        }
        if !updated.insert(skill.id.clone()) {
            outcomes.push(DraftOutcome::Reject(format!(
                "near-duplicate of {} (similarity {:.2}), which another draft in this batch already updates",
                skill.id,
                s.value()
            )));
            continue;
        }
        let merged = merge(skill, &draft, &novel);
        kept.push(vocabularies.entry(Some(skill.id.clone()), draft_texts(&merged), Some(i)));
        outcomes.push(DraftOutcome::Keep(merged));
    }
    outcomes
}

/// The library skill with the draft's novel lines appended, as a revision.
pub fn merge(skill: &Skill, draft: &SkillDraft, novel: &[String]) -> SkillDraft {
    let mut tags = skill.tags.clone();
    let mut seen: HashSet<String> = tags.iter().map(|t| t.to_lowercase()).collect();
    for tag in &draft.tags {
        if seen.insert(tag.to_lowercase()) {
            tags.push(tag.clone());
        }
    }
    SkillDraft {
        name: skill.name.clone(),
        description: skill.description.clone(),
        category: skill.category.clone(),
        tags,
        body: format!("{}\n\n{}\n", skill.body.trim_end(), novel.join("\n")),
        updates: Some(skill.id.clone()),
    }
}

/// A line reduced to what it says: lower case, without list markers,
/// Markdown or punctuation, spaces collapsed.
pub fn normalize_line(line: &str) -> String {
    let trimmed = line
        .trim()
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start_matches(['.', ')', '-', '*', '+', '>', '#', ' ']);
    let kept: String = trimmed
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                ' '
            }
        })
        .collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_heading(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// The draft body's lines that the existing body does not already say (see
/// the crate docs), with the headings that introduce them.
pub fn novel_lines(draft_body: &str, existing_body: &str, vocabulary: &Vocabulary) -> Vec<String> {
    let existing: Vec<(String, TermVector)> = existing_body
        .lines()
        .map(normalize_line)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v = vocabulary.vector(&tokens(&l));
            (l, v)
        })
        .collect();
    let known: HashSet<&str> = existing.iter().map(|(l, _)| l.as_str()).collect();
    let mut out = Vec::new();
    let mut heading: Option<&str> = None;
    for line in draft_body.lines() {
        let normal = normalize_line(line);
        if normal.is_empty() {
            continue;
        }
        if is_heading(line) {
            heading = (!known.contains(normal.as_str())).then_some(line.trim_end());
            continue;
        }
        if known.contains(normal.as_str()) {
            continue;
        }
        let vector = vocabulary.vector(&tokens(&normal));
        if existing
            .iter()
            .any(|(_, v)| vector.cosine(v) >= LINE_SIMILAR)
        {
            continue;
        }
        if let Some(h) = heading.take() {
            out.push(h.to_string());
        }
        out.push(line.trim_end().to_string());
    }
    out
}

#[cfg(test)]
mod tests;
