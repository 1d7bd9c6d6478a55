//! `config show | get | set | path`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use serde_json::Value;

use super::{ConfigCommand, load_config};
use metaclaw_core::config;

pub fn run(path: &Path, command: ConfigCommand) -> Result<ExitCode> {
    match command {
        ConfigCommand::Path => {
            say!("{}", path.display());
        }
        ConfigCommand::Show => {
            let loaded = load_config(path)?;
            let origin = if loaded.file_exists {
                path.display().to_string()
            } else {
                format!("{} (not created yet: defaults)", path.display())
            };
            say!(
                "# effective configuration: {origin}; secrets masked; `# preset …` and `# default: …` mark values the file leaves empty"
            );
            let (tree, origins) = config::effective_tree(&loaded);
            say_raw!("{}", config::annotate(&config::to_yaml(&tree), &origins));
        }
        ConfigCommand::Get { key } => {
            let loaded = load_config(path)?;
            let (tree, _) = config::effective_tree(&loaded);
            let Some(value) = config::get_path(&tree, &key) else {
                bail!(config::ConfigError::UnknownKey {
                    key,
                    hint: String::new()
                });
            };
            match value {
                Value::String(s) => say!("{s}"),
                Value::Null => say!("null"),
                Value::Object(_) | Value::Array(_) => say_raw!("{}", config::to_yaml(value)),
                other => say!("{other}"),
            }
        }
        ConfigCommand::Set { key, value } => {
            let stored = config::set_key(path, &key, &value)?;
            let shown = if config::SECRET_KEYS.contains(&key.as_str()) {
                "********".to_string()
            } else {
                stored.to_string()
            };
            say!("{key} = {shown}   ({})", path.display());
            if let Some(note) = config::inert::note_on_set(&key, &stored) {
                say!("note: {note}");
            }
            if config::SECRET_KEYS.contains(&key.as_str()) {
                say!(
                    "note: stored in the file (mode 0600); an environment variable keeps it off disk (see `metaclaw config show`)"
                );
            }
            say!("a running metaclaw picks this up on its next start");
        }
    }
    Ok(ExitCode::SUCCESS)
}
