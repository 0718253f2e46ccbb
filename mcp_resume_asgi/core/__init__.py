"""The sans-IO core: a stream's state and every decision about it, as plain objects.

Nothing here awaits, reads a clock or imports an event loop or a web framework
(anyio, asyncio, sniffio, trio, starlette): the hosts (the engine) feed it what
happened with the time it happened and act on what it answers, and its tests run
without an event loop. This package imports none of its modules: import them by name.
"""
