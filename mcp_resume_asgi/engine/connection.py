"""One client HTTP connection: how to write to it, and how we learn that it left.

A connection is written by whoever has its events first (the app's own `send`
for the connection attached to a stream hosted here), so writes go through
`send`, which turns the server's way of reporting a dead socket into `False`.
Its `receive` has one reader at a time (`listen`): the connection's own ASGI
call, never the app (whose request runs on a task of the engine's). A send in
flight is counted, so that the call can wait for it before it returns (`idle`):
nothing is sent on a connection after its call returned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel

from mcp_resume_asgi.engine.event_loop import running_asyncio_loop
from mcp_resume_asgi.engine.port import Delivery
from mcp_resume_asgi.wire.asgi import Message, Receive, Send

if TYPE_CHECKING:
    from mcp_resume_asgi.core.stream import Attachment

__all__ = ["Connection", "Flag", "Interruptible"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Flag:
    """A one-way flag that makes something to wait on only if somebody waits for it.

    A request sets or checks several of these and waits on few, if any: creating an
    event costs more than most of what the engine does per request. A waiter on
    asyncio waits on a bare future of its own (an idle detached stream's app waits on
    one for as long as it lives: an `anyio.Event` would be four objects more); on
    another loop, on an `anyio.Event`.
    """

    __slots__ = ("_event", "_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None
        # One future alone (the usual one waiter: no list held), or a list of them.
        self._waiters: asyncio.Future[Any] | list[asyncio.Future[Any]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()
            waiters, self._waiters = self._waiters, None
            if waiters is None:
                return
            for waiter in waiters if isinstance(waiters, list) else (waiters,):
                if not waiter.done():
                    waiter.set_result(self._result())

    def _result(self) -> Any:
        """What a future of `future` resolves to (None: a subclass may say more)."""
        return None

    def future(self) -> asyncio.Future[Any] | None:
        """What `wait` awaits on asyncio, to be awaited as is (None when set, or on another loop:
        use `wait`). An idle waiter then holds no coroutine of `wait`'s; a cancelled one's future
        is dropped by the next waiter or when the flag is set."""
        if self._set:
            return None
        loop = running_asyncio_loop()
        if loop is None:
            return None
        waiter: asyncio.Future[Any] = loop.create_future()
        self._add(waiter)
        return waiter

    def _add(self, waiter: asyncio.Future[Any]) -> None:
        held = self._waiters
        if held is None:
            self._waiters = waiter
        elif isinstance(held, list):
            held[:] = [w for w in held if not w.done()]
            held.append(waiter)
        elif held.done():
            self._waiters = waiter
        else:
            self._waiters = [held, waiter]

    async def wait(self) -> None:
        if self._set:
            return
        loop = running_asyncio_loop()
        if loop is None:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
            return
        waiter: asyncio.Future[Any] = loop.create_future()
        self._add(waiter)
        try:
            await waiter  # (a cancelled waiter cancels its own future only)
        finally:
            held = self._waiters
            if held is waiter:
                self._waiters = None
            elif isinstance(held, list) and waiter in held:
                held.remove(waiter)


class Interruptible:
    """One await at a time that another task may stop (`interrupt`), by a cancel scope.

    A connection's listen and writes use one off asyncio only: on asyncio they cancel the
    awaiting task itself, which takes back exactly that cancellation (`Task.uncancel`),
    leaving any other one pending - no cancel scope, no object per connection (`Connection`).
    """

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None

    async def run(self, awaitable: Awaitable[T]) -> tuple[T | None, bool]:
        """`(its result, False)`, or `(None, True)` when interrupted."""
        result: T | None = None
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                result = await awaitable
            finally:
                self._scope = None
        return (None, True) if scope.cancelled_caught else (result, False)

    def interrupt(self) -> None:
        if self._scope is not None:
            self._scope.cancel()


class Connection:
    """A client connection (see the module docstring)."""

    __slots__ = (
        "_idle",
        "_listen_task",
        "_pending",
        "_receive",
        "_send",
        "_write_task",
        "attachment",
        "busy",
        "delivery",
        "finished",
        "gone",
        "head",
        "headers",
        "keepalive_due",
        "listener",
        "listening",
        "missed",
        "own_writer",
        "released",
        "sending",
        "started",
        "wake",
        "writing",
    )

    def __init__(self, send: Send, receive: Receive) -> None:
        self._send = send
        self._receive = receive
        self.gone = False
        """The client left (nobody waits for it: it is checked, so a plain bool)."""
        self.released = Flag()
        """Set once nothing will write to it any more (its answer is finished)."""
        self.started = False
        self.finished = False
        self.attachment: Attachment | None = None
        """Its place on the stream it is attached to (None: not attached, or let go)."""
        self.delivery: Delivery | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.head: bytes | None = None
        """Held headers' priming event: sent with the first event, or alone when due."""
        self.busy = False
        """A writer holds it: others leave their work to that writer."""
        self.missed = False
        """Events were recorded for it while it was busy: its writer looks again (`Writer.pump`)."""
        self.own_writer = False
        """It stalled once: a task of its own writes it from now on (`wake` calls it)."""
        self.wake: anyio.Event | None = None
        self.keepalive_due = False
        self.listening = False
        # How a listen or a write in flight is stopped: on asyncio by cancelling the task awaiting
        # it, which takes back exactly that cancellation (`Interruptible`'s way, without making
        # one per connection); on another loop by an `Interruptible`, made when first used.
        self._listen_task: asyncio.Task[Any] | None = None
        self._write_task: asyncio.Task[Any] | None = None
        self._pending: tuple[asyncio.Future[Any], bool] | None = None
        """A write given up by its writer (stalled) that the server still has under way, and
        whether it ends the answer (`write_interruptibly`, `settle_pending`)."""
        self.listener: Interruptible | None = None
        self.writing: Interruptible | None = None
        self.sending = 0
        """Sends under way (`idle` waits for them)."""
        self._idle: anyio.Event | None = None

    async def listen(self) -> None:
        """Read `receive` until the client leaves, or `stop_listening` is called."""
        if self.listening or self.gone:
            return
        self.listening = True
        try:
            loop = running_asyncio_loop()  # (`current_asyncio_task`, inline: once per request)
            task = None if loop is None else asyncio.current_task(loop)
            if task is None:
                listener = self.listener
                if listener is None:
                    listener = self.listener = Interruptible()
                await listener.run(self._read_until_gone())
                return
            # On asyncio, `Interruptible.run` inline: every request in flight waits here, and two
            # frames fewer each is less of what a burst of requests keeps at its peak.
            self._listen_task = task
            try:
                while True:  # (`_read_until_gone`)
                    message = await self._receive()
                    if message["type"] == "http.disconnect":
                        self.mark_gone()
                        return
                    await anyio.lowlevel.checkpoint()
            except asyncio.CancelledError:
                if self._listen_task is not None or task.uncancel() > 0:
                    raise  # not (only) ours
            finally:
                self._listen_task = None
        finally:
            self.listening = False

    async def _read_until_gone(self) -> None:
        """The client's messages until it leaves (inline in `listen` on asyncio)."""
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.mark_gone()
                return
            # (A server's `receive` has nothing more to say once the body is read, so it blocks; one
            # that returns at once - more of a body nobody reads, or a hand-made `receive` - must
            # not keep the event loop from the app, which is what lets this connection go.)
            await anyio.lowlevel.checkpoint()

    def stop_listening(self) -> None:
        task = self._listen_task
        if task is not None:
            self._listen_task = None
            task.cancel()
        elif self.listener is not None:
            self.listener.interrupt()

    def mark_gone(self) -> None:
        if not self.gone:
            self.gone = True
            self.interrupt_write()
            if self._pending is not None:
                self._pending[0].cancel()  # (nobody reads it: the server's send need not go on)

    async def write_interruptibly(self, data: bytes, *, end: bool = False) -> bool | None:
        """`write`, which `interrupt_write` can stop: True, False when gone, None when interrupted.

        Every event of an attached connection is written here, so on asyncio it is `send`
        and `Interruptible.run` in one coroutine (`Interruptible` says how it is stopped).

        A server whose `send` returns a future of its own (granian, when its client reads slower
        than it writes) writes on whether or not that future is awaited, and may have taken the
        data before the future learns of it: an interrupted wait for it does not cancel it (on
        asyncio). It is kept (`settle_pending`), and whoever writes the connection next first
        learns from it whether the data went out, so an event is never written twice, nor
        skipped. (A `send` that is a coroutine is cancelled, as it must be to stop waiting: a
        server that returns from such a cancel having written - not uvicorn - may see the
        interrupted write's events again.)"""
        if self.gone or self.finished:
            return False
        message = {"type": "http.response.body", "body": data, "more_body": not end}
        loop = running_asyncio_loop()  # (`current_asyncio_task`, inline: once per event written)
        task = None if loop is None else asyncio.current_task(loop)
        if task is None:
            writing = self.writing
            if writing is None:
                writing = self.writing = Interruptible()
            written, interrupted = await writing.run(self.send(message))
            if interrupted:
                return False if self.gone else None
            return written
        self._write_task = task
        sending = self._send(message)
        try:
            if asyncio.isfuture(sending):
                await asyncio.shield(sending)  # (the server's write goes on if this wait is interrupted)
            else:
                await sending
        except asyncio.CancelledError:
            future = sending if asyncio.isfuture(sending) else None
            if self._write_task is not None or task.uncancel() > 0:
                if future is not None:
                    future.cancel()
                raise  # not (only) ours
            if self.gone or future is None:
                if future is not None:
                    future.cancel()
                return False if self.gone else None
            self._pending = (future, end)
            return None
        except Exception:  # the server reports a dead socket in its own way (OSError, ClientDisconnected...)
            # No longer interruptible first: `mark_gone` interrupts the write in flight, which
            # would be this task itself, cancelled at its next await for nothing.
            self._write_task = None
            logger.debug("client connection failed on send", exc_info=True)
            self.mark_gone()
            return False
        finally:
            self._write_task = None
        if end:
            self.finished = True
        return True

    async def settle_pending(self) -> bool | None:
        """Wait for the write given up by its writer (`write_interruptibly`) to end in the server:
        True when it was written, False when it was not (the server dropped it, or the client is
        gone), None when none was under way."""
        pending = self._pending
        if pending is None:
            return None
        sending, end = pending
        try:
            await asyncio.shield(sending)
        except asyncio.CancelledError:
            if not sending.cancelled():
                raise  # (the waiter's own cancellation)
            return False
        except Exception:
            self._pending = None
            logger.debug("client connection failed on send", exc_info=True)
            self.mark_gone()
            return False
        finally:
            if sending.done():
                self._pending = None
        if end:
            self.finished = True
        return not self.gone

    def interrupt_write(self) -> None:
        """Stop the write in flight (it returns None, or False if the client is gone)."""
        task = self._write_task
        if task is not None:
            self._write_task = None
            task.cancel()
        elif self.writing is not None:
            self.writing.interrupt()

    def signal(self) -> None:
        """Tell its own writer (after a stall) that there is work."""
        if self.wake is not None:
            self.wake.set()

    async def send(self, message: Message) -> bool:
        if self.gone or self.finished:
            return False
        self.sending += 1
        try:
            await self._send(message)
        except Exception:  # the server reports a dead socket in its own way (OSError, ClientDisconnected...)
            logger.debug("client connection failed on send", exc_info=True)
            self.mark_gone()
            return False
        finally:
            self.sending -= 1
            if not self.sending and self._idle is not None:
                self._idle.set()
                self._idle = None
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.finished = True
        return True

    async def idle(self) -> None:
        """Return once no send is under way on it."""
        while self.sending:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def close(self) -> None:
        """Its ASGI call returned: let go of the server's `send` and `receive` (and, through
        them, the server's request), which nothing may call any more (`finished` or `gone`)."""
        if not self.finished:
            self.mark_gone()
        self._send = _closed_send
        self._receive = _closed_receive

    async def send_message(self, message: Message) -> None:
        """`send` with the ASGI signature, for the response helpers."""
        await self.send(message)

    def write(self, data: bytes, *, end: bool = False) -> Awaitable[bool]:
        """`send` of a body part (its coroutine itself: none of ours around it)."""
        return self.send({"type": "http.response.body", "body": data, "more_body": not end})

    async def finish(self, data: bytes = b"") -> None:
        if self.started and not self.finished:
            await self.send({"type": "http.response.body", "body": data, "more_body": False})

    def start(self) -> Awaitable[bool]:
        """Send the answer's headers (`headers`, status 200), let go of once handed to the server
        (an attached connection holds no copy of them for as long as it stays). `send`'s coroutine
        itself: none of ours around it."""
        headers, self.headers = self.headers, []
        return self.send({"type": "http.response.start", "status": 200, "headers": headers})

    async def open(self) -> bool:
        """Send the headers and the held head (priming event), if not sent yet."""
        if self.started:
            return True
        head, self.head = self.head, None
        if not await self.start():
            return False
        return not head or await self.write(head)


async def _closed_send(message: Message) -> None:
    raise RuntimeError("send on a connection whose ASGI call returned")


async def _closed_receive() -> Message:
    return {"type": "http.disconnect"}
