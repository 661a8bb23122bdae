#!/usr/bin/env bash
# Fails when packages import against their layers (docs/architecture.md). The metal family:
# a shared package (or the test fixtures) importing a controller or the assembly, or a
# controller importing the assembly.
set -euo pipefail
cd "$(dirname "$0")/.."

base=github.com/metalhub/metalhub/internal/controller/metal
controllers="server claim maintenance bmccontroller bmcuser bootconfig readiness wiring"
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

# The firmware family: the shared machinery imports no controller nor the assembly; a
# controller imports neither the assembly nor another controller.
fw=github.com/metalhub/metalhub/internal/controller/firmware
fw_controllers="version settings rollout"
fw_shared="record secretvalue work flash"
for p in $fw_shared; do
  imports=$(go list -f '{{join .Imports "\n"}}' "$fw/$p")
  for c in "" $fw_controllers; do
    if grep -qx "$fw${c:+/$c}" <<<"$imports"; then echo "layers: $fw/$p imports $fw${c:+/$c}" >&2; fail=1; fi
  done
done
for p in $fw_controllers; do
  imports=$(go list -f '{{join .Imports "\n"}}' "$fw/$p")
  for c in "" $fw_controllers; do
    [ "$c" = "$p" ] && continue
    if grep -qx "$fw${c:+/$c}" <<<"$imports"; then echo "layers: $fw/$p imports $fw${c:+/$c}" >&2; fail=1; fi
  done
done
# The suites' fixture imports no controller.
if go list -f '{{join .Imports "\n"}}' github.com/metalhub/metalhub/internal/testenv/suite | grep -q "/internal/controller/"; then
  echo "layers: internal/testenv/suite imports a controller package" >&2; fail=1
fi

# The Redfish client and the emulator: each service package sits below its facade and imports
# neither the facade nor a controller; the two trees do not import each other.
module=github.com/metalhub/metalhub
below() { # below ROOT OTHER: ROOT's sub-packages import neither ROOT nor a controller; ROOT not OTHER
  local root=$module/$1 other=$module/$2 pkg imports
  for pkg in $(go list "./$1/..."); do
    imports=$(go list -f '{{join .Imports "\n"}}' "$pkg")
    if [ "$pkg" != "$root" ] && grep -qx "$root" <<<"$imports"; then
      echo "layers: $pkg imports its facade $root" >&2
      fail=1
    fi
    if grep -q "^$module/internal/controller/" <<<"$imports"; then
      echo "layers: $pkg imports a controller package" >&2
      fail=1
    fi
    if grep -q "^$other\(/\|\$\)" <<<"$imports"; then
      echo "layers: $pkg imports $other" >&2
      fail=1
    fi
  done
}
below internal/bmc internal/emulator
below internal/emulator/redfish internal/bmc

# The delivery family: each package imports only the family packages listed for it; none
# imports the webhook but rights, which nothing of the family imports.
d=$module/internal/controller/delivery
family="$d $d/manifests $d/sealing $d/policy $d/target $d/apply $module/internal/webhook $module/internal/webhook/rights"
allow() { # allow PKG ALLOWED...: PKG's imports within the family must be among ALLOWED
  local pkg=$1 imp; shift
  for imp in $(go list -f '{{join .Imports "\n"}}' "$pkg"); do
    grep -qxF "$imp" <(tr ' ' '\n' <<<"$family") || continue
    grep -qxF "$imp" <(printf '%s\n' "$@") || { echo "layers: $pkg imports $imp" >&2; fail=1; }
  done
}
allow $d/manifests
allow $d/sealing   $d/manifests
allow $d/policy    $d/manifests
allow $d/target    $d/manifests $d/sealing
allow $d/apply     $d/manifests $d/policy $d/target
allow $d           $d/manifests $d/sealing $d/policy $d/target $d/apply
allow $module/internal/webhook/rights $d $d/manifests $d/sealing $d/target $d/apply
exit $fail
