//! When to try a request again, and how long to wait first: the server's
//! `Retry-After` when it gave one, else a doubling backoff.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use axum::http::{HeaderMap, StatusCode, header};

/// Worth another try, later or elsewhere: the server is overloaded or down
/// (5xx), or limits us (429).
pub fn is_transient(status: StatusCode) -> bool {
    status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
}

/// How long the server asks us to wait (`Retry-After`), if it says.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

/// `Retry-After`'s delay: seconds (fractions too, which some APIs send) or
/// an HTTP date, as seen at `now` (a date already past is no wait).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at: SystemTime = chrono::DateTime::parse_from_rfc2822(value).ok()?.into();
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A doubling wait, from `first` up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self { next: first, max }
    }

    /// The wait before the next try: the server's `hint` (its
    /// `Retry-After`) when it gave one, else this step of the doubling;
    /// never more than `max`. Each call moves the doubling on a step.
    pub fn wait(&mut self, hint: Option<Duration>) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        hint.unwrap_or(step).min(self.max)
    }
}

/// One try's failure: whether another can help, and how soon.
#[derive(Debug)]
pub enum TryFailed {
    Retry {
        /// The server's `Retry-After`.
        after: Option<Duration>,
        why: String,
    },
    Fatal(String),
}

impl TryFailed {
    /// A request that got no response (refused, timed out, cut): another
    /// try may get one.
    pub fn unanswered(e: &reqwest::Error) -> Self {
        Self::Retry {
            after: None,
            why: super::describe(e),
        }
    }

    /// An error status: retried if transient (after the server's
    /// `Retry-After`), else final. `body` is the start of what it said.
    pub fn status(status: StatusCode, headers: &HeaderMap, body: &str) -> Self {
        let why = format!("HTTP {}: {body}", status.as_u16());
        if is_transient(status) {
            Self::Retry {
                after: retry_after(headers),
                why,
            }
        } else {
            Self::Fatal(why)
        }
    }
}

/// A response's headers and text, for a retry loop: a transient error
/// status (or a body cut short) is worth another try, any other error
/// status is final (its body's start said, `clip` cutting it).
pub async fn answer_text(
    response: reqwest::Response,
    clip: impl Fn(&str) -> String,
) -> Result<(HeaderMap, String), TryFailed> {
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.map_err(|e| TryFailed::Retry {
        after: None,
        why: format!("reading the reply: {}", super::describe(&e)),
    })?;
    if !status.is_success() {
        return Err(TryFailed::status(status, &headers, &clip(&text)));
    }
    Ok((headers, text))
}

/// Why [`until_deadline`] stopped trying.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GaveUp {
    #[error("no time left (the limit is {0:.0?})")]
    NoTimeLeft(Duration),
    /// A try failed in a way another try would not mend.
    #[error("{0}")]
    Fatal(String),
    /// The last try's failure; another would have passed the deadline.
    #[error("{why}; gave up after {after:.0?}")]
    Deadline { why: String, after: Duration },
}

/// Calls `attempt` (given the time left) until it succeeds, fails for good,
/// or waiting for another try would pass `deadline`; the error says why
/// the last try failed. `what` names the call in the debug log.
pub async fn until_deadline<T, F, Fut>(
    deadline: Duration,
    mut backoff: Backoff,
    what: &str,
    mut attempt: F,
) -> Result<T, GaveUp>
where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = Result<T, TryFailed>>,
{
    let started = Instant::now();
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(GaveUp::NoTimeLeft(deadline));
        }
        match attempt(left).await {
            Ok(done) => return Ok(done),
            Err(TryFailed::Fatal(why)) => return Err(GaveUp::Fatal(why)),
            Err(TryFailed::Retry { after, why }) => {
                let wait = backoff.wait(after);
                if started.elapsed() + wait >= deadline {
                    return Err(GaveUp::Deadline {
                        why,
                        after: started.elapsed(),
                    });
                }
                tracing::debug!("{what}: {why}; retrying in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("120", now), Some(120 * SEC));
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(30 * SEC)
        );
        // A date already past: try now.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in ["-1", "NaN", "inf", "soon", "", "1e400"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_comes_from_the_header() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(2 * SEC));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_follows_the_server_below_it() {
        let mut b = Backoff::new(SEC, 5 * SEC);
        assert_eq!(b.wait(None), SEC);
        assert_eq!(b.wait(None), 2 * SEC);
        // The server's word replaces this step, and the doubling goes on.
        assert_eq!(
            b.wait(Some(Duration::from_millis(300))),
            Duration::from_millis(300)
        );
        assert_eq!(b.wait(None), 5 * SEC, "8 s capped at 5");
        // Nor does the server make us wait past the cap.
        assert_eq!(b.wait(Some(60 * SEC)), 5 * SEC);
    }

    #[test]
    fn which_statuses_are_retried() {
        for (code, retried) in [
            (429, true),
            (500, true),
            (503, true),
            (400, false),
            (401, false),
            (404, false),
        ] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(is_transient(status), retried, "{code}");
            let attempt = TryFailed::status(status, &HeaderMap::new(), "body");
            assert_eq!(
                matches!(attempt, TryFailed::Retry { .. }),
                retried,
                "{code}"
            );
        }
    }

    #[tokio::test]
    async fn retries_follow_retry_after_and_give_up_rather_than_wait_past_the_deadline() {
        const HOUR: Duration = Duration::from_secs(3600);
        // The server says "now" twice, then answers: its word beats the
        // hour-long backoff step.
        let mut calls = 0;
        let got = until_deadline(HOUR, Backoff::new(HOUR, HOUR), "test", |_| {
            calls += 1;
            let n = calls;
            async move {
                match n {
                    1 | 2 => Err(TryFailed::Retry {
                        after: Some(Duration::ZERO),
                        why: "HTTP 429".into(),
                    }),
                    _ => Ok(n),
                }
            }
        })
        .await;
        assert_eq!(got, Ok(3));

        // A wait that would end past the deadline is not started: the
        // caller hears the last failure at once.
        for (hint, step) in [(None, HOUR), (Some(2 * SEC), Duration::ZERO)] {
            let mut calls = 0;
            let started = Instant::now();
            let got: Result<(), GaveUp> =
                until_deadline(SEC, Backoff::new(step, HOUR), "test", |left| {
                    calls += 1;
                    assert!(left <= SEC);
                    async move {
                        Err(TryFailed::Retry {
                            after: hint,
                            why: "HTTP 503: down".into(),
                        })
                    }
                })
                .await;
            assert_eq!(calls, 1);
            let e = got.unwrap_err();
            assert!(matches!(e, GaveUp::Deadline { .. }), "{e}");
            assert!(
                e.to_string().starts_with("HTTP 503: down; gave up after"),
                "{e}"
            );
            assert!(started.elapsed() < SEC);
        }

        // A final error is not retried.
        let mut calls = 0;
        let got: Result<(), GaveUp> = until_deadline(HOUR, Backoff::new(SEC, SEC), "test", |_| {
            calls += 1;
            async { Err(TryFailed::Fatal("HTTP 401: bad key".into())) }
        })
        .await;
        assert_eq!(
            (calls, got),
            (1, Err(GaveUp::Fatal("HTTP 401: bad key".to_string())))
        );
    }
}
