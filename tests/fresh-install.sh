#!/usr/bin/env bash
# The README's quick start as a new user runs it, from a fresh clone, with
# nothing but the Rust toolchain's own output: `cargo install --path host
# --root <tmp>`, `metaclaw setup` (flags), `metaclaw start` against the dummy
# upstream (`metaclaw dev upstream`: an echo model, a dummy judge and a dummy
# evolver). Then, with no `scripts/build-plugins` run (the clone has no
# target/; the first-party plugins come from the binary):
#   - a turn about git gets built-in skills injected (setup installed them);
#   - the scorer plugins score it;
#   - the session's learning job runs the evolver chain through guard and
#     writes the evolved skill;
#   - `metaclaw doctor --online` finds nothing wrong.
# The build reuses a cached target dir (METACLAW_INSTALL_TARGET, default
# ~/.cache/metaclaw/target, as CI): `cargo install` itself is what is run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
bin="$work/root/bin/metaclaw"
export METACLAW_HOME="$work/home"
up_pid=""
cleanup() {
  "$bin" stop >/dev/null 2>&1 || true
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "fresh-install: FAILED: $*" >&2
  [ -f "$METACLAW_HOME/logs/metaclaw.log" ] && tail -n 40 "$METACLAW_HOME/logs/metaclaw.log" >&2
  exit 1
}
step() { echo "-- $*"; }

step "a fresh clone of $(git -C "$root" rev-parse --short HEAD)"
git clone -q "$root" "$work/clone"
[ ! -e "$work/clone/target" ] || fail "the clone has a target/"

step "cargo install --path host --root <tmp>"
started=$(date +%s)
CARGO_TARGET_DIR="${METACLAW_INSTALL_TARGET:-$HOME/.cache/metaclaw/target}" \
  cargo install --quiet --locked --path "$work/clone/host" --root "$work/root"
echo "   installed in $(( $(date +%s) - started ))s: $(du -h "$bin" | cut -f1) binary"
version="$("$bin" --version)"
echo "$version" | grep -q "guard 0" || fail "--version does not list the embedded plugins: $version"
# An install carries nothing only tests use: no fake training service, no
# bench oracle; asked for one, it says how to build it.
if tinker="$("$bin" dev tinker --port 0 2>&1)"; then fail "an install serves the fake training service: $tinker"; fi
echo "$tinker" | grep -q -- "--features test-servers" || fail "dev tinker does not say how to build it: $tinker"

step "the dummy upstream"
"$bin" dev upstream --port 0 >"$work/upstream.out" 2>&1 &
up_pid=$!
for _ in $(seq 200); do
  grep -q "listening on" "$work/upstream.out" 2>/dev/null && break
  kill -0 "$up_pid" 2>/dev/null || fail "dev upstream exited: $(cat "$work/upstream.out")"
  sleep 0.05
done
upstream="$(grep -o 'http://127.0.0.1:[0-9]*/v1' "$work/upstream.out" | head -1)"
[ -n "$upstream" ] || fail "no upstream URL: $(cat "$work/upstream.out")"
models="$(curl -sf "$upstream/models")" || fail "the dummy upstream lists no models"
if echo "$models" | grep -q bench-oracle; then fail "an install serves the bench's oracle: $models"; fi

step "metaclaw setup (flags)"
out="$("$bin" setup --non-interactive --provider custom --api-base "$upstream" --model echo --claw none 2>&1)" ||
  fail "setup: $out"
echo "$out" | sed 's/^/   /'
# The dummy judge and evolver (the README's learning section names these keys).
"$bin" config set rl.prm_model judge >/dev/null
"$bin" config set rl.evolver_model evolver >/dev/null

step "metaclaw start"
out="$("$bin" start --port 0 2>&1)" || fail "start: $out"
echo "$out" | sed 's/^/   /'
url="$(echo "$out" | grep -o 'http://127.0.0.1:[0-9]*' | head -1)"
[ -n "$url" ] || fail "no URL from start: $out"
# A turn never waits for an index: wait for bm25 to hold one (status).
for _ in $(seq 600); do
  status="$("$bin" status --json)"
  echo "$status" | grep -q '"indexed_by": *\[[^]]*"bm25' && break
  sleep 0.1
done
echo "$status" | grep -q '"indexed_by": *\[[^]]*"bm25' || fail "bm25 never indexed the library: $status"

step "metaclaw doctor --online"
doctor="$("$bin" doctor --online 2>&1)" || fail "doctor found an error on a fresh install: $doctor"
echo "$doctor" | sed 's/^/   /'

chat() { # session, JSON messages
  curl -sS --fail-with-body "$url/v1/chat/completions" -H 'content-type: application/json' \
    -H "x-session-id: $1" -d "{\"model\":\"echo\",\"messages\":$2}"
}
step "a turn about git"
question="How should I write the git commit message for this refactor before I push it?"
chat fresh-1 "[{\"role\":\"user\",\"content\":\"$question\"}]" >/dev/null || fail "the first turn"
chat fresh-1 "[{\"role\":\"user\",\"content\":\"$question\"},{\"role\":\"assistant\",\"content\":\"Just write 'fix stuff'.\"},{\"role\":\"user\",\"content\":\"No, that is wrong: a commit message needs a short imperative subject line and a body that says why.\"}]" >/dev/null ||
  fail "the second turn"
seen="$(curl -sS "$upstream/dummy/requests?model=echo")"
echo "$seen" | grep -q 'metaclaw:skills' || fail "no skills block reached the upstream: $seen"
echo "$seen" | grep -q 'git-commit-messages' || fail "the git skill was not injected: $seen"

step "the session ends; learning runs"
curl -sS --fail-with-body -X POST "$url/v1/sessions/fresh-1/end" -H 'content-type: application/json' >/dev/null ||
  fail "ending the session"
learned="$("$bin" learn now fresh-1 --json)" || fail "learn now: $learned"
show="$("$bin" sessions show fresh-1 --json)"
skills="$(echo "$show" | python3 -c 'import json,sys; t=json.load(sys.stdin)["turns"]; print(" ".join(s["id"] for s in (t[0].get("injected_skills") or [])))')"
echo "   skills injected into the first turn: $skills"
rewards="$(echo "$show" | python3 -c 'import json,sys; t=json.load(sys.stdin)["turns"]; print(" ".join(sorted({r["source"] for x in t for r in x["rewards"]})))')"
echo "   rewards recorded from: $rewards"
echo "$rewards" | grep -q 'plugin:' || fail "no scorer plugin scored the turns: $show"
evolved="$(echo "$show" | python3 -c 'import json,sys; print(" ".join(d["outcome"]+":"+d["name"] for d in json.load(sys.stdin)["evolved"]))')"
echo "   evolved: $evolved"
echo "$evolved" | grep -q 'created:' || fail "no skill was evolved: $show"
plugins="$("$bin" plugins list --json)"
guard_calls="$(echo "$plugins" | python3 -c 'import json,sys; print(next(p["calls"] for p in json.load(sys.stdin)["plugins"] if p["name"]=="guard"))')"
[ "$guard_calls" -ge 1 ] || fail "guard was not called: $plugins"
echo "   guard checked the drafts ($guard_calls call(s))"
"$bin" stop >/dev/null
echo "1 passed, 0 failed: fresh-install"
