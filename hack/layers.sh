#!/usr/bin/env bash
# Fails when the metal family's packages import against their layers (docs/architecture.md):
# a shared package (or the test fixtures) importing a controller or the assembly, or a
# controller importing the assembly.
set -euo pipefail
cd "$(dirname "$0")/.."

base=github.com/metalhub/metalhub/internal/controller/metal
controllers="server claim maintenance bmccontroller bmcuser bootconfig readiness"
shared="bmcaccess index intent serverstate claimable bootrequest shardkey bmcevents health inventorywalk metaltest"

fail=0
check() { # check PKG FORBIDDEN...: PKG's own imports must name none of FORBIDDEN
  local pkg=$1; shift
  local imports
  imports=$(go list -f '{{join .Imports "\n"}}' "$base/$pkg")
  for f in "$@"; do
    if grep -qx "$f" <<<"$imports"; then
      echo "layers: $base/$pkg imports $f" >&2
      fail=1
    fi
  done
}
forbidden_for_shared=("$base")
for c in $controllers; do forbidden_for_shared+=("$base/$c"); done
for p in $shared; do check "$p" "${forbidden_for_shared[@]}"; done
for c in $controllers; do check "$c" "$base"; done
exit $fail
