"""The package's shape is its design: a few public modules at the top, every other module in the
layer it belongs to, and no module left at a flat path outside the layers (an import of one fails
at once instead of reaching a copy of a name under a second path)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import mcp_resume_asgi

PACKAGE = Path(mcp_resume_asgi.__file__).parent
LAYERS = {
    "cli",
    "api",
    "rest",
    "tasks",
    "features",
    "http",
    "engine",
    "core",
    "store",
    "policy",
    "wire",
    "telemetry",
}
"""The layers of `.importlinter`'s layers contract, top to bottom; `client` and `proxy` stand apart."""

#: Flat module paths whose code lives in a layer: importing one fails.
RETIRED = [
    "_http",
    "_misconfig",
    "admission",
    "cancel_notices",
    "client_answers",
    "client_cancels",
    "cluster",
    "connection",
    "expiry",
    "first_answer",
    "follower",
    "header_rules",
    "header_values",
    "held_writes",
    "hosted",
    "middleware",
    "principal",
    "protocol",
    "recording",
    "relay_seal",
    "relayed_caller",
    "resumable_requests",
    "resume_tokens",
    "retried_posts",
    "scheduler",
    "sessions",
    "sse",
    "sse_answers",
    "store_outage",
    "store_recovery",
    "stream_core",
    "stream_terms",
    "stream_urls",
    "tokens",
    "writer",
    "wrap",
    "rest.wire",
    "client.sse",
]


def test_the_top_level_holds_the_layers_the_client_and_the_proxy_only() -> None:
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert modules | packages == LAYERS | {"client", "proxy"}
    assert modules == {"api", "policy"}


@pytest.mark.parametrize("old", RETIRED)
def test_a_retired_module_path_is_gone(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"mcp_resume_asgi.{old}")


def test_the_contracts_name_exactly_these_layers() -> None:
    contracts = (PACKAGE.parent / ".importlinter").read_text()
    block = contracts.split("layers =", 1)[1].split("exhaustive", 1)[0]
    named = {name.strip() for line in block.splitlines() for name in line.split("|") if name.strip()}
    assert named == LAYERS
