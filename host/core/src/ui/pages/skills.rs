//! The skill library (category, version, provenance, injections and
//! outcomes) and a skill's page: its versions as diffs with who changed it
//! and why, its drafts (kept and rejected), and the turns it was injected
//! into.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::context;
use serde::Serialize;

use super::{PageError, data, frame, read, store_conn};
use crate::app::SharedApp;
use crate::learn::review::unified_diff;
use crate::skills::library::Snapshot;
use crate::skills::stats::{self, Row};
use crate::store::browse::{self, InjectedInto};
use crate::store::learning::{self, DraftRow};
use crate::store::skills::SkillChange;
use crate::ui::Dashboard;
use crate::ui::auth::Login;
use crate::ui::render::refused;

/// Drafts and turns a skill's page lists (the newest).
const LATEST: u32 = 50;

/// A library skill with its current version's outcomes.
#[derive(Debug, Serialize)]
struct Listed {
    name: String,
    description: String,
    category: &'static str,
    tags: Vec<String>,
    /// The session an evolved skill was learned from.
    evolved_from: Option<String>,
    executable: bool,
    #[serde(flatten)]
    outcomes: Row,
}

/// The session an evolved skill (or change) came from: `evolved:<id>`.
fn evolved_from(who: &str) -> Option<String> {
    who.strip_prefix("evolved:").map(str::to_string)
}

fn library(app: &SharedApp) -> Option<Arc<Snapshot>> {
    app.proxy.skills.as_ref().map(|s| s.library.snapshot())
}

pub async fn list(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
) -> Response {
    let Some(snapshot) = library(&app) else {
        return off(&dashboard, &login);
    };
    let db = app.proxy.store.db().clone();
    let listed = read(move || {
        let (board, rows) = stats::rows(&db, &snapshot, None, None).map_err(PageError::store)?;
        let listed: Vec<Listed> = rows
            .into_iter()
            .filter_map(|row| {
                let skill = snapshot.get(&row.skill)?;
                Some(Listed {
                    name: skill.name.clone(),
                    description: skill.description.clone(),
                    category: skill.category.as_str(),
                    tags: skill.tags.clone(),
                    evolved_from: evolved_from(&skill.created_by),
                    executable: skill.component.is_some(),
                    outcomes: row,
                })
            })
            .collect();
        Ok((
            listed,
            board.prior(),
            snapshot.generation,
            snapshot.problems.len(),
        ))
    })
    .await;
    let (listed, prior, generation, problems) = match listed {
        Ok(v) => v,
        Err(page) => return page,
    };
    dashboard.views.page(
        StatusCode::OK,
        "skills.html",
        context! {
            frame => frame("skills", &login, &dashboard),
            skills => data(&listed),
            prior => prior,
            generation => generation,
            problems => problems,
        },
    )
}

fn off(dashboard: &Dashboard, login: &Login) -> Response {
    dashboard.views.page(
        StatusCode::OK,
        "skills.html",
        context! { frame => frame("skills", login, dashboard), off => true },
    )
}

/// A change in a skill's history, with the text it made and the diff from
/// the version before.
#[derive(Debug, Serialize)]
struct Change {
    #[serde(flatten)]
    change: SkillChange,
    evolved_from: Option<String>,
    /// The unified diff from the version before (the whole text, for the
    /// first), a line each; `None` where a text was not kept.
    diff: Option<Vec<DiffLine>>,
    /// Whether this version's text was kept (recorded before texts were).
    text_kept: bool,
}

/// A line of a unified diff, with how it is shown: `file`, `hunk`, `add`,
/// `del` or `same`.
#[derive(Debug, Serialize)]
struct DiffLine {
    class: &'static str,
    text: String,
}

fn diff_lines(diff: &str) -> Vec<DiffLine> {
    diff.lines()
        .map(|line| DiffLine {
            class: if line.starts_with("+++ ") || line.starts_with("--- ") {
                "file"
            } else if line.starts_with("@@") {
                "hunk"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else {
                "same"
            },
            text: line.to_string(),
        })
        .collect()
}

/// A skill's history, newest first, each version diffed against the one
/// before it.
fn changes(conn: &crate::store::sql::Conn, name: &str) -> crate::store::sql::Result<Vec<Change>> {
    let mut out = Vec::new();
    let mut before: Option<(String, Option<String>)> = None;
    for change in crate::store::skills::history(conn, name)? {
        let text = match &change.content_hash {
            Some(hash) => crate::store::skills::text(conn, hash)?,
            None => None,
        };
        let version = change.version.clone().unwrap_or_default();
        let diff = match (&text, &before) {
            (Some(new), Some((old_version, Some(old)))) if new == old => {
                Some(format!("(the same text as v{old_version})"))
            }
            (Some(new), Some((old_version, Some(old)))) => Some(unified_diff(
                old,
                new,
                &format!("{name} v{old_version}"),
                &format!("{name} v{version}"),
            )),
            (Some(new), _) => Some(unified_diff(
                "",
                new,
                "(none)",
                &format!("{name} v{version}"),
            )),
            (None, _) => None,
        }
        .map(|d| diff_lines(&d));
        let text_kept = text.is_some() || change.content_hash.is_none();
        if change.content_hash.is_some() {
            before = Some((version, text));
        }
        out.push(Change {
            evolved_from: evolved_from(&change.who),
            change,
            diff,
            text_kept,
        });
    }
    out.reverse();
    Ok(out)
}

/// What a skill's page shows.
#[derive(Debug, Serialize)]
struct Shown {
    skill: Option<crate::skills::skill::Skill>,
    versions: Vec<Row>,
    changes: Vec<Change>,
    drafts: Vec<DraftRow>,
    injected_into: Vec<InjectedInto>,
}

pub async fn show(
    State(app): State<SharedApp>,
    Extension(dashboard): Extension<Arc<Dashboard>>,
    Extension(login): Extension<Login>,
    Path(name): Path<String>,
) -> Response {
    let Some(snapshot) = library(&app) else {
        return off(&dashboard, &login);
    };
    let wanted = name.clone();
    let shown = read(move || {
        let db = app.proxy.store.db();
        let (_, versions) =
            stats::rows(db, &snapshot, Some(&wanted), None).map_err(PageError::store)?;
        let conn = store_conn(&app)?;
        let sql = PageError::store::<crate::store::sql::Error>;
        Ok(Shown {
            skill: snapshot.get(&wanted).map(|s| (**s).clone()),
            changes: changes(&conn, &wanted).map_err(sql)?,
            drafts: learning::skill_drafts(&conn, &wanted, LATEST).map_err(sql)?,
            injected_into: browse::injected_into(&conn, &wanted, LATEST).map_err(sql)?,
            versions: versions
                .into_iter()
                .filter(|r| r.injected > 0 || r.current)
                .collect(),
        })
    })
    .await;
    let shown = match shown {
        Ok(shown) => shown,
        Err(page) => return page,
    };
    if shown.skill.is_none() && shown.changes.is_empty() && shown.drafts.is_empty() {
        return refused(
            StatusCode::NOT_FOUND,
            &format!("No skill {name:?} is in the library or its history."),
        );
    }
    dashboard.views.page(
        StatusCode::OK,
        "skill.html",
        context! {
            frame => frame("skills", &login, &dashboard),
            name => name,
            evolved_from => shown.skill.as_ref().and_then(|s| evolved_from(&s.created_by)),
            shown => data(&shown),
        },
    )
}
