"""The ASGI front: which HTTP request goes where, and the answers that need no stream engine.

`middleware.py` is `ResumeMiddleware` (routing, and a POST's sorting: `post_sorting.py`);
`resume.py` serves a resumed GET (a `Last-Event-ID`, a stream URL); `client_answers.py` and `client_cancels.py` a client's answers
and cancel notices; `outage.py` what the front does while the store is down; `bodies.py`
reads a request's body; `misconfig.py` says when MCP traffic comes in on another path.
The engine (`engine/`) runs the streams; nothing in it imports this package.
"""
