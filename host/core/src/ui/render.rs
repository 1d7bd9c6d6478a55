//! Pages from templates: the minijinja environment (the templates and
//! assets are compiled into the binary; HTML is escaped unless a template
//! says otherwise), the filters the templates share, and the headers every
//! page is sent with.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use minijinja::{Environment, Value};

use super::chart::escape;

const TEMPLATES: &[(&str, &str)] = &[
    ("base.html", include_str!("templates/base.html")),
    ("login.html", include_str!("templates/login.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("sessions.html", include_str!("templates/sessions.html")),
    ("session.html", include_str!("templates/session.html")),
    ("skills.html", include_str!("templates/skills.html")),
    ("skill.html", include_str!("templates/skill.html")),
    ("learning.html", include_str!("templates/learning.html")),
    (
        "experiments.html",
        include_str!("templates/experiments.html"),
    ),
    ("training.html", include_str!("templates/training.html")),
    ("plugins.html", include_str!("templates/plugins.html")),
    ("confirm.html", include_str!("templates/confirm.html")),
];

const ASSETS: &[(&str, &str, &str)] = &[
    (
        "ui.css",
        "text/css; charset=utf-8",
        include_str!("assets/ui.css"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/ui.js"),
    ),
];

/// Only this page's own scripts, styles and forms; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub struct Views {
    env: Environment<'static>,
}

impl Views {
    pub fn new() -> anyhow::Result<Self> {
        let mut env = Environment::new();
        for (name, source) in TEMPLATES {
            env.add_template(name, source)
                .map_err(|e| anyhow::anyhow!("dashboard template {name}: {e}"))?;
        }
        env.add_filter("time", |ms: Option<i64>| ms.map(time).unwrap_or_default());
        env.add_filter("ms", |ms: Option<f64>| {
            ms.map(|m| format!("{m:.0} ms")).unwrap_or_default()
        });
        env.add_filter("reward", |r: Option<f64>| {
            r.map(|r| format!("{r:+.2}")).unwrap_or_default()
        });
        env.add_filter("q", |s: String| query_value(&s));
        env.add_filter("pretty", |v: Value| {
            serde_json::to_string_pretty(&v).unwrap_or_default()
        });
        Ok(Self { env })
    }

    /// `template` rendered with `context`, as a page.
    pub fn page(&self, status: StatusCode, template: &str, context: Value) -> Response {
        match self
            .env
            .get_template(template)
            .and_then(|t| t.render(context))
        {
            Ok(html) => html_response(status, html),
            Err(e) => {
                tracing::error!("the dashboard page {template} failed to render: {e:#}");
                refused(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "This page failed to render; metaclaw's log says why.",
                )
            }
        }
    }

    pub fn login(&self, status: StatusCode, next: &str, error: Option<&str>) -> Response {
        self.page(
            status,
            "login.html",
            minijinja::context! { next => next, error => error },
        )
    }
}

fn html_response(status: StatusCode, html: String) -> Response {
    let mut response = (status, html).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: with it, a browser sends `Origin: null` on the
    // dashboard's own forms, which the browser guard must refuse.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

tokio::task_local! {
    /// The login's `/ui/<key>` while one of its pages is made
    /// (`auth::enter`): the short pages' links lead into the login.
    pub static BASE: String;
}

/// `href`, a dashboard path (`/ui…`), under the current login's key.
fn in_login(href: &str) -> String {
    match (href.strip_prefix("/ui"), BASE.try_with(Clone::clone)) {
        (Some(rest), Ok(base)) => format!("{base}{rest}"),
        _ => href.to_string(),
    }
}

/// A short page saying why a request was refused.
pub fn refused(status: StatusCode, why: &str) -> Response {
    short_page(status, "error", why, ("/ui", "Back to the dashboard"))
}

/// A short page saying what an action did, with the way back.
pub fn notice(status: StatusCode, said: &str, back: (&str, &str)) -> Response {
    short_page(status, "said", said, back)
}

fn short_page(
    status: StatusCode,
    class: &str,
    text: &str,
    (href, label): (&str, &str),
) -> Response {
    html_response(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>metaclaw</title>\
             <link rel=\"stylesheet\" href=\"/ui/assets/ui.css\"></head><body><main class=\"narrow\">\
             <h1>metaclaw</h1><p class=\"{class}\" role=\"status\">{}</p><p><a href=\"{}\">{}</a></p>\
             </main></body></html>",
            escape(text),
            escape(&in_login(href)),
            escape(label)
        ),
    )
}

/// The stylesheet and the script (no login needed: they hold no data).
pub async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("max-age=3600"),
                ),
                (
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ),
            ],
            *body,
        )
            .into_response(),
        None => refused(StatusCode::NOT_FOUND, "No such file."),
    }
}

/// A value for a URL's query: everything but RFC 3986's unreserved
/// characters percent-encoded.
pub fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Unix ms as local time, to the second.
pub fn time(ms: i64) -> String {
    use chrono::TimeZone;
    chrono::Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}
