//! A sampled completion parsed back into the assistant message an
//! OpenAI/Anthropic client expects: content, reasoning, tool calls.
//!
//! The text is the decoded sample with its special tokens kept (they carry
//! the tool-call syntax) and the final stop token already stripped. Each
//! model family writes tool calls its own way, so each has a
//! [`ToolCallParser`]; reasoning (`<think>`) is shared. Parsing never fails:
//! a malformed tool call stays in the content as text, and
//! [`Parsed::error`] says why, so the agent sees what the model wrote and
//! the trainer can tell the sample did not parse.

mod hermes;
mod kimi_k2;
mod think;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub use hermes::HermesParser;
pub use kimi_k2::KimiK2Parser;

/// A model family's tool-call syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Qwen2.5, Qwen3, Hermes: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
    Hermes,
    /// Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{…}<|tool_call_end|><|tool_calls_section_end|>`.
    KimiK2,
}

impl Family {
    /// Every family, for configuration messages and tests.
    pub const ALL: [Family; 2] = [Family::Hermes, Family::KimiK2];

    /// The name configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            Family::Hermes => "hermes",
            Family::KimiK2 => "kimi_k2",
        }
    }

    /// A family from its name or the name of a model that uses it
    /// (case, `-` and `_` do not matter): people write the model's name.
    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.trim().to_ascii_lowercase().replace('-', "_");
        match name.as_str() {
            "hermes" | "qwen" | "qwen2" | "qwen2.5" | "qwen2_5" | "qwen3" => Some(Family::Hermes),
            "kimi_k2" | "kimi" | "kimik2" => Some(Family::KimiK2),
            _ => None,
        }
    }

    /// From the chat template's text: which tool-call syntax it teaches
    /// (`<tool_call>` → Hermes; `<|tool_calls_section_begin|>` → KimiK2);
    /// None when it names none.
    ///
    /// Templates that wrap a different syntax in `<tool_call>` (Qwen3-Coder's
    /// `<function=…>`, GLM's `<arg_key>`) are None too: the Hermes parser
    /// would turn every one of their calls into an error.
    pub fn detect(template: &str) -> Option<Self> {
        if template.contains(kimi_k2::SECTION_BEGIN)
            || template.contains(kimi_k2::SECTION_BEGIN_SINGULAR)
        {
            return Some(Family::KimiK2);
        }
        if template.contains(hermes::OPEN)
            && !template.contains("<function=")
            && !template.contains("<arg_key>")
        {
            return Some(Family::Hermes);
        }
        None
    }

    /// This family's parser.
    pub fn parser(self) -> &'static dyn ToolCallParser {
        match self {
            Family::Hermes => &HermesParser,
            Family::KimiK2 => &KimiK2Parser,
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One tool call of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Unique within the answer; the model's own id where its syntax has one
    /// (Kimi's `functions.NAME:IDX`, which it refers to later).
    pub id: String,
    pub name: String,
    /// JSON text of an object, compact.
    pub arguments: String,
}

/// A sample parsed into an assistant message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    pub content: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Why the sample did not parse (a malformed tool call): its text is in
    /// `content` unchanged.
    pub error: Option<String>,
}

/// One family's tool-call syntax, both ways.
pub trait ToolCallParser: Send + Sync {
    fn family(&self) -> Family;
    /// Splits tool calls out of `text` (reasoning already removed): the
    /// content (trimmed), the calls, and why any call was malformed. A
    /// malformed call stays in the returned content as text, and the
    /// well-formed ones around it are still returned.
    fn parse(&self, text: &str, ids: &mut CallIds) -> (String, Vec<ToolCall>, Option<String>);
    /// The model's own syntax for `calls` (what its template renders for an
    /// assistant message with these tool calls, after its content): for
    /// tests and the fake training server. Empty for no calls.
    fn format(&self, calls: &[ToolCall]) -> String;
}

/// Parses a sample: reasoning, then `family`'s tool calls (none when
/// `family` is None). `thinking_open`: the generation prompt ended inside an
/// open `<think>` (the completion starts in reasoning).
pub fn parse(text: &str, family: Option<Family>, thinking_open: bool) -> Parsed {
    parse_with_ids(text, family, thinking_open, &mut CallIds::fresh(text))
}

/// [`parse`] with the caller's tool-call ids: [`CallIds::seeded`] makes them
/// reproducible.
pub fn parse_with_ids(
    text: &str,
    family: Option<Family>,
    thinking_open: bool,
    ids: &mut CallIds,
) -> Parsed {
    let (reasoning, rest) = think::split_reasoning(text, thinking_open);
    let Some(family) = family else {
        return Parsed {
            content: rest.to_owned(),
            reasoning,
            ..Parsed::default()
        };
    };
    let (content, tool_calls, error) = family.parser().parse(rest, ids);
    Parsed {
        content,
        reasoning,
        tool_calls,
        error,
    }
}

/// Makes the ids of an answer's tool calls: `call_` and 24 letters and
/// digits, never one already used in the answer.
///
/// [`CallIds::fresh`] (what [`parse`] uses) mixes the time and a
/// process-wide counter into the seed, because an agent's conversation can
/// hold the same sampled text twice (the same `ls` twice), and clients match
/// tool results to calls by id across the whole conversation.
#[derive(Debug, Clone)]
pub struct CallIds {
    state: u64,
    used: HashSet<String>,
}

impl CallIds {
    /// Ids from a fixed seed: the same seed gives the same ids (tests,
    /// replays, the fake training server).
    pub fn seeded(seed: u64) -> Self {
        CallIds {
            state: seed,
            used: HashSet::new(),
        }
    }

    /// Ids unlikely to have been given before, by this process or another.
    pub fn fresh(text: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        let mut seed = fnv1a(text.as_bytes());
        seed = splitmix64(&mut seed) ^ count.rotate_left(32) ^ nanos;
        Self::seeded(seed)
    }

    /// A new id.
    pub fn next_id(&mut self) -> String {
        const ALPHABET: &[u8; 62] =
            b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        loop {
            let mut id = String::with_capacity(29);
            id.push_str("call_");
            for _ in 0..24 {
                let index = (splitmix64(&mut self.state) % 62) as usize;
                id.push(char::from(ALPHABET[index]));
            }
            if self.used.insert(id.clone()) {
                return id;
            }
        }
    }

    /// The model's own id for a call, or a new one where the answer already
    /// used it (ids must be unique within an answer).
    pub fn claim(&mut self, id: &str) -> String {
        if !id.is_empty() && self.used.insert(id.to_owned()) {
            id.to_owned()
        } else {
            self.next_id()
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A tool call's arguments as compact JSON text of an object. Absent or
/// null arguments are `{}` (a call of a tool without parameters), and a
/// JSON string holding an object is that object: Qwen2.5's template
/// renders OpenAI's string arguments that way, and models copy it.
pub(crate) fn arguments_json(value: Option<&Value>) -> Result<String, Malformed> {
    match value {
        None | Some(Value::Null) => Ok("{}".to_owned()),
        Some(object @ Value::Object(_)) => Ok(object.to_string()),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(object @ Value::Object(_)) => Ok(object.to_string()),
            Ok(_) => Err(Malformed::ArgumentsTextNotObject),
            Err(e) => Err(Malformed::ArgumentsTextNotJson(e.to_string())),
        },
        Some(other) => Err(Malformed::ArgumentsNotObject(kind(other))),
    }
}

/// Why a tool call in a sample is malformed (recorded with the sample as
/// its parse error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Malformed {
    #[error("arguments are a string that is not a JSON object")]
    ArgumentsTextNotObject,
    #[error("arguments are a string that is not JSON: {0}")]
    ArgumentsTextNotJson(String),
    #[error("arguments are {0}, not an object")]
    ArgumentsNotObject(&'static str),
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("no JSON")]
    NoJson,
    #[error("{0}, not a JSON object")]
    NotAnObject(&'static str),
    #[error("empty \"name\"")]
    EmptyName,
    #[error("\"name\" is {0}, not a string")]
    NameNotText(&'static str),
    #[error("no \"name\"")]
    NoName,
    #[error("no function name in {0:?}")]
    NoFunctionName(String),
    /// A marker the call needs is missing.
    #[error("no {0}")]
    Missing(&'static str),
    /// Nothing ends the call: the sample was cut off.
    #[error("no {0} (cut off?)")]
    Unclosed(&'static str),
    /// Text after what (the JSON object, the arguments), not the marker.
    #[error("text after {0}, not {1}")]
    TextAfter(&'static str, &'static str),
}

/// What a JSON value is, for error messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The JSON value at the start of `text` (after whitespace) and the byte
/// offset just past it. Parsing the value itself, rather than cutting at
/// the next closing marker, keeps a string argument that contains the
/// marker (a file being written about tool calls) intact.
pub(crate) fn json_prefix(text: &str) -> Result<(Value, usize), Malformed> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match values.next() {
        Some(Ok(value)) => Ok((value, values.byte_offset())),
        Some(Err(e)) => Err(Malformed::InvalidJson(e.to_string())),
        None => Err(Malformed::NoJson),
    }
}

/// Appends a malformed call's error to the sample's.
pub(crate) fn add_error(errors: &mut Option<String>, message: String) {
    match errors {
        Some(all) => {
            all.push_str("; ");
            all.push_str(&message);
        }
        None => *errors = Some(message),
    }
}
