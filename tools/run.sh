#!/usr/bin/env bash
# Set-up (packages, configure, build), then the main job: banyand serving the bundled
# stories260K model (models/stories260K) on the CPU, HTTP 127.0.0.1:8000 and gRPC :50051.
# Extra arguments go to banyand (e.g. --http-port 9000, --config configs/banyand.json).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
echo "banyand is starting; once it listens it logs how to call it (the ports it really uses)."
echo "Ctrl-C (SIGINT) or SIGTERM drains and stops it."
exec build/server/banyand "$@"
