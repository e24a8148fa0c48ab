#!/usr/bin/env bash
# Runs Jaeger in the foreground with config.yaml beside this script (in-memory
# storage, every listener on 127.0.0.1): OTLP gRPC 4317, OTLP HTTP 4318,
# query HTTP API 16686, query gRPC 16685. Builds the binary first when it is
# not cached (see build.sh). Stop it with Ctrl-C (SIGINT) or SIGTERM.
#
# Extra arguments go to jaeger, e.g. another config to merge:
#   bash tools/jaeger/start.sh '--config=yaml:receivers::otlp::protocols::grpc::endpoint: 127.0.0.1:14317'
#
# The binary built from the module has no UI assets (its page says "This is
# not the Jaeger UI you are looking for!"). With SLUICE_JAEGER_UI set to a
# directory holding the official jaeger-ui build (its index.html and
# static/), the query server serves the real UI from it at
# http://127.0.0.1:16686/ (extensions::jaeger_query::ui::assets_path); see
# README.md for the ways to get that build.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
bin=$(bash "$dir/build.sh")
ui=()
if [ -n "${SLUICE_JAEGER_UI:-}" ]; then
  if [ ! -f "$SLUICE_JAEGER_UI/index.html" ]; then
    echo "tools/jaeger/start.sh: SLUICE_JAEGER_UI=$SLUICE_JAEGER_UI has no index.html: point it at the jaeger-ui build directory (see tools/jaeger/README.md)" >&2
    exit 1
  fi
  ui=("--config=yaml:extensions::jaeger_query::ui::assets_path: $(cd "$SLUICE_JAEGER_UI" && pwd)")
  echo "jaeger: serving the UI from $SLUICE_JAEGER_UI at http://127.0.0.1:16686/" >&2
fi
exec "$bin" --config "$dir/config.yaml" "${ui[@]}" "$@"
