#!/usr/bin/env bash
# End-to-end test of `metaclaw bench run --agent openclaw`: the bench's first
# days answered by a real OpenClaw (pinned, from npm), laid out as the
# reference harness lays it out (docs/bench.md, "Through OpenClaw"):
#
#   metaclaw bench ─▶ openclaw agent --local ─HTTP─▶ (arm's metaclaw ─▶) dummy upstream (`bench-oracle`)
#
# The scripted oracle answers the same round the same way whoever relays it
# (it reads past OpenClaw's date envelope and internal context, and calls
# OpenClaw's `write` and `exec` where the built-in agent has `write_file` and
# `copy_file`). So the same run through the built-in agent, which
# host/tests/bench_e2e.rs checks round by round against what the oracle
# knew, is the expected result: every round's pass or fail, the skills
# metaclaw injected and the skills evolved each night must be the same
# through OpenClaw, and `learn` must beat `direct`. Also checked: OpenClaw
# did the work (its tools, its prompt reached the model), the arm's metaclaw
# recorded OpenClaw's turns under the day's session, and the model's key is
# in no file of the run.
#
# Usage: tests/openclaw/bench.sh     (KEEP_WORK=1 keeps the scratch folder)
# Env:   METACLAW_BIN (a build with `--features test-servers`: the bench's
#        scripted models; else $CARGO_TARGET_DIR/debug/metaclaw, else
#        target/debug/metaclaw, built so), METACLAW_CACHE (node and
#        openclaw), BENCH_E2E_DAYS (days to run, default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
t_start=$(date +%s)

# shellcheck source=../lib/agent-e2e.sh
source "$root/tests/lib/agent-e2e.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/metaclaw-openclaw-bench.XXXXXX")"
upstream_pid=""
days="${BENCH_E2E_DAYS:-2}"
key="bench-e2e-key-$RANDOM$RANDOM"

tail_logs() {
  local f
  for f in "$work/upstream.log" "$work"/*.err "$work"/openclaw/*/days/*/openclaw/openclaw.log; do
    [ -s "$f" ] || continue
    echo "---- tail of $f"
    tail -n 30 "$f" | cut -c1-400
  done
}

cleanup() {
  local rc=$?
  set +e
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null; wait "$upstream_pid" 2>/dev/null; fi
  finish "openclaw bench e2e" "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

use_openclaw
find_metaclaw test-servers
start_dummy_upstream bench-models

# The bench keeps each arm's metaclaw under its run folder; the user's own
# home and config are an empty one here.
export METACLAW_HOME="$work/home" BENCH_E2E_KEY="$key"
mkdir -p "$METACLAW_HOME"
: >"$METACLAW_HOME/config.yaml"
bench() { # <name> [flags...]: one run into $work/<name>
  local name="$1"; shift
  step "bench run ($name)"
  "$bin" --config "$METACLAW_HOME/config.yaml" bench run --model bench-oracle --arm direct,learn \
    --days "$days" --judge-model judge --evolver-model bench-evolver \
    --base-url "$upstream/v1" --api-key-env BENCH_E2E_KEY --out "$work/$name" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" || die "bench run ($name) failed: $(tail -n 5 "$work/$name.err")"
  echo "$name: $(($(date +%s) - t_start))s since the start"
}
bench builtin
bench openclaw --agent openclaw

step "what OpenClaw did, against the built-in agent's run"
results="$(python3 - "$work/builtin" "$work/openclaw" <<'PY'
import json, sys
builtin, claw = sys.argv[1], sys.argv[2]
def rounds(d):
    return [json.loads(l) for l in open(f"{d}/rounds.jsonl") if l.strip()]
def nights(d):
    return [json.loads(l) for l in open(f"{d}/nights.jsonl") if l.strip()]
errors, b, c = [], rounds(builtin), rounds(claw)
key = lambda r: (r["arm"], r["day"], r["round"])
if [key(r) for r in b] != [key(r) for r in c]:
    errors.append(f"not the same rounds: {[key(r) for r in b]} vs {[key(r) for r in c]}")
# A skill by its name: OpenClaw's turns are its agent's (`main`), whose
# evolved skills live in its own layer (`@main/NAME`); the built-in agent's
# in the shared library (docs/skills.md "Each agent's own skills"); as a
# set, since a turn's skills are listed by id and `@main/` sorts first.
name = lambda skill: skill.split("/", 1)[-1] if skill.startswith("@") else skill
for x, y in zip(b, c):
    for what, f in [("passed", lambda r: r["score"]["passed"]), ("answer", lambda r: r["answer"].strip()),
                    ("skills injected", lambda r: sorted(name(s) for s in r.get("skills", [])))]:
        if f(x) != f(y):
            errors.append(f"{key(x)}: {what}: built-in {f(x)!r}, OpenClaw {f(y)!r}")
# OpenClaw ran its own tools for the file tasks.
claw_tools = sorted({t["name"] for r in c for t in r["tools"]})
if not set(claw_tools) & {"write", "exec"} or set(claw_tools) & {"write_file", "copy_file"}:
    errors.append(f"the file tasks were not done with OpenClaw's tools: {claw_tools}")
ev = lambda d: [(n["arm"], n["day"], n["night"].get("evolved") if n["night"] else None) for n in nights(d)]
if ev(builtin) != ev(claw):
    errors.append(f"skills evolved: built-in {ev(builtin)}, OpenClaw {ev(claw)}")
strict = {}
for r in c:
    strict.setdefault(r["arm"], []).append(r["score"]["passed"])
rate = {a: sum(v) / len(v) for a, v in strict.items()}
if not rate.get("learn", 0) > rate.get("direct", 1):
    errors.append(f"learn does not beat direct through OpenClaw: {rate}")
evolved = sum(len(e or []) for (_, _, e) in ev(claw))
print("; ".join(errors) if errors else
      f"{len(c)} rounds the same, tools {claw_tools}, {evolved} skill(s) evolved, strict "
      + ", ".join(f"{a} {v:.1%}" for a, v in rate.items()))
sys.exit(1 if errors else 0)
PY
)" && pass "through OpenClaw every round scores as through the built-in agent — $results" ||
  fail "through OpenClaw: $results"

# OpenClaw's prompt (not the built-in agent's) reached the model.
check "the model was prompted by OpenClaw" python3 -c '
import json, sys, urllib.request
r = json.load(urllib.request.urlopen(sys.argv[1] + "/v1/dummy/requests?model=bench-oracle"))["requests"]
n = sum("running inside OpenClaw" in json.dumps(q["messages"][0]) for q in r)
assert n > 0, f"none of the {len(r)} recent requests came from OpenClaw"
print(f"{n} of the {len(r)} recent requests")' "$upstream"

# The learn arm's metaclaw recorded OpenClaw's turns under the day's session,
# and knew them as OpenClaw's.
learn_home="$work/openclaw/learn-1/home"
check "the learn arm's metaclaw recorded day01 from OpenClaw" python3 -c '
import json, subprocess, sys
bin, home = sys.argv[1], sys.argv[2]
out = subprocess.run([bin, "--config", home + "/config.yaml", "sessions", "show", "bench-learn-1-day01", "--json"],
                     env={"METACLAW_HOME": home, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True).stdout
s = json.loads(out)
assert s["session"]["agent"] == "openclaw", s["session"]
assert s["session"]["status"] == "ended", s["session"]
main = [t for t in s["turns"] if t["turn_type"] == "main"]
assert len(main) >= 6, f"{len(main)} main turns"
agent, status = s["session"]["agent"], s["session"]["status"]
print(f"{len(main)} main turns, agent {agent}, {status}")' "$bin" "$learn_home"

# The key went to OpenClaw in its environment only.
if grep -rlF "$key" "$work/openclaw" "$work/builtin" >"$work/key-files" 2>/dev/null; then
  fail "the model's key is written in: $(head -n 5 "$work/key-files")"
else
  pass "the model's key is in no file of either run"
fi
check "the day's OpenClaw config names the key, never holds it" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
p = next(iter(c["models"]["providers"].values()))
assert p["apiKey"] == "${METACLAW_BENCH_API_KEY}", p["apiKey"]
assert c["tools"]["fs"]["workspaceOnly"] is True
print("apiKey " + p["apiKey"])' "$work/openclaw/direct-1/days/day01/openclaw/openclaw.json"
check "OpenClaw accepts the config the bench wrote" env \
  HOME="$work/openclaw/direct-1/days/day01/openclaw/home" \
  OPENCLAW_STATE_DIR="$work/openclaw/direct-1/days/day01/openclaw/state" \
  OPENCLAW_CONFIG_PATH="$work/openclaw/direct-1/days/day01/openclaw/openclaw.json" \
  OPENCLAW_NO_AUTO_UPDATE=1 openclaw config validate
grep -q "OpenClaw with the reference harness's config" "$work/openclaw/report.md" &&
  pass "the report says the rounds ran through OpenClaw" ||
  fail "the report does not say the rounds ran through OpenClaw"
