"""The REST face's calls as a client waits for them, for tests that need a given state."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import httpx

from tests.support.timing import scaled


async def settled(
    client: httpx.AsyncClient,
    response: httpx.Response,
    url: str,
    headers: Mapping[str, str] | None = None,
    within_s: float = 15,
) -> httpx.Response:
    """The first state of the call at `url`, from `response` (a PUT's or an advance's) on, that
    is neither `submitted` nor `running`: a PUT answers `running` when its wait for the task to
    settle ends first (a loaded machine), and a client then GETs the call, as SEP-1597 says."""
    with anyio.fail_after(scaled(within_s)):
        while response.is_success and response.json().get("status") in ("submitted", "running"):
            await anyio.sleep(0.05)
            response = await client.get(url, headers=headers)
    return response
