//! The Jinja environment transformers renders chat templates in
//! (`transformers/utils/chat_template_utils.py`, `_compile_jinja_template`),
//! rebuilt on minijinja:
//!
//! - `trim_blocks` and `lstrip_blocks` on, the template's one trailing
//!   newline dropped (Jinja2's default), no HTML auto-escaping;
//! - `tojson` as transformers overrides it: Python's `json.dumps` with
//!   `ensure_ascii=False` and the default `", "`/`": "` separators (Jinja2's
//!   own filter, like minijinja's, is compact and HTML-escapes `<>&'`);
//! - `raise_exception(msg)` and `strftime_now(format)` as globals;
//! - `{{ value }}`, `|string` and `|join` print as Python's `str()`
//!   (`None`, `True`, `{'a': 1}`); the tests `iterable` and `sequence` as
//!   Jinja2 has them (`none` is not iterable, strings and dicts are
//!   sequences); Python's string and dict methods (`.strip()`,
//!   `.startswith()`, `.items()`, …) from minijinja-contrib's pycompat, and
//!   Jinja2's `cycler` and `joiner`;
//! - the `{% generation %}` block of transformers' AssistantTracker (it only
//!   marks assistant text for a mask) renders its body.
//!
//! Known gaps, which no common chat template relies on: `~` concatenation
//! prints booleans and none as minijinja does (`true`, `none`), and sandbox
//! errors read differently.

use std::fmt::Write as _;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};

use super::python::{self, JsonOptions};

/// The name the template is stored under (it shows in error messages).
pub(crate) const TEMPLATE_NAME: &str = "chat_template";

/// The error `raise_exception` raises, so a render error can say the
/// template refused the messages (and with what words).
#[derive(Debug)]
pub(crate) struct Raised(pub String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// An environment holding `template`, compiled.
pub(crate) fn environment(template: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()?,
    );
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // Jinja2's default `Undefined`: printing it or testing it is fine,
    // reading an attribute of it is an error.
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    minijinja_contrib::add_to_environment(&mut env);
    env.remove_filter("pluralize"); // not a Jinja2 filter
    env.set_formatter(format_python);
    env.add_filter("tojson", tojson);
    env.add_filter("string", |value: &Value| python::str_of(value));
    env.add_filter("join", join);
    env.add_test("iterable", is_iterable);
    env.add_test("sequence", is_sequence);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template_owned(TEMPLATE_NAME, without_generation_tags(template))?;
    Ok(env)
}

/// Jinja2 prints what Python's `str()` gives; minijinja would print
/// `none`, `true` and JSON-like containers.
fn format_python(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Seq | ValueKind::Map => {
            out.write_str(&python::str_of(value))
                .map_err(|_| Error::new(ErrorKind::WriteFailure, "formatting failed"))
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, positionally or by keyword.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > NAMES.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let mut given: [Option<Value>; 4] = Default::default();
    for (slot, arg) in given.iter_mut().zip(args.iter()) {
        *slot = Some(arg.clone());
    }
    for (slot, name) in given.iter_mut().zip(NAMES) {
        if let Some(v) = kwargs.get::<Option<Value>>(name)? {
            *slot = Some(v);
        }
    }
    kwargs.assert_all_used()?;
    let [ensure_ascii, indent, separators, sort_keys] = given;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::String => {
            Some(v.as_str().unwrap_or_default().to_string())
        }
        Some(v) => {
            let n = i64::try_from(v).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer, a string or None",
                )
            })?;
            Some(" ".repeat(usize::try_from(n).unwrap_or(0)))
        }
    };
    let separators = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [item, key] if item.as_str().is_some() && key.as_str().is_some() => Some((
                    item.as_str().unwrap_or_default().to_string(),
                    key.as_str().unwrap_or_default().to_string(),
                )),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings (item, key)",
                    ));
                }
            }
        }
        _ => None,
    };
    let mut options = JsonOptions::new(indent, separators);
    options.ensure_ascii = ensure_ascii.is_some_and(|v| v.is_true());
    options.sort_keys = sort_keys.is_some_and(|v| v.is_true());
    python::json_dumps(value, &options).map(Value::from)
}

/// Jinja2's `join(d='', attribute=None)`: items printed with `str()`,
/// `attribute` a dotted path (`a.b`, `0`) into each item.
fn join(
    value: &Value,
    separator: Option<&str>,
    attribute: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let separator = match kwargs.get::<Option<&str>>("d")? {
        Some(d) => Some(d),
        None => separator,
    };
    let attribute = match kwargs.get::<Option<Value>>("attribute")? {
        Some(a) => Some(a),
        None => attribute,
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    for (i, item) in value.try_iter()?.enumerate() {
        if i > 0 {
            out.push_str(separator.unwrap_or_default());
        }
        let item = match &attribute {
            Some(path) => lookup(&item, path)?,
            None => item,
        };
        out.push_str(&python::str_of(&item));
    }
    Ok(Value::from(out))
}

/// Jinja2's attribute getter: an integer indexes, a string is a dotted
/// path whose numeric parts index too.
fn lookup(item: &Value, path: &Value) -> Result<Value, Error> {
    let Some(path) = path.as_str() else {
        return item.get_item(path);
    };
    let mut value = item.clone();
    for part in path.split('.') {
        value = match part.parse::<i64>() {
            Ok(index) => value.get_item(&Value::from(index))?,
            Err(_) => value.get_attr(part)?,
        };
    }
    Ok(value)
}

/// Python's `iter(value)` succeeds: not for `None`, booleans and numbers;
/// Jinja2's undefined iterates as empty.
fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number => false,
        ValueKind::Undefined => true,
        _ => value.try_iter().is_ok(),
    }
}

/// Jinja2's `sequence`: has a length and indexing, so strings, lists and
/// dicts (and, oddly, undefined).
fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined | ValueKind::String | ValueKind::Seq | ValueKind::Map
    )
}

fn raise_exception(message: &Value) -> Result<Value, Error> {
    let message = python::str_of(message);
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// `datetime.now().strftime(format)`: local time, as transformers does.
fn strftime_now(format: &str) -> Result<Value, Error> {
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(Value::from(out))
}

/// Whether the template's code (`{{ … }}`, `{% … %}`; not its text or
/// comments) names `variable`. minijinja's own analysis
/// (`undeclared_variables`) does not look inside macros, where templates
/// often read `enable_thinking`.
pub(crate) fn mentions(template: &str, variable: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let end = match after.chars().next() {
            Some('{') => "}}",
            Some('%') => "%}",
            Some('#') => "#}",
            _ => {
                rest = after;
                continue;
            }
        };
        let code = &after[1..];
        let len = code.find(end).unwrap_or(code.len());
        if end != "#}" {
            let block = &code[..len];
            let found = block.match_indices(variable).any(|(i, _)| {
                !block[..i].ends_with(is_ident)
                    && !block[i + variable.len()..].starts_with(is_ident)
            });
            if found {
                return true;
            }
        }
        rest = code.get(len + end.len()..).unwrap_or_default();
    }
    false
}

/// The template with `{% generation %}` / `{% endgeneration %}` turned into
/// an always-true `if` with the same whitespace control (`-`, `+`), so
/// trimming around them is unchanged.
fn without_generation_tags(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        match generation_tag(tag) {
            Some((len, replacement)) => {
                out.push_str(&replacement);
                rest = &tag[len..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// At a `{%`: the length of a generation tag there and its replacement.
fn generation_tag(tag: &str) -> Option<(usize, String)> {
    let body = &tag[2..];
    let (open, body) = match body.chars().next() {
        Some(c @ ('-' | '+')) => (c.to_string(), &body[1..]),
        _ => (String::new(), body),
    };
    let body = body.trim_start();
    let (word, replacement) = if let Some(after) = body.strip_prefix("endgeneration") {
        (after, "endif")
    } else if let Some(after) = body.strip_prefix("generation") {
        (after, "if true")
    } else {
        return None;
    };
    let after = word.trim_start();
    let (close, after) = match after.chars().next() {
        Some(c @ ('-' | '+')) => (c.to_string(), &after[1..]),
        _ => (String::new(), after),
    };
    let after = after.strip_prefix("%}")?;
    let len = tag.len() - after.len();
    Some((len, format!("{{%{open} {replacement} {close}%}}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn render(template: &str, ctx: serde_json::Value) -> String {
        let env = environment(template).unwrap();
        env.get_template(TEMPLATE_NAME)
            .unwrap()
            .render(python::from_json(&ctx))
            .unwrap()
    }

    #[test]
    fn whitespace_is_trimmed_as_transformers_does() {
        let t = "{% for x in xs %}\n  {% if x %}\n{{ x }}\n  {% endif %}\n{% endfor %}\n";
        assert_eq!(render(t, serde_json::json!({"xs": [1, 2]})), "1\n2\n");
    }

    #[test]
    fn values_print_as_python_does() {
        let t = "{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e|string }}|{{ f }}";
        let ctx = serde_json::json!({"a": null, "b": true, "c": {"k": [1, "v"]}, "d": 2.0, "e": false, "f": "<&>"});
        assert_eq!(render(t, ctx), "None|True|{'k': [1, 'v']}|2.0|False|<&>");
    }

    #[test]
    fn tojson_is_pythons_json_dumps() {
        let ctx = serde_json::json!({"v": {"b": "<a href='x'>&</a>", "a": [1, 2], "u": "中文"}});
        assert_eq!(
            render("{{ v|tojson }}", ctx.clone()),
            r#"{"b": "<a href='x'>&</a>", "a": [1, 2], "u": "中文"}"#
        );
        assert_eq!(
            render("{{ v|tojson(indent=1, sort_keys=true) }}", ctx.clone()),
            "{\n \"a\": [\n  1,\n  2\n ],\n \"b\": \"<a href='x'>&</a>\",\n \"u\": \"中文\"\n}"
        );
        assert_eq!(
            render(
                "{{ v.a|tojson(separators=(',', ':')) }}|{{ v.u|tojson(true) }}",
                ctx
            ),
            r#"[1,2]|"\u4e2d\u6587""#
        );
    }

    #[test]
    fn tests_and_join_are_jinja2s() {
        let t = "{{ n is iterable }}|{{ u is iterable }}|{{ s is sequence }}|{{ m is sequence }}|{{ [1, none, true, 'a']|join(',') }}|{{ l|join('-', attribute='k.0') }}";
        let ctx = serde_json::json!({"n": null, "s": "ab", "m": {}, "l": [{"k": [1]}, {"k": [2]}]});
        assert_eq!(render(t, ctx), "False|True|True|True|1,None,True,a|1-2");
    }

    #[test]
    fn python_methods_work() {
        let t = "{{ s.strip().split(',')[1] }}|{{ s.startswith(' a') }}|{% for k, v in m.items() %}{{ k }}={{ v }}{% endfor %}";
        assert_eq!(
            render(t, serde_json::json!({"s": " a,b ", "m": {"x": 1}})),
            "b|True|x=1"
        );
    }

    #[test]
    fn mentions_finds_names_in_code_only() {
        assert!(mentions(
            "{% macro f() %}{{ enable_thinking }}{% endmacro %}",
            "enable_thinking"
        ));
        assert!(mentions(
            "{%- if enable_thinking is defined %}x{% endif %}",
            "enable_thinking"
        ));
        assert!(!mentions(
            "enable_thinking {# enable_thinking #}",
            "enable_thinking"
        ));
        assert!(!mentions(
            "{{ enable_thinking_x }}{{ my_enable_thinking }}",
            "enable_thinking"
        ));
    }

    #[test]
    fn generation_blocks_render_their_body() {
        let t = "a\n{%- generation -%}\n  b\n{%- endgeneration %}\nc";
        assert_eq!(
            without_generation_tags(t),
            "a\n{%- if true -%}\n  b\n{%- endif %}\nc"
        );
        assert_eq!(render(t, serde_json::json!({})), "abc");
    }
}
