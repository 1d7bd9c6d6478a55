//! `metaclaw ui`: the running daemon's dashboard, opened in the browser
//! (the login page asks for the admin token; it never goes in a URL).

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Result, bail};

use super::{UiArgs, load_config};
use metaclaw_core::home::Home;

pub fn run(home: &Home, config_path: &Path, args: UiArgs) -> Result<ExitCode> {
    let config = load_config(config_path)?;
    if !config.config.ui.enabled {
        bail!(
            "the dashboard is off (ui.enabled: false in {}): set it to true and restart metaclaw",
            config_path.display()
        );
    }
    let Some(running) = home.running()? else {
        bail!("metaclaw is not running: start it with `metaclaw start`, then run `metaclaw ui`");
    };
    let url = format!("{}/ui", running.url.trim_end_matches('/'));
    say!("{url}");
    say!(
        "log in with the admin token (in {})",
        home.admin_token_file().display()
    );
    if args.print {
        return Ok(ExitCode::SUCCESS);
    }
    match open(&url) {
        Ok(()) => {}
        Err(why) => say!("could not open a browser ({why}): open {url} yourself"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens `url` with the desktop's browser.
/// Why the browser was not opened.
#[derive(Debug, thiserror::Error)]
enum NotOpened {
    #[error("{0}")]
    NoOpener(std::io::Error),
    #[error("the opener exited with {0}")]
    Exited(std::process::ExitStatus),
}

fn open(url: &str) -> Result<(), NotOpened> {
    let mut command = if cfg!(target_os = "macos") {
        Command::new("open")
    } else if cfg!(windows) {
        let mut c = Command::new("cmd");
        c.args(["/C", "start", ""]);
        c
    } else {
        Command::new("xdg-open")
    };
    let status = command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(NotOpened::NoOpener)?;
    if status.success() {
        Ok(())
    } else {
        Err(NotOpened::Exited(status))
    }
}
