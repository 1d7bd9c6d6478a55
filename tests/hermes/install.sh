#!/usr/bin/env bash
# Installs Hermes Agent (PyPI hermes-agent, pinned with its dependencies in
# tests/hermes/requirements.txt) into a virtual environment in a cache folder
# that later runs reuse:
#
#   ${METACLAW_CACHE:-$HOME/.cache/metaclaw}/hermes/hermes-agent-<version>-<requirements sha>/
#
# Needs a Python 3.11-3.13 with venv (python3, or python3.13/3.12/3.11 on
# PATH) and PyPI.
#
# Output: progress on stderr; on stdout one last line `PATH=<venv>/bin` to
# prepend to PATH. Environment: METACLAW_CACHE, HERMES_INSTALL_TIMEOUT
# (seconds for pip, default 900).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
req="$here/requirements.txt"
HERMES_VERSION="$(sed -n 's/^hermes-agent==//p' "$req")"
sha="$(sha256sum "$req" | cut -c1-12)"
CACHE="${METACLAW_CACHE:-$HOME/.cache/metaclaw}/hermes"
VENV="$CACHE/hermes-agent-$HERMES_VERSION-$sha"
TIMEOUT="${HERMES_INSTALL_TIMEOUT:-900}"

log() { echo "install.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
start=$(date +%s.%N)
elapsed() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

installed() {
  [ -f "$VENV/.complete" ] && [ -x "$VENV/bin/hermes" ] &&
    [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("hermes-agent"))' 2>/dev/null)" = "$HERMES_VERSION" ]
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.install.lock"
flock -w "$TIMEOUT" 9 || die "another install holds $CACHE/.install.lock"

if installed; then
  log "hermes-agent $HERMES_VERSION: cached ($VENV)"
else
  python=""
  for p in python3 python3.13 python3.12 python3.11; do
    command -v "$p" >/dev/null || continue
    if "$p" -c 'import sys, venv; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null; then
      python="$p"; break
    fi
  done
  [ -n "$python" ] || die "hermes-agent needs Python 3.11-3.13 with venv; none found (python3 is $(python3 --version 2>&1))"
  log "hermes-agent $HERMES_VERSION: installing into $VENV with $($python --version)"
  # A venv is not relocatable (its scripts name their python): build it at
  # its final path, and mark it complete only once pip has succeeded.
  rm -rf "$VENV"
  "$python" -m venv "$VENV" || die "$python -m venv failed (Debian: apt-get install python3-venv)"
  if ! timeout "$TIMEOUT" "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$req" >&2; then
    rm -rf "$VENV"
    die "pip install -r $req failed (or took over ${TIMEOUT}s)"
  fi
  touch "$VENV/.complete"
  installed || { rm -rf "$VENV"; die "hermes-agent $HERMES_VERSION installed but not found in $VENV"; }
fi

log "hermes-agent $HERMES_VERSION ($("$VENV/bin/python" --version))"
log "install time: $(elapsed)s"
echo "PATH=$VENV/bin"
