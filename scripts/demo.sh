#!/usr/bin/env bash
# The main job: a wrapped example server on the in-memory store, and a client that
# shows a disconnect and a resume.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "examples,client"
exec .venv/bin/python -m examples.demo
