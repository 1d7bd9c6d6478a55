//! OpenAI chat messages (+ tools) → the prompt's token ids, exactly as
//! Hugging Face transformers'
//! `tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)`
//! gives them, from the model's own files at run time: its Jinja chat
//! template rendered in an environment that behaves like transformers'
//! (`render/jinja.rs`), then its `tokenizer.json` encoding the text with no special
//! tokens added (special tokens written by the template are recognised).
//!
//! The trainer samples from token ids, so a prompt that differs from what
//! the model was trained on by one character is a different prompt: the
//! golden tests (`host/chat/tests/render_golden.rs`) compare text and ids
//! with transformers itself.

mod files;
mod jinja;
mod python;

pub use python::str_repr;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use minijinja::Environment;
use minijinja::value::Value as JinjaValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

pub use files::ModelFiles;

/// Why the model's files cannot be read or a conversation cannot be
/// rendered. Each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("model folder {} does not exist: set rl.tokenizer_path to the model's folder", dir.display())]
    NoModelDir { dir: PathBuf },
    #[error("{file} missing in {}: set rl.tokenizer_path to the model's folder", dir.display())]
    Missing { file: &'static str, dir: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not valid JSON ({source}): replace it with the model's own file", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: {reason}; replace it with the model's own file", path.display())]
    BadFile { path: PathBuf, reason: String },
    #[error(
        "no chat template in {}: neither chat_template.jinja nor a \"chat_template\" in tokenizer_config.json; \
         use a chat (instruct) model's folder",
        dir.display()
    )]
    NoTemplate { dir: PathBuf },
    #[error("tokenizer.json in {} cannot be loaded ({message}): replace it with the model's own file", dir.display())]
    Tokenizer { dir: PathBuf, message: String },
    #[error("the chat template in {} does not compile: {message}", dir.display())]
    TemplateSyntax { dir: PathBuf, message: String },
    /// The template failed on these messages; for `raise_exception(msg)`
    /// the text is `msg` itself (templates use it to reject conversations,
    /// e.g. roles out of order).
    #[error("the chat template cannot render these messages: {0}")]
    Template(String),
    #[error("the tokenizer cannot encode the text: {0}")]
    Encode(String),
    #[error("the tokenizer cannot decode the ids: {0}")]
    Decode(String),
}

/// What to render besides the messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// End with the header of an assistant turn, for the model to complete.
    pub add_generation_prompt: bool,
    /// Passed to the template as `enable_thinking` when set; `None` leaves
    /// it undefined (the template's default, thinking on for Qwen3).
    pub enable_thinking: Option<bool>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            add_generation_prompt: true,
            enable_thinking: None,
        }
    }
}

/// A rendered prompt: the template's text and its token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub tokens: Vec<i32>,
}

/// A model's chat format: its compiled template and tokenizer. Built once,
/// shared by every request (`Send + Sync`).
pub struct Renderer {
    env: Environment<'static>,
    tokenizer: Tokenizer,
    template: String,
    id: String,
    /// `bos_token`, `eos_token`, …: the template's variables for them.
    special_tokens: Vec<(String, String)>,
    stop_token_ids: Vec<i32>,
    supports_thinking: bool,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("id", &self.id)
            .field("stop_token_ids", &self.stop_token_ids)
            .field("supports_thinking", &self.supports_thinking)
            .finish_non_exhaustive()
    }
}

impl Renderer {
    /// Loads the tokenizer and compiles the template (a syntax error fails
    /// here, not on the first request).
    pub fn new(files: &ModelFiles) -> Result<Self, RenderError> {
        let tokenizer_error = |message: String| RenderError::Tokenizer {
            dir: files.dir.clone(),
            message,
        };
        let mut tokenizer = Tokenizer::from_bytes(&files.tokenizer_json)
            .map_err(|e| tokenizer_error(e.to_string()))?;
        // transformers encodes a chat with neither, whatever tokenizer.json says.
        tokenizer
            .with_truncation(None)
            .map_err(|e| tokenizer_error(e.to_string()))?;
        tokenizer.with_padding(None);

        let env =
            jinja::environment(&files.chat_template).map_err(|e| RenderError::TemplateSyntax {
                dir: files.dir.clone(),
                message: error_text(&e),
            })?;
        let supports_thinking = jinja::mentions(&files.chat_template, "enable_thinking");
        let special_tokens = special_tokens(&files.tokenizer_config);
        let stop_token_ids = stop_token_ids(files, &tokenizer);
        Ok(Renderer {
            env,
            tokenizer,
            template: files.chat_template.clone(),
            id: renderer_id(&files.chat_template, &files.tokenizer_json),
            special_tokens,
            stop_token_ids,
            supports_thinking,
        })
    }

    /// "sha256:" + first 16 hex of sha256(template bytes ‖ 0u8 ‖ tokenizer.json bytes): recorded with every sample.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The chat template's source, as read.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Token ids that end a completion: generation_config.eos_token_id (int or list), tokenizer_config eos_token (string or {content}), resolved to ids through the tokenizer; deduplicated, in that order.
    pub fn stop_token_ids(&self) -> &[i32] {
        &self.stop_token_ids
    }

    /// The template reads `enable_thinking` (so thinking can be turned on/off).
    pub fn supports_thinking(&self) -> bool {
        self.supports_thinking
    }

    /// Renders `messages` (OpenAI chat messages as JSON: role, content as a
    /// string or an array of parts, tool_calls, tool_call_id, name,
    /// reasoning_content) and `tools` (the OpenAI tools array, given to the
    /// template as it is; `None` is the template's `tools=None`), then
    /// encodes the text.
    ///
    /// The messages are first normalised as vLLM does for HF templates
    /// (see [`normalize_messages`]). The template sees the same variables
    /// as under transformers: `messages`, `tools`, `documents` (none),
    /// `add_generation_prompt`, the special tokens (`bos_token`,
    /// `eos_token`, …) and `enable_thinking` when set.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        options: &RenderOptions,
    ) -> Result<Rendered, RenderError> {
        let mut ctx: Vec<(String, JinjaValue)> = self
            .special_tokens
            .iter()
            .map(|(name, token)| (name.clone(), JinjaValue::from(token.as_str())))
            .collect();
        ctx.push((
            "messages".into(),
            normalize_messages(messages)
                .iter()
                .map(python::from_json)
                .collect(),
        ));
        ctx.push((
            "tools".into(),
            tools.map_or(JinjaValue::from(()), |tools| {
                tools.iter().map(python::from_json).collect()
            }),
        ));
        ctx.push(("documents".into(), JinjaValue::from(())));
        ctx.push((
            "add_generation_prompt".into(),
            options.add_generation_prompt.into(),
        ));
        if let Some(thinking) = options.enable_thinking {
            ctx.push(("enable_thinking".into(), thinking.into()));
        }
        let template = self
            .env
            .get_template(jinja::TEMPLATE_NAME)
            .map_err(|e| RenderError::Template(error_text(&e)))?;
        let text = template
            .render(JinjaValue::from_pairs(ctx))
            .map_err(|e| RenderError::Template(error_text(&e)))?;
        let tokens = self.encode(&text)?;
        Ok(Rendered { text, tokens })
    }

    /// The text's token ids with no special tokens added (as
    /// apply_chat_template encodes), special and added tokens written in
    /// the text recognised as such.
    pub fn encode(&self, text: &str) -> Result<Vec<i32>, RenderError> {
        let encoding = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| RenderError::Encode(e.to_string()))?;
        encoding
            .get_ids()
            .iter()
            .map(|&id| {
                i32::try_from(id)
                    .map_err(|_| RenderError::Encode(format!("token id {id} exceeds i32")))
            })
            .collect()
    }

    /// The text of `ids` as the tokenizer decodes it (transformers 5 adds
    /// no clean-up of spaces for BPE tokenizers, and none is done here).
    pub fn decode(&self, ids: &[i32], skip_special_tokens: bool) -> Result<String, RenderError> {
        let ids = ids
            .iter()
            .map(|&id| {
                u32::try_from(id)
                    .map_err(|_| RenderError::Decode(format!("negative token id {id}")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        self.tokenizer
            .decode(&ids, skip_special_tokens)
            .map_err(|e| RenderError::Decode(e.to_string()))
    }

    /// The id of one token of the vocabulary (special and added tokens included).
    pub fn token_id(&self, token: &str) -> Option<i32> {
        self.tokenizer
            .token_to_id(token)
            .and_then(|id| i32::try_from(id).ok())
    }
}

/// The messages as vLLM (its "string" content format) hands them to an HF
/// chat template, so a model sees in RL what it sees when served:
///
/// - `content` given as an array of parts becomes the text of its text
///   parts (`text`, `input_text`, `output_text` and bare strings; a
///   `refusal`'s `refusal`, a `thinking` part's `thinking`) joined with
///   `"\n"`; other parts (images, audio) are dropped;
/// - `content` null or absent becomes `""`: templates test `content is
///   string` or its truth, which `""` passes the same way, while some
///   (gpt-oss: `"…" in message.content`, or `content | trim` printing
///   `None`) break on `None`;
/// - an assistant's `tool_calls`: null or `[]` is removed (the template
///   takes its plain-answer path); each `function.arguments` given as a
///   JSON string holding an object becomes that object (templates write
///   `arguments | tojson`: a string would be quoted twice); empty, null or
///   not a string, object or array: `{}`; other strings (invalid JSON, a
///   JSON array) stay as they are, so the model sees what it wrote;
/// - an assistant's `reasoning` (vLLM's name) is copied to
///   `reasoning_content` (the templates' name) when that is absent.
///
/// Every other key, and the order of keys, is kept.
pub fn normalize_messages(messages: &[Value]) -> Vec<Value> {
    messages.iter().map(normalize_message).collect()
}

fn normalize_message(message: &Value) -> Value {
    let Value::Object(fields) = message else {
        return message.clone();
    };
    let mut fields = fields.clone();
    let content = match fields.get("content") {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(part_text)
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Some(_) => None,
    };
    if let Some(content) = content {
        fields.insert("content".into(), Value::String(content));
    }
    if fields.get("role").and_then(Value::as_str) == Some("assistant") {
        match fields.get_mut("tool_calls") {
            Some(Value::Array(calls)) if !calls.is_empty() => {
                for call in calls {
                    if let Some(Value::Object(function)) = call.get_mut("function") {
                        normalize_arguments(function);
                    }
                }
            }
            Some(Value::Array(_) | Value::Null) => {
                fields.shift_remove("tool_calls");
            }
            _ => {}
        }
        if !fields.contains_key("reasoning_content")
            && let Some(reasoning @ Value::String(_)) = fields.get("reasoning")
        {
            let reasoning = reasoning.clone();
            fields.insert("reasoning_content".into(), reasoning);
        }
    }
    Value::Object(fields)
}

fn part_text(part: &Value) -> Option<&str> {
    let field = match part {
        Value::String(text) => return Some(text),
        Value::Object(part) => match part.get("type").and_then(Value::as_str) {
            Some("text" | "input_text" | "output_text") => "text",
            Some("refusal") => "refusal",
            Some("thinking") => "thinking",
            _ => return None,
        },
        _ => return None,
    };
    part.get(field).and_then(Value::as_str)
}

fn normalize_arguments(function: &mut Map<String, Value>) {
    let parsed = match function.get("arguments") {
        Some(Value::String(s)) if !s.is_empty() => match serde_json::from_str::<Value>(s) {
            Ok(object @ Value::Object(_)) => object,
            _ => return,
        },
        Some(Value::Object(_) | Value::Array(_)) => return,
        _ => Value::Object(Map::new()),
    };
    function.insert("arguments".into(), parsed);
}

/// The special tokens transformers passes to the template
/// (`tokenizer.special_tokens_map`): the named ones (`bos_token`,
/// `eos_token`, `unk_token`, `sep_token`, `pad_token`, `cls_token`,
/// `mask_token`) and, as transformers 5 does, any other `*_token` key and
/// the names in a dict `extra_special_tokens`; given as a string or an
/// AddedToken object (`{"content": …}`), null ones left out.
fn special_tokens(config: &Value) -> Vec<(String, String)> {
    let Some(config) = config.as_object() else {
        return Vec::new();
    };
    let named = config.iter().filter(|(key, _)| key.ends_with("_token"));
    let extra = config
        .get("extra_special_tokens")
        .and_then(Value::as_object)
        .into_iter()
        .flatten();
    let mut seen = HashSet::new();
    named
        .chain(extra)
        .filter_map(|(key, value)| Some((key.clone(), token_content(value)?.to_string())))
        .filter(|(key, _)| seen.insert(key.clone()))
        .collect()
}

/// A token given as a string or as an AddedToken object.
fn token_content(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content").and_then(Value::as_str),
        _ => None,
    }
}

fn stop_token_ids(files: &ModelFiles, tokenizer: &Tokenizer) -> Vec<i32> {
    let from_generation = match files
        .generation_config
        .as_ref()
        .and_then(|g| g.get("eos_token_id"))
    {
        Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_i64).collect(),
        Some(id) => id.as_i64().into_iter().collect(),
        None => Vec::new(),
    };
    let from_tokenizer = files
        .tokenizer_config
        .get("eos_token")
        .and_then(token_content)
        .and_then(|token| tokenizer.token_to_id(token))
        .map(i64::from);
    let mut ids: Vec<i32> = Vec::new();
    for id in from_generation.into_iter().chain(from_tokenizer) {
        if let Ok(id) = i32::try_from(id)
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    ids
}

fn renderer_id(template: &str, tokenizer_json: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(template.as_bytes());
    hasher.update([0u8]);
    hasher.update(tokenizer_json);
    let digest = hasher.finalize();
    let mut id = String::from("sha256:");
    for byte in digest.iter().take(8) {
        let _ = write!(id, "{byte:02x}");
    }
    id
}

/// A minijinja error as one line: what went wrong, where, and for
/// `raise_exception` the template's own words.
fn error_text(error: &minijinja::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<jinja::Raised>() {
            return raised.0.clone();
        }
        source = e.source();
    }
    error.to_string()
}
