#!/usr/bin/env bash
# metaclaw offers what it learns to OpenClaw's Skill Workshop (`skills.deliver`),
# with the real OpenClaw (pinned, from npm) playing the owner who reviews:
#
#   turns (agent main) ─▶ metaclaw ─▶ dummy upstream; `learn now` evolves a lesson
#   metaclaw ─▶ `openclaw skills workshop propose-create --agent main` ─▶ pending
#   owner: `openclaw skills workshop apply` ─▶ OpenClaw loads it; metaclaw injects it
#
# Part 1, `deliver: workshop`: the lesson is a pending proposal in OpenClaw's own
# listing, held from turns until applied, applied with OpenClaw's CLI, listed by
# OpenClaw as its own (`openclaw skills list`), injected by metaclaw from then on
# (and after a restart), the verdict in `metaclaw skills history`.
# Part 2, `deliver: both`: a second OpenClaw agent (`openclaw agents add work`)
# gets its own lesson in its own Workshop only, injected while pending, never
# again once the owner rejects it, with the owner's reason in the history.
# docs/openclaw-e2e.md.
#
# Usage: tests/openclaw/workshop.sh   (KEEP_WORK=1 keeps the scratch folder)
# Env:   METACLAW_BIN (else $CARGO_TARGET_DIR/debug/metaclaw, else target/debug/metaclaw).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
t_start=$(date +%s)

# shellcheck source=../lib/agent-e2e.sh
source "$root/tests/lib/agent-e2e.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/metaclaw-openclaw-workshop.XXXXXX")"
upstream_pid="" metaclaw_started=false
export METACLAW_HOME="$work/metaclaw-home"

tail_logs() {
  local f
  for f in "$work/upstream.log" "$METACLAW_HOME/logs/metaclaw.log" "$work"/*.err; do
    [ -s "$f" ] || continue
    echo "---- tail of $f"
    tail -n 40 "$f" | cut -c1-400
  done
}

cleanup() {
  local rc=$?
  set +e
  if $metaclaw_started; then timeout 30 "$bin" stop --timeout 10 >/dev/null 2>&1; fi
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null; wait "$upstream_pid" 2>/dev/null; fi
  finish "openclaw workshop" "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

use_openclaw
find_metaclaw
start_dummy_upstream

# ---------------------------------------------------------------- OpenClaw's home
unset OPENCLAW_STATE_DIR OPENCLAW_CONFIG_PATH OPENCLAW_HOME OPENCLAW_PROFILE
export HOME="$work/home" TMPDIR="$work/tmp" OPENCLAW_NO_AUTO_UPDATE=1
mkdir -p "$HOME/.openclaw" "$HOME/workspace" "$TMPDIR"
cat >"$HOME/.openclaw/openclaw.json" <<JSON
{
  "update": { "checkOnStart": false },
  "gateway": { "mode": "local" },
  "agents": { "defaults": { "workspace": "$HOME/workspace", "heartbeat": { "every": "0m" } } }
}
JSON

# ---------------------------------------------------------------- metaclaw
mkdir -p "$METACLAW_HOME"
write_config() { # <deliver>
  cat >"$METACLAW_HOME/config.yaml" <<YAML
llm:
  api_base: $upstream/v1
  model_id: echo-system
proxy:
  port: 0
skills:
  dir: $work/skills
  install_builtin: false
  deliver: $1
  workshop:
    command: openclaw
    poll_every: 1s
rl:
  prm_model: judge
  evolver_model: evolver
sessions:
  idle_timeout: 30m
# Under \`both\` a new skill is also a canary candidate, withheld from a share
# of sessions; off here, so that "injected while pending" holds for every turn.
canary:
  skills: false
YAML
}
start_metaclaw() {
  "$bin" start --no-wire >"$work/start.out" 2>&1 || die "metaclaw start: $(cat "$work/start.out")"
  metaclaw_started=true
  url="$("$bin" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["url"])')"
}
stop_metaclaw() {
  timeout 60 "$bin" stop >/dev/null 2>&1 || die "metaclaw stop"
  metaclaw_started=false
}
ask() { # <agent> <session> <question>: the system prompt the upstream saw (echo-system answers with it)
  curl -sf --max-time 60 "$url/v1/chat/completions" -H 'content-type: application/json' \
    -H "x-agent-id: $1" -H "x-session-id: $2" \
    -d "$(python3 -c 'import json,sys; print(json.dumps({"model":"echo-system","messages":[{"role":"system","content":"You are an assistant."},{"role":"user","content":sys.argv[1]}]}))' "$3")" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'
}
delivery() { # <python expression over d = status's skills.delivery>
  "$bin" status --json | python3 -c "import json,sys; d=json.load(sys.stdin)['skills']['delivery']; sys.exit(0 if ($1) else 1)"
}
lesson_of() { # <agent>: the id of the one lesson evolved in that agent's layer
  "$bin" skills list --json | python3 -c '
import json, sys
ids = [s["id"] for s in json.load(sys.stdin)["skills"] if s["id"].startswith("@" + sys.argv[1] + "/lesson-")]
print(ids[0] if len(ids) == 1 else sys.exit(f"lessons in {sys.argv[1]}: {ids}"))' "$1"
}
workshop() { # <agent> <args...>: openclaw skills workshop … --json
  local agent="$1"; shift
  timeout 120 openclaw skills workshop "$@" --agent "$agent" --json 2>"$work/workshop.err"
}
proposal_of() { # <agent> <skill name>: <id> <status> of its proposal in OpenClaw's own listing
  workshop "$1" list | python3 -c '
import json, sys
ps = [p for p in json.load(sys.stdin)["proposals"] if p.get("skillName") == sys.argv[1]]
print(ps[-1]["id"], ps[-1]["status"]) if ps else print("none none")' "$2"
}
evolve_offered() { # <agent> <session> <question>: one turn, learned from now; sets lesson and
  # name (its lesson) once metaclaw has proposed it
  ask "$1" "$2" "$3" >/dev/null || die "turn of $1 failed"
  "$bin" learn now "$2" >"$work/learn-$2.out" 2>&1 || die "learn now $2: $(cat "$work/learn-$2.out")"
  lesson="$(lesson_of "$1")" || die "no lesson evolved in $1's layer: $("$bin" skills list 2>&1 | tail -n 5)"
  name="${lesson#@"$1"/}"
  echo "evolved: $lesson"
  wait_for 300 "metaclaw to propose $lesson" delivery 'd["proposals"]["pending"] == 1'
  wait_for 60 "metaclaw to index it" skills_indexed
}
injected() { # <agent> <session> <question> <name>: that turn's upstream request had skill <name>
  local seen
  seen="$(ask "$1" "$2" "$3")" || { echo "the turn failed"; return 2; }
  grep -qF "### $4 (v" <<<"$seen" && echo "injected" || { echo "not injected"; return 1; }
}
not_injected() { # the same, and the turn answered without it (a failed turn is no pass)
  local rc=0
  injected "$@" || rc=$?
  [ "$rc" -eq 1 ]
}

# ---------------------------------------------------------------- part 1: deliver: workshop
step "part 1: deliver: workshop, agent main"
write_config workshop
start_metaclaw
q1="What is the safe steeping time for blue lotus tea?"
evolve_offered main ws-1 "$q1"
lesson1="$lesson" name1="$name"
read -r id1 st1 <<<"$(proposal_of main "$name1")"
check "(a) the lesson is a pending proposal in OpenClaw's own listing (openclaw skills workshop list --agent main)" eq "$st1" pending
check "(a) metaclaw's proposal is in OpenClaw's own folder, PROPOSAL.md and all" \
  test -n "$(find "$HOME/.openclaw" -path "*skill-workshop*" -name 'PROPOSAL.md' 2>/dev/null | head -n 1)"
check "(b) pending, it is held from turns: the upstream did not get it" not_injected main ws-2 "$q1" "$name1"
"$bin" skills list >"$work/list-1.out"
check "(b) metaclaw skills list marks it [held]" grep -qE "^$lesson1 .*\[held\]" "$work/list-1.out"

step "the owner applies it with OpenClaw's CLI"
workshop main apply "$id1" >"$work/apply.json" || die "openclaw skills workshop apply: $(tail -n 5 "$work/workshop.err")"
wait_for 120 "metaclaw to read the owner's verdict" delivery 'd["proposals"]["applied"] == 1'
check "(c) OpenClaw loads the applied skill natively (openclaw skills list: source openclaw-workshop)" \
  python3 - "$name1" <<'PY'
import json, subprocess, sys
out = subprocess.run(["openclaw", "skills", "list", "--json"], capture_output=True, text=True, timeout=120)
d = json.loads(out.stdout)
skills = d.get("skills", d) if isinstance(d, dict) else d
mine = [s for s in skills if s.get("name") == sys.argv[1]]
if not mine or mine[0].get("source") != "openclaw-workshop":
    print(f"{sys.argv[1]}: {mine}"); sys.exit(1)
print(f"{sys.argv[1]} from {mine[0].get('source')}")
PY
check "(c) applied, metaclaw injects it" injected main ws-3 "$q1" "$name1"
"$bin" skills history "$lesson1" >"$work/history-1.out" 2>&1 || true
check "(c) the owner's verdict is in the skill's history" grep -q "workshop:applied" "$work/history-1.out"

step "restart"
stop_metaclaw
write_config both
start_metaclaw
wait_for 60 "metaclaw to index the skills" skills_indexed
check "(d) after a restart the applied lesson is still injected" injected main ws-4 "$q1" "$name1"

# ---------------------------------------------------------------- part 2: deliver: both, agent work
step "part 2: deliver: both, OpenClaw agent work"
timeout 120 openclaw agents add work --workspace "$HOME/ws-work" --non-interactive --json \
  >"$work/agents-add.json" 2>"$work/agents-add.err" || die "openclaw agents add work: $(tail -n 5 "$work/agents-add.err")"
q2="How many grams of saffron go into a zarzuela for six people?"
evolve_offered work wk-1 "$q2"
lesson2="$lesson" name2="$name"
read -r id2 st2 <<<"$(proposal_of work "$name2")"
check "(e) work's lesson is pending in work's own Workshop" eq "$st2" pending
read -r _ st_main <<<"$(proposal_of main "$name2")"
check "(e) ...and not in main's" eq "$st_main" none
check "(e) deliver: both: injected while pending" injected work wk-2 "$q2" "$name2"
reason="we never put saffron in zarzuela"
workshop work reject "$id2" --reason "$reason" >"$work/reject.json" || die "openclaw skills workshop reject: $(tail -n 5 "$work/workshop.err")"
wait_for 120 "metaclaw to read the rejection" delivery 'd["proposals"]["rejected"] == 1'
check "(f) rejected by the owner, it is injected no more" not_injected work wk-3 "$q2" "$name2"
"$bin" skills history "$lesson2" >"$work/history-2.out" 2>&1 || true
check "(f) the rejection and the owner's reason are in the skill's history" grep -q "$reason" "$work/history-2.out"

step "done"
[ "$nfail" -eq 0 ]
