//! Logging in to the dashboard with the admin token, and what a login
//! carries: a random session id in an HttpOnly, SameSite=Strict cookie
//! scoped to `/ui` (never the token itself, never in a URL), and a CSRF
//! token every form of the login posts back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::{Extension, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::Dashboard;
use super::render::{query_value, refused};
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
    expires: Instant,
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

    /// The login a request's cookie names, if it is current.
    fn get(&self, headers: &HeaderMap) -> Option<Login> {
        let id = cookie(headers)?;
        let all = self.by_id.lock().ok()?;
        // Compared as the map does; the id is 256 random bits, so timing
        // tells nothing worth having.
        all.get(id).filter(|l| l.expires > Instant::now()).cloned()
    }

    fn close(&self, headers: &HeaderMap) {
        if let (Some(id), Ok(mut all)) = (cookie(headers), self.by_id.lock()) {
            all.remove(id);
        }
    }
}

/// The session cookie's value, if the request carries one.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

fn set_cookie(value: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("metaclaw_ui=; Path=/ui; Max-Age=0"))
}

/// Where to go after logging in: a dashboard page, nothing else (an open
/// redirect would let a link send the user anywhere).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with("/ui")
                && !n.contains("//")
                && !n.contains('\\')
                && n.chars().all(|c| c.is_ascii_graphic()) =>
        {
            n.to_string()
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

/// Every dashboard page but the login: a current login, or the login page
/// (a GET is sent there, and back after; anything else is refused).
pub async fn require_login(
    Extension(dashboard): Extension<Arc<Dashboard>>,
    mut request: Request,
    next: Next,
) -> Response {
    match dashboard.logins.get(request.headers()) {
        Some(login) => {
            request.extensions_mut().insert(login);
            next.run(request).await
        }
        None if request.method().is_safe() => {
            let here = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default();
            see_other(&format!(
                "/ui/login?next={}",
                query_value(&safe_next(Some(&here)))
            ))
        }
        None => refused(
            StatusCode::FORBIDDEN,
            "You are not logged in (or your login expired): log in again.",
        ),
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

pub async fn login_page(
    Extension(dashboard): Extension<Arc<Dashboard>>,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
) -> Response {
    let next = safe_next(q.next.as_deref());
    if dashboard.logins.get(&headers).is_some() {
        return see_other(&next);
    }
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
    let (id, _) = dashboard.logins.open();
    let mut response = see_other(&next);
    response.headers_mut().insert(
        header::SET_COOKIE,
        set_cookie(&id, dashboard.logins.ttl.as_secs()),
    );
    response
}

#[derive(Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

pub async fn logout(
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = csrf_refusal(&login, &form.csrf) {
        return refused;
    }
    dashboard.logins.close(&headers);
    let mut response = see_other("/ui/login");
    response
        .headers_mut()
        .insert(header::SET_COOKIE, set_cookie("", 0));
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
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui", "{bad}");
        }
        assert_eq!(safe_next(None), "/ui");
    }

    #[test]
    fn logins_expire_and_close() {
        let logins = Logins::new(Duration::from_secs(60));
        let (id, login) = logins.open();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {COOKIE}={id}")).unwrap(),
        );
        assert_eq!(logins.get(&headers).map(|l| l.csrf), Some(login.csrf));
        logins.close(&headers);
        assert!(logins.get(&headers).is_none());
        let expired = Logins::new(Duration::ZERO);
        let (id, _) = expired.open();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("{COOKIE}={id}")).unwrap(),
        );
        assert!(expired.get(&headers).is_none());
    }
}
