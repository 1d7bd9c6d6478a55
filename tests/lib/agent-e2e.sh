# Shared by the real-agent end-to-end tests (tests/openclaw/e2e.sh,
# e2e-rl.sh, bench.sh, tests/hermes/e2e.sh): assertions, waiting, installing
# the agent, the metaclaw binary, the dummy upstream and the end of a run.
# Source it after setting `root` and `t_start`; define `tail_logs` (the logs
# shown when the test fails) and set `work` (the scratch folder).

npass=0 nfail=0
pass() { echo "PASS: $*"; npass=$((npass + 1)); }
fail() { echo "FAIL: $*"; nfail=$((nfail + 1)); }
die() { echo "FAIL: $*"; nfail=$((nfail + 1)); exit 1; }
step() { echo "== $* ($(($(date +%s) - t_start))s)"; }
check() { # <description> <command...>: PASS if the command succeeds
  local what="$1"; shift
  local out
  if out="$("$@" 2>&1)"; then pass "$what${out:+ — $out}"; else fail "$what${out:+ — $out}"; fi
}
eq() { # <got> <expected>
  if [ "$1" = "$2" ]; then echo "$1"; else echo "got '$1', expected '$2'"; return 1; fi
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # <seconds> <description> <command...>: poll every 0.5 s
  local secs="$1" what="$2"; shift 2
  local deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${secs}s waiting for $what"
    sleep 0.5
  done
}
# True once a retriever has indexed the loaded skills (metaclaw indexes in
# the background and a turn never waits for it).
skills_indexed() {
  "$bin" status --json | python3 -c 'import json,sys; s=json.load(sys.stdin)["skills"]; sys.exit(0 if s["loaded"] and s.get("indexed_by") else 1)'
}


# Sets `bin`: $METACLAW_BIN, else $CARGO_TARGET_DIR/debug/metaclaw, else
# target/debug/metaclaw (built when missing), with its plugins beside it.
# With `test-servers` as its argument (a script that needs the bench's
# scripted models or the fake training service), that build is made with
# them (`--features test-servers`) whenever METACLAW_BIN is not given: the
# binary there may be an install-like build from an earlier script.
find_metaclaw() {
  if [ -n "${METACLAW_BIN:-}" ]; then
    bin="$METACLAW_BIN"
  elif [ -n "${CARGO_TARGET_DIR:-}" ]; then
    bin="$CARGO_TARGET_DIR/debug/metaclaw"
  else
    bin="$root/target/debug/metaclaw"
  fi
  if [ "${1:-}" = test-servers ] && [ -z "${METACLAW_BIN:-}" ]; then
    step "build metaclaw with the test servers"
    cargo build --locked -q -p metaclaw --features test-servers
  elif [ ! -x "$bin" ]; then
    step "build metaclaw ($bin is missing)"
    cargo build --locked -q -p metaclaw
  fi
  [ -x "$bin" ] || die "no metaclaw binary at $bin"
  # Skills are chosen by the bm25 retriever plugin, compiled into metaclaw.
  echo "metaclaw: $bin ($("$bin" --version))"
  # `metaclaw start` wires the agent and `stop --restore` undoes it; builds
  # before that have no --no-wire. (Help is captured before grep: see
  # tests/smoke.sh on grep -q and SIGPIPE.)
  start_help="$("$bin" start --help)"
  grep -q -- '--no-wire' <<<"$start_help" ||
    die "$bin does not wire agents (no --no-wire in 'metaclaw start --help'): rebuild it (cargo build -p metaclaw)"

}

# Starts `metaclaw dev upstream` on a free port (logs in $work/upstream.log);
# sets upstream_port, upstream_pid and upstream. With `bench-models`, fails
# unless it serves the bench's scripted models.
start_dummy_upstream() {
  step "dummy upstream"
  upstream_port="$(free_port)"
  "$bin" dev upstream --port "$upstream_port" >"$work/upstream.log" 2>&1 &
  upstream_pid=$!
  upstream="http://127.0.0.1:$upstream_port"
  wait_for 30 "the dummy upstream on $upstream" curl -sf "$upstream/healthz"
  if [ "${1:-}" = bench-models ]; then
    curl -sf "$upstream/v1/models" | grep -q '"bench-oracle"' ||
      die "$bin serves no bench models (bench-oracle): it was built without the test servers; build it with cargo build -p metaclaw --features test-servers, or unset METACLAW_BIN"
  fi
}
dummy_requests() { curl -sf --max-time 10 "$upstream/v1/dummy/requests?model=agent"; }

# Runs an agent's install script, whose last line on stdout is `PATH=<dirs>`;
# sets installed_path to those dirs.
install_agent() { # <install script>
  local out
  out="$("$1")" || die "$1 failed"
  installed_path="$(printf '%s\n' "$out" | tail -n 1)"
  [[ "$installed_path" == PATH=* ]] || die "$1 printed no PATH line: $out"
  installed_path="${installed_path#PATH=}"
}

# Node 24 and the pinned OpenClaw (tests/openclaw/install.sh), first on PATH.
use_openclaw() {
  step "install node 24 and openclaw (tests/openclaw/install.sh)"
  install_agent tests/openclaw/install.sh
  export PATH="$installed_path:$PATH"
  echo "node $(node --version), $(openclaw --version | head -n 1)"
}

# The last part of a test's cleanup, once its processes are stopped: on a
# failure (a non-zero status or any FAIL) the logs' tails, the scratch
# folder kept and exit 1; otherwise the folder removed (KEEP_WORK=1 keeps
# it) and the count.
finish() { # <test's name> <exit status>
  if [ "$2" -ne 0 ] || [ "$nfail" -ne 0 ]; then
    tail_logs
    echo "scratch folder kept: $work"
    echo "$1: $npass passed, $nfail failed ($(($(date +%s) - t_start))s)"
    exit 1
  fi
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "scratch folder kept: $work"; else rm -rf "$work"; fi
  echo "$1: $npass passed, 0 failed in $(($(date +%s) - t_start))s"
}
