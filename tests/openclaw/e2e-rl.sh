#!/usr/bin/env bash
# End-to-end test with a real OpenClaw in `mode: rl`: the agent is answered by
# the trainable model, sampled through a real Tinker-compatible training
# server (skyrl 0.3.0 on CPU with a tiny random Qwen3, scripts/skyrl-cpu):
#
#   openclaw agent ─ws─▶ openclaw gateway ─HTTP─▶ metaclaw (mode: rl) ─HTTP─▶ skyrl (sample)
#                                                                    └─ dummy upstream (llm, unused)
#
# One plain turn. `rl.fallback_to_llm: false`, so a student that cannot
# answer fails the turn instead of hiding behind `llm`. Checks that OpenClaw
# gets an answer (any text: the model is random), that metaclaw recorded the
# main turn as served by the student with its exact prompt and sampled
# tokens and logprobs, that `llm` got no call, and that `metaclaw stop
# --restore` gives openclaw.json back (docs/openclaw-e2e.md, "rl mode").
#
# Usage: tests/openclaw/e2e-rl.sh     (KEEP_WORK=1 keeps the scratch folder)
# Env:   METACLAW_BIN (else $CARGO_TARGET_DIR/debug/metaclaw, else
#        target/debug/metaclaw; built when missing), METACLAW_CACHE (node and
#        openclaw), METACLAW_SKYRL_HOME / SKYRL_PYTHON (scripts/skyrl-cpu),
#        SKYRL_READY_TIMEOUT (seconds from starting skyrl to its ready line,
#        default 360), METACLAW_E2E_CONFIG (YAML appended to metaclaw's config).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
t_start=$(date +%s)

# ---------------------------------------------------------------- helpers
# shellcheck source=../lib/agent-e2e.sh
source "$root/tests/lib/agent-e2e.sh"

# skyrl is Python; so are this script's checks. As tests/tinker_skyrl.rs does.
skyrl_python="${SKYRL_PYTHON:-python3}"
if ! command -v python3 >/dev/null || ! "$skyrl_python" --version >/dev/null 2>&1; then
  echo "SKIPPED openclaw e2e (rl): no Python ($skyrl_python) to run skyrl 0.3.0;" \
    "install Python 3.11 to run the real OpenClaw against a real training server"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/metaclaw-openclaw-e2e-rl.XXXXXX")"
upstream_pid="" gateway_pid="" skyrl_pid="" metaclaw_started=false metaclaw_stopped=false
export METACLAW_HOME="$work/metaclaw-home"
oc_home="$work/home"
timings=()
timed() { timings+=("$1: $2s"); echo "time: $1 $2s"; } # <what> <seconds>

tail_logs() {
  local f
  for f in "$work/skyrl.err" "$work/skyrl/server.log" "$work/upstream.log" \
    "$METACLAW_HOME/logs/metaclaw.log" "$work/gateway.log" "$work"/turn-*.json "$work"/turn-*.err \
    "$work/openclaw.log"; do
    [ -s "$f" ] || continue
    echo "---- tail of $f"
    tail -n 40 "$f" | cut -c1-400
  done
}

kill_group() { # <pid> <quarter-seconds>: TERM its process group, then KILL what is left
  kill -TERM -- "-$1" 2>/dev/null || true
  for _ in $(seq "$2"); do kill -0 "$1" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  set +e
  if $metaclaw_started && ! $metaclaw_stopped; then
    timeout 30 "$bin" stop --timeout 10 --restore >/dev/null 2>&1
  fi
  [ -z "$gateway_pid" ] || kill_group "$gateway_pid" 40
  # scripts/skyrl-cpu stops its server and engine on TERM (up to ~10 s).
  if [ -n "$skyrl_pid" ]; then
    kill -TERM "$skyrl_pid" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$skyrl_pid" 2>/dev/null || break; sleep 0.25; done
    kill_group "$skyrl_pid" 4
  fi
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null; wait "$upstream_pid" 2>/dev/null; fi
  printf '  %s\n' "${timings[@]}"
  finish "openclaw e2e (rl)" "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- install
use_openclaw

find_metaclaw

# ---------------------------------------------------------------- skyrl (background)
step "skyrl 0.3.0 on CPU (scripts/skyrl-cpu; installs itself the first time)"
t0=$(date +%s)
# The venv and the tiny model (foreground: a first install takes minutes and
# is not part of the bounded start below).
model_dir="$(scripts/skyrl-cpu model 2>"$work/skyrl.err" | tail -n 1)" ||
  die "scripts/skyrl-cpu model failed: $(tail -n 20 "$work/skyrl.err")"
[ -f "$model_dir/tokenizer.json" ] || die "scripts/skyrl-cpu model printed '$model_dir', which has no tokenizer.json"
timed "skyrl install and model check" $(($(date +%s) - t0))
echo "model: $model_dir"
# Its one stdout line (the ready line) comes through a fifo; own process
# group, so cleanup can take the server and its engine down whatever happens.
mkfifo "$work/skyrl.ready"
t_skyrl=$(date +%s)
setsid scripts/skyrl-cpu start --work "$work/skyrl" >"$work/skyrl.ready" 2>>"$work/skyrl.err" &
skyrl_pid=$!
exec 3<"$work/skyrl.ready"

# ---------------------------------------------------------------- meanwhile: dummy upstream, homes
start_dummy_upstream

unset OPENCLAW_STATE_DIR OPENCLAW_CONFIG_PATH OPENCLAW_HOME OPENCLAW_PROFILE
export HOME="$oc_home" TMPDIR="$work/tmp" OPENCLAW_NO_AUTO_UPDATE=1
mkdir -p "$HOME/.openclaw" "$HOME/workspace" "$TMPDIR"
oc_json="$HOME/.openclaw/openclaw.json"
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
      }
    }
  }
}
JSON
cp -p "$oc_json" "$work/openclaw.json.orig"

# ---------------------------------------------------------------- wait for skyrl's ready line
ready_timeout="${SKYRL_READY_TIMEOUT:-360}"
left=$((ready_timeout - ($(date +%s) - t_skyrl)))
[ "$left" -gt 0 ] || left=1
line="" read_rc=0
read -r -t "$left" -u 3 line || read_rc=$?
if [ "$read_rc" -gt 128 ]; then
  die "skyrl printed no ready line within ${ready_timeout}s (SKYRL_READY_TIMEOUT); see $work/skyrl/server.log"
elif [ "$read_rc" -ne 0 ]; then
  die "scripts/skyrl-cpu start exited before it was ready: $(tail -n 20 "$work/skyrl.err")"
fi
skyrl_url="${line#skyrl listening on }"
[[ "$line" == "skyrl listening on http://"* ]] || die "unexpected line from scripts/skyrl-cpu start: '$line'"
timed "skyrl start (to its ready line)" $(($(date +%s) - t_skyrl))
exec 3<&- # nothing else comes on its stdout; the processes started below need not hold the fifo
echo "skyrl at $skyrl_url"

# ---------------------------------------------------------------- metaclaw in rl mode
step "metaclaw start (mode: rl)"
mkdir -p "$METACLAW_HOME"
cat >"$METACLAW_HOME/config.yaml" <<YAML
mode: rl
llm:
  api_base: $upstream/v1
  model_id: agent
proxy:
  port: 0
claw_type: openclaw
rl:
  model: $model_dir
  tinker_base_url: $skyrl_url
  tinker_api_key: tml-dummy
  # A random model otherwise rambles to the limit, and CPU sampling is slow.
  max_new_tokens: 16
  # A student that cannot answer fails the turn (a fallback would hide it).
  fallback_to_llm: false
sessions:
  idle_timeout: 30m
learning:
  enabled: false
YAML
[ -z "${METACLAW_E2E_CONFIG:-}" ] || printf '%s\n' "$METACLAW_E2E_CONFIG" >>"$METACLAW_HOME/config.yaml"
"$bin" start >"$work/start.out" 2>&1 || die "metaclaw start: $(cat "$work/start.out")"
metaclaw_started=true
cat "$work/start.out"
t_student=$(date +%s)

# The gateway starts while the student connects.
step "openclaw gateway"
gateway_port="$(free_port)"
export OPENCLAW_GATEWAY_PORT="$gateway_port" OPENCLAW_GATEWAY_TOKEN="e2e-$RANDOM$RANDOM"
t_gateway=$(date +%s)
setsid openclaw gateway run --bind loopback --port "$gateway_port" --auth token \
  --token "$OPENCLAW_GATEWAY_TOKEN" >"$work/gateway.log" 2>&1 &
gateway_pid=$!

student() { # prints the student's state and why (metaclaw status --json = GET /admin/status)
  "$bin" status --json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin).get("student") or {}
print(s.get("state", "<no student in status>"), "-", s.get("reason") or "")'
}
deadline=$((t_student + 120))
until [[ "$(student)" == "ready "* ]]; do
  [ "$(date +%s)" -lt "$deadline" ] || die "the student is not ready 120s after metaclaw start: $(student)"
  sleep 0.5
done
timed "student ready (after metaclaw start)" $(($(date +%s) - t_student))
"$bin" status | grep -E '^  (mode|student):' || true

gateway_up() { curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$gateway_port/"; }
deadline=$((t_gateway + 120))
until gateway_up; do
  kill -0 "$gateway_pid" 2>/dev/null || die "the openclaw gateway exited during startup"
  [ "$(date +%s)" -lt "$deadline" ] || die "the openclaw gateway did not listen on $gateway_port within 120s"
  sleep 0.5
done
timed "gateway listening (after its start)" $(($(date +%s) - t_gateway))

# ---------------------------------------------------------------- the turn
step "turn: plain, answered by the student"
t0=$(date +%s) rc=0
timeout -k 10 300 openclaw agent --agent main --message "Say PONG" --json \
  >"$work/turn-1.json" 2>"$work/turn-1.err" || rc=$?
timed "the turn (openclaw agent)" $(($(date +%s) - t0))
[ "$rc" -eq 0 ] || die "openclaw agent exited $rc: $(tail -n 5 "$work/turn-1.err")"
pass "openclaw agent exited 0"
check "OpenClaw printed an answer object (status ok, result.payloads, result.meta.agentMeta.sessionId)" \
  python3 - "$work/turn-1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d.get("result") if isinstance(d, dict) else None
errors = []
if not isinstance(r, dict): errors.append(f"no result object: {json.dumps(d)[:400]}")
else:
    if d.get("status") != "ok": errors.append(f"status {d.get('status')!r}, summary {d.get('summary')!r}")
    if not isinstance(r.get("payloads"), list): errors.append(f"result.payloads is {r.get('payloads')!r}")
    sid = ((r.get("meta") or {}).get("agentMeta") or {}).get("sessionId")
    if not isinstance(sid, str) or not sid: errors.append(f"no result.meta.agentMeta.sessionId: {json.dumps(r.get('meta'))[:300]}")
if errors: print("; ".join(errors)); sys.exit(1)
text = " ".join(p.get("text") or "" for p in r["payloads"])
print(f"{len(r['payloads'])} payload(s), text {text[:120]!r}")
PY
sid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["result"]["meta"]["agentMeta"]["sessionId"])' "$work/turn-1.json")" ||
  die "no sessionId in openclaw's JSON: $(head -c 600 "$work/turn-1.json")"
echo "OpenClaw sessionId: $sid"

# metaclaw writes turns in the background: wait until the turn is there.
recorded() { "$bin" sessions show "$sid" --json --tokens >"$work/session.json" 2>/dev/null &&
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["turns"] else 1)' "$work/session.json"; }
wait_for 30 "metaclaw to record a turn under OpenClaw's sessionId $sid (sessions: $("$bin" sessions list --json 2>&1 | head -c 400))" recorded
"$bin" sessions list --json >"$work/sessions.json" || die "metaclaw sessions list --json"
check "metaclaw recorded the main turn as served by the student, with its exact tokens and logprobs" \
  python3 - "$work/sessions.json" "$work/session.json" "$sid" "$model_dir" <<'PY'
import json, sys
sessions, show, sid, model = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
errors = []
ids = [s["id"] for s in sessions]
if sid not in ids: errors.append(f"sessions list has {ids}, not {sid}")
turns = show["turns"]
main = [t for t in turns if t.get("turn_type") == "main"]
if not main: errors.append(f"no main turn: {[(t.get('turn_type'), t.get('served_by')) for t in turns]}")
other = [(t["seq"], t.get("served_by"), t.get("fallback_reason")) for t in turns if t.get("served_by") != "student"]
if other: errors.append(f"turns not served by the student: {other}")
for t in main:
    s, tok = t.get("sample") or {}, t.get("tokens") or {}
    p, out, lp = tok.get("prompt") or [], tok.get("sampled") or [], tok.get("logprobs") or []
    if t.get("status") != "ok": errors.append(f"turn {t['seq']} status {t.get('status')!r}")
    if t.get("served_by") != "student": errors.append(f"turn {t['seq']} served_by {t.get('served_by')!r} ({t.get('fallback_reason')})")
    if not s: errors.append(f"turn {t['seq']} has no sample"); continue
    if s.get("withheld"): errors.append(f"turn {t['seq']}'s tokens withheld: {s['withheld']}")
    if not s.get("prompt_len", 0) > 100: errors.append(f"sample.prompt_len {s.get('prompt_len')}")
    if s.get("prompt_len") != len(p): errors.append(f"sample.prompt_len {s.get('prompt_len')} but {len(p)} prompt tokens")
    if not out: errors.append("no sampled tokens")
    if s.get("sampled_len") != len(out): errors.append(f"sample.sampled_len {s.get('sampled_len')} but {len(out)} sampled tokens")
    if len(lp) != len(out): errors.append(f"{len(lp)} logprobs for {len(out)} sampled tokens")
    if any(not isinstance(x, (int, float)) or x > 0 for x in lp): errors.append(f"logprobs not all <= 0: {lp[:8]}")
    if len(out) > 16: errors.append(f"{len(out)} sampled tokens, more than rl.max_new_tokens (16)")
    if s.get("policy_version") != 0: errors.append(f"policy_version {s.get('policy_version')!r}, expected 0 (the base weights)")
if errors: print("; ".join(errors)); sys.exit(1)
t = main[0]; s = t["sample"]
print(f"{len(turns)} turn(s); main turn {t['seq']}: policy version {s['policy_version']}, sampler {s['sampler']}, "
      f"{s['prompt_len']} prompt tokens, {s['sampled_len']} sampled (stop {s['stop_reason']}), "
      f"parse error {s.get('parse_error')!r}")
PY
openclaw_calls() { dummy_requests | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["requests"]))'; }
check "llm (the dummy upstream) got no call: the student answered" eq "$(openclaw_calls || echo '<unreadable>')" 0

# ---------------------------------------------------------------- stop --restore
step "stop the gateway, then metaclaw stop --restore"
kill_group "$gateway_pid" 60
gateway_pid=""
stop_out="$(timeout 60 "$bin" stop --restore 2>&1)" || die "metaclaw stop --restore: $stop_out"
metaclaw_stopped=true
if cmp "$work/openclaw.json.orig" "$oc_json"; then
  pass "after metaclaw stop --restore, openclaw.json is the original byte for byte"
else
  fail "openclaw.json differs from the original after metaclaw stop --restore: $(diff "$work/openclaw.json.orig" "$oc_json" | head -n 30)"
fi

step "done"
[ "$nfail" -eq 0 ]
