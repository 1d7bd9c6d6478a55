#!/usr/bin/env bash
# End-to-end test with a real OpenClaw (pinned, from npm) as the agent:
#
#   openclaw agent (CLI) ─ws─▶ openclaw gateway ─HTTP─▶ metaclaw ─HTTP─▶ dummy upstream (model `agent`)
#
# In a throwaway HOME and METACLAW_HOME: `metaclaw start` wires OpenClaw to
# itself, a gateway runs, and headless turns go through it: a plain turn (a
# custom skill is injected), a tool turn (the dummy asks for `read`, OpenClaw
# runs it and calls again with the result), a `sessions.reset`, one more
# turn; then `metaclaw stop --restore`. Checks what the upstream saw, what
# metaclaw recorded, and that the user's openclaw.json comes back byte for
# byte (docs/openclaw-e2e.md).
#
# Usage: tests/openclaw/e2e.sh        (KEEP_WORK=1 keeps the scratch folder)
# Env:   METACLAW_BIN (else $CARGO_TARGET_DIR/debug/metaclaw, else
#        target/debug/metaclaw; built when missing), METACLAW_CACHE (where
#        install.sh keeps node and openclaw), METACLAW_E2E_CONFIG (YAML
#        appended to metaclaw's config).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
t_start=$(date +%s)

# ---------------------------------------------------------------- helpers
# shellcheck source=../lib/agent-e2e.sh
source "$root/tests/lib/agent-e2e.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/metaclaw-openclaw-e2e.XXXXXX")"
upstream_pid="" gateway_pid="" metaclaw_started=false metaclaw_stopped=false
export METACLAW_HOME="$work/metaclaw-home"
oc_home="$work/home"

tail_logs() {
  local f
  for f in "$work/upstream.log" "$METACLAW_HOME/logs/metaclaw.log" "$work/gateway.log" \
    "$work"/turn-*.json "$work"/turn-*.err "$work/openclaw.log"; do
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
  if [ -n "$gateway_pid" ] && kill -0 "$gateway_pid" 2>/dev/null; then
    kill -TERM -- "-$gateway_pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$gateway_pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$gateway_pid" 2>/dev/null
  fi
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null; wait "$upstream_pid" 2>/dev/null; fi
  finish "openclaw e2e" "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- install
use_openclaw

# ---------------------------------------------------------------- metaclaw binary
find_metaclaw

# ---------------------------------------------------------------- dummy upstream
start_dummy_upstream

# ---------------------------------------------------------------- OpenClaw's home (the user's, before metaclaw)
# Everything OpenClaw keeps goes under this HOME (its log: logging.file below).
unset OPENCLAW_STATE_DIR OPENCLAW_CONFIG_PATH OPENCLAW_HOME OPENCLAW_PROFILE
export HOME="$oc_home" TMPDIR="$work/tmp" OPENCLAW_NO_AUTO_UPDATE=1
mkdir -p "$HOME/.openclaw" "$HOME/workspace" "$TMPDIR"
oc_json="$HOME/.openclaw/openclaw.json"
# A user's config as OpenClaw writes it, with settings metaclaw must leave
# alone: another provider (the user's model before metaclaw), the sandbox,
# the tool policy.
cat >"$oc_json" <<JSON
{
  "update": {
    "checkOnStart": false
  },
  "logging": {
    "file": "$work/openclaw.log"
  },
  "gateway": {
    "mode": "local"
  },
  "agents": {
    "defaults": {
      "workspace": "$HOME/workspace",
      "heartbeat": {
        "every": "0m"
      },
      "model": {
        "primary": "localai/own-model"
      },
      "sandbox": {
        "mode": "non-main",
        "scope": "session",
        "workspaceAccess": "none"
      }
    }
  },
  "tools": {
    "profile": "coding",
    "deny": ["web_search"]
  },
  "models": {
    "mode": "merge",
    "providers": {
      "localai": {
        "baseUrl": "http://127.0.0.1:9/v1",
        "apiKey": "user-own-key",
        "api": "openai-completions",
        "models": [
          { "id": "own-model", "name": "The user's own model", "contextWindow": 128000, "maxTokens": 4096 }
        ]
      }
    }
  }
}
JSON
# Two more agents of the user's, added with OpenClaw's own command before
# metaclaw arrives: each gets its own skills and sessions through metaclaw (f).
for agent in a b; do
  timeout -k 10 120 openclaw agents add "$agent" --workspace "$HOME/workspace-$agent" --non-interactive --json \
    >"$work/agents-add-$agent.json" 2>"$work/agents-add-$agent.err" ||
    die "openclaw agents add $agent: $(tail -n 5 "$work/agents-add-$agent.err")"
done
cp -p "$oc_json" "$work/openclaw.json.orig"
openclaw config validate >"$work/validate-baseline.log" 2>&1 ||
  die "the baseline openclaw.json is not valid for openclaw: $(cat "$work/validate-baseline.log")"

# ---------------------------------------------------------------- metaclaw's home
skills_dir="$work/skills"
skill_name="brew-zorblax-tea"
skill_marker="ZORBLAX-SKILL-MARKER-5183"
mkdir -p "$METACLAW_HOME" "$skills_dir/$skill_name"
cat >"$skills_dir/$skill_name/SKILL.md" <<MD
---
name: $skill_name
description: How to brew zorblax tea, the rare tea of the OpenClaw end-to-end test, at the right water temperature.
category: task-specific
tags: [zorblax, tea, brewing]
version: 1.0.0
created_by: user
---
# Brew zorblax tea

1. Heat the water to 83 degrees, never boiling.
2. Steep the zorblax leaves for exactly four minutes ($skill_marker).
MD
# One skill name in agent a's layer and in agent b's, each with its own marker.
agent_skill="polish-qubit-lens"
for agent in a b; do
  mkdir -p "$skills_dir/@$agent/$agent_skill"
  cat >"$skills_dir/@$agent/$agent_skill/SKILL.md" <<MD
---
name: $agent_skill
description: How to polish a qubit lens without scratching its coating, for agent $agent.
---
# Polish a qubit lens

Use a dry microfibre cloth in small circles (QUBIT-LENS-MARKER-$agent-7291).
MD
done
cat >"$METACLAW_HOME/config.yaml" <<YAML
llm:
  api_base: $upstream/v1
  model_id: agent
proxy:
  port: 0
claw_type: openclaw
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

# ---------------------------------------------------------------- metaclaw start (wires OpenClaw)
step "metaclaw start"
"$bin" start >"$work/start.out" 2>&1 || die "metaclaw start: $(cat "$work/start.out")"
metaclaw_started=true
cat "$work/start.out"
"$bin" status --json >"$work/status.json" || die "metaclaw status --json after start"
wait_for 60 "metaclaw to index the skills" skills_indexed
metaclaw_url="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$work/status.json")"

cp "$oc_json" "$work/openclaw.json.wired"

# What the wiring must have written, and what it must not have touched.
wired_check() { # <label>: compares openclaw.json now with the original
  python3 - "$work/openclaw.json.orig" "$oc_json" "$metaclaw_url" "$1" <<'PY'
import json, sys
orig, now, url, label = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
errors = []
def get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return "<missing>"
        d = d[p]
    return d
for path in [("agents", "defaults", "sandbox"), ("tools",), ("agents", "defaults", "workspace"),
             ("agents", "defaults", "heartbeat"), ("update",), ("gateway",),
             ("models", "providers", "localai")]:
    if get(orig, *path) != get(now, *path):
        errors.append(f"{'.'.join(path)} changed: {json.dumps(get(orig, *path))} -> {json.dumps(get(now, *path))}")
if label == "wired":
    prov = get(now, "models", "providers", "metaclaw")
    if not isinstance(prov, dict):
        errors.append("no models.providers.metaclaw")
    else:
        if prov.get("baseUrl") != url + "/v1":
            errors.append(f"metaclaw baseUrl {prov.get('baseUrl')!r}, expected {url + '/v1'!r}")
        if prov.get("api") != "openai-completions":
            errors.append(f"metaclaw api {prov.get('api')!r}")
        ids = [m.get("id") for m in prov.get("models", [])]
        if "agent" not in ids:
            errors.append(f"model ids {ids}, expected 'agent'")
        elif not any(m.get("id") == "agent" and (m.get("compat") or {}).get("supportsPromptCacheKey") is True
                     for m in prov["models"]):
            errors.append("model 'agent' lacks compat.supportsPromptCacheKey: true")
    primary = get(now, "agents", "defaults", "model", "primary")
    if primary != "metaclaw/agent":
        errors.append(f"agents.defaults.model.primary is {primary!r}")
if errors:
    print("; ".join(errors)); sys.exit(1)
print("sandbox, tools, workspace, the user's other provider unchanged" +
      ("; provider metaclaw -> " + url + "/v1, primary metaclaw/agent" if label == "wired" else ""))
PY
}
check "wiring: openclaw.json points OpenClaw at metaclaw and leaves the user's settings alone" wired_check wired
openclaw config validate >"$work/validate-wired.log" 2>&1 &&
  pass "wiring: openclaw config validate accepts the wired openclaw.json" ||
  fail "wiring: openclaw config validate rejects the wired openclaw.json: $(tail -n 5 "$work/validate-wired.log")"
"$bin" status --json >"$work/status.json" || die "metaclaw status --json"
check "wiring: metaclaw status --json lists openclaw.json as wired" python3 - "$work/status.json" "$oc_json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1])).get("wiring") or {}
files = [f.get("path") for a in w.get("agents", []) if a.get("claw") == "openclaw" for f in a.get("files", [])]
if sys.argv[2] not in files: print(f"wiring: {json.dumps(w)[:400]}"); sys.exit(1)
print("claw openclaw, file " + sys.argv[2])
PY

# ---------------------------------------------------------------- gateway
step "openclaw gateway"
gateway_port="$(free_port)"
export OPENCLAW_GATEWAY_PORT="$gateway_port" OPENCLAW_GATEWAY_TOKEN="e2e-$RANDOM$RANDOM"
gateway_up() { kill -0 "$gateway_pid" 2>/dev/null || return 2; curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$gateway_port/"; }
start_gateway() { # waits until it listens; its log goes on in gateway.log
  # Own session and process group: cleanup kills the gateway and its children.
  setsid openclaw gateway run --bind loopback --port "$gateway_port" --auth token \
    --token "$OPENCLAW_GATEWAY_TOKEN" >>"$work/gateway.log" 2>&1 &
  gateway_pid=$!
  local deadline=$(($(date +%s) + 120))
  until gateway_up; do
    kill -0 "$gateway_pid" 2>/dev/null || die "the openclaw gateway exited during startup"
    [ "$(date +%s)" -lt "$deadline" ] || die "the openclaw gateway did not listen on $gateway_port within 120s"
    sleep 0.5
  done
  echo "gateway listening on 127.0.0.1:$gateway_port after $(($(date +%s) - deadline + 120))s"
}
stop_gateway() {
  kill -TERM -- "-$gateway_pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$gateway_pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$gateway_pid" 2>/dev/null || true
  wait "$gateway_pid" 2>/dev/null || true
  gateway_pid=""
}
start_gateway

turn_no=0
upstream_seen() { curl -sf --max-time 10 "$upstream/v1/dummy/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])'; } # every request the upstream ever got
turn_once() { # <message> <agent>: one attempt; sets rc
  local t0
  rc=0
  t0=$(date +%s)
  timeout -k 10 240 openclaw agent --agent "$2" --message "$1" --json \
    >"$work/turn-$turn_no.json" 2>"$work/turn-$turn_no.err" || rc=$?
  echo "turn $turn_no: exit $rc in $(($(date +%s) - t0))s"
}
turn() { # <message> [agent]: one headless turn through the gateway; JSON in $work/turn-N.json
  turn_no=$((turn_no + 1))
  local seen
  seen="$(upstream_seen)" || die "the dummy upstream did not list its requests"
  turn_once "$1" "${2:-main}"
  # OpenClaw 2026.9.6 can fail a turn inside its own per-agent SQLite database
  # (its idle cleanup racing its maintenance planner on a loaded machine:
  # "Agent database cleanup failed") before any request leaves it. That is an
  # infrastructure fault of the agent, not of metaclaw: retried once, and only
  # when the upstream provably saw nothing from the failed attempt. In a new
  # gateway: the one that failed keeps that agent's database resources
  # failed (CI, stop 63: the retry in the same gateway failed alike in 3 s).
  if [ "$rc" -ne 0 ] && grep -qE 'Agent database|SQLite' "$work/turn-$turn_no.err" &&
    [ "$(upstream_seen)" = "$seen" ]; then
    echo "INFRA: OpenClaw's own agent database failed turn $turn_no before any request reached metaclaw ($(grep -m1 -oE 'Agent database[^"]*|SQLite[^"]*' "$work/turn-$turn_no.err")); restarting the gateway and retrying it once"
    mv "$work/turn-$turn_no.err" "$work/turn-$turn_no.infra.err"
    stop_gateway
    start_gateway
    turn_once "$1" "${2:-main}"
  fi
  [ "$rc" -eq 0 ] || die "openclaw agent (turn $turn_no) exited $rc: $(tail -n 5 "$work/turn-$turn_no.err")"
}
turn_field() { # <n> <python expression over d = the turn's JSON>
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$work/turn-$1.json"
}
openclaw_requests() { # the upstream's requests from OpenClaw (not metaclaw's own), as JSON lines
  dummy_requests | python3 -c '
import json, sys
for r in json.load(sys.stdin)["requests"]:
    if "prompt_cache_key" in r or "openclaw:attempt" in json.dumps(r.get("messages", [])[:1]):
        print(json.dumps(r))'
}
wait_recorded() { # <session id> <turns>: wait until metaclaw has recorded that many turns
  local id="$1" n="$2" deadline=$(($(date +%s) + 30))
  until [ "$("$bin" sessions show "$id" --json 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["turns"]))' 2>/dev/null)" = "$n" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.3
  done
}

# ---------------------------------------------------------------- turn 1: plain, retrieves the skill
step "turn 1: plain"
turn "$turn1_msg"
sid="$(turn_field 1 'd["result"]["meta"]["agentMeta"]["sessionId"]')" ||
  die "turn 1: no result.meta.agentMeta.sessionId in openclaw's JSON: $(head -c 600 "$work/turn-1.json")"
echo "OpenClaw sessionId: $sid"
openclaw_requests >"$work/requests-1.jsonl" ||
  die "could not read the dummy upstream's requests ($upstream/v1/dummy/requests)"
check "turn 1: the upstream got exactly one call from OpenClaw" \
  python3 -c 'import sys; n=len(open(sys.argv[1]).read().splitlines()); print(n, "call(s)"); sys.exit(n != 1)' "$work/requests-1.jsonl"

check "(a) the upstream saw OpenClaw's system prompt, then the metaclaw skills block with the custom skill" \
  python3 - "$work/requests-1.jsonl" "$skill_name" "$skill_marker" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
name, marker = sys.argv[2], sys.argv[3]
m = r["messages"][0]
s = m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
errors = []
if m["role"] != "system": errors.append(f"first message is {m['role']}, not system")
head = "<!-- openclaw:attempt:STABLE -->\nYou are a personal assistant running inside OpenClaw"
if not s.startswith(head): errors.append(f"system prompt starts {s[:80]!r}, not OpenClaw's own")
stable_end = s.find("<!-- /openclaw:attempt:STABLE -->")
block = s.find("<!-- metaclaw:skills -->")
block_end = s.find("<!-- /metaclaw:skills -->")
if stable_end < 0: errors.append("no <!-- /openclaw:attempt:STABLE --> in the system prompt")
if block < 0 or block_end < block: errors.append("no <!-- metaclaw:skills --> block in the system prompt")
elif block < stable_end: errors.append(f"skills block at {block}, inside OpenClaw's STABLE part (ends at {stable_end})")
else:
    text = s[block:block_end]
    if name not in text or marker not in text: errors.append(f"the skills block lacks {name}/{marker}: {text[:300]!r}")
    if s.count("<!-- metaclaw:skills -->") != 1: errors.append("more than one skills block")
    if "<!-- /openclaw:attempt:DYNAMIC -->" in s and s.find("<!-- /openclaw:attempt:DYNAMIC -->") > block:
        errors.append("skills block before the end of OpenClaw's DYNAMIC part")
if errors: print("; ".join(errors)); sys.exit(1)
print(f"system prompt {len(s)} chars, OpenClaw's part ends at {block}, skills block {block_end - block} chars")
PY

pck="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1]).get("prompt_cache_key",""))' "$work/requests-1.jsonl")" || pck="<none>"
check "(b) OpenClaw's prompt_cache_key is <sessionId>:0 (sessionId from openclaw agent --json)" \
  eq "$pck" "$sid:0"
if wait_recorded "$sid" 1; then
  check "(b) metaclaw recorded the turn under OpenClaw's sessionId, window 0" python3 - "$sid" "$skill_name" <<PY
import json, subprocess, sys
sid, name = sys.argv[1], sys.argv[2]
sessions = json.loads(subprocess.run(["$bin", "sessions", "list", "--json"], capture_output=True, check=True).stdout)
ids = [s["id"] for s in sessions]
if ids != [sid]: print(f"sessions recorded: {ids}, expected [{sid!r}]"); sys.exit(1)
s = sessions[0]
if s.get("agent_session_id") != sid or s.get("window") != 0:
    print(f"agent_session_id {s.get('agent_session_id')!r}, window {s.get('window')!r}"); sys.exit(1)
show = json.loads(subprocess.run(["$bin", "sessions", "show", sid, "--json"], capture_output=True, check=True).stdout)
t = show["turns"][0]
skills = [k.get("id") for k in (t.get("injected_skills") or [])]
if t.get("status") != "ok" or name not in skills or "zorblax" not in (t.get("user") or ""):
    print(f"turn 1 recorded as status {t.get('status')!r}, skills {skills}, user {t.get('user')!r}"); sys.exit(1)
print(f"session {sid} (source {s.get('source')}), turn 1 ok with skill {name}")
PY
else
  fail "(b) metaclaw recorded no turn under OpenClaw's sessionId $sid within 30s: $("$bin" sessions list --json 2>&1 | head -c 600)"
fi
check "wiring: still untouched after turn 1" wired_check wired

# ---------------------------------------------------------------- turn 2: a tool call
step "turn 2: tool use"
file_marker="MC-E2E-FILE-MARKER-$RANDOM$RANDOM"
echo "the file says $file_marker" >"$HOME/workspace/hello.txt"
turn 'Please read {"path": "hello.txt"} and tell me what it says.'
openclaw_requests >"$work/requests-2.jsonl" ||
  die "could not read the dummy upstream's requests ($upstream/v1/dummy/requests)"
check "(c) the tool turn made two upstream calls: a read tool call, then the tool result with the marker" \
  python3 - "$work/requests-2.jsonl" "$file_marker" "$sid" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
marker, sid = sys.argv[2], sys.argv[3]
errors = []
if len(reqs) != 3: errors.append(f"{len(reqs)} OpenClaw calls in all, expected 3 (turn 1, then 2 for the tool turn)")
else:
    call1, call2 = reqs[1], reqs[2]
    users1 = [m for m in call1["messages"] if m["role"] == "user" and "hello.txt" in json.dumps(m)]
    if not users1: errors.append("call 1 does not carry the user's read request")
    tool_msgs = [m for m in call2["messages"] if m["role"] == "tool"]
    asked = [tc for m in call2["messages"] if m["role"] == "assistant" for tc in (m.get("tool_calls") or [])]
    if not any(tc.get("function", {}).get("name") == "read" for tc in asked):
        errors.append(f"call 2 has no assistant read tool call: {asked}")
    if not any(marker in json.dumps(m.get("content")) for m in tool_msgs):
        errors.append(f"call 2's tool message lacks the marker: {[m.get('content') for m in tool_msgs]}")
    for c in (call1, call2):
        if c.get("prompt_cache_key") != f"{sid}:0": errors.append(f"prompt_cache_key {c.get('prompt_cache_key')!r}")
    s1 = json.dumps(reqs[0]["messages"][0]["content"]); s2 = json.dumps(call1["messages"][0]["content"])
    end = "<!-- /openclaw:attempt:STABLE -->"
    if s1[: s1.find(end)] != s2[: s2.find(end)]: errors.append("OpenClaw's STABLE system prompt differs between turns")
if errors: print("; ".join(errors)); sys.exit(1)
print("read tool call, then the tool result with the marker; same prompt_cache_key; STABLE prompt byte-identical")
PY
answer2="$(turn_field 2 '" ".join(p.get("text") or "" for p in d["result"]["payloads"])')" ||
  die "turn 2: no result.payloads in openclaw's JSON: $(head -c 600 "$work/turn-2.json")"
check "(c) OpenClaw's final answer contains the file's marker" grep -qF "$file_marker" <<<"$answer2"
sid2="$(turn_field 2 'd["result"]["meta"]["agentMeta"]["sessionId"]')" || sid2="<none>"
check "(c) turn 2 is in the same OpenClaw session" eq "$sid2" "$sid"
if wait_recorded "$sid" 3; then
  check "(c) metaclaw recorded the tool turn: the read call and the answer with the marker" \
    python3 - "$sid" "$file_marker" <<PY
import json, subprocess, sys
sid, marker = sys.argv[1], sys.argv[2]
show = json.loads(subprocess.run(["$bin", "sessions", "show", sid, "--json"], capture_output=True, check=True).stdout)
turns = show["turns"]
bad = [t["seq"] for t in turns if t.get("status") != "ok"]
if bad: print(f"turns not ok: {bad}"); sys.exit(1)
t2, t3 = turns[1], turns[2]
calls = json.dumps(t2.get("response"))
if '"read"' not in calls or "tool_calls" not in calls: print(f"turn 2 response has no read tool call: {calls[:300]}"); sys.exit(1)
if marker not in json.dumps(t3.get("response")): print(f"turn 3 response lacks the marker: {t3.get('response_summary')!r}"); sys.exit(1)
print(f"{len(turns)} turns recorded, all ok")
PY
else
  fail "(c) metaclaw did not record 3 turns under $sid within 30s"
fi
check "wiring: still untouched after the tool turn" wired_check wired

# ---------------------------------------------------------------- reset, then turn 3
step "sessions.reset, then turn 3"
timeout -k 5 60 openclaw gateway call sessions.reset --params '{"key":"agent:main:main"}' --json \
  >"$work/reset.json" 2>"$work/reset.err" || die "openclaw gateway call sessions.reset: $(tail -n 5 "$work/reset.err")"
turn "A new conversation after the reset: hello again."
sid3="$(turn_field 3 'd["result"]["meta"]["agentMeta"]["sessionId"]')" || sid3="<none>"
openclaw_requests >"$work/requests-3.jsonl" ||
  die "could not read the dummy upstream's requests ($upstream/v1/dummy/requests)"
pck3="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1]).get("prompt_cache_key",""))' "$work/requests-3.jsonl")" || pck3="<none>"
echo "after the reset: OpenClaw sessionId $sid3, prompt_cache_key $pck3"
new_id="$pck3"
[ "$pck3" = "$sid3:0" ] && new_id="$sid3" # a new sessionId (not a reset in place) is recorded as itself
if wait_recorded "$new_id" 1; then
  check "(d) the turn after sessions.reset is recorded under a new metaclaw session, and the old one ended" \
    python3 - "$sid" "$new_id" <<PY
import json, subprocess, sys
old, new = sys.argv[1], sys.argv[2]
sessions = {s["id"]: s for s in json.loads(subprocess.run(["$bin", "sessions", "list", "--json"], capture_output=True, check=True).stdout)}
errors = []
if new == old: errors.append("the new window has the old id")
if old not in sessions: errors.append(f"old session {old} gone")
elif sessions[old]["status"] != "ended": errors.append(f"old session status {sessions[old]['status']!r}, end_reason {sessions[old].get('end_reason')!r}")
if new not in sessions: errors.append(f"no session {new}")
else:
    s = sessions[new]
    show = json.loads(subprocess.run(["$bin", "sessions", "show", new, "--json"], capture_output=True, check=True).stdout)
    if s["status"] != "active" or not any("hello again" in (t.get("user") or "") for t in show["turns"]):
        errors.append(f"new session {new}: status {s['status']}, turns {[t.get('user') for t in show['turns']]}")
if errors: print("; ".join(errors)); sys.exit(1)
print(f"old {old}: ended ({sessions[old].get('end_reason')}); new {new}: window {sessions[new].get('window')}, active")
PY
else
  fail "(d) no metaclaw session $new_id with the turn after the reset within 30s: $("$bin" sessions list --json 2>&1 | head -c 800)"
fi
check "wiring: still untouched after the reset" wired_check wired

# ---------------------------------------------------------------- two agents
step "agents a and b: their own skills and sessions"
for agent in a b; do
  other=b; [ "$agent" = b ] && other=a
  turn "How do I polish a qubit lens properly?" "$agent"
  openclaw_requests >"$work/requests-$agent.jsonl" ||
    die "could not read the dummy upstream's requests ($upstream/v1/dummy/requests)"
  check "(f) agent $agent's turn gets its own $agent_skill, never agent $other's" \
    python3 - "$work/requests-$agent.jsonl" "QUBIT-LENS-MARKER-$agent-7291" "QUBIT-LENS-MARKER-$other-7291" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
m = r["messages"][0]
s = m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
mine, theirs = sys.argv[2], sys.argv[3]
if mine not in s or theirs in s:
    print(f"own marker {'in' if mine in s else 'missing'}, other's {'in' if theirs in s else 'absent'}"); sys.exit(1)
print("own skill injected, the other agent's not")
PY
  sid_agent="$(turn_field "$turn_no" 'd["result"]["meta"]["agentMeta"]["sessionId"]')" || sid_agent="<none>"
  if wait_recorded "$sid_agent" 1; then
    check "(f) agent $agent's turn is recorded in a session of its own" python3 - "$agent" "$sid_agent" <<PY
import json, subprocess, sys
agent, sid = sys.argv[1], sys.argv[2]
mine = json.loads(subprocess.run(["$bin", "sessions", "list", "--agent", agent, "--json"], capture_output=True, check=True).stdout)
ids = [s["id"] for s in mine]
if ids != [sid]: print(f"sessions of {agent}: {ids}, expected [{sid!r}]"); sys.exit(1)
print(f"sessions list --agent {agent}: [{sid}]")
PY
  else
    fail "(f) metaclaw recorded no turn under agent $agent's session $sid_agent within 30s"
  fi
done

# ---------------------------------------------------------------- stop --restore
step "stop the gateway, then metaclaw stop --restore"
stop_gateway
cmp -s "$oc_json" "$work/openclaw.json.wired" ||
  echo "note: openclaw.json changed while wired (by OpenClaw?): $(diff "$work/openclaw.json.wired" "$oc_json" | head -n 20)"
stop_out="$(timeout 60 "$bin" stop --restore 2>&1)" || die "metaclaw stop --restore: $stop_out"
metaclaw_stopped=true
echo "$stop_out"
if cmp "$work/openclaw.json.orig" "$oc_json"; then
  pass "(e) after metaclaw stop --restore, openclaw.json is the original byte for byte"
else
  fail "(e) openclaw.json differs from the original after metaclaw stop --restore: $(diff "$work/openclaw.json.orig" "$oc_json" | head -n 30)"
fi

step "done"
[ "$nfail" -eq 0 ]
