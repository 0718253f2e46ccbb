"""The stream engine: an app's SSE answer, detached from the connection that asked for it.

`engine.py` is the way in (`Engine`); what its collaborators use of it is `services.py`
(`StreamServices`), what the layers in front use is `port.py` (`RequestContext`, the
`EnginePort`, `ServeOptions`, plain answers). Beside them: a client connection
(`connection.py`), the one clock (`scheduler.py`), admission (`admission.py`), sessions, held
writes' recovery, cancel bindings, and the cluster link (`cluster.py`, `relayed_caller.py`).

Nothing is imported here: a face that imports `engine.port` loads the port, not the engine.
"""
