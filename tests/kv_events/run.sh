#!/bin/sh
# Runs the KV-event conformance test with a Python 3 that has the Debian packages python3-zmq
# and python3-msgpack (tools/setup.sh installs them); exits 77 (skipped) when none has them.
#   tests/kv_events/run.sh BANYAND
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import zmq, msgpack' >/dev/null 2>&1; then
    exec "$py" "$here/conformance_test.py" "$@"
  fi
done
echo "SKIP: no python3 with the zmq and msgpack modules (apt-get install python3-zmq python3-msgpack)"
exit 77
