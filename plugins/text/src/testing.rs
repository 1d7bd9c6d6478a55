//! Test data and checks for plugin tests (the `test-skills` feature): real
//! text to run matchers on, and the check that a [`PhraseTable`] finds
//! exactly what [`Phrases`] finds phrase by phrase.

use std::path::Path;

use crate::message::{PhraseTable, Phrases};

/// The text of each OpenClaw request fixture (`tests/fixtures/openclaw/` at
/// the repository root: real system prompts, user messages, tool results),
/// with JSON string escapes undone so that lines and quotes read as sent.
pub fn openclaw_texts() -> Result<Vec<String>, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/openclaw");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("{}: no fixtures", dir.display()));
    }
    paths
        .iter()
        .map(|p| {
            let raw = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Ok(raw
                .replace("\\n", "\n")
                .replace("\\t", "\t")
                .replace("\\\"", "\"")
                .replace("\\\\", "\\"))
        })
        .collect()
}

/// The string literals of a Rust source file (`include_str!` of a scorer's
/// own source: its phrase tables and its tests' messages), escapes undone.
pub fn string_literals(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => literal.push('\n'),
                    Some('t') => literal.push('\t'),
                    Some(other) => literal.push(other),
                    None => break,
                },
                _ => literal.push(c),
            }
        }
        out.push(literal);
    }
    out
}

/// Where `table` (built from `phrases`) and phrase-by-phrase matching
/// disagree on `words`: `Err` says how; `Ok` counts the matches compared.
pub fn table_agrees<P: Phrases + ?Sized>(
    phrases: &[&str],
    table: &PhraseTable,
    words: &P,
) -> Result<usize, String> {
    let n = words.words().len();
    let expected: Vec<(&str, usize)> = phrases
        .iter()
        .filter_map(|p| words.find(p).map(|i| (*p, i)))
        .collect();
    let found = table.find_all(words);
    if found != expected {
        return Err(format!(
            "{:?}: find_all {found:?}, phrase by phrase {expected:?}",
            words.words()
        ));
    }
    let holds_one = !expected.is_empty();
    if table.any(words) != holds_one {
        return Err(format!("{:?}: any disagrees", words.words()));
    }
    let mut matches = expected.len();
    // Past the end too: `at` reads missing words as "".
    for at in 0..n + 2 {
        let expected = phrases.iter().find(|p| words.at(at, p)).copied();
        let found = table.at(words, at);
        if found != expected {
            return Err(format!(
                "{:?} at {at}: table {found:?}, phrase by phrase {expected:?}",
                words.words()
            ));
        }
        matches += usize::from(found.is_some());
    }
    Ok(matches)
}
