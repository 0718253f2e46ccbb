#!/usr/bin/env bash
# The whole test suite: lint, types, the wheel and sdist, the docs site, then pytest
# (unit, end-to-end under uvicorn, real peers: the stock mcp client and the MCP
# conformance suite via npm). Arguments go to pytest (`bash scripts/test.sh -k rest`).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "dev,client,redis,rest"

# The suite starts its own redis-server on a free loopback port for the run and stops it at
# the end (tests/support/redis_server.py); it never uses a Redis on 6379. REDIS_URL points it
# at another Redis instead (then it deletes every key it wrote). In CI the Redis tests must
# run, so a missing redis-server is installed (Debian's package; it depends on redis-tools, which
# brings redis-cli: the Redis Cluster tests join their nodes with `redis-cli --cluster create`);
# elsewhere they skip, saying why.
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

.venv/bin/ruff check mcp_resume_asgi tests examples conformance scripts
.venv/bin/ruff format --check mcp_resume_asgi tests examples conformance scripts

# mypy, the import contracts of .importlinter (layers, no cycles, what may import what) and the
# docs site (docs/, mkdocs.yml: any warning - a broken link or anchor, a docstring mkdocstrings
# cannot read - fails it; its examples run in tests/test_doc_examples.py) need nothing the
# steps below make and make nothing they need: they run in the background meanwhile, each
# into its log in .cache/checks/, and the script fails at the end, showing the log, if one failed.
rm -rf .cache/checks && mkdir -p .cache/checks
checks=()
check_in_background() {  # a name for the log, then the command
    local name="$1"
    shift
    "$@" >".cache/checks/$name.log" 2>&1 &
    checks+=("$!:$name")
}
check_in_background mypy .venv/bin/mypy mcp_resume_asgi
check_in_background lint-imports .venv/bin/lint-imports
check_in_background mkdocs env NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet

# What would be published: the sdist, a wheel built from it, both checked as PyPI would
# (tests/test_wheel_install.py installs that wheel with the README's line).
rm -rf .cache/dist
.venv/bin/python -m build --outdir .cache/dist . >.cache/build.log 2>&1 || { cat .cache/build.log; exit 1; }
.venv/bin/twine check --strict .cache/dist/*
export MCP_RESUME_DIST="$PWD/.cache/dist"

# Six workers on 2 cores: most tests wait on sockets and timers, not CPU (a fresh-clone run used
# about half of 2 cores with four workers; its servers are forked from a process that imported their
# libraries once, tests/support/forkserver.py). A test file runs in one
# worker (a file's fixtures - servers, npm peers, Redis prefixes - stay in one process); files
# are handed out in the order tests/conftest.py collects them (the longest first), not
# xdist's (most tests first), so no long file starts last. PYTEST_WORKERS=0 runs serially.
status=0
.venv/bin/pytest -q -n "${PYTEST_WORKERS:-6}" --dist loadfile --no-loadscope-reorder "$@" || status=$?

for check in "${checks[@]}"; do
    if ! wait "${check%%:*}"; then
        echo "${check#*:} failed (.cache/checks/${check#*:}.log):" >&2
        cat ".cache/checks/${check#*:}.log" >&2
        status=1
    fi
done
exit "$status"
