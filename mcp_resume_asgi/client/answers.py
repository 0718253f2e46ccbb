"""The application's answers to a server's requests, held for the stream that asked (SEP-1335).

Why they are held: a server behind the middleware that asks the client something
on a stream with a ``Link`` URL (elicitation, sampling, roots - 2025 revisions)
wants the answers POSTed together, as one JSON array, to that URL - usually when
it signals it waits for them (``204`` on the resume GET). The application knows
nothing of that: it POSTs each answer to the MCP URL like any client. The
transport captures those POSTs and this buffer keeps them per stream until they
are sent.

Plain data with no I/O and no clock: the caller says what time it is when the
last answer arrives (:attr:`AnswerBuffer.complete_at`), from which it may flush
the answers itself after ``flush_after_s`` if the server keeps its stream open.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import GiveUp
from .messages import IdKey

Answer = tuple[IdKey, dict[str, Any]]


class AnswerBuffer:
    """Server requests seen on one stream (answered or not) and the answers not yet sent."""

    def __init__(self) -> None:
        self._pending: dict[IdKey, bool] = {}  # id key -> answered?
        self._buffer: list[Answer] = []  # answers, in arrival order
        self.complete_at: float | None = None
        """When the last outstanding request got its answer (None while any is unanswered)."""

    def __len__(self) -> int:
        """How many server requests are outstanding: unanswered, or answered but not yet sent."""
        return len(self._pending)

    def expect(self, key: IdKey, limit: int) -> None:
        """The server asked ``key``: its answer is now awaited. Bounded by ``limit`` outstanding requests."""
        if key in self._pending:
            return
        if len(self._pending) >= limit:
            raise GiveUp("too many server-to-client requests are waiting for answers")
        self._pending[key] = False
        self.complete_at = None

    def awaits(self, key: IdKey) -> bool:
        """An answer to ``key`` belongs here: the server asked it and it has no answer yet."""
        return self._pending.get(key) is False

    def capture(self, key: IdKey, message: dict[str, Any], now: float) -> bool:
        """Hold the answer ``message``; True when it was the last one awaited."""
        self._pending[key] = True
        self._buffer.append((key, message))
        if self.all_answered():
            self.complete_at = now
            return True
        return False

    def all_answered(self) -> bool:
        return bool(self._pending) and all(self._pending.values())

    def batch(self) -> list[Answer]:
        """The answers to send now (a copy: more may arrive while they are being sent)."""
        return list(self._buffer)

    def sent(self, batch: list[Answer]) -> None:
        """The server took ``batch``: those requests are no longer outstanding."""
        del self._buffer[: len(batch)]
        for key, _ in batch:
            self._pending.pop(key, None)
        if not self.all_answered():
            self.complete_at = None

    def clear(self) -> None:
        self._pending.clear()
        self._buffer.clear()


def answers_body(batch: list[Answer]) -> bytes:
    """The JSON array of answers POSTed to the ``Link`` URL."""
    return json.dumps([message for _, message in batch], separators=(",", ":")).encode()
