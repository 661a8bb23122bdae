#!/usr/bin/env bash
# Builds the binaries the project needs but cannot download: kube-apiserver, kubectl, kube-controller-manager
# (k8s.io/kubernetes), etcd, controller-gen, helm and promtool, each from its pinned tools module, into
# bin/. A binary already built at the pinned version is kept, so only the first run pays
# for the long kube-apiserver build (5-10 minutes, ~2 GB RAM).
#
# Usage: hack/tools/build.sh [envtest|controller-gen|helm|promtool|all]   (default: all)
# Prints the envtest assets directory (KUBEBUILDER_ASSETS) as its last line for "envtest".
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/hack/tools"

modver() { # module version pinned in a tools go.mod
  awk -v m="$2" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$tools/$1/go.mod"
}
KUBE_VERSION=$(modver kube-apiserver k8s.io/kubernetes)
ETCD_VERSION=$(modver etcd go.etcd.io/etcd/server/v3)
CG_VERSION=$(modver controller-gen sigs.k8s.io/controller-tools)
HELM_VERSION=$(modver helm helm.sh/helm/v3)
PROMTOOL_VERSION=$(modver promtool github.com/prometheus/prometheus)

ASSETS="$root/bin/k8s/${KUBE_VERSION}-etcd-${ETCD_VERSION}"
CONTROLLER_GEN="$root/bin/controller-gen-${CG_VERSION}"
HELM="$root/bin/helm-${HELM_VERSION}"
PROMTOOL="$root/bin/promtool-${PROMTOOL_VERSION}"

log() { echo "[build-tools] $*" >&2; }

build() { # module dir, package, output
  local mod=$1 pkg=$2 out=$3 start
  if [ -x "$out" ]; then return 0; fi
  start=$(date +%s)
  log "building $pkg -> ${out#$root/} (first time only)"
  mkdir -p "$(dirname "$out")"
  # Progress: a line every 30 s so a long build does not look hung.
  ( while sleep 30; do log "  still building $(basename "$out") ($(( $(date +%s) - start ))s)"; done ) &
  local ticker=$!
  local rc=0
  ( cd "$tools/$mod" && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" "$pkg" ) || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  if [ $rc -ne 0 ]; then rm -f "$out.tmp"; log "build of $pkg failed"; return $rc; fi
  mv "$out.tmp" "$out"
  log "built $(basename "$out") in $(( $(date +%s) - start ))s"
}

envtest() {
  build etcd go.etcd.io/etcd/server/v3 "$ASSETS/etcd"
  build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ASSETS/kube-apiserver"
  build kube-apiserver k8s.io/kubernetes/cmd/kubectl "$ASSETS/kubectl"
  build kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager "$ASSETS/kube-controller-manager"
  # A stable path for the Makefile and tests; the versioned dir is the cache key.
  ln -sfn "$ASSETS" "$root/bin/k8s/current"
}

controller_gen() {
  build controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_GEN"
  ln -sfn "$(basename "$CONTROLLER_GEN")" "$root/bin/controller-gen"
}

helm() {
  build helm helm.sh/helm/v3/cmd/helm "$HELM"
  ln -sfn "$(basename "$HELM")" "$root/bin/helm"
}

promtool() {
  build promtool github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL"
  ln -sfn "$(basename "$PROMTOOL")" "$root/bin/promtool"
}

case "${1:-all}" in
  envtest) envtest; echo "$ASSETS" ;;
  controller-gen) controller_gen; echo "$CONTROLLER_GEN" ;;
  helm) helm; echo "$HELM" ;;
  promtool) promtool; echo "$PROMTOOL" ;;
  all) controller_gen; helm; promtool; envtest; echo "$ASSETS" ;;
  *) echo "usage: $0 [envtest|controller-gen|helm|promtool|all]" >&2; exit 2 ;;
esac
