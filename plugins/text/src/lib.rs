//! Text analysis shared by metaclaw's first-party plugins.
//!
//! [`tokens`] is the tokenizer the `bm25` retriever indexes with (and so
//! `embedding`'s lexical half): Latin text is split into words (lower-cased,
//! stop words and contractions dropped, light suffix stemming); CJK text,
//! which has no spaces between words, becomes overlapping character bigrams.
//!
//! [`Vocabulary`] and [`TermVector`] add TF-IDF vectors over those terms and
//! their cosine, the lexical similarity the `dedup` evolver compares skills
//! with.
//!
//! [`message`] reads chat messages the way the `correction` and
//! `repeated-refusals` scorers do: agent metadata stripped, sentences split,
//! words normalised. [`markers`] finds the skills block's marker token
//! however it is spelled (the host uses it too). With the `test-skills`
//! feature, `skills` reads the built-in skills and `testing` has real text
//! and checks, for plugin tests.
//!
//! The crate has no dependency, and nothing here is tied to a plugin world,
//! so any plugin can use it.

use std::collections::HashMap;

pub mod markers;
pub mod message;
#[cfg(feature = "test-skills")]
pub mod skills;
#[cfg(any(test, feature = "test-skills"))]
pub mod testing;

/// Words too common to say what a text is about.
pub const STOP: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "aren", "as", "at",
    "be", "been", "but", "by", "can", "could", "couldn", "did", "didn", "do", "does", "doesn",
    "doing", "don", "for", "from", "get", "got", "had", "hadn", "has", "hasn", "have", "haven",
    "he", "hello", "her", "hey", "hi", "him", "his", "how", "i", "if", "in", "into", "is", "isn",
    "it", "its", "just", "let", "like", "me", "my", "no", "not", "now", "of", "ok", "okay", "on",
    "or", "our", "out", "please", "she", "should", "shouldn", "so", "some", "thank", "thanks",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "up", "us",
    "very", "want", "was", "wasn", "we", "well", "were", "weren", "what", "when", "where", "which",
    "who", "why", "will", "with", "won", "would", "wouldn", "yes", "you", "your",
];

/// Whether `c` is written without spaces between words (Chinese, Japanese,
/// Korean).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // Extensions B and later
}

/// Light suffix stemming, the same for skills and queries.
pub fn stem(word: &str) -> String {
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

/// The terms of `text`, in order: stemmed lower-case words without stop
/// words, and CJK bigrams (a lone CJK character is a term of its own).
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
    // CJK runs become overlapping bigrams (most words are two characters;
    // single characters, and Japanese kana especially, match almost
    // anything), and a lone character itself.
    let flush_run = |run: &mut Vec<char>, out: &mut Vec<String>| {
        if let [c] = run.as_slice() {
            out.push(c.to_string());
        }
        for pair in run.windows(2) {
            out.push(format!("{}{}", pair[0], pair[1]));
        }
        run.clear();
    };
    // After an apostrophe inside a word ("you're", "don't", "it's") the
    // rest is a contraction, not a word of its own.
    let mut contraction = false;
    for c in text.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            contraction = false;
            run.push(c);
        } else if c.is_alphanumeric() {
            flush_run(&mut run, &mut out);
            if !contraction {
                word.extend(c.to_lowercase());
            }
        } else if matches!(c, '\'' | '\u{2019}') && !word.is_empty() {
            contraction = true;
        } else {
            flush_word(&mut word, &mut out);
            flush_run(&mut run, &mut out);
            contraction = false;
        }
    }
    flush_word(&mut word, &mut out);
    flush_run(&mut run, &mut out);
    out
}

/// Document frequencies over a collection of texts, for TF-IDF weights.
#[derive(Debug, Default, Clone)]
pub struct Vocabulary {
    documents: u32,
    frequencies: HashMap<String, u32>,
}

impl Vocabulary {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one document, given its terms (repeats count once).
    pub fn add(&mut self, terms: &[String]) {
        self.documents += 1;
        let mut seen: Vec<&String> = terms.iter().collect();
        seen.sort();
        seen.dedup();
        for term in seen {
            *self.frequencies.entry(term.clone()).or_insert(0) += 1;
        }
    }

    /// Documents counted.
    pub fn documents(&self) -> u32 {
        self.documents
    }

    /// Smoothed inverse document frequency, `ln((1 + N) / (1 + df)) + 1`: at
    /// least 1 (a term every document has still counts a little), highest for
    /// a term no document has.
    pub fn idf(&self, term: &str) -> f32 {
        let df = self.frequencies.get(term).copied().unwrap_or(0) as f32;
        ((1.0 + self.documents as f32) / (1.0 + df)).ln() + 1.0
    }

    /// The L2-normalised TF-IDF vector of a text's terms, with sublinear term
    /// frequency (`1 + ln tf`), so that a word repeated does not swamp the rest.
    pub fn vector(&self, terms: &[String]) -> TermVector {
        let mut counts: HashMap<&str, u32> = HashMap::new();
        for term in terms {
            *counts.entry(term.as_str()).or_insert(0) += 1;
        }
        let mut weights: Vec<(String, f32)> = counts
            .into_iter()
            .map(|(term, tf)| (term.to_string(), (1.0 + (tf as f32).ln()) * self.idf(term)))
            .collect();
        weights.sort_by(|a, b| a.0.cmp(&b.0));
        let norm = weights.iter().map(|(_, w)| w * w).sum::<f32>().sqrt();
        if norm > 0.0 {
            for (_, w) in &mut weights {
                *w /= norm;
            }
        }
        TermVector { weights }
    }
}

/// A sparse, L2-normalised term vector, sorted by term.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TermVector {
    weights: Vec<(String, f32)>,
}

impl TermVector {
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// The terms and their weights, sorted by term.
    pub fn weights(&self) -> &[(String, f32)] {
        &self.weights
    }

    /// Cosine similarity in [0, 1] (0 when either vector is empty).
    pub fn cosine(&self, other: &TermVector) -> f32 {
        let (a, b) = (&self.weights, &other.weights);
        let (mut i, mut j, mut dot) = (0, 0, 0.0f32);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    dot += a[i].1 * b[j].1;
                    i += 1;
                    j += 1;
                }
            }
        }
        dot.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_stemmed_and_stopped() {
        assert_eq!(
            tokens("Rebasing the Feature branches"),
            ["rebas", "feature", "branch"]
        );
        assert!(tokens("how are you? it is what it is").is_empty());
    }

    #[test]
    fn cjk_becomes_bigrams() {
        assert_eq!(tokens("中文邮件"), ["中文", "文邮", "邮件"]);
        assert_eq!(tokens("写 a 信"), ["写", "信"]);
        assert!(is_cjk('中') && is_cjk('ア') && is_cjk('한') && !is_cjk('a'));
    }

    #[test]
    fn contractions_are_not_words() {
        assert_eq!(tokens("you're sure it's done? don't"), ["sure", "done"]);
        assert_eq!(tokens("the user\u{2019}s file"), ["user", "file"]);
        assert_eq!(tokens("'quoted' words"), ["quot", "word"]);
    }

    #[test]
    fn stemming_joins_word_forms() {
        assert_eq!(stem("rebasing"), "rebas");
        assert_eq!(stem("rebases"), "rebas");
        assert_eq!(stem("libraries"), "library");
        assert_eq!(stem("class"), "class");
    }

    #[test]
    fn tf_idf_cosine() {
        let docs = [
            "rebase a feature branch onto main",
            "process csv files with the right delimiter",
            "keep api keys out of code",
        ];
        let mut vocabulary = Vocabulary::new();
        for d in docs {
            vocabulary.add(&tokens(d));
        }
        assert_eq!(vocabulary.documents(), 3);
        assert!(vocabulary.idf("zzz") > vocabulary.idf("csv"));
        let v: Vec<TermVector> = docs.iter().map(|d| vocabulary.vector(&tokens(d))).collect();
        assert!((v[0].cosine(&v[0]) - 1.0).abs() < 1e-5);
        assert_eq!(v[0].cosine(&v[1]), 0.0);
        let q = vocabulary.vector(&tokens("rebase my feature branches"));
        assert!(q.cosine(&v[0]) > 0.5, "{}", q.cosine(&v[0]));
        assert!(q.cosine(&v[0]) < 1.0);
        assert_eq!(TermVector::default().cosine(&v[0]), 0.0);
        assert!(vocabulary.vector(&[]).is_empty());
    }
}
