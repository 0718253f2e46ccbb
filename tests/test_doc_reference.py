"""The reference's options tables match the code: every option, every default (issue 25).

docs/reference/options.md writes each table under `<!-- options-of: DOTTED.NAME ... -->`.
Its rows must be exactly the keyword options of those callables (the parameters of a
function or constructor, the fields of a dataclass), in any order, each with its default
as the code has it, so an option added, renamed or re-defaulted fails here until the
docs say so. (The README's table once lacked `session_ttl_s` and `node_timeout_s`, and
its `Policy` table listed 11 of 17 fields.)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Any

import pytest

from tests.support.server import REPO_ROOT

OPTIONS_PAGE = REPO_ROOT / "docs" / "reference" / "options.md"
MARKER = re.compile(r"^<!-- options-of: (.+) -->$")
MIB = 1024 * 1024
MUST_BE_COVERED = {
    "mcp_resume_asgi.resumable",
    "mcp_resume_asgi.ResumeMiddleware",
    "mcp_resume_asgi.Policy",
    "mcp_resume_asgi.Route",
    "mcp_resume_asgi.MemoryStore",
    "mcp_resume_asgi.store.redis.RedisStore",
    "mcp_resume_asgi.store.sqlite.SQLiteStore",
    "mcp_resume_asgi.TasksMiddleware",
    "mcp_resume_asgi.RestMiddleware",
    "mcp_resume_asgi.ResumableRequestsMiddleware",
    "mcp_resume_asgi.ResumeTokenMiddleware",
    "mcp_resume_asgi.client.ResumableTransport",
    "mcp_resume_asgi.client.ResumableSession",
    "mcp_resume_asgi.client.TaskPolling",
}


def resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


REQUIRED = object()


def options_of(target: Any) -> dict[str, Any]:
    """name -> default (REQUIRED when there is none), the wrapped app and `**options` left out."""
    if dataclasses.is_dataclass(target):
        found = {}
        for f in dataclasses.fields(target):
            if not f.init:  # set by the object itself, not an option
                continue
            if f.default is not dataclasses.MISSING:
                found[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                found[f.name] = f.default_factory()
            else:
                found[f.name] = REQUIRED
        return found
    parameters = inspect.signature(target).parameters.values()
    return {
        p.name: REQUIRED if p.default is inspect.Parameter.empty else p.default
        for p in parameters
        if p.name != "app" and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }


def written(name: str, value: Any) -> str:
    """How the page writes a default: as Python, `10_000`, `8 MiB` for byte counts."""
    if value is REQUIRED:
        return "required"
    if value is None or isinstance(value, bool | str | tuple):
        return repr(value)
    if callable(value):
        return str(value.__name__)
    if isinstance(value, int | float) and float(value).is_integer():
        number = int(value)
        if "bytes" in name and number >= MIB and number % MIB == 0:
            return f"{number // MIB} MiB"
        return f"{number:_}"
    return repr(value)


def tables() -> list[tuple[list[str], dict[str, str]]]:
    """Each marked table: the callables it documents, and its rows (option -> default cell)."""
    lines = OPTIONS_PAGE.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        marker = MARKER.match(line)
        if not marker:
            continue
        rows: dict[str, str] = {}
        has_table = i + 1 < len(lines) and lines[i + 1].startswith("|")
        j = i + 3 if has_table else len(lines)  # past the header and the |---| line; no table: no options
        while j < len(lines) and lines[j].startswith("|"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", lines[j])[1:-1]]
            name = re.fullmatch(r"`(\w+)`", cells[0])
            assert name, f"options.md:{j + 1}: the first cell must be one `option`: {cells[0]!r}"
            assert name.group(1) not in rows, f"options.md:{j + 1}: {name.group(1)} twice"
            default = re.match(r"`([^`]*)`|(required)\b", cells[1])
            assert default, f"options.md:{j + 1}: the default cell must start with `value` or 'required'"
            rows[name.group(1)] = default.group(1) or default.group(2)
            j += 1
        found.append((marker.group(1).split(), rows))
    return found


TABLES = tables()


def test_every_public_constructor_has_its_table() -> None:
    covered = {name for names, _ in TABLES for name in names}
    assert covered >= MUST_BE_COVERED, f"no table for {sorted(MUST_BE_COVERED - covered)}"


@pytest.mark.parametrize(("names", "rows"), TABLES, ids=[" ".join(names) for names, _ in TABLES])
def test_the_table_lists_every_option_with_its_default(names: list[str], rows: dict[str, str]) -> None:
    expected: dict[str, str] = {}
    for dotted in names:
        for option, default in options_of(resolve(dotted)).items():
            text = written(option, default)
            assert expected.setdefault(option, text) == text, f"{option}: the callables disagree"
    missing = sorted(set(expected) - set(rows))
    unknown = sorted(set(rows) - set(expected))
    assert not missing, f"{' '.join(names)}: options.md lacks {missing}"
    assert not unknown, f"{' '.join(names)}: options.md lists options the code does not have: {unknown}"
    wrong = {
        option: (rows[option], expected[option]) for option in expected if rows[option] != expected[option]
    }
    assert not wrong, f"defaults written (page, code): {wrong}"


def test_resumable_takes_every_middleware_option() -> None:
    """Every option of `ResumeMiddleware` is one of `resumable()`'s, passed on by name: the shared
    table's premise (its defaults are compared by the table's test)."""
    from mcp_resume_asgi import ResumeMiddleware, resumable

    source = inspect.getsource(resumable)
    own = options_of(resumable)
    for option in options_of(ResumeMiddleware):
        assert option in own, option
        assert f"{option}={option}," in source, f"resumable() does not pass {option} on"
