#!/usr/bin/env bash
# Runs plan/servers_probe.py under each server; prints its log. Ports 8931-8934.
cd "$(dirname "$0")/.."
run() {
    name=$1; port=$2; shift 2
    log=/tmp/probe-$name.log; rm -f $log
    PROBE_LOG=$log "$@" > /tmp/probe-$name.out 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.2; done
    curl -s -X POST -d x http://127.0.0.1:$port/pending > /dev/null
    curl -s http://127.0.0.1:$port/detach > /dev/null
    sleep 0.3
    kill -TERM $pid; wait $pid
    echo "== $name"; cat $log 2>/dev/null | cut -d' ' -f2-
}
run uvicorn 8931 .venv/bin/uvicorn plan.servers_probe:app --port 8931 --log-level warning
run hypercorn-asyncio 8932 .venv/bin/hypercorn plan.servers_probe:app --bind 127.0.0.1:8932
run hypercorn-trio 8933 .venv/bin/hypercorn -k trio plan.servers_probe:app --bind 127.0.0.1:8933
run granian 8934 .venv/bin/granian --interface asgi --port 8934 --log-level warning plan.servers_probe:app
