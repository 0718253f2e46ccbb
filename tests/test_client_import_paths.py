"""The client helper's names stay importable from where users import them, across module splits."""

from __future__ import annotations

import importlib

import pytest

import mcp_resume_asgi.client as client

#: Public names of `mcp_resume_asgi.client.transport` before it was split by concept.
TRANSPORT_NAMES = (
    "DEFAULT_FLUSH_AFTER_S",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_PENDING_REQUESTS",
    "DEFAULT_MAX_RETRY_MS",
    "DEFAULT_RETRY_MS",
    "MAX_EVENT_ID_LENGTH",
    "MAX_REMEMBERED_TOKENS",
    "RESUMABLE_STREAMS_EXTENSION",
    "RESUME_POLICY",
    "SINGLE_EXCHANGE_VERSION",
    "STREAM_ERROR_CODE",
    "IdKey",
    "ResumableTransport",
    "parse_link_header",
    "same_origin",
    "stream_link",
)


def test_the_package_exports_everything_in_its_all() -> None:
    for name in client.__all__:
        assert getattr(client, name) is not None, name


@pytest.mark.parametrize("name", TRANSPORT_NAMES)
def test_the_transport_module_still_has_its_public_names(name: str) -> None:
    transport = importlib.import_module("mcp_resume_asgi.client.transport")
    assert getattr(transport, name) is not None
    if name in client.__all__:
        assert getattr(transport, name) is getattr(client, name)


def test_the_session_module_still_has_its_public_names() -> None:
    session = importlib.import_module("mcp_resume_asgi.client.session")
    assert session.ResumableSession is client.ResumableSession
    assert session.DEFAULT_PROTOCOL_VERSION == "2025-11-25"
    assert session.DEFAULT_MAX_JSON_BYTES > 0 and session.DEFAULT_TIMEOUT.read == 300.0
