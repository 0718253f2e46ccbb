"""The stream engine: an app's SSE answer, detached from the connection that asked for it.

`engine.py` is the way in (`Engine`); what its collaborators use of it is `services.py`
(`StreamServices`), what the layers in front use is `port.py` (`RequestContext`, the
`EnginePort`, plain answers). Beside them: a client connection (`connection.py`), the one
clock (`scheduler.py`), admission (`admission.py`), sessions, held writes' recovery, cancel
bindings, and the cluster link (`cluster.py`, `relayed_caller.py`).

This package re-exports only what `mcp_resume_asgi.engine` offered as a module.
"""

from mcp_resume_asgi.engine.engine import Engine
from mcp_resume_asgi.engine.port import Delivery, RetryAnswer
from mcp_resume_asgi.wire.scope_keys import STREAM_SEGMENT

__all__ = ["STREAM_SEGMENT", "Delivery", "Engine", "RetryAnswer"]
