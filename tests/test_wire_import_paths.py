"""`wire/` (issue 21): the protocol's pure modules moved there, and every name stays importable
from where it was, as the same object; every scope key of the library is written in one place."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import mcp_resume_asgi
from mcp_resume_asgi.wire import scope_keys

#: Old module -> (its new home, the public names it had before the move).
MOVED = {
    "protocol": (
        "wire.jsonrpc",
        "CLIENT_CAPABILITIES_META DEFAULT_VERSION INTERNAL_ERROR INVALID_PARAMS INVALID_REQUEST Kind "
        "LAST_EVENT_ID_HEADER MAX_DEPTH PARSE_ERROR RESUMABLE_STREAMS_EXTENSION RESUMABLE_VERSION "
        "SESSION_HEADER SINGLE_EXCHANGE_VERSION STREAM_ERROR VERSION_HEADER asks_resumable_streams at_least "
        "classify dumps error_message error_status is_response loads_wire nesting_depth non_finite "
        "request_capabilities valid_id valid_version without_extension",
    ),
    "sse": (
        "wire.sse",
        "KEEPALIVE SSEError SSEEvent SSEParser encode_payload priming_frame retry_frame single_event_frame",
    ),
    "tokens": ("wire.tokens", "MAX_EVENT_ID_LENGTH MAX_LINK_TOKEN_LENGTH TokenSigner new_stream_id"),
    "header_values": (
        "wire.headers",
        "SENTINEL_HEAD SENTINEL_TAIL X_MCP_HEADER decode_header_value encode_header_value param_headers",
    ),
    "principal": ("wire.principal", "PrincipalOf default_principal"),
    "relay_seal": ("wire.relay_seal", "MAX_AGE_S MAX_REMEMBERED RelayRequest RelaySeal SEAL_PURPOSE"),
    "header_rules": (
        "wire.header_rules",
        "Era HANDSHAKE_VERSIONS HEADER_MISMATCH HeaderRefusal SINGLE_EXCHANGE_VERSIONS "
        "UNSUPPORTED_PROTOCOL_VERSION era_of refusal",
    ),
}
#: Modules that stay, part of whose names moved: (old module, name, new home).
SPLIT = [
    *(
        ("_http", name, "wire.headers")
        for name in [
            "Headers",
            "accept_header",
            "acceptable",
            "accepts_sse",
            "header",
            "header_count",
            "is_json",
            "media_ranges",
            "media_types",
        ]
    ),
    *(
        ("_http", name, "wire.replies")
        for name in ["UNAVAILABLE_HEADER", "send_bytes", "send_json", "send_jsonrpc_error"]
    ),
    ("_misconfig", "check_asgi_app", "wire.asgi"),
    ("sse_answers", "frame_events", "wire.sse"),
    ("features", "FEATURES_KEY", "wire.scope_keys"),
    ("cluster", "RELAYED_FROM", "wire.scope_keys"),
    ("relayed_caller", "RELAYED_CALLER", "wire.scope_keys"),
    ("sessions", "DECLARED_CAPABILITIES", "wire.scope_keys"),
    ("rest.wire", "REST_SCOPE_KEY", "wire.scope_keys"),
    ("engine", "STREAM_SEGMENT", "wire.scope_keys"),
]


def _module(name: str) -> object:
    return importlib.import_module(f"mcp_resume_asgi.{name}")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_keeps_its_names_at_its_old_path(old: str) -> None:
    new, names = MOVED[old]
    old_module, new_module = _module(old), _module(new)
    for name in names.split():
        assert getattr(old_module, name) is getattr(new_module, name), f"{old}.{name}"
        assert name in new_module.__all__, f"{new}.{name}"  # type: ignore[attr-defined]
    assert sorted(old_module.__all__) == sorted(names.split())  # type: ignore[attr-defined]


def test_the_private_name_a_test_reaches_stays_at_its_old_path() -> None:
    assert _module("tokens")._CachedKeySigner is _module("wire.tokens")._CachedKeySigner  # type: ignore[attr-defined]


@pytest.mark.parametrize(("old", "name", "new"), SPLIT, ids=[f"{o}.{n}" for o, n, _ in SPLIT])
def test_a_moved_name_stays_importable_from_its_old_module(old: str, name: str, new: str) -> None:
    assert getattr(_module(old), name) is getattr(_module(new), name)
    assert name in _module(new).__all__  # type: ignore[attr-defined]


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
