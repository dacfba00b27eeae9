#!/usr/bin/env bash
# Set-up (packages, configure, build), then the main job: banyand serving the bundled
# stories260K model (models/stories260K) on the CPU, HTTP 127.0.0.1:8000 and gRPC :50051.
# Extra arguments go to banyand (e.g. --http-port 9000, --config configs/banyand.json).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cat <<'TXT'
banyand is starting. Call it with:
  curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"stories260K","prompt":"Once upon a time","max_tokens":64}'
  curl -sN localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"stories260K","messages":[{"role":"user","content":"A story"}],"stream":true}'
  # official OpenAI client (Node): new OpenAI({baseURL: "http://localhost:8000/v1", apiKey: "x"})
  build/tools/banyan-grpc-client --addr localhost:50051 --prompt "Once upon a time"
Ctrl-C (SIGINT) or SIGTERM drains and stops it.
TXT
exec build/server/banyand "$@"
