//! What the request says: the user's last message, the system prompt, the
//! tools it offers; turned into the parts of an answer.

use metaclaw_wire::agent::openclaw;
use metaclaw_wire::text::value_text;
use serde_json::Value;

use crate::answer::Part;

fn messages(request: &Value) -> &[Value] {
    request["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

pub(crate) fn last_user_text(request: &Value) -> String {
    messages(request)
        .iter()
        .rev()
        .filter(|m| m["role"] == "user")
        .map(|m| value_text(&m["content"]))
        .find(|t| !openclaw::is_internal_context(t))
        .unwrap_or_default()
}

pub(crate) fn system_text(request: &Value) -> String {
    messages(request)
        .iter()
        .filter(|m| m["role"] == "system" || m["role"] == "developer")
        .map(|m| value_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The last message that is not OpenClaw's internal context.
fn last_real_message(request: &Value) -> Option<&Value> {
    messages(request).iter().rev().find(|m| {
        !(m["role"] == "user" && openclaw::is_internal_context(&value_text(&m["content"])))
    })
}

pub(crate) fn last_message_role(request: &Value) -> Option<&str> {
    last_real_message(request).and_then(|m| m["role"].as_str())
}

pub(crate) fn last_message_text(request: &Value) -> String {
    last_real_message(request)
        .map(|m| value_text(&m["content"]))
        .unwrap_or_default()
}

/// Words with their trailing whitespace: concatenated, they are the text.
pub(crate) fn words(text: &str) -> Vec<Part> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(Part::Text(text[start..i].to_string()));
            start = i;
            in_space = false;
        }
    }
    if start < text.len() {
        out.push(Part::Text(text[start..].to_string()));
    }
    out
}

/// `k` calls: the tools the user's message names (else the request's first
/// tools, else `lookup`), with the first JSON object in the message as
/// arguments (else `{}`).
/// The names of the tools the request offers.
pub(crate) fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn tool_calls(request: &Value, k: u32, seq: u64) -> Vec<Part> {
    let user = last_user_text(request);
    let tools = tool_names(request);
    let mut named: Vec<String> = tools
        .iter()
        .filter(|t| user.contains(t.as_str()))
        .cloned()
        .collect();
    named.extend(tools.iter().filter(|t| !user.contains(t.as_str())).cloned());
    if named.is_empty() {
        named.push("lookup".into());
    }
    let arguments = first_json_object(&user).unwrap_or_else(|| "{}".into());
    (0..k as usize)
        .map(|i| Part::Tool {
            id: format!("call_{seq}_{i}"),
            name: named[i % named.len()].clone(),
            arguments: arguments.clone(),
        })
        .collect()
}

/// The user's message names one of the offered tools and carries a JSON
/// object for its arguments.
pub(crate) fn names_a_tool_call(request: &Value) -> bool {
    let user = last_user_text(request);
    first_json_object(&user).is_some()
        && request["tools"].as_array().is_some_and(|tools| {
            tools.iter().any(|t| {
                t["function"]["name"]
                    .as_str()
                    .is_some_and(|name| user.contains(name))
            })
        })
}

fn first_json_object(text: &str) -> Option<String> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let candidate = &text[start..start + i + 1];
                    return serde_json::from_str::<Value>(candidate)
                        .ok()
                        .map(|v| v.to_string());
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::behaviour::{Behaviour, behaviour};
    use serde_json::json;

    #[test]
    fn words_concatenate_back_to_the_text() {
        for text in ["", "one", "  lead and  double  spaces\n", "Say PONG"] {
            let joined: String = words(text)
                .into_iter()
                .map(|p| {
                    if let Part::Text(t) = p {
                        t
                    } else {
                        String::new()
                    }
                })
                .collect();
            assert_eq!(joined, text);
        }
    }

    #[test]
    fn the_agent_model_calls_a_tool_only_when_asked() {
        let tools = json!([{"type": "function", "function": {"name": "read"}}]);
        let asked = json!({"messages": [{"role": "user", "content": "read {\"path\": \"a.txt\"}"}], "tools": tools});
        let plain = json!({"messages": [{"role": "user", "content": "Say PONG"}], "tools": tools});
        assert!(names_a_tool_call(&asked));
        assert!(!names_a_tool_call(&plain));
        assert_eq!(behaviour("metaclaw/agent"), Some(Behaviour::Agent));
    }

    #[test]
    fn tool_calls_use_the_named_tool_and_inline_arguments() {
        let request = json!({
            "messages": [{"role": "user", "content": "please read {\"path\": \"hello.txt\"}"}],
            "tools": [{"type": "function", "function": {"name": "exec"}}, {"type": "function", "function": {"name": "read"}}],
        });
        let parts = tool_calls(&request, 1, 7);
        let Part::Tool {
            name,
            arguments,
            id,
        } = &parts[0]
        else {
            panic!()
        };
        assert_eq!(name, "read");
        assert_eq!(arguments, "{\"path\":\"hello.txt\"}");
        assert_eq!(id, "call_7_0");
    }
}
