//! SQLite's spelling of the store's SQL, rewritten for Postgres: the one
//! place the two dialects' small differences live. Each statement's text is
//! rewritten once (connections keep the prepared result):
//!
//! - placeholders: `?N` → `$N`, a bare `?` → the next `$N`;
//! - `INSERT OR IGNORE INTO …` → `INSERT INTO … ON CONFLICT DO NOTHING`;
//! - the scalar `max(a, b)` / `min(a, b)` → `GREATEST(a, b)` / `LEAST(a, b)`
//!   (with one argument they stay the aggregates);
//! - `IFNULL(` → `COALESCE(`; `CAST(… AS REAL)` → `… AS DOUBLE PRECISION`.
//!
//! String literals, quoted names and comments are left as they are. What
//! has no mechanical rewrite (`INSERT OR REPLACE`, SQLite's JSON functions,
//! `last_insert_rowid()`) is not written in the store's SQL: it uses the
//! spelling both take (`ON CONFLICT … DO UPDATE`, `RETURNING`) or asks the
//! connection's backend.

/// `sql` as Postgres takes it.
pub fn to_postgres(sql: &str) -> String {
    let mut toks = tokenize(sql);
    placeholders(&mut toks);
    scalar_min_max(&mut toks);
    insert_or_ignore(&mut toks);
    renames(&mut toks);
    toks.iter().map(Tok::text).collect()
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// A name or keyword.
    Word(String),
    /// `?` or `?N` (the number, if given).
    Param(Option<u32>),
    /// A literal, quoted name, comment or whitespace: copied as is.
    Verbatim(String),
    Punct(char),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Self::Word(w) | Self::Verbatim(w) => w.clone(),
            Self::Param(Some(n)) => format!("${n}"),
            // `placeholders` numbered every bare one.
            Self::Param(None) => "?".to_owned(),
            Self::Punct(c) => c.to_string(),
        }
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self, Self::Word(w) if w.eq_ignore_ascii_case(word))
    }

    fn is_blank(&self) -> bool {
        matches!(self, Self::Verbatim(v) if v.trim().is_empty() || v.starts_with("--") || v.starts_with("/*"))
    }
}

fn tokenize(sql: &str) -> Vec<Tok> {
    let chars: Vec<char> = sql.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let start = i;
        let text = |end: usize| chars[start..end].iter().collect::<String>();
        if c == '\'' || c == '"' || c == '`' {
            // A literal or quoted name; a doubled quote stays inside it.
            i += 1;
            while let Some(&d) = chars.get(i) {
                i += 1;
                if d == c {
                    if chars.get(i) == Some(&c) {
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            toks.push(Tok::Verbatim(text(i)));
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while chars.get(i).is_some_and(|&d| d != '\n') {
                i += 1;
            }
            toks.push(Tok::Verbatim(text(i)));
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i - 1] == '*' && chars[i] == '/') {
                i += 1;
            }
            i = (i + 1).min(chars.len());
            toks.push(Tok::Verbatim(text(i)));
        } else if c.is_whitespace() {
            while chars.get(i).is_some_and(|d| d.is_whitespace()) {
                i += 1;
            }
            toks.push(Tok::Verbatim(text(i)));
        } else if c == '?' {
            i += 1;
            while chars.get(i).is_some_and(char::is_ascii_digit) {
                i += 1;
            }
            toks.push(Tok::Param(text(i)[1..].parse().ok()));
        } else if c.is_alphanumeric() || c == '_' {
            while chars
                .get(i)
                .is_some_and(|&d| d.is_alphanumeric() || d == '_')
            {
                i += 1;
            }
            toks.push(Tok::Word(text(i)));
        } else {
            i += 1;
            toks.push(Tok::Punct(c));
        }
    }
    toks
}

/// SQLite numbers a bare `?` one past the largest number so far.
fn placeholders(toks: &mut [Tok]) {
    let mut last = 0;
    for tok in toks.iter_mut() {
        if let Tok::Param(n) = tok {
            let number = n.unwrap_or(last + 1);
            last = last.max(number);
            *n = Some(number);
        }
    }
}

/// The index of the next token after `i` that is not blank.
fn next_solid(toks: &[Tok], i: usize) -> Option<usize> {
    (i + 1..toks.len()).find(|&j| !toks[j].is_blank())
}

/// The index of the `)` closing the `(` at `open`, and whether a comma
/// sits directly inside.
fn closing(toks: &[Tok], open: usize) -> Option<(usize, bool)> {
    let mut depth = 0usize;
    let mut comma = false;
    for (j, tok) in toks.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    return Some((j, comma));
                }
            }
            Tok::Punct(',') if depth == 1 => comma = true,
            _ => {}
        }
    }
    None
}

fn scalar_min_max(toks: &mut [Tok]) {
    for i in 0..toks.len() {
        let name = if toks[i].is_word("max") {
            "GREATEST"
        } else if toks[i].is_word("min") {
            "LEAST"
        } else {
            continue;
        };
        let Some(open) = next_solid(toks, i).filter(|&j| toks[j] == Tok::Punct('(')) else {
            continue;
        };
        if let Some((_, true)) = closing(toks, open) {
            toks[i] = Tok::Word(name.to_owned());
        }
    }
}

fn insert_or_ignore(toks: &mut Vec<Tok>) {
    let mut i = 0;
    while i < toks.len() {
        let or = next_solid(toks, i);
        let ignore = or.and_then(|j| next_solid(toks, j));
        let (Some(or), Some(ignore)) = (or, ignore) else {
            break;
        };
        if !(toks[i].is_word("INSERT") && toks[or].is_word("OR") && toks[ignore].is_word("IGNORE"))
        {
            i += 1;
            continue;
        }
        toks.drain(i + 1..=ignore);
        // The statement's end (or its RETURNING), outside parentheses.
        let mut depth = 0usize;
        let mut end = toks.len();
        for (j, tok) in toks.iter().enumerate().skip(i) {
            match tok {
                Tok::Punct('(') => depth += 1,
                Tok::Punct(')') => depth = depth.saturating_sub(1),
                Tok::Punct(';') if depth == 0 => {
                    end = j;
                    break;
                }
                t if depth == 0 && t.is_word("RETURNING") => {
                    end = j;
                    break;
                }
                _ => {}
            }
        }
        // Before the blanks that end it, so the text keeps its shape.
        while end > i && toks[end - 1].is_blank() {
            end -= 1;
        }
        toks.insert(end, Tok::Verbatim(" ON CONFLICT DO NOTHING".to_owned()));
        i = end + 1;
    }
}

fn renames(toks: &mut [Tok]) {
    for i in 0..toks.len() {
        if toks[i].is_word("IFNULL") {
            toks[i] = Tok::Word("COALESCE".to_owned());
        } else if toks[i].is_word("REAL") {
            let before = (0..i).rev().find(|&j| !toks[j].is_blank());
            if before.is_some_and(|j| toks[j].is_word("AS")) {
                toks[i] = Tok::Word("DOUBLE PRECISION".to_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::to_postgres;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(
            to_postgres("SELECT a FROM t WHERE b = ?1 AND c = ?2 OR d = ?1"),
            "SELECT a FROM t WHERE b = $1 AND c = $2 OR d = $1"
        );
        assert_eq!(to_postgres("VALUES (?, ?, ?)"), "VALUES ($1, $2, $3)");
        assert_eq!(to_postgres("VALUES (?2, ?)"), "VALUES ($2, $3)");
    }

    #[test]
    fn literals_names_and_comments_are_left_alone() {
        let sql = "SELECT 'it''s ?1', \"max\"(x) -- ?2 max(a, b)\nFROM t WHERE x = ?1";
        assert_eq!(
            to_postgres(sql),
            "SELECT 'it''s ?1', \"max\"(x) -- ?2 max(a, b)\nFROM t WHERE x = $1"
        );
    }

    #[test]
    fn insert_or_ignore_becomes_on_conflict_do_nothing() {
        assert_eq!(
            to_postgres("INSERT OR IGNORE INTO blobs (hash, data) VALUES (?1, ?2)"),
            "INSERT INTO blobs (hash, data) VALUES ($1, $2) ON CONFLICT DO NOTHING"
        );
        assert_eq!(
            to_postgres("insert or ignore into t (a) values (?1)\n   RETURNING id"),
            "insert into t (a) values ($1) ON CONFLICT DO NOTHING\n   RETURNING id"
        );
        assert_eq!(
            to_postgres(
                "INSERT OR IGNORE INTO a VALUES (1); INSERT OR IGNORE INTO b SELECT x FROM c;"
            ),
            "INSERT INTO a VALUES (1) ON CONFLICT DO NOTHING; INSERT INTO b SELECT x FROM c ON CONFLICT DO NOTHING;"
        );
    }

    #[test]
    fn scalar_max_and_min_become_greatest_and_least() {
        assert_eq!(
            to_postgres("SELECT max(a, coalesce(b, 0)), MAX(c), min(f(x, y)), min(a,b) FROM t"),
            "SELECT GREATEST(a, coalesce(b, 0)), MAX(c), min(f(x, y)), LEAST(a,b) FROM t"
        );
    }

    #[test]
    fn ifnull_and_real_casts_are_renamed() {
        assert_eq!(
            to_postgres("SELECT IFNULL(a, 0), CAST(b AS REAL), real FROM t"),
            "SELECT COALESCE(a, 0), CAST(b AS DOUBLE PRECISION), real FROM t"
        );
    }
}
