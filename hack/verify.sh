#!/usr/bin/env bash
# Fails when generated files (deepcopy, CRDs, RBAC) differ from what controller-gen makes of the
# current sources, when Go files are not gofmt'ed, when go.mod is not tidy, or when the metal
# family's packages import against their layers (hack/layers.sh). Regenerates into the work tree
# and compares with git, so a stale commit cannot pass.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
unformatted=$(gofmt -l $(git ls-files '*.go' ; git ls-files --others --exclude-standard '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "verify: not gofmt'ed:" >&2; echo "$unformatted" >&2; fail=1
fi

if ! tidy=$(go mod tidy -diff 2>&1); then
  echo "verify: go.mod/go.sum are not tidy ('go mod tidy' would change):" >&2; echo "$tidy" >&2; fail=1
fi

if ! hack/layers.sh; then
  fail=1
fi

before=$(git status --porcelain -- api config charts | sort)
make -s generate manifests >/dev/null
after=$(git status --porcelain -- api config charts | sort)
if [ "$before" != "$after" ]; then
  echo "verify: generated files were stale; 'make generate manifests' changed:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  fail=1
fi
# In CI the tree is a clean clone: any change at all means a stale commit.
if [ "${CI:-}" = "true" ] && [ -n "$(git status --porcelain -- api config charts)" ]; then
  echo "verify: generated files differ from the commit:" >&2
  git status --porcelain -- api config charts >&2
  git --no-pager diff --stat -- api config charts >&2
  fail=1
fi
exit $fail
