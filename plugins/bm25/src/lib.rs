//! `bm25`: metaclaw's default skill retriever.
//!
//! Skills are indexed field by field (name and tags weigh 3, description 2,
//! body 1) and ranked by BM25 (k1 = 1.2, b = 0.75). The score returned is a
//! relevance in [0, 1] that a threshold can use: the evidence the skill
//! holds for the query (the IDF of each query term it has, counted fully
//! when the skill's name, tags or description have it and 0.6 when only its
//! body does), measured in "rarest terms" (a term only one skill has) and
//! reaching 1 at `FULL_EVIDENCE` of them. Unlike a share of the query, it
//! does not fall as a message gets longer; unlike raw BM25, it means the
//! same in a library of 40 skills and of 10,000.
//!
//! One shared word is not enough, unless it is a keyword of the trade: the
//! words a message shares with a skill must corroborate each other
//! (everyday English words count half, filler words nothing; see
//! `everyday`), and a message made of everyday words only is chat. A skill
//! short of that keeps half its evidence, which the host's default floor
//! then drops.
//!
//! Latin text is split into words (lower-cased, stop words dropped, light
//! suffix stemming); CJK text, which has no spaces between words, becomes
//! overlapping character bigrams. The tokenizer lives in
//! `metaclaw-plugin-text`, shared with the other first-party plugins.
//!
//! The crate is also a library: the `embedding` retriever fuses this
//! ranking with its own (built without the `export` feature).

use std::cell::RefCell;
use std::collections::HashMap;

pub mod everyday;
use everyday::{Kind, Specificity};

use metaclaw_plugin_sdk::retriever::{
    Guest, Metadata, PluginGuest, ScoredSkill, Skill, TurnContext, metadata,
};
/// The tokenizer skills and queries are indexed with (shared with other
/// plugins through `metaclaw-plugin-text`).
pub use metaclaw_plugin_text::tokens;

const K1: f32 = 1.2;
/// The weight of a query term found only in a skill's body.
const BODY_ONLY: f32 = 0.6;
const B: f32 = 0.75;
/// Evidence, in rarest-term equivalents, that makes a skill fully relevant.
/// The host's default floor (0.3) then asks for about 0.7 of one: a rare
/// term in what the skill is about, or a few commoner ones.
const FULL_EVIDENCE: f32 = 2.33;

/// How much the words a message shares with a skill must add up to (see
/// [`corroboration`]) for its evidence to count fully: one keyword of the
/// trade ("rebase", "jq"), a word of the trade and an everyday word, or
/// three everyday words. One everyday word is not enough: "I got a lot of
/// responses to my party invitation" is not about JSON API responses.
const CORROBORATED: f32 = 1.5;
/// What is left of the evidence of a skill that is not corroborated, and of
/// every skill for a message of everyday words only.
pub const UNCORROBORATED: f32 = 0.5;

/// What a query term shared with a skill adds to its corroboration, by
/// where the skill has it (indexed by the posting's place bits): filler
/// words nothing; an everyday word ½, or 1 in the skill's name (a skill
/// called `ask-clarifying-questions` is about asking questions); any other
/// word 1, or 2 when it is one of the skill's keywords (name, tags).
fn corroboration(kind: Kind) -> [f32; 8] {
    let (plain, keyword, name) = match kind {
        Kind::Filler => (0.0, 0.0, 0.0),
        Kind::Everyday => (0.5, 0.5, 1.0),
        Kind::Specific => (1.0, 2.0, 2.0),
    };
    let mut by_place = [plain; 8];
    by_place[(HEAD_BIT | KEYWORD_BIT) as usize] = keyword;
    by_place[(HEAD_BIT | KEYWORD_BIT | NAME_BIT) as usize] = name;
    by_place
}

/// A posting is the skill (29 bits), whether the term is in the skill's
/// head (name, tags, description), among its keywords (name, tags) and in
/// its name (1 bit each), with the term's BM25 weight in that skill
/// precomputed: a query is then one multiply-add per posting.
const HEAD_BIT: u32 = 1;
const KEYWORD_BIT: u32 = 2;
const NAME_BIT: u32 = 4;
const SKILL_SHIFT: u32 = 3;
/// Skills one index holds at most.
pub const MAX_SKILLS: usize = 1 << 29;

#[derive(Default)]
pub struct Index {
    ids: Vec<String>,
    /// Term → its postings, `postings[start..start + len]`.
    terms: HashMap<String, (u32, u32)>,
    /// (skill << 3 | name | keyword | head, tf * (K1 + 1) / (tf + K1 * length norm)).
    postings: Vec<(u32, f32)>,
    /// Per-query accumulators, reused (one call at a time per instance).
    scratch: RefCell<Scratch>,
    specificity: Specificity,
}

#[derive(Default)]
struct Scratch {
    /// Per skill: (BM25 score, evidence, corroboration), side by side; all
    /// zero between queries.
    sums: Vec<[f32; 3]>,
    /// The skills the query's terms touched, first `listed` entries: only
    /// these are ranked and reset, not the whole library.
    touched: Vec<u32>,
}

thread_local! {
    static INDEX: RefCell<Index> = RefCell::new(Index::default());
}

pub struct Bm25;

impl PluginGuest for Bm25 {
    fn metadata() -> Metadata {
        metadata(
            "bm25",
            env!("CARGO_PKG_VERSION"),
            "BM25 over skill names, tags, descriptions and bodies (CJK-aware)",
        )
    }
}

impl Guest for Bm25 {
    fn index(skills: Vec<Skill>, _generation: u64) -> Result<(), String> {
        if skills.len() > MAX_SKILLS {
            return Err(format!("at most {MAX_SKILLS} skills can be indexed"));
        }
        // Free the old index before building the new one.
        INDEX.with(|i| *i.borrow_mut() = Index::default());
        let built = Index::build(&skills);
        drop(skills);
        INDEX.with(|i| *i.borrow_mut() = built);
        Ok(())
    }

    fn retrieve(context: TurnContext, k: u32) -> Vec<ScoredSkill> {
        INDEX.with(|i| i.borrow().search(&context.query, k as usize))
    }
}

#[cfg(all(target_arch = "wasm32", feature = "export"))]
metaclaw_plugin_sdk::retriever::export_retriever!(Bm25);

/// One skill's match: its position in the index, BM25 score and relevance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub doc: u32,
    pub bm25: f32,
    pub relevance: f32,
    /// The relevance before the shared words were asked to corroborate
    /// each other (a retriever with another signal may corroborate them).
    pub evidence: f32,
}

/// A skill's distinct terms with their weighted frequency and where they
/// are (`HEAD_BIT`, `KEYWORD_BIT`).
fn skill_terms(skill: &Skill, out: &mut HashMap<String, (u32, u32)>) -> u32 {
    out.clear();
    let mut length = 0;
    let name = skill.name.replace('-', " ");
    let tags = skill.tags.join(" ");
    let keyword = HEAD_BIT | KEYWORD_BIT;
    let fields: [(&str, u32, u32); 4] = [
        (&name, 3, keyword | NAME_BIT),
        (&tags, 3, keyword),
        (&skill.description, 2, HEAD_BIT),
        (&skill.body, 1, 0),
    ];
    for (text, weight, place) in fields {
        for term in tokens(text) {
            let entry = out.entry(term).or_insert((0, 0));
            entry.0 += weight;
            entry.1 |= place;
            length += weight;
        }
    }
    length
}

impl Index {
    /// Builds in two passes (count, then fill) so that the postings take
    /// exactly their size: wasm memory never shrinks, so the peak is what
    /// an instance keeps.
    pub fn build(skills: &[Skill]) -> Self {
        let skills = &skills[..skills.len().min(MAX_SKILLS)];
        let mut dictionary: HashMap<String, u32> = HashMap::new();
        let mut counts: Vec<u32> = Vec::new();
        let mut lengths: Vec<u32> = Vec::with_capacity(skills.len());
        let mut terms = HashMap::new();
        for skill in skills {
            lengths.push(skill_terms(skill, &mut terms));
            for term in terms.keys() {
                match dictionary.get(term) {
                    Some(&id) => counts[id as usize] += 1,
                    None => {
                        dictionary.insert(term.clone(), counts.len() as u32);
                        counts.push(1);
                    }
                }
            }
        }
        let mut starts: Vec<u32> = Vec::with_capacity(counts.len());
        let mut total = 0u32;
        for c in &counts {
            starts.push(total);
            total += c;
        }
        let average = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().map(|&l| l as f64).sum::<f64>() / lengths.len() as f64).max(1.0) as f32
        };
        let mut postings = vec![(0u32, 0f32); total as usize];
        let mut filled = vec![0u32; counts.len()];
        for (doc, skill) in skills.iter().enumerate() {
            skill_terms(skill, &mut terms);
            let norm = K1 * (1.0 - B + B * lengths[doc] as f32 / average);
            for (term, (tf, place)) in &terms {
                let Some(&id) = dictionary.get(term) else {
                    continue;
                };
                let id = id as usize;
                let tf = *tf as f32;
                postings[(starts[id] + filled[id]) as usize] = (
                    ((doc as u32) << SKILL_SHIFT) | place,
                    tf * (K1 + 1.0) / (tf + norm),
                );
                filled[id] += 1;
            }
        }
        Index {
            ids: skills.iter().map(|s| s.id.clone()).collect(),
            terms: dictionary
                .into_iter()
                .map(|(term, id)| (term, (starts[id as usize], counts[id as usize])))
                .collect(),
            postings,
            scratch: RefCell::new(Scratch::default()),
            specificity: Specificity::new(),
        }
    }

    fn idf(&self, df: usize) -> f32 {
        let n = self.ids.len() as f32;
        (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn id(&self, doc: u32) -> &str {
        &self.ids[doc as usize]
    }

    /// The `k` best skills for `query` by BM25, best first.
    pub fn search(&self, query: &str, k: usize) -> Vec<ScoredSkill> {
        self.hits(query, k)
            .into_iter()
            .map(|h| ScoredSkill {
                id: self.ids[h.doc as usize].clone(),
                score: h.relevance,
            })
            .collect()
    }

    /// Whether `query` is chat: made of everyday words only, whatever it
    /// shares with a skill ("the kids keep asking me questions").
    pub fn chat(&self, query: &str) -> bool {
        self.chat_terms(&tokens(query))
    }

    fn chat_terms(&self, terms: &[String]) -> bool {
        terms
            .iter()
            .all(|t| self.specificity.kind(t) != Kind::Specific)
    }

    /// The `k` best matches for `query` by BM25, best first.
    pub fn hits(&self, query: &str, k: usize) -> Vec<Hit> {
        let mut terms = tokens(query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() || self.ids.is_empty() || k == 0 {
            return Vec::new();
        }
        let mut scratch = self.scratch.borrow_mut();
        let Scratch { sums, touched } = &mut *scratch;
        if sums.len() != self.ids.len() {
            *sums = vec![[0.0; 3]; self.ids.len()];
            // One more: a posting's skill is written before it is counted.
            *touched = vec![0; self.ids.len() + 1];
        }
        // The skills the postings touch are listed without a branch per
        // posting (each written, counted when new), to rank and reset only
        // those. A posting adds a positive score, so a skill still at 0 is
        // one not listed yet; but a term in every skill of a huge library
        // has an IDF that rounds to 0, and adds its corroboration only.
        let mut listed = 0;
        let mut zero_idf = Vec::new();
        for term in &terms {
            let Some(&(start, len)) = self.terms.get(term) else {
                continue;
            };
            let postings = &self.postings[start as usize..(start + len) as usize];
            let idf = self.idf(len as usize);
            // A term in what the skill is about counts fully; one only
            // mentioned in its body, less.
            let found = [BODY_ONLY * idf, idf];
            let corroboration = corroboration(self.specificity.kind(term));
            let positive = idf > 0.0;
            if !positive {
                zero_idf.push(postings);
            }
            for &(p, weight) in postings {
                let doc = p >> SKILL_SHIFT;
                let sum = &mut sums[doc as usize];
                touched[listed] = doc;
                listed += usize::from(positive && sum[0] == 0.0);
                sum[0] += idf * weight;
                sum[1] += found[(p & HEAD_BIT) as usize];
                sum[2] += corroboration[(p & (HEAD_BIT | KEYWORD_BIT | NAME_BIT)) as usize];
            }
        }
        // The best k of the listed skills, highest score first, ties in
        // index order (as a pass over every skill in order kept them): one
        // comparison for most, as few beat the k-th best.
        let rarest = self.idf(1);
        let chat = self.chat_terms(&terms);
        let mut best: Vec<(f32, u32, [f32; 3])> = Vec::with_capacity(k.min(listed) + 1);
        for &doc in &touched[..listed] {
            let sum = std::mem::take(&mut sums[doc as usize]);
            let score = sum[0];
            let better = |&(s, d, _): &(f32, u32, _)| s > score || (s == score && d < doc);
            if score <= 0.0 || (best.len() == k && better(&best[k - 1])) {
                continue;
            }
            let at = best.partition_point(better);
            best.insert(at, (score, doc, sum));
            best.truncate(k);
        }
        for postings in zero_idf {
            for &(p, _) in postings {
                sums[(p >> SKILL_SHIFT) as usize] = [0.0; 3];
            }
        }
        best.into_iter()
            .map(|(score, doc, [_, evidence, corroboration])| {
                let weight = if chat || corroboration < CORROBORATED {
                    UNCORROBORATED
                } else {
                    1.0
                };
                let evidence = evidence / rarest / FULL_EVIDENCE;
                Hit {
                    doc,
                    bm25: score,
                    relevance: (evidence * weight).clamp(0.0, 1.0),
                    evidence: evidence.clamp(0.0, 1.0),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(id: &str, description: &str, tags: &[&str], body: &str) -> Skill {
        Skill {
            id: id.into(),
            name: id.into(),
            description: description.into(),
            category: "task-specific".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            version: "1.0.0".into(),
            body: body.into(),
        }
    }

    fn bank() -> Index {
        Index::build(&[
            skill(
                "git-rebase-safely",
                "Rebase a feature branch onto main without losing work.",
                &["git", "rebase"],
                "Use git rebase --onto; check git reflog.",
            ),
            skill(
                "csv-handling",
                "Process CSV files robustly.",
                &["csv", "data"],
                "Detect the delimiter and the encoding first.",
            ),
            skill(
                "secret-hygiene",
                "Keep API keys and tokens out of code and logs.",
                &["security", "secrets"],
                "Rotate a leaked key at once.",
            ),
            skill(
                "chinese-writing",
                "写作清晰的中文邮件和消息。",
                &["写作", "中文"],
                "先写结论，再写细节。",
            ),
        ])
    }

    #[test]
    fn ranks_the_skill_the_question_is_about_first() {
        let hits = bank().search("How do I rebase my feature branch onto main?", 3);
        assert_eq!(hits[0].id, "git-rebase-safely");
        assert!(hits[0].score > 0.6, "{hits:?}");
        let hits = bank().search("the CSV export has a weird delimiter", 3);
        assert_eq!(hits[0].id, "csv-handling");
    }

    #[test]
    fn small_talk_matches_nothing() {
        assert!(bank().search("hi! thanks, how are you?", 5).is_empty());
        assert!(bank().search("", 5).is_empty());
    }

    #[test]
    fn a_word_shared_with_a_body_is_a_low_score() {
        // "first" is only in a body: not what any skill is about.
        let hits = bank().search("which novel did you read first, and did you like it", 5);
        assert!(!hits.is_empty());
        assert!(hits.iter().all(|h| h.score < 0.3), "{hits:?}");
    }

    #[test]
    fn one_everyday_word_is_not_enough() {
        let index = Index::build(&[
            skill(
                "query-json-with-jq",
                "Query, filter and transform JSON data or API responses with jq.",
                &["json", "jq"],
                "jq '.items[]'",
            ),
            skill(
                "git-rebase-safely",
                "Rebase a feature branch onto main without losing work.",
                &["git", "rebase", "branches"],
                "Use git rebase --onto.",
            ),
        ]);
        let strong = |q: &str| -> Vec<String> {
            index
                .search(q, 5)
                .into_iter()
                .filter(|h| h.score >= 0.3)
                .map(|h| h.id)
                .collect()
        };
        // Shared everyday words, however rare in the library: chat.
        assert!(strong("I got a lot of responses to my party invitation").is_empty());
        assert!(strong("my grandma is researching the Irish branch of my family").is_empty());
        // A keyword of the trade alone is enough; so are corroborating words.
        assert_eq!(strong("how do I rebase?"), vec!["git-rebase-safely"]);
        assert_eq!(strong("jq?"), vec!["query-json-with-jq"]);
        assert_eq!(
            strong("filter the API responses"),
            vec!["query-json-with-jq"]
        );
    }

    #[test]
    fn long_messages_keep_their_relevance() {
        let short = bank().search("rebase my feature branch", 1);
        let long = bank().search(
            "so my coworker keeps telling me that before the weekly sync I should rebase my feature branch, any idea what to watch out for, I am kind of nervous",
            1,
        );
        assert_eq!(long[0].id, "git-rebase-safely");
        assert!(long[0].score >= 0.3, "{long:?}");
        assert!(
            (long[0].score - short[0].score).abs() < 0.2,
            "{short:?} {long:?}"
        );
    }

    #[test]
    fn cjk_queries_find_cjk_skills() {
        let hits = bank().search("帮我写一封中文邮件", 3);
        assert_eq!(hits[0].id, "chinese-writing", "{hits:?}");
        // Greetings share single characters with everything; not bigrams.
        assert!(bank().search("你好，今天怎么样", 3).is_empty());
    }

    /// `Index::hits` as it was, with dense accumulators and a pass over
    /// every skill: the reference the sparse ranking must equal exactly.
    fn dense_hits(index: &Index, query: &str, k: usize) -> Vec<Hit> {
        let mut terms = tokens(query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() || index.ids.is_empty() || k == 0 {
            return Vec::new();
        }
        let sums = &mut vec![[0.0f32; 3]; index.ids.len()];
        for term in &terms {
            let Some(&(start, len)) = index.terms.get(term) else {
                continue;
            };
            let idf = index.idf(len as usize);
            // A term in what the skill is about counts fully; one only
            // mentioned in its body, less.
            let found = [BODY_ONLY * idf, idf];
            let corroboration = corroboration(index.specificity.kind(term));
            for &(p, weight) in &index.postings[start as usize..(start + len) as usize] {
                let sum = &mut sums[(p >> SKILL_SHIFT) as usize];
                sum[0] += idf * weight;
                sum[1] += found[(p & HEAD_BIT) as usize];
                sum[2] += corroboration[(p & (HEAD_BIT | KEYWORD_BIT | NAME_BIT)) as usize];
            }
        }
        // One pass over every skill keeps the best k (dense accumulators:
        // no branch per posting, and a scan of 10,000 pairs is cheap).
        let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
        for (doc, &[score, ..]) in sums.iter().enumerate() {
            if score <= 0.0 || (best.len() == k && score <= best[k - 1].0) {
                continue;
            }
            let at =
                best.partition_point(|(s, d)| *s > score || (*s == score && (*d as usize) < doc));
            best.insert(at, (score, doc as u32));
            best.truncate(k);
        }
        let rarest = index.idf(1);
        let chat = index.chat_terms(&terms);
        let ranked = best
            .into_iter()
            .map(|(score, doc)| {
                let [_, evidence, corroboration] = sums[doc as usize];
                let weight = if chat || corroboration < CORROBORATED {
                    UNCORROBORATED
                } else {
                    1.0
                };
                let evidence = evidence / rarest / FULL_EVIDENCE;
                Hit {
                    doc,
                    bm25: score,
                    relevance: (evidence * weight).clamp(0.0, 1.0),
                    evidence: evidence.clamp(0.0, 1.0),
                }
            })
            .collect();
        sums.fill([0.0; 3]);
        ranked
    }

    /// Every quoted string of the retrieval query sets (labelled queries,
    /// small talk, off-topic chat), and every built-in skill's description.
    fn queries() -> Vec<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
        let mut out = Vec::new();
        for file in ["retrieval-queries.yaml", "retrieval-queries-heldout.yaml"] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            out.extend(metaclaw_plugin_text::testing::string_literals(&text));
        }
        out
    }

    /// The built-in skills and `extra` generated from their words (as the
    /// retrieval bench does: a large library with real term frequencies).
    fn library(extra: usize) -> Vec<Skill> {
        let builtin: Vec<Skill> = metaclaw_plugin_text::skills::builtin_skills()
            .unwrap()
            .into_iter()
            .map(|f| Skill {
                id: f.id,
                name: f.name,
                description: f.description,
                category: f.category,
                tags: f.tags,
                version: f.version,
                body: f.body,
            })
            .collect();
        let words: Vec<String> = builtin
            .iter()
            .flat_map(|s| s.body.split_whitespace().map(str::to_string))
            .collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut pick = |n: usize| -> String {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    words[(state % words.len() as u64) as usize].as_str()
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut skills = builtin.clone();
        for i in 0..extra {
            skills.push(skill(
                &format!("generated-{i}"),
                &pick(12),
                &[&pick(1), &pick(1)],
                &pick(60 + i % 200),
            ));
        }
        skills
    }

    #[test]
    fn sparse_ranking_equals_the_dense_one() {
        let queries = queries();
        assert!(queries.len() > 150, "{}", queries.len());
        let mut compared = 0;
        for extra in [0, 3_000] {
            let skills = library(extra);
            let index = Index::build(&skills);
            let mut texts = queries.clone();
            texts.extend(skills.iter().take(60).map(|s| s.description.clone()));
            for q in &texts {
                for k in [1, 6, 24, 100_000] {
                    let (sparse, dense) = (index.hits(q, k), dense_hits(&index, q, k));
                    assert_eq!(sparse, dense, "{q:?} k={k} skills={}", skills.len());
                    compared += sparse.len();
                }
            }
        }
        assert!(compared > 10_000, "{compared}");
    }
}
