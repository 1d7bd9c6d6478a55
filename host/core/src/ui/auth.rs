//! Logging in to the dashboard with the admin token, and what a login
//! carries: a random key that every page of the login has in its path
//! (`/ui/<key>/…`), a random session id in an HttpOnly, SameSite=Strict
//! session cookie scoped to that path (never the token itself, never in a
//! URL), and a CSRF token every form of the login posts back.
//!
//! Why the key: cookies are not scoped by port, so a cookie scoped to `/ui`
//! is also sent to `/ui` on every other port of 127.0.0.1, where any local
//! program may listen and replay it. A cookie scoped to `/ui/<key>` goes
//! only where the key is known, and the daemon takes the id only together
//! with its login's key (docs/apis.md says what this does and does not
//! promise).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::Router;
use axum::extract::{Extension, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tower::ServiceExt;

use super::Dashboard;
use super::render::{self, query_value, refused};
use crate::app::SharedApp;

const COOKIE: &str = "metaclaw_ui";
/// More logins than this at once: the oldest is dropped.
const MAX_LOGINS: usize = 64;

/// The logins this daemon has handed out (in memory: a restart logs out).
pub struct Logins {
    ttl: Duration,
    by_id: Mutex<HashMap<String, Login>>,
}

/// One login, as a request of it sees it.
#[derive(Debug, Clone)]
pub struct Login {
    /// What its forms must post back as `csrf`.
    pub csrf: String,
    /// The path segment all its pages are under (see the module's doc).
    key: String,
    expires: Instant,
}

impl Login {
    /// Where this login's pages are: `/ui/<key>`.
    pub fn base(&self) -> String {
        format!("/ui/{}", self.key)
    }
}

impl Logins {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            by_id: Mutex::new(HashMap::new()),
        }
    }

    /// A new login: its cookie's value and the login.
    fn open(&self) -> (String, Login) {
        let id = crate::digest::random_token();
        let login = Login {
            csrf: crate::digest::random_token(),
            key: crate::digest::random_token(),
            expires: Instant::now() + self.ttl,
        };
        if let Ok(mut all) = self.by_id.lock() {
            let now = Instant::now();
            all.retain(|_, l| l.expires > now);
            if all.len() >= MAX_LOGINS
                && let Some(oldest) = all
                    .iter()
                    .min_by_key(|(_, l)| l.expires)
                    .map(|(k, _)| k.clone())
            {
                all.remove(&oldest);
            }
            all.insert(id.clone(), login.clone());
        }
        (id, login)
    }

    /// The current login that a cookie of the request names and whose key
    /// is `key`: an id without its key, or a key without its id, is none.
    fn get(&self, headers: &HeaderMap, key: &str) -> Option<Login> {
        let all = self.by_id.lock().ok()?;
        let now = Instant::now();
        // Ids are looked up as the map does (256 random bits: timing tells
        // nothing worth having); the key is compared in constant time.
        cookies(headers)
            .filter_map(|id| all.get(id))
            .find(|l| l.expires > now && bool::from(l.key.as_bytes().ct_eq(key.as_bytes())))
            .cloned()
    }

    fn close(&self, login: &Login) {
        if let Ok(mut all) = self.by_id.lock() {
            all.retain(|_, l| l.key != login.key);
        }
    }
}

/// The values of the request's session cookies (a browser holding several
/// logins sends only the one whose path the request is under).
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The login's cookie: scoped to its pages, and a session cookie (no
/// `Max-Age`: the browser drops it when it closes; the daemon ends the
/// login after `ui.session_hours` in any case). `value` empty: removed.
fn set_cookie(login: &Login, value: &str) -> HeaderValue {
    let gone = if value.is_empty() { "; Max-Age=0" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path={}; HttpOnly; SameSite=Strict{gone}",
        login.base()
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("metaclaw_ui=; Path=/ui; Max-Age=0"))
}

/// A path segment shaped as a login's key (`digest::random_token`: 64
/// lowercase hex digits), which no page name is.
fn is_key(segment: &str) -> bool {
    segment.len() == 64
        && segment
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `/ui/<key>/rest` as the key and `/ui/rest`; any other path as itself.
fn split_key(path: &str) -> (Option<&str>, String) {
    if let Some(rest) = path.strip_prefix("/ui/") {
        let (segment, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if is_key(segment) {
            return (Some(segment), format!("/ui{tail}"));
        }
    }
    (None, path.to_string())
}

/// Where to go after logging in: a dashboard page (without any login's
/// key), nothing else (an open redirect would let a link send the user
/// anywhere).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.chars().all(|c| c.is_ascii_graphic()) =>
        {
            split_key(n).1
        }
        _ => "/ui".to_string(),
    }
}

fn see_other(to: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

/// The dashboard's pages, routed once the login's key is out of the path.
#[derive(Clone)]
pub struct Pages(pub Router);

/// Every dashboard page but the login and the assets: `/ui/<key>/…` with
/// the cookie of that key's login is routed to the page as `/ui/…`;
/// anything else is not logged in: a GET is sent to the login page (and to
/// the page after), anything else is refused.
pub async fn enter(
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(Pages(pages)): Extension<Pages>,
    request: Request,
) -> Response {
    let (key, page) = split_key(request.uri().path());
    let query = request
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let login = key.and_then(|k| dashboard.logins.get(request.headers(), k));
    let Some(login) = login else {
        return if request.method().is_safe() {
            see_other(&format!(
                "/ui/login?next={}",
                query_value(&safe_next(Some(&format!("{page}{query}"))))
            ))
        } else {
            refused(
                StatusCode::FORBIDDEN,
                "You are not logged in (or your login expired): log in again.",
            )
        };
    };
    let Ok(uri) = format!("{page}{query}").parse::<Uri>() else {
        return refused(StatusCode::BAD_REQUEST, "This address is not a page.");
    };
    // A fresh request, not this one with its URI changed: this route's
    // own path parameter must not reach the page's `Path` extractor.
    let (parts, body) = request.into_parts();
    let mut page = Request::new(body);
    *page.method_mut() = parts.method;
    *page.uri_mut() = uri;
    *page.version_mut() = parts.version;
    *page.headers_mut() = parts.headers;
    let base = login.base();
    page.extensions_mut().insert(login);
    match render::BASE.scope(base, pages.oneshot(page)).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// A form's CSRF token, checked against the login's: the refusal, if it
/// is not.
pub fn csrf_refusal(login: &Login, posted: &str) -> Option<Response> {
    (!bool::from(posted.as_bytes().ct_eq(login.csrf.as_bytes()))).then(|| {
        refused(
            StatusCode::FORBIDDEN,
            "This form's CSRF token is not your login's: reload the page and try again.",
        )
    })
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

/// The login form (always: a login's cookie is not sent here, so this
/// page cannot tell whether the browser holds one).
pub async fn login_page(
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Query(q): Query<NextQuery>,
) -> Response {
    let next = safe_next(q.next.as_deref());
    dashboard.views.login(StatusCode::OK, &next, None)
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

pub async fn login(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = safe_next(form.next.as_deref());
    let token = form.token.trim();
    if !bool::from(token.as_bytes().ct_eq(app.admin_token.as_bytes())) {
        tracing::warn!("a dashboard login with a wrong token was refused");
        return dashboard.views.login(
            StatusCode::UNAUTHORIZED,
            &next,
            Some("That is not the admin token."),
        );
    }
    let (id, login) = dashboard.logins.open();
    // `next` is `/ui…`: the same page under the login's key.
    let mut response = see_other(&format!("{}{}", login.base(), &next["/ui".len()..]));
    response
        .headers_mut()
        .insert(header::SET_COOKIE, set_cookie(&login, &id));
    response
}

#[derive(Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

pub async fn logout(
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = csrf_refusal(&login, &form.csrf) {
        return refused;
    }
    dashboard.logins.close(&login);
    let mut response = see_other("/ui/login");
    response
        .headers_mut()
        .insert(header::SET_COOKIE, set_cookie(&login, ""));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dashboard_pages_are_where_a_login_goes_next() {
        assert_eq!(
            safe_next(Some("/ui/sessions?page=2")),
            "/ui/sessions?page=2"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/ui//evil",
            "/admin/status",
            "/ui\\x",
            "/uix",
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui", "{bad}");
        }
        assert_eq!(safe_next(None), "/ui");
    }

    #[test]
    fn only_dashboard_pages_without_a_key_are_where_a_login_goes_next() {
        let key = "0123456789abcdef".repeat(4);
        assert_eq!(
            safe_next(Some(&format!("/ui/{key}/sessions?page=2"))),
            "/ui/sessions?page=2"
        );
        assert_eq!(safe_next(Some(&format!("/ui/{key}"))), "/ui");
        assert_eq!(
            split_key("/ui/sessions/abc"),
            (None, "/ui/sessions/abc".into())
        );
        assert_eq!(split_key(&format!("/ui/{}", &key[1..])).0, None);
        assert_eq!(split_key(&format!("/ui/{}", key.to_uppercase())).0, None);
    }

    fn with_cookie(id: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {COOKIE}={id}")).unwrap(),
        );
        headers
    }

    #[test]
    fn a_login_needs_its_cookie_and_its_key_and_expires_and_closes() {
        let logins = Logins::new(Duration::from_secs(60));
        let (id, login) = logins.open();
        let (other_id, other) = logins.open();
        assert!(is_key(&login.key) && login.key != other.key);
        let headers = with_cookie(&id);
        assert_eq!(
            logins.get(&headers, &login.key).map(|l| l.csrf),
            Some(login.csrf.clone())
        );
        // The id under another login's key, or no id: no login.
        assert!(logins.get(&headers, &other.key).is_none());
        assert!(logins.get(&HeaderMap::new(), &login.key).is_none());
        assert!(logins.get(&with_cookie(&other_id), &login.key).is_none());
        // Scoped to the login's pages; a session cookie.
        let cookie = set_cookie(&login, &id);
        let cookie = cookie.to_str().unwrap();
        assert!(
            cookie.contains(&format!(
                "; Path=/ui/{}; HttpOnly; SameSite=Strict",
                login.key
            )),
            "{cookie}"
        );
        assert!(!cookie.contains("Max-Age") && !cookie.contains("Expires"));
        logins.close(&login);
        assert!(logins.get(&headers, &login.key).is_none());
        assert!(logins.get(&with_cookie(&other_id), &other.key).is_some());
        let expired = Logins::new(Duration::ZERO);
        let (id, login) = expired.open();
        assert!(expired.get(&with_cookie(&id), &login.key).is_none());
    }
}
