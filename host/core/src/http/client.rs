//! Every HTTP client metaclaw runs is built here: user agent, timeouts,
//! pool, and TLS (rustls, verifying with the platform's CA certificates).

use std::time::Duration;

/// What a client is for: its user agent and connection pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The proxy's upstream, on the serving path: many connections kept
    /// warm, so a turn rarely waits for a handshake.
    Upstream,
    /// The judge's and the evolver's model.
    Learning,
    /// An OpenAI-compatible embeddings endpoint.
    Embeddings,
    /// The CLI talking to the daemon.
    Cli,
    /// A Tinker-compatible training service.
    Training,
    /// The scheduler's calendar (an iCalendar address).
    Calendar,
}

impl Purpose {
    fn user_agent(self) -> &'static str {
        match self {
            Self::Upstream => concat!("metaclaw/", env!("CARGO_PKG_VERSION")),
            Self::Learning => concat!("metaclaw/", env!("CARGO_PKG_VERSION"), " (learning)"),
            Self::Embeddings => concat!("metaclaw/", env!("CARGO_PKG_VERSION"), " (embeddings)"),
            Self::Cli => concat!("metaclaw/", env!("CARGO_PKG_VERSION"), " (cli)"),
            Self::Training => concat!("metaclaw/", env!("CARGO_PKG_VERSION"), " (training)"),
            Self::Calendar => concat!("metaclaw/", env!("CARGO_PKG_VERSION"), " (calendar)"),
        }
    }
}

/// How to build one client.
#[derive(Debug, Clone)]
pub struct ClientSpec {
    purpose: Purpose,
    connect_timeout: Duration,
    /// An HTTPS URL the client will call (for the error when the
    /// certificates to verify it are missing); `None` when it calls plain
    /// HTTP only.
    https: Option<String>,
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{problem}. To fix: {fix}")]
    NoCaCertificates { problem: String, fix: String },
    #[error("cannot set up an HTTP client: {0}")]
    Other(String),
}

impl ClientSpec {
    /// A client that may call any URL, verifying HTTPS servers with the
    /// platform's CA certificates.
    pub fn new(purpose: Purpose) -> Self {
        Self {
            purpose,
            connect_timeout: Duration::from_secs(10),
            https: Some("an https:// URL".into()),
        }
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The only URLs (or base URLs) the client calls. When none is HTTPS
    /// no CA certificate is loaded: a machine without them still reaches a
    /// local model or the daemon over plain HTTP, and HTTPS (a redirect,
    /// say) fails verification, as it must.
    pub fn only_calls<'a>(mut self, urls: impl IntoIterator<Item = &'a str>) -> Self {
        self.https = urls
            .into_iter()
            .find(|url| !is_plain_http(url))
            .map(str::to_string);
        self
    }

    pub fn build(self) -> Result<reqwest::Client, ClientError> {
        let mut builder = reqwest::Client::builder()
            .user_agent(self.purpose.user_agent())
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        if self.purpose == Purpose::Upstream {
            builder = builder
                .pool_max_idle_per_host(256)
                .pool_idle_timeout(Duration::from_secs(90))
                .tcp_keepalive(Duration::from_secs(30));
        }
        let Some(url) = self.https else {
            return builder
                .tls_certs_only(std::iter::empty())
                .build()
                .map_err(|e| ClientError::Other(super::innermost(&e)));
        };
        builder.build().map_err(|e| match tls_cause(&e) {
            Some(detail) => {
                let (looked, fix) = where_and_fix();
                ClientError::NoCaCertificates {
                    problem: format!(
                        "cannot verify HTTPS servers such as {url}: no CA certificate was found \
                         in {looked} (rustls: {detail})"
                    ),
                    fix,
                }
            }
            None => ClientError::Other(super::innermost(&e)),
        })
    }
}

/// Plain `http://` (any case); anything else, unparsable included, may
/// need TLS.
fn is_plain_http(url: &str) -> bool {
    url.trim()
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

/// rustls's complaint, when that is why the build failed: building a
/// client only fails in rustls when the verifier has no root certificate.
fn tls_cause(e: &reqwest::Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        source = cause.source();
    }
    None
}

const INSTALL: &str = "install the system's CA certificates (Debian/Ubuntu: `apt-get install \
    ca-certificates`; Fedora: `dnf install ca-certificates`; Alpine: `apk add ca-certificates`)";

/// Where the certificates were looked for, and what to do about it:
/// `SSL_CERT_FILE` and `SSL_CERT_DIR`, when either is set, replace the
/// system's store.
fn where_and_fix() -> (String, String) {
    let set: Vec<String> = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
        .into_iter()
        .filter_map(|var| std::env::var_os(var).map(|v| format!("{var}={}", v.to_string_lossy())))
        .collect();
    if set.is_empty() {
        return (
            "the system's certificate store".into(),
            format!("{INSTALL}, or set SSL_CERT_FILE to a PEM file of trusted CA certificates"),
        );
    }
    let names: Vec<&str> = set.iter().filter_map(|s| s.split('=').next()).collect();
    (
        format!(
            "{}, which replaces the system's store when set",
            set.join(" and ")
        ),
        format!(
            "point {} at CA certificates, or unset it and {INSTALL}",
            names.join(" and ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_goes_without_certificates() {
        for url in ["http://127.0.0.1:1/v1", " HTTP://localhost:11434/v1"] {
            assert!(is_plain_http(url), "{url}");
        }
        for url in ["https://api.openai.com/v1", "", "localhost:1", "httpx://a"] {
            assert!(!is_plain_http(url), "{url}");
        }
        let spec = ClientSpec::new(Purpose::Cli).only_calls(["http://127.0.0.1:1"]);
        assert_eq!(spec.https, None);
        let spec = ClientSpec::new(Purpose::Upstream)
            .only_calls(["http://127.0.0.1:1", "https://fallback.example/v1"]);
        assert_eq!(spec.https.as_deref(), Some("https://fallback.example/v1"));
    }

    #[test]
    fn each_purpose_names_itself_to_the_server() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            Purpose::Upstream.user_agent(),
            format!("metaclaw/{version}")
        );
        assert_eq!(
            Purpose::Learning.user_agent(),
            format!("metaclaw/{version} (learning)")
        );
        assert_eq!(
            Purpose::Embeddings.user_agent(),
            format!("metaclaw/{version} (embeddings)")
        );
        assert_eq!(
            Purpose::Cli.user_agent(),
            format!("metaclaw/{version} (cli)")
        );
    }

    #[test]
    fn a_plain_http_client_builds_without_certificates() {
        // Whatever this machine's store holds: no root is loaded at all.
        let client = ClientSpec::new(Purpose::Cli)
            .only_calls(["http://127.0.0.1:1"])
            .build();
        assert!(client.is_ok());
    }
}
