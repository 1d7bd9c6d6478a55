//! `redact`: an evolver that removes secrets and personal data from skill
//! drafts.
//!
//! Drafts are written by an LLM from real sessions, so they can quote what
//! those sessions contained: an API key from a config file, a token from a
//! `curl` command, the user's email address, a path under the user's home
//! folder. A skill is stored on disk and injected into later sessions
//! (possibly other people's), so none of that may survive. `redact` keeps
//! every draft and rewrites its text fields (name, description, category,
//! tags, body), replacing:
//!
//! - private-key blocks (`-----BEGIN … PRIVATE KEY-----` … `END`) →
//!   `[REDACTED:private-key]`;
//! - JSON Web Tokens (`eyJ….eyJ….…`) → `[REDACTED:jwt]`;
//! - API keys by their published formats: OpenAI/Anthropic `sk-…` and
//!   `sk-ant-…`, Stripe `sk_live_…`, AWS `AKIA…`/`ASIA…`, GitHub
//!   `gh[pousr]_…` and `github_pat_…`, Slack `xox?-…`, Google `AIza…` →
//!   `[REDACTED:api-key]`;
//! - the credential after `Bearer`/`Basic` → `[REDACTED:token]`, and the
//!   password in a URL (`https://user:pw@host`) → `[REDACTED:password]`;
//! - the value of `password=`, `token:`, `api_key = "…"`, `--password …`
//!   and the like (the name is kept) → `[REDACTED:secret]`, unless the value
//!   is a placeholder or a reference (`<token>`, `$TOKEN`, `${…}`,
//!   `os.environ[…]`, `***`, a path);
//! - email addresses → `[REDACTED:email]` (not those at the reserved example
//!   domains, and not `git@host:` remotes);
//! - home folders of a named user (`/home/<user>/…`, `/Users/<user>/…`,
//!   `C:\Users\<user>\…`, `/root/…`) → `~/…` (`~\…` for Windows paths), so
//!   no username survives.
//!
//! Text with none of these is returned byte for byte as it was.

use std::borrow::Cow;
use std::sync::OnceLock;

use metaclaw_plugin_sdk::evolver::{
    DraftOutcome, Guest, Metadata, PluginGuest, Skill, SkillDraft, metadata,
};
use regex::{Captures, Regex};

pub struct Redact;

impl PluginGuest for Redact {
    fn metadata() -> Metadata {
        metadata(
            "redact",
            env!("CARGO_PKG_VERSION"),
            "Removes API keys, tokens, passwords, email addresses and home-directory paths from drafts",
        )
    }
}

impl Guest for Redact {
    fn process(drafts: Vec<SkillDraft>, _library: Vec<Skill>) -> Vec<DraftOutcome> {
        process(drafts)
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::evolver::export_evolver!(Redact);

/// Every draft kept, redacted.
pub fn process(drafts: Vec<SkillDraft>) -> Vec<DraftOutcome> {
    drafts
        .into_iter()
        .map(|d| DraftOutcome::Keep(redact_draft(d)))
        .collect()
}

/// The draft with every text field redacted (`updates`, a library id, is
/// left alone).
pub fn redact_draft(mut draft: SkillDraft) -> SkillDraft {
    let fix = |s: &mut String| {
        if let Cow::Owned(clean) = redact(s) {
            *s = clean;
        }
    };
    fix(&mut draft.name);
    fix(&mut draft.description);
    fix(&mut draft.category);
    for tag in &mut draft.tags {
        fix(tag);
    }
    fix(&mut draft.body);
    draft
}

/// Compiled patterns (built once per instance). A pattern that does not
/// compile (a bug, caught by the tests) is skipped rather than panicking.
struct Patterns {
    private_key: Option<Regex>,
    jwt: Option<Regex>,
    api_key: Option<Regex>,
    auth_scheme: Option<Regex>,
    url_password: Option<Regex>,
    assignment: Option<Regex>,
    flag: Option<Regex>,
    email: Option<Regex>,
    home: Option<Regex>,
}

// Patterns are ASCII-only (`(?-u)`): the `regex` crate is built without its
// Unicode tables, which keeps the component small.

/// Characters a secret value is made of (printable ASCII but for spaces,
/// quotes, commas, brackets and the like that end it in prose and code).
const VALUE: &str = r"[A-Za-z0-9_\-.+/=~!@#$%^*:|\\]";

fn patterns() -> &'static Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let re = |p: &str| Regex::new(p).ok();
        Patterns {
            private_key: re(
                r"(?-u)-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?:(?su:.)*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|[A-Za-z0-9+/=\s]*)",
            ),
            jwt: re(r"(?-u)\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
            api_key: re(concat!(
                r"(?-u)\b(?:",
                r"sk-ant-[A-Za-z0-9_-]{16,}",
                r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
                r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}",
                r"|(?:AKIA|ASIA)[0-9A-Z]{16}",
                r"|gh[pousr]_[A-Za-z0-9]{30,}",
                r"|github_pat_[A-Za-z0-9_]{30,}",
                r"|xox[abposr]-[A-Za-z0-9-]{10,}",
                r"|AIza[0-9A-Za-z_-]{35}",
                r")\b",
            )),
            auth_scheme: re(r"(?-u)(?i)\b((?:bearer|basic)\s+)([A-Za-z0-9_\-.+/=~]{12,})"),
            url_password: re(
                r"(?-u)\b([a-z][a-z0-9+.-]*://[A-Za-z0-9_.~%-]+:)([A-Za-z0-9_.~%!$&'()*+,;=-]+)(@)",
            ),
            assignment: re(&format!(
                r#"(?-u)(?i)([A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?key|pwd))(["']?\s*(?::=|=>|:|=)\s*["']?)({VALUE}+)"#
            )),
            flag: re(&format!(
                r"(?-u)(?i)(--(?:password|passwd|passphrase|token|api-key|apikey|secret|access-key|auth-token))(\s+)({VALUE}+)"
            )),
            email: re(
                r"(?-u)\b[A-Za-z0-9._%+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})\b(:[A-Za-z0-9~/_-])?",
            ),
            home: re(
                r#"(?-u)(^|[\s`'"(=\[{<,;:]|file://)(?:/home/([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)|/Users/([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)|[A-Za-z]:[\\/][Uu]sers[\\/]([A-Za-z0-9._ -]+?)|/root)([\\/]|$|[\s`'")\]}>,;:.])"#,
            ),
        }
    })
}

/// `text` with its secrets and personal data replaced; borrowed (and so
/// byte-identical) when there was nothing to replace.
pub fn redact(text: &str) -> Cow<'_, str> {
    let p = patterns();
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    let mut apply = |re: &Option<Regex>, f: &dyn Fn(&Captures) -> String| {
        if let Some(re) = re
            && re.is_match(&out)
        {
            let replaced = re.replace_all(&out, |c: &Captures| f(c)).into_owned();
            if replaced != out {
                out = Cow::Owned(replaced);
            }
        }
    };
    apply(&p.private_key, &|_| "[REDACTED:private-key]".into());
    apply(&p.jwt, &|_| "[REDACTED:jwt]".into());
    apply(&p.api_key, &|_| "[REDACTED:api-key]".into());
    apply(&p.auth_scheme, &|c| {
        let value = group(c, 2);
        if placeholder(value) || !looks_secret(value) {
            return group(c, 0).to_string();
        }
        format!("{}[REDACTED:token]", group(c, 1))
    });
    apply(&p.url_password, &|c| {
        if placeholder(group(c, 2)) {
            return group(c, 0).to_string();
        }
        format!("{}[REDACTED:password]{}", group(c, 1), group(c, 3))
    });
    apply(&p.assignment, &secret_value);
    apply(&p.flag, &secret_value);
    apply(&p.email, &|c| {
        let domain = group(c, 1).to_ascii_lowercase();
        // `git@github.com:org/repo`: a remote, not a person.
        let remote = c.get(2).is_some();
        if remote || example_domain(&domain) {
            group(c, 0).to_string()
        } else {
            "[REDACTED:email]".to_string()
        }
    });
    apply(&p.home, &|c| {
        let user = [2, 3, 4]
            .into_iter()
            .map(|i| group(c, i))
            .find(|u| !u.is_empty())
            .unwrap_or_default();
        if matches!(
            user.to_ascii_lowercase().as_str(),
            "shared" | "public" | "default" | "all users" | "default user"
        ) {
            return group(c, 0).to_string();
        }
        format!("{}~{}", group(c, 1), group(c, 5))
    });
    out
}

fn group<'t>(c: &Captures<'t>, i: usize) -> &'t str {
    c.get(i).map_or("", |m| m.as_str())
}

/// An assignment (groups: name, separator, value) with its value redacted,
/// or as it was when the value is a placeholder or a reference. In prose
/// ("Password: use a long one") a bare word after `: ` is not a secret:
/// an unquoted value after a spaced separator must look like one.
fn secret_value(c: &Captures) -> String {
    let (name, separator, value) = (group(c, 1), group(c, 2), group(c, 3));
    let quoted = separator.ends_with(['"', '\'']);
    let spaced = separator.contains(char::is_whitespace);
    if placeholder(value) || (spaced && !quoted && !looks_secret(value)) {
        return group(c, 0).to_string();
    }
    format!("{name}{separator}[REDACTED:secret]")
}

/// Whether a word looks like a credential rather than a word of prose: at
/// least 6 characters with a digit, a symbol or mixed case.
fn looks_secret(value: &str) -> bool {
    let v = value.trim_end_matches(['.', ',', ':', ';']);
    v.len() >= 6
        && (v.chars().any(|c| c.is_ascii_digit())
            || v.chars().any(|c| "!@#$%^&*+/=_~".contains(c))
            || (v.chars().any(|c| c.is_ascii_uppercase())
                && v.chars().any(|c| c.is_ascii_lowercase())
                && v.len() >= 12))
}

/// `<token>`, `$TOKEN`, `${TOKEN}`, `%TOKEN%`, `***`, `xxx`, `...`,
/// `os.environ…`, `process.env…`, paths, `null`, a redaction already made.
fn placeholder(value: &str) -> bool {
    let v = value.trim_end_matches(['.', ',', ':', ';']);
    let lower = v.to_ascii_lowercase();
    if v.is_empty()
        || v.starts_with(['$', '<', '{', '%', '[', '~', '/', '*', '.', '\\'])
        || v.chars()
            .all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '-' | '_' | '#'))
    {
        return true;
    }
    if [
        "environ",
        "process.env",
        "getenv",
        "env::var",
        "env.",
        "secrets.",
        "your",
        "redacted",
        "placeholder",
        "example",
        "changeme",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        return true;
    }
    matches!(
        lower.as_str(),
        "null" | "none" | "nil" | "true" | "false" | "env" | "required" | "string" | "str"
    )
}

/// Example domains (RFC 2606) name no one.
fn example_domain(domain: &str) -> bool {
    matches!(domain, "example.com" | "example.org" | "example.net")
        || [
            ".example.com",
            ".example.org",
            ".example.net",
            ".example",
            ".test",
            ".invalid",
            ".localhost",
        ]
        .iter()
        .any(|tld| domain.ends_with(tld))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> String {
        redact(text).into_owned()
    }

    #[test]
    fn every_pattern_compiles() {
        let p = patterns();
        for re in [
            &p.private_key,
            &p.jwt,
            &p.api_key,
            &p.auth_scheme,
            &p.url_password,
            &p.assignment,
            &p.flag,
            &p.email,
            &p.home,
        ] {
            assert!(re.is_some());
        }
    }

    #[test]
    fn api_keys() {
        for key in [
            "sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz123456",
            "sk-ant-api03-Ab3dEf6hIj9kLmN0pQrStUvWxYz-123456_AA",
            "sk-Ab3dEf6hIj9kLmN0pQrStUvWxYz",
            "sk_live_51HxYzAbCdEfGhIjKlMn",
            "AKIAIOSFODNN7EXAMPLE",
            "ghp_1234567890abcdefghijABCDEFGHIJ123456",
            "gho_1234567890abcdefghijABCDEFGHIJ123456",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        ] {
            let text = format!("Use {key} for the call.");
            assert_eq!(r(&text), "Use [REDACTED:api-key] for the call.", "{key}");
        }
        // Ordinary words that start the same way.
        for text in ["a task-specific skill", "sk-learn", "ghp_short", "AKIA"] {
            assert_eq!(r(text), text);
        }
    }

    #[test]
    fn jwts_and_bearer_tokens() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(r(&format!("token {jwt} here")), "token [REDACTED:jwt] here");
        assert_eq!(
            r("curl -H 'Authorization: Bearer abc123def456ghi789' https://api"),
            "curl -H 'Authorization: Bearer [REDACTED:token]' https://api"
        );
        assert_eq!(
            r("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw=="),
            "Authorization: Basic [REDACTED:token]"
        );
        assert_eq!(
            r(&format!("Authorization: Bearer {jwt}")),
            "Authorization: Bearer [REDACTED:jwt]"
        );
        // The word alone is not a token.
        for text in [
            "Send a bearer token in the header.",
            "Use Basic authentication over HTTPS.",
            "Authorization: Bearer YOUR_API_TOKEN",
        ] {
            assert_eq!(r(text), text);
        }
    }

    #[test]
    fn private_key_blocks() {
        let text = "Key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\nAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\nDone.";
        assert_eq!(r(text), "Key:\n[REDACTED:private-key]\nDone.");
        let cut = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc+/=";
        assert_eq!(r(cut), "[REDACTED:private-key]");
        let public = "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----";
        assert_eq!(r(public), public);
    }

    #[test]
    fn assignments_keep_the_name() {
        for (text, want) in [
            ("password=hunter2", "password=[REDACTED:secret]"),
            ("DB_PASSWORD=s3cr3t!", "DB_PASSWORD=[REDACTED:secret]"),
            ("token: 9f8e7d6c5b4a", "token: [REDACTED:secret]"),
            (
                "api_key = \"abcd1234efgh\"",
                "api_key = \"[REDACTED:secret]\"",
            ),
            (
                "\"client_secret\": \"zz-99-yy\"",
                "\"client_secret\": \"[REDACTED:secret]\"",
            ),
            (
                "https://x.io/cb?access_token=abc123&x=1",
                "https://x.io/cb?access_token=[REDACTED:secret]&x=1",
            ),
            (
                "mysql --password hunter2 db",
                "mysql --password [REDACTED:secret] db",
            ),
            (
                "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCY",
                "aws_secret_access_key=[REDACTED:secret]",
            ),
        ] {
            assert_eq!(r(text), want, "{text}");
        }
        for text in [
            "password=$DB_PASSWORD",
            "token: ${{ secrets.GITHUB_TOKEN }}",
            "api_key = os.environ[\"API_KEY\"]",
            "API_KEY=<your-key>",
            "password: ***",
            "max_tokens=1024",
            "token_type: bearer",
            "secret_name: prod-db",
            "Set the password to something long.",
            "the token is rotated hourly",
            "Password: use a long passphrase.",
            "token: the string the provider gave you",
        ] {
            assert_eq!(r(text), text, "{text}");
        }
    }

    #[test]
    fn url_passwords() {
        assert_eq!(
            r("git clone https://bob:pa55word@git.corp.io/repo.git"),
            "git clone https://bob:[REDACTED:password]@git.corp.io/repo.git"
        );
    }

    #[test]
    fn emails() {
        assert_eq!(
            r("Ask alice.smith+work@acme-corp.co.uk or bob@mail.acme.io."),
            "Ask [REDACTED:email] or [REDACTED:email]."
        );
        for text in [
            "use `user@example.com` instead of a real address",
            "git clone git@github.com:org/repo.git",
            "entries look like `HEAD@{3}`",
            "npm i @types/node lodash@4.17.21",
            "`@csv` or `@tsv`",
        ] {
            assert_eq!(r(text), text, "{text}");
        }
    }

    #[test]
    fn home_directories() {
        for (text, want) in [
            ("Edit /home/alice/project/main.rs", "Edit ~/project/main.rs"),
            ("cd /Users/bob.smith/Desktop", "cd ~/Desktop"),
            (
                r"Open C:\Users\Carol\AppData\Local",
                r"Open ~\AppData\Local",
            ),
            ("C:/Users/dave/repo", "~/repo"),
            ("sudo cat /root/.bashrc", "sudo cat ~/.bashrc"),
            ("`/home/erin`", "`~`"),
            ("PATH=/home/frank/bin:/usr/bin", "PATH=~/bin:/usr/bin"),
            ("open file:///home/gina/a.pdf", "open file://~/a.pdf"),
            ("(see /home/hal.", "(see ~."),
        ] {
            assert_eq!(r(text), want, "{text}");
        }
        for text in [
            "~/project/main.rs",
            "/home is a partition",
            "/home/$USER/x and /home/<user>/x",
            "https://site.io/home/alice/about",
            "/Users/Shared/data",
            "/rooted/path and /var/home",
        ] {
            assert_eq!(r(text), text, "{text}");
        }
    }

    #[test]
    fn ordinary_text_is_byte_identical() {
        let text = "# Rebase safely\n\n1. Run `git fetch origin` then `git rebase origin/main`.\n2. Check ~/.gitconfig; 中文 ✓ — naïve café.\n3. Keep API keys in `.env` and never commit it; see https://docs.rs/regex.\n";
        assert!(matches!(redact(text), Cow::Borrowed(_)));
        let skills = metaclaw_plugin_text::skills::builtin_skills().unwrap();
        for skill in &skills {
            assert_eq!(redact(&skill.text), skill.text.as_str(), "{}", skill.id);
        }
        assert!(skills.len() >= 44, "{}", skills.len());
    }

    #[test]
    fn every_field_of_every_draft() {
        let draft = SkillDraft {
            name: "deploy-for-alice@acme.io".into(),
            description: "Deploy with password=hunter2".into(),
            category: "general".into(),
            tags: vec!["ok".into(), "/home/alice/x".into()],
            body: "Use sk-ant-api03-Ab3dEf6hIj9kLmN0pQrStUvWxYz.".into(),
            updates: Some("deploy".into()),
        };
        let out = process(vec![draft]);
        let [DraftOutcome::Keep(d)] = out.as_slice() else {
            panic!("{out:?}");
        };
        assert_eq!(d.name, "[REDACTED:email]");
        assert_eq!(d.description, "Deploy with password=[REDACTED:secret]");
        assert_eq!(d.tags, ["ok", "~/x"]);
        assert_eq!(d.body, "Use [REDACTED:api-key].");
        assert_eq!(d.updates.as_deref(), Some("deploy"));
    }

    #[test]
    fn metadata_names_the_plugin() {
        let m = Redact::metadata();
        assert_eq!(m.name, "redact");
        assert_eq!(m.version, env!("CARGO_PKG_VERSION"));
    }
}
