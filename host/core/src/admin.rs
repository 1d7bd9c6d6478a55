//! The CLI's client for the running daemon: the pid file says where it
//! listens, the admin token lets the CLI in, and each failure says which of
//! the three went wrong (not running, not answering, not let in).

use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::home::{Home, PidInfo};
use crate::http::{ClientError, ClientSpec, Purpose};

/// How long a request waits for its answer unless told otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("metaclaw is not running (home {home}): start it with `metaclaw start`")]
    NotRunning { home: PathBuf },
    #[error(
        "metaclaw is running, but its admin token {path} cannot be read: run this as the user who \
         started it, or restart it (`metaclaw stop`, then `metaclaw start`) to write a new one"
    )]
    NoToken { path: PathBuf },
    #[error("metaclaw is not answering at {url}: {reason}")]
    NotAnswering { url: String, reason: String },
    #[error(
        "metaclaw at {url} refused the admin token ({status}): the token file changed since it \
         started, or another metaclaw holds this port; restart it (`metaclaw stop`, then \
         `metaclaw start`)"
    )]
    Unauthorized { url: String, status: StatusCode },
    /// The daemon's own message, when its error body has one.
    #[error("{message}")]
    Refused { status: StatusCode, message: String },
    #[error("metaclaw's answer to {path} is not JSON: {detail}")]
    NotJson { path: String, detail: String },
    /// A daemon of another version answered in a shape this one does not
    /// read.
    #[error(
        "metaclaw's answer to {path} is not what this metaclaw ({ours}) reads: {detail}; if the \
         running daemon is another version, restart it (`metaclaw stop`, then `metaclaw start`)"
    )]
    Unreadable {
        path: String,
        ours: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Home(#[from] anyhow::Error),
}

/// The daemon, as the CLI talks to it.
pub struct AdminClient {
    client: reqwest::Client,
    url: String,
    /// `None` when talking to whoever answers at a URL (`/healthz` only).
    token: Option<String>,
    timeout: Duration,
}

impl AdminClient {
    /// The daemon running in `home`, with its admin token.
    pub fn connect(home: &Home) -> Result<Self, AdminError> {
        let info = home.running()?.ok_or_else(|| AdminError::NotRunning {
            home: home.root.clone(),
        })?;
        Self::of(home, &info)
    }

    /// The daemon `info` names (from `home`'s pid file), with the home's
    /// admin token.
    pub fn of(home: &Home, info: &PidInfo) -> Result<Self, AdminError> {
        let token = home.read_admin_token().ok_or_else(|| AdminError::NoToken {
            path: home.admin_token_file(),
        })?;
        let mut client = Self::at(&info.url)?;
        client.token = Some(token);
        Ok(client)
    }

    /// Whoever answers at `url`, without a token: its public routes only.
    pub fn at(url: &str) -> Result<Self, AdminError> {
        let url = url.trim_end_matches('/').to_string();
        let client = ClientSpec::new(Purpose::Cli)
            .connect_timeout(Duration::from_secs(2))
            .only_calls([url.as_str()])
            .build()?;
        Ok(Self {
            client,
            url,
            token: None,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// How long each request waits for its whole answer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// e.g. `http://127.0.0.1:8741`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The HTTP client, for the proxy's own routes (the demo's turns).
    pub fn http(&self) -> &reqwest::Client {
        &self.client
    }

    /// Whether `/healthz` answers 200.
    pub async fn healthy(&self) -> bool {
        self.send(self.client.get(self.at_path("/healthz")), "/healthz")
            .await
            .is_ok()
    }

    /// `/healthz`'s body: what answers (version, mode).
    pub async fn health(&self) -> Result<Value, AdminError> {
        self.send(self.client.get(self.at_path("/healthz")), "/healthz")
            .await
    }

    pub async fn get_json(&self, path: &str) -> Result<Value, AdminError> {
        self.send(self.authorized(self.client.get(self.at_path(path))), path)
            .await
    }

    /// The daemon's [`crate::app::Status`].
    pub async fn status(&self) -> Result<crate::app::Status, AdminError> {
        self.get_as("/admin/status").await
    }

    /// A route's answer, read into the type the daemon wrote it from.
    pub async fn get_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<T, AdminError> {
        read_as(path, self.get_json(path).await?)
    }

    /// [`AdminClient::post_json`], read into the type the daemon wrote
    /// its answer from.
    pub async fn post_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, AdminError> {
        read_as(path, self.post_json(path, body).await?)
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value, AdminError> {
        let request = self
            .client
            .post(self.at_path(path))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        self.send(self.authorized(request), path).await
    }

    fn at_path(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        path: &str,
    ) -> Result<Value, AdminError> {
        let not_answering = |e: reqwest::Error| AdminError::NotAnswering {
            url: self.url.clone(),
            reason: crate::http::describe(&e),
        };
        let response = request
            .timeout(self.timeout)
            .send()
            .await
            .map_err(not_answering)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(not_answering)?;
        let body = serde_json::from_slice::<Value>(&bytes);
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(AdminError::Unauthorized {
                url: self.url.clone(),
                status,
            });
        }
        if !status.is_success() {
            let message = body
                .ok()
                .and_then(|b| metaclaw_wire::recorded::Completion::read(&b).error)
                .and_then(|e| e.message)
                .unwrap_or_else(|| format!("{path} answered {status}"));
            return Err(AdminError::Refused { status, message });
        }
        body.map_err(|e| AdminError::NotJson {
            path: path.to_string(),
            detail: e.to_string(),
        })
    }
}

/// Whether a metaclaw answers `/healthz` at `url` within 2 s: the start
/// and the wiring wait for this.
pub async fn healthy(url: &str) -> bool {
    match AdminClient::at(url) {
        Ok(admin) => admin.timeout(Duration::from_secs(2)).healthy().await,
        Err(_) => false,
    }
}

fn read_as<T: serde::de::DeserializeOwned>(path: &str, answer: Value) -> Result<T, AdminError> {
    serde_json::from_value(answer).map_err(|e| AdminError::Unreadable {
        path: path.into(),
        ours: env!("CARGO_PKG_VERSION"),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::{get, post};

    /// A daemon stand-in on loopback: `/healthz` for anyone, admin routes
    /// for the token `good` only.
    async fn serve() -> String {
        async fn admin(headers: axum::http::HeaderMap) -> axum::response::Response {
            use axum::response::IntoResponse;
            if headers
                .get("authorization")
                .is_none_or(|v| v != "Bearer good")
            {
                return (StatusCode::UNAUTHORIZED, "{}").into_response();
            }
            axum::Json(serde_json::json!({"ok": true})).into_response()
        }
        let app = Router::new()
            .route(
                "/healthz",
                get(|| async { axum::Json(serde_json::json!({"version": "t"})) }),
            )
            .route("/admin/status", get(admin))
            .route(
                "/admin/learn/now",
                post(|| async {
                    (
                        StatusCode::NOT_FOUND,
                        axum::Json(serde_json::json!({"error": {"message": "no session x"}})),
                    )
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[tokio::test]
    async fn each_failure_says_which_it_is() {
        let url = serve().await;
        let mut admin = AdminClient::at(&url).unwrap();
        assert!(admin.healthy().await);
        assert_eq!(admin.health().await.unwrap()["version"], "t");

        // No token, or the wrong one: refused, and told how to fix it.
        let e = admin.get_json("/admin/status").await.unwrap_err();
        assert!(matches!(e, AdminError::Unauthorized { .. }), "{e}");
        admin.token = Some("stale".into());
        let e = admin
            .get_json("/admin/status")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("refused the admin token") && e.contains("metaclaw stop"),
            "{e}"
        );

        admin.token = Some("good".into());
        assert_eq!(admin.get_json("/admin/status").await.unwrap()["ok"], true);
        // The daemon's own message comes through.
        let e = admin
            .post_json("/admin/learn/now", &serde_json::json!({"session": "x"}))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "no session x");

        // Nothing listens there any more.
        let gone = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let admin = AdminClient::at(&gone).unwrap();
        assert!(!admin.healthy().await);
        let e = admin
            .get_json("/admin/status")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "metaclaw is not answering at {gone}: connection failed"
            )),
            "{e}"
        );
    }

    #[test]
    fn a_home_without_a_daemon_or_a_token_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().to_path_buf());
        let e = AdminClient::connect(&home).err().unwrap().to_string();
        assert!(
            e.starts_with("metaclaw is not running") && e.contains("metaclaw start"),
            "{e}"
        );
        let info = PidInfo {
            pid: 1,
            host: "127.0.0.1".into(),
            port: 1,
            url: "http://127.0.0.1:1".into(),
            mode: "skills_only".into(),
            started_at_ms: 0,
            version: "t".into(),
            demo: false,
        };
        let e = AdminClient::of(&home, &info).err().unwrap().to_string();
        assert!(
            e.contains("admin token") && e.contains("admin.token"),
            "{e}"
        );
    }
}
