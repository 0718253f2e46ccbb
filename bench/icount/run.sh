#!/bin/sh
# Instructions per tools/call, in process, under callgrind (deterministic up to GC timing: ~±0.7%).
#   run.sh <tree> <variant> <tool> <n>     e.g. run.sh $PWD wrapped echo 200
#   ICOUNT_WITHOUT=store,cold run.sh ...   the same with parts of the wrapper taken out (icount.py)
# variant: bare | wrapped | sdk_es | wrapped_redis (a Redis on 127.0.0.1:6391); tool: echo | progress.
# Builds /tmp/icount/cg.so (callgrind's client requests around the measured loop). Run one at a time
# per tree, or label the outputs: parallel runs finish in any order.
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/icount && [ -f /tmp/icount/cg.so ] || gcc -O1 -shared -fPIC -o /tmp/icount/cg.so "$here/cg.c"
out=$(mktemp /tmp/icount/cg.XXXX)
cd "$1" && PYTHONHASHSEED=0 PYTHONPATH=$1 valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
  --callgrind-out-file=$out /work/main/.venv/bin/python "$here/icount.py" $2 $3 $4 >/dev/null 2>$out.err
ir=$(cat $out* 2>/dev/null | grep -a '^summary:\|^totals:' | awk '{s=$2} END {print s}')
echo "$1 $2 $3 $4${ICOUNT_WITHOUT:+ without=$ICOUNT_WITHOUT} $(python3 -c "print(round($ir/$4))")"
