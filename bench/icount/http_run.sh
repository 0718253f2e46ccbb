#!/bin/sh
# Instructions per tools/call over HTTP (uvicorn, in callgrind; the client outside): see http_icount.py.
#   http_run.sh <tree> <variant> <tool> <n>     e.g. http_run.sh $PWD wrapped echo 200
here=$(cd "$(dirname "$0")" && pwd)
cd "$1" && PYTHONPATH=$1 /work/main/.venv/bin/python "$here/http_icount.py" $2 $3 $4
