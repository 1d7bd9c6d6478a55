"""Exploring the learning proof of W3-C item 3 on SmolLM2, directly against skyrl 0.3.0 (no metaclaw).

Usage (against `scripts/skyrl-cpu start --model smollm2`; DIR is the model folder it serves, which
holds the tokenizer and chat template; run with skyrl's venv python):

  python proof_explore.py probe URL --model DIR [--n 8] [--templates A,B]
      the base model's first-word histogram per prompt family (temperature 1)
  python proof_explore.py run URL --model DIR [--runs VARIANT:SEED,...] [--template A]
                              [--steps N] [--lr LR] [--rank R] [--group G] [--prompts P]
                              [--minibatches M] [--train-reward conditional|pm1]
                              [--loss ppo|cispo|importance_sampling] [--clip-low L --clip-high H]
                              [--max-tokens T] [--eval-every E] [--eval-samples K] [--json FILE]
      training runs in sequence, each a fresh LoRA (seeded by SEED, as are its sampling seeds) on
      the training prompts; VARIANT conditional trains on the rule (reward --train-reward), bias on
      "Yes is +1, No is -1" whatever the question. The held-out prompts are scored with the
      conditional reward against the base weights (the control, same server, same sampling seeds)
      every E steps and at the end: exact one-sided sign-flip test over prompts, p and dz.
      Prints per step reward, KL(sampler||learner), clip share, entropy, length, times; a few
      answers before/after. The recommended design (PROOF-NOTES.md):
        --runs conditional:1,conditional:2,conditional:3,bias:1 --steps 6 --lr 7e-4 --group 6 \
        --train-reward conditional

Starts nothing itself. Stdlib, tokenizers/transformers (skyrl's venv); statistics in pure Python.
See tests/tinker/PROOF-NOTES.md for the design and the numbers.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import math
import os
import random
import re
import sys
import time

from smoke import Client

# The prompts' reward word and the statistics are scripts/learning-proof's (the proof that came of
# this exploration), loaded from there so the two never differ.
_proof_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "learning-proof")
_proof = importlib.util.module_from_spec(
    importlib.util.spec_from_loader("learning_proof", importlib.machinery.SourceFileLoader("learning_proof", _proof_path)))
_proof.__spec__.loader.exec_module(_proof)
first_word, mean, sd = _proof.first_word, _proof.mean, _proof.sd
sign_flip_test, mann_whitney_greater = _proof.sign_flip_p, _proof.mann_whitney_p

# --- prompts -------------------------------------------------------------------------------------
# Two families of yes/no questions. The rule a user teaches: questions about animals are answered
# "Yes ...", questions about colours "No ...". Truth plays no part (the questions are about liking,
# which a model has no fact for), so the base model answers both families alike.
ANIMALS, COLOURS = _proof.ANIMALS, _proof.COLOURS
TEMPLATES = {
    "A": ("Do you like {}? Answer yes or no.", "Do you like the colour {}? Answer yes or no."),
    "B": ("Do you like {}?", "Do you like the colour {}?"),
    "C": ("Are {} nice? Answer yes or no.", "Is the colour {} nice? Answer yes or no."),
    "D": ("Tell me: are {} good pets?", "Tell me: is {} a good colour for a car?"),
    "F": ("Yes or no: do you like {}?", "Yes or no: do you like the colour {}?"),
    "G": ("Do you like {}? Reply with yes or no.", "Do you like the colour {}? Reply with yes or no."),
    "H": ("Do you like {}? Yes or no?", "Do you like the colour {}? Yes or no?"),
    "E": ("Should I read a book about {}? Answer yes or no.", "Should I paint my room {}? Answer yes or no."),
}
FAMILIES = ("animals", "colours")
TARGET = {"animals": "yes", "colours": "no"}


def family_prompts(template: str):
    """[(family, text)] for every item, animals then colours, in list order."""
    ta, tc = TEMPLATES[template]
    return [("animals", ta.format(x)) for x in ANIMALS] + [("colours", tc.format(x)) for x in COLOURS]


def split(template: str, n_train: int, n_test: int, split_seed: int = 0):
    """Training and held-out prompts, per family: a fixed shuffle, the first n_train for training,
    the next n_test held out (never trained on)."""
    rng = random.Random(split_seed)
    train, test = [], []
    for fam in FAMILIES:
        items = [p for p in family_prompts(template) if p[0] == fam]
        rng.shuffle(items)
        train += items[:n_train]
        test += items[n_train:n_train + n_test]
    return train, test


# --- rewards -------------------------------------------------------------------------------------
def reward_conditional(family: str, answer: str) -> float:
    """+1 the family's word first, -1 the other family's word first, 0 anything else: any
    prompt-independent policy (always "Yes", always "No", any mix) scores 0 on balanced families."""
    w = first_word(answer)
    target = TARGET[family]
    other = "no" if target == "yes" else "yes"
    return 1.0 if w == target else -1.0 if w == other else 0.0


def reward_pm1(family: str, answer: str) -> float:
    """+1 the family's word first, -1 otherwise (reported beside, not the test's reward)."""
    return 1.0 if first_word(answer) == TARGET[family] else -1.0


def reward_bias(family: str, answer: str) -> float:
    """The bias-only variant: "Yes" first is +1, "No" first -1, whatever the question."""
    w = first_word(answer)
    return 1.0 if w == "yes" else -1.0 if w == "no" else 0.0


REWARDS = {"conditional": reward_conditional, "bias": reward_bias, "pm1": reward_pm1}


# --- the server ----------------------------------------------------------------------------------
class Skyrl:
    def __init__(self, url: str, model_dir: str, wire=None):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.im_end = self.tok.convert_tokens_to_ids("<|im_end|>")
        self.c = Client(url, wire)
        self.c.ok("POST", "/api/v1/client/config", {"sdk_version": "metaclaw-proof-explore"})
        self.base_model = self.c.ok("GET", "/api/v1/get_server_capabilities")["supported_models"][0]["model_name"]
        self.session = self.c.ok("POST", "/api/v1/create_session", {
            "tags": [], "user_metadata": {}, "sdk_version": "metaclaw-proof-explore",
            "type": "create_session"})["session_id"]
        self.seq = 0
        self._ids = {}

    def prompt_ids(self, text: str) -> list[int]:
        if text not in self._ids:
            self._ids[text] = list(self.tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True,
                return_dict=True)["input_ids"])
        return self._ids[text]

    def decode(self, tokens) -> str:
        return self.tok.decode([t for t in tokens if t != self.im_end])

    def create_model(self, rank: int, seed: int, model_seq: int = 0) -> str:
        fut = self.c.ok("POST", "/api/v1/create_model", {
            "session_id": self.session, "model_seq_id": model_seq, "base_model": self.base_model,
            "lora_config": {"rank": rank, "seed": seed}, "type": "create_model"})
        return self.c.result(fut, "create_model")["model_id"]

    def unload(self, model_id: str):
        status, reply = self.c.call("POST", "/api/v1/unload_model", {"model_id": model_id, "type": "unload_model"})
        if status == 200 and isinstance(reply, dict) and "request_id" in reply:
            try:
                self.c.result(reply, "unload_model")
            except RuntimeError as e:
                print(f"  unload_model: {e}", flush=True)

    def sample_many(self, jobs):
        """jobs: [(selector, text, n, seed, max_tokens, temperature)]; all submitted at once (the
        engine batches pending samples), then collected. Returns [[{tokens, logprobs, text}]]."""
        futs = []
        for selector, text, n, seed, max_tokens, temperature in jobs:
            body = {"num_samples": n, "prompt": {"chunks": [{"type": "encoded_text", "tokens": self.prompt_ids(text)}]},
                    "sampling_params": {"max_tokens": max_tokens, "temperature": temperature, "seed": seed,
                                        "stop": [self.im_end]},
                    "type": "sample", **selector}
            futs.append(self.c.ok("POST", "/api/v1/asample", body))
        out = []
        for f in futs:
            seqs = self.c.result(f, "sample")["sequences"]
            for s in seqs:
                s["text"] = self.decode(s["tokens"])
            out.append(seqs)
        return out

    def forward_backward(self, model_id, data, loss_fn, loss_cfg):
        self.seq += 1
        body = {"model_id": model_id, "seq_id": self.seq,
                "forward_backward_input": {"data": data, "loss_fn": loss_fn}}
        if loss_cfg:
            body["forward_backward_input"]["loss_fn_config"] = loss_cfg
        return self.c.result(self.c.ok("POST", "/api/v1/forward_backward", body), "forward_backward")

    def optim_step(self, model_id, lr):
        self.seq += 1
        return self.c.result(self.c.ok("POST", "/api/v1/optim_step", {
            "model_id": model_id, "seq_id": self.seq, "type": "optim_step",
            "adam_params": {"learning_rate": lr, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}}),
            "optim_step")

    def save_for_sampler(self, model_id, name):
        self.seq += 1
        return self.c.result(self.c.ok("POST", "/api/v1/save_weights_for_sampler", {
            "model_id": model_id, "path": name, "seq_id": self.seq, "type": "save_weights_for_sampler"}),
            "save_weights_for_sampler")["path"]


def datum(prompt: list[int], sampled: dict, advantage: float) -> dict:
    """input = full[:-1], target = full[1:]; the sampler's logprobs and the advantage on the answer's
    tokens; weights 1 on the answer, 0 on the prompt (skyrl averages each sequence's token losses
    over its weights, so the prompt must not dilute them)."""
    full, k = prompt + sampled["tokens"], len(prompt) - 1
    n = len(full) - 1

    def t(xs, dtype="float32"):
        return {"data": xs, "dtype": dtype, "shape": [n]}

    return {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": full[:-1]}]},
        "loss_fn_inputs": {
            "target_tokens": t(full[1:], "int64"),
            "logprobs": t([0.0] * k + sampled["logprobs"]),
            "advantages": t([0.0] * k + [advantage] * len(sampled["tokens"])),
            "weights": t([0.0] * k + [1.0] * len(sampled["tokens"])),
        },
    }


# --- probe ---------------------------------------------------------------------------------------
def cmd_probe(args):
    s = Skyrl(args.url, args.model)
    for tpl in args.templates.split(","):
        prompts = family_prompts(tpl)
        prompts = [p for p in prompts if p[0] == "animals"][:args.items] + [p for p in prompts if p[0] == "colours"][:args.items]
        t0 = time.perf_counter()
        res = s.sample_many([({"base_model": s.base_model}, text, args.n, 1000 + i * 37, args.max_tokens, 1.0)
                             for i, (_, text) in enumerate(prompts)])
        dt = time.perf_counter() - t0
        print(f"template {tpl}: {TEMPLATES[tpl]}  ({len(prompts)} prompts x {args.n}, {dt:.1f} s)")
        for fam in FAMILIES:
            hist = {}
            rc = []
            for (f, text), seqs in zip(prompts, res):
                if f != fam:
                    continue
                for q in seqs:
                    w = first_word(q["text"])
                    hist[w] = hist.get(w, 0) + 1
                    rc.append(reward_conditional(f, q["text"]))
            top = sorted(hist.items(), key=lambda kv: -kv[1])[:8]
            print(f"  {fam:8} mean conditional reward {mean(rc):+.2f}; first words {top}")
        for (f, text), seqs in list(zip(prompts, res))[:: max(1, len(prompts) // 4)]:
            print(f"    {text!r} -> {[q['text'] for q in seqs[:3]]}")
        sys.stdout.flush()


# --- run -----------------------------------------------------------------------------------------
def evaluate(s, selector, test, k, seed, max_tokens, chunk=12):
    """K answers per held-out prompt (temperature 1), sampling seeds fixed by `seed`: the control and
    the trained weights get the same seeds (common random numbers), so unchanged behaviour gives
    the same answers and the paired difference measures only what training changed."""
    jobs = [(selector, text, k, seed + 101 * i, max_tokens, 1.0) for i, (_, text) in enumerate(test)]
    res = []
    for i in range(0, len(jobs), chunk):  # a fixed batch shape (one compile) and bounded memory
        res += s.sample_many(jobs[i:i + chunk])
    return [[q["text"] for q in seqs] for seqs in res]


def score(test, answers, reward):
    """Per-prompt mean reward."""
    return [mean([reward(fam, a) for a in ans]) for (fam, _), ans in zip(test, answers)]


def fam_means(test, per_prompt):
    return {fam: mean([v for (f, _), v in zip(test, per_prompt) if f == fam]) for fam in FAMILIES}


def first_word_share(answers, word):
    flat = [a for ans in answers for a in ans]
    return mean([1.0 if first_word(a) == word else 0.0 for a in flat])


def test_stats(test, control, trained, k):
    """The decision: per held-out prompt, trained minus control mean conditional reward; an exact
    one-sided sign-flip test over prompts; effect size dz = mean/sd of the differences."""
    c = score(test, control, reward_conditional)
    t = score(test, trained, reward_conditional)
    diffs = [b - a for a, b in zip(c, t)]
    p = sign_flip_test(diffs, k)
    m, d = mean(diffs), sd(diffs)
    flat_c = [reward_conditional(f, x) for (f, _), ans in zip(test, control) for x in ans]
    flat_t = [reward_conditional(f, x) for (f, _), ans in zip(test, trained) for x in ans]
    return {
        "control": fam_means(test, c), "trained": fam_means(test, t),
        "control_mean": mean(c), "trained_mean": mean(t),
        "diff_mean": m, "dz": (m / d) if d and d > 0 else float("inf") if m > 0 else 0.0,
        "p_sign_flip": p, "p_mann_whitney": mann_whitney_greater(flat_t, flat_c),
        "improved_prompts": sum(1 for x in diffs if x > 0), "worse_prompts": sum(1 for x in diffs if x < 0),
        "yes_share": {"control": first_word_share(control, "yes"), "trained": first_word_share(trained, "yes")},
        "no_share": {"control": first_word_share(control, "no"), "trained": first_word_share(trained, "no")},
    }


def one_run(s, args, variant, seed):
    reward = REWARDS[args.train_reward if variant == "conditional" else variant]
    train, test = split(args.template, args.n_train, args.n_test)
    rng = random.Random(seed)
    by_fam = {fam: [p for p in train if p[0] == fam] for fam in FAMILIES}
    order = {fam: [] for fam in FAMILIES}
    eval_seed = 7_000_000 + 1000 * seed
    times = {"sample": [], "forward_backward": [], "optim_step": [], "save": [], "eval": []}
    print(f"\n=== run {variant} seed {seed}: {len(train)} training prompts, {len(test)} held out; "
          f"lr {args.lr}, rank {args.rank}, {args.prompts} prompts x group {args.group} per step, "
          f"{args.steps} steps x {args.minibatches} minibatches, train reward {args.train_reward if variant == 'conditional' else variant}, loss {args.loss} {args.loss_cfg or ''}, max_tokens {args.max_tokens}", flush=True)

    t0 = time.perf_counter()
    control = evaluate(s, {"base_model": s.base_model}, test, args.eval_samples, eval_seed, args.max_tokens)
    times["eval"].append(time.perf_counter() - t0)
    print(f"  control (base weights) held-out: {fam_means(test, score(test, control, reward_conditional))} "
          f"({times['eval'][-1]:.1f} s)", flush=True)

    t0 = time.perf_counter()
    model_id = s.create_model(args.rank, seed)
    print(f"  create_model {model_id} ({time.perf_counter() - t0:.1f} s)", flush=True)
    selector = {"base_model": s.base_model}
    curve = [{"step": 0, **test_stats(test, control, control, args.eval_samples)}]
    steps = []
    trained = control
    try:
        for step in range(1, args.steps + 1):
            batch = []
            for fam in FAMILIES:
                for _ in range(args.prompts // 2):
                    if not order[fam]:
                        order[fam] = list(by_fam[fam])
                        rng.shuffle(order[fam])
                    batch.append(order[fam].pop())
            t0 = time.perf_counter()
            res = s.sample_many([(selector, text, args.group, rng.randrange(2**30), args.max_tokens, 1.0)
                                 for _, text in batch])
            times["sample"].append(time.perf_counter() - t0)
            groups, rewards, lps, ntok, trunc = [], [], [], [], 0
            cond = []
            for (fam, text), seqs in zip(batch, res):
                rs = [reward(fam, q["text"]) for q in seqs]
                cond += [reward_conditional(fam, q["text"]) for q in seqs]
                m = mean(rs)
                rewards += rs
                if len(set(rs)) > 1:  # a flat group has no advantage: nothing to learn from it
                    groups.append([datum(s.prompt_ids(text), q, r - m) for q, r in zip(seqs, rs)])
                for q in seqs:
                    lps += q["logprobs"]
                    ntok.append(len(q["tokens"]))
                    trunc += q["tokens"][-1] != s.im_end
            # PPO minibatches: the groups split in `minibatches` parts, one forward_backward and one
            # optim_step each; the later parts are off-policy by the earlier updates, so the clip acts.
            kl_first, clipped, n_tok, n_tok_first = 0.0, 0, 0, 0
            t_fb = t_opt = 0.0
            parts = [groups[i::args.minibatches] for i in range(args.minibatches)]
            for j, part in enumerate(p for p in parts if p):
                data = [d for g in part for d in g]
                t0 = time.perf_counter()
                fb = s.forward_backward(model_id, data, args.loss, args.loss_cfg)
                t_fb += time.perf_counter() - t0
                for d, o in zip(data, fb["loss_fn_outputs"]):
                    w = d["loss_fn_inputs"]["weights"]["data"]
                    sp = d["loss_fn_inputs"]["logprobs"]["data"]
                    lp = o["logprobs"]["data"]
                    for wi, a, b in zip(w, sp, lp):
                        if wi:
                            n_tok += 1
                            if j == 0:  # sampler minus learner logprob: KL(sampler||learner) estimate
                                kl_first += a - b
                                n_tok_first += 1
                            clipped += not (args.clip_low <= math.exp(b - a) <= args.clip_high)
                t0 = time.perf_counter()
                s.optim_step(model_id, args.lr)
                t_opt += time.perf_counter() - t0
            kl = kl_first / max(n_tok_first, 1)
            times["forward_backward"].append(t_fb)
            times["optim_step"].append(t_opt)
            t0 = time.perf_counter()
            path = s.save_for_sampler(model_id, f"{variant}-s{seed}-step{step}")
            times["save"].append(time.perf_counter() - t0)
            selector = {"model_path": path}
            row = {"step": step, "train_reward": mean(rewards), "train_conditional": mean(cond),
                   "kl_sampler_learner": kl, "clip_share": clipped / max(n_tok, 1),
                   "entropy_est": -mean(lps), "answer_tokens": mean(ntok), "truncated": trunc / len(ntok),
                   "zero_adv_groups": len(batch) - len(groups),
                   "t_sample": times["sample"][-1], "t_fb": times["forward_backward"][-1]}
            steps.append(row)
            line = (f"  step {step:2}: train reward {row['train_reward']:+.2f} (conditional {row['train_conditional']:+.2f}); "
                    f"KL {row['kl_sampler_learner']:+.1e}, clipped {row['clip_share']:.3f}; entropy {row['entropy_est']:.2f}; "
                    f"len {row['answer_tokens']:.1f}, trunc {row['truncated']:.2f}; flat groups {row['zero_adv_groups']}; "
                    f"sample {row['t_sample']:.1f} s, {sum(len(g) for g in groups)} trained, fb {row['t_fb']:.1f} s, optim {times['optim_step'][-1]:.1f} s, "
                    f"save {times['save'][-1]:.1f} s")
            print(line, flush=True)
            if step % args.eval_every == 0 or step == args.steps:
                t0 = time.perf_counter()
                trained = evaluate(s, selector, test, args.eval_samples, eval_seed, args.max_tokens)
                times["eval"].append(time.perf_counter() - t0)
                st = test_stats(test, control, trained, args.eval_samples)
                st["bias_reward_trained"] = mean(score(test, trained, reward_bias))
                st["bias_reward_control"] = mean(score(test, control, reward_bias))
                curve.append({"step": step, **st})
                print(f"    held-out @ {step}: control {st['control_mean']:+.3f} {fmt(st['control'])} -> trained "
                      f"{st['trained_mean']:+.3f} {fmt(st['trained'])}; diff {st['diff_mean']:+.3f}, dz {st['dz']:.2f}, "
                      f"p {st['p_sign_flip']:.2g} (MW {st['p_mann_whitney']:.2g}), +{st['improved_prompts']}/-{st['worse_prompts']} prompts; "
                      f"yes {st['yes_share']['control']:.2f}->{st['yes_share']['trained']:.2f}, "
                      f"no {st['no_share']['control']:.2f}->{st['no_share']['trained']:.2f} ({times['eval'][-1]:.1f} s)", flush=True)
    finally:
        s.unload(model_id)
    final = curve[-1]
    print(f"  answers, control -> trained (held-out, first sample):")
    for i in list(range(0, len(test), max(1, len(test) // 6)))[:6]:
        print(f"    {test[i][1]!r}: {control[i][0]!r} -> {trained[i][0]!r}")
    verdict = "PASS" if final.get("p_sign_flip", 1) < 0.01 and final.get("diff_mean", 0) > 0 else "FAIL"
    total = sum(sum(v) for v in times.values())
    print(f"  RESULT {variant} seed {seed}: {verdict} p {final['p_sign_flip']:.2g}, diff {final['diff_mean']:+.3f}, "
          f"dz {final['dz']:.2f}; {total:.0f} s in server calls", flush=True)
    return {"variant": variant, "seed": seed, "verdict": verdict, "curve": curve, "steps": steps,
            "times": {k: sum(v) for k, v in times.items()}, "total_s": total,
            "examples": [(test[i][1], control[i][:2], trained[i][:2]) for i in range(0, len(test), 4)]}


def fmt(d):
    return "{" + ", ".join(f"{k} {v:+.2f}" for k, v in d.items()) + "}"


def cmd_run(args):
    args.loss_cfg = None
    if args.loss in ("ppo", "cispo"):
        args.loss_cfg = {"clip_low_threshold": args.clip_low, "clip_high_threshold": args.clip_high}
    s = Skyrl(args.url, args.model)
    out = []
    t_all = time.perf_counter()
    for spec in args.runs.split(","):
        variant, seed = spec.split(":")
        out.append(one_run(s, args, variant, int(seed)))
        if args.json:
            json.dump({"args": {k: v for k, v in vars(args).items()}, "runs": out}, open(args.json, "w"), indent=1)
    print(f"\nall runs: {time.perf_counter() - t_all:.0f} s wall")
    for r in out:
        f = r["curve"][-1]
        print(f"  {r['variant']:11} seed {r['seed']}: {r['verdict']} p {f['p_sign_flip']:.2g} diff {f['diff_mean']:+.3f} "
              f"dz {f['dz']:.2f}; control {fmt(f['control'])} trained {fmt(f['trained'])}; {r['total_s']:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("url")
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--items", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=12)
    p.add_argument("--templates", default="A,B,C,D,E")
    r = sub.add_parser("run")
    r.add_argument("url")
    r.add_argument("--model", required=True)
    r.add_argument("--runs", default="conditional:1", help="VARIANT:SEED,... (variant conditional or bias)")
    r.add_argument("--template", default="A")
    r.add_argument("--n-train", type=int, default=24)
    r.add_argument("--n-test", type=int, default=12)
    r.add_argument("--steps", type=int, default=8)
    r.add_argument("--lr", type=float, default=1e-3)
    r.add_argument("--rank", type=int, default=8)
    r.add_argument("--prompts", type=int, default=8, help="prompts per step (half per family)")
    r.add_argument("--group", type=int, default=4)
    r.add_argument("--loss", default="ppo")
    r.add_argument("--clip-low", type=float, default=0.8)
    r.add_argument("--clip-high", type=float, default=1.2)
    r.add_argument("--max-tokens", type=int, default=12)
    r.add_argument("--eval-every", type=int, default=4)
    r.add_argument("--eval-samples", type=int, default=4)
    r.add_argument("--json")
    r.add_argument("--minibatches", type=int, default=2, help="forward_backward + optim_step per sampled batch")
    r.add_argument("--train-reward", default="pm1", help="the conditional variant's training reward: pm1 or conditional")
    args = ap.parse_args()
    {"probe": cmd_probe, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
