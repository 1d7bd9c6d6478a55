//! Text metaclaw did not write itself — what plugins return or log, skill
//! files, evolver drafts — on its way into a log line or a prompt. A leaf
//! module: it imports nothing of metaclaw's.

/// `text` as one log line: newlines and every other control character
/// escaped (`\n`, `\u{1b}`), so nothing it holds can start a line of its
/// own or drive a terminal, cut to `max_chars` characters (then `…`).
pub fn log_line(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars + 8));
    for (n, c) in text.chars().enumerate() {
        if n == max_chars {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hidden(c) => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    out
}

/// `text` fit for a prompt: control characters removed except newlines and
/// tabs (`\r\n` becomes `\n`), and so are the invisible characters that
/// reorder or hide text (bidirectional overrides, zero-width joiners).
pub fn prompt_text(text: &str) -> String {
    text.chars()
        .filter(|&c| c == '\n' || c == '\t' || !is_hidden(c))
        .collect()
}

/// Control characters (C0, DEL, C1) and the format characters that change
/// how surrounding text reads without being seen.
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM/RLM
            | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
            | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
            | '\u{2066}'..='\u{2069}' // bidi isolates
            | '\u{00AD}'              // soft hyphen
            | '\u{FEFF}'              // zero-width no-break space
            | '\u{E0000}'..='\u{E007F}' // tag characters (invisible ASCII)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_cannot_break_or_colour() {
        let forged = "ok\n2026-11-23T00:00:00Z ERROR metaclaw: admin token leaked\r\x1b[31m";
        let line = log_line(forged, 1000);
        assert!(!line.contains('\n') && !line.contains('\r') && !line.contains('\x1b'));
        assert_eq!(
            line,
            "ok\\n2026-11-23T00:00:00Z ERROR metaclaw: admin token leaked\\r\\u{1b}[31m"
        );
        assert_eq!(log_line("abcdef", 3), "abc…");
        assert_eq!(log_line("a\u{202E}b", 10), "a\\u{202e}b");
    }

    #[test]
    fn prompt_text_keeps_lines_and_drops_the_rest() {
        assert_eq!(
            prompt_text("one\r\ntwo\tthree\x07\x1b[0m\u{202E}four\u{200B}"),
            "one\ntwo\tthree[0mfour"
        );
        assert_eq!(prompt_text("héllo — 你好"), "héllo — 你好");
    }
}
