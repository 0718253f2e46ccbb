"""What travels on the wire, as plain data: the bottom layer, no I/O.

Every other layer (the engine, the HTTP front, the feature layers, the client helper)
speaks the same protocol, so its facts live here once: JSON-RPC and MCP revisions
(`jsonrpc`), Server-Sent Events (`sse`), signed stream names (`tokens`), header values and
request headers (`headers`, `header_rules`), the ASGI messages of a reply (`replies`), the
ASGI types (`asgi`), the keys the library puts in a scope (`scope_keys`), who is calling
(`principal`) and sealed relays between nodes (`relay_seal`).

Nothing here imports an event loop or a web framework (the `pure-bottom` contract of
`.importlinter`): these modules are tested without one. This package imports none of its
modules, so importing one of them costs only that one.
"""
