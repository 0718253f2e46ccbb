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
.venv/bin/mypy mcp_resume_asgi
# The import contracts of .importlinter: layers, no cycles, what may import what.
.venv/bin/lint-imports

# What would be published: the sdist, a wheel built from it, both checked as PyPI would
# (tests/test_wheel_install.py installs that wheel with the README's line).
rm -rf .cache/dist && mkdir -p .cache
.venv/bin/python -m build --outdir .cache/dist . >.cache/build.log 2>&1 || { cat .cache/build.log; exit 1; }
.venv/bin/twine check --strict .cache/dist/*
export MCP_RESUME_DIST="$PWD/.cache/dist"

# The docs site (docs/, mkdocs.yml): any warning - a broken link or anchor, a docstring
# mkdocstrings cannot read - fails it. Its examples run in tests/test_doc_examples.py.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet

# Four workers, a test file per worker at a time (a file's fixtures - servers, npm peers,
# Redis prefixes - stay in one process): most tests wait on sockets and timers, not CPU (the
# suite keeps about 0.6 of one CPU busy), so on 2 cores four workers cut the wall time from
# ~500 s (two workers) to ~300 s. PYTEST_WORKERS=0 runs serially.
exec .venv/bin/pytest -q -n "${PYTEST_WORKERS:-4}" --dist loadfile "$@"
