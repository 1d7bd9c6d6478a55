//! The dashboard (`/ui`) in a real browser: Debian's headless Chromium,
//! driven over WebDriver (common/browser.rs; `scripts/browser-deps`
//! installs it), against the real daemon and the dummy upstream playing
//! the agent's model (`echo`), the judge and the evolver.
//!
//! What a user does: asks for a page without a login and gets the login
//! page, logs in with the admin token (an HttpOnly cookie the page's script
//! cannot read), opens a session the learning flow recorded and sees its
//! turns, the skills injected into them and their rewards, and disables a
//! plugin through the page that asks first. What an attacker does: posts
//! the dashboard's forms from another origin's page, which is refused while
//! the login stays; listens on another port of 127.0.0.1 for the login's
//! cookie, which the browser does not send there.
//!
//! With `METACLAW_DASHBOARD_SCREENSHOTS=DIR`, each page visited is saved as
//! `DIR/<page>.png` (the screenshots of docs/dashboard.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests own and join their threads and servers

#[path = "common/browser.rs"]
mod browser;
mod common;

use browser::Browser;
use common::*;
use serde_json::{Value, json};

const TASK: &str = "What is the distance from the earth to the moon?";
const WRONG: &str = "It is about 1,000 km.";
const CORRECTION: &str = "No, that's wrong: it is about 384,400 km.";
const THANKS: &str = "Thanks, that worked. Now the weather in Paris, please.";

/// Saves the page as `<name>.png` under `METACLAW_DASHBOARD_SCREENSHOTS`,
/// if it is set.
async fn screenshot(browser: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("METACLAW_DASHBOARD_SCREENSHOTS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let png = browser.full_page_screenshot().await;
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

fn admin_token(home: &std::path::Path) -> String {
    std::fs::read_to_string(home.join("admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// A dashboard path with the login's key taken out (`/ui/<key>/x` is
/// `/ui/x`): the page it is.
fn keyless(path: &str) -> String {
    match path.strip_prefix("/ui/") {
        Some(rest) if rest.len() >= 64 && rest[..64].bytes().all(|b| b.is_ascii_hexdigit()) => {
            format!("/ui{}", &rest[64..])
        }
        _ => path.to_string(),
    }
}

/// Opens `page` (`/ui…`) without a login, is sent to the login page, logs
/// in by typing the admin token and lands on `page` under the login's key.
/// Returns where the login's pages are (`/ui/<key>`).
async fn log_in(browser: &Browser, url: &str, home: &std::path::Path, page: &str) -> String {
    browser.goto(&format!("{url}{page}")).await;
    browser
        .wait_for_path("the login page", |p| p.starts_with("/ui/login"))
        .await;
    browser.type_into("#token", &admin_token(home)).await;
    browser.click("form.login button[type=submit]").await;
    let at = browser
        .wait_for_path(page, |p| p != page && keyless(p) == page)
        .await;
    at[..at.len() - (page.len() - "/ui".len())].to_string()
}

/// A page of another origin: a form that posts `fields` to `action`.
fn form_page(action: &str, fields: &[(&str, &str)]) -> String {
    let attr = |text: &str| {
        text.replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
    };
    let inputs: String = fields
        .iter()
        .map(|(name, value)| {
            format!(
                "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
                attr(name),
                attr(value)
            )
        })
        .collect();
    format!(
        "<!doctype html><html><head><title>another site</title></head><body>\
         <form id=\"evil\" method=\"post\" action=\"{}\">{inputs}\
         <button id=\"go\" type=\"submit\">Win a prize</button></form></body></html>",
        attr(action)
    )
}

/// A web server on another port of 127.0.0.1 (another origin, the same
/// site: the dashboard's SameSite=Strict cookie goes along with its
/// requests) serving `GET /?action=URL&field=value…` as [`form_page`], and
/// any other path as a page, noting the `Cookie` header each request had.
struct OtherOrigin {
    url: String,
    /// Path and `Cookie` of each request but `/`.
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

async fn other_origin() -> OtherOrigin {
    use axum::extract::Query;
    use axum::response::Html;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = seen.clone();
    let listening = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let noted = noted.clone();
        async move {
            let cookie = request
                .headers()
                .get("cookie")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            noted
                .lock()
                .unwrap()
                .push((request.uri().path().to_string(), cookie));
            Html("<!doctype html><html><head><title>listening</title></head><body></body></html>")
        }
    });
    let app = listening.route(
        "/",
        axum::routing::get(|Query(q): Query<Vec<(String, String)>>| async move {
            let action = q
                .iter()
                .find(|(k, _)| k == "action")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let fields: Vec<(&str, &str)> = q
                .iter()
                .filter(|(k, _)| k != "action")
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            Html(form_page(&action, &fields))
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    OtherOrigin { url, seen }
}

/// `text` for a URL's query.
fn q(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Submits the other origin's form (posting `fields` to the daemon's
/// `path`) and checks the daemon refused it as cross-site.
async fn cross_site_post(
    browser: &Browser,
    evil: &str,
    daemon: &str,
    path: &str,
    fields: &[(&str, &str)],
) {
    let mut page = format!("{evil}/?action={}", q(&format!("{daemon}{path}")));
    for (k, v) in fields {
        page.push_str(&format!("&{k}={}", q(v)));
    }
    browser.goto(&page).await;
    assert_eq!(browser.title().await, "another site");
    browser.click("#go").await;
    browser.wait_for_path(path, |p| p == path).await;
    let body = browser.page_source().await;
    assert_eq!(browser.response_status().await, 403, "{path}: {body}");
    assert!(body.contains("cross_site"), "{path}: {body}");
    assert!(
        body.contains("cross-site request refused"),
        "{path}: {body}"
    );
}

#[tokio::test]
async fn a_login_is_asked_for_given_with_the_token_and_kept_from_other_sites() {
    let up = dummy();
    let mc = Metaclaw::start(&up.url, "llm:\n  api_base: {upstream}\n  model_id: echo\n");
    let browser = Browser::start().await;

    // Without a login: the login page, which comes back to the page asked for.
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/ui/sessions", mc.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 303);
    assert_eq!(
        redirect.headers()["location"],
        "/ui/login?next=%2Fui%2Fsessions"
    );
    browser.goto(&format!("{}/ui/sessions", mc.url())).await;
    assert_eq!(
        browser.current_path().await,
        "/ui/login?next=%2Fui%2Fsessions"
    );
    assert_eq!(browser.response_status().await, 200);
    assert_eq!(browser.title().await, "Log in · metaclaw");
    assert_eq!(browser.property("#token", "type").await, "password");
    assert_eq!(
        browser
            .property("form.login input[name=next]", "value")
            .await,
        "/ui/sessions"
    );
    // Nothing of the dashboard is shown: no navigation, no logout form.
    assert!(browser.find_all("header.top nav").await.is_empty());
    assert!(browser.find_all("form.logout").await.is_empty());
    screenshot(&browser, "login").await;

    // A wrong token: refused, on the same form, still going to the same page.
    browser.type_into("#token", "not-the-token").await;
    browser.click("form.login button[type=submit]").await;
    let error = browser.text("p.error").await;
    assert_eq!(error, "That is not the admin token.");
    assert_eq!(browser.response_status().await, 401);
    assert_eq!(
        browser
            .property("form.login input[name=next]", "value")
            .await,
        "/ui/sessions"
    );
    assert!(
        browser
            .cookies()
            .await
            .iter()
            .all(|c| c["name"] != "metaclaw_ui")
    );

    // The admin token: logged in, on the page asked for, under the
    // login's own key.
    let token = admin_token(mc.home.path());
    browser.type_into("#token", &token).await;
    browser.click("form.login button[type=submit]").await;
    let at = browser
        .wait_for_path("/ui/sessions", |p| {
            p != "/ui/sessions" && keyless(p) == "/ui/sessions"
        })
        .await;
    let base = at.strip_suffix("/sessions").unwrap().to_string();
    assert_eq!(browser.response_status().await, 200);
    assert_eq!(browser.text("main h1").await, "Sessions");
    assert!(
        browser
            .text("main")
            .await
            .contains("No session is recorded yet."),
        "{}",
        browser.page_source().await
    );
    // The login is a cookie the page's script cannot read (HttpOnly),
    // scoped to the login's key, SameSite=Strict, gone with the browser
    // session, and not the token itself.
    let cookies = browser.cookies().await;
    let login = cookies
        .iter()
        .find(|c| c["name"] == "metaclaw_ui")
        .unwrap_or_else(|| panic!("no login cookie: {cookies:?}"));
    assert_eq!(login["httpOnly"], true, "{login}");
    assert_eq!(login["sameSite"], "Strict", "{login}");
    assert_eq!(login["path"], base.as_str(), "{login}");
    assert!(login.get("expiry").is_none_or(Value::is_null), "{login}");
    assert_ne!(login["value"], token.as_str());
    assert!(
        !browser.document_cookie().await.contains("metaclaw_ui"),
        "document.cookie shows the login"
    );
    assert!(!browser.current_url().await.contains(&token));
    assert!(!browser.page_source().await.contains(&token));

    // Another origin's page posts the dashboard's forms, with the login's
    // own CSRF token (as if it had leaked) and the cookie going along:
    // refused before the form is read.
    let csrf = browser
        .property("form.logout input[name=csrf]", "value")
        .await;
    let csrf = csrf.as_str().unwrap().to_string();
    assert!(csrf.len() >= 32, "{csrf}");
    let other = other_origin().await;
    let evil = other.url.clone();
    let logout = format!("{base}/logout");
    cross_site_post(&browser, &evil, mc.url(), &logout, &[("csrf", &csrf)]).await;
    screenshot(&browser, "cross-site-refused").await;
    cross_site_post(
        &browser,
        &evil,
        mc.url(),
        "/ui/login",
        &[("token", &token), ("next", "/ui/plugins")],
    )
    .await;
    // A page with no origin at all (`Origin: null`).
    let data = form_page(&format!("{}{logout}", mc.url()), &[("csrf", &csrf)]);
    browser.goto(&format!("data:text/html,{}", q(&data))).await;
    browser.click("#go").await;
    browser.wait_for_path(&logout, |p| p == logout).await;
    assert_eq!(browser.response_status().await, 403);
    assert!(browser.page_source().await.contains("cross_site"));

    // A program listening on another port of 127.0.0.1, visited where a
    // dashboard might be (cookies are not scoped by port), is sent no
    // login: the cookie goes only under the login's key.
    let key = &base["/ui/".len()..];
    let elsewhere = [
        "/ui".to_string(),
        "/ui/sessions".to_string(),
        format!("/ui/{}/sessions", "0".repeat(64)),
        format!("/ui/{}", &key[..63]),
        "/x".to_string(),
    ];
    for path in &elsewhere {
        browser.goto(&format!("{evil}{path}")).await;
        assert_eq!(browser.title().await, "listening", "{path}");
    }
    // Every request it had (the browser's `/favicon.ico` ones too).
    let seen = other.seen.lock().unwrap().clone();
    for path in &elsewhere {
        assert!(seen.iter().any(|(p, _)| p == path), "{path}: {seen:?}");
    }
    for (path, cookie) in &seen {
        assert!(!cookie.contains("metaclaw_ui"), "{path} got {cookie:?}");
    }
    // The control: at the login's own path there, the browser does send
    // it (so the key is what must stay secret, docs/apis.md); and the
    // cookie without the key, replayed to metaclaw, is no login.
    let control = format!("{base}/sessions");
    browser.goto(&format!("{evil}{control}")).await;
    let got = other
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|(p, _)| *p == control)
        .map(|(_, cookie)| cookie.clone())
        .unwrap_or_default();
    let stolen = got
        .split(';')
        .map(str::trim)
        .find(|c| c.starts_with("metaclaw_ui="))
        .unwrap_or_else(|| panic!("the control: {got:?}"))
        .to_string();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for path in ["/ui", "/ui/sessions", "/ui/plugins"] {
        let replayed = no_redirects
            .get(format!("{}{path}", mc.url()))
            .header("cookie", &stolen)
            .send()
            .await
            .unwrap();
        assert_eq!(replayed.status(), 303, "{path}");
        assert!(
            replayed.headers()["location"]
                .to_str()
                .unwrap()
                .starts_with("/ui/login"),
            "{path}"
        );
    }

    // Still logged in: the login survived them all.
    browser.goto(&format!("{}{base}/plugins", mc.url())).await;
    assert_eq!(browser.current_path().await, format!("{base}/plugins"));
    assert_eq!(browser.text("main h1").await, "Plugins");

    // The dashboard's own logout form (the same token, its own origin)
    // logs out: the pages ask for a login again.
    browser.click("form.logout button[type=submit]").await;
    browser
        .wait_for_path("the login page", |p| p.starts_with("/ui/login"))
        .await;
    assert!(
        browser
            .cookies()
            .await
            .iter()
            .all(|c| c["name"] != "metaclaw_ui")
    );
    for page in ["/ui/plugins".to_string(), format!("{base}/plugins")] {
        browser.goto(&format!("{}{page}", mc.url())).await;
        assert_eq!(
            browser.current_path().await,
            "/ui/login?next=%2Fui%2Fplugins",
            "{page}"
        );
    }
}

/// A skill about the moon's distance, for the session's first question.
fn seed_skill(mc: &Metaclaw) {
    let folder = mc.home.path().join("skills/moon-distance");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        "---\nname: moon-distance\ndescription: The distance from the earth to the moon, and how to \
         quote it with its source.\ncategory: general\nversion: 1.0.0\n---\n# Moon distance\n\n\
         The moon is about 384,400 km from the earth on average; say where the figure comes from.\n",
    )
    .unwrap();
    poll_json(mc.home.path(), &["status", "--json"], |v| {
        skills_ready(v, 1) && retriever_ready(v, "bm25")
    });
}

/// Three turns of session `id`: the question, the user's correction of a
/// wrong answer, and the user moving on.
async fn record_session(mc: &Metaclaw, id: &str) {
    let base = format!("{}/v1", mc.url());
    let mut messages = vec![json!({"role": "user", "content": TASK})];
    for (answer, next) in [(WRONG, CORRECTION), ("It is about 384,400 km.", THANKS)] {
        let r = post_chat(
            &base,
            &json!({"model": "echo", "messages": messages}),
            &[("x-session-id", id)],
        )
        .await;
        assert_eq!(r.status(), 200);
        messages.push(json!({"role": "assistant", "content": answer}));
        messages.push(json!({"role": "user", "content": next}));
    }
    let r = post_chat(
        &base,
        &json!({"model": "echo", "messages": messages}),
        &[("x-session-id", id)],
    )
    .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_recorded_session_shows_its_turns_skills_and_rewards() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo\n\
         rl:\n  prm_model: judge\n  evolver_model: evolver\n\
         sessions:\n  idle_timeout: 1h\nui:\n  actions: true\n",
    );
    seed_skill(&mc);
    record_session(&mc, "browser-moon").await;
    // Ends the session and runs its learning job (judge, scorers, evolver).
    mc.learn_now("browser-moon");
    let recorded = poll_json(
        mc.home.path(),
        &["sessions", "show", "browser-moon", "--json"],
        |v| v["learning"]["state"] == "done",
    );
    // The user disagrees with the judge on the second answer.
    let second = recorded["turns"][1]["id"].as_str().unwrap().to_string();
    let out = mc.cli(&[
        "feedback",
        "--turn",
        &second,
        "--down",
        "--comment",
        "the units were wrong",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recorded = poll_json(
        mc.home.path(),
        &["sessions", "show", "browser-moon", "--json"],
        |v| v["turns"][1]["reward"] == -1.0,
    );
    let session_id = recorded["session"]["id"].as_str().unwrap().to_string();
    let turns = recorded["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 3, "{recorded:#}");
    // What the page must show, as the store has it: the first answer was
    // corrected (−1), with the seeded skill injected.
    assert_eq!(turns[0]["reward"], -1.0, "{recorded:#}");
    let skills_of = |t: &Value| -> Vec<String> {
        t["injected_skills"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| {
                format!(
                    "{}@{}",
                    k["id"].as_str().unwrap(),
                    k["version"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert!(
        skills_of(&turns[0]).contains(&"moon-distance@1.0.0".to_string()),
        "{recorded:#}"
    );

    let browser = Browser::start().await;
    let base = log_in(&browser, mc.url(), mc.home.path(), "/ui/sessions").await;
    screenshot(&browser, "sessions").await;

    // The list: one row, this session, ended, its turns judged.
    let rows = browser.find_all("#sessions tbody tr").await;
    assert_eq!(rows.len(), 1, "{}", browser.page_source().await);
    let row = browser.texts("#sessions tbody tr td").await;
    assert_eq!(row[0], session_id, "{row:?}");
    assert_eq!(row[1], "default", "its agent: {row:?}");
    assert!(row[4].starts_with("ended"), "{row:?}");
    assert_eq!(row[5], "3", "{row:?}");
    assert_eq!(row[7], "3", "{row:?}");
    let mean = turns
        .iter()
        .map(|t| t["reward"].as_f64().unwrap())
        .sum::<f64>()
        / 3.0;
    assert_eq!(row[8], format!("{mean:+.2}"), "{row:?}");

    // Its page, by clicking it.
    browser
        .click(&format!(
            "#sessions a[href=\"{base}/sessions/{}\"]",
            q(&session_id)
        ))
        .await;
    let page = format!("{base}/sessions/{}", q(&session_id));
    browser.wait_for_path(&page, |p| p == page).await;
    assert_eq!(browser.response_status().await, 200);
    assert_eq!(
        browser.text("main h1").await,
        format!("Session {session_id}")
    );
    screenshot(&browser, "session").await;
    // The user's feedback, beside the judge's verdict it outranks.
    let feedback = browser.text("#turn-2 section.feedback li").await;
    assert!(
        feedback.contains("thumbs down") && feedback.contains("the units were wrong"),
        "{feedback}"
    );

    for t in &turns {
        let turn = format!("#turn-{}", t["seq"]);
        // The user's message.
        assert_eq!(
            browser.text(&format!("{turn} .msg.user p")).await,
            t["user"].as_str().unwrap(),
            "{t:#}"
        );
        // The final reward, coloured by its sign.
        let reward = t["reward"].as_f64().unwrap();
        let shown = format!("{turn} > header .reward");
        assert_eq!(browser.text(&shown).await, format!("{reward:+.2}"), "{t:#}");
        let class = browser.property(&shown, "className").await;
        let sign = if reward > 0.0 {
            "good"
        } else if reward < 0.0 {
            "bad"
        } else {
            ""
        };
        assert_eq!(
            class
                .as_str()
                .unwrap()
                .split_whitespace()
                .find(|c| *c != "reward")
                .unwrap_or(""),
            sign,
            "{t:#}"
        );
        // The skills injected into it.
        let chips = browser.texts(&format!("{turn} dd.skills .chip")).await;
        assert_eq!(chips, skills_of(t), "{t:#}");
        // The judge's verdict and each scorer's reward.
        let judged = browser.text(&format!("{turn} section.judgment h3")).await;
        assert!(
            judged.starts_with(&format!("Judge: {}", t["judgment"]["value"])),
            "{judged}"
        );
        let scorers = browser.texts(&format!("{turn} section.rewards li")).await;
        let expected: Vec<&str> = t["rewards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["label"].as_str().unwrap())
            .collect();
        assert_eq!(scorers.len(), expected.len(), "{scorers:?} {t:#}");
        for (line, label) in scorers.iter().zip(&expected) {
            assert!(line.contains(label), "{line} lacks {label}");
        }
    }
    // The first turn: the correction was seen by the judge and a scorer.
    assert!(
        browser
            .text("#turn-1 section.rewards")
            .await
            .contains("user-correction"),
        "{}",
        browser.page_source().await
    );
    // What the evolver made of it.
    let drafts = browser.texts("ul.drafts li").await;
    let evolved = recorded["evolved"].as_array().unwrap();
    assert!(!evolved.is_empty(), "{recorded:#}");
    assert_eq!(drafts.len(), evolved.len(), "{drafts:?}");
    for (line, d) in drafts.iter().zip(evolved) {
        let (outcome, name) = (d["outcome"].as_str().unwrap(), d["name"].as_str().unwrap());
        assert!(
            line.starts_with(&format!("{outcome} {name}")),
            "{line:?} is not {d}"
        );
    }

    // The other pages.
    browser
        .click(&format!("header.top nav a[href=\"{base}\"]"))
        .await;
    browser.wait_for_path(&base, |p| p == base).await;
    assert_eq!(browser.text("main h1").await, "Overview");
    assert_eq!(browser.text("p.big.good").await, "healthy");
    // What it learned and whether it helps, in words: the seeded skill
    // and the evolved ones were added; the judged turns' mean reward with
    // skills and without, as the store has them.
    let answer = browser.text("#learned p.answer").await;
    let judged_with: Vec<f64> = turns
        .iter()
        .filter(|t| !skills_of(t).is_empty())
        .map(|t| t["reward"].as_f64().unwrap())
        .collect();
    let with = judged_with.iter().sum::<f64>() / judged_with.len() as f64;
    assert!(
        answer.starts_with("In the last 30 days: ")
            && answer.contains(" skill(s) added")
            && answer.contains(&format!(
                "Judged turns scored {with:+.2} on average with skills ({} turns)",
                judged_with.len()
            )),
        "{answer}"
    );
    // Each change with its version's effect: the seeded skill's judged
    // turns against the others, too few yet to call.
    let rows = browser.texts("#learned table.changes tbody tr").await;
    let seeded: Vec<f64> = turns
        .iter()
        .filter(|t| skills_of(t).contains(&"moon-distance@1.0.0".to_string()))
        .map(|t| t["reward"].as_f64().unwrap())
        .collect();
    let mean = seeded.iter().sum::<f64>() / seeded.len() as f64;
    let expected = format!(
        "too few judged turns: {mean:+.2} over {} judged turn(s)",
        seeded.len()
    );
    assert!(
        rows.iter().any(|r| r.contains("moon-distance v1.0.0")
            && r.contains("added")
            && r.contains(&expected)),
        "{expected:?} not in {rows:#?}"
    );
    screenshot(&browser, "overview").await;

    let plugins_page = format!("{base}/plugins");
    browser
        .click(&format!("header.top nav a[href=\"{plugins_page}\"]"))
        .await;
    browser
        .wait_for_path(&plugins_page, |p| p == plugins_page)
        .await;
    let plugins = browser.texts("#plugins tbody tr td:first-child b").await;
    for name in ["bm25", "guard", "tool-error"] {
        assert!(plugins.iter().any(|p| p == name), "{plugins:?}");
    }
    screenshot(&browser, "plugins").await;

    // Disabling a plugin asks first, on a page of its own (no script):
    // until it is confirmed, nothing changes.
    let status_of = |name: &str| {
        let list = poll_json(mc.home.path(), &["plugins", "list", "--json"], |_| true);
        listed_plugin(&list, name)["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let disable = format!("{base}/actions/plugins/tool-error/disable");
    let button = format!("form[action=\"{disable}\"] button[type=submit]");
    browser.click(&button).await;
    browser.wait_for_path(&disable, |p| p == disable).await;
    assert_eq!(browser.response_status().await, 200);
    assert_eq!(
        browser.text("main h1").await,
        "Disable the plugin tool-error?"
    );
    screenshot(&browser, "confirm").await;
    assert_eq!(status_of("tool-error"), "ok");
    // Cancel leads back, nothing done.
    browser.click("#cancel").await;
    browser
        .wait_for_path(&plugins_page, |p| p == plugins_page)
        .await;
    assert_eq!(status_of("tool-error"), "ok");
    // Confirmed: disabled.
    browser.click(&button).await;
    browser.wait_for_path(&disable, |p| p == disable).await;
    browser.click("#confirm").await;
    let said = browser.text("p.said").await;
    assert!(said.contains("is disabled"), "{said}");
    assert!(
        status_of("tool-error").starts_with("disabled"),
        "{}",
        status_of("tool-error")
    );
}

/// A corrected session makes the evolver write a lesson: a canary under
/// test. The experiments page shows it waiting for judged sessions, and
/// rolling it back from the page (asked, then confirmed) retires it.
#[tokio::test]
async fn a_canary_is_shown_and_rolled_back_from_the_experiments_page() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo\n\
         rl:\n  prm_model: judge\n  evolver_model: evolver\n\
         sessions:\n  idle_timeout: 1h\nui:\n  actions: true\n",
    );
    record_session(&mc, "browser-canary").await;
    mc.learn_now("browser-canary");
    let list = poll_json(mc.home.path(), &["experiments", "list", "--json"], |v| {
        v.as_array().is_some_and(|l| !l.is_empty())
    });
    let subject = list[0]["experiment"]["subject"]
        .as_str()
        .unwrap()
        .to_string();

    let browser = Browser::start().await;
    let base = log_in(&browser, mc.url(), mc.home.path(), "/ui/experiments").await;
    screenshot(&browser, "experiments").await;
    let row = browser.texts("#experiment-1 td").await;
    assert_eq!(row.len(), 9, "{}", browser.page_source().await);
    assert!(row[1].starts_with(&subject), "{row:?}");
    assert_eq!(row[2], "testing", "{row:?}");
    assert!(row[7].contains("waiting for 10 judged sessions"), "{row:?}");

    let rollback = format!("{base}/actions/experiments/1/rollback");
    browser
        .click(&format!("form[action=\"{rollback}\"] button[type=submit]"))
        .await;
    browser.wait_for_path(&rollback, |p| p == rollback).await;
    assert_eq!(
        browser.text("main h1").await,
        "Roll back the candidate of experiment 1 now?"
    );
    browser.click("#confirm").await;
    let said = browser.text("p.said").await;
    assert!(said.contains("is rolled back"), "{said}");
    let list = poll_json(mc.home.path(), &["experiments", "list", "--json"], |_| true);
    assert_eq!(list[0]["experiment"]["state"], "rolled_back", "{list:#}");
    assert_eq!(list[0]["experiment"]["decided_by"], "user", "{list:#}");
    let page = format!("{base}/experiments");
    browser.goto(&format!("{}{page}", mc.url())).await;
    browser.wait_for_path(&page, |p| p == page).await;
    assert_eq!(browser.texts("#experiment-1 td").await[2], "rolled back");
}

/// A judge that cannot be reached: the learning job fails, and the
/// learning page says why.
#[tokio::test]
async fn a_failed_learning_job_shows_its_reason() {
    let up = dummy();
    let mc = Metaclaw::start(
        &up.url,
        "llm:\n  api_base: {upstream}\n  model_id: echo\n\
         rl:\n  prm_model: reset\n  prm_m: 1\n\
         sessions:\n  idle_timeout: 1h\n",
    );
    record_session(&mc, "browser-failing").await;
    // The job's first attempt fails (it is retried later, with backoff).
    let _ = mc.cli(&["learn", "now", "browser-failing"]);
    let jobs = poll_json(mc.home.path(), &["learn", "status", "--json"], |v| {
        v.as_array()
            .is_some_and(|j| j.iter().any(|j| j["error"].is_string()))
    });
    let job = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["session_id"] == "browser-failing")
        .unwrap()
        .clone();
    let error = job["error"].as_str().unwrap().to_string();

    let browser = Browser::start().await;
    let base = log_in(&browser, mc.url(), mc.home.path(), "/ui/learning").await;
    screenshot(&browser, "learning").await;
    let rows = browser.find_all("#jobs tbody tr.job").await;
    assert_eq!(rows.len(), 1, "{}", browser.page_source().await);
    let cells = browser.texts("#jobs tbody tr.job td").await;
    assert!(cells[0].starts_with("browser-failing"), "{cells:?}");
    assert_eq!(cells[1], job["state"].as_str().unwrap(), "{cells:?}");
    assert_eq!(cells[6], error, "{cells:?}");
    // The session's own page says it too.
    let session = format!("{base}/sessions/browser-failing");
    browser.click(&format!("#jobs a[href=\"{session}\"]")).await;
    browser.wait_for_path("the session", |p| p == session).await;
    assert!(
        browser.text("dl.facts").await.contains(&error),
        "{}",
        browser.page_source().await
    );
}

/// In `mode: rl` against the fake Tinker server: a session of the
/// student's turns, learned from (judged; a skill evolved from it), and a
/// training step. The training page shows the step and its curves; the
/// evolved skill's page shows its text as a diff and the session it came
/// from.
#[tokio::test]
async fn training_steps_and_an_evolved_skill_are_shown() {
    use common::rl_daemon::{Setup, World};
    let w = World::new(Setup::new("fake-bigram").evolving()).await;
    w.session(
        "browser-rl",
        "How do I undo my last git commit but keep the changes?",
        &[
            "Delete the repository and clone it again.",
            "Run git reset --soft HEAD~1.",
        ],
        &["No, that's wrong: use git reset --soft HEAD~1 to keep the changes staged."],
    )
    .await;
    w.learn("browser-rl").await;
    // That session taught the skill (its samples are the support set, never
    // trained on); the next one, on the new skills, is what a step trains.
    w.session(
        "browser-rl-next",
        "How do I see what my last commit changed?",
        &[
            "Run git show HEAD.",
            "Run git show --stat HEAD for the files only.",
        ],
        &["Thanks. And only the file names?"],
    )
    .await;
    w.learn("browser-rl-next").await;
    let step = w.json(&["train", "step", "--json"]).await;
    assert_eq!(step["outcome"], "stepped", "{step}\n{}", w.log());
    let status = w.json(&["train", "status", "--json"]).await;
    let session = w.json(&["sessions", "show", "browser-rl", "--json"]).await;
    let created: Vec<String> = session["evolved"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["outcome"] == "created" || d["outcome"] == "updated")
        .filter_map(|d| d["skill_id"].as_str().map(str::to_string))
        .collect();

    let browser = Browser::start().await;
    let base = log_in(&browser, &w.url(), &w.path(), "/ui/training").await;
    screenshot(&browser, "training").await;
    // The step, as `train status` has it, and a chart for each curve.
    let rows = browser.texts("#steps tbody tr td:first-child").await;
    assert_eq!(rows, vec![step["step"].to_string()], "{status:#}");
    // Reward (with its smoothed curve), loss, KL, entropy, answer length,
    // policy versions.
    let charts = browser.find_all("figure.chart svg").await;
    assert_eq!(charts.len(), 6, "{}", browser.page_source().await);
    // Is it learning? One step is too few to say, and the page says so.
    let health = browser.text("#health p.verdict").await;
    assert!(
        health.starts_with("Not enough data: 1 step(s) with a reward; the verdict needs 4"),
        "{health}"
    );
    if let Some(loss) = step["loss"].as_f64() {
        assert!(
            browser
                .text("#steps tbody tr")
                .await
                .contains(&format!("{loss:.4}")),
            "{step}"
        );
    }
    assert!(
        browser.text("dl.facts").await.contains("policy version 1"),
        "{}",
        browser.page_source().await
    );

    // The skills page, and the evolved skill: its text as a diff from
    // nothing, the session it was learned from.
    let skills = format!("{base}/skills");
    browser
        .click(&format!("header.top nav a[href=\"{skills}\"]"))
        .await;
    browser.wait_for_path(&skills, |p| p == skills).await;
    screenshot(&browser, "skills").await;
    let name = created
        .first()
        .unwrap_or_else(|| panic!("no skill evolved from the session: {session:#}"));
    browser
        .click(&format!("#skills a[href=\"{base}/skills/{}\"]", q(name)))
        .await;
    let page = format!("{base}/skills/{}", q(name));
    browser.wait_for_path(&page, |p| p == page).await;
    screenshot(&browser, "skill").await;
    let source = browser.property("#source-session", "pathname").await;
    assert_eq!(source, format!("{base}/sessions/browser-rl"));
    let added = browser.texts("article.change pre.diff span.add").await;
    assert!(added.iter().any(|l| l.starts_with("+name: ")), "{added:?}");
    let history = browser.text("article.change p").await;
    assert!(
        history.starts_with("evolved from session browser-rl"),
        "{history}"
    );
}

/// Two sessions whose evolver revises the same built-in skill: the
/// learning page lists one line for the skill (two revisions, two
/// sessions); accepting from the dashboard asks first, then writes the
/// newest and rejects the older one as superseded.
#[tokio::test]
async fn revisions_waiting_for_review_are_grouped_and_accepted_from_the_dashboard() {
    let (_up, mc) = with_bank(
        "llm:\n  api_base: {upstream}\n  model_id: echo\n\
         rl:\n  prm_model: judge\n  evolver_model: evolver-revise\n\
         sessions:\n  idle_timeout: 1h\nui:\n  actions: true\n",
    );
    for id in ["review-1", "review-2"] {
        record_session(&mc, id).await;
        mc.learn_now(id);
        mc.learned(id);
    }
    let listed = poll_json(mc.home.path(), &["skills", "review", "--json"], |_| true);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let skill = listed[0]["skill"].as_str().unwrap().to_string();
    assert_eq!(listed[1]["skill"], skill.as_str(), "{listed:#?}");
    let newest = listed
        .iter()
        .max_by_key(|p| p["id"].as_i64())
        .unwrap()
        .clone();

    let browser = Browser::start().await;
    let base = log_in(&browser, mc.url(), mc.home.path(), "/ui/learning").await;
    let line = browser.text("#reviews li").await;
    assert!(
        line.starts_with(&skill) && line.contains("2 revisions from 2 session(s)"),
        "{line}"
    );
    let accept = format!("{base}/actions/reviews/{skill}/accept");
    browser
        .click(&format!("form[action=\"{accept}\"] button[type=submit]"))
        .await;
    browser.wait_for_path(&accept, |p| p == accept).await;
    assert_eq!(
        browser.text("main h1").await,
        format!("Accept the newest revision of {skill}?")
    );
    browser.click("#confirm").await;
    let said = browser.text("p.said").await;
    let version = newest["to_version"].as_str().unwrap();
    assert!(
        said.contains(&format!("{skill} is now v{version}")),
        "{said}"
    );
    let text = std::fs::read_to_string(mc.home.path().join("skills").join(&skill).join("SKILL.md"))
        .unwrap();
    assert!(text.contains(&format!("version: {version}\n")), "{text}");
    let out = mc.cli(&["skills", "review"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no skill revisions are waiting"));
    let history = poll_json(
        mc.home.path(),
        &["skills", "history", &skill, "--json"],
        |_| true,
    );
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["who"],
        format!("evolved:{}", newest["session"].as_str().unwrap()),
        "{history:#}"
    );
}
