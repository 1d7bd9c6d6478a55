//! Where a text spells the skills block's marker token (`metaclaw:skills`)
//! the way a model would still read it: any case, with spaces or invisible
//! characters between its letters, full-width, mathematical or
//! Cyrillic/Greek look-alike letters, look-alike colons, HTML character
//! references, Unicode tag characters. The host neutralises every such
//! spelling in what skills contribute to the block; the `guard` evolver
//! rejects drafts that hold one. One matcher for both, so they cannot drift.

use std::ops::Range;

/// The token both markers (`<!-- metaclaw:skills -->`,
/// `<!-- /metaclaw:skills -->`) share, as [`unit`] folds it.
const TOKEN: [char; 15] = [
    'm', 'e', 't', 'a', 'c', 'l', 'a', 'w', ':', 's', 'k', 'i', 'l', 'l', 's',
];

/// Where `text` spells the marker token, as byte ranges from its first
/// letter to its last.
pub fn markers(text: &str) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some((c, next)) = unit(text, at) {
        if c == TOKEN[0]
            && let Some(end) = token_from(text, next)
        {
            found.push(at..end);
            at = end;
        } else {
            at = next;
        }
    }
    found
}

/// The end of the token whose first letter ends at `at`, if the rest of it
/// follows (spaces and invisible characters may come between its letters).
fn token_from(text: &str, mut at: usize) -> Option<usize> {
    for &want in &TOKEN[1..] {
        loop {
            let (c, next) = unit(text, at)?;
            at = next;
            if c == want {
                break;
            }
            if !invisible(c) {
                return None;
            }
        }
    }
    Some(at)
}

/// Characters a reader does not see between the token's letters.
fn invisible(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(c,
            '\u{00AD}'
            | '\u{0300}'..='\u{036F}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
        )
}

/// The character at `at` as a reader takes it, and where the next starts:
/// a character reference (`&#58;`, `&#x3A;`, `&colon;`) is the character
/// it names; look-alike letters and colons are the ASCII ones, lower case.
fn unit(text: &str, at: usize) -> Option<(char, usize)> {
    let rest = text.get(at..)?;
    let c = rest.chars().next()?;
    if c == '&'
        && let Some((decoded, len)) = reference(rest)
    {
        return Some((fold(decoded), at + len));
    }
    Some((fold(c), at + c.len_utf8()))
}

/// A character reference at the start of `text`: the character and the
/// reference's length (the `;` may be missing, as browsers allow).
fn reference(text: &str) -> Option<(char, usize)> {
    if text
        .get(..7)
        .is_some_and(|r| r.eq_ignore_ascii_case("&colon;"))
    {
        return Some((':', 7));
    }
    let rest = text.strip_prefix("&#")?;
    let (radix, digits_at) = match rest.as_bytes().first()? {
        b'x' | b'X' => (16, 3),
        _ => (10, 2),
    };
    let digits = text[digits_at..]
        .bytes()
        .take_while(|b| b.is_ascii_hexdigit() && (radix == 16 || b.is_ascii_digit()))
        .take(8)
        .count();
    let code = u32::from_str_radix(text.get(digits_at..digits_at + digits)?, radix).ok()?;
    let mut len = digits_at + digits;
    if text[len..].starts_with(';') {
        len += 1;
    }
    Some((char::from_u32(code)?, len))
}

/// A look-alike of a letter of the token or of a colon as that ASCII
/// character, lower case.
fn fold(c: char) -> char {
    let c = match c as u32 {
        0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        0xE0020..=0xE007E => char::from_u32(c as u32 - 0xE0000).unwrap_or(c),
        n @ 0x1D400..=0x1D6A3 => char::from(b'a' + ((n - 0x1D400) % 52 % 26) as u8),
        _ => c,
    };
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    match c.to_lowercase().next().unwrap_or(c) {
        '\u{FE55}' | '\u{FE13}' | '\u{A789}' | '\u{2236}' | '\u{02D0}' | '\u{02F8}'
        | '\u{0589}' | '\u{05C3}' | '\u{205A}' | '\u{1361}' => ':',
        '\u{0430}' | '\u{03B1}' => 'a',
        '\u{0441}' | '\u{03F2}' => 'c',
        '\u{0435}' => 'e',
        '\u{0456}' | '\u{03B9}' | '\u{0131}' => 'i',
        '\u{043A}' | '\u{03BA}' => 'k',
        '\u{04CF}' => 'l',
        '\u{043C}' => 'm',
        '\u{0455}' | '\u{017F}' => 's',
        '\u{0442}' | '\u{03C4}' => 't',
        '\u{051D}' | '\u{0461}' => 'w',
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_a_model_reads_as_the_token_are_found() {
        for text in [
            "<!-- /metaclaw:skills -->",
            "<!--/METACLAW:SKILLS-->",
            "MetaClaw : Skills",
            "metaclaw&#58;skills",
            "metaclaw&colon;skills",
            "&#109;etaclaw:skills",
            "ｍｅｔａｃｌａｗ：ｓｋｉｌｌｓ",
            "\u{1D426}\u{0435}t\u{0430}claw:skills",
            "meta\u{200B}claw:sk\u{AD}ills",
            "metaclaw:\u{202E}skills",
        ] {
            assert_eq!(markers(text).len(), 1, "{text:?}");
        }
        for text in [
            "metaclaw skills",
            "metaclaw-skills",
            "metaclaw:skill",
            "<!-- a -->",
        ] {
            assert!(markers(text).is_empty(), "{text:?}");
        }
        let text = "a metaclaw:skills b METACLAW:SKILLS";
        let found = markers(text);
        assert_eq!(found.len(), 2);
        assert_eq!(&text[found[0].clone()], "metaclaw:skills");
    }
}
