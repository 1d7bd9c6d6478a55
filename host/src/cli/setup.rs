//! `metaclaw setup`: writes the upstream, the key's source, the agent and the
//! port into config.yaml, keeping every other key of the file. Interactive
//! on a terminal; from flags otherwise (or with `--non-interactive`).

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use dialoguer::{Confirm, Input, Password, Select};
use serde_json::Value;

use super::SetupArgs;
use metaclaw_core::config::presets::Preset;
use metaclaw_core::config::{self, ClawType, Config, Mode, Provider, presets};
use metaclaw_core::home::Home;

const CLAWS: &[&str] = &[
    "openclaw", "hermes", "copaw", "ironclaw", "zeroclaw", "picoclaw", "nanoclaw", "nemoclaw",
    "none",
];
const MODES: &[&str] = &["skills_only", "rl", "auto"];

pub fn run(home: &Home, path: &Path, args: SetupArgs) -> Result<ExitCode> {
    home.ensure()?;
    let (raw, _) = config::read_raw(path)?;
    let (current, _) = config::parse_tree(&raw, path)?;
    let any_flag = args.provider.is_some()
        || args.api_base.is_some()
        || args.api_key_env.is_some()
        || args.api_key.is_some()
        || args.model.is_some()
        || args.claw.is_some()
        || args.mode.is_some()
        || args.port.is_some();
    let interactive = !args.non_interactive
        && !any_flag
        && std::io::stdin().is_terminal()
        && std::io::stderr().is_terminal();
    let pairs = if interactive {
        wizard(&current)?
    } else {
        from_flags(&current, &args)?
    };
    if pairs.is_empty() {
        bail!(
            "nothing to set: pass flags such as --provider openai --api-key-env OPENAI_API_KEY --model gpt-4o (see `metaclaw setup --help`)"
        );
    }
    let borrowed: Vec<(&str, Value)> = pairs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    config::set_many(path, &borrowed)?;
    let loaded = config::load(path)?;
    say!("wrote {}", path.display());
    say!(
        "  provider: {} → {}",
        config_name(&loaded.config.llm.provider),
        non_empty(&loaded.api_base())
    );
    say!("  model:    {}", non_empty(&loaded.config.llm.model_id));
    let key = match (
        &loaded.config.llm.api_key_env,
        loaded.config.llm.api_key.is_some(),
    ) {
        (Some(var), true) => format!("from ${var}"),
        (Some(var), false) => format!("from ${var} (not set in this shell)"),
        (None, true) => "stored in the config file".into(),
        (None, false) => "none (the agent's own key is passed through)".into(),
    };
    say!("  key:      {key}");
    say!(
        "  agent:    {}   proxy port: {}",
        config_name(&loaded.config.claw_type),
        loaded.config.proxy.port
    );
    if !loaded.config.skills.install_builtin {
        say!("  skills:   built-in bank not installed (skills.install_builtin: false)");
    }
    super::skills_cmd::install_builtin_on(home, &loaded.config, "metaclaw setup");
    say!("next: metaclaw start");
    Ok(ExitCode::SUCCESS)
}

/// An enum as it is written in config.yaml (`qwen`, `openclaw`).
pub(super) fn config_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        _ => "?".into(),
    }
}

fn non_empty(s: &str) -> &str {
    if s.is_empty() { "(not set)" } else { s }
}

fn parse_enum<T: serde::de::DeserializeOwned>(flag: &str, value: &str, allowed: &str) -> Result<T> {
    serde_json::from_value(Value::String(value.to_string()))
        .map_err(|_| anyhow::anyhow!("--{flag} {value:?} is not one of: {allowed}"))
}

fn from_flags(current: &Config, args: &SetupArgs) -> Result<Vec<(String, Value)>> {
    let mut pairs: Vec<(String, Value)> = Vec::new();
    let mut set = |k: &str, v: Value| pairs.push((k.to_string(), v));
    let provider: Provider = match &args.provider {
        Some(p) => parse_enum(
            "provider",
            p,
            "kimi, qwen, openai, openrouter, minimax, volcengine, novita, custom",
        )?,
        None => current.llm.provider.clone(),
    };
    if let Some(p) = &args.provider {
        set("llm.provider", Value::String(p.clone()));
    }
    match &args.api_base {
        Some(base) => set("llm.api_base", Value::String(base.clone())),
        // A preset's URL applies when no base is written.
        None if args.provider.is_some() && presets::preset(&provider).is_some() => {
            set("llm.api_base", Value::String(String::new()))
        }
        None if provider == Provider::Custom
            && current.llm.api_base.is_empty()
            && args.provider.is_some() =>
        {
            bail!(
                "--provider custom needs --api-base URL (the upstream's OpenAI-compatible base, e.g. http://127.0.0.1:8000/v1)"
            )
        }
        None => {}
    }
    if let Some(var) = &args.api_key_env {
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("--api-key-env {var:?} is not an environment variable name");
        }
        set("llm.api_key_env", Value::String(var.clone()));
    }
    if let Some(key) = &args.api_key {
        set("llm.api_key", Value::String(key.clone()));
    }
    if let Some(model) = &args.model {
        set("llm.model_id", Value::String(model.clone()));
    } else if args.provider.is_some()
        && current.llm.model_id.is_empty()
        && let Some(p) = presets::preset(&provider)
    {
        set("llm.model_id", Value::String(p.suggested_model.into()));
    }
    if let Some(claw) = &args.claw {
        let _: ClawType = parse_enum("claw", claw, &CLAWS.join(", "))?;
        set("claw_type", Value::String(claw.clone()));
    }
    if let Some(mode) = &args.mode {
        let _: Mode = parse_enum("mode", mode, &MODES.join(", "))?;
        set("mode", Value::String(mode.clone()));
    }
    if let Some(port) = args.port {
        set("proxy.port", Value::from(port));
    }
    Ok(pairs)
}

/// The interactive setup: asks for each setting in turn, then whether to
/// write them; the pairs to set, in config.yaml's keys.
fn wizard(current: &Config) -> Result<Vec<(String, Value)>> {
    let mut pairs: Vec<(String, Value)> = Vec::new();
    eprintln!("metaclaw setup: the upstream LLM, its key, your agent. Other settings are kept.\n");
    let preset = ask_upstream(current, &mut pairs)?;
    ask_key_source(current, preset.as_ref(), &mut pairs)?;
    ask_agent(current, &mut pairs)?;
    if !Confirm::new()
        .with_prompt("Write the config?")
        .default(true)
        .interact()
        .context("setup cancelled")?
    {
        bail!("nothing written");
    }
    Ok(pairs)
}

/// The upstream: its provider, base URL and model, defaulting to what the
/// config has or the provider's preset. Returns that preset, if any, for
/// the key's default variable.
fn ask_upstream(current: &Config, pairs: &mut Vec<(String, Value)>) -> Result<Option<Preset>> {
    let names: Vec<&str> = presets::SETUP_PROVIDERS.iter().map(|(n, _)| *n).collect();
    let default = presets::SETUP_PROVIDERS
        .iter()
        .position(|(_, p)| *p == current.llm.provider)
        .unwrap_or(0);
    let choice = Select::new()
        .with_prompt("LLM provider")
        .items(&names)
        .default(default)
        .interact()
        .context("setup cancelled")?;
    let (name, provider) = &presets::SETUP_PROVIDERS[choice];
    pairs.push(("llm.provider".into(), Value::String((*name).into())));
    let preset = presets::preset(provider);

    let base_default = if current.llm.provider == *provider && !current.llm.api_base.is_empty() {
        current.llm.api_base.clone()
    } else {
        preset
            .as_ref()
            .map(|p| p.api_base.to_string())
            .unwrap_or_default()
    };
    let base: String = Input::new()
        .with_prompt("API base URL (OpenAI-compatible)")
        .default(base_default)
        .validate_with(|s: &String| -> Result<(), String> {
            reqwest::Url::parse(s)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .map(|_| ())
                .ok_or_else(|| "an http(s) URL, e.g. https://api.openai.com/v1".into())
        })
        .interact_text()
        .context("setup cancelled")?;
    pairs.push(("llm.api_base".into(), Value::String(base)));

    let model_default = if !current.llm.model_id.is_empty() {
        current.llm.model_id.clone()
    } else {
        preset
            .as_ref()
            .map(|p| p.suggested_model.to_string())
            .unwrap_or_default()
    };
    let model: String = Input::new()
        .with_prompt("Model id")
        .default(model_default)
        .interact_text()
        .context("setup cancelled")?;
    pairs.push(("llm.model_id".into(), Value::String(model)));
    Ok(preset)
}

/// Where the upstream's key comes from: a variable (named), pasted into the
/// config, or the agent's own key passed through.
fn ask_key_source(
    current: &Config,
    preset: Option<&Preset>,
    pairs: &mut Vec<(String, Value)>,
) -> Result<()> {
    let ways = [
        "from an environment variable (recommended: the key never touches disk)",
        "paste it now (stored in config.yaml, readable by you only)",
        "none: pass through the key your agent sends",
    ];
    match Select::new()
        .with_prompt("Where does the API key come from?")
        .items(ways)
        .default(0)
        .interact()
        .context("setup cancelled")?
    {
        0 => {
            let var_default = current
                .llm
                .api_key_env
                .clone()
                .or_else(|| preset.map(|p| p.key_env.to_string()))
                .unwrap_or_else(|| "OPENAI_API_KEY".into());
            let var: String = Input::new()
                .with_prompt("Variable name")
                .default(var_default)
                .interact_text()
                .context("setup cancelled")?;
            pairs.push(("llm.api_key_env".into(), Value::String(var)));
        }
        1 => {
            let key = Password::new()
                .with_prompt("API key")
                .interact()
                .context("setup cancelled")?;
            pairs.push(("llm.api_key".into(), Value::String(key)));
        }
        _ => {}
    }
    Ok(())
}

/// The agent in front of metaclaw, and the port its proxy listens on.
fn ask_agent(current: &Config, pairs: &mut Vec<(String, Value)>) -> Result<()> {
    let claw_default = CLAWS
        .iter()
        .position(|c| {
            serde_json::to_value(&current.claw_type).ok() == Some(Value::String((*c).into()))
        })
        .unwrap_or(0);
    let claw = Select::new()
        .with_prompt("Your agent")
        .items(CLAWS)
        .default(claw_default)
        .interact()
        .context("setup cancelled")?;
    pairs.push(("claw_type".into(), Value::String(CLAWS[claw].into())));

    let port: u16 = Input::new()
        .with_prompt("Proxy port")
        .default(current.proxy.port)
        .interact_text()
        .context("setup cancelled")?;
    pairs.push(("proxy.port".into(), Value::from(port)));
    Ok(())
}
