#!/usr/bin/env bash
# The README's main command, as a newcomer runs it: `metaclaw start --demo`
# in a fresh home (the learning loop, shown), one request with curl,
# `status`, `sessions list` (the demo's store, while it runs), `stop`.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -q -p metaclaw
bin="${CARGO_TARGET_DIR:-target}/debug/metaclaw"
export METACLAW_HOME
METACLAW_HOME="$(mktemp -d)"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$METACLAW_HOME"' EXIT
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

out="$("$bin" start --demo --port 0)" || fail "start --demo: $out"
# The loop: built-in skills injected, a skill evolved through the chain,
# the similar question getting it.
echo "$out" | grep -q "built-in skills injected: git-commit-messages (" || fail "no built-in skill injected: $out"
echo "$out" | grep -q "judge: turn 1 -1" || fail "the judge did not see the correction: $out"
echo "$out" | grep -q "checked by guard → redact → dedup" || fail "the evolver chain is not shown: $out"
echo "$out" | grep -q "✓ lesson-write-commit-message created" || fail "no skill evolved: $out"
echo "$out" | grep -q "skills injected: lesson-write-commit-message (.*evolved in step 4" \
  || fail "the second question did not get the evolved skill: $out"
echo "$out" | grep -q "demo data: $METACLAW_HOME/demo" || fail "the demo's data is not named: $out"
test -f "$METACLAW_HOME/demo/skills/lesson-write-commit-message/SKILL.md" || fail "the evolved skill is not in the demo's library"
url="$(echo "$out" | grep -o 'http://127.0.0.1:[0-9]*' | head -1)"

answer="$(curl -sS "$url/v1/chat/completions" -H 'content-type: application/json' \
  -H 'x-session-id: smoke-1' -d '{"model":"echo","messages":[{"role":"user","content":"hi there"}]}')"
echo "$answer" | grep -q '"content":"hi there"' || fail "curl through the proxy: $answer"

"$bin" start --demo --port 0 >/dev/null 2>&1 && fail "a second start on the same home must refuse"
# (Output is captured before grep: `grep -q` closing a pipe early would make
# the CLI exit 141, as any Unix tool does, and fail the pipeline.)
status="$("$bin" status)" || fail "status: $status"
echo "$status" | grep -q "metaclaw is running" || fail "status: $status"
for _ in $(seq 50); do
  sessions="$("$bin" sessions list)"
  echo "$sessions" | grep -q smoke-1 && break
  sleep 0.1
done
echo "$sessions" | grep -q smoke-1 || fail "the curl turn was not recorded: $sessions"
stopped="$("$bin" stop)" || fail "stop: $stopped"
echo "$stopped" | grep -q stopped || fail "stop: $stopped"
if "$bin" status >/dev/null; then fail "status after stop must say not running"; fi
# The demo kept to its own data: the home's own store and library were never written.
for own in "$METACLAW_HOME/metaclaw.db" "$METACLAW_HOME/skills"; do
  if test -e "$own"; then fail "the demo wrote $own"; fi
done
echo "1 passed, 0 failed: smoke"
