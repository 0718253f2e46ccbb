#!/usr/bin/env sh
# Thin wrapper: run the conformance harness with the project venv from the repo root.
#   conformance/run.sh --compare
#   conformance/run.sh --scenario server-sse-polling --wrapped \
#       --expect-success server-sse-priming-event,server-sse-retry-field,server-sse-disconnect-resume
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3
cd "$ROOT"
exec "$PY" -m conformance.run "$@"
