//! The model's own files the renderer needs, read from a folder laid out as
//! on the Hugging Face hub.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::RenderError;

/// A model's tokenizer and chat template, as files from its folder.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// The folder they came from (for error messages).
    pub dir: PathBuf,
    /// `tokenizer.json`, as bytes (also hashed into [`Renderer::id`](super::Renderer::id)).
    pub tokenizer_json: Vec<u8>,
    /// `tokenizer_config.json`: special tokens, and the chat template of
    /// models that predate `chat_template.jinja`.
    pub tokenizer_config: Value,
    /// `chat_template.jinja` if present, else `tokenizer_config["chat_template"]`
    /// (a string, or a list of `{name, template}` of which the one named
    /// `default` is taken), as transformers loads it.
    pub chat_template: String,
    /// `generation_config.json`, whose `eos_token_id` says which tokens end
    /// a completion.
    pub generation_config: Option<Value>,
}

impl ModelFiles {
    /// Required and optional files, so the host can look in the HF cache or download them.
    pub const REQUIRED: &'static [&'static str] = &["tokenizer.json", "tokenizer_config.json"];
    pub const OPTIONAL: &'static [&'static str] =
        &["chat_template.jinja", "generation_config.json"];

    /// Reads the files from `dir`. Fails on a missing required file, a file
    /// that is not valid JSON, or a model with no chat template.
    pub fn from_dir(dir: &Path) -> Result<Self, RenderError> {
        if !dir.is_dir() {
            return Err(RenderError::NoModelDir {
                dir: dir.to_path_buf(),
            });
        }
        let tokenizer_json =
            read(dir, "tokenizer.json")?.ok_or_else(|| missing(dir, "tokenizer.json"))?;
        let tokenizer_config = read_json(dir, "tokenizer_config.json")?
            .ok_or_else(|| missing(dir, "tokenizer_config.json"))?;
        if !tokenizer_config.is_object() {
            return Err(RenderError::BadFile {
                path: dir.join("tokenizer_config.json"),
                reason: "it is not a JSON object".into(),
            });
        }
        let chat_template = match read(dir, "chat_template.jinja")? {
            Some(bytes) => String::from_utf8(bytes).map_err(|_| RenderError::BadFile {
                path: dir.join("chat_template.jinja"),
                reason: "it is not UTF-8".into(),
            })?,
            None => template_from_config(dir, &tokenizer_config)?,
        };
        let generation_config = read_json(dir, "generation_config.json")?;
        Ok(ModelFiles {
            dir: dir.to_path_buf(),
            tokenizer_json,
            tokenizer_config,
            chat_template,
            generation_config,
        })
    }
}

/// `tokenizer_config["chat_template"]`: a string, or named templates of
/// which transformers uses `default` (`tool_use`, when a model has one, is
/// what transformers picks for requests with tools; only `default` is
/// taken here, so one request renders one way).
fn template_from_config(dir: &Path, config: &Value) -> Result<String, RenderError> {
    let bad = |reason: &str| RenderError::BadFile {
        path: dir.join("tokenizer_config.json"),
        reason: format!("its \"chat_template\" {reason}"),
    };
    match config.get("chat_template") {
        None | Some(Value::Null) => Err(RenderError::NoTemplate {
            dir: dir.to_path_buf(),
        }),
        Some(Value::String(template)) => Ok(template.clone()),
        Some(Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad("has no template named \"default\"")),
        Some(_) => Err(bad("is neither a string nor a list of {name, template}")),
    }
}

fn missing(dir: &Path, file: &'static str) -> RenderError {
    RenderError::Missing {
        file,
        dir: dir.to_path_buf(),
    }
}

/// The file's bytes, or `None` if it does not exist.
fn read(dir: &Path, file: &str) -> Result<Option<Vec<u8>>, RenderError> {
    let path = dir.join(file);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(RenderError::Read { path, source }),
    }
}

fn read_json(dir: &Path, file: &str) -> Result<Option<Value>, RenderError> {
    let Some(bytes) = read(dir, file)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| RenderError::Json {
            path: dir.join(file),
            source,
        })
}
