//! Kimi K2 tool calls: special tokens, all calls in one section after the
//! content, each named by an id `functions.NAME:IDX` that the model refers
//! to later (its template renders tool results as `## Return of ID`):
//!
//! `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>`
//!
//! As vLLM's `kimi_k2` parser, this also reads the section markers'
//! singular spelling and a name without `functions.`.

use super::{
    CallIds, Family, Malformed, ToolCall, ToolCallParser, add_error, arguments_json, json_prefix,
};

pub(crate) const SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
pub(crate) const SECTION_BEGIN_SINGULAR: &str = "<|tool_call_section_begin|>";
const SECTION_END: &str = "<|tool_calls_section_end|>";
const SECTION_END_SINGULAR: &str = "<|tool_call_section_end|>";
const CALL_BEGIN: &str = "<|tool_call_begin|>";
const ARGUMENT_BEGIN: &str = "<|tool_call_argument_begin|>";
const CALL_END: &str = "<|tool_call_end|>";
const PREFIX: &str = "functions.";

const SECTION_BEGINS: [&str; 2] = [SECTION_BEGIN, SECTION_BEGIN_SINGULAR];
const SECTION_ENDS: [&str; 2] = [SECTION_END, SECTION_END_SINGULAR];

/// The [`ToolCallParser`] of [`Family::KimiK2`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KimiK2Parser;

impl ToolCallParser for KimiK2Parser {
    fn family(&self) -> Family {
        Family::KimiK2
    }

    fn parse(&self, text: &str, ids: &mut CallIds) -> (String, Vec<ToolCall>, Option<String>) {
        let mut content = String::new();
        let mut calls = Vec::new();
        let mut error = None;
        let mut pos = 0;
        let mut number = 0;
        while let Some((found, marker)) = find_any(&text[pos..], &SECTION_BEGINS) {
            content.push_str(&text[pos..pos + found]);
            let mut cursor = pos + found + marker;
            loop {
                let rest = &text[cursor..];
                cursor += rest.len() - rest.trim_start().len();
                let rest = &text[cursor..];
                if rest.is_empty() {
                    // Unclosed, but every call in it complete: nothing is lost.
                    break;
                }
                if let Some(end) = SECTION_ENDS.iter().find(|end| rest.starts_with(*end)) {
                    cursor += end.len();
                    break;
                }
                if !rest.starts_with(CALL_BEGIN) {
                    let end = cursor + next_stop(rest).unwrap_or(rest.len());
                    content.push_str(&text[cursor..end]);
                    add_error(
                        &mut error,
                        "text in the tool-call section outside any call".to_owned(),
                    );
                    cursor = end;
                    continue;
                }
                number += 1;
                match call(text, cursor + CALL_BEGIN.len()) {
                    Ok(Call {
                        name,
                        own_id,
                        arguments,
                        end,
                    }) => {
                        let id = match own_id {
                            Some(id) => ids.claim(id),
                            None => ids.next_id(),
                        };
                        calls.push(ToolCall {
                            id,
                            name: name.to_owned(),
                            arguments,
                        });
                        cursor = end;
                    }
                    Err((end, why)) => {
                        content.push_str(&text[cursor..end]);
                        add_error(&mut error, format!("tool call {number}: {why}"));
                        cursor = end;
                    }
                }
            }
            pos = cursor;
        }
        content.push_str(&text[pos..]);
        (content.trim().to_owned(), calls, error)
    }

    /// As Kimi K2's template renders calls: no whitespace between markers,
    /// the arguments as given (OpenAI's string arguments verbatim). A call
    /// whose id is not Kimi's own gets `functions.NAME:IDX`, IDX its place.
    fn format(&self, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return String::new();
        }
        let mut out = String::from(SECTION_BEGIN);
        for (index, call) in calls.iter().enumerate() {
            let id = match header(&call.id) {
                Ok((name, Some(_))) if name == call.name => call.id.clone(),
                _ => format!("{PREFIX}{}:{index}", call.name),
            };
            let arguments = match call.arguments.trim() {
                "" => "{}",
                arguments => arguments,
            };
            out.push_str(&format!(
                "{CALL_BEGIN}{id}{ARGUMENT_BEGIN}{arguments}{CALL_END}"
            ));
        }
        out.push_str(SECTION_END);
        out
    }
}

/// A well-formed call, and where its text ends.
struct Call<'a> {
    name: &'a str,
    /// The header when it is the model's own id (`NAME:IDX`).
    own_id: Option<&'a str>,
    arguments: String,
    end: usize,
}

/// The call whose header (its id) starts at `start`; or the end of its
/// text (to keep in the content) and why it is malformed.
fn call(text: &str, start: usize) -> Result<Call<'_>, (usize, Malformed)> {
    let rest = &text[start..];
    // A malformed call runs to its `<|tool_call_end|>`, or, when another
    // call or the section's end comes first or nothing ends it (the sample
    // was cut off), up to there.
    let stop = next_stop(rest);
    let ended = rest[..stop.unwrap_or(rest.len())].find(CALL_END);
    let bad_end = match ended {
        Some(end) => start + end + CALL_END.len(),
        None => start + stop.unwrap_or(rest.len()),
    };
    let bad = |why: Malformed| match ended {
        Some(_) => (bad_end, why),
        None => (bad_end, Malformed::Unclosed(CALL_END)),
    };
    let limit = ended.or(stop).unwrap_or(rest.len());
    let Some(argument_begin) = rest[..limit].find(ARGUMENT_BEGIN) else {
        return Err(bad(Malformed::Missing(ARGUMENT_BEGIN)));
    };
    let (name, own_id) = header(rest[..argument_begin].trim()).map_err(bad)?;
    let arguments_start = start + argument_begin + ARGUMENT_BEGIN.len();
    let arguments_text = &text[arguments_start..];
    let leading = arguments_text.len() - arguments_text.trim_start().len();
    if arguments_text[leading..].starts_with(CALL_END) {
        // No arguments at all: a tool without parameters.
        return Ok(Call {
            name,
            own_id,
            arguments: "{}".to_owned(),
            end: arguments_start + leading + CALL_END.len(),
        });
    }
    let (value, used) = json_prefix(arguments_text).map_err(bad)?;
    let after = arguments_text.get(used..).unwrap_or_default();
    let after_trimmed = after.trim_start();
    if !after_trimmed.starts_with(CALL_END) {
        return Err(bad(Malformed::TextAfter("the arguments", CALL_END)));
    }
    let end = arguments_start + used + (after.len() - after_trimmed.len()) + CALL_END.len();
    let arguments = arguments_json(Some(&value)).map_err(|why| (end, why))?;
    Ok(Call {
        name,
        own_id,
        arguments,
        end,
    })
}

/// A call's header, `functions.NAME:IDX`: the name, and the header itself
/// as the call's id when it has the index (the model's own id).
fn header(header: &str) -> Result<(&str, Option<&str>), Malformed> {
    let (base, indexed) = match header.rsplit_once(':') {
        Some((base, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => {
            (base, true)
        }
        _ => (header, false),
    };
    let name = base.strip_prefix(PREFIX).unwrap_or(base);
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '<' || c == '>') {
        return Err(Malformed::NoFunctionName(header.to_owned()));
    }
    Ok((name, indexed.then_some(header)))
}

/// Where the next call or the section's end starts. (Searched only up to
/// the next call, so that a degenerate sample of many unfinished calls is
/// not scanned to its end once per call.)
fn next_stop(text: &str) -> Option<usize> {
    let call = text.find(CALL_BEGIN);
    let before_call = &text[..call.unwrap_or(text.len())];
    find_any(before_call, &SECTION_ENDS)
        .map(|(at, _)| at)
        .or(call)
}

/// The first of `markers` (all `<|…|>` tokens) in `text`: where, and its
/// length. One pass, stopping at the first.
fn find_any(text: &str, markers: &[&str]) -> Option<(usize, usize)> {
    text.match_indices("<|").find_map(|(at, _)| {
        let rest = &text[at..];
        markers
            .iter()
            .find(|marker| rest.starts_with(**marker))
            .map(|marker| (at, marker.len()))
    })
}
