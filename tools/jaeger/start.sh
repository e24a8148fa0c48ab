#!/usr/bin/env bash
# Runs Jaeger in the foreground with config.yaml beside this script (in-memory
# storage, every listener on 127.0.0.1): OTLP gRPC 4317, OTLP HTTP 4318,
# query HTTP API 16686, query gRPC 16685. Builds the binary first when it is
# not cached (see build.sh). Stop it with Ctrl-C (SIGINT) or SIGTERM.
#
# Extra arguments go to jaeger, e.g. another config to merge:
#   bash tools/jaeger/start.sh '--config=yaml:receivers::otlp::protocols::grpc::endpoint: 127.0.0.1:14317'
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
bin=$(bash "$dir/build.sh")
exec "$bin" --config "$dir/config.yaml" "$@"
