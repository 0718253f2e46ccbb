"""MCP conformance-suite test server, built with the stock ``mcp`` SDK.

It implements what the server scenarios of ``@modelcontextprotocol/conformance``
(0.1.16) expect -- the tools, resources and prompts of the suite's reference
"everything server" -- as plainly as ``mcp.server.mcpserver.MCPServer`` allows,
served over Streamable HTTP at ``/mcp``.

On purpose it does NOTHING for SEP-1699: no event store, no ``retry_interval``,
no ``close_sse_stream()``.  ``test_reconnection`` just takes a while, so that a
resumability layer wrapped around the app (``make_app(wrapped=True)``) has to
cut the POST stream and let the client resume with GET + ``Last-Event-ID``.

Run it::

    python -m conformance.server --port 3001            # bare SDK app
    python -m conformance.server --port 3001 --wrapped  # behind mcp_resume_asgi.resumable
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer, UserMessage
from mcp.server.mcpserver.tools import Tool

from conformance.tasks_fixtures import add_task_tools, task_routes

logger = logging.getLogger("conformance.server")

MCP_PATH = "/mcp"

# Policy used by make_app(wrapped=True): a small retry hint and a short connection
# lifetime, so that the middleware -- not the app -- cuts the POST stream of
# ``test_reconnection`` mid-call and the suite must resume it with GET + Last-Event-ID.
# The suite resumes only ONCE (and reads that GET stream for up to 5 s), while
# max_connection_s applies to every connection, the resumed one included.  So the
# tool must outlast one connection but finish within two:
#     WRAPPED_MAX_CONNECTION_S < RECONNECTION_TOOL_DELAY_S < 2 * WRAPPED_MAX_CONNECTION_S
WRAPPED_RETRY_MS = 100
WRAPPED_MAX_CONNECTION_S = 1.0
RECONNECTION_TOOL_DELAY_S = 1.5

# 1x1 red PNG and a minimal WAV, as in the suite's reference server.
TEST_IMAGE_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
TEST_AUDIO_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


# SEP-1613 (scenario json-schema-2020-12, pending in 0.1.16): tools/list must carry this
# input schema verbatim, including $schema, $defs and additionalProperties.
JSON_SCHEMA_2020_12_INPUT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _image() -> types.ImageContent:
    return types.ImageContent(type="image", data=TEST_IMAGE_BASE64, mime_type="image/png")


def _embedded(uri: str, mime_type: str, text: str) -> types.EmbeddedResource:
    return types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(uri=uri, mime_type=mime_type, text=text),
    )


def build_server() -> MCPServer:
    """A fresh MCPServer with everything the conformance server scenarios call."""

    def json_schema_2020_12_tool(name: str | None = None, address: dict[str, Any] | None = None) -> str:
        return f"JSON Schema 2020-12 tool called with: {json.dumps({'name': name, 'address': address})}"

    # The SDK derives a tool's schema from its signature; this one publishes the raw schema.
    schema_tool = Tool.from_function(
        json_schema_2020_12_tool,
        description="Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
    ).model_copy(update={"parameters": JSON_SCHEMA_2020_12_INPUT_SCHEMA})

    mcp = MCPServer("mcp-conformance-test-server", version="1.0.0", tools=[schema_tool])
    subscriptions: set[str] = set()

    # ----------------------------------------------------------------- tools
    @mcp.tool(description="Tests simple text content response")
    def test_simple_text() -> types.CallToolResult:
        return types.CallToolResult(content=[_text("This is a simple text response for testing.")])

    @mcp.tool(description="Tests image content response")
    def test_image_content() -> types.CallToolResult:
        return types.CallToolResult(content=[_image()])

    @mcp.tool(description="Tests audio content response")
    def test_audio_content() -> types.CallToolResult:
        audio = types.AudioContent(type="audio", data=TEST_AUDIO_BASE64, mime_type="audio/wav")
        return types.CallToolResult(content=[audio])

    @mcp.tool(description="Tests embedded resource content response")
    def test_embedded_resource() -> types.CallToolResult:
        resource = _embedded(
            "test://embedded-resource", "text/plain", "This is an embedded resource content."
        )
        return types.CallToolResult(content=[resource])

    @mcp.tool(description="Tests response with multiple content types (text, image, resource)")
    def test_multiple_content_types() -> types.CallToolResult:
        return types.CallToolResult(
            content=[
                _text("Multiple content types test:"),
                _image(),
                _embedded(
                    "test://mixed-content-resource",
                    "application/json",
                    json.dumps({"test": "data", "value": 123}),
                ),
            ]
        )

    @mcp.tool(description="Tests tool that emits log messages during execution")
    async def test_tool_with_logging(ctx: Context) -> types.CallToolResult:
        await ctx.info("Tool execution started")
        await asyncio.sleep(0.05)
        await ctx.info("Tool processing data")
        await asyncio.sleep(0.05)
        await ctx.info("Tool execution completed")
        return types.CallToolResult(content=[_text("Tool with logging executed successfully")])

    @mcp.tool(description="Tests tool that reports progress notifications")
    async def test_tool_with_progress(ctx: Context) -> types.CallToolResult:
        for step in (0, 50, 100):
            await ctx.report_progress(step, 100, f"Completed step {step} of 100")
            if step < 100:
                await asyncio.sleep(0.05)
        meta = ctx.request_context.meta
        token = meta.get("progressToken") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
        return types.CallToolResult(content=[_text(str(token if token is not None else 0))])

    @mcp.tool(description="Tests error response handling")
    def test_error_handling() -> types.CallToolResult:
        raise RuntimeError("This tool intentionally returns an error for testing")

    @mcp.tool(
        description=(
            "Tests SSE stream disconnection and client reconnection (SEP-1699). This server does "
            "nothing for it: the call just takes a while, and a resumability layer in front of the "
            "app is expected to close the stream mid-call and resume it."
        )
    )
    async def test_reconnection() -> types.CallToolResult:
        await asyncio.sleep(RECONNECTION_TOOL_DELAY_S)
        return types.CallToolResult(
            content=[
                _text(
                    "Reconnection test completed successfully. If you received this, the client "
                    "properly reconnected after stream closure."
                )
            ]
        )

    @mcp.tool(description="Tests server-initiated sampling (LLM completion request)")
    async def test_sampling(prompt: str, ctx: Context) -> types.CallToolResult:
        try:
            result = await ctx.session.create_message(
                messages=[types.SamplingMessage(role="user", content=_text(prompt))],
                max_tokens=100,
                related_request_id=ctx.request_id,
            )
            content = result.content
            reply = content.text if isinstance(content, types.TextContent) else "No response"
            return types.CallToolResult(content=[_text(f"LLM response: {reply}")])
        except Exception as exc:
            return types.CallToolResult(content=[_text(f"Sampling not supported or error: {exc}")])

    async def _elicit(
        ctx: Context, message: str, schema: dict[str, Any], prefix: str
    ) -> types.CallToolResult:
        try:
            result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
            content = json.dumps(result.content or {})
            return types.CallToolResult(
                content=[_text(f"{prefix}: action={result.action}, content={content}")]
            )
        except Exception as exc:
            return types.CallToolResult(content=[_text(f"Elicitation not supported or error: {exc}")])

    @mcp.tool(description="Tests server-initiated elicitation (user input request)")
    async def test_elicitation(message: str, ctx: Context) -> types.CallToolResult:
        schema = {
            "type": "object",
            "properties": {"response": {"type": "string", "description": "User's response"}},
            "required": ["response"],
        }
        return await _elicit(ctx, message, schema, "User response")

    @mcp.tool(description="Tests elicitation with default values per SEP-1034")
    async def test_elicitation_sep1034_defaults(ctx: Context) -> types.CallToolResult:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "description": "Verification status", "default": True},
            },
            "required": [],
        }
        message = "Please review and update the form fields with defaults"
        return await _elicit(ctx, message, schema, "Elicitation completed")

    @mcp.tool(description="Tests elicitation with enum schema improvements per SEP-1330")
    async def test_elicitation_sep1330_enums(ctx: Context) -> types.CallToolResult:
        options = ["option1", "option2", "option3"]
        titled = [
            {"const": "value1", "title": "First Option"},
            {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"},
        ]
        titled_multi = [
            {"const": "value1", "title": "First Choice"},
            {"const": "value2", "title": "Second Choice"},
            {"const": "value3", "title": "Third Choice"},
        ]
        schema = {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "description": "Select one option", "enum": options},
                "titledSingle": {
                    "type": "string",
                    "description": "Select one option with titles",
                    "oneOf": titled,
                },
                "legacyEnum": {
                    "type": "string",
                    "description": "Select one option (legacy)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Select multiple options",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"type": "string", "enum": options},
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Select multiple options with titles",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"anyOf": titled_multi},
                },
            },
            "required": [],
        }
        message = "Please select options from the enum fields"
        return await _elicit(ctx, message, schema, "Elicitation completed")

    # ------------------------------------------------------------- resources
    @mcp.resource(
        "test://static-text",
        name="static-text",
        title="Static Text Resource",
        description="A static text resource for testing",
        mime_type="text/plain",
    )
    def static_text() -> str:
        return "This is the content of the static text resource."

    @mcp.resource(
        "test://static-binary",
        name="static-binary",
        title="Static Binary Resource",
        description="A static binary resource (image) for testing",
        mime_type="image/png",
    )
    def static_binary() -> bytes:
        return base64.b64decode(TEST_IMAGE_BASE64)

    @mcp.resource(
        "test://template/{id}/data",
        name="template",
        title="Resource Template",
        description="A resource template with parameter substitution",
        mime_type="application/json",
    )
    def template(id: str) -> str:
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @mcp.resource(
        "test://watched-resource",
        name="watched-resource",
        title="Watched Resource",
        description="A resource that can be subscribed to",
        mime_type="text/plain",
    )
    def watched_resource() -> str:
        return "Watched resource content"

    # --------------------------------------------------------------- prompts
    @mcp.prompt(title="Simple Test Prompt", description="A simple prompt without arguments")
    def test_simple_prompt() -> list[UserMessage]:
        return [UserMessage("This is a simple prompt for testing.")]

    @mcp.prompt(title="Prompt With Arguments", description="A prompt with required arguments")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]

    @mcp.prompt(
        title="Prompt With Embedded Resource", description="A prompt that includes an embedded resource"
    )
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
        return [
            UserMessage(_embedded(resourceUri, "text/plain", "Embedded resource content for testing.")),
            UserMessage("Please process the embedded resource above."),
        ]

    @mcp.prompt(title="Prompt With Image", description="A prompt that includes image content")
    def test_prompt_with_image() -> list[UserMessage]:
        return [UserMessage(_image()), UserMessage("Please analyze the image above.")]

    # ------------------------------------------------------------ completion
    @mcp.completion()
    async def complete(
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: types.CompletionArgument,
        context: types.CompletionContext | None,
    ) -> types.Completion:
        return types.Completion(values=[], total=0, has_more=False)

    # ---- handlers MCPServer has no public decorator for (SDK-documented escape hatch)
    async def subscribe(
        ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        subscriptions.add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        subscriptions.discard(str(params.uri))
        return types.EmptyResult()

    async def set_level(
        ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        logger.info("log level set to %s", params.level)
        return types.EmptyResult()

    add_task_tools(mcp)  # the `tasks-*` scenarios' fixtures (0.2.0-alpha.12)

    lowlevel = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    lowlevel.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)

    return mcp


def make_app(wrapped: bool) -> Any:
    """The ASGI app under test: the bare SDK app, or it wrapped by ``mcp_resume_asgi.resumable``.

    Stateful Streamable HTTP at ``/mcp``, SSE responses, DNS-rebinding protection for
    loopback (the SDK's default for host 127.0.0.1), no event store, no retry interval.
    """
    bare = build_server().streamable_http_app(streamable_http_path=MCP_PATH)
    if not wrapped:
        return bare
    import mcp_resume_asgi  # lazily: the bare server must work without the middleware

    policy = mcp_resume_asgi.Policy(retry_ms=WRAPPED_RETRY_MS, max_connection_s=WRAPPED_MAX_CONNECTION_S)
    # The Tasks extension for the `tasks-*` scenarios: which tools become tasks is per route.
    # The REST face too (it turns tasks on): the suite's MCP traffic must not notice it.
    routes = task_routes(WRAPPED_RETRY_MS)
    return mcp_resume_asgi.resumable(bare, policy=policy, routes=routes, rest=True)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=3001)
    parser.add_argument("--wrapped", action="store_true", help="serve behind mcp_resume_asgi.resumable")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    uvicorn.run(make_app(args.wrapped), host="127.0.0.1", port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
