"""A small TCP proxy on 127.0.0.1 that cuts connections, for resumability tests.

Put it between the MCP client and the server (``proxy.mcp_url`` instead of the
server's), then:

* ``cut_after_bytes=(lo, hi)``: every proxied connection is cut once it has
  forwarded ``n`` bytes server->client, ``n`` drawn per connection from
  ``random.Random(seed).randint(lo, hi)``. Exactly ``n`` bytes are forwarded
  (a chunk crossing the offset is split). A connection whose server->client
  byte stream ends before ``n`` is not cut. With HTTP keep-alive the offset
  counts over the whole connection, i.e. across the responses it carries.
* ``cut_after_delay=(lo, hi)``: every connection is cut ``uniform(lo, hi)``
  seconds after it was accepted (if still open).
* ``await proxy.cut_all()``: cut every open connection now.
* ``proxy.cut_next_reply()``: cut every open connection when its server next sends
  something, forwarding none of it (a request that went through and lost its answer).

``max_cuts`` caps the automatic cuts (``cut_all`` ignores it); the modes and
``max_cuts`` are plain attributes read when a connection is accepted, so a
test can switch them at any point. Cutting closes both sockets at once:
by default with a FIN (the client reads exactly the forwarded bytes, then an
unexpected EOF mid-response), with ``rst=True`` with a TCP RST (SO_LINGER 0;
note that the peer's kernel may then discard forwarded bytes it had not read
yet).

Counters live in ``proxy.stats`` (:class:`ProxyStats`), per-connection details in
``proxy.records`` (:class:`ConnectionRecord`).

Use it as ``async with CutProxy(backend_port, ...) as proxy:`` in an async test
(asyncio or trio), or ``with proxy_in_thread(backend_port, ...) as handle:`` in a
sync test (the proxy then runs on its own event loop in a thread).
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.abc import SocketAttribute
from anyio.from_thread import BlockingPortal, start_blocking_portal

HOST = "127.0.0.1"
_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


@dataclass
class ProxyStats:
    """Aggregate counters of a :class:`CutProxy`."""

    connections: int = 0
    """Client connections accepted."""
    active: int = 0
    """Connections currently open."""
    cuts: int = 0
    """Connections cut (automatically or by ``cut_all``)."""
    closed: int = 0
    """Connections that ended without being cut (either side closed)."""
    backend_failures: int = 0
    """Connections dropped because the backend refused the connection."""
    bytes_up: int = 0
    """Bytes forwarded client->server, all connections."""
    bytes_down: int = 0
    """Bytes forwarded server->client, all connections."""


@dataclass(eq=False)
class ConnectionRecord:
    """What happened to one proxied connection."""

    index: int
    backend_port: int
    cut_at_bytes: int | None
    """The server->client byte offset this connection was to be cut at (None: no byte cut)."""
    cut_after: float | None
    """The delay after which this connection was to be cut (None: no timed cut)."""
    bytes_up: int = 0
    bytes_down: int = 0
    cut: bool = False
    cut_reason: str | None = None
    """``"bytes"``, ``"delay"``, ``"cut_all"`` or ``"reply"``."""
    finished: bool = False
    method: bytes | None = None
    """The method of the first HTTP request on the connection, once seen."""
    cut_on_reply: bool = False
    """Cut the connection when the server next sends something, forwarding none of it."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope, repr=False)


class CutProxy:
    """TCP proxy ``127.0.0.1:<port>`` -> ``backend_host:<backend port>`` that cuts connections on purpose.

    ``backend_port`` may be a sequence of ports: connections are then spread
    over them round-robin (handy as a tiny load balancer in front of several
    server processes). ``proxy.backend_ports`` can be reassigned at any time.
    """

    def __init__(
        self,
        backend_port: int | Sequence[int],
        *,
        backend_host: str = HOST,
        port: int = 0,
        cut_after_bytes: tuple[int, int] | None = None,
        cut_after_delay: tuple[float, float] | None = None,
        max_cuts: int | None = None,
        seed: int = 0,
        rst: bool = False,
        cut_methods: Sequence[str] | None = None,
    ) -> None:
        """``cut_methods``: cut only connections whose first HTTP request uses one of these methods."""
        self.cut_methods = None if cut_methods is None else {m.encode() for m in cut_methods}
        self.backend_ports: list[int] = (
            [backend_port] if isinstance(backend_port, int) else list(backend_port)
        )
        if not self.backend_ports:
            raise ValueError("need at least one backend port")
        self.backend_host = backend_host
        self.cut_after_bytes = cut_after_bytes
        self.cut_after_delay = cut_after_delay
        self.max_cuts = max_cuts
        self.rst = rst
        self.rng = random.Random(seed)
        self.stats = ProxyStats()
        self.records: list[ConnectionRecord] = []
        self._requested_port = port
        self._port: int | None = None
        self._open: set[ConnectionRecord] = set()
        self._listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._next_backend = 0
        self._accepted: anyio.Event | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        """The port the proxy listens on (after start)."""
        if self._port is None:
            raise RuntimeError("proxy not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<proxy port>``."""
        return f"http://{HOST}:{self.port}"

    @property
    def mcp_url(self) -> str:
        """``<base_url>/mcp``."""
        return f"{self.base_url}/mcp"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> CutProxy:
        listener = await anyio.create_tcp_listener(local_host=HOST, local_port=self._requested_port)
        self._listener = listener
        self._port = int(listener.extra(SocketAttribute.local_port))
        self._task_group = tg = anyio.create_task_group()
        await tg.__aenter__()
        tg.start_soon(listener.serve, self._handle, tg)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        tg = self._task_group
        assert tg is not None and self._listener is not None
        tg.cancel_scope.cancel()
        try:
            return await tg.__aexit__(exc_type, exc_val, exc_tb)
        finally:
            with anyio.CancelScope(shield=True):
                await self._listener.aclose()
            self._task_group = None

    # ------------------------------------------------------------------ cutting

    @property
    def open_connections(self) -> int:
        """Connections currently open (same as ``stats.active``)."""
        return len(self._open)

    def _cut(self, record: ConnectionRecord, reason: str, *, forced: bool = False) -> bool:
        if record.cut or record.finished:
            return False
        if not forced and self.max_cuts is not None and self.stats.cuts >= self.max_cuts:
            return False
        record.cut = True
        record.cut_reason = reason
        self.stats.cuts += 1
        record.scope.cancel()
        return True

    async def cut_all(self) -> int:
        """Cut every open connection now (ignores ``max_cuts``); returns how many were cut."""
        cut = sum(self._cut(record, "cut_all", forced=True) for record in list(self._open))
        # Let the connection tasks run their (abrupt) close before returning.
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        return cut

    def cut_next_reply(self) -> int:
        """Every open connection is cut when its server next sends something, forwarding none
        of it (the request went through; its answer is lost). Returns how many were marked."""
        for record in self._open:
            record.cut_on_reply = True
        return len(self._open)

    async def wait_for_connections(self, count: int) -> None:
        """Wait until ``count`` connections were accepted in total (bound it with fail_after)."""
        while self.stats.connections < count:
            if self._accepted is None:
                self._accepted = anyio.Event()
            await self._accepted.wait()

    # ------------------------------------------------------------------ plumbing

    def send_next_to(self, port: int) -> None:
        """Make the round-robin's next pick ``port`` (a connection accepted meanwhile by someone
        else - a client's background GET - takes it instead: steering is a best effort)."""
        self._next_backend = self.backend_ports.index(port)

    def _pick_backend(self) -> int:
        port = self.backend_ports[self._next_backend % len(self.backend_ports)]
        self._next_backend += 1
        return port

    async def _handle(self, client: anyio.abc.SocketStream) -> None:
        cuts_left = self.max_cuts is None or self.stats.cuts < self.max_cuts
        limit = self.rng.randint(*self.cut_after_bytes) if self.cut_after_bytes and cuts_left else None
        delay = self.rng.uniform(*self.cut_after_delay) if self.cut_after_delay and cuts_left else None
        backend_port = self._pick_backend()
        record = ConnectionRecord(len(self.records), backend_port, limit, delay)
        self.records.append(record)
        self.stats.connections += 1
        if self._accepted is not None:
            self._accepted.set()
            self._accepted = None
        try:
            backend = await anyio.connect_tcp(self.backend_host, backend_port)
        except OSError:
            self.stats.backend_failures += 1
            record.finished = True
            await self._close(client, abort=True)
            return
        self._open.add(record)
        self.stats.active += 1
        try:
            with record.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump_up, record, client, backend, tg.cancel_scope)
                    tg.start_soon(self._pump_down, record, backend, client, limit, tg.cancel_scope)
                    if delay is not None:
                        tg.start_soon(self._cut_later, record, delay)
        finally:
            self._open.discard(record)
            self.stats.active -= 1
            if not record.cut:
                record.finished = True
                self.stats.closed += 1
            with anyio.CancelScope(shield=True):
                abort = record.cut and self.rst
                await self._close(client, abort=abort)
                await self._close(backend, abort=abort)

    async def _pump_up(
        self,
        record: ConnectionRecord,
        client: anyio.abc.SocketStream,
        backend: anyio.abc.SocketStream,
        scope: anyio.CancelScope,
    ) -> None:
        try:
            async for chunk in client:
                if record.method is None:
                    record.method = chunk.split(b" ", 1)[0]
                await backend.send(chunk)
                record.bytes_up += len(chunk)
                self.stats.bytes_up += len(chunk)
        except _STREAM_ERRORS:
            pass
        scope.cancel()

    async def _pump_down(
        self,
        record: ConnectionRecord,
        backend: anyio.abc.SocketStream,
        client: anyio.abc.SocketStream,
        limit: int | None,
        scope: anyio.CancelScope,
    ) -> None:
        try:
            async for chunk in backend:
                if record.cut_on_reply and self._cut(record, "reply", forced=True):
                    return
                if (
                    limit is not None
                    and self.cut_methods is not None
                    and record.method not in self.cut_methods
                ):
                    limit = None
                if limit is not None and record.bytes_down + len(chunk) >= limit:
                    part = chunk[: limit - record.bytes_down]
                    if part:
                        await client.send(part)
                        record.bytes_down += len(part)
                        self.stats.bytes_down += len(part)
                    if self._cut(record, "bytes"):
                        return
                    limit = None  # max_cuts reached meanwhile: pass the rest through
                    chunk = chunk[len(part) :]
                    if not chunk:
                        continue
                await client.send(chunk)
                record.bytes_down += len(chunk)
                self.stats.bytes_down += len(chunk)
        except _STREAM_ERRORS:
            pass
        scope.cancel()

    async def _cut_later(self, record: ConnectionRecord, delay: float) -> None:
        await anyio.sleep(delay)
        self._cut(record, "delay")

    @staticmethod
    async def _close(stream: anyio.abc.SocketStream, *, abort: bool) -> None:
        if abort:
            raw = stream.extra(SocketAttribute.raw_socket, None)
            if raw is not None:
                with contextlib.suppress(OSError):
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with contextlib.suppress(*_STREAM_ERRORS):
            await stream.aclose()


class ThreadedProxy:
    """Handle on a :class:`CutProxy` running in a background thread (see :func:`proxy_in_thread`)."""

    def __init__(self, proxy: CutProxy, portal: BlockingPortal) -> None:
        self.proxy = proxy
        self._portal = portal

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def base_url(self) -> str:
        return self.proxy.base_url

    @property
    def mcp_url(self) -> str:
        return self.proxy.mcp_url

    @property
    def stats(self) -> ProxyStats:
        return self.proxy.stats

    @property
    def records(self) -> list[ConnectionRecord]:
        return self.proxy.records

    def cut_all(self) -> int:
        """Cut every open connection now; returns how many were cut."""
        return self._portal.call(self.proxy.cut_all)


@contextlib.contextmanager
def proxy_in_thread(
    backend_port: int | Sequence[int],
    *,
    cut_after_bytes: tuple[int, int] | None = None,
    cut_after_delay: tuple[float, float] | None = None,
    max_cuts: int | None = None,
    seed: int = 0,
    rst: bool = False,
    port: int = 0,
) -> Iterator[ThreadedProxy]:
    """Sync context manager: a :class:`CutProxy` on its own event loop in a background thread."""
    proxy = CutProxy(
        backend_port,
        port=port,
        cut_after_bytes=cut_after_bytes,
        cut_after_delay=cut_after_delay,
        max_cuts=max_cuts,
        seed=seed,
        rst=rst,
    )
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(proxy):
        yield ThreadedProxy(proxy, portal)
