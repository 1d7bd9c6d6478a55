//! Where the calendar's .ics text comes from: a file read on every call,
//! or an address (Google Calendar's "Secret address in iCal format",
//! Outlook's published ICS link, an iCloud public `webcal://` link)
//! fetched every `refresh` and cached on disk, so a restart does not
//! fetch again and a short outage does not shut every window.
//!
//! The address is a secret (whoever has it reads the calendar): it is
//! never written to the cache (the cache names it by its sha256), and
//! never put in an error or a log ([`CalendarSource::describe`] gives
//! only its scheme and host).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;
use crate::http::{ClientSpec, Purpose};

/// A fetch that takes longer has failed (the cached copy stands in).
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// A cached copy older than this is not used when a refresh fails: the
/// calendar may have changed since, so windows stay shut (fail closed).
const MAX_STALE: Duration = Duration::hours(24);
/// A cached copy stamped this far ahead of `now` still counts (the clock
/// was set back a little); further ahead, its age is unknown.
const MAX_SKEW: Duration = Duration::minutes(5);
/// Larger than any real calendar: a server sending more is not one.
const MAX_BYTES: usize = 32 << 20;

/// The calendar's text, and when it was fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub ics: String,
    pub fetched_at: DateTime<Utc>,
    /// Set when this is not a fresh copy ("refresh failed (…); using the
    /// copy fetched at …") or the cache could not be written.
    pub note: Option<String>,
}

/// The calendar's location, and its cache.
pub struct CalendarSource {
    kind: Kind,
    /// The sha256 of the location: what the cache is for.
    source: String,
    cache_dir: PathBuf,
    refresh: Duration,
    /// One fetch at a time (and one cache write).
    fetching: tokio::sync::Mutex<()>,
}

enum Kind {
    File(PathBuf),
    Url {
        /// What is fetched (`webcal://` as `https://`).
        url: reqwest::Url,
        shown: String,
        client: reqwest::Client,
    },
}

/// `calendar.json`: which location the cached copy is for, and when it
/// was fetched. `ics_sha256` ties it to `calendar.ics`: the two files are
/// written one after the other, and a crash between them must not pair
/// one location's calendar with another's stamp.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    source: String,
    fetched_at_ms: i64,
    ics_sha256: String,
}

const USAGE: &str = "a calendar location is an https://, http://, webcal:// or file:// address, \
     or an absolute path or ~/path to an .ics file";

/// Why the calendar's text cannot be had: a location that is not one, a
/// file that cannot be read, an address that cannot be fetched with no
/// usable copy. No variant names an address (it may hold a secret key).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceError {
    #[error("the calendar location is empty: {USAGE}")]
    Empty,
    #[error("the calendar refresh interval is too long")]
    RefreshTooLong,
    #[error("a file:// calendar location must name an absolute path (file:///…)")]
    FileUrlNotAbsolute,
    #[error("the calendar location's scheme {0}:// is not supported: {USAGE}")]
    Scheme(String),
    #[error("the calendar location is not an absolute path: {USAGE}")]
    NotAbsolute,
    #[error("the calendar address is not a valid URL ({0})")]
    NotAUrl(String),
    #[error("the calendar address has no host")]
    NoHost,
    /// The HTTP client for it cannot be built.
    #[error("{0}")]
    Client(String),
    #[error("cannot read the calendar {path}: {error}")]
    Read { path: PathBuf, error: String },
    #[error("the calendar {0} is not iCalendar (no BEGIN:VCALENDAR)")]
    FileNotICalendar(PathBuf),
    /// The request failed (connection, timeout …), described without its URL.
    #[error("{0}")]
    Transport(String),
    #[error("the server answered {0}")]
    Status(reqwest::StatusCode),
    #[error("the answer is larger than {} MiB", MAX_BYTES >> 20)]
    TooLarge,
    #[error("the answer is not UTF-8 text")]
    NotUtf8,
    #[error("the answer is not iCalendar (no BEGIN:VCALENDAR)")]
    NotICalendar,
    #[error(
        "cannot fetch the calendar from {whence} ({why}), and the cached copy fetched at {at} is not less than 24 h old"
    )]
    StaleCopy {
        whence: String,
        why: Box<SourceError>,
        at: String,
    },
    #[error("cannot fetch the calendar from {whence} ({why}), and there is no cached copy")]
    NoCopy {
        whence: String,
        why: Box<SourceError>,
    },
    #[error("the calendar read was interrupted: {0}")]
    Interrupted(String),
    /// The cached copy cannot be written.
    #[error("{0}")]
    Cache(String),
}

impl CalendarSource {
    /// `location`: an `https://`, `http://` or `webcal://` address, a
    /// `file:///abs/path`, or a path (absolute, or `~/…`). `cache_dir`
    /// holds the cached copy of an address; `refresh`: how often it is
    /// fetched again.
    pub fn new(
        location: &str,
        cache_dir: &Path,
        refresh: std::time::Duration,
    ) -> Result<Self, SourceError> {
        let location = location.trim();
        if location.is_empty() {
            return Err(SourceError::Empty);
        }
        let refresh = Duration::from_std(refresh).map_err(|_| SourceError::RefreshTooLong)?;
        let scheme = location
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let kind = match scheme.as_deref() {
            Some("https" | "http" | "webcal" | "webcals") => url_kind(location)?,
            Some("file") => {
                let path = reqwest::Url::parse(location)
                    .ok()
                    .and_then(|url| url.to_file_path().ok())
                    .ok_or(SourceError::FileUrlNotAbsolute)?;
                Kind::File(path)
            }
            Some(other) if !other.contains('/') => {
                return Err(SourceError::Scheme(other.to_string()));
            }
            _ => {
                let path = crate::home::expand_home(location);
                // Not echoed: it may be an address typed without its scheme.
                if !path.is_absolute() {
                    return Err(SourceError::NotAbsolute);
                }
                Kind::File(path)
            }
        };
        Ok(Self {
            kind,
            source: sha256_hex(location),
            cache_dir: cache_dir.to_path_buf(),
            refresh,
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The location for a message: the file's path, or an address's
    /// scheme and host only ("https://calendar.google.com/… (private
    /// address)").
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::File(path) => path.display().to_string(),
            Kind::Url { shown, .. } => shown.clone(),
        }
    }

    /// The calendar's text at `now`. A file is read on every call. An
    /// address is fetched when the cached copy is older than `refresh` (or
    /// missing); when that fails, a cached copy less than 24 h old stands
    /// in (with a note saying so), else it is an error: the caller keeps
    /// training windows shut.
    pub async fn text(&self, now: DateTime<Utc>) -> Result<Fetched, SourceError> {
        let (url, client) = match &self.kind {
            Kind::File(path) => {
                let path = path.clone();
                let ics = blocking(move || read_file(&path)).await??;
                return Ok(Fetched {
                    ics,
                    fetched_at: now,
                    note: None,
                });
            }
            Kind::Url { url, client, .. } => (url, client),
        };
        let _one_at_a_time = self.fetching.lock().await;
        let cache = self.cache_paths();
        let source = self.source.clone();
        let cached = blocking(move || load(&cache, &source)).await?;
        if let Some(copy) = &cached {
            let age = now - copy.fetched_at;
            if age >= Duration::zero() && age < self.refresh {
                return Ok(copy.clone());
            }
        }
        match fetch(client, url).await {
            Ok(ics) => {
                let cache = self.cache_paths();
                let meta = Meta {
                    source: self.source.clone(),
                    fetched_at_ms: now.timestamp_millis(),
                    ics_sha256: sha256_hex(&ics),
                };
                let text = ics.clone();
                let note = match blocking(move || store(&cache, &text, &meta)).await {
                    Ok(Ok(())) => None,
                    Ok(Err(why)) | Err(why) => Some(format!(
                        "fetched, but the cached copy was not written ({why})"
                    )),
                };
                Ok(Fetched {
                    ics,
                    fetched_at: now,
                    note,
                })
            }
            Err(why) => {
                let whence = self.describe();
                match cached {
                    Some(copy) if usable(now - copy.fetched_at) => {
                        let at = stamp(copy.fetched_at);
                        Ok(Fetched {
                            note: Some(format!(
                                "refresh failed ({why}); using the copy fetched at {at}"
                            )),
                            ..copy
                        })
                    }
                    Some(copy) => Err(SourceError::StaleCopy {
                        whence,
                        why: Box::new(why),
                        at: stamp(copy.fetched_at),
                    }),
                    None => Err(SourceError::NoCopy {
                        whence,
                        why: Box::new(why),
                    }),
                }
            }
        }
    }

    /// The copy on disk, without fetching (for a status that must not
    /// wait on the network): the cached copy of an address, or the file.
    pub fn cached(&self) -> Option<Fetched> {
        match &self.kind {
            Kind::File(path) => {
                let ics = read_file(path).ok()?;
                let fetched_at = std::fs::metadata(path)
                    .and_then(|m| m.modified())
                    .map(DateTime::<Utc>::from)
                    .unwrap_or_else(|_| Utc::now());
                Some(Fetched {
                    ics,
                    fetched_at,
                    note: None,
                })
            }
            Kind::Url { .. } => load(&self.cache_paths(), &self.source),
        }
    }

    fn cache_paths(&self) -> CachePaths {
        CachePaths {
            ics: self.cache_dir.join("calendar.ics"),
            meta: self.cache_dir.join("calendar.json"),
        }
    }
}

/// An address: parsed, named for messages, and a client to fetch it.
fn url_kind(location: &str) -> Result<Kind, SourceError> {
    let (scheme, rest) = location.split_once("://").unwrap_or(("https", location));
    let fetched_scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => "http",
        _ => "https",
    };
    // The parser's errors do not repeat the input; ours must not either.
    let url = reqwest::Url::parse(&format!("{fetched_scheme}://{rest}"))
        .map_err(|e| SourceError::NotAUrl(e.to_string()))?;
    let host = url.host_str().ok_or(SourceError::NoHost)?;
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let shown = format!(
        "{}://{host}{port}/… (private address)",
        scheme.to_ascii_lowercase()
    );
    // `only_calls` with the safe name: the client's errors quote it, and
    // a plain http:// address loads no CA certificates.
    let client = ClientSpec::new(Purpose::Calendar)
        .only_calls([shown.as_str()])
        .build()
        .map_err(|e| SourceError::Client(e.to_string()))?;
    Ok(Kind::Url { url, shown, client })
}

/// Fetches the calendar; an answer that is not iCalendar is a failure.
/// Errors never name the address.
async fn fetch(client: &reqwest::Client, url: &reqwest::Url) -> Result<String, SourceError> {
    let describe =
        |e: reqwest::Error| SourceError::Transport(crate::http::describe(&e.without_url()));
    let mut response = client
        .get(url.clone())
        .timeout(FETCH_TIMEOUT)
        .header(reqwest::header::ACCEPT, "text/calendar, */*;q=0.5")
        .send()
        .await
        .map_err(describe)?;
    let status = response.status();
    if !status.is_success() {
        return Err(SourceError::Status(status));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(describe)? {
        if body.len() + chunk.len() > MAX_BYTES {
            return Err(SourceError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8(body).map_err(|_| SourceError::NotUtf8)?;
    if !looks_like_icalendar(&text) {
        return Err(SourceError::NotICalendar);
    }
    Ok(text)
}

fn looks_like_icalendar(text: &str) -> bool {
    text.lines()
        .take(50)
        .any(|l| l.trim().eq_ignore_ascii_case("BEGIN:VCALENDAR"))
}

fn read_file(path: &Path) -> Result<String, SourceError> {
    let text = std::fs::read_to_string(path).map_err(|e| SourceError::Read {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    if !looks_like_icalendar(&text) {
        return Err(SourceError::FileNotICalendar(path.to_path_buf()));
    }
    Ok(text)
}

/// Usable when a refresh fails: less than a day old, and not from the
/// future beyond a little clock skew.
fn usable(age: Duration) -> bool {
    age < MAX_STALE && age > -MAX_SKEW
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

struct CachePaths {
    ics: PathBuf,
    meta: PathBuf,
}

/// The cached copy for `source`; `None` when missing, unreadable, for
/// another location, or not the text its stamp was written for.
fn load(paths: &CachePaths, source: &str) -> Option<Fetched> {
    let meta: Meta = serde_json::from_slice(&std::fs::read(&paths.meta).ok()?).ok()?;
    if meta.source != source {
        return None;
    }
    let ics = std::fs::read_to_string(&paths.ics).ok()?;
    if sha256_hex(&ics) != meta.ics_sha256 {
        return None;
    }
    Some(Fetched {
        ics,
        fetched_at: DateTime::from_timestamp_millis(meta.fetched_at_ms)?,
        note: None,
    })
}

/// Writes the text, then its stamp, each atomically and owner-only (the
/// calendar is private).
fn store(paths: &CachePaths, ics: &str, meta: &Meta) -> Result<(), SourceError> {
    let cache = |e: &dyn std::fmt::Display| SourceError::Cache(format!("{e:#}"));
    let json = serde_json::to_vec_pretty(meta).map_err(|e| cache(&e))?;
    crate::home::write_private(&paths.ics, ics.as_bytes()).map_err(|e| cache(&e))?;
    crate::home::write_private(&paths.meta, &json).map_err(|e| cache(&e))
}

/// Runs file I/O off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SourceError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SourceError::Interrupted(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    use super::*;
    use crate::clock::utc;

    const ICS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n\
        BEGIN:VEVENT\r\nUID:1\r\nDTSTART:20251124T100000Z\r\nDTEND:20251124T110000Z\r\n\
        SUMMARY:Standup\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";
    /// The secret part of the test address.
    const SECRET: &str = "private-5f3a9c0d1e";
    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

    const OK: u8 = 0;
    const FAIL: u8 = 1;
    const HTML: u8 = 2;

    struct Server {
        url: String,
        requests: Arc<AtomicUsize>,
        mode: Arc<AtomicU8>,
    }

    impl Server {
        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }

        fn set(&self, mode: u8) {
            self.mode.store(mode, Ordering::SeqCst);
        }
    }

    /// A calendar server on 127.0.0.1 that counts requests and answers
    /// by its mode: the calendar, a 500, or an HTML page.
    async fn serve() -> Server {
        let requests = Arc::new(AtomicUsize::new(0));
        let mode = Arc::new(AtomicU8::new(OK));
        let (count, answer) = (requests.clone(), mode.clone());
        let app = axum::Router::new().fallback(move || {
            let (count, answer) = (count.clone(), answer.clone());
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                match answer.load(Ordering::SeqCst) {
                    OK => ([("content-type", "text/calendar")], ICS).into_response(),
                    FAIL => (StatusCode::INTERNAL_SERVER_ERROR, "down").into_response(),
                    _ => "<html><body>Sign in</body></html>".into_response(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Server {
            url: format!("{base}/calendar/ical/me%40example.com/{SECRET}/basic.ics?key={SECRET}"),
            requests,
            mode,
        }
    }

    fn t0() -> DateTime<Utc> {
        utc("2025-11-24T08:00:00Z")
    }

    #[tokio::test]
    async fn fetches_once_then_again_after_refresh() {
        let server = serve().await;
        let dir = tempfile::tempdir().unwrap();
        let source = CalendarSource::new(&server.url, dir.path(), HOUR).unwrap();
        assert!(source.cached().is_none());

        let first = source.text(t0()).await.unwrap();
        assert_eq!(first.ics, ICS);
        assert_eq!(first.fetched_at, t0());
        assert_eq!(first.note, None);
        assert_eq!(server.requests(), 1);

        let within = source.text(t0() + Duration::minutes(59)).await.unwrap();
        assert_eq!(within, first);
        assert_eq!(server.requests(), 1);

        let later = t0() + Duration::minutes(61);
        let after = source.text(later).await.unwrap();
        assert_eq!(after.fetched_at, later);
        assert_eq!(server.requests(), 2);
        assert_eq!(source.cached().unwrap().fetched_at, later);
    }

    #[tokio::test]
    async fn a_failed_refresh_uses_a_recent_copy_and_not_an_old_one() {
        let server = serve().await;
        let dir = tempfile::tempdir().unwrap();
        let source = CalendarSource::new(&server.url, dir.path(), HOUR).unwrap();
        source.text(t0()).await.unwrap();

        server.set(FAIL);
        let copy = source.text(t0() + Duration::hours(2)).await.unwrap();
        assert_eq!(server.requests(), 2);
        assert_eq!(copy.ics, ICS);
        assert_eq!(copy.fetched_at, t0());
        let note = copy.note.unwrap();
        assert!(note.starts_with("refresh failed ("), "{note}");
        assert!(note.contains("500"), "{note}");
        assert!(
            note.ends_with("using the copy fetched at 2025-11-24T08:00:00Z"),
            "{note}"
        );
        assert!(!note.contains(SECRET), "{note}");

        // More than a day old: fail closed.
        let e = source
            .text(t0() + Duration::hours(25))
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(server.requests(), 3);
        assert!(e.contains("24 h"), "{e}");
        assert!(e.contains("(private address)"), "{e}");
        assert!(!e.contains(SECRET) && !e.contains("/calendar/"), "{e}");
    }

    #[tokio::test]
    async fn an_answer_that_is_not_icalendar_is_a_failure() {
        let server = serve().await;
        let dir = tempfile::tempdir().unwrap();
        let source = CalendarSource::new(&server.url, dir.path(), HOUR).unwrap();
        server.set(HTML);
        let e = source.text(t0()).await.unwrap_err().to_string();
        assert!(e.contains("BEGIN:VCALENDAR"), "{e}");
        assert!(e.contains("no cached copy"), "{e}");
        assert!(source.cached().is_none());

        server.set(OK);
        source.text(t0()).await.unwrap();
        server.set(HTML);
        let copy = source.text(t0() + Duration::hours(2)).await.unwrap();
        assert_eq!(copy.ics, ICS);
        assert!(copy.note.unwrap().contains("not iCalendar"));
        // The page did not replace the cached calendar.
        assert_eq!(source.cached().unwrap().ics, ICS);
    }

    #[tokio::test]
    async fn the_cache_survives_a_restart_and_is_only_for_its_location() {
        let server = serve().await;
        let dir = tempfile::tempdir().unwrap();
        CalendarSource::new(&server.url, dir.path(), HOUR)
            .unwrap()
            .text(t0())
            .await
            .unwrap();
        assert_eq!(server.requests(), 1);

        let restarted = CalendarSource::new(&server.url, dir.path(), HOUR).unwrap();
        assert_eq!(restarted.cached().unwrap().ics, ICS);
        let copy = restarted.text(t0() + Duration::minutes(10)).await.unwrap();
        assert_eq!(copy.fetched_at, t0());
        assert_eq!(server.requests(), 1);

        // The cache names the location by its digest, never by itself.
        let meta = std::fs::read_to_string(dir.path().join("calendar.json")).unwrap();
        assert!(
            !meta.contains(SECRET) && !meta.contains("127.0.0.1"),
            "{meta}"
        );
        let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
        assert_eq!(meta["source"], sha256_hex(&server.url));
        assert_eq!(meta["fetched_at_ms"], t0().timestamp_millis());

        // Another location ignores it, and fetches.
        let other = format!("{}&v=2", server.url);
        let other = CalendarSource::new(&other, dir.path(), HOUR).unwrap();
        assert!(other.cached().is_none());
        other.text(t0() + Duration::minutes(10)).await.unwrap();
        assert_eq!(server.requests(), 2);

        // A calendar.ics that is not the one its stamp was written for.
        std::fs::write(dir.path().join("calendar.ics"), "BEGIN:VCALENDAR\r\n").unwrap();
        assert!(other.cached().is_none());
    }

    #[tokio::test]
    async fn an_unreachable_server_without_a_cache_is_an_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("http://127.0.0.1:{port}/published/2/{SECRET}");
        let source = CalendarSource::new(&url, dir.path(), HOUR).unwrap();
        let e = source.text(t0()).await.unwrap_err().to_string();
        assert!(e.contains("no cached copy"), "{e}");
        assert!(!e.contains(SECRET) && !e.contains("/published"), "{e}");
    }

    #[tokio::test]
    async fn a_file_is_read_on_every_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("work.ics");
        std::fs::write(&path, ICS).unwrap();
        let cache = dir.path().join("cache");
        let location = path.to_str().unwrap();
        let source = CalendarSource::new(location, &cache, HOUR).unwrap();
        assert_eq!(source.describe(), location);
        let read = source.text(t0()).await.unwrap();
        assert_eq!(read.ics, ICS);
        assert_eq!(read.fetched_at, t0());

        let changed = ICS.replace("Standup", "Review");
        std::fs::write(&path, &changed).unwrap();
        assert_eq!(source.text(t0()).await.unwrap().ics, changed);
        assert_eq!(source.cached().unwrap().ics, changed);
        assert!(!cache.exists());

        let url = format!("file://{location}");
        let source = CalendarSource::new(&url, &cache, HOUR).unwrap();
        assert_eq!(source.text(t0()).await.unwrap().ics, changed);

        std::fs::write(&path, "not a calendar").unwrap();
        assert!(
            source
                .text(t0())
                .await
                .unwrap_err()
                .to_string()
                .contains("not iCalendar")
        );
        std::fs::remove_file(&path).unwrap();
        assert!(
            source
                .text(t0())
                .await
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
    }

    #[test]
    fn locations_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "",
            "   ",
            "calendar.ics",
            "./work.ics",
            "ftp://example.com/x.ics",
        ] {
            assert!(
                CalendarSource::new(bad, dir.path(), HOUR).is_err(),
                "{bad:?}"
            );
        }
        let e = CalendarSource::new("ftp://example.com/secret-token.ics", dir.path(), HOUR)
            .err()
            .unwrap()
            .to_string();
        assert!(!e.contains("secret-token"), "{e}");
        assert!(CalendarSource::new("file://relative", dir.path(), HOUR).is_err());
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            let source = CalendarSource::new("~/cal/work.ics", dir.path(), HOUR).unwrap();
            let want = PathBuf::from(home).join("cal/work.ics");
            assert_eq!(source.describe(), want.display().to_string());
        }
    }

    #[test]
    fn describe_gives_only_scheme_and_host() {
        let dir = tempfile::tempdir().unwrap();
        for (location, shown) in [
            (
                "https://calendar.google.com/calendar/ical/me%40gmail.com/private-0123456789abcdef/basic.ics",
                "https://calendar.google.com/… (private address)",
            ),
            (
                "https://outlook.office365.com/owa/calendar/0a1b2c@example.com/3d4e5f/calendar.ics",
                "https://outlook.office365.com/… (private address)",
            ),
            (
                "https://outlook.live.com/owa/calendar/00000000-0000/abcdef/cid-12345/calendar.ics",
                "https://outlook.live.com/… (private address)",
            ),
            (
                "webcal://p42-caldav.icloud.com/published/2/MTIzNDU2Nzg5MDEyMzQ1Nj",
                "webcal://p42-caldav.icloud.com/… (private address)",
            ),
            (
                "HTTP://user:pass@127.0.0.1:8123/x.ics?token=abc#frag",
                "http://127.0.0.1:8123/… (private address)",
            ),
        ] {
            let source = CalendarSource::new(location, dir.path(), HOUR).unwrap();
            assert_eq!(source.describe(), shown, "{location}");
        }
        let icloud = CalendarSource::new(
            "webcal://p42-caldav.icloud.com/published/2/MTIzNDU2Nzg5MDEyMzQ1Nj",
            dir.path(),
            HOUR,
        )
        .unwrap();
        let Kind::Url { url, .. } = &icloud.kind else {
            unreachable!("an address")
        };
        assert_eq!(url.scheme(), "https");
    }
}
