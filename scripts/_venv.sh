# Sourced by the scripts: a venv in .venv with the project installed editable, and the
# given names: each is an extra of the project (client, redis, rest) or a PEP 735
# dependency group of pyproject.toml (test, lint, docs, build, dev, examples).
# Groups need pip >= 25.1 (`pip install --group`), so pip is upgraded in the venv first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
names="$1"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=".venv/.installed-$names"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade "pip>=25.1" >/dev/null
    # Sort the names into extras and groups, as pyproject.toml declares them.
    spec="$(.venv/bin/python - "$names" <<'PY'
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)
extras_known = project["project"].get("optional-dependencies", {})
groups_known = project.get("dependency-groups", {})
extras, groups = [], []
for name in filter(None, sys.argv[1].split(",")):
    if name in extras_known:
        extras.append(name)
    elif name in groups_known:
        groups.append(name)
    else:
        sys.exit(f"_venv.sh: {name!r} is neither an extra nor a dependency group of pyproject.toml")
print("-e")
print(f".[{','.join(extras)}]" if extras else ".")
for group in groups:
    print("--group")
    print(group)
PY
    )"
    mapfile -t args <<<"$spec"
    .venv/bin/python -m pip install -q --disable-pip-version-check "${args[@]}"
    touch "$stamp"
fi
