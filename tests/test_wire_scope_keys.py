"""Every scope key of the library is written in one place (`wire/scope_keys.py`), and keeps its value."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mcp_resume_asgi
from mcp_resume_asgi.wire import scope_keys


def test_the_scope_keys_keep_their_values() -> None:
    """Other nodes' relays and the app see these keys: a move must not rename one."""
    assert scope_keys.FEATURES_KEY == "mcp_resume_asgi.features"
    assert scope_keys.RELAYED_FROM == "mcp_resume_asgi.relayed_from"
    assert scope_keys.RELAYED_CALLER == "mcp_resume_asgi.relayed_caller"
    assert scope_keys.DECLARED_CAPABILITIES == "mcp_resume_asgi.declared_capabilities"
    assert scope_keys.REST_SCOPE_KEY == "mcp_resume_asgi.rest"
    assert scope_keys.STREAM_SEGMENT == "/streams/"


def test_every_scope_key_is_written_only_in_scope_keys() -> None:
    """A string that is a scope key of ours (`mcp_resume_asgi.<name>`) appears in no other module."""
    key = re.compile(r"mcp_resume_asgi\.[a-z_]+")
    package = Path(mcp_resume_asgi.__file__).parent
    home = package / "wire" / "scope_keys.py"
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and key.fullmatch(node.value):
                found.append(f"{path.relative_to(package)}:{node.lineno}: {node.value!r}")
    assert found == []
