"""An outer ASGI layer that counts what reaches the middleware: resumes, posts, closes."""

from __future__ import annotations

from collections import Counter

from starlette.types import ASGIApp, Receive, Scope, Send


class Counting:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            kind = scope["method"]
            if b"last-event-id" in headers:
                kind += " resume"
            if "/streams/" in scope["path"]:
                kind += " link"
            self.counts[kind] += 1
        await self.app(scope, receive, send)
