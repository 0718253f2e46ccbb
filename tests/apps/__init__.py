"""Small MCP Streamable HTTP server apps used by the end-to-end tests.

Every module exposes ``create_app(*, json_response: bool = False) -> Starlette``
serving Streamable HTTP at ``/mcp`` with stateful sessions, SSE responses and no
event store, and the same tool set:

* ``echo(text) -> text``
* ``slow_progress(seconds=3, steps=30)`` -> ``"done {steps}"`` after ``steps``
  progress notifications ``(i, steps, "step {i}")`` spread over ``seconds``
* ``ask_name()`` -> ``"hello {name}"`` (or ``"declined"``) via a form elicitation
  asking for the string field ``name``
* ``fail()`` -> raises (see ``FAIL_MESSAGE``)

The low-level app additionally has ``notify_later(count=3, interval=0.1)``, which
sends ``count`` ``notifications/message`` log messages that are not related to
the request, i.e. on the standalone GET stream.
"""

APP_FACTORIES: dict[str, str] = {
    "lowlevel": "tests.apps.lowlevel_app:create_app",
    "mcpserver": "tests.apps.mcpserver_app:create_app",
    "fastmcp": "tests.apps.fastmcp_app:create_app",
}
"""Import strings (``module:factory``) of the three app factories, by flavour."""

FAIL_MESSAGE = "intentional failure"
"""The text of the error raised by every app's ``fail`` tool."""

ELICIT_MESSAGE = "What is your name?"
"""The message of the ``ask_name`` elicitation."""

NOTIFY_LOGGER = "notify_later"
"""The ``logger`` field of the log messages sent by ``notify_later``."""
