#!/usr/bin/env bash
# Builds the Jaeger all-in-one binary pinned by this module's go.mod and
# prints its path on stdout (everything else goes to stderr).
#
# The binary goes to $SLUICE_JAEGER_BIN when set, else to
# ${XDG_CACHE_HOME:-$HOME/.cache}/sluice/jaeger-<version>. An existing binary
# at that path is reused; the first build takes several minutes on 2 cores.
# Pass --force to rebuild anyway.
#
# This folder is its own Go module so that sluice's go.mod never inherits
# Jaeger's dependencies.
set -euo pipefail
cd "$(dirname "$0")"

force=0
if [ "${1:-}" = "--force" ]; then force=1; fi

pkg=github.com/jaegertracing/jaeger/cmd/jaeger
version=$(go list -m -f '{{.Version}}' github.com/jaegertracing/jaeger)
bin="${SLUICE_JAEGER_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/jaeger-$version}"

if [ "$force" = 0 ] && [ -x "$bin" ]; then
  echo "jaeger $version: reusing $bin" >&2
  echo "$bin"
  exit 0
fi

mkdir -p "$(dirname "$bin")"
# Build next to the target and rename, so an interrupted build never leaves a
# half-written binary that a later run would reuse.
tmpdir=$(mktemp -d "$(dirname "$bin")/.jaeger-build.XXXXXX")
trap 'rm -rf "$tmpdir"' EXIT
echo "jaeger $version: building $pkg to $bin (takes minutes the first time)" >&2
start=$SECONDS
go build -trimpath -o "$tmpdir/jaeger" "$pkg"
mv -f "$tmpdir/jaeger" "$bin"
echo "jaeger $version: built in $((SECONDS - start))s" >&2
echo "$bin"
