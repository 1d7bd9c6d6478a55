"""Plain-JSON smoke client for skyrl 0.3.0's Tinker API (no tinker SDK, stdlib only).

Usage: python smoke.py BASE_URL [--model DIR] [--passes N] [--wire FILE]

Each pass: create_session, create_model (LoRA rank 4), get_info, asample from
the base model (checks per-token logprobs), forward_backward with
importance_sampling, optim_step, save_weights_for_sampler (named), asample from
the saved LoRA, save_weights_for_sampler (ephemeral: sampling session), asample
through that session, save_weights (state), list checkpoints. Futures are
polled with retrieve_future (408 = not yet). Prints each step's wall time; the
first pass is cold (JAX compiles), later passes are warm. --wire writes every
request and response body as JSON lines. Exits non-zero on any failure.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

HEADERS = {"Content-Type": "application/json", "Accept": "application/json", "X-API-Key": "tml-dummy"}


class Client:
    def __init__(self, base: str, wire):
        self.base = base.rstrip("/")
        self.wire = wire

    def _log(self, **entry):
        if self.wire:
            self.wire.write(json.dumps(entry) + "\n")
            self.wire.flush()

    def call(self, method: str, path: str, body=None, timeout=330.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=HEADERS)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            reply = json.loads(raw) if raw else None
        except ValueError:
            reply = raw.decode(errors="replace")
        self._log(method=method, path=path, request=body, status=status, response=reply)
        return status, reply

    def ok(self, method, path, body=None):
        status, reply = self.call(method, path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path} -> HTTP {status}: {reply}")
        return reply

    def result(self, future: dict, kind: str):
        """Poll retrieve_future until the result is there (skyrl holds each poll up to 300 s, then 408)."""
        body = {"request_id": future["request_id"], "allow_metadata_only": True}
        while True:
            status, reply = self.call("POST", "/api/v1/retrieve_future", body)
            if status == 200:
                if isinstance(reply, dict) and reply.get("type") == "try_again":
                    continue
                if isinstance(reply, dict) and "error" in reply:
                    raise RuntimeError(f"{kind} failed: {reply}")
                return reply
            if status in (408, 502, 503, 504):  # 408: still pending; skyrl's 400/500 are terminal
                continue
            raise RuntimeError(f"{kind}: retrieve_future -> HTTP {status}: {reply}")


def check_sample(reply, n, max_tokens, what):
    seqs = reply.get("sequences")
    assert isinstance(seqs, list) and len(seqs) == n, f"{what}: expected {n} sequences, got {reply}"
    for s in seqs:
        assert 0 < len(s["tokens"]) <= max_tokens, f"{what}: bad tokens {s}"
        lp = s.get("logprobs")
        assert isinstance(lp, list) and len(lp) == len(s["tokens"]), f"{what}: no per-token logprobs {s}"
        assert all(isinstance(x, (int, float)) and x <= 0.0 for x in lp), f"{what}: odd logprobs {lp}"
    return seqs


def timer(times: list, prefix: str, width: int):
    """A function that runs fn(), prints its wall time as `name` and appends (name, seconds) to times."""
    def step(name, fn):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        times.append((name, dt))
        print(f"  {prefix}{name:<{width}} {dt:7.2f} s", flush=True)
        return out

    return step


def datum(prompt: list[int], sampled: dict, advantage: float) -> dict:
    """A datum (reference §15.1) for one sampled sequence: input = full[:-1], target = full[1:],
    the sampler's logprobs and `advantage` on the sampled positions, 0 on the prompt."""
    full, k = prompt + sampled["tokens"], len(prompt) - 1
    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": full[:-1]}]},
        "loss_fn_inputs": {
            "target_tokens": {"data": full[1:], "dtype": "int64", "shape": [len(full) - 1]},
            "logprobs": {"data": [0.0] * k + sampled["logprobs"], "dtype": "float32", "shape": [len(full) - 1]},
            "advantages": {"data": [0.0] * k + [advantage] * len(sampled["tokens"]), "dtype": "float32",
                           "shape": [len(full) - 1]},
        },
    }


def one_pass(c: Client, base_model: str, prompt: list[int], label: str) -> list[tuple[str, float]]:
    times = []
    step = timer(times, f"[{label}] ", 34)

    n, max_tokens = 4, 8
    sampling = {"max_tokens": max_tokens, "temperature": 1.0, "seed": 7}
    chunk = {"type": "encoded_text", "tokens": prompt}

    sess = step("create_session", lambda: c.ok("POST", "/api/v1/create_session",
                                                  {"tags": [], "user_metadata": {}, "sdk_version": "metaclaw-smoke",
                                                   "type": "create_session"}))
    session_id = sess["session_id"]
    step("session_heartbeat", lambda: c.ok("POST", "/api/v1/session_heartbeat",
                                             {"session_id": session_id, "type": "session_heartbeat"}))

    def create_model():
        fut = c.ok("POST", "/api/v1/create_model", {
            "session_id": session_id, "model_seq_id": 0, "base_model": base_model,
            "lora_config": {"rank": 4, "seed": 0}, "type": "create_model"})
        res = c.result(fut, "create_model")
        assert res["model_id"] == fut["model_id"], res
        return res["model_id"]

    model_id = step("create_model (rank 4) + result", create_model)
    info = step("get_info", lambda: c.ok("POST", "/api/v1/get_info", {"model_id": model_id, "type": "get_info"}))
    assert info["model_id"] == model_id, info

    def sample(selector, what):
        body = {"num_samples": n, "prompt": {"chunks": [chunk]}, "sampling_params": sampling, "type": "sample"}
        body.update(selector)
        fut = c.ok("POST", "/api/v1/asample", body)
        return check_sample(c.result(fut, what), n, max_tokens, what)

    seqs = step("asample base (4 x 8 tokens)", lambda: sample({"base_model": base_model}, "sample base"))

    data = [datum(prompt, s, 1.0 if i < n // 2 else -1.0) for i, s in enumerate(seqs)]

    def fwd_bwd():
        fut = c.ok("POST", "/api/v1/forward_backward", {
            "model_id": model_id, "seq_id": 1,
            "forward_backward_input": {"data": data, "loss_fn": "importance_sampling"}})
        res = c.result(fut, "forward_backward")
        outs = res["loss_fn_outputs"]
        assert len(outs) == n and all("logprobs" in o for o in outs), res
        return res

    fb = step("forward_backward importance_sampling", fwd_bwd)
    loss = sum(sum(o["elementwise_loss"]["data"]) for o in fb["loss_fn_outputs"] if "elementwise_loss" in o)
    print(f"  [{label}]   loss (sum of elementwise_loss) = {loss:.6f}; metrics = {fb.get('metrics')}", flush=True)

    def optim():
        fut = c.ok("POST", "/api/v1/optim_step", {
            "model_id": model_id, "seq_id": 2, "type": "optim_step",
            "adam_params": {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}})
        return c.result(fut, "optim_step")

    opt = step("optim_step", optim)
    print(f"  [{label}]   optim metrics = {opt.get('metrics')}", flush=True)

    def save_for_sampler():
        fut = c.ok("POST", "/api/v1/save_weights_for_sampler", {
            "model_id": model_id, "path": "smoke-sampler", "seq_id": 3, "type": "save_weights_for_sampler"})
        return c.result(fut, "save_weights_for_sampler")

    saved = step("save_weights_for_sampler (named)", save_for_sampler)
    lora_path = saved["path"]
    step("asample LoRA by model_path", lambda: sample({"model_path": lora_path}, "sample lora"))

    def save_ephemeral():
        fut = c.ok("POST", "/api/v1/save_weights_for_sampler", {
            "model_id": model_id, "seq_id": 4, "sampling_session_seq_id": 0, "type": "save_weights_for_sampler"})
        return c.result(fut, "save_weights_for_sampler (ephemeral)")

    eph = step("save_weights_for_sampler (ephemeral)", save_ephemeral)
    sampler = eph.get("sampling_session_id")
    assert sampler, eph
    step("asample by sampling_session_id", lambda: sample({"sampling_session_id": sampler, "seq_id": 0},
                                                          "sample session"))

    def save_state():
        fut = c.ok("POST", "/api/v1/save_weights", {"model_id": model_id, "path": "smoke-state", "seq_id": 5,
                                                     "type": "save_weights"})
        return c.result(fut, "save_weights")

    state = step("save_weights (state)", save_state)
    ckpts = step("list checkpoints", lambda: c.ok("GET", f"/api/v1/training_runs/{model_id}/checkpoints"))
    paths = sorted(ck["tinker_path"] for ck in ckpts["checkpoints"])
    print(f"  [{label}]   checkpoints: {paths}; state path {state.get('path')}", flush=True)
    assert f"tinker://{model_id}/weights/smoke-state" in paths, paths
    assert f"tinker://{model_id}/sampler_weights/smoke-sampler" in paths, paths
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("--model", help="model dir, to tokenize a ChatML prompt (else fixed ids)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--wire", help="write every request/response as JSON lines here")
    args = ap.parse_args()

    wire = open(args.wire, "w") if args.wire else None
    c = Client(args.base_url, wire)
    c.ok("POST", "/api/v1/client/config", {"sdk_version": "metaclaw-smoke"})
    caps = c.ok("GET", "/api/v1/get_server_capabilities")
    base_model = caps["supported_models"][0]["model_name"]

    prompt = [1, 2, 3, 4, 5]
    if args.model:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(f"{args.model}/tokenizer.json")
        prompt = tok.encode("<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n").ids
    print(f"base model {base_model}; prompt {len(prompt)} tokens", flush=True)

    all_times = []
    t0 = time.perf_counter()
    for p in range(args.passes):
        label = "cold" if p == 0 else "warm"
        all_times.append(one_pass(c, base_model, prompt, label))
    print(f"smoke: all {args.passes} passes ok in {time.perf_counter() - t0:.1f} s", flush=True)

    names = [name for name, _ in all_times[0]]
    print("\n| step | " + " | ".join("cold" if i == 0 else f"warm {i}" for i in range(len(all_times))) + " |")
    print("|---|" + "---:|" * len(all_times))
    for k, name in enumerate(names):
        print(f"| {name} | " + " | ".join(f"{t[k][1]:.2f} s" for t in all_times) + " |")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"smoke: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
