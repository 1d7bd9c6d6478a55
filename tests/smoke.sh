#!/usr/bin/env bash
# The README's main command, as a newcomer runs it: `metaclaw start --demo`
# in a fresh home, one request with curl, `status`, `sessions list`, `stop`.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --locked -q -p metaclaw
bin="${CARGO_TARGET_DIR:-target}/debug/metaclaw"
export METACLAW_HOME
METACLAW_HOME="$(mktemp -d)"
trap '"$bin" stop >/dev/null 2>&1 || true; rm -rf "$METACLAW_HOME"' EXIT
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

out="$("$bin" start --demo --port 0)" || fail "start --demo: $out"
echo "$out" | grep -q "Demo round trip" || fail "no round trip shown: $out"
echo "$out" | grep -q "upstream: Hello from the metaclaw demo" || fail "the demo answer is wrong: $out"
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
echo "1 passed, 0 failed: smoke"
