#!/usr/bin/env bash
# End-to-end test with a real Hermes Agent (pinned, from PyPI) as the agent:
#
#   hermes chat -q (one-shot) ─HTTP─▶ metaclaw ─HTTP─▶ dummy upstream (model `agent`)
#
# In a throwaway HOME, HERMES_HOME and METACLAW_HOME: `metaclaw start`
# (claw_type: hermes) wires Hermes's config.yaml to itself; a plain turn (a
# custom skill is injected) and a tool turn (the dummy asks for `read_file`,
# Hermes runs it and calls again with the result) go through it; then
# `metaclaw skills export --to hermes` must put the skill where Hermes lists
# it (and --sync take it away again); `metaclaw stop --restore` must give
# the user's config.yaml back byte for byte. Same style as tests/openclaw/e2e.sh (docs/openclaw-e2e.md).
#
# Usage: tests/hermes/e2e.sh        (KEEP_WORK=1 keeps the scratch folder)
# Env:   METACLAW_BIN (else $CARGO_TARGET_DIR/debug/metaclaw, else
#        target/debug/metaclaw; built when missing), METACLAW_CACHE,
#        METACLAW_E2E_CONFIG (YAML appended to metaclaw's config).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
t_start=$(date +%s)

# ---------------------------------------------------------------- helpers
# shellcheck source=../lib/agent-e2e.sh
source "$root/tests/lib/agent-e2e.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/metaclaw-hermes-e2e.XXXXXX")"
upstream_pid="" metaclaw_started=false metaclaw_stopped=false
export METACLAW_HOME="$work/metaclaw-home"

tail_logs() {
  local f
  for f in "$work/upstream.log" "$METACLAW_HOME/logs/metaclaw.log" "$work"/turn-*.out \
    "$work"/turn-*.err "$work"/hermes-home/logs/*.log; do
    [ -s "$f" ] || continue
    echo "---- tail of $f"
    tail -n 40 "$f" | cut -c1-400
  done
}

cleanup() {
  local rc=$?
  set +e
  if $metaclaw_started && ! $metaclaw_stopped; then
    timeout 30 "$bin" stop --timeout 10 --restore >/dev/null 2>&1
  fi
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null; wait "$upstream_pid" 2>/dev/null; fi
  finish "hermes e2e" "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- install
step "install hermes-agent (tests/hermes/install.sh)"
install_agent tests/hermes/install.sh
venv_bin="$installed_path"
hermes="$venv_bin/hermes"
hpython="$venv_bin/python" # has PyYAML (a Hermes dependency)

# ---------------------------------------------------------------- metaclaw binary
find_metaclaw

# ---------------------------------------------------------------- dummy upstream
start_dummy_upstream

# ---------------------------------------------------------------- Hermes's home (the user's, before metaclaw)
export HOME="$work/home" HERMES_HOME="$work/hermes-home"
# Nothing from the caller's environment may pick another model or endpoint.
unset HERMES_INFERENCE_MODEL HERMES_INFERENCE_PROVIDER OPENAI_BASE_URL OPENAI_API_KEY
mkdir -p "$HOME/project" "$HERMES_HOME"
hermes_yaml="$HERMES_HOME/config.yaml"
# The user's config, comments included: restore must give these bytes back.
cat >"$hermes_yaml" <<'YAML'
# The user's Hermes config, before metaclaw.
model:
  provider: custom
  default: own-model          # the user's own model
  base_url: http://127.0.0.1:9/v1
  api_key: user-own-key
agent:
  max_turns: 30
terminal:
  backend: local
  timeout: 120
YAML
cp -p "$hermes_yaml" "$work/config.yaml.orig"

# ---------------------------------------------------------------- metaclaw's home
skills_dir="$work/skills"
skill_name="brew-zorblax-tea"
skill_marker="ZORBLAX-SKILL-MARKER-5183"
mkdir -p "$METACLAW_HOME" "$skills_dir/$skill_name"
cat >"$skills_dir/$skill_name/SKILL.md" <<MD
---
name: $skill_name
description: How to brew zorblax tea, the rare tea of the Hermes end-to-end test, at the right water temperature.
category: task-specific
tags: [zorblax, tea, brewing]
version: 1.0.0
created_by: user
---
# Brew zorblax tea

1. Heat the water to 83 degrees, never boiling.
2. Steep the zorblax leaves for exactly four minutes ($skill_marker).
MD
cat >"$METACLAW_HOME/config.yaml" <<YAML
llm:
  api_base: $upstream/v1
  model_id: agent
proxy:
  port: 0
claw_type: hermes
skills:
  dir: $skills_dir
sessions:
  idle_timeout: 30m
learning:
  enabled: false
YAML
# More settings for a run, e.g. METACLAW_E2E_CONFIG='max_context_tokens: 200000'.
[ -z "${METACLAW_E2E_CONFIG:-}" ] || printf '%s\n' "$METACLAW_E2E_CONFIG" >>"$METACLAW_HOME/config.yaml"
turn1_msg="How do I brew zorblax tea properly? Give me the steps."
search="$("$bin" skills search "$turn1_msg" 2>&1)" || true
if grep -q "\* .*$skill_name" <<<"$search"; then
  pass "precheck: metaclaw skills search retrieves the custom skill for turn 1's message"
else
  die "precheck: metaclaw skills search does not retrieve $skill_name for turn 1's message: $search"
fi

# ---------------------------------------------------------------- metaclaw start (wires Hermes)
step "metaclaw start"
"$bin" start >"$work/start.out" 2>&1 || die "metaclaw start: $(cat "$work/start.out")"
metaclaw_started=true
cat "$work/start.out"
"$bin" status --json >"$work/status.json" || die "metaclaw status --json after start"
wait_for 60 "metaclaw to index the skills" skills_indexed
metaclaw_url="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$work/status.json")"

cp "$hermes_yaml" "$work/config.yaml.wired"

wired_check() { # compares config.yaml now with the original
  "$hpython" - "$work/config.yaml.orig" "$hermes_yaml" "$metaclaw_url" <<'PY'
import sys, yaml
orig, now, url = yaml.safe_load(open(sys.argv[1])), yaml.safe_load(open(sys.argv[2])), sys.argv[3]
errors = []
for key in ("agent", "terminal"):
    if orig.get(key) != now.get(key):
        errors.append(f"{key} changed: {orig.get(key)} -> {now.get(key)}")
extra = set(now) - set(orig)
if extra: errors.append(f"keys added at the top level: {sorted(extra)}")
m = now.get("model") or {}
want = {"provider": "custom", "default": "agent", "base_url": url + "/v1"}
for k, v in want.items():
    if m.get(k) != v: errors.append(f"model.{k} is {m.get(k)!r}, expected {v!r}")
if not m.get("api_key"): errors.append("model.api_key missing")
if errors: print("; ".join(errors)); sys.exit(1)
print(f"model -> {url}/v1 (agent); agent and terminal settings unchanged")
PY
}
check "wiring: config.yaml points Hermes at metaclaw and leaves the user's other settings alone" wired_check
"$bin" status --json >"$work/status.json" || die "metaclaw status --json"
check "wiring: metaclaw status --json lists config.yaml as wired" python3 - "$work/status.json" "$hermes_yaml" <<'PY'
import json, sys
w = json.load(open(sys.argv[1])).get("wiring") or {}
files = [f.get("path") for a in w.get("agents", []) if a.get("claw") == "hermes" for f in a.get("files", [])]
if sys.argv[2] not in files: print(f"wiring: {json.dumps(w)[:400]}"); sys.exit(1)
print("claw hermes, file " + sys.argv[2])
PY

turn_no=0
turn() { # <message>: one one-shot Hermes turn in ~/project; answer in $work/turn-N.out
  turn_no=$((turn_no + 1))
  local t0 rc=0
  t0=$(date +%s)
  (cd "$HOME/project" && timeout -k 10 240 "$hermes" chat -q "$1" -Q </dev/null) \
    >"$work/turn-$turn_no.out" 2>"$work/turn-$turn_no.err" || rc=$?
  echo "turn $turn_no: exit $rc in $(($(date +%s) - t0))s"
  [ "$rc" -eq 0 ] || die "hermes chat -q (turn $turn_no) exited $rc: $(tail -n 5 "$work/turn-$turn_no.err")"
}
hermes_requests() { # the upstream's requests from Hermes, as JSON lines
  dummy_requests | python3 -c '
import json, sys
for r in json.load(sys.stdin)["requests"]:
    print(json.dumps(r))'
}
recorded() { # the sessions metaclaw recorded, with their turns, as JSON
  python3 - "$bin" <<'PY'
import json, subprocess, sys
b = sys.argv[1]
out = []
for s in json.loads(subprocess.run([b, "sessions", "list", "--json"], capture_output=True, check=True).stdout):
    show = json.loads(subprocess.run([b, "sessions", "show", s["id"], "--json"], capture_output=True, check=True).stdout)
    out.append({"session": s, "turns": show["turns"]})
print(json.dumps(out))
PY
}
wait_turns() { # <n>: until metaclaw has recorded n turns in all
  local deadline=$(($(date +%s) + 30))
  until [ "$(recorded 2>/dev/null | python3 -c 'import json,sys; print(sum(len(s["turns"]) for s in json.load(sys.stdin)))' 2>/dev/null)" = "$1" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.3
  done
}

# ---------------------------------------------------------------- turn 1: plain
step "turn 1: plain"
turn "$turn1_msg"
hermes_requests >"$work/requests-1.jsonl" ||
  die "could not read the dummy upstream's requests ($upstream/v1/dummy/requests)"
# metaclaw drops skills that would not fit max_context_tokens with the
# request's max_tokens reserved (docs/skills.md): the diagnosis names it.
max_ctx="$("$bin" config get max_context_tokens 2>/dev/null || echo '?')"
check "(a) the upstream saw Hermes's system prompt, then the metaclaw skills block with the custom skill" \
  python3 - "$work/requests-1.jsonl" "$skill_name" "$skill_marker" "$max_ctx" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
if len(lines) != 1: print(f"{len(lines)} upstream calls, expected 1"); sys.exit(1)
r = json.loads(lines[0])
name, marker, max_ctx = sys.argv[2], sys.argv[3], sys.argv[4]
m = r["messages"][0]
s = m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
errors = []
if m["role"] != "system": errors.append(f"first message is {m['role']}, not system")
if not s.startswith("You are Hermes Agent"): errors.append(f"system prompt starts {s[:80]!r}, not Hermes's own")
block, block_end = s.find("<!-- metaclaw:skills -->"), s.find("<!-- /metaclaw:skills -->")
if block < 0 or block_end < block:
    reserve = r.get("max_tokens") or r.get("max_completion_tokens")
    size = len(json.dumps(r))
    errors.append(f"no <!-- metaclaw:skills --> block in the system prompt (Hermes asked for max_tokens={reserve} "
                  f"on a {size}-byte request, about {size // 4 + (reserve or 0)} tokens with the reserve; "
                  f"metaclaw's max_context_tokens is {max_ctx}: beyond it every skill is dropped)")
else:
    text = s[block:block_end]
    if name not in text or marker not in text: errors.append(f"the skills block lacks {name}/{marker}")
    if s[block_end:].strip() != "<!-- /metaclaw:skills -->": errors.append("text after the skills block: it is not at the end")
if errors: print("; ".join(errors)); sys.exit(1)
print(f"system prompt {len(s)} chars, Hermes's part ends at {block}")
PY
check "(b) Hermes's answer is the dummy's echo of the message" grep -qF "brew zorblax tea properly" "$work/turn-1.out"
if wait_turns 1; then
  recorded >"$work/recorded-1.json"
  check "(b) metaclaw recorded the turn" python3 - "$work/recorded-1.json" <<'PY'
import json, sys
rec = json.load(open(sys.argv[1]))
t = rec[0]["turns"][0]
if len(rec) != 1 or t.get("status") != "ok" or "zorblax" not in (t.get("user") or ""):
    print(f"sessions {[s['session']['id'] for s in rec]}, turn status {t.get('status')!r}, user {t.get('user')!r}"); sys.exit(1)
print(f"session {rec[0]['session']['id']} (source {rec[0]['session'].get('source')}), turn ok")
PY
  check "(b) the recorded turn lists the custom skill as injected" python3 - "$skill_name" "$work/recorded-1.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[2]))[0]["turns"][0]
skills = [k.get("id") for k in (t.get("injected_skills") or [])]
if sys.argv[1] not in skills: print(f"injected_skills {t.get('injected_skills')!r}"); sys.exit(1)
print(f"injected: {skills}")
PY
else
  fail "(b) metaclaw recorded no turn within 30s: $("$bin" sessions list --json 2>&1 | head -c 600)"
fi

# ---------------------------------------------------------------- turn 2: a tool call
step "turn 2: tool use"
file_marker="MC-E2E-FILE-MARKER-$RANDOM$RANDOM"
echo "the file says $file_marker" >"$HOME/project/hello.txt"
turn 'Please read_file {"path": "hello.txt"} and tell me what it says.'
hermes_requests >"$work/requests-2.jsonl" ||
  die "could not read the dummy upstream's requests ($upstream/v1/dummy/requests)"
check "(c) the tool turn made two upstream calls: a read_file tool call, then the tool result with the marker" \
  python3 - "$work/requests-2.jsonl" "$file_marker" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
marker = sys.argv[2]
if len(reqs) != 3: print(f"{len(reqs)} upstream calls in all, expected 3"); sys.exit(1)
call2 = reqs[2]
asked = [tc for m in call2["messages"] if m["role"] == "assistant" for tc in (m.get("tool_calls") or [])]
tools = [m for m in call2["messages"] if m["role"] == "tool"]
errors = []
if not any(tc.get("function", {}).get("name") == "read_file" for tc in asked): errors.append(f"no read_file call: {asked}")
if not any(marker in json.dumps(m.get("content")) for m in tools): errors.append(f"no tool result with the marker: {tools}")
if errors: print("; ".join(errors)); sys.exit(1)
print("read_file call, then its result with the marker")
PY
check "(c) Hermes's final answer contains the file's marker" grep -qF "$file_marker" "$work/turn-2.out"
if wait_turns 3; then
  recorded >"$work/recorded-2.json"
  check "(c) metaclaw recorded the tool turn's two calls in one session, apart from turn 1" \
    python3 - "$file_marker" "$work/recorded-2.json" <<'PY'
import json, sys
rec = json.load(open(sys.argv[2]))
tool = [s for s in rec if any("read_file" in (t.get("user") or "") for t in s["turns"])]
if len(rec) != 2 or len(tool) != 1 or len(tool[0]["turns"]) != 2:
    print(f"sessions: {[(s['session']['id'], [t.get('user') for t in s['turns']]) for s in rec]}"); sys.exit(1)
t1, t2 = tool[0]["turns"]
if "read_file" not in json.dumps(t1.get("response")) or sys.argv[1] not in json.dumps(t2.get("response")):
    print(f"responses: {t1.get('response_summary')!r}, {t2.get('response_summary')!r}"); sys.exit(1)
if any(t.get("status") != "ok" for s in rec for t in s["turns"]): print("a turn is not ok"); sys.exit(1)
print(f"session {tool[0]['session']['id']}: the read_file call and the answer with the marker")
PY
else
  fail "(c) metaclaw did not record 3 turns in all within 30s"
fi
check "wiring: still as wired after the turns" wired_check

# ---------------------------------------------------------------- export into Hermes's own skills
step "metaclaw skills export --to hermes"
exported="$HERMES_HOME/skills/metaclaw/$skill_name/SKILL.md"
export_out="$("$bin" skills export --to hermes --json 2>&1)" || die "metaclaw skills export --to hermes: $export_out"
check "(f) export wrote the skill into Hermes's own folder, and an agent applying the Agent Skills spec takes it" \
  "$bin" skills check "$exported"
hermes_lists() { # <name>: hermes skills list shows it as a local skill
  local listed
  listed="$(COLUMNS=250 timeout 120 "$hermes" skills list --source local 2>&1)" || { echo "$listed" | tail -n 5; return 1; }
  grep -F -- "$1" <<<"$listed" || { echo "not listed: $(tail -n 15 <<<"$listed")"; return 1; }
}
check "(f) hermes skills list lists the exported skill" hermes_lists "$skill_name"
again="$("$bin" skills export --to hermes --json 2>&1)" || die "metaclaw skills export (again): $again"
check "(f) exporting again changes nothing" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
if sys.argv[2] not in d["unchanged"] or d["written"] or d["updated"]: print(d); sys.exit(1)
n = len(d["unchanged"])
print(f"{n} unchanged (the built-in skills and {sys.argv[2]})")' "$again" "$skill_name"
"$bin" skills remove "$skill_name" >/dev/null || die "metaclaw skills remove $skill_name"
synced="$("$bin" skills export --to hermes --sync --json 2>&1)" || die "metaclaw skills export --sync: $synced"
check "(f) --sync removes metaclaw's export of a skill the library no longer has" python3 -c '
import json, os, sys
d = json.loads(sys.argv[1])
if d["removed"] != [sys.argv[2]] or os.path.exists(sys.argv[3]): print(d); sys.exit(1)
print("removed: " + ", ".join(d["removed"]))' "$synced" "$skill_name" "$exported"

# ---------------------------------------------------------------- stop --restore
step "metaclaw stop --restore"
cmp -s "$hermes_yaml" "$work/config.yaml.wired" ||
  echo "note: config.yaml changed while wired (by Hermes?): $(diff "$work/config.yaml.wired" "$hermes_yaml" | head -n 20)"
stop_out="$(timeout 60 "$bin" stop --restore 2>&1)" || die "metaclaw stop --restore: $stop_out"
metaclaw_stopped=true
echo "$stop_out"
if cmp "$work/config.yaml.orig" "$hermes_yaml"; then
  pass "(e) after metaclaw stop --restore, config.yaml is the original byte for byte (comments included)"
else
  fail "(e) config.yaml differs from the original after metaclaw stop --restore: $(diff "$work/config.yaml.orig" "$hermes_yaml" | head -n 30)"
fi

step "done"
[ "$nfail" -eq 0 ]
