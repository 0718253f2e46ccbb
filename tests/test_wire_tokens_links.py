"""One HMAC per stream: event ids and `rel="stream"` link tokens share one signed stream name.

Loop-free checks of `wire/tokens.py` (the token formats, what is refused, that what the
previous release minted still parses), then one end to end: a link of the previous
release's format still resumes its stream through a server of this one.
"""

from __future__ import annotations

import hashlib
import hmac

import httpx
import pytest
from itsdangerous import Signer

from mcp_resume_asgi.wire.tokens import MAX_LINK_TOKEN_LENGTH, TokenSigner, new_stream_id

SECRET = "links-and-ids-shared-secret"


def _legacy_link(secret: str, stream_id: str, after_seq: int) -> str:
    """A link token as the release before minted it: its own key, the cursor signed."""
    signer = Signer(secret, salt="mcp-resume-asgi/link", digest_method=hashlib.sha256)
    return signer.sign(f"{stream_id}~{after_seq}".encode()).decode()


def _legacy_event_id(secret: str, stream_id: str, seq: int) -> str:
    signer = Signer(secret, salt="mcp-resume-asgi/event-id", digest_method=hashlib.sha256)
    return f"{signer.sign(stream_id.encode()).decode()}:{seq}"


def test_a_link_token_is_the_event_id_prefix_and_a_cursor() -> None:
    signer = TokenSigner(SECRET)
    stream_id = new_stream_id()
    prefix = signer.event_prefix(stream_id)
    token = signer.link_token(stream_id, 5, prefix)
    assert token == prefix[:-1].decode() + "~5"
    assert token == signer.link_token(stream_id, 5)  # (without the prefix: computed, the same)
    assert signer.parse_link_token(token) == (stream_id, 5)
    assert signer.parse_event_id(prefix.decode() + "12") == (stream_id, 12)


def test_the_one_hmac_is_computed_once_when_the_prefix_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    import mcp_resume_asgi.wire.tokens as tokens

    calls: list[bytes] = []
    real = tokens._signature

    def counted(mac: tokens._HmacSha256, value: bytes) -> bytes:
        calls.append(value)
        return real(mac, value)

    monkeypatch.setattr(tokens, "_signature", counted)
    signer = TokenSigner(SECRET)
    stream_id = new_stream_id()
    prefix = signer.event_prefix(stream_id)
    signer.link_token(stream_id, 0, prefix)
    assert calls == [stream_id.encode()]


@pytest.mark.parametrize("key_length", [0, 1, 16, 32, 63, 64, 65, 200])
def test_the_hmac_is_hmac_sha256(key_length: int) -> None:
    from mcp_resume_asgi.wire.tokens import _HmacSha256

    key = bytes(range(256))[:key_length]
    mac = _HmacSha256(key)
    for value in (b"", b"a", b"stream-id~12", bytes(range(256)) * 5):
        assert mac.digest(value) == hmac.digest(key, value, "sha256"), (key_length, value[:8])


def test_event_ids_are_byte_for_byte_those_of_the_previous_release() -> None:
    signer = TokenSigner(SECRET)
    stream_id = new_stream_id()
    assert signer.event_prefix(stream_id).decode() + "3" == _legacy_event_id(SECRET, stream_id, 3)
    assert signer.parse_event_id(_legacy_event_id(SECRET, stream_id, 3)) == (stream_id, 3)


def test_links_of_the_previous_release_still_parse() -> None:
    signer = TokenSigner(SECRET)
    stream_id = new_stream_id()
    assert signer.parse_link_token(_legacy_link(SECRET, stream_id, 7)) == (stream_id, 7)
    # ...but only genuine ones: another secret's, or an altered one, are refused.
    assert signer.parse_link_token(_legacy_link("another-secret-of-16+", stream_id, 7)) is None
    legacy = _legacy_link(SECRET, stream_id, 7)
    assert signer.parse_link_token(legacy.replace("~7.", "~8.")) is None  # (its cursor was signed)
    # An event-id signature is not a legacy link's, nor the other way round (two keys).
    assert (
        signer.parse_link_token(
            f"{stream_id}~0.{signer.event_prefix(stream_id)[len(stream_id) + 1 : -1].decode()}"
        )
        is None
    )
    legacy_sig = legacy.rpartition(".")[2]
    assert signer.parse_event_id(f"{stream_id}.{legacy_sig}:0") is None


def test_forged_or_altered_links_and_ids_are_refused() -> None:
    signer = TokenSigner(SECRET)
    stream_id, other = new_stream_id(), new_stream_id()
    token = signer.link_token(stream_id, 0)
    signed, _, _ = token.rpartition("~")
    sig = signed.rpartition(".")[2]
    flipped = sig[:-1] + ("A" if sig[-1] != "A" else "B")
    refused_links = [
        f"{other}.{sig}~0",  # another stream's name under this one's signature
        f"{stream_id}.{flipped}~0",  # an altered signature
        f"{stream_id}.~0",
        f"{stream_id}~0",
        TokenSigner("another-secret-of-16+").link_token(stream_id, 0),  # another deployment's
        token + "x",
        token + "~1",
        f"{signed}~-1",
        f"{signed}~1e3",
        f"{signed}~" + "9" * 19,
        f"{signed}~\u0661",  # a digit `int()` would take, not ASCII
        "not-a-token",
        "",
        "x" * (MAX_LINK_TOKEN_LENGTH + 1),
    ]
    for bad in refused_links:
        assert signer.parse_link_token(bad) is None, bad
    event_id = signer.event_prefix(stream_id).decode() + "4"
    refused_ids = [
        event_id.replace(stream_id, other),
        event_id.replace(sig, flipped),
        f"{signed}~4",  # a link token is not an event id
        event_id + "\n",
        event_id[:-1] + "\u0664",
        event_id[:-1] + "-4",
        event_id + ":5",
        TokenSigner("another-secret-of-16+").event_prefix(stream_id).decode() + "4",
    ]
    for bad in refused_ids:
        assert signer.parse_event_id(bad) is None, bad
    # The cursor is not signed, by design: it grants nothing a Last-Event-ID of the stream
    # (whose seq is not signed either) does not.
    assert signer.parse_link_token(f"{signed}~9") == (stream_id, 9)


@pytest.mark.anyio
async def test_a_link_of_the_previous_release_still_resumes_its_stream() -> None:
    from mcp_resume_asgi import MemoryStore, Policy, resumable
    from tests.apps.probe_app import create_app
    from tests.support.raw import RawSession
    from tests.support.server import serve

    app = resumable(create_app(), policy=Policy(retry_ms=20), store=MemoryStore(), secret=SECRET)
    async with serve(app) as info, httpx.AsyncClient(base_url=info.base_url, timeout=10) as client:
        s = RawSession(client)
        await s.initialize()
        call = s.tool_call("progress", {"steps": 2, "seconds": 0.0}, progress=True)
        first = await s.exchange("POST", "/mcp", call)
        assert first.status == 200 and first.link and first.last_id
        stream_id = first.last_id.partition(".")[0]
        legacy = f"/mcp/streams/{_legacy_link(SECRET, stream_id, 0)}"
        # Without Last-Event-ID: from where the legacy link's response started (all of it).
        replay = await s.exchange("GET", legacy, headers=s.headers())
        assert replay.status == 200, replay.raw
        assert [m.get("params", {}).get("progress") for m in replay.messages()][:2] == [1, 2]
        assert replay.messages()[-1]["id"] == call["id"]
        # With the last id the client has: nothing more.
        done = await s.exchange("GET", legacy, headers=s.headers(last_event_id=first.last_id))
        assert done.status == 204
        forged = legacy[:-2] + ("AA" if not legacy.endswith("AA") else "BB")
        refused = await client.get(forged, headers=s.headers())
        assert refused.status_code == 404
