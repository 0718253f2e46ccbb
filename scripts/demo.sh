#!/usr/bin/env bash
# The main job: a wrapped example server on the in-memory store, and a client that
# shows a disconnect and a resume; then the server on SQLite, restarted mid-call.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "examples,client"
exec .venv/bin/python -m examples.demo
