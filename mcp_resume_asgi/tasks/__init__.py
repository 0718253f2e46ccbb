"""The Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) for any ASGI MCP app.

`record.py` is the task as plain data (its record, status and wire shapes),
`capability.py` the negotiation, `advertising.py` the rewrite of the app's
`initialize` / `server/discover` answer, `routing.py` the `Mcp-Name` check, and
`middleware.py` the layer that ties them to the engine.
"""
