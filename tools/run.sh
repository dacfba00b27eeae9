#!/usr/bin/env bash
# Set-up (packages, configure, build), then the main job on the bundled model
# (models/stories260K), on the CPU when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec build/tools/banyan generate --model models/stories260K/stories260K.bin \
  --prompt "${BANYAN_PROMPT:-Once upon a time}" --max-tokens "${BANYAN_MAX_TOKENS:-200}" --n 3
