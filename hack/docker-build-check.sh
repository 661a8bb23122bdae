#!/usr/bin/env bash
# No Docker engine here, so this runs the Dockerfile's build stage itself: it interprets the
# stage's ARG, ENV, WORKDIR, COPY and RUN instructions, in order, in a temporary directory that
# holds only what the COPY lines copy (so a package the image needs but the Dockerfile forgets
# fails here), with /out redirected to that directory. Then it checks the binaries: static,
# trimmed and stripped as the flags say, and they start.
#
# Usage: hack/docker-build-check.sh [Dockerfile]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dockerfile=${1:-$root/Dockerfile}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ctx="$tmp/ctx" out="$tmp/out"
mkdir -p "$ctx" "$out"
log() { echo "[docker-build-check] $*" >&2; }

# The build stage's instructions, continuation lines joined, comments dropped.
stage=$(awk '
  /^[[:space:]]*#/ { next }
  { line = line $0 }
  /\\$/ { sub(/\\$/, "", line); next }
  { print line; line = "" }
' "$dockerfile" | awk 'toupper($1) == "FROM" { inbuild = (tolower($NF) == "build") ; next } inbuild && NF')
[ -n "$stage" ] || { log "no 'FROM ... AS build' stage in $dockerfile"; exit 1; }

workdir=$ctx
while IFS= read -r line; do
  instr=$(awk '{print toupper($1)}' <<<"$line")
  rest=${line#* }
  case "$instr" in
    ARG)
      # ARG NAME=default (a --build-arg would override it; the default is what we build).
      if [[ $rest == *=* ]]; then export "${rest%%=*}=${rest#*=}"; fi ;;
    ENV)
      for kv in $rest; do export "$kv"; done ;;
    WORKDIR)
      workdir=$ctx; mkdir -p "$workdir" ;;
    COPY)
      [[ $rest == --* ]] && { log "unsupported in the build stage: $line"; exit 1; }
      read -r -a parts <<<"$rest"
      dest=${parts[-1]}
      for src in "${parts[@]:0:${#parts[@]}-1}"; do
        if [ -d "$root/$src" ]; then
          mkdir -p "$workdir/$dest"; cp -R "$root/$src/." "$workdir/$dest"
        else
          mkdir -p "$workdir/$(dirname "$dest/x")"; cp "$root/$src" "$workdir/$dest"
        fi
      done ;;
    RUN)
      cmd=${rest//\/out\//$out\/}
      log "RUN $cmd"
      (cd "$workdir" && eval "$cmd") ;;
    *)
      log "unsupported in the build stage: $line"; exit 1 ;;
  esac
done <<<"$stage"

fail=0
for bin in metalhub metalprobe; do
  [ -x "$out/$bin" ] || { log "the build stage made no /out/$bin"; fail=1; continue; }
  info=$(go version -m "$out/$bin")
  for want in 'CGO_ENABLED=0' '-trimpath=true'; do
    grep -qE -- "build[[:space:]]+$want" <<<"$info" || { log "$bin: built without $want"; fail=1; }
  done
  # -ldflags is not recorded with -trimpath; a binary linked with -s has no symbol table.
  if go tool nm "$out/$bin" >/dev/null 2>&1; then log "$bin: not stripped (-ldflags -s)"; fail=1; fi
done
[ $fail -eq 0 ] || exit 1
v=$("$out/metalhub" version)
"$out/metalprobe" -h >/dev/null 2>&1 || { log "metalprobe does not start"; exit 1; }
log "ok: metalhub ($v, $(du -h "$out/metalhub" | cut -f1)) and metalprobe ($(du -h "$out/metalprobe" | cut -f1)), static, trimmed, stripped"
