"""The Tasks extension (SEP-2663) for the stock `mcp` SDK client (>= 2.3): :func:`sdk_tasks_extension`.

Why an SDK extension and not more transport magic: the SDK's ``Client`` has a plug
point made for this - a ``ClientExtension`` whose result claim on ``resultType:
"task"`` turns the claimed result into the ``CallToolResult`` that ``call_tool``
returns. Declaring the extension, stamping it into every request's capabilities
(2026-07-28) and dispatching input requests to the client's own elicitation and
sampling callbacks are the SDK's; the polling is the same driver as
``ResumableSession``'s (`tasks.py`), so both clients follow a task alike::

    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_resume_asgi.client import sdk_http_client, sdk_tasks_extension

    async with (
        sdk_http_client() as http,
        Client(
            streamable_http_client(url, http_client=http),
            extensions=[sdk_tasks_extension()],
            elicitation_callback=ask_the_user,
        ) as client,
    ):
        result = await client.call_tool("generate_report", {...})  # a CallToolResult, task or not

The SDK advertises a result-claiming extension only on the protocol revisions where
claims exist (2026-07-28 on): a client in legacy mode declares nothing, and the
server never answers it with a task. A task that fails raises the SDK's
``MCPError``; one the server cancelled, :class:`TaskCancelled`; cancelling the
``call_tool`` sends ``tasks/cancel``.

``mcp`` is imported only when :func:`sdk_tasks_extension` is called.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

from .errors import McpError
from .tasks import TASK_RESULT_TYPE, TASKS_EXTENSION, JSONObject, TaskPolling, drive_task

if TYPE_CHECKING:
    from mcp.client.extension import ClientExtension

#: `CONNECTION_CLOSED` of `mcp_types.jsonrpc`: the SDK's word for a request whose exchange broke.
_CONNECTION_CLOSED = -32000


def sdk_tasks_extension(polling: TaskPolling | None = None) -> ClientExtension:
    """A ``ClientExtension`` for ``mcp.client.Client(extensions=[...])`` that follows tasks to their result."""
    extension: ClientExtension = _extension_class()(polling or TaskPolling())
    return extension


@functools.cache
def _extension_class() -> Any:
    """Build the classes on first use, so importing this module needs no `mcp`."""
    import mcp_types as types
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp.client.session import ClientRequestContext
    from mcp.shared.exceptions import MCPError
    from pydantic import BaseModel, ConfigDict, TypeAdapter
    from pydantic.alias_generators import to_camel

    class CreateTaskResult(types.Result):
        """The task handle as the SDK parses it; every other field is kept as sent."""

        model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)
        result_type: Literal["task"]
        task_id: str

    class TaskParams(types.RequestParams):
        model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)
        task_id: str
        input_responses: dict[str, Any] | None = None

    class TaskRequest(types.Request[TaskParams, str]):
        name_param = "taskId"  # Mcp-Name: the task id, as Streamable HTTP requires for tasks/*

    class AnyResult(BaseModel):
        model_config = ConfigDict(extra="allow")

    input_request: TypeAdapter[Any] = TypeAdapter(types.InputRequest)

    class SdkTasksExtension(ClientExtension):
        identifier = TASKS_EXTENSION

        def __init__(self, polling: TaskPolling) -> None:
            self.polling = polling

        def claims(self) -> list[ResultClaim[Any]]:
            return [ResultClaim(result_type=TASK_RESULT_TYPE, model=CreateTaskResult, resolve=self.resolve)]

        async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
            session = ctx.session

            async def send(method: str, params: JSONObject) -> JSONObject:
                request = TaskRequest(method=method, params=TaskParams.model_validate(params))
                answer = await session.send_request(request, AnyResult, ctx.read_timeout_seconds)
                return answer.model_dump()

            async def answer_input(key: str, method: str, params: JSONObject) -> JSONObject:
                request = input_request.validate_python({"method": method, "params": params}, by_name=False)
                meta = request.params.meta if request.params is not None else None
                context = ClientRequestContext(session=session, request_id=key, meta=meta)
                response = await session.dispatch_input_request(context, request)
                if isinstance(response, types.ErrorData):
                    raise MCPError.from_error_data(response)
                dumped: JSONObject = response.model_dump(by_alias=True, mode="json", exclude_none=True)
                return dumped

            try:
                result = await drive_task(
                    created.model_dump(by_alias=True, mode="json", exclude_none=True),
                    send=send,
                    answer_input=answer_input,
                    transient=lambda exc: isinstance(exc, MCPError) and exc.code == _CONNECTION_CLOSED,
                    polling=self.polling,
                )
            except McpError as exc:  # the task failed: report it the way the SDK reports errors
                raise MCPError(exc.code, exc.message, exc.data) from exc
            return types.CallToolResult.model_validate(result, by_name=False)

    return SdkTasksExtension
