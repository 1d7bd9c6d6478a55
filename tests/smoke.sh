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
"$bin" status | grep -q "metaclaw is running" || fail "status"
for _ in $(seq 50); do
  "$bin" sessions list | grep -q smoke-1 && break
  sleep 0.1
done
"$bin" sessions list | grep -q smoke-1 || fail "the curl turn was not recorded"
"$bin" stop | grep -q stopped || fail "stop"
if "$bin" status >/dev/null; then fail "status after stop must say not running"; fi
echo "1 passed, 0 failed: smoke"
