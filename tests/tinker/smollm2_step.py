"""SmolLM2 trains with the project's launcher: a check against skyrl 0.3.0 on CPU.

Usage: scripts/skyrl-cpu smoke --model smollm2 --client tests/tinker/smollm2_step.py [--passes N]
   or: python smollm2_step.py BASE_URL --model DIR [--passes N] [--wire FILE]
       (against `scripts/skyrl-cpu start --model smollm2`; DIR is its folder)

Creates a LoRA (rank 8) on the base model, then: a greedy ChatML answer to
"What is the capital of France?" from the base model must name Paris; N
training steps (default 2), each sampling 4 answers to each of 2 prompts
(temperature 1), one forward_backward (importance_sampling, advantages
favouring shorter answers within each prompt's group) and one optim_step
(Adam, lr 1e-4); then save_weights_for_sampler and a greedy answer from the
saved LoRA, which must still name Paris and must differ from the base's in
tokens or logprobs (the step changed the weights). skyrl refuses
create_model for a tied-embedding model when train_unembed is on, so this
fails if tests/tinker/launcher.py turns it on for SmolLM2.

Prints each phase's wall time (the first step includes JAX compilation),
the step-1 mismatch between sampler and learner logprobs (≈ 0: same weights),
and the engine's resident memory (now and peak, from /proc) after loading,
sampling and training. Stdlib, tokenizers, transformers and psutil (skyrl's venv).
"""

import argparse
import sys

import psutil

from smoke import Client, datum, timer

QUESTION = "What is the capital of France?"
PROMPTS = [QUESTION, "Name one primary colour."]
N, MAX_TOKENS, LR = 4, 24, 1e-4


def engine_memory(port: int) -> str:
    """RSS and peak RSS (VmHWM) of skyrl's engine process, the child of the server listening on `port`."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            for p in psutil.Process(conn.pid).children(recursive=True):
                if "skyrl.tinker.engine" in " ".join(p.cmdline()):
                    status = dict(line.split(":", 1) for line in open(f"/proc/{p.pid}/status") if ":" in line)
                    gib = lambda key: int(status[key].split()[0]) / 2**20  # noqa: E731 (kB -> GiB)
                    return f"engine RSS {gib('VmRSS'):.2f} GiB (peak {gib('VmHWM'):.2f} GiB)"
    return "engine RSS unknown (no engine process found for the port)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("--model", required=True, help="the model folder (tokenizer and chat template)")
    ap.add_argument("--passes", type=int, default=2, help="training steps")
    ap.add_argument("--wire", help="write every request/response as JSON lines here")
    args = ap.parse_args()
    port = int(args.base_url.rstrip("/").rsplit(":", 1)[1])

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")

    def prompt_ids(text):
        return list(tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                            add_generation_prompt=True, return_dict=True)["input_ids"])

    c = Client(args.base_url, open(args.wire, "w") if args.wire else None)
    c.ok("POST", "/api/v1/client/config", {"sdk_version": "metaclaw-smollm2-step"})
    base_model = c.ok("GET", "/api/v1/get_server_capabilities")["supported_models"][0]["model_name"]
    print(f"base model {base_model}; {engine_memory(port)}", flush=True)

    timings = []
    timed = timer(timings, "", 44)

    session = c.ok("POST", "/api/v1/create_session", {"tags": [], "user_metadata": {}, "sdk_version": "metaclaw-smollm2-step",
                                                       "type": "create_session"})["session_id"]

    def create_model():
        fut = c.ok("POST", "/api/v1/create_model", {
            "session_id": session, "model_seq_id": 0, "base_model": base_model,
            "lora_config": {"rank": 8, "seed": 0}, "type": "create_model"})
        return c.result(fut, "create_model (a tied-embedding model with train_unembed on is refused here)")["model_id"]

    model_id = timed("create_model (LoRA rank 8)", create_model)
    seq = iter(range(1, 1000))

    def sample(selector, text, n, temperature, what):
        body = {"num_samples": n, "prompt": {"chunks": [{"type": "encoded_text", "tokens": prompt_ids(text)}]},
                "sampling_params": {"max_tokens": MAX_TOKENS, "temperature": temperature, "seed": 7, "stop": [im_end]},
                "type": "sample", **selector}
        seqs = c.result(c.ok("POST", "/api/v1/asample", body), what)["sequences"]
        assert len(seqs) == n and all(len(s["logprobs"]) == len(s["tokens"]) > 0 for s in seqs), seqs
        return seqs

    def answer(seqs):
        return tok.decode([t for t in seqs[0]["tokens"] if t != im_end])

    base = timed("greedy answer, base model", lambda: sample({"base_model": base_model}, QUESTION, 1, 0.0, "base"))
    print(f"  base: {answer(base)!r}; {engine_memory(port)}", flush=True)
    assert "Paris" in answer(base), f"the base model does not name Paris: {answer(base)!r}"

    after, after_path = None, None
    for step in range(1, args.passes + 1):
        groups = timed(f"step {step}: sample {N} x {len(PROMPTS)} (temperature 1)",
                       lambda: [(text, sample({"base_model": base_model} if step == 1 else {"model_path": after_path},
                                              text, N, 1.0, "rollout")) for text in PROMPTS])
        data = []
        for text, seqs in groups:
            mean = sum(len(s["tokens"]) for s in seqs) / len(seqs)
            # Shorter than the group's mean: a positive advantage.
            data.extend(datum(prompt_ids(text), s, (mean - len(s["tokens"])) / MAX_TOKENS) for s in seqs)
        fb = timed(f"step {step}: forward_backward ({len(data)} samples)", lambda: c.result(c.ok(
            "POST", "/api/v1/forward_backward", {"model_id": model_id, "seq_id": next(seq),
                                                 "forward_backward_input": {"data": data, "loss_fn": "importance_sampling"}}),
            "forward_backward"))
        if step == 1:  # zero-initialised LoRA: the learner is the sampler
            diffs = [abs(a - b) for d, o in zip(data, fb["loss_fn_outputs"])
                     for a, b, adv in zip(o["logprobs"]["data"], d["loss_fn_inputs"]["logprobs"]["data"],
                                          d["loss_fn_inputs"]["advantages"]["data"]) if adv != 0.0]
            print(f"  step 1: |learner - sampler logprob| mean {sum(diffs) / max(len(diffs), 1):.2e}, max {max(diffs, default=0):.2e}"
                  f" over {len(diffs)} tokens", flush=True)
        timed(f"step {step}: optim_step (lr {LR})", lambda: c.result(c.ok("POST", "/api/v1/optim_step", {
            "model_id": model_id, "seq_id": next(seq), "type": "optim_step",
            "adam_params": {"learning_rate": LR, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}}),
            "optim_step"))
        print(f"  step {step}: {engine_memory(port)}", flush=True)
        after_path = timed(f"step {step}: save_weights_for_sampler", lambda: c.result(c.ok(
            "POST", "/api/v1/save_weights_for_sampler", {"model_id": model_id, "path": f"step-{step}", "seq_id": next(seq),
                                                          "type": "save_weights_for_sampler"}), "save_weights_for_sampler"))["path"]
        after = timed(f"step {step}: greedy answer, trained LoRA",
                      lambda: sample({"model_path": after_path}, QUESTION, 1, 0.0, "trained"))
        print(f"  step {step}: {answer(after)!r}", flush=True)

    assert after is not None, "no training step ran (--passes 0)"
    assert "Paris" in answer(after), f"after training the answer no longer names Paris: {answer(after)!r}"
    same_tokens = after[0]["tokens"] == base[0]["tokens"]
    moved = max(abs(a - b) for a, b in zip(after[0]["logprobs"], base[0]["logprobs"])) if same_tokens else None
    assert not same_tokens or moved > 1e-5, "the trained LoRA answers with the base model's logprobs: no step took effect"
    print(f"trained answer {'differs in tokens' if moved is None else f'same tokens, logprobs moved up to {moved:.2e}'}; "
          f"{engine_memory(port)}", flush=True)
    print("\n| phase | seconds |\n|---|---:|")
    for name, dt in timings:
        print(f"| {name} | {dt:.1f} |")
    print("smollm2_step: ok", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"smollm2_step: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
