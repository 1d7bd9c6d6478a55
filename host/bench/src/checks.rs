//! MetaClaw-Bench's five rule checkers (`check_iso8601.py`,
//! `check_filename.py`, `check_metadata.py`, `check_backup.py`,
//! `check_done_log.py`), re-implemented natively. The upstream scripts were
//! left out of the data (`host/bench/data/UPSTREAM.md`, "Left out"), and
//! the harness runs these checks itself, outside the agent's workspace, so
//! the agent never sees the rules they enforce.
//!
//! Each check takes the script's argv and answers what the script would:
//! exit 0 with `OK …`, 1 with `FAIL: <reason>`, 2 for a usage error. The
//! details follow the upstream scripts (MetaClaw `f20581e`) down to the
//! Python they are written in, since the rounds were tuned against them:
//! argparse for the three that use it (unknown options are usage errors,
//! unique prefixes of long options are accepted), `re.match` for the
//! patterns (`$` also matches before a final newline, `\d` is any Unicode
//! digit), `json.loads` (which reads `NaN`), text files read as UTF-8 with
//! universal newlines, and `str.strip()` whitespace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// One of the five checkers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checker {
    Iso8601,
    Filename,
    Metadata,
    Backup,
    DoneLog,
}

impl Checker {
    pub const ALL: [Checker; 5] = [
        Checker::Iso8601,
        Checker::Filename,
        Checker::Metadata,
        Checker::Backup,
        Checker::DoneLog,
    ];

    /// From a script name as the commands spell it: "check_iso8601.py"
    /// (also without ".py", also "scripts/check_iso8601.py").
    pub fn from_script(name: &str) -> Option<Checker> {
        let base = name.rsplit('/').next().unwrap_or(name);
        let stem = base.strip_suffix(".py").unwrap_or(base);
        Self::ALL
            .into_iter()
            .find(|c| c.script().strip_suffix(".py") == Some(stem))
    }

    /// The short name used on the command line of `metaclaw bench check
    /// <name>`: "iso8601", "filename", "metadata", "backup", "done_log".
    pub fn name(self) -> &'static str {
        match self {
            Checker::Iso8601 => "iso8601",
            Checker::Filename => "filename",
            Checker::Metadata => "metadata",
            Checker::Backup => "backup",
            Checker::DoneLog => "done_log",
        }
    }

    pub fn from_name(name: &str) -> Option<Checker> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The upstream script's file name, as its messages call it.
    pub fn script(self) -> &'static str {
        match self {
            Checker::Iso8601 => "check_iso8601.py",
            Checker::Filename => "check_filename.py",
            Checker::Metadata => "check_metadata.py",
            Checker::Backup => "check_backup.py",
            Checker::DoneLog => "check_done_log.py",
        }
    }

    /// The rule it checks: 1..=5 (P1 iso8601, P2 filename, P3 metadata,
    /// P4 backup, P5 done_log).
    pub fn rule(self) -> u8 {
        match self {
            Checker::Iso8601 => 1,
            Checker::Filename => 2,
            Checker::Metadata => 3,
            Checker::Backup => 4,
            Checker::DoneLog => 5,
        }
    }
}

/// What a check said: the exit code (0, 1 or 2) and the line it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub code: i32,
    pub message: String,
}

impl Outcome {
    fn ok(message: impl Into<String>) -> Self {
        Self {
            code: 0,
            message: message.into(),
        }
    }

    fn fail(reason: impl std::fmt::Display) -> Self {
        Self {
            code: 1,
            message: format!("FAIL: {reason}"),
        }
    }

    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
}

/// Runs `checker` with `args` (argv after the script name, as the shell
/// split them), paths relative to `cwd`.
pub fn run(checker: Checker, args: &[String], cwd: &Path) -> Outcome {
    let result = match checker {
        Checker::Iso8601 => iso8601(args, cwd),
        Checker::Filename => filename(args, cwd),
        Checker::Metadata => metadata(args, cwd),
        Checker::Backup => backup(args, cwd),
        Checker::DoneLog => done_log(args, cwd),
    };
    result.unwrap_or_else(|outcome| outcome)
}

/// The P1 timestamp pattern, `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+08:00$`,
/// matched as Python's `re.match` does: `$` also accepts one final `\n`.
pub fn is_p1_timestamp(s: &str) -> bool {
    P1.as_ref().is_some_and(|re| re.is_match(s))
}

// `\n?\z` is Python's `$` without MULTILINE.
static P1: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+08:00\n?\z").ok());
static P2: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\d{8}_[a-z][a-z0-9_]*\.[a-z0-9]+\n?\z").ok());
// Lines are split on newlines first, so plain `$` is exact here.
static DONE_LINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^\[DONE\] (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+08:00) \| ([^|]+) \| (.+)$",
    )
    .ok()
});
static DOCSTRING: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r#"(?s)"""(.*?)""""#).ok());
static META_SECTION: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)Meta:(.*?)(?:\n\n|\z)").ok());
// argparse takes these for values, not options.
static NEGATIVE_NUMBER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^-\d+\n?\z|^-\d*\.\d+\n?\z").ok());

/// A compiled pattern, or the failure every check reports if it did not
/// compile (it always does: the tests compile each one).
fn pattern(re: &LazyLock<Option<Regex>>) -> Result<&Regex, Outcome> {
    re.as_ref()
        .ok_or_else(|| Outcome::fail("internal error: a pattern did not compile"))
}

const STATUSES: [&str; 3] = ["pending", "in_progress", "done"];
const STATUSES_SHOWN: &str = "{'pending', 'in_progress', 'done'}";
const REQUIRED: [&str; 3] = ["created_at", "author", "status"];

// ---------------------------------------------------------------------
// P1: check_iso8601.py <json_file> <field> [<field> …] (no argparse)

fn iso8601(args: &[String], cwd: &Path) -> Result<Outcome, Outcome> {
    let [file, fields @ ..] = args else {
        return Err(iso8601_usage());
    };
    if fields.is_empty() {
        return Err(iso8601_usage());
    }
    let data = read_text(cwd, file)
        .and_then(|text| py_json(&text))
        .map_err(|e| Outcome::fail(format!("cannot read {file}: {e}")))?;
    for field in fields {
        let parts: Vec<&str> = field.split('.').collect();
        walk(&data, &parts, field)?;
    }
    Ok(Outcome::ok("OK"))
}

fn iso8601_usage() -> Outcome {
    Outcome::usage("Usage: check_iso8601.py <json_file> <field> [<field> ...]")
}

/// Checks every value `parts` reaches from `cur`, in the script's order.
fn walk(cur: &Value, parts: &[&str], field: &str) -> Result<(), Outcome> {
    let Some((part, rest)) = parts.split_first() else {
        if cur.is_null() {
            return Err(Outcome::fail(format!("{field}: field not found")));
        }
        if !is_p1_timestamp(&py_str(cur)) {
            return Err(Outcome::fail(format!("{field}: {}", py_repr(cur))));
        }
        return Ok(());
    };
    if let Some(key) = part.strip_suffix("[]") {
        // `cur.get(key, [])`, then `enumerate(...)` over whatever is there.
        let Some(object) = cur.as_object() else {
            return Err(Outcome::fail(format!(
                "{field}: '{}' object has no attribute 'get'",
                py_type(cur)
            )));
        };
        match object.get(key) {
            None => Ok(()),
            Some(Value::Array(items)) => items.iter().try_for_each(|item| walk(item, rest, field)),
            // Iterating a dict gives its keys, a string its characters.
            Some(Value::Object(map)) => map
                .keys()
                .try_for_each(|k| walk(&Value::String(k.clone()), rest, field)),
            Some(Value::String(s)) => s
                .chars()
                .try_for_each(|c| walk(&Value::String(c.to_string()), rest, field)),
            Some(other) => Err(Outcome::fail(format!(
                "{field}: '{}' object is not iterable",
                py_type(other)
            ))),
        }
    } else {
        match cur.as_object().and_then(|o| o.get(*part)) {
            Some(next) => walk(next, rest, field),
            None => Err(Outcome::fail(format!("{field}: field not found"))),
        }
    }
}

// ---------------------------------------------------------------------
// P2: check_filename.py <path> | --dir D --ext E [--min-count N]

const FILENAME_SPEC: Spec = Spec {
    prog: "check_filename.py",
    positionals: &[],
    options: &[
        Opt {
            name: "--dir",
            metavar: "DIR",
            kind: Kind::Str,
            required: true,
        },
        Opt {
            name: "--ext",
            metavar: "EXT",
            kind: Kind::Str,
            required: true,
        },
        Opt {
            name: "--min-count",
            metavar: "MIN_COUNT",
            kind: Kind::Int,
            required: false,
        },
    ],
};

fn filename(args: &[String], cwd: &Path) -> Result<Outcome, Outcome> {
    let p2 = pattern(&P2)?;
    // The script's own test: a first argument not starting with `--` is a
    // path (the rest is ignored), anything else goes to argparse.
    if let Some(path) = args.first().filter(|a| !a.starts_with("--")) {
        let base = path.rsplit('/').next().unwrap_or(path);
        return if p2.is_match(base) {
            Ok(Outcome::ok("OK"))
        } else {
            Err(Outcome::fail(format!(
                "'{base}' does not match YYYYMMDD_snake_case.ext pattern"
            )))
        };
    }
    let parsed = parse(&FILENAME_SPEC, args)?;
    let dir = parsed.text("--dir");
    let ext = parsed.text("--ext");
    let min_count = parsed.int("--min-count").unwrap_or(1);
    let path = resolve(cwd, dir).filter(|p| p.is_dir());
    let Some(path) = path else {
        return Err(Outcome::fail(format!("directory not found: {dir}")));
    };
    let ext_lower = ext.trim_start_matches('.').to_lowercase();
    let entries =
        std::fs::read_dir(&path).map_err(|e| Outcome::fail(format!("cannot list {dir}: {e}")))?;
    let mut matches: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| {
            p2.is_match(name)
                && name
                    .rsplit('.')
                    .next()
                    .is_some_and(|e| e.to_lowercase() == ext_lower)
        })
        .collect();
    matches.sort();
    let found = matches.len();
    if i64::try_from(found).unwrap_or(i64::MAX) >= min_count {
        Ok(Outcome::ok(format!(
            "OK ({found} matching file(s): {})",
            matches.join(", ")
        )))
    } else {
        Err(Outcome::fail(format!(
            "expected >= {min_count} P2-compliant .{ext_lower} file(s) in {dir}, found {found}"
        )))
    }
}

// ---------------------------------------------------------------------
// P3: check_metadata.py <file> [--type json|md|py|csv]

const METADATA_SPEC: Spec = Spec {
    prog: "check_metadata.py",
    positionals: &["filepath"],
    options: &[Opt {
        name: "--type",
        metavar: "{json,md,py,csv}",
        kind: Kind::Choice(&["json", "md", "py", "csv"]),
        required: false,
    }],
};

fn metadata(args: &[String], cwd: &Path) -> Result<Outcome, Outcome> {
    let parsed = parse(&METADATA_SPEC, args)?;
    let file = parsed.positional(0);
    // Python's `rsplit('.', 1)[-1]` on the whole path, not the basename.
    let ftype = match parsed.values.get("--type") {
        Some(Val::Str(t)) => t.clone(),
        _ => file.rsplit('.').next().unwrap_or(file).to_lowercase(),
    };
    match ftype.as_str() {
        "json" => metadata_json(cwd, file),
        "md" | "txt" => metadata_md(cwd, file),
        "py" => metadata_py(cwd, file),
        "csv" => metadata_csv(cwd, file),
        other => Err(Outcome::fail(format!("unsupported file type: {other}"))),
    }
}

fn metadata_json(cwd: &Path, file: &str) -> Result<Outcome, Outcome> {
    let data = read_text(cwd, file)
        .and_then(|text| py_json(&text))
        .map_err(|e| Outcome::fail(format!("cannot parse JSON: {e}")))?;
    let Some(top) = data.as_object() else {
        return Err(Outcome::fail(format!(
            "'{}' object has no attribute 'get'",
            py_type(&data)
        )));
    };
    // `if not meta or not isinstance(meta, dict)`: an empty object fails too.
    let meta = match top.get("meta") {
        Some(Value::Object(m)) if !m.is_empty() => m,
        _ => return Err(Outcome::fail("missing top-level 'meta' object")),
    };
    for key in REQUIRED {
        match meta.get(key) {
            None => return Err(Outcome::fail(format!("meta.{key} is missing"))),
            // Only null and "" are empty here; "  " or 0 are not.
            Some(Value::Null) => return Err(Outcome::fail(format!("meta.{key} is empty"))),
            Some(Value::String(s)) if s.is_empty() => {
                return Err(Outcome::fail(format!("meta.{key} is empty")));
            }
            Some(_) => {}
        }
    }
    let created = meta.get("created_at").unwrap_or(&Value::Null);
    if !is_p1_timestamp(&py_str(created)) {
        return Err(Outcome::fail(format!(
            "meta.created_at is not valid ISO 8601 +08:00: {}",
            py_repr(created)
        )));
    }
    let status = meta.get("status").unwrap_or(&Value::Null);
    if !status.as_str().is_some_and(|s| STATUSES.contains(&s)) {
        return Err(Outcome::fail(format!(
            "meta.status must be one of {STATUSES_SHOWN}, got {}",
            py_repr(status)
        )));
    }
    Ok(Outcome::ok("OK"))
}

fn metadata_md(cwd: &Path, file: &str) -> Result<Outcome, Outcome> {
    let text = read_text(cwd, file).map_err(Outcome::fail)?;
    if !text.starts_with("---") {
        return Err(Outcome::fail(
            "missing YAML frontmatter (file must start with ---)",
        ));
    }
    // `text.find('\n---', 3)`: the closing line is any later line starting
    // with `---`; whatever follows the opening `---` on its line counts too.
    let Some(end) = text.get(3..).and_then(|t| t.find("\n---")).map(|i| i + 3) else {
        return Err(Outcome::fail("YAML frontmatter not closed with ---"));
    };
    let found = key_values(text.get(3..end).unwrap_or(""), false);
    require(&found, "frontmatter missing or empty field")?;
    check_created(&found, "frontmatter created_at")?;
    let status = found.get("status").map(String::as_str).unwrap_or("");
    if !STATUSES.contains(&status) {
        return Err(Outcome::fail(format!(
            "frontmatter status must be one of {STATUSES_SHOWN}, got {}",
            py_str_repr(status)
        )));
    }
    Ok(Outcome::ok("OK"))
}

fn metadata_py(cwd: &Path, file: &str) -> Result<Outcome, Outcome> {
    let text = read_text(cwd, file).map_err(Outcome::fail)?;
    let docstring = pattern(&DOCSTRING)?
        .captures(&text)
        .and_then(|c| c.get(1))
        .ok_or_else(|| Outcome::fail("missing module docstring"))?;
    let section = pattern(&META_SECTION)?
        .captures(docstring.as_str())
        .and_then(|c| c.get(1))
        .ok_or_else(|| Outcome::fail("module docstring missing 'Meta:' section"))?;
    let found = key_values(section.as_str(), true);
    require(&found, "Meta section missing or empty field")?;
    check_created(&found, "Meta created_at")?;
    Ok(Outcome::ok("OK"))
}

fn metadata_csv(cwd: &Path, file: &str) -> Result<Outcome, Outcome> {
    let text = read_text(cwd, file).map_err(Outcome::fail)?;
    let first = py_strip(text.split('\n').next().unwrap_or(""));
    let Some(rest) = first.strip_prefix("# meta:") else {
        return Err(Outcome::fail(
            "first line must be '# meta: created_at=... author=... status=...'",
        ));
    };
    let mut found = BTreeMap::new();
    for part in rest.split(py_is_space).filter(|p| !p.is_empty()) {
        if let Some((k, v)) = part.split_once('=') {
            found.insert(py_strip(k).to_string(), py_strip(v).to_string());
        }
    }
    require(&found, "meta comment missing field")?;
    check_created(&found, "meta created_at")?;
    Ok(Outcome::ok("OK"))
}

/// `key: value` lines (split at the first `:`, both sides stripped; later
/// keys win), as the md and py checks read them.
fn key_values(text: &str, lower_keys: bool) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for line in text.split(is_line_break) {
        if let Some((k, v)) = line.split_once(':') {
            let key = py_strip(k);
            let key = if lower_keys {
                key.to_lowercase()
            } else {
                key.to_string()
            };
            found.insert(key, py_strip(v).to_string());
        }
    }
    found
}

fn require(found: &BTreeMap<String, String>, what: &str) -> Result<(), Outcome> {
    match REQUIRED
        .iter()
        .find(|k| found.get(**k).is_none_or(String::is_empty))
    {
        Some(key) => Err(Outcome::fail(format!("{what}: {key}"))),
        None => Ok(()),
    }
}

fn check_created(found: &BTreeMap<String, String>, what: &str) -> Result<(), Outcome> {
    let created = found.get("created_at").map(String::as_str).unwrap_or("");
    if is_p1_timestamp(created) {
        Ok(())
    } else {
        Err(Outcome::fail(format!(
            "{what} is not valid ISO 8601 +08:00: {}",
            py_str_repr(created)
        )))
    }
}

// ---------------------------------------------------------------------
// P4: check_backup.py <original_file> (no argparse; extra arguments ignored)

fn backup(args: &[String], cwd: &Path) -> Result<Outcome, Outcome> {
    let Some(orig) = args.first() else {
        return Err(Outcome::usage("Usage: check_backup.py <original_file>"));
    };
    let bak = format!("{orig}.bak");
    let exists = |p: &str| resolve(cwd, p).is_some_and(|p| p.exists());
    if !exists(orig) {
        return Err(Outcome::fail(format!("original file not found: {orig}")));
    }
    if !exists(&bak) {
        return Err(Outcome::fail(format!(
            "backup file not found: {bak} (must create .bak before modifying)"
        )));
    }
    let read = |p: &str| {
        resolve(cwd, p)
            .ok_or_else(|| "empty path".to_string())
            .and_then(|p| std::fs::read(p).map_err(|e| e.to_string()))
            .map_err(|e| Outcome::fail(format!("cannot read {p}: {e}")))
    };
    if read(orig)? == read(&bak)? {
        return Err(Outcome::fail(format!(
            "{bak} has identical content to {orig} — backup was not made before modification"
        )));
    }
    Ok(Outcome::ok("OK"))
}

// ---------------------------------------------------------------------
// P5: check_done_log.py <logfile> [--task-prefix P] [--min-entries N]

const DONE_LOG_SPEC: Spec = Spec {
    prog: "check_done_log.py",
    positionals: &["logfile"],
    options: &[
        Opt {
            name: "--task-prefix",
            metavar: "TASK_PREFIX",
            kind: Kind::Str,
            required: false,
        },
        Opt {
            name: "--min-entries",
            metavar: "MIN_ENTRIES",
            kind: Kind::Int,
            required: false,
        },
    ],
};

fn done_log(args: &[String], cwd: &Path) -> Result<Outcome, Outcome> {
    let parsed = parse(&DONE_LOG_SPEC, args)?;
    let logfile = parsed.positional(0);
    let min_entries = parsed.int("--min-entries").unwrap_or(1);
    if !resolve(cwd, logfile).is_some_and(|p| p.exists()) {
        return Err(Outcome::fail(format!("done.log not found: {logfile}")));
    }
    let text = read_text(cwd, logfile).map_err(Outcome::fail)?;
    let lines: Vec<&str> = text
        .split('\n')
        .filter(|l| !py_strip(l).is_empty())
        .collect();
    if i64::try_from(lines.len()).unwrap_or(i64::MAX) < min_entries {
        return Err(Outcome::fail(format!(
            "expected >= {min_entries} entries, found {}",
            lines.len()
        )));
    }
    let re = pattern(&DONE_LINE)?;
    let mut last_task = None;
    for (i, line) in lines.iter().enumerate() {
        let Some(caps) = re.captures(line) else {
            return Err(Outcome::fail(format!(
                "line {} does not match format: {}",
                i + 1,
                py_str_repr(line)
            )));
        };
        let summary = py_strip(caps.get(4).map_or("", |m| m.as_str()));
        let chars = summary.chars().count();
        if chars > 80 {
            return Err(Outcome::fail(format!(
                "line {} summary exceeds 80 chars ({chars}): {}",
                i + 1,
                py_str_repr(summary)
            )));
        }
        last_task = Some(py_strip(caps.get(3).map_or("", |m| m.as_str())));
    }
    // An empty prefix is falsy in the script: no check.
    if let Some(prefix) = parsed.values.get("--task-prefix").and_then(Val::as_str)
        && !prefix.is_empty()
    {
        // No lines at all (only with --min-entries 0 or less): the script's
        // `lines[-1]` raises.
        let Some(task) = last_task else {
            return Err(Outcome::fail("IndexError: list index out of range"));
        };
        if !task.starts_with(prefix) {
            return Err(Outcome::fail(format!(
                "last entry task_id {} does not start with {}",
                py_str_repr(task),
                py_str_repr(prefix)
            )));
        }
    }
    Ok(Outcome::ok(format!("OK ({} entries)", lines.len())))
}

// ---------------------------------------------------------------------
// The part of Python's argparse these scripts use: single positionals,
// options with one value (str, int, or a choice), `-h/--help`, unique
// prefixes of long options, `--opt=value`, `--`, and its errors (exit 2).

struct Spec {
    prog: &'static str,
    positionals: &'static [&'static str],
    options: &'static [Opt],
}

struct Opt {
    name: &'static str,
    metavar: &'static str,
    kind: Kind,
    required: bool,
}

enum Kind {
    Str,
    Int,
    Choice(&'static [&'static str]),
}

enum Val {
    Str(String),
    Int(i64),
}

impl Val {
    fn as_str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            Val::Int(_) => None,
        }
    }
}

struct Parsed {
    positionals: Vec<String>,
    values: BTreeMap<&'static str, Val>,
}

impl Parsed {
    fn positional(&self, i: usize) -> &str {
        self.positionals.get(i).map_or("", String::as_str)
    }

    fn text(&self, name: &str) -> &str {
        self.values.get(name).and_then(Val::as_str).unwrap_or("")
    }

    fn int(&self, name: &str) -> Option<i64> {
        match self.values.get(name) {
            Some(Val::Int(n)) => Some(*n),
            _ => None,
        }
    }
}

/// How argparse reads one token.
enum Token<'a> {
    Positional,
    Unknown,
    Help,
    /// `-hX` or `--help=X`: help takes no value.
    HelpWithValue(String),
    Option(&'a Opt, Option<String>),
    Ambiguous(Vec<&'static str>),
}

impl Spec {
    fn usage(&self) -> String {
        let mut usage = format!("usage: {} [-h]", self.prog);
        for opt in self.options {
            let part = format!("{} {}", opt.name, opt.metavar);
            if opt.required {
                usage.push_str(&format!(" {part}"));
            } else {
                usage.push_str(&format!(" [{part}]"));
            }
        }
        for name in self.positionals {
            usage.push_str(&format!(" {name}"));
        }
        usage
    }

    fn help(&self) -> String {
        let mut help = self.usage();
        if !self.positionals.is_empty() {
            help.push_str("\n\npositional arguments:");
            for name in self.positionals {
                help.push_str(&format!("\n  {name}"));
            }
        }
        help.push_str("\n\noptions:\n  -h, --help            show this help message and exit");
        for opt in self.options {
            help.push_str(&format!("\n  {} {}", opt.name, opt.metavar));
        }
        help
    }

    fn error(&self, message: impl std::fmt::Display) -> Outcome {
        Outcome::usage(format!("{}\n{}: error: {message}", self.usage(), self.prog))
    }

    fn classify(&self, arg: &str) -> Token<'_> {
        if !arg.starts_with('-') {
            return Token::Positional;
        }
        if arg == "-h" || arg == "--help" {
            return Token::Help;
        }
        if let Some(opt) = self.options.iter().find(|o| o.name == arg) {
            return Token::Option(opt, None);
        }
        if arg == "-" {
            return Token::Positional;
        }
        let (name, value) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (arg, None),
        };
        if name.starts_with("--") {
            let mut hits: Vec<&'static str> = Vec::new();
            if "--help".starts_with(name) {
                hits.push("--help");
            }
            hits.extend(
                self.options
                    .iter()
                    .map(|o| o.name)
                    .filter(|n| n.starts_with(name)),
            );
            match hits.as_slice() {
                [] => {}
                ["--help"] => {
                    return match value {
                        Some(v) => Token::HelpWithValue(v),
                        None => Token::Help,
                    };
                }
                [one] => {
                    if let Some(opt) = self.options.iter().find(|o| o.name == *one) {
                        return Token::Option(opt, value);
                    }
                }
                _ => return Token::Ambiguous(hits),
            }
        } else if let Some(rest) = arg.strip_prefix("-h") {
            let rest = rest.strip_prefix('=').unwrap_or(rest);
            return Token::HelpWithValue(rest.to_string());
        }
        if NEGATIVE_NUMBER.as_ref().is_some_and(|re| re.is_match(arg)) || arg.contains(' ') {
            return Token::Positional;
        }
        Token::Unknown
    }
}

fn parse(spec: &Spec, args: &[String]) -> Result<Parsed, Outcome> {
    let mut parsed = Parsed {
        positionals: Vec::new(),
        values: BTreeMap::new(),
    };
    let mut extras: Vec<&str> = Vec::new();
    let mut only_positionals = false;
    // Whether the last token filled a positional: a `--` next to one is
    // part of its match and dropped; any other `--` is left over.
    let mut after_positional = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let token = if only_positionals {
            Token::Positional
        } else if arg == "--" {
            only_positionals = true;
            let slot_open = parsed.positionals.len() < spec.positionals.len();
            let next_fills_slot = slot_open && i < args.len();
            if !after_positional && !next_fills_slot {
                extras.push(arg);
            }
            continue;
        } else {
            spec.classify(arg)
        };
        after_positional = false;
        match token {
            Token::Positional => {
                if parsed.positionals.len() < spec.positionals.len() {
                    parsed.positionals.push(arg.clone());
                    after_positional = true;
                } else {
                    extras.push(arg);
                }
            }
            Token::Unknown => extras.push(arg),
            Token::Help => return Err(Outcome::ok(spec.help())),
            Token::HelpWithValue(v) => {
                return Err(spec.error(format!(
                    "argument -h/--help: ignored explicit argument {}",
                    py_str_repr(&v)
                )));
            }
            Token::Ambiguous(hits) => {
                return Err(spec.error(format!(
                    "ambiguous option: {} could match {}",
                    arg.split('=').next().unwrap_or(arg),
                    hits.join(", ")
                )));
            }
            Token::Option(opt, explicit) => {
                let value = spec.option_value(opt, explicit, args, &mut i)?;
                parsed.values.insert(opt.name, spec.convert(opt, value)?);
            }
        }
    }
    spec.complete(&parsed, &extras)?;
    Ok(parsed)
}

impl Spec {
    /// `opt`'s value: the one given with it (`--opt=V`), else the next
    /// argument when that is no option (it is then consumed).
    fn option_value(
        &self,
        opt: &Opt,
        explicit: Option<String>,
        args: &[String],
        i: &mut usize,
    ) -> Result<String, Outcome> {
        match explicit {
            Some(v) => Ok(v),
            None => match args.get(*i) {
                Some(next) if next != "--" && matches!(self.classify(next), Token::Positional) => {
                    *i += 1;
                    Ok(next.clone())
                }
                _ => Err(self.error(format!("argument {}: expected one argument", opt.name))),
            },
        }
    }

    /// `value` as `opt`'s kind: an int, or one of its choices.
    fn convert(&self, opt: &Opt, value: String) -> Result<Val, Outcome> {
        Ok(match opt.kind {
            Kind::Str => Val::Str(value),
            Kind::Int => Val::Int(py_int(&value).ok_or_else(|| {
                self.error(format!(
                    "argument {}: invalid int value: {}",
                    opt.name,
                    py_str_repr(&value)
                ))
            })?),
            Kind::Choice(choices) => {
                if !choices.contains(&value.as_str()) {
                    let shown: Vec<String> = choices.iter().map(|c| py_str_repr(c)).collect();
                    return Err(self.error(format!(
                        "argument {}: invalid choice: {} (choose from {})",
                        opt.name,
                        py_str_repr(&value),
                        shown.join(", ")
                    )));
                }
                Val::Str(value)
            }
        })
    }

    /// argparse's last word: the required arguments missing, then the
    /// arguments left over.
    fn complete(&self, parsed: &Parsed, extras: &[&str]) -> Result<(), Outcome> {
        let missing: Vec<&str> = self
            .positionals
            .iter()
            .skip(parsed.positionals.len())
            .copied()
            .chain(
                self.options
                    .iter()
                    .filter(|o| o.required && !parsed.values.contains_key(o.name))
                    .map(|o| o.name),
            )
            .collect();
        if !missing.is_empty() {
            return Err(self.error(format!(
                "the following arguments are required: {}",
                missing.join(", ")
            )));
        }
        if !extras.is_empty() {
            return Err(self.error(format!("unrecognized arguments: {}", extras.join(" "))));
        }
        Ok(())
    }
}

/// Python's `int(str)`: surrounding whitespace, a sign, `_` between digits.
/// Out-of-range values saturate (Python's are unbounded; only comparisons
/// with a count follow).
fn py_int(s: &str) -> Option<i64> {
    let t = py_strip(s);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, t.get(1..)?),
        Some(b'+') => (false, t.get(1..)?),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let mut n: i64 = 0;
    for d in digits.chars().filter_map(|c| c.to_digit(10)) {
        n = n.saturating_mul(10).saturating_add(i64::from(d));
    }
    Some(if negative { -n } else { n })
}

// ---------------------------------------------------------------------
// Python's view of files and strings.

/// A path argument under `cwd`; Python finds nothing at "".
fn resolve(cwd: &Path, path: &str) -> Option<PathBuf> {
    (!path.is_empty()).then(|| cwd.join(path))
}

/// `open(path, encoding='utf-8').read()`: strict UTF-8, `\r\n` and `\r`
/// read as `\n`.
/// A check's failure in the words Python's would use (the report quotes
/// it as the check's output).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PyError(String);

fn read_text(cwd: &Path, path: &str) -> Result<String, PyError> {
    let full = resolve(cwd, path)
        .ok_or_else(|| PyError("[Errno 2] No such file or directory: ''".to_string()))?;
    let bytes = std::fs::read(&full).map_err(|e| PyError(format!("{e}: {}", py_str_repr(path))))?;
    let text = String::from_utf8(bytes).map_err(|e| PyError(format!("{path}: not UTF-8: {e}")))?;
    Ok(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// `json.loads`: JSON plus the `NaN`, `Infinity` and `-Infinity` that
/// Python writes and reads. Those become strings here, which every check
/// treats as it treats the float: not empty, not a timestamp, not a status.
fn py_json(text: &str) -> Result<Value, PyError> {
    let first = match serde_json::from_str(text) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped, mut replaced) = (false, false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_string = true;
        } else if let Some(word) = ["NaN", "Infinity", "-Infinity"]
            .into_iter()
            .find(|w| rest.starts_with(w))
        {
            out.push_str(&format!("\"{word}\""));
            rest = rest.get(word.len()..).unwrap_or("");
            replaced = true;
            continue;
        }
        out.push(c);
        rest = rest.get(c.len_utf8()..).unwrap_or("");
    }
    if !replaced {
        return Err(PyError(first.to_string()));
    }
    serde_json::from_str(&out).map_err(|_| PyError(first.to_string()))
}

/// `str.isspace()`: Unicode White_Space plus the four separators
/// U+001C..U+001F.
fn py_is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn py_strip(s: &str) -> &str {
    s.trim_matches(py_is_space)
}

/// The breaks `str.splitlines()` splits at (`\r` is gone by now).
fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\u{0b}'
            | '\u{0c}'
            | '\u{1c}'
            | '\u{1d}'
            | '\u{1e}'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// `str(value)` for a parsed JSON value.
fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// `repr(value)` for a parsed JSON value.
fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".to_string(),
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => py_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => py_str_repr(s),
        Value::Array(items) => {
            let shown: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", shown.join(", "))
        }
        Value::Object(map) => {
            let shown: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", py_str_repr(k), py_repr(v)))
                .collect();
            format!("{{{}}}", shown.join(", "))
        }
    }
}

/// `repr(float)`: the shortest round-trip digits, positional for exponents
/// -4..16, else `d.ddde+XX`.
fn py_float(f: f64) -> String {
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return sci;
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return sci;
    };
    if (-4..16).contains(&exp) {
        let fixed = f.to_string();
        if fixed.contains('.') {
            fixed
        } else {
            format!("{fixed}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// `repr(str)`, as the scripts quote values in their messages.
fn py_str_repr(s: &str) -> String {
    metaclaw_chat::render::str_repr(s)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    use std::fs;

    const TS: &str = "2026-03-16T09:30:00+08:00";

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn check(checker: Checker, dir: &Path, args: &[&str]) -> Outcome {
        run(checker, &argv(args), dir)
    }

    fn code(checker: Checker, dir: &Path, args: &[&str]) -> i32 {
        check(checker, dir, args).code
    }

    fn write(dir: &Path, name: &str, content: &str) {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(path, content).unwrap();
    }

    #[test]
    fn patterns_compile() {
        for re in [
            &P1,
            &P2,
            &DONE_LINE,
            &DOCSTRING,
            &META_SECTION,
            &NEGATIVE_NUMBER,
        ] {
            assert!(re.is_some());
        }
    }

    #[test]
    fn checker_names() {
        for c in Checker::ALL {
            assert_eq!(Checker::from_name(c.name()), Some(c));
            assert_eq!(Checker::from_script(c.script()), Some(c));
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                Value::String(c.name().to_string())
            );
        }
        assert_eq!(
            Checker::from_script("scripts/check_iso8601.py"),
            Some(Checker::Iso8601)
        );
        assert_eq!(
            Checker::from_script("check_done_log"),
            Some(Checker::DoneLog)
        );
        assert_eq!(Checker::from_script("check_other.py"), None);
        assert_eq!(Checker::from_script("iso8601.py"), None);
        assert_eq!(Checker::from_name("done-log"), None);
        let rules: Vec<u8> = Checker::ALL.iter().map(|c| c.rule()).collect();
        assert_eq!(rules, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn p1_timestamp() {
        // Valid, with fractional seconds.
        assert!(is_p1_timestamp(TS));
        assert!(is_p1_timestamp("2026-03-16T09:30:00.123456+08:00"));
        // Python's `$` accepts one final newline.
        assert!(is_p1_timestamp("2026-03-16T09:30:00+08:00\n"));
        // `Z`, another offset, a bare date, a space separator, no seconds,
        // natural language, an empty fraction, trailing text: all fail.
        for bad in [
            "2026-03-16T09:30:00Z",
            "2026-03-16T09:30:00+00:00",
            "2026-03-16T09:30:00+0800",
            "2026-03-16",
            "2026-03-16 09:30:00+08:00",
            "2026-03-16T09:30+08:00",
            "March 16, 2026 9:30",
            "2026-03-16T09:30:00.+08:00",
            "2026-03-16T09:30:00+08:00 ",
            "2026-03-16T09:30:00+08:00\n\n",
            "",
        ] {
            assert!(!is_p1_timestamp(bad), "{bad:?}");
        }
    }

    #[test]
    fn iso8601_checks() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let doc = serde_json::json!({
            "created_at": TS,
            "precise": "2026-03-16T09:30:00.5+08:00",
            "zulu": "2026-03-16T01:30:00Z",
            "date": "2026-03-16",
            "number": 20260316,
            "nothing": null,
            "period": {"start": TS, "end": TS},
            "items": [{"due": TS}, {"due": TS}],
            "mixed": [{"due": TS}, {"due": "tomorrow"}],
            "partial": [{"due": TS}, {"other": TS}],
            "empty": [],
            "stamps": [TS, TS],
            "scalar": 5,
        });
        write(d, "a.json", &doc.to_string());
        let ok = |fields: &[&str]| {
            let mut args = vec!["a.json"];
            args.extend_from_slice(fields);
            check(Checker::Iso8601, d, &args)
        };
        // Valid, and fractional seconds.
        assert_eq!(ok(&["created_at", "precise"]), Outcome::ok("OK"));
        // Nested dotted paths.
        assert_eq!(ok(&["period.start", "period.end"]).code, 0);
        // `[]` over a list whose items all pass.
        assert_eq!(ok(&["items[].due"]).code, 0);
        // `[]` as the last segment checks the items themselves.
        assert_eq!(ok(&["stamps[]"]).code, 0);
        // `Z` fails; a bare date fails.
        assert_eq!(ok(&["zulu"]).code, 1);
        assert_eq!(ok(&["date"]).code, 1);
        // One bad field among good ones fails.
        assert_eq!(ok(&["created_at", "date"]).code, 1);
        // A missing key fails, top level and nested.
        assert_eq!(ok(&["missing"]), Outcome::fail("missing: field not found"));
        assert_eq!(ok(&["period.middle"]).code, 1);
        // A key under a non-object fails as missing.
        assert_eq!(ok(&["created_at.x"]).code, 1);
        // `[]` over a list with a bad item fails; an item lacking the key too.
        assert_eq!(
            ok(&["mixed[].due"]),
            Outcome::fail("mixed[].due: 'tomorrow'")
        );
        assert_eq!(ok(&["partial[].due"]).code, 1);
        // `[]` over a missing or empty list yields nothing and passes.
        assert_eq!(ok(&["absent[].due"]).code, 0);
        assert_eq!(ok(&["empty[].due"]).code, 0);
        // A non-string value is compared as `str()` and fails.
        assert_eq!(ok(&["number"]), Outcome::fail("number: 20260316"));
        // JSON null counts as not found.
        assert_eq!(ok(&["nothing"]).code, 1);
        // `[]` over something not iterable fails.
        assert_eq!(ok(&["scalar[].x"]).code, 1);
        // An unreadable file fails: missing, and not JSON.
        assert_eq!(code(Checker::Iso8601, d, &["nope.json", "created_at"]), 1);
        write(d, "bad.json", "{not json");
        let out = check(Checker::Iso8601, d, &["bad.json", "created_at"]);
        assert_eq!(out.code, 1);
        assert!(out.message.starts_with("FAIL: cannot read bad.json"));
        // Python's JSON reads NaN and Infinity: elsewhere they are harmless,
        // at a checked path they fail; inside strings they stay text.
        write(
            d,
            "nan.json",
            &format!(r#"{{"t": "{TS}", "x": NaN, "y": [-Infinity], "s": "NaN"}}"#),
        );
        assert_eq!(code(Checker::Iso8601, d, &["nan.json", "t"]), 0);
        assert_eq!(code(Checker::Iso8601, d, &["nan.json", "x"]), 1);
        assert_eq!(code(Checker::Iso8601, d, &["nan.json", "y[]"]), 1);
        let v = py_json(r#"{"s": "a \"NaN\\", "x": NaN}"#).unwrap();
        assert_eq!(
            (&v["s"], &v["x"]),
            (&Value::from("a \"NaN\\"), &Value::from("NaN"))
        );
        assert!(py_json("{\"a\": nan}").is_err());
        // Fewer than a file and one field is a usage error.
        assert_eq!(code(Checker::Iso8601, d, &["a.json"]), 2);
        assert_eq!(code(Checker::Iso8601, d, &[]), 2);
    }

    #[test]
    fn filename_single_path() {
        let d = Path::new("/nonexistent");
        // A compliant basename passes (existence is not checked).
        assert_eq!(
            check(Checker::Filename, d, &["day01/20260316_standup_notes.json"]),
            Outcome::ok("OK")
        );
        assert_eq!(code(Checker::Filename, d, &["20260316_a1.md"]), 0);
        // Uppercase, hyphens, no date, short date, leading digit after the
        // date, uppercase extension, no extension, a trailing slash: fail.
        for bad in [
            "day01/20260316_Standup.json",
            "20260316-standup.json",
            "standup.json",
            "2026316_standup.json",
            "20260316_1standup.json",
            "20260316_standup.JSON",
            "20260316_standup",
            "day01/",
        ] {
            assert_eq!(code(Checker::Filename, d, &[bad]), 1, "{bad}");
        }
        // The script's test is "does not start with --": `-h` is a path.
        assert_eq!(code(Checker::Filename, d, &["-h"]), 1);
        // Arguments after the path are ignored.
        assert_eq!(code(Checker::Filename, d, &["20260316_a.md", "--bogus"]), 0);
    }

    #[test]
    fn filename_dir_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        write(d, "day06/20260323_report.json", "{}");
        write(d, "day06/20260323_summary.json", "{}");
        write(d, "day06/report.json", "{}");
        write(d, "day06/20260323_notes.md", "x");
        write(d, "day06/20260323_Upper.json", "{}");
        // Non-recursive: a compliant file in a subfolder does not count.
        write(d, "day06/sub/20260323_deep.json", "{}");
        let out = check(Checker::Filename, d, &["--dir", "day06/", "--ext", "json"]);
        assert_eq!(
            out,
            Outcome::ok("OK (2 matching file(s): 20260323_report.json, 20260323_summary.json)")
        );
        // min-count: 2 passes, 3 fails.
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--dir", "day06", "--ext", "json", "--min-count", "2"]
            ),
            0
        );
        assert_eq!(
            check(
                Checker::Filename,
                d,
                &["--dir", "day06", "--ext", "json", "--min-count", "3"]
            ),
            Outcome::fail("expected >= 3 P2-compliant .json file(s) in day06, found 2")
        );
        // The extension is case-insensitive and its leading dot ignored.
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--dir", "day06", "--ext", "JSON", "--min-count", "2"]
            ),
            0
        );
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--dir", "day06", "--ext", ".json", "--min-count", "2"]
            ),
            0
        );
        // Only the asked extension counts.
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--dir", "day06", "--ext", "md", "--min-count", "2"]
            ),
            1
        );
        assert_eq!(
            code(Checker::Filename, d, &["--dir", "day06", "--ext", "csv"]),
            1
        );
        // Options in any order, `--opt=value`, and unique prefixes.
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--ext=json", "--min-count=2", "--dir=day06"]
            ),
            0
        );
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--d", "day06", "--e", "md", "--min", "1"]
            ),
            0
        );
        // A missing directory fails.
        assert_eq!(
            check(Checker::Filename, d, &["--dir", "day99", "--ext", "json"]),
            Outcome::fail("directory not found: day99")
        );
        // A file is not a directory.
        assert_eq!(
            code(
                Checker::Filename,
                d,
                &["--dir", "day06/report.json", "--ext", "json"]
            ),
            1
        );
        // Usage errors: nothing, --dir without --ext, a non-integer N, an
        // unknown option, a stray positional, an option without its value.
        for bad in [
            &[][..],
            &["--dir", "day06"][..],
            &["--dir", "day06", "--ext", "json", "--min-count", "two"][..],
            &["--dir", "day06", "--ext", "json", "--min-entries", "2"][..],
            &["--dir", "day06", "--ext", "json", "extra"][..],
            &["--dir", "day06", "--ext"][..],
            &["--dir", "day06", "--ext", "--min-count", "2"][..],
        ] {
            assert_eq!(code(Checker::Filename, d, bad), 2, "{bad:?}");
        }
        // `--help` exits 0, as argparse does.
        assert_eq!(code(Checker::Filename, d, &["--help"]), 0);
    }

    #[test]
    fn metadata_json() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let meta = |meta: Value| serde_json::json!({"meta": meta, "data": [1]}).to_string();
        let good =
            serde_json::json!({"created_at": TS, "author": "MetaClaw Agent", "status": "done"});
        // Pass.
        write(d, "ok.json", &meta(good.clone()));
        assert_eq!(check(Checker::Metadata, d, &["ok.json"]), Outcome::ok("OK"));
        // Each status is allowed.
        for status in STATUSES {
            let mut m = good.clone();
            m["status"] = Value::from(status);
            write(d, "s.json", &meta(m));
            assert_eq!(code(Checker::Metadata, d, &["s.json"]), 0);
        }
        // No meta object, an empty one, or a non-object fails.
        write(
            d,
            "nometa.json",
            r#"{"created_at": "2026-03-16T09:30:00+08:00"}"#,
        );
        assert_eq!(code(Checker::Metadata, d, &["nometa.json"]), 1);
        write(d, "emptymeta.json", &meta(serde_json::json!({})));
        assert_eq!(code(Checker::Metadata, d, &["emptymeta.json"]), 1);
        write(d, "strmeta.json", &meta(Value::from("x")));
        assert_eq!(code(Checker::Metadata, d, &["strmeta.json"]), 1);
        // A top-level list fails.
        write(d, "list.json", "[]");
        assert_eq!(code(Checker::Metadata, d, &["list.json"]), 1);
        // A missing key fails.
        let mut m = good.clone();
        m.as_object_mut().unwrap().remove("author");
        write(d, "nokey.json", &meta(m));
        assert_eq!(
            check(Checker::Metadata, d, &["nokey.json"]),
            Outcome::fail("meta.author is missing")
        );
        // An empty value fails: "" and null.
        for empty in [Value::from(""), Value::Null] {
            let mut m = good.clone();
            m["author"] = empty;
            write(d, "empty.json", &meta(m));
            assert_eq!(
                check(Checker::Metadata, d, &["empty.json"]),
                Outcome::fail("meta.author is empty")
            );
        }
        // A bad created_at fails (`Z`, a bare date, a number).
        for bad in [
            Value::from("2026-03-16T01:30:00Z"),
            Value::from("2026-03-16"),
            Value::from(1),
        ] {
            let mut m = good.clone();
            m["created_at"] = bad;
            write(d, "ts.json", &meta(m));
            assert_eq!(code(Checker::Metadata, d, &["ts.json"]), 1);
        }
        // A status outside the set fails (case matters).
        for bad in ["completed", "Done", "in progress"] {
            let mut m = good.clone();
            m["status"] = Value::from(bad);
            write(d, "st.json", &meta(m));
            assert_eq!(code(Checker::Metadata, d, &["st.json"]), 1, "{bad}");
        }
        // Not JSON, or no file, fails.
        write(d, "broken.json", "{");
        assert_eq!(code(Checker::Metadata, d, &["broken.json"]), 1);
        assert_eq!(code(Checker::Metadata, d, &["absent.json"]), 1);
    }

    #[test]
    fn metadata_markdown() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let fm = |body: &str| format!("---\n{body}\n---\n\n# Title\n");
        let good = format!("created_at: {TS}\nauthor: MetaClaw Agent\nstatus: in_progress");
        // Pass, also with CRLF line ends.
        write(d, "ok.md", &fm(&good));
        assert_eq!(check(Checker::Metadata, d, &["ok.md"]), Outcome::ok("OK"));
        write(d, "crlf.md", &fm(&good).replace('\n', "\r\n"));
        assert_eq!(code(Checker::Metadata, d, &["crlf.md"]), 0);
        // .txt is checked as md.
        write(d, "notes.txt", &fm(&good));
        assert_eq!(code(Checker::Metadata, d, &["notes.txt"]), 0);
        write(d, "plain.txt", "just text\n");
        assert_eq!(code(Checker::Metadata, d, &["plain.txt"]), 1);
        // Front matter must start the file.
        write(d, "late.md", &format!("# Title\n{}", fm(&good)));
        assert_eq!(code(Checker::Metadata, d, &["late.md"]), 1);
        // Unclosed front matter fails.
        write(d, "open.md", &format!("---\n{good}\n\n# Title\n"));
        assert_eq!(
            check(Checker::Metadata, d, &["open.md"]),
            Outcome::fail("YAML frontmatter not closed with ---")
        );
        // The closing line only has to start with `---`.
        write(d, "dashes.md", &format!("---\n{good}\n-----\nbody\n"));
        assert_eq!(code(Checker::Metadata, d, &["dashes.md"]), 0);
        // A missing key, and an empty value, fail.
        write(
            d,
            "nokey.md",
            &fm(&format!("created_at: {TS}\nstatus: done")),
        );
        assert_eq!(
            check(Checker::Metadata, d, &["nokey.md"]),
            Outcome::fail("frontmatter missing or empty field: author")
        );
        write(
            d,
            "empty.md",
            &fm(&format!("created_at: {TS}\nauthor:   \nstatus: done")),
        );
        assert_eq!(code(Checker::Metadata, d, &["empty.md"]), 1);
        // A bad created_at fails, quoted values included (no YAML parsing).
        write(
            d,
            "ts.md",
            &fm("created_at: 2026-03-16\nauthor: a\nstatus: done"),
        );
        assert_eq!(code(Checker::Metadata, d, &["ts.md"]), 1);
        write(
            d,
            "quoted.md",
            &fm(&format!("created_at: \"{TS}\"\nauthor: a\nstatus: done")),
        );
        assert_eq!(code(Checker::Metadata, d, &["quoted.md"]), 1);
        // A bad status fails for md.
        write(
            d,
            "st.md",
            &fm(&format!("created_at: {TS}\nauthor: a\nstatus: draft")),
        );
        assert_eq!(code(Checker::Metadata, d, &["st.md"]), 1);
        // Keys are case-sensitive in md.
        write(
            d,
            "case.md",
            &fm(&format!("Created_At: {TS}\nauthor: a\nstatus: done")),
        );
        assert_eq!(code(Checker::Metadata, d, &["case.md"]), 1);
    }

    #[test]
    fn metadata_python_and_csv() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let py =
            |meta: &str| format!("\"\"\"Export helpers.\n\nMeta:\n{meta}\n\"\"\"\n\nimport json\n");
        // Pass; status is not restricted for py; keys compared lower-cased.
        write(
            d,
            "ok.py",
            &py(&format!(
                "    created_at: {TS}\n    author: MetaClaw Agent\n    status: done"
            )),
        );
        assert_eq!(check(Checker::Metadata, d, &["ok.py"]), Outcome::ok("OK"));
        write(
            d,
            "free.py",
            &py(&format!(
                "    Created_At: {TS}\n    Author: a\n    Status: shipped"
            )),
        );
        assert_eq!(code(Checker::Metadata, d, &["free.py"]), 0);
        // The section ends at the next blank line: keys after it are lost.
        write(
            d,
            "gap.py",
            &py(&format!(
                "    created_at: {TS}\n\n    author: a\n    status: done"
            )),
        );
        assert_eq!(code(Checker::Metadata, d, &["gap.py"]), 1);
        // No docstring, no Meta: section, a missing key, an empty value, a
        // bad created_at: all fail.
        write(d, "nodoc.py", "import os\n");
        assert_eq!(
            check(Checker::Metadata, d, &["nodoc.py"]),
            Outcome::fail("missing module docstring")
        );
        write(d, "nometa.py", "\"\"\"Just a docstring.\"\"\"\n");
        assert_eq!(code(Checker::Metadata, d, &["nometa.py"]), 1);
        write(
            d,
            "nokey.py",
            &py(&format!("    created_at: {TS}\n    status: done")),
        );
        assert_eq!(code(Checker::Metadata, d, &["nokey.py"]), 1);
        write(
            d,
            "empty.py",
            &py(&format!(
                "    created_at: {TS}\n    author:\n    status: done"
            )),
        );
        assert_eq!(code(Checker::Metadata, d, &["empty.py"]), 1);
        write(
            d,
            "ts.py",
            &py("    created_at: 2026-03-16 09:30\n    author: a\n    status: done"),
        );
        assert_eq!(code(Checker::Metadata, d, &["ts.py"]), 1);
        // Only the first triple-quoted string counts.
        write(
            d,
            "second.py",
            &format!(
                "\"\"\"Helpers.\"\"\"\n\ndef f():\n    \"\"\"Meta:\n    created_at: {TS}\n    author: a\n    status: done\n    \"\"\"\n"
            ),
        );
        assert_eq!(code(Checker::Metadata, d, &["second.py"]), 1);

        // csv: pass; status not restricted.
        write(
            d,
            "ok.csv",
            &format!("# meta: created_at={TS} author=MetaClaw status=done\nday,count\n"),
        );
        assert_eq!(check(Checker::Metadata, d, &["ok.csv"]), Outcome::ok("OK"));
        write(
            d,
            "free.csv",
            &format!("# meta: created_at={TS}  author=a\tstatus=final\r\nx\r\n"),
        );
        assert_eq!(code(Checker::Metadata, d, &["free.csv"]), 0);
        // A first line that is not `# meta:`, a missing key, an empty value,
        // a bad created_at: all fail.
        write(
            d,
            "late.csv",
            &format!("day,count\n# meta: created_at={TS} author=a status=done\n"),
        );
        assert_eq!(code(Checker::Metadata, d, &["late.csv"]), 1);
        write(
            d,
            "nokey.csv",
            &format!("# meta: created_at={TS} status=done\n"),
        );
        assert_eq!(
            check(Checker::Metadata, d, &["nokey.csv"]),
            Outcome::fail("meta comment missing field: author")
        );
        write(
            d,
            "empty.csv",
            &format!("# meta: created_at={TS} author= status=done\n"),
        );
        assert_eq!(code(Checker::Metadata, d, &["empty.csv"]), 1);
        write(
            d,
            "ts.csv",
            "# meta: created_at=2026-03-16 author=a status=done\n",
        );
        assert_eq!(code(Checker::Metadata, d, &["ts.csv"]), 1);
    }

    #[test]
    fn metadata_types() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let md = format!("---\ncreated_at: {TS}\nauthor: a\nstatus: done\n---\n");
        // An unknown type fails with exit 1, before the file is read.
        write(d, "data.yaml", &md);
        assert_eq!(
            check(Checker::Metadata, d, &["data.yaml"]),
            Outcome::fail("unsupported file type: yaml")
        );
        // The type comes from the whole path's last dot, lower-cased.
        write(d, "upper.MD", &md);
        assert_eq!(code(Checker::Metadata, d, &["upper.MD"]), 0);
        write(d, "noext", &md);
        assert_eq!(code(Checker::Metadata, d, &["noext"]), 1);
        // --type overrides the extension, either way round.
        assert_eq!(
            code(Checker::Metadata, d, &["data.yaml", "--type", "md"]),
            0
        );
        assert_eq!(code(Checker::Metadata, d, &["--type=md", "noext"]), 0);
        write(d, "fm.json", &md);
        assert_eq!(code(Checker::Metadata, d, &["fm.json"]), 1);
        assert_eq!(code(Checker::Metadata, d, &["fm.json", "--type", "md"]), 0);
        // --type accepts json|md|py|csv only ("txt" is not a choice).
        assert_eq!(
            code(Checker::Metadata, d, &["data.yaml", "--type", "txt"]),
            2
        );
        // Usage errors: no file, two files, an unknown option.
        assert_eq!(code(Checker::Metadata, d, &[]), 2);
        assert_eq!(code(Checker::Metadata, d, &["a.md", "b.md"]), 2);
        assert_eq!(code(Checker::Metadata, d, &["a.md", "--strict"]), 2);
        // A missing file of a known type fails with exit 1.
        assert_eq!(code(Checker::Metadata, d, &["absent.md"]), 1);
    }

    #[test]
    fn backup_checks() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        // The original is missing.
        assert_eq!(
            check(Checker::Backup, d, &["day16/config.json"]),
            Outcome::fail("original file not found: day16/config.json")
        );
        // The .bak is missing.
        write(d, "day16/config.json", "{\"a\": 2}");
        assert_eq!(code(Checker::Backup, d, &["day16/config.json"]), 1);
        // The .bak is byte-identical: taken after the change.
        write(d, "day16/config.json.bak", "{\"a\": 2}");
        assert_eq!(code(Checker::Backup, d, &["day16/config.json"]), 1);
        // A .bak that differs passes.
        write(d, "day16/config.json.bak", "{\"a\": 1}");
        assert_eq!(
            check(Checker::Backup, d, &["day16/config.json"]),
            Outcome::ok("OK")
        );
        // Byte-level: a line-end change is a difference.
        write(d, "x.txt", "a\n");
        write(d, "x.txt.bak", "a\r\n");
        assert_eq!(code(Checker::Backup, d, &["x.txt"]), 0);
        // No argument is a usage error; an empty path is not found.
        assert_eq!(code(Checker::Backup, d, &[]), 2);
        assert_eq!(code(Checker::Backup, d, &[""]), 1);
    }

    #[test]
    fn done_log_checks() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let line = |task: &str, summary: &str| format!("[DONE] {TS} | {task} | {summary}\n");
        // A missing file fails.
        assert_eq!(
            check(Checker::DoneLog, d, &["done.log"]),
            Outcome::fail("done.log not found: done.log")
        );
        // One good entry passes the default --min-entries 1.
        write(
            d,
            "done.log",
            &line("standup_summary", "Organised stand-up notes"),
        );
        assert_eq!(
            check(Checker::DoneLog, d, &["done.log"]),
            Outcome::ok("OK (1 entries)")
        );
        // Too few entries; blank lines do not count.
        write(
            d,
            "done.log",
            &format!("{}\n   \n{}", line("a", "x"), line("b", "y")),
        );
        assert_eq!(
            code(Checker::DoneLog, d, &["done.log", "--min-entries", "2"]),
            0
        );
        assert_eq!(
            check(Checker::DoneLog, d, &["done.log", "--min-entries", "3"]),
            Outcome::fail("expected >= 3 entries, found 2")
        );
        // An empty file fails the default minimum.
        write(d, "empty.log", "\n\n");
        assert_eq!(code(Checker::DoneLog, d, &["empty.log"]), 1);
        // Fractional seconds and CRLF line ends are fine.
        write(
            d,
            "crlf.log",
            &format!(
                "[DONE] 2026-03-16T09:30:00.250+08:00 | t1 | ok\r\n{}",
                line("t2", "ok")
            ),
        );
        assert_eq!(
            code(Checker::DoneLog, d, &["crlf.log", "--min-entries", "2"]),
            0
        );
        // Bad line formats: a double space before the first `|`, a missing
        // `[DONE]`, `Z`, a bare date, a missing summary, no separators.
        for bad in [
            format!("[DONE] {TS}  | t | s"),
            format!("DONE {TS} | t | s"),
            "[DONE] 2026-03-16T01:30:00Z | t | s".to_string(),
            "[DONE] 2026-03-16 | t | s".to_string(),
            format!("[DONE] {TS} | t |"),
            format!("[DONE] {TS} t s"),
            format!("[DONE] {TS}|t|s"),
        ] {
            write(d, "bad.log", &format!("{}{bad}\n", line("ok", "fine")));
            let out = check(Checker::DoneLog, d, &["bad.log"]);
            assert_eq!(out.code, 1, "{bad}");
            assert!(
                out.message
                    .starts_with("FAIL: line 2 does not match format"),
                "{bad}"
            );
        }
        // The summary: 80 characters pass, 81 fail (after trimming).
        write(d, "s80.log", &line("t", &format!("{}   ", "x".repeat(80))));
        assert_eq!(code(Checker::DoneLog, d, &["s80.log"]), 0);
        write(d, "s81.log", &line("t", &"é".repeat(81)));
        let out = check(Checker::DoneLog, d, &["s81.log"]);
        assert_eq!(out.code, 1);
        assert!(
            out.message
                .starts_with("FAIL: line 1 summary exceeds 80 chars (81)")
        );
        // --task-prefix applies to the last entry, trimmed.
        write(
            d,
            "tasks.log",
            &format!(
                "{}{}",
                line("constants_update_1", "a"),
                line("sprint10_kickoff", "b")
            ),
        );
        assert_eq!(
            code(
                Checker::DoneLog,
                d,
                &["tasks.log", "--task-prefix", "sprint10"]
            ),
            0
        );
        assert_eq!(
            check(
                Checker::DoneLog,
                d,
                &["tasks.log", "--task-prefix", "constants_update"]
            ),
            Outcome::fail(
                "last entry task_id 'sprint10_kickoff' does not start with 'constants_update'"
            )
        );
        assert_eq!(
            code(
                Checker::DoneLog,
                d,
                &[
                    "tasks.log",
                    "--min-entries",
                    "3",
                    "--task-prefix",
                    "sprint10"
                ]
            ),
            1
        );
        // An empty prefix checks nothing (falsy in Python).
        assert_eq!(
            code(Checker::DoneLog, d, &["tasks.log", "--task-prefix", ""]),
            0
        );
        // Usage errors (exit 2): an unknown option such as `--min-count`
        // (the data passes it twice), a missing logfile, a non-integer N,
        // an option without its value, two logfiles.
        let out = check(
            Checker::DoneLog,
            d,
            &["tasks.log", "--min-entries", "1", "--min-count", "2"],
        );
        assert_eq!(out.code, 2);
        assert!(
            out.message
                .ends_with("error: unrecognized arguments: --min-count 2")
        );
        for bad in [
            &[][..],
            &["--min-entries", "1"][..],
            &["tasks.log", "--min-entries", "x"][..],
            &["tasks.log", "--task-prefix"][..],
            &["tasks.log", "other.log"][..],
        ] {
            assert_eq!(code(Checker::DoneLog, d, bad), 2, "{bad:?}");
        }
        // argparse's int(): whitespace and a sign are accepted; prefixes of
        // long options too.
        assert_eq!(
            code(Checker::DoneLog, d, &["tasks.log", "--min-entries", " +2 "]),
            0
        );
        assert_eq!(
            code(
                Checker::DoneLog,
                d,
                &["tasks.log", "--min", "2", "--task", "sprint"]
            ),
            0
        );
        assert_eq!(
            code(Checker::DoneLog, d, &["--min-entries=-1", "tasks.log"]),
            0
        );
        // `--` next to the logfile is dropped; anywhere else it is left over.
        assert_eq!(code(Checker::DoneLog, d, &["--", "tasks.log"]), 0);
        assert_eq!(code(Checker::DoneLog, d, &["tasks.log", "--"]), 0);
        assert_eq!(
            code(
                Checker::DoneLog,
                d,
                &["tasks.log", "--min-entries", "1", "--"]
            ),
            2
        );
    }

    #[test]
    fn done_log_spacing() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let run_line = |l: &str| {
            write(d, "done.log", &format!("{l}\n"));
            code(Checker::DoneLog, d, &["done.log", "--task-prefix", "task"])
        };
        // Exactly single spaces around the `|`s.
        assert_eq!(run_line(&format!("[DONE] {TS} | task_a | Did it")), 0);
        // A double space before the first `|` fails.
        assert_eq!(run_line(&format!("[DONE] {TS}  | task_a | Did it")), 1);
        // As in the script's pattern, extra spaces next to the task id or
        // the summary are absorbed by them (the task id is trimmed).
        assert_eq!(run_line(&format!("[DONE] {TS} |  task_a  |  Did it")), 0);
        // A `|` inside the summary is fine.
        assert_eq!(run_line(&format!("[DONE] {TS} | task_a | a | b")), 0);
    }

    #[test]
    fn python_helpers() {
        assert_eq!(py_int("12"), Some(12));
        assert_eq!(py_int(" -3\n"), Some(-3));
        assert_eq!(py_int("1_000"), Some(1000));
        for bad in ["", "1.5", "_1", "1__0", "x", "+", "1 2"] {
            assert_eq!(py_int(bad), None, "{bad:?}");
        }
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(1e20), "1e+20");
        assert_eq!(py_float(1.5e-7), "1.5e-07");
        assert_eq!(py_str_repr("it's"), "\"it's\"");
        assert_eq!(py_str_repr("a\nb"), "'a\\nb'");
        assert_eq!(
            py_repr(&serde_json::json!({"a": [true, null]})),
            "{'a': [True, None]}"
        );
        assert_eq!(py_strip("\u{1c} x \u{3000}"), "x");
    }
}
