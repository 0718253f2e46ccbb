# Sourced by the scripts: a venv in .venv with the project and the given extras installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="$1"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=".venv/.installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[$extras]"
    touch "$stamp"
fi
