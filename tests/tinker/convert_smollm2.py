"""Convert SmolLM2-135M-Instruct from llama.cpp's GGUF into a Hugging Face folder, and check it.

Usage: python convert_smollm2.py MODEL.gguf OUT_DIR

Run by scripts/fetch-smollm2 with skyrl's venv (numpy, safetensors, tokenizers,
transformers) and the sha256-pinned `gguf` package on PYTHONPATH. No hub, no torch.

Writes OUT_DIR/config.json (LlamaForCausalLM, tied embeddings, the GGUF's
hyperparameters), model.safetensors (float32, dequantized from Q4_1/Q8_0),
tokenizer.json, tokenizer_config.json (the GGUF's chat template),
special_tokens_map.json and generation_config.json; then checks the folder
and exits non-zero if a check fails:

- the tokenizer's vocabulary and merges are the GGUF's, id for id, and text
  round-trips through it unchanged;
- transformers loads the folder's tokenizer and its chat template renders
  ChatML, `<|im_start|>` and `<|im_end|>` one token each;
- a plain numpy forward pass of the converted weights, greedy, answers
  "What is the capital of France?" with Paris (a wrong RoPE layout or tensor
  mapping makes it talk nonsense).

What llama.cpp's converter changed, undone here:
- tensor names (`blk.N.attn_q.weight` for `model.layers.N.self_attn.q_proj.weight`, …);
- q_proj and k_proj rows are permuted per head for llama.cpp's interleaved
  RoPE (pairs (0,1), (2,3), …), where Hugging Face's Llama (and skyrl's)
  rotates the two halves of each head: rows are put back in halves order;
- there is no `output.weight`: the output layer is the embedding (tied).
The tokenizer: GGUF `tokenizer.ggml.pre = "smollm"`, which llama.cpp splits with
`\\p{N}` (each digit alone) and then GPT-2's regex; that is the `tokenizers`
pre-tokenizer Sequence[Digits(individual_digits), ByteLevel(use_regex)], as in
the original SmolLM2 tokenizer.json. Control tokens (GGUF token type 3) are
special added tokens; BOS is never added (tokenizer.ggml.add_bos_token false).
"""

import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
NORMAL = 1
# GGUF tensor name suffix in a block -> Hugging Face Llama name in model.layers.N.
BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
QUESTION = "What is the capital of France?"
ROUND_TRIP = [
    "The capital of France is Paris.",
    "  leading spaces, trailing spaces   \n\n\ttabs\r\nand CRLF",
    "Digits 1234567890, 3.14159 and -42e10; version v0.3.0",
    "def add(a, b):\n    return a + b  # it's code\n",
    "Ünïcödé, 中文：天空为什么是蓝色的？ Emoji 😀👍🏽, zero-width\u200bjoiner, “quotes”",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<b>&amp;</b> {\"json\": [1, 2, null]} \\backslash\\ ~`!@#$%^&*()_+-=[]{}|;':,./<>?",
]


def field(reader: gguf.GGUFReader, key: str):
    f = reader.fields.get(key)
    if f is None:
        sys.exit(f"convert_smollm2: the GGUF has no {key}")
    return f.contents()


def f32(x: float) -> float:
    """A float32 metadata value as the shortest decimal that is that float32 (1e-05, not 9.99e-06)."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def hyperparameters(reader: gguf.GGUFReader) -> dict:
    arch = field(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"convert_smollm2: architecture {arch!r}, expected 'llama'")
    for key in reader.fields:
        if key.startswith("llama.rope.scaling") or key.startswith("llama.expert"):
            sys.exit(f"convert_smollm2: {key} is set; this converter handles plain Llama only")
    hp = {
        "layers": int(field(reader, "llama.block_count")),
        "hidden": int(field(reader, "llama.embedding_length")),
        "intermediate": int(field(reader, "llama.feed_forward_length")),
        "heads": int(field(reader, "llama.attention.head_count")),
        "kv_heads": int(field(reader, "llama.attention.head_count_kv")),
        "context": int(field(reader, "llama.context_length")),
        "rope_theta": f32(field(reader, "llama.rope.freq_base")),
        "rms_eps": f32(field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "vocab": len(reader.fields["tokenizer.ggml.tokens"].data),
    }
    hp["head_dim"] = hp["hidden"] // hp["heads"]
    rope_dim = reader.fields.get("llama.rope.dimension_count")
    if rope_dim is not None and int(rope_dim.contents()) != hp["head_dim"]:
        sys.exit(f"convert_smollm2: RoPE covers {rope_dim.contents()} of {hp['head_dim']} head dimensions (partial RoPE unsupported)")
    return hp


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's convert_hf_to_gguf `permute`: within each head,
    GGUF rows are (pair, 2) interleaved; Hugging Face's are (2, half)."""
    out_features, in_features = w.shape
    half = out_features // heads // 2
    return w.reshape(heads, half, 2, in_features).swapaxes(1, 2).reshape(out_features, in_features)


def weights(reader: gguf.GGUFReader, hp: dict) -> dict:
    tensors = {}
    for t in reader.tensors:
        if t.name in TOP_NAMES:
            name = TOP_NAMES[t.name]
        else:
            parts = t.name.split(".", 2)
            if len(parts) != 3 or parts[0] != "blk" or parts[2] not in BLOCK_NAMES:
                sys.exit(f"convert_smollm2: unexpected tensor {t.name} (output.weight would mean untied embeddings)")
            name = f"model.layers.{int(parts[1])}.{BLOCK_NAMES[parts[2]]}"
        # GGUF lists dimensions fastest first; numpy's row-major shape is the
        # reverse, which is Hugging Face's [out_features, in_features].
        shape = tuple(int(d) for d in reversed(t.shape))
        w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if name.endswith("q_proj.weight"):
            w = unpermute(w, hp["heads"])
        elif name.endswith("k_proj.weight"):
            w = unpermute(w, hp["kv_heads"])
        tensors[name] = np.ascontiguousarray(w)
    h, hd = hp["hidden"], hp["head_dim"]
    expected = {"model.embed_tokens.weight": (hp["vocab"], h), "model.norm.weight": (h,)}
    for i in range(hp["layers"]):
        p = f"model.layers.{i}."
        expected.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (hp["heads"] * hd, h),
            p + "self_attn.k_proj.weight": (hp["kv_heads"] * hd, h),
            p + "self_attn.v_proj.weight": (hp["kv_heads"] * hd, h),
            p + "self_attn.o_proj.weight": (h, hp["heads"] * hd),
            p + "mlp.gate_proj.weight": (hp["intermediate"], h),
            p + "mlp.up_proj.weight": (hp["intermediate"], h),
            p + "mlp.down_proj.weight": (h, hp["intermediate"]),
        })
    got = {k: v.shape for k, v in tensors.items()}
    if got != expected:
        missing = sorted(set(expected) - set(got))[:5]
        wrong = sorted(k for k in got if k in expected and got[k] != expected[k])[:5]
        sys.exit(f"convert_smollm2: tensors differ from a {hp['layers']}-layer Llama: missing {missing}, wrong shape {wrong}")
    return tensors


def build_tokenizer(reader: gguf.GGUFReader):
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("convert_smollm2: tokenizer.ggml.model is not gpt2 (byte-level BPE)")
    pre = field(reader, "tokenizer.ggml.pre")
    if pre != "smollm":
        sys.exit(f"convert_smollm2: pre-tokenizer {pre!r}, expected 'smollm' (\\p{{N}} then GPT-2's regex)")
    if field(reader, "tokenizer.ggml.add_bos_token"):
        sys.exit("convert_smollm2: the GGUF adds BOS; this converter writes a tokenizer that does not")
    tokens = list(field(reader, "tokenizer.ggml.tokens"))
    types = [int(t) for t in field(reader, "tokenizer.ggml.token_type")]
    merges = [tuple(m.split(" ")) for m in field(reader, "tokenizer.ggml.merges")]
    if any(len(m) != 2 for m in merges):
        sys.exit("convert_smollm2: a merge is not two byte-level symbols")
    if len(set(tokens)) != len(tokens):
        sys.exit("convert_smollm2: the GGUF's vocabulary repeats a token")
    odd = sorted({t for t in types if t not in (NORMAL, CONTROL)})
    if odd:
        sys.exit(f"convert_smollm2: token types {odd} (only normal and control are handled)")
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [t for t, ty in zip(tokens, types) if ty == CONTROL]
    tok.add_special_tokens([AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
                            for t in specials])
    return tok, tokens, merges, specials


def write_json(out: str, name: str, obj) -> None:
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def convert(path: str, out: str) -> dict:
    reader = gguf.GGUFReader(path)
    hp = hyperparameters(reader)
    tok, tokens, merges, specials = build_tokenizer(reader)
    ids = {k: int(field(reader, f"tokenizer.ggml.{k}_token_id")) for k in ("bos", "eos", "unknown", "padding")}
    names = {k: tokens[i] for k, i in ids.items()}
    im_end = tokens.index("<|im_end|>")
    template = field(reader, "tokenizer.chat_template")

    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    write_json(out, "config.json", {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hp["hidden"],
        "intermediate_size": hp["intermediate"],
        "num_hidden_layers": hp["layers"],
        "num_attention_heads": hp["heads"],
        "num_key_value_heads": hp["kv_heads"],
        "head_dim": hp["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": hp["context"],
        "rms_norm_eps": hp["rms_eps"],
        "rope_theta": hp["rope_theta"],
        "rope_parameters": {"rope_type": "default", "rope_theta": hp["rope_theta"]},
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": True,
        "vocab_size": hp["vocab"],
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["padding"],
        "use_cache": True,
        "dtype": "float32",
        "torch_dtype": "float32",
    })
    write_json(out, "generation_config.json", {
        "bos_token_id": ids["bos"], "eos_token_id": im_end, "pad_token_id": ids["padding"]})
    write_json(out, "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(tokens.index(s)): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                   "single_word": False, "special": True}
            for s in specials
        },
        "additional_special_tokens": specials,
        "bos_token": names["bos"],
        "eos_token": names["eos"],
        "unk_token": names["unknown"],
        "pad_token": names["padding"],
        "add_bos_token": False,
        "add_prefix_space": False,
        "model_max_length": hp["context"],
        "clean_up_tokenization_spaces": False,
        "chat_template": template,
    })
    write_json(out, "special_tokens_map.json", {
        "bos_token": names["bos"], "eos_token": names["eos"], "unk_token": names["unknown"],
        "pad_token": names["padding"], "additional_special_tokens": specials})
    tensors = weights(reader, hp)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return {"hp": hp, "tokens": tokens, "merges": merges, "specials": specials, "tensors": tensors}


def fail(what: str) -> None:
    sys.exit(f"convert_smollm2: check failed: {what}")


def check_tokenizer(out: str, conv: dict) -> list:
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    tokens = conv["tokens"]
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        fail(f"vocabulary of {tok.get_vocab_size(with_added_tokens=True)} tokens, the GGUF has {len(tokens)}")
    if any(tok.id_to_token(i) != t for i, t in enumerate(tokens)):
        fail("a token id maps to another token than in the GGUF")
    saved = json.load(open(os.path.join(out, "tokenizer.json"), encoding="utf-8"))["model"]["merges"]
    if [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in saved] != conv["merges"]:
        fail("merges differ from the GGUF's")
    for text in ROUND_TRIP:
        enc = tok.encode(text)
        if tok.decode(enc.ids, skip_special_tokens=False) != text:
            fail(f"{text!r} does not round-trip")
    digits = tok.encode("2026").tokens
    if digits != ["2", "0", "2", "6"]:
        fail(f"digits are not split one by one: {digits}")

    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": QUESTION}]
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    want = (f"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    if text != want:
        fail(f"transformers renders {text!r}, not ChatML {want!r}")
    ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
    if list(ids) != tok.encode(want).ids:
        fail("transformers' token ids differ from tokenizer.json's")
    start, end = tokens.index("<|im_start|>"), tokens.index("<|im_end|>")
    if ids.count(start) != 3 or ids.count(end) != 2 or ids[0] != start:
        fail(f"<|im_start|>/<|im_end|> are not single tokens in {ids}")
    for text in ROUND_TRIP:
        if hf.decode(hf.encode(text, add_special_tokens=True)) != text:
            fail(f"transformers: {text!r} does not round-trip")
    return list(ids)


def greedy(tensors: dict, hp: dict, prompt: list, steps: int, stop: int) -> list:
    """Plain numpy Llama (Hugging Face layout: RoPE on the halves of each head), greedy."""
    h, nh, nkv, hd = hp["hidden"], hp["heads"], hp["kv_heads"], hp["head_dim"]
    emb = tensors["model.embed_tokens.weight"]
    inv = 1.0 / hp["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)

    def norm(x, w):
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + hp["rms_eps"]) * w).astype(np.float32)

    def rope(x, cos, sin):  # x: [heads, T, hd]
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    ids = list(prompt)
    for _ in range(steps):
        n = len(ids)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        mask = np.triu(np.full((n, n), -np.inf, dtype=np.float32), 1)
        x = emb[ids]
        for i in range(hp["layers"]):
            p = f"model.layers.{i}."
            y = norm(x, tensors[p + "input_layernorm.weight"])
            q = (y @ tensors[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hd).transpose(1, 0, 2)
            k = (y @ tensors[p + "self_attn.k_proj.weight"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
            v = (y @ tensors[p + "self_attn.v_proj.weight"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            a = (s / s.sum(-1, keepdims=True)) @ v
            x = x + a.transpose(1, 0, 2).reshape(n, nh * hd) @ tensors[p + "self_attn.o_proj.weight"].T
            y = norm(x, tensors[p + "post_attention_layernorm.weight"])
            g = y @ tensors[p + "mlp.gate_proj.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * (y @ tensors[p + "mlp.up_proj.weight"].T)) @ tensors[p + "mlp.down_proj.weight"].T
        last = norm(x[-1], tensors["model.norm.weight"]) @ emb.T  # tied output layer
        ids.append(int(np.argmax(last)))
        if ids[-1] == stop:
            break
    return ids[len(prompt):]


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: convert_smollm2.py MODEL.gguf OUT_DIR")
    conv = convert(sys.argv[1], sys.argv[2])
    hp = conv["hp"]
    prompt = check_tokenizer(sys.argv[2], conv)
    answer_ids = greedy(conv["tensors"], hp, prompt, steps=12, stop=conv["tokens"].index("<|im_end|>"))
    answer = Tokenizer.from_file(os.path.join(sys.argv[2], "tokenizer.json")).decode(answer_ids)
    if "Paris" not in answer:
        fail(f"greedy answer to {QUESTION!r} is {answer!r}, no Paris (weights or RoPE layout wrong?)")
    print(f"SmolLM2 written to {sys.argv[2]}: {hp['layers']} layers, hidden {hp['hidden']}, heads {hp['heads']}/{hp['kv_heads']}, "
          f"vocab {hp['vocab']}, {len(conv['specials'])} special tokens; greedy answer: {answer!r}")


if __name__ == "__main__":
    main()
