"""Generate a tiny random Qwen3 model, offline and deterministically.

Usage: python make_tiny_qwen3.py OUT_DIR

Settings (docs reference tinker-protocol.md §16.1): Qwen3ForCausalLM, 2 layers,
hidden 64, intermediate 128, 4 attention / 2 KV heads, head dim 16, vocab 16384
(byte-level BPE trained on the small corpus below, plus Qwen3's added tokens,
padded to a multiple of 64),
max positions 16384, float32, untied embeddings, weights normal(0, 1) * 0.02
(norm weights 1), special tokens <|endoftext|> (pad), <|im_start|>,
<|im_end|> (EOS), Qwen3's non-special added tokens <tool_call>, </tool_call>,
<tool_response>, </tool_response>, <think>, </think>, and a Qwen3-style chat
template with tools and thinking (the renderer's golden tests in host/chat
use these files; tests/fixtures/tiny-qwen3 holds a copy of the tokenizer
and template files, checked to be byte-identical). Needs numpy, safetensors and
tokenizers only: no hub, no torch. Same output bytes on every run.
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 20240601
VOCAB = 16384
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added after training, as in Qwen3: matched whole in text, but not special
# (decoding with skip_special_tokens keeps them).
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 2,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "use_cache": True,
    "dtype": "float32",
    "torch_dtype": "float32",
    "vocab_size": VOCAB,
}
# Qwen3's template, trimmed: tools in the system turn (one `tojson` per
# tool), tool calls as <tool_call> JSON, tool results as a user turn of
# <tool_response>s, reasoning kept only for the assistant turns after the
# last real user query, and `enable_thinking=false` closing an empty
# <think> block in the generation prompt.
CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""
CORPUS = """
The quick brown fox jumps over the lazy dog. A small model learns to answer short questions.
You are a helpful assistant. The user asks a question and the assistant answers it politely.
Hello, how are you today? I am fine, thank you. What is the weather like? It is sunny and warm.
Please write a function that adds two numbers. def add(a, b): return a + b
The proxy records each turn, scores it, and trains a small adapter on the good answers.
system user assistant tool call result error retry session model sample train weights loss
0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / = ( ) [ ] { } < > : ; , . ! ? ' " # $ % & @ _
""".strip()


def openclaw_corpus() -> list:
    """The text of the captured OpenClaw requests (tests/fixtures/openclaw),
    as the chat template renders it: its system prompt, messages and tools
    (one `tojson` per tool). Trained on, so the real agent's ~45 KB first
    prompt is a few thousand tokens, not tens of thousands: a CPU training
    server can then serve it (tests/openclaw/e2e.sh in rl mode)."""
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "openclaw")
    lines = []
    for name in sorted(os.listdir(fixtures)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(fixtures, name)) as f:
            body = json.load(f)["body"]
        texts = []
        items = list(body.get("messages", []))
        if isinstance(body.get("input"), list):
            items += body["input"]
        for message in items:
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(part.get("text", "") for part in content if isinstance(part, dict))
        system = body.get("system")
        if isinstance(system, list):
            texts.extend(block.get("text", "") for block in system)
        elif isinstance(system, str):
            texts.append(system)
        texts.extend(json.dumps(tool, ensure_ascii=False) for tool in body.get("tools", []))
        for text in texts:
            lines.extend(text.splitlines())
    return lines


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # No word split (use_regex=False): merges may span words, so the agent's
    # long, repetitive prompts come out short (a test model's tokenizer).
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(ADDED),
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = [line for line in CORPUS.splitlines() + openclaw_corpus() for _ in range(8)]
    tok.train_from_iterator(lines, trainer=trainer)
    tok.add_tokens([AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=False) for t in ADDED])
    return tok


def weights(rng: np.random.Generator, cfg: dict) -> dict:
    h, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nh, nkv, vocab = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]

    def normal(*shape):  # HF Linear layout: [out_features, in_features]
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n):
        return np.ones((n,), dtype=np.float32)

    t = {"model.embed_tokens.weight": normal(vocab, h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ones(h)
        t[p + "post_attention_layernorm.weight"] = ones(h)
        t[p + "self_attn.q_proj.weight"] = normal(nh * hd, h)
        t[p + "self_attn.k_proj.weight"] = normal(nkv * hd, h)
        t[p + "self_attn.v_proj.weight"] = normal(nkv * hd, h)
        t[p + "self_attn.o_proj.weight"] = normal(h, nh * hd)
        t[p + "self_attn.q_norm.weight"] = ones(hd)
        t[p + "self_attn.k_norm.weight"] = ones(hd)
        t[p + "mlp.gate_proj.weight"] = normal(inter, h)
        t[p + "mlp.up_proj.weight"] = normal(inter, h)
        t[p + "mlp.down_proj.weight"] = normal(h, inter)
    t["model.norm.weight"] = ones(h)
    t["lm_head.weight"] = normal(vocab, h)
    return t


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_qwen3.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    tok = train_tokenizer()
    n_tokens = tok.get_vocab_size(with_added_tokens=True)
    vocab = -(-n_tokens // 64) * 64
    assert vocab <= VOCAB, f"tokenizer has {n_tokens} tokens, more than the model's {VOCAB}"
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    tok.save(os.path.join(out, "tokenizer.json"))

    cfg = dict(CONFIG)
    cfg.update(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )

    def write_json(name, obj):
        with open(os.path.join(out, name), "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
            f.write("\n")

    write_json("config.json", cfg)
    write_json(
        "generation_config.json",
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "pad_token_id": cfg["pad_token_id"]},
    )
    added = {
        str(tok.token_to_id(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                                  "special": s in SPECIALS}
        for s in SPECIALS + ADDED
    }
    write_json(
        "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "added_tokens_decoder": added,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "model_max_length": cfg["max_position_embeddings"],
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    write_json("special_tokens_map.json", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                           "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    with open(os.path.join(out, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)

    rng = np.random.default_rng(SEED)
    save_file(weights(rng, cfg), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    print(f"tiny Qwen3 written to {out}: {n_tokens} tokens in the tokenizer, vocab {vocab}, special ids {ids}")


if __name__ == "__main__":
    main()
