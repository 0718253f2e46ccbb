#!/bin/sh
# Instructions per tools/call, in process, with <c> sessions calling at once (callgrind, every thread counted).
#   run_concurrent.sh <tree> <variant> <tool> <n> <c>     e.g. run_concurrent.sh $PWD wrapped_sqlite echo 256 32
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/icount && [ -f /tmp/icount/cg.so ] || gcc -O1 -shared -fPIC -o /tmp/icount/cg.so "$here/cg.c"
out=$(mktemp /tmp/icount/cg.XXXX)
cd "$1" && PYTHONHASHSEED=0 PYTHONPATH=$1 valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
  --callgrind-out-file=$out /work/main/.venv/bin/python "$here/icount_concurrent.py" $2 $3 $4 $5 >/dev/null 2>$out.err
ir=$(cat $out* 2>/dev/null | grep -a '^summary:\|^totals:' | awk '{s=$2} END {print s}')
echo "$1 $2 $3 n=$4 c=$5 $(python3 -c "print(round($ir/$4))")"
