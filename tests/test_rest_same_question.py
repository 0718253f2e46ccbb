"""A REST call asking the same question twice is answered twice (issue 20 review, defect 1).

Two states of one call that show the same question have the same ETag (the resource shows
the request's params, not its input key), so the claim that lets exactly one advance of a
state through names the input request it answers too: the second question's advance is
taken, not refused 412 as the first's duplicate. Against the wrapped stock `MCPServer` of
`test_rest.py` (`confirm_twice`: two resolvers rendering the same elicitation), in both eras
the face speaks to it: one round of two input requests on 2026-07-28, two
`elicitation/create` one after the other on a 2025-11-25 session.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

import tests.test_rest as rest
from tests.support.rest_calls import settled
from tests.support.timing import scaled
from tests.test_rest import era, face

pytestmark = pytest.mark.anyio
__all__ = ["era"]  # both eras (the fixture of test_rest.py)

URL = "/mcp/tools/confirm_twice/calls/twice-1"


async def test_the_same_question_asked_twice_is_advanced_twice() -> None:
    async with face() as client:
        put = await client.put(
            URL, json={"filename": "a.txt"}, headers={"idempotency-key": str(uuid.uuid4())}
        )
        assert put.status_code == 201, put.text
        first = await settled(client, put, URL)
        assert first.json()["status"] == "awaitingElicitationResult", first.text
        assert first.json()["elicitationRequest"]["message"] == "Delete a.txt?"
        etag = first.headers["etag"]
        yes = {"action": "accept", "content": {"confirm": True}}
        with anyio.fail_after(scaled(15)):
            taken = await client.post(f"{URL}/advance", json=yes, headers={"if-match": etag})
        assert taken.status_code == 200, taken.text
        second = await settled(client, taken, URL)
        assert second.json()["status"] == "awaitingElicitationResult", second.text
        assert second.json()["elicitationRequest"] == first.json()["elicitationRequest"]
        assert second.headers["etag"] == etag, "the same question: the same state, the same etag"
        no = {"action": "accept", "content": {"confirm": False}}
        with anyio.fail_after(scaled(15)):
            again = await client.post(f"{URL}/advance", json=no, headers={"if-match": etag})
        assert again.status_code == 200, f"the second question's advance is taken ({rest.ERA}): {again.text}"
        done = await settled(client, again, URL)
        assert done.json()["status"] == "success", done.text
        assert done.json()["result"]["content"][0]["text"] == "a.txt: True then False"
        # The state is gone: its etag no longer names the call's state.
        stale = await client.post(f"{URL}/advance", json=no, headers={"if-match": etag})
        assert stale.status_code == 412, stale.text
