//! A real headless Chromium for the dashboard's browser tests: Debian's
//! `chromium` and `chromium-driver` packages (`scripts/browser-deps`
//! installs them; scripts/test runs it first), driven over the W3C
//! WebDriver protocol (<https://www.w3.org/TR/webdriver2/>) by the small
//! client here, on `reqwest`.
//!
//! [`Browser::start`] runs `/usr/bin/chromedriver --port=0` in a process
//! group of its own, waits until its `/status` says ready, and opens a
//! session of a fresh headless Chromium (a new profile in a temporary
//! folder). Dropping the [`Browser`] (also while a failed test unwinds)
//! ends the session, which closes Chromium, then kills what is left of the
//! group. Every wait polls with a deadline; nothing sleeps for a guessed
//! time. A missing browser fails the test: it never skips.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long chromedriver and Chromium may take to start (a cold start on a
/// loaded 2-core machine takes seconds).
const START: Duration = Duration::from_secs(60);
/// How long an element, a URL or a condition is waited for.
const WAIT: Duration = Duration::from_secs(20);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);
/// The key of a web element's id in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// An error WebDriver answered with (`value.error`, `value.message`).
#[derive(Debug)]
pub struct WebDriverError {
    pub status: u16,
    pub error: String,
    pub message: String,
}

/// One headless Chromium and its chromedriver.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    http: reqwest::Client,
    /// The profile (`--user-data-dir`) and Chromium's XDG folders.
    _dir: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium in a fresh profile.
    pub async fn start() -> Self {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).is_file(),
                "{binary} is missing: the dashboard's browser tests need Debian's chromium and \
                 chromium-driver packages; run scripts/browser-deps (scripts/test does)"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile");
        std::fs::create_dir_all(&profile).unwrap();
        // With `--port=0`, chromedriver takes a free IPv6 port and then
        // binds the same number on IPv4, which another process may hold
        // ("IPv4 port not available"): that start is tried again.
        let mut attempts = 0;
        let (driver, port) = loop {
            attempts += 1;
            let log = std::fs::File::create(dir.path().join("chromedriver.log")).unwrap();
            let mut cmd = Command::new(CHROMEDRIVER);
            cmd.arg("--port=0")
                // Chromium's own folders (crash reports, caches) in the
                // temporary folder, not the user's ~/.config and ~/.cache.
                .env("XDG_CONFIG_HOME", dir.path().join("config"))
                .env("XDG_CACHE_HOME", dir.path().join("cache"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(log)
                // Its own group: Drop kills chromedriver and every Chromium
                // process it started at once.
                .process_group(0);
            let mut driver = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("could not start {CHROMEDRIVER}: {e}"));
            match read_port(&mut driver) {
                Ok(port) => break (driver, port),
                Err(why) => {
                    kill_group(&mut driver);
                    if why.contains("port not available") && attempts < 5 {
                        continue;
                    }
                    panic!(
                        "{CHROMEDRIVER} did not start: {why}; its log:\n{}",
                        std::fs::read_to_string(dir.path().join("chromedriver.log"))
                            .unwrap_or_default()
                    );
                }
            }
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let mut browser = Self {
            driver,
            port,
            session: String::new(),
            http,
            _dir: dir,
        };
        browser.wait_ready().await;
        browser.session = browser.new_session(&profile).await;
        browser
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Polls `GET /status` until chromedriver says it is ready.
    async fn wait_ready(&self) {
        let deadline = Instant::now() + START;
        loop {
            let last = match self
                .http
                .get(format!("{}/status", self.base()))
                .send()
                .await
            {
                Ok(r) => match r.json::<Value>().await {
                    Ok(v) if v["value"]["ready"] == true => return,
                    Ok(v) => v.to_string(),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            assert!(
                Instant::now() < deadline,
                "chromedriver never became ready in {START:?}; last: {last}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn new_session(&self, profile: &Path) -> String {
        let user_data_dir = format!("--user-data-dir={}", profile.display());
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "timeouts": {"script": 30_000, "pageLoad": 60_000, "implicit": 0},
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-quic",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-extensions",
                    "--disable-crash-reporter",
                    "--password-store=basic",
                    "--window-size=1280,900",
                    user_data_dir,
                ],
            },
        }}});
        let r = self
            .http
            .post(format!("{}/session", self.base()))
            .json(&caps)
            .send()
            .await
            .unwrap_or_else(|e| panic!("chromedriver: new session: {e}"));
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        v["value"]["sessionId"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("chromedriver could not start Chromium ({status}): {v:#}"))
    }

    /// One WebDriver command of this session: its `value`, or the error.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, WebDriverError> {
        let url = format!("{}/session/{}{path}", self.base(), self.session);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            request = request.json(&body);
        } else if method == reqwest::Method::POST {
            request = request.json(&json!({}));
        }
        let r = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let status = r.status().as_u16();
        let v: Value = r
            .json()
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: not JSON: {e}"));
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            Ok(value)
        } else {
            Err(WebDriverError {
                status,
                error: value["error"].as_str().unwrap_or("").to_string(),
                message: value["message"].as_str().unwrap_or("").to_string(),
            })
        }
    }

    /// [`Browser::call`], failing the test on an error.
    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        match self.call(method.clone(), path, body).await {
            Ok(v) => v,
            Err(e) => panic!(
                "WebDriver {method} {path}: {} ({}): {}",
                e.error, e.status, e.message
            ),
        }
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    pub async fn current_url(&self) -> String {
        self.cmd(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The current URL's path and query (`/ui/login?next=%2Fui`).
    pub async fn current_path(&self) -> String {
        path_of(&self.current_url().await)
    }

    pub async fn title(&self) -> String {
        self.cmd(reqwest::Method::GET, "/title", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    pub async fn page_source(&self) -> String {
        self.cmd(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Waits until the current URL's path and query satisfy `ok`; returns it.
    pub async fn wait_for_path(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let path = self.current_path().await;
            if ok(&path) {
                return path;
            }
            assert!(
                Instant::now() < deadline,
                "the browser never got to {what}; it is at {path}:\n{}",
                self.page_source().await
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The elements matching `css` now (none is not an error).
    pub async fn find_all(&self, css: &str) -> Vec<String> {
        let found = self
            .cmd(
                reqwest::Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[ELEMENT].as_str().unwrap().to_string())
            .collect()
    }

    /// The first element matching `css`, waited for: its WebDriver id.
    pub async fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            match self
                .call(
                    reqwest::Method::POST,
                    "/element",
                    Some(json!({"using": "css selector", "value": css})),
                )
                .await
            {
                Ok(v) => return v[ELEMENT].as_str().unwrap().to_string(),
                Err(e) if e.error == "no such element" && Instant::now() < deadline => {
                    tokio::time::sleep(POLL).await;
                }
                Err(e) => panic!(
                    "no element {css:?} at {} ({}: {}); the page:\n{}",
                    self.current_url().await,
                    e.error,
                    e.message,
                    self.page_source().await
                ),
            }
        }
    }

    /// An element's rendered text.
    pub async fn element_text(&self, element: &str) -> String {
        self.cmd(
            reqwest::Method::GET,
            &format!("/element/{element}/text"),
            None,
        )
        .await
        .as_str()
        .unwrap()
        .to_string()
    }

    /// The rendered text of the first element matching `css` (waited for).
    pub async fn text(&self, css: &str) -> String {
        let element = self.find(css).await;
        self.element_text(&element).await
    }

    /// The rendered text of every element matching `css` now.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut out = Vec::new();
        for element in self.find_all(css).await {
            out.push(self.element_text(&element).await);
        }
        out
    }

    /// An element's DOM property (`value`, `href`, `checked`…).
    pub async fn property(&self, css: &str, name: &str) -> Value {
        let element = self.find(css).await;
        self.cmd(
            reqwest::Method::GET,
            &format!("/element/{element}/property/{name}"),
            None,
        )
        .await
    }

    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            None,
        )
        .await;
    }

    /// Types `text` into the element matching `css`, as keystrokes.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Runs `script` (a function body: `return …`) in the page.
    pub async fn execute(&self, script: &str, args: &[Value]) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Runs `script` in the page; it ends by calling its last argument
    /// (`arguments[arguments.length - 1](result)`).
    pub async fn execute_async(&self, script: &str, args: &[Value]) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// The HTTP status the current page was served with (the Navigation
    /// Timing entry's `responseStatus`).
    pub async fn response_status(&self) -> u64 {
        let v = self
            .execute(
                "const n = performance.getEntriesByType('navigation')[0]; \
                 return n ? n.responseStatus : null;",
                &[],
            )
            .await;
        match v.as_u64() {
            Some(status) => status,
            None => panic!("no navigation status at {}: {v}", self.current_url().await),
        }
    }

    /// The browser's cookies for the current page (WebDriver sees HttpOnly
    /// ones too; the page's `document.cookie` does not).
    pub async fn cookies(&self) -> Vec<Value> {
        self.cmd(reqwest::Method::GET, "/cookie", None)
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The cookies the page's own script can read.
    pub async fn document_cookie(&self) -> String {
        self.execute("return document.cookie;", &[])
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let shot = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64_decode(shot.as_str().unwrap())
            .unwrap_or_else(|| panic!("the screenshot is not base64"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        png
    }

    /// A PNG of the whole page, beyond the viewport (Chromium's DevTools
    /// `Page.captureScreenshot`, through chromedriver).
    pub async fn full_page_screenshot(&self) -> Vec<u8> {
        let size = self
            .execute(
                "const e = document.documentElement; \
                 return [Math.max(e.scrollWidth, window.innerWidth), Math.max(e.scrollHeight, window.innerHeight)];",
                &[],
            )
            .await;
        let (width, height) = (size[0].as_f64().unwrap(), size[1].as_f64().unwrap());
        let shot = self
            .cmd(
                reqwest::Method::POST,
                "/goog/cdp/execute",
                Some(json!({"cmd": "Page.captureScreenshot", "params": {
                    "format": "png",
                    "captureBeyondViewport": true,
                    "clip": {"x": 0, "y": 0, "width": width, "height": height.min(8000.0), "scale": 1},
                }})),
            )
            .await;
        let png = base64_decode(shot["data"].as_str().unwrap())
            .unwrap_or_else(|| panic!("the screenshot is not base64"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        png
    }

    /// Writes a PNG of the viewport to `path`.
    pub async fn screenshot_png(&self, path: &Path) {
        std::fs::write(path, self.screenshot().await).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (chromedriver closes Chromium and its helpers),
        // over a plain socket since Drop cannot await; then the group.
        if !self.session.is_empty() {
            delete_session(self.port, &self.session);
        }
        kill_group(&mut self.driver);
    }
}

/// Reads chromedriver's stdout until it says which port it took
/// (`ChromeDriver was started successfully on port N.`); later output is
/// drained in the background.
fn read_port(driver: &mut Child) -> Result<u16, String> {
    let stdout = driver.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        let mut seen = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sent {
                continue;
            }
            let port = line
                .split_once("started successfully on port ")
                .and_then(|(_, rest)| rest.trim().trim_end_matches('.').parse::<u16>().ok());
            if let Some(port) = port {
                let _ = tx.send(Ok(port));
                sent = true;
            } else {
                seen.push_str(&line);
                seen.push('\n');
            }
        }
        if !sent {
            let _ = tx.send(Err(format!("it exited; it said:\n{seen}")));
        }
    });
    rx.recv_timeout(START)
        .map_err(|_| format!("no port reported in {START:?}"))?
}

/// `DELETE /session/ID` over a plain socket, waiting for the answer
/// (chromedriver answers once Chromium is closed).
fn delete_session(port: u16, session: &str) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return;
    };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    }
}

/// SIGKILL to chromedriver's process group (it and every Chromium process
/// it started), then reaps chromedriver.
fn kill_group(driver: &mut Child) {
    let pid = rustix::process::Pid::from_child(driver);
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    let _ = driver.kill();
    let _ = driver.wait();
}

/// `http://host:port/path?query#fragment` → `/path?query`.
pub fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    path.split('#').next().unwrap_or(path).to_string()
}

/// Standard base64 (with or without padding) to bytes; `None` if it is not.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let digits: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let digits = digits
        .strip_suffix(b"==")
        .or_else(|| digits.strip_suffix(b"="))
        .unwrap_or(&digits);
    if digits.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() / 4 * 3 + 2);
    for chunk in digits.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[test]
fn base64_decodes_what_browsers_encode() {
    assert_eq!(base64_decode("").unwrap(), b"");
    assert_eq!(base64_decode("Zg==").unwrap(), b"f");
    assert_eq!(base64_decode("Zm8=").unwrap(), b"fo");
    assert_eq!(base64_decode("Zm9v").unwrap(), b"foo");
    assert_eq!(base64_decode("Zm9vYmFy").unwrap(), b"foobar");
    assert_eq!(base64_decode("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
    assert_eq!(base64_decode("+/+/").unwrap(), [0xfb, 0xff, 0xbf]);
    assert!(base64_decode("Zm9v!").is_none());
    assert!(base64_decode("Z").is_none());
}

#[test]
fn paths_of_urls() {
    assert_eq!(
        path_of("http://127.0.0.1:4000/ui/login?next=%2Fui#x"),
        "/ui/login?next=%2Fui"
    );
    assert_eq!(path_of("http://127.0.0.1:4000"), "/");
}
