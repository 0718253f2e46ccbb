#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest (unit, end-to-end under uvicorn,
# real peers: the stock mcp client and the MCP conformance suite via npm).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "test,client,redis"

# The suite starts its own redis-server on a free loopback port for the run and stops it at
# the end (tests/support/redis_server.py); it never uses a Redis on 6379. REDIS_URL points it
# at another Redis instead (then it deletes every key it wrote). In CI the Redis tests must
# run, so a missing redis-server is installed (Debian's package); elsewhere they skip, saying why.
if [ "${CI:-}" = "true" ] && [ -z "${REDIS_URL:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ]; then
        (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null
        # Debian's package may start a daemon on 6379: the suite does not use it.
        (service redis-server stop || true) >/dev/null 2>&1
    else
        echo "CI=true but redis-server is missing and this is not root: the Redis tests will fail" >&2
    fi
fi

# The conformance suite (npm) is installed into .cache/conformance once.
if command -v npm >/dev/null 2>&1; then
    .venv/bin/python -m conformance.run --install-only >/dev/null
fi

.venv/bin/ruff check mcp_resume_asgi tests examples conformance
.venv/bin/ruff format --check mcp_resume_asgi tests examples conformance
.venv/bin/mypy mcp_resume_asgi
# Two workers, a test file per worker at a time (a file's fixtures - servers, npm peers,
# Redis prefixes - stay in one process): most tests wait on sockets and timers, not CPU,
# so this halves the wall time on 2 cores (544 s -> ~310 s). PYTEST_WORKERS=0 runs serially.
exec .venv/bin/pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"
