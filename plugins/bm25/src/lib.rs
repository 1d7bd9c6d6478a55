//! `bm25`: metaclaw's default skill retriever.
//!
//! Skills are indexed field by field (name and tags weigh 3, description 2,
//! body 1) and ranked by BM25 (k1 = 1.2, b = 0.75). The score returned is in
//! [0, 1]: the share of the query's information (its IDF weight) that the
//! skill covers, a term counting fully when the skill's name, tags or
//! description have it and 0.6 when only its body does, so that a threshold
//! can tell "about this" from "shares a word". Latin text is split into words (lower-cased, stop words dropped,
//! light suffix stemming); CJK text becomes character unigrams and bigrams,
//! since it has no spaces between words.

use std::cell::RefCell;
use std::collections::HashMap;

use metaclaw_plugin_sdk::retriever::{
    Guest, Metadata, PluginGuest, ScoredSkill, Skill, TurnContext, metadata,
};

const K1: f32 = 1.2;
/// The weight of a query term found only in a skill's body.
const BODY_ONLY: f32 = 0.6;
const B: f32 = 0.75;

#[derive(Default)]
pub struct Index {
    ids: Vec<String>,
    lengths: Vec<f32>,
    average: f32,
    /// term → (document, weighted term frequency, found in the name, tags
    /// or description: what the skill is *about*)
    postings: HashMap<String, Vec<(u32, f32, bool)>>,
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
        let built = Index::build(&skills);
        INDEX.with(|i| *i.borrow_mut() = built);
        Ok(())
    }

    fn retrieve(context: TurnContext, k: u32) -> Vec<ScoredSkill> {
        INDEX.with(|i| i.borrow().search(&context.query, k as usize))
    }
}

#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::retriever::export_retriever!(Bm25);

impl Index {
    pub fn build(skills: &[Skill]) -> Self {
        let mut index = Index::default();
        for (doc, skill) in skills.iter().enumerate() {
            let mut tf: HashMap<String, (f32, bool)> = HashMap::new();
            let mut length = 0.0;
            let fields: [(&str, f32, bool); 4] = [
                (&skill.name.replace('-', " "), 3.0, true),
                (&skill.tags.join(" "), 3.0, true),
                (&skill.description, 2.0, true),
                (&skill.body, 1.0, false),
            ];
            for (text, weight, head) in fields {
                for term in tokens(text) {
                    let entry = tf.entry(term).or_insert((0.0, false));
                    entry.0 += weight;
                    entry.1 |= head;
                    length += weight;
                }
            }
            for (term, (f, head)) in tf {
                index
                    .postings
                    .entry(term)
                    .or_default()
                    .push((doc as u32, f, head));
            }
            index.ids.push(skill.id.clone());
            index.lengths.push(length);
        }
        let total: f32 = index.lengths.iter().sum();
        index.average = if index.ids.is_empty() {
            1.0
        } else {
            (total / index.ids.len() as f32).max(1.0)
        };
        index
    }

    fn idf(&self, df: usize) -> f32 {
        let n = self.ids.len() as f32;
        (1.0 + (n - df as f32 + 0.5) / (df as f32 + 0.5)).ln()
    }

    pub fn search(&self, query: &str, k: usize) -> Vec<ScoredSkill> {
        let mut terms = tokens(query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() || self.ids.is_empty() {
            return Vec::new();
        }
        // A term no skill has still counts in what the query asks about.
        let weights: Vec<f32> = terms
            .iter()
            .map(|t| self.idf(self.postings.get(t).map_or(0, Vec::len)))
            .collect();
        let total: f32 = weights.iter().sum();
        let mut bm25: HashMap<u32, f32> = HashMap::new();
        let mut covered: HashMap<u32, f32> = HashMap::new();
        for (term, idf) in terms.iter().zip(&weights) {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            for &(doc, tf, head) in list {
                let norm = 1.0 - B + B * self.lengths[doc as usize] / self.average;
                *bm25.entry(doc).or_insert(0.0) += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
                // A term in what the skill is about counts fully; one only
                // mentioned in its body, less.
                *covered.entry(doc).or_insert(0.0) += if head { *idf } else { BODY_ONLY * idf };
            }
        }
        let mut ranked: Vec<(u32, f32, f32)> = covered
            .into_iter()
            .map(|(doc, c)| (doc, c / total, bm25.get(&doc).copied().unwrap_or(0.0)))
            .collect();
        ranked.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then(b.2.total_cmp(&a.2))
                .then(a.0.cmp(&b.0))
        });
        ranked.truncate(k);
        ranked
            .into_iter()
            .map(|(doc, score, _)| ScoredSkill {
                id: self.ids[doc as usize].clone(),
                score: score.clamp(0.0, 1.0),
            })
            .collect()
    }
}

const STOP: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "but", "by", "can", "could", "did", "do", "does", "doing", "for", "from", "get", "got",
    "had", "has", "have", "he", "hello", "her", "hey", "hi", "him", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "just", "let", "like", "me", "my", "no", "not", "now", "of", "ok",
    "okay", "on", "or", "our", "out", "please", "she", "should", "so", "some", "thank", "thanks",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "up", "us",
    "very", "want", "was", "we", "well", "were", "what", "when", "where", "which", "who", "why",
    "will", "with", "would", "yes", "you", "your",
];

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // Extensions B and later
}

/// Light suffix stemming, the same for skills and queries.
fn stem(word: &str) -> String {
    let n = word.len();
    for (suffix, min) in [("ing", 6), ("ies", 5), ("ed", 5), ("es", 5), ("s", 4)] {
        if n >= min && word.ends_with(suffix) && !word.ends_with("ss") {
            let base = &word[..n - suffix.len()];
            return if suffix == "ies" {
                format!("{base}y")
            } else {
                base.to_string()
            };
        }
    }
    word.to_string()
}

pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut run: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, out: &mut Vec<String>| {
        if word.len() > 1 && !STOP.contains(&word.as_str()) {
            out.push(stem(word));
        }
        word.clear();
    };
    let flush_run = |run: &mut Vec<char>, out: &mut Vec<String>| {
        for (i, c) in run.iter().enumerate() {
            out.push(c.to_string());
            if let Some(next) = run.get(i + 1) {
                out.push(format!("{c}{next}"));
            }
        }
        run.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            run.push(c);
        } else if c.is_alphanumeric() {
            flush_run(&mut run, &mut out);
            word.extend(c.to_lowercase());
        } else {
            flush_word(&mut word, &mut out);
            flush_run(&mut run, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_run(&mut run, &mut out);
    out
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
    fn a_shared_word_is_a_low_score() {
        let hits = bank().search(
            "what is the main plot of this novel about dragons and castles",
            5,
        );
        assert!(hits.iter().all(|h| h.score < 0.3), "{hits:?}");
    }

    #[test]
    fn cjk_queries_find_cjk_skills() {
        let hits = bank().search("帮我写一封中文邮件", 3);
        assert_eq!(hits[0].id, "chinese-writing", "{hits:?}");
        assert!(tokens("中文邮件").contains(&"邮件".to_string()));
    }

    #[test]
    fn stemming_joins_word_forms() {
        assert_eq!(stem("rebasing"), "rebas");
        assert_eq!(stem("rebases"), "rebas");
        assert_eq!(stem("libraries"), "library");
        assert_eq!(stem("class"), "class");
    }
}
