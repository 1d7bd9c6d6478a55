"""Render chat cases with Hugging Face transformers: the golden answers for
the Rust renderer (host/chat/src/render, tests host/chat/tests/render_golden.rs).

Usage: python render_golden.py MODEL_DIR CASES.json

CASES.json holds a list of {messages, tools, add_generation_prompt,
enable_thinking}; tools and enable_thinking may be null (not passed). For
each case one JSON line goes to stdout: {"text": ..., "tokens": [...]} from
AutoTokenizer.from_pretrained(MODEL_DIR).apply_chat_template, or
{"error": ...} when the template raises. Messages are first normalised as
the renderer documents (metaclaw_chat::render::normalize_messages, after
vLLM), written again here from that description: content parts joined,
null content "", tool-call arguments parsed, `reasoning` copied.
Needs transformers (and jinja2) only: no torch, no hub.
"""

import json
import sys

from transformers import AutoTokenizer


def part_text(part):
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return None
    field = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
    text = part.get(field.get(part.get("type"), ""), None)
    return text if isinstance(text, str) else None


def arguments(args):
    if isinstance(args, (dict, list)):
        return args
    if not isinstance(args, str) or args == "":
        return {}
    try:
        parsed = json.loads(args)
    except ValueError:
        return args
    return parsed if isinstance(parsed, dict) else args


def normalize(message):
    message = dict(message)
    content = message.get("content")
    if content is None:
        message["content"] = ""
    elif isinstance(content, list):
        message["content"] = "\n".join(t for t in map(part_text, content) if t is not None)
    if message.get("role") != "assistant":
        return message
    calls = message.get("tool_calls")
    if calls is None or calls == []:
        message.pop("tool_calls", None)
    elif isinstance(calls, list):
        message["tool_calls"] = []
        for call in calls:
            call = dict(call)
            if isinstance(call.get("function"), dict):
                call["function"] = dict(call["function"], arguments=arguments(call["function"].get("arguments")))
            message["tool_calls"].append(call)
    if "reasoning_content" not in message and isinstance(message.get("reasoning"), str):
        message["reasoning_content"] = message["reasoning"]
    return message


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: render_golden.py MODEL_DIR CASES.json")
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        cases = json.load(f)
    for case in cases:
        kwargs = {}
        if case.get("enable_thinking") is not None:
            kwargs["enable_thinking"] = case["enable_thinking"]
        messages = [normalize(m) for m in case["messages"]]
        common = dict(tools=case.get("tools"), add_generation_prompt=case["add_generation_prompt"], **kwargs)
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, **common)
            encoded = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **common)
        except Exception as e:  # the template's raise_exception, or a template error
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}, ensure_ascii=False))
            continue
        print(json.dumps({"text": text, "tokens": list(encoded["input_ids"])}, ensure_ascii=False))


if __name__ == "__main__":
    main()
