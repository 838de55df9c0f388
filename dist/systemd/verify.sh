#!/usr/bin/env bash
# Checks the systemd units in this directory with `systemd-analyze verify`:
# syntax, known directives, specifiers, and that ExecStart's binary exists.
#
# The units run /usr/local/bin/conclave (where README.md installs it). Since
# verify checks that the binary is executable, that path is rewritten, in
# temporary copies, to a stub script (or to $CONCLAVE_BIN, for example a
# conclave built with go build -o): the check needs neither Go nor a build.
# The template is verified as an instance, conclave-election@demo.service.
# Any warning that names a unit fails the check, not only a non-zero status.
#
# Usage: bash dist/systemd/verify.sh   (from anywhere in the repository)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
installed=/usr/local/bin/conclave

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze not found (Debian: apt-get install systemd)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bin=${CONCLAVE_BIN:-}
if [ -z "$bin" ]; then
  bin="$tmp/bin/conclave"
  mkdir -p "$tmp/bin"
  printf '#!/bin/sh\nexit 0\n' > "$bin"
  chmod +x "$bin"
fi
[ -x "$bin" ] || { echo "$bin is not an executable" >&2; exit 1; }

status=0
check() { # check UNIT-FILE NAME-TO-VERIFY-AS
  local src=$1 name=$2
  if ! grep -q "^ExecStart=$installed " "$src"; then
    echo "FAIL $(basename "$src"): ExecStart does not run $installed"; status=1; return
  fi
  sed "s|$installed|$bin|g" "$src" > "$tmp/$name"
  local out rc=0
  out=$(systemd-analyze verify --man=no "$tmp/$name" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || grep -q conclave <<<"$out"; then
    echo "FAIL $(basename "$src") (verified as $name, exit $rc):"
    printf '%s\n' "$out" | sed "s|$tmp/||g; s|$bin|$installed|g"
    status=1
  else
    echo "ok   $(basename "$src") (verified as $name)"
  fi
}

check "$here/conclave-broker.service" conclave-broker.service
check "$here/conclave-election@.service" conclave-election@demo.service
exit $status
