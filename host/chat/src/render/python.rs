//! Python's spelling of values, which chat templates were written against:
//! `json.dumps` (the `tojson` filter transformers installs) and `str()` /
//! `repr()` (what Jinja2 prints for `{{ value }}`). minijinja's own spellings
//! differ (`none`, `true`, compact JSON with HTML escapes), and every
//! character counts once the text is tokenised.

use std::fmt::Write as _;

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// A JSON value as the template sees it, as Python's `json.loads` gives
/// it: objects keep their key order, integers stay integers (`1` is not
/// `1.0`).
pub(crate) fn from_json(json: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match json {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (None, Some(u), _) => Value::from(u),
            (None, None, Some(f)) => Value::from(f),
            (None, None, None) => Value::from(n.to_string()),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => items.iter().map(from_json).collect(),
        J::Object(fields) => {
            Value::from_pairs(fields.iter().map(|(k, v)| (k.as_str(), from_json(v))))
        }
    }
}

/// The options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Debug, Clone)]
pub(crate) struct JsonOptions {
    pub ensure_ascii: bool,
    /// The string one level of nesting is indented by; `None`: one line.
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl JsonOptions {
    /// `json.dumps`'s defaults for an `indent` and `separators`: `", "` and
    /// `": "`, except that the item separator loses its space when indenting.
    pub(crate) fn new(indent: Option<String>, separators: Option<(String, String)>) -> Self {
        let (item_separator, key_separator) = separators.unwrap_or_else(|| {
            let item = if indent.is_some() { "," } else { ", " };
            (item.to_string(), ": ".to_string())
        });
        JsonOptions {
            ensure_ascii: false,
            indent,
            item_separator,
            key_separator,
            sort_keys: false,
        }
    }
}

/// `json.dumps(value, …)`.
pub(crate) fn json_dumps(value: &Value, options: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(&mut out, value, options, 0)?;
    Ok(out)
}

fn write_json(
    out: &mut String,
    value: &Value,
    opts: &JsonOptions,
    level: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&json_number(value)),
        ValueKind::String => {
            json_string(out, value.as_str().unwrap_or_default(), opts.ensure_ascii)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, opts, level, ('[', ']'), &items, |out, item, level| {
                write_json(out, item, opts, level)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((json_key(&key)?, item));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(
                out,
                opts,
                level,
                ('{', '}'),
                &entries,
                |out, (key, item), level| {
                    json_string(out, key, opts.ensure_ascii);
                    out.push_str(&opts.key_separator);
                    write_json(out, item, opts, level)
                },
            )?;
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a value of type {kind} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

/// A list or dict, laid out as `json.dumps` does with and without `indent`.
fn write_container<T>(
    out: &mut String,
    opts: &JsonOptions,
    level: usize,
    (open, close): (char, char),
    items: &[T],
    mut write_item: impl FnMut(&mut String, &T, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    let newline = |level: usize| {
        opts.indent
            .as_ref()
            .map(|indent| format!("\n{}", indent.repeat(level)))
            .unwrap_or_default()
    };
    let inner = newline(level + 1);
    out.push_str(&inner);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&opts.item_separator);
            out.push_str(&inner);
        }
        write_item(out, item, level + 1)?;
    }
    out.push_str(&newline(level));
    out.push(close);
    Ok(())
}

/// A dict key as `json.dumps` converts it: strings as they are, numbers,
/// booleans and `None` spelled as JSON; anything else is an error.
fn json_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => Ok(json_number(key)),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        kind => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: keys must be str, int, float, bool or None, not {kind}"),
        )),
    }
}

fn json_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(f) if f.is_nan() => "NaN".to_string(),
        Ok(f) if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string(),
        Ok(f) => float_repr(f),
        Err(_) => value.to_string(),
    }
}

/// A JSON string as Python's encoder writes it: `"`, `\` and control
/// characters escaped (`\n`, `\u001b`, …), everything else as is unless
/// `ensure_ascii`, which escapes all but printable ASCII (UTF-16 pairs
/// above the BMP).
fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `str(value)`: what Jinja2 prints for `{{ value }}`.
pub(crate) fn str_of(value: &Value) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        ValueKind::Undefined => String::new(),
        _ => {
            let mut out = String::new();
            write_repr(&mut out, value);
            out
        }
    }
}

/// `repr(value)` for what JSON can hold (lists and dicts as Python prints
/// them: `['a', 1, None]`, `{'k': True}`); other values as minijinja
/// prints them.
fn write_repr(out: &mut String, value: &Value) {
    match value.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_nan() => out.push_str("nan"),
            Ok(f) if f.is_infinite() => out.push_str(if f > 0.0 { "inf" } else { "-inf" }),
            Ok(f) => out.push_str(&float_repr(f)),
            Err(_) => out.push_str(&value.to_string()),
        },
        ValueKind::String => string_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq => match value.try_iter() {
            Ok(items) => {
                out.push('[');
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &item);
                }
                out.push(']');
            }
            Err(_) => out.push_str(&value.to_string()),
        },
        ValueKind::Map => match value.try_iter() {
            Ok(keys) => {
                out.push('{');
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &key);
                    out.push_str(": ");
                    write_repr(out, &value.get_item(&key).unwrap_or_default());
                }
                out.push('}');
            }
            Err(_) => out.push_str(&value.to_string()),
        },
        _ => out.push_str(&value.to_string()),
    }
}

/// Python's `repr(str)`: single quotes unless the text has a single quote
/// and no double one; backslash escapes for the quote, `\`, `\n`, `\r`,
/// `\t` and non-printable characters (an approximation of
/// `str.isprintable`: control, format and separator characters).
/// Python's `repr(s)` of a string, for messages that quote a value the
/// way a Python tool would (`metaclaw bench`'s checkers).
pub fn str_repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    string_repr(&mut out, s);
    out
}

fn string_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_printable(c) => {
                let n = c as u32;
                let _ = match n {
                    0..=0xff => write!(out, "\\x{n:02x}"),
                    0x100..=0xffff => write!(out, "\\u{n:04x}"),
                    _ => write!(out, "\\U{n:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn is_printable(c: char) -> bool {
    let n = c as u32;
    !(n < 0x20
        || (0x7f..=0xa0).contains(&n)
        || n == 0xad
        || n == 0x1680
        || (0x2000..=0x200f).contains(&n)
        || (0x2028..=0x202f).contains(&n)
        || (0x205f..=0x206f).contains(&n)
        || n == 0x3000
        || n == 0xfeff
        || (0xd800..=0xdfff).contains(&n)
        || (0xe000..=0xf8ff).contains(&n))
}

/// Python's `repr(float)`: the shortest digits that round-trip, in
/// positional notation for exponents -4 ≤ e < 16 (always with a fraction:
/// `2.0`), scientific otherwise (`1e-05`, `1.5e+16`).
pub(crate) fn float_repr(f: f64) -> String {
    // Rust's `{:e}` gives the same shortest round-trip digits: "1.5e16".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = point as usize;
    if digits.len() <= point {
        let zeros = "0".repeat(point - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, fraction) = digits.split_at(point);
        format!("{sign}{int}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn floats_are_spelled_as_python_does() {
        for (f, py) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (2.5, "2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (123456.789, "123456.789"),
            (-3.25, "-3.25"),
            (5e-324, "5e-324"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(float_repr(f), py, "{f}");
        }
    }

    #[test]
    fn json_matches_python_json_dumps() {
        let v = from_json(&serde_json::json!({
            "b": [1, 2.0, null, true, "x\"y\\z\n\u{1}é😀"],
            "a": {},
            "c": []
        }));
        let plain = JsonOptions::new(None, None);
        assert_eq!(
            json_dumps(&v, &plain).unwrap(),
            r#"{"b": [1, 2.0, null, true, "x\"y\\z\n\u0001é😀"], "a": {}, "c": []}"#
        );
        let mut ascii = plain.clone();
        ascii.ensure_ascii = true;
        ascii.sort_keys = true;
        assert_eq!(
            json_dumps(&v, &ascii).unwrap(),
            r#"{"a": {}, "b": [1, 2.0, null, true, "x\"y\\z\n\u0001\u00e9\ud83d\ude00"], "c": []}"#
        );
        let indented = JsonOptions::new(Some("  ".into()), None);
        assert_eq!(
            json_dumps(&v, &indented).unwrap(),
            "{\n  \"b\": [\n    1,\n    2.0,\n    null,\n    true,\n    \"x\\\"y\\\\z\\n\\u0001é😀\"\n  ],\n  \"a\": {},\n  \"c\": []\n}"
        );
    }

    #[test]
    fn str_matches_python_str() {
        let v = from_json(&serde_json::json!({"k": [null, true, 1.5, "it's", "a\"b'c", "\u{7}"]}));
        assert_eq!(
            str_of(&v),
            r#"{'k': [None, True, 1.5, "it's", 'a"b\'c', '\x07']}"#
        );
        assert_eq!(str_of(&Value::from(false)), "False");
        assert_eq!(str_of(&Value::from(())), "None");
        assert_eq!(str_of(&Value::from("plain")), "plain");
    }
}
