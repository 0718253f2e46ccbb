"""The REST face (SEP-1597): any MCP app's tools, prompts and resources as HTTP resources.

`routes.py` maps HTTP methods and paths to operations, `problems.py` words failures
(RFC 9457), `resource.py` is the tool-call resource with its ETag and conditional
rules, `calls.py` a call's record in the store, `mcp_client.py` the MCP client that reaches
the app through the wrapped stack, `tool_calls.py` and `listing.py` the call
operations, `validation.py` and `openapi.py` the input-schema check and the OpenAPI
document (`openapi_documents.py` serves it, built once per tools list, with
`single_flight.py`), `json_text.py` the JSON the face takes and writes (never text or
numbers no wire carries), and `middleware.py` the ASGI layer that ties them together.
"""
