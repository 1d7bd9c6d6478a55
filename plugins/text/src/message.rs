//! User and assistant messages as the scorers read them.
//!
//! [`strip_metadata`] removes what agent frameworks wrap around a user's
//! text (a leading bracketed timestamp, `… (untrusted metadata):` JSON
//! blocks, a trailing `Runtime: …` line), [`split_sentences`] cuts prose into sentences, [`words`] turns a
//! sentence into normalised words (lower-cased, accents folded, apostrophes
//! dropped, two-word forms contracted) that [`Phrases`] matches phrases
//! against (a [`PhraseTable`] many phrases at once), and [`clip`] shortens
//! a quote for a rationale.

use std::collections::HashMap;

/// A user message without the agent metadata frameworks put around it: a
/// leading `[Sun 2026-11-22 10:00 UTC]` timestamp, the `… (untrusted
/// metadata):` / `… (untrusted, for context):` blocks (whose shared JSON
/// would make any two messages look alike, or put words in the user's
/// mouth) and OpenClaw's trailing `Runtime: agent=… | sessionId=… | …`
/// line. The host reads the user's words with this too (retrieval, the
/// scorers' input, the judge and the evolver), so all see the same text.
pub fn strip_metadata(message: &str) -> String {
    let without_blocks = remove_metadata_blocks(message);
    let mut rest = without_blocks.trim_start();
    while let Some(after) = strip_timestamp(rest) {
        rest = after.trim_start();
    }
    strip_runtime_line(rest).trim_end().to_string()
}

/// `text` without a last paragraph that is OpenClaw's runtime line:
/// `Runtime: ` then `key=value` fields on one line.
fn strip_runtime_line(text: &str) -> &str {
    const LABEL: &str = "\n\nRuntime: ";
    let Some(at) = text.rfind(LABEL) else {
        return text;
    };
    let line = text[at + LABEL.len()..].trim_end();
    let first_key = line.split(" | ").next().and_then(|f| f.split_once('='));
    let is_runtime = !line.contains('\n')
        && first_key.is_some_and(|(key, _)| {
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if is_runtime { &text[..at] } else { text }
}

/// Removes every `Label (untrusted …):` line together with the fenced (or
/// bare JSON) block that follows it.
fn remove_metadata_blocks(text: &str) -> String {
    // ASCII lowercasing keeps byte offsets, so positions carry over.
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut kept_to = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("(untrusted").map(|i| i + search) {
        search = found + 1;
        let line_start = lower[..found].rfind('\n').map_or(0, |i| i + 1).max(kept_to);
        if found - line_start > 100 {
            continue;
        }
        let Some(colon) = lower[found..]
            .find("):")
            .map(|i| found + i + 2)
            .filter(|&c| c - found <= 80)
        else {
            continue;
        };
        let Some(end) = block_end(text, colon) else {
            continue;
        };
        out.push_str(&text[kept_to..line_start]);
        kept_to = end;
        search = end;
    }
    out.push_str(&text[kept_to..]);
    out
}

/// Where the fenced or bare JSON block at (or after whitespace from) `at` ends.
fn block_end(text: &str, at: usize) -> Option<usize> {
    let rest = &text[at..];
    let start = at + rest.len() - rest.trim_start().len();
    let body = &text[start..];
    for fence in ["```", "~~~"] {
        if body.starts_with(fence) {
            return body[3..].find(fence).map(|i| start + 3 + i + 3);
        }
    }
    if body.starts_with('{') || body.starts_with('[') {
        return json_end(body).map(|n| start + n);
    }
    None
}

/// Length of the balanced JSON value at the start of `text`.
fn json_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `[Sun 2026-11-22 10:00 UTC] rest` → `rest`.
fn strip_timestamp(text: &str) -> Option<&str> {
    let inner_end = text.strip_prefix('[')?.find(']')?;
    let inner = &text[1..1 + inner_end];
    let looks_like_time = (8..=64).contains(&inner.chars().count())
        && inner.chars().any(|c| c.is_ascii_digit())
        && inner.contains([':', '-', '/']);
    looks_like_time.then(|| &text[inner_end + 2..])
}

/// Sentences, trimmed, with their byte offsets in `text`: split after `.`,
/// `!`, `?`, `;`, their CJK forms and newlines (a `.` only before a space,
/// another `.` or the end, so `main.rs` and `3.5` stay whole). Blank
/// sentences are left out.
pub fn split_sentences(text: &str) -> Vec<(usize, &str)> {
    let is_stop = |c: char| matches!(c, '!' | '?' | ';' | '\n' | '。' | '！' | '？' | '；');
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let ends = is_stop(c) || (c == '.' && next.is_none_or(|n| n.is_whitespace() || n == '.'));
        if !ends {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, n)) = chars.peek() {
            if is_stop(n) || n == '.' {
                end = j + n.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        push_sentence(text, start, end, &mut out);
        start = end;
    }
    push_sentence(text, start, text.len(), &mut out);
    out
}

fn push_sentence<'a>(text: &'a str, start: usize, end: usize, out: &mut Vec<(usize, &'a str)>) {
    let raw = &text[start..end];
    let trimmed = raw.trim_start();
    if !trimmed.trim().is_empty() {
        out.push((start + raw.len() - trimmed.len(), trimmed.trim_end()));
    }
}

/// How [`words`] joins words: two-word forms (`("that", "is", "thats")`,
/// joined unless punctuation separates them) and single words replaced
/// (`("cannot", "cant")`).
#[derive(Debug, Clone, Copy)]
pub struct Contractions<'a> {
    pub pairs: &'a [(&'a str, &'a str, &'a str)],
    pub words: &'a [(&'a str, &'a str)],
}

/// Normalised words and, for each, whether punctuation follows it: words
/// are runs of letters, digits and `_`, lower-cased with accents folded
/// ([`fold`]) and apostrophes dropped ("that's" → "thats"), then contracted
/// as `contractions` says.
pub fn words(text: &str, contractions: Contractions) -> (Vec<String>, Vec<bool>) {
    let mut words: Vec<String> = Vec::new();
    let mut pause: Vec<bool> = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if matches!(c, '\'' | '’' | '‘' | 'ʼ') {
            continue;
        }
        if c.is_alphanumeric() || c == '_' {
            for l in c.to_lowercase() {
                current.push(fold(l));
            }
            continue;
        }
        if !current.is_empty() {
            words.push(std::mem::take(&mut current));
            pause.push(false);
        }
        if !c.is_whitespace()
            && let Some(last) = pause.last_mut()
        {
            *last = true;
        }
    }
    if !current.is_empty() {
        words.push(current);
        pause.push(false);
    }
    contract(words, pause, contractions)
}

/// Folds the accents of common Latin letters: "está" → "esta".
pub fn fold(c: char) -> char {
    match c {
        'á' | 'à' | 'â' | 'ä' | 'ã' => 'a',
        'é' | 'è' | 'ê' | 'ë' => 'e',
        'í' | 'ì' | 'î' | 'ï' => 'i',
        'ó' | 'ò' | 'ô' | 'ö' | 'õ' => 'o',
        'ú' | 'ù' | 'û' | 'ü' => 'u',
        'ñ' => 'n',
        'ç' => 'c',
        other => other,
    }
}

fn contract(
    words: Vec<String>,
    pause: Vec<bool>,
    contractions: Contractions,
) -> (Vec<String>, Vec<bool>) {
    let mut out_words = Vec::with_capacity(words.len());
    let mut out_pause = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let next = words.get(i + 1).map_or("", String::as_str);
        let pair = contractions
            .pairs
            .iter()
            .find(|(a, b, _)| words[i] == *a && next == *b && !pause[i]);
        if let Some((_, _, joined)) = pair {
            out_words.push((*joined).to_string());
            out_pause.push(pause[i + 1]);
            i += 2;
            continue;
        }
        let single = contractions.words.iter().find(|(w, _)| words[i] == *w);
        out_words.push(single.map_or_else(|| words[i].clone(), |(_, to)| (*to).to_string()));
        out_pause.push(pause[i]);
        i += 1;
    }
    (out_words, out_pause)
}

/// Phrase matching over a sequence of normalised words (see [`words`]).
pub trait Phrases {
    /// The words, in order.
    fn words(&self) -> &[String];

    /// Word `i`, or `""` past the end.
    fn word(&self, i: usize) -> &str {
        self.words().get(i).map_or("", String::as_str)
    }

    /// Whether `phrase` (space-separated words) starts at word `at`.
    fn at(&self, at: usize, phrase: &str) -> bool {
        (at..)
            .zip(phrase.split(' '))
            .all(|(i, part)| self.word(i) == part)
    }

    /// Where `phrase` first starts, if anywhere.
    fn find(&self, phrase: &str) -> Option<usize> {
        (0..self.words().len()).find(|&i| self.at(i, phrase))
    }
}

/// A table of phrases (space-separated words, as [`Phrases`] takes them)
/// indexed by first word, with the words after it split once: a sentence
/// then costs one lookup per word, where trying every phrase at every word
/// (and splitting it each time) was most of a scorer's time. Build one per
/// table, once (a `LazyLock`); it finds exactly what [`Phrases::at`] and
/// [`Phrases::find`] find phrase by phrase.
#[derive(Debug)]
pub struct PhraseTable<'a> {
    phrases: &'a [&'a str],
    /// First word → the phrases starting with it, as (index in `phrases`,
    /// the words after the first), in table order.
    by_first: HashMap<&'a str, Vec<(usize, Vec<&'a str>)>>,
}

impl<'a> PhraseTable<'a> {
    pub fn new(phrases: &'a [&'a str]) -> Self {
        let mut by_first: HashMap<&'a str, Vec<(usize, Vec<&'a str>)>> = HashMap::new();
        for (index, phrase) in phrases.iter().enumerate() {
            let mut parts = phrase.split(' ');
            let first = parts.next().unwrap_or_default();
            by_first
                .entry(first)
                .or_default()
                .push((index, parts.collect()));
        }
        PhraseTable { phrases, by_first }
    }

    /// The first phrase of the table, in table order, that starts at word
    /// `at` (as `phrases.iter().find(|p| words.at(at, p))`).
    pub fn at<P: Phrases + ?Sized>(&self, words: &P, at: usize) -> Option<&'a str> {
        let candidates = self.by_first.get(words.word(at))?;
        candidates
            .iter()
            .find(|(_, rest)| follows(words, at, rest))
            .map(|&(index, _)| self.phrases[index])
    }

    /// Each phrase of the table that `words` holds, with the word where it
    /// first starts, in table order (for each phrase, what
    /// [`Phrases::find`] finds).
    pub fn find_all<P: Phrases + ?Sized>(&self, words: &P) -> Vec<(&'a str, usize)> {
        // (index in the table, first start): few, so a scan beats a set.
        let mut found: Vec<(usize, usize)> = Vec::new();
        for at in 0..words.words().len() {
            let Some(candidates) = self.by_first.get(words.word(at)) else {
                continue;
            };
            for (index, rest) in candidates {
                if !found.iter().any(|&(seen, _)| seen == *index) && follows(words, at, rest) {
                    found.push((*index, at));
                }
            }
        }
        found.sort_unstable();
        found
            .into_iter()
            .map(|(index, at)| (self.phrases[index], at))
            .collect()
    }

    /// Whether `words` holds any phrase of the table.
    pub fn any<P: Phrases + ?Sized>(&self, words: &P) -> bool {
        (0..words.words().len()).any(|at| self.at(words, at).is_some())
    }
}

/// Whether `rest` (a phrase's words after its first) follows word `at`.
fn follows<P: Phrases + ?Sized>(words: &P, at: usize, rest: &[&str]) -> bool {
    rest.iter()
        .enumerate()
        .all(|(k, part)| words.word(at + 1 + k) == *part)
}

/// `text` on one line, whitespace collapsed, at most 100 characters (a
/// longer one is cut and ends in `…`).
pub fn clip(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= 100 {
        one_line
    } else {
        let cut: String = one_line.chars().take(99).collect();
        format!("{}…", cut.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACTIONS: Contractions = Contractions {
        pairs: &[("that", "is", "thats"), ("can", "not", "cant")],
        words: &[("cannot", "cant")],
    };

    #[test]
    fn strips_agent_metadata() {
        let message = "Conversation info (untrusted metadata):\n```json\n{\"chat\": \"wrong channel\"}\n```\n\nSender (untrusted metadata): ```json {\"name\": \"ana\", \"note\": \"that's wrong\"}```\n[Sun 2026-11-22 10:00 UTC] thanks, looks good";
        assert_eq!(strip_metadata(message), "thanks, looks good");
        assert_eq!(
            strip_metadata("[Sun 2026-11-22 10:00 UTC] no, that's wrong"),
            "no, that's wrong"
        );
        let bare = "Sender (untrusted metadata): {\"id\": \"}\"}\nstill broken";
        assert_eq!(strip_metadata(bare), "still broken");
        assert_eq!(strip_metadata("[1] first point"), "[1] first point");
        let unclosed = "Sender (untrusted metadata): ```json {\"a\": 1}\nhi";
        assert_eq!(strip_metadata(unclosed), unclosed);
    }

    #[test]
    fn strips_openclaws_runtime_line() {
        let message = "[Mon 2026-11-23 18:26 UTC] How do I rebase?\n\nRuntime: agent=main | session=agent:main:main | sessionId=1a206f6b-47b6-464c-86db-730d5d7b0316 | host=vm | os=Linux 6.1.0-generic (x64)\n";
        assert_eq!(strip_metadata(message), "How do I rebase?");
        // The user's own "Runtime:" paragraph is theirs.
        for kept in [
            "Why is it slow?\n\nRuntime: about 5 minutes",
            "Two lines\n\nRuntime: a=1\nand more",
        ] {
            assert_eq!(strip_metadata(kept), kept);
        }
    }

    #[test]
    fn splits_sentences_with_offsets() {
        let text = "Sure. But see main.rs, v3.5!  Why?? 好的。\n\nok";
        let sentences = split_sentences(text);
        assert_eq!(
            sentences.iter().map(|&(_, s)| s).collect::<Vec<_>>(),
            ["Sure.", "But see main.rs, v3.5!", "Why??", "好的。", "ok"]
        );
        for (start, s) in sentences {
            assert!(text[start..].starts_with(s), "{s}");
        }
        assert!(split_sentences(" \n. ").len() <= 1);
        assert!(split_sentences("").is_empty());
    }

    struct Sentence(Vec<String>);

    impl Phrases for Sentence {
        fn words(&self) -> &[String] {
            &self.0
        }
    }

    #[test]
    fn normalises_and_matches_words() {
        let (w, pause) = words("That is, I can't; that is Está bien. cannot", CONTRACTIONS);
        assert_eq!(w, ["thats", "i", "cant", "thats", "esta", "bien", "cant"]);
        assert_eq!(pause, [true, false, true, false, false, true, false]);
        let (apart, _) = words("that, is", CONTRACTIONS);
        assert_eq!(apart, ["that", "is"]);
        let s = Sentence(w);
        assert_eq!(s.find("thats esta"), Some(3));
        assert!(s.at(1, "i cant") && !s.at(1, "i cant not"));
        assert_eq!(s.word(99), "");
        assert_eq!(s.find("bien no"), None);
    }

    #[test]
    fn a_phrase_table_finds_what_phrases_find_one_by_one() {
        // Shared first words, a phrase inside another, repeats, a phrase
        // that only matches past the end ("" parts), in table order.
        const TABLE: &[&str] = &[
            "i cant",
            "i cant help",
            "i",
            "cant help but",
            "thats",
            "thats wrong",
            "wrong ",
            "no such",
            "bien",
        ];
        let table = PhraseTable::new(TABLE);
        let s = Sentence(
            ["i", "cant", "help", "but", "i", "cant", "thats", "wrong"]
                .map(String::from)
                .to_vec(),
        );
        assert_eq!(
            table.find_all(&s),
            [
                ("i cant", 0),
                ("i cant help", 0),
                ("i", 0),
                ("cant help but", 1),
                ("thats", 6),
                ("thats wrong", 6),
                ("wrong ", 7)
            ]
        );
        assert_eq!(table.at(&s, 0), Some("i cant"));
        assert_eq!(table.at(&s, 4), Some("i cant"));
        assert_eq!(table.at(&s, 2), None);
        assert!(table.any(&s) && !table.any(&Sentence(Vec::new())));
        let mut compared = 0;
        for text in [
            "I can't help but notice: that is wrong.",
            "No such flag; i i i cant",
            "Está bien, wrong",
            "",
        ] {
            let (w, _) = words(text, CONTRACTIONS);
            compared += crate::testing::table_agrees(TABLE, &table, &Sentence(w)).unwrap();
        }
        assert!(compared > 5, "{compared}");
    }

    #[test]
    fn clips_to_one_short_line() {
        assert_eq!(clip(" a\n b  c "), "a b c");
        let long = clip(&"x ".repeat(200));
        assert_eq!(long.chars().count(), 100);
        assert!(long.ends_with('…'));
    }
}
