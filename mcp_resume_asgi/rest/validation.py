"""A REST tool call's arguments checked against the tool's `inputSchema`, as readable reasons.

`PUT /mcp/tools/{tool}/calls/{id}` carries the tool's arguments as its body. The face
checks them against the tool's `inputSchema` (JSON Schema; 2020-12 unless the schema's
`$schema` names another draft, as MCP says) *before* anything is created, so a bad
body is a `400` problem+json listing what is wrong - not a call record that fails
later, and not a run of the tool.

Why here and not only in the app: the app validates too, but its answer arrives as
a JSON-RPC error (or an `isError` result) after a durable call exists; a REST client
expects the request itself to be refused. The app stays the authority: where this
module cannot judge (a schema too large to compile, a schema that is not valid JSON
Schema, a `$ref` it will not resolve), it says nothing and lets the call reach the app.

Everything is bounded, because the arguments come from the network:
- schemas larger than `max_schema_bytes` are not compiled (no reasons: the app decides);
- arguments nested deeper than `max_depth` are refused before validation (a recursive
  schema over deep data would otherwise exhaust the interpreter's stack);
- at most `max_reasons` reasons are collected (validation stops there), each message
  at most `MAX_MESSAGE_CHARS` characters (a huge value is described, not echoed);
- `$ref`s resolve only inside the schema: remote references are never fetched
  (jsonschema's default would fetch them - a server-side request forgery).
The size of the body itself is the middleware's bound (it reads at most so many bytes).
Known gap: a `pattern` the app wrote with catastrophic backtracking runs on the
client's string as Python's `re` runs it.

`jsonschema` is an optional dependency (`pip install 'mcp-resume-asgi[rest]'`),
imported on first use; `require_jsonschema()` lets the middleware fail at start-up.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

logger = logging.getLogger(__name__)

#: Largest `inputSchema` (canonical JSON, bytes) compiled; a larger one is left to the app.
MAX_SCHEMA_BYTES = 256 * 1024
#: Most reasons reported for one body (validation stops collecting there).
MAX_REASONS = 16
#: Deepest arguments accepted (objects and arrays nested in one another).
MAX_DEPTH = 64
#: Longest message of one reason.
MAX_MESSAGE_CHARS = 300
#: Compiled validators kept (one per distinct schema).
CACHE_SIZE = 256

_MISSING = (
    "the REST face validates tool arguments with jsonschema, which is not installed: "
    "pip install 'mcp-resume-asgi[rest]'"
)


def require_jsonschema() -> Any:
    """The `jsonschema` module, or an ImportError naming the extra that installs it."""
    try:
        return importlib.import_module("jsonschema")
    except ImportError as exc:
        raise ImportError(_MISSING) from exc


@dataclass(frozen=True, slots=True)
class Reason:
    """One thing wrong with the arguments: where (a JSON Pointer into the body) and what."""

    pointer: str
    """RFC 6901 JSON Pointer into the arguments object; "" is the whole body."""
    detail: str

    def as_json(self) -> dict[str, str]:
        """The member of a problem's `errors` list, as RFC 9457's example spells it."""
        return {"pointer": "#" + self.pointer, "detail": self.detail}


def pointer_of(path: Any) -> str:
    """The JSON Pointer of a path of keys and indexes (`["a", 0, "b/c"]` -> `/a/0/b~1c`)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


class ArgumentsValidator:
    """Validates tool arguments against tool input schemas, with compiled validators cached."""

    def __init__(
        self,
        *,
        max_schema_bytes: int = MAX_SCHEMA_BYTES,
        max_reasons: int = MAX_REASONS,
        max_depth: int = MAX_DEPTH,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        if max_schema_bytes < 1 or max_reasons < 1 or max_depth < 1 or cache_size < 1:
            raise ValueError("the validation bounds must be positive")
        self.max_schema_bytes = max_schema_bytes
        self.max_reasons = max_reasons
        self.max_depth = max_depth
        # digest of the schema's canonical JSON -> compiled validator, or None when the
        # schema cannot be used (too large, invalid): remembered so it is judged once.
        self._compiled: LRUCache[str, Any] = LRUCache(maxsize=cache_size)

    def reasons(self, schema: Any, arguments: Any) -> list[Reason]:
        """What is wrong with `arguments` for a tool whose `inputSchema` is `schema`; [] when fine.

        [] also when the schema cannot be judged here (see the module docstring): the
        call then goes to the app, which validates it its own way.
        """
        if not isinstance(arguments, dict):
            return [Reason("", "the body must be a JSON object: the tool's arguments")]
        if _depth_exceeds(arguments, self.max_depth):
            return [Reason("", f"the arguments are nested deeper than {self.max_depth} levels")]
        validator = self._validator(schema)
        if validator is None:
            return []
        found: list[Reason] = []
        try:
            for error in validator.iter_errors(arguments):
                found.append(_reason(error))
                if len(found) >= self.max_reasons:
                    break
        except RecursionError:
            return [Reason("", "the arguments are too deeply nested for the tool's schema")]
        except Exception as exc:  # an unresolvable $ref met during validation, a bad regex...
            logger.warning("tool input schema could not be applied (%s); the app will judge", exc)
            return []
        found.sort(key=lambda r: r.pointer)
        return found

    def _validator(self, schema: Any) -> Any:
        if not isinstance(schema, dict | bool):
            return None
        try:
            text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return None
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        try:
            return self._compiled[digest]
        except KeyError:
            pass
        compiled = self._compile(schema, len(text.encode("utf-8", "surrogatepass")))
        self._compiled[digest] = compiled
        return compiled

    def _compile(self, schema: dict[str, Any] | bool, size: int) -> Any:
        if size > self.max_schema_bytes:
            logger.warning(
                "tool input schema of %d bytes not compiled (max_schema_bytes=%d); the app will judge",
                size,
                self.max_schema_bytes,
            )
            return None
        jsonschema = require_jsonschema()
        referencing = importlib.import_module("referencing")
        cls = _validator_class(jsonschema, schema)
        try:
            cls.check_schema(schema)
        except Exception as exc:  # SchemaError, or RecursionError on a pathological schema
            logger.warning("tool input schema is not valid JSON Schema (%s); the app will judge", exc)
            return None
        # An empty registry: `$ref`s resolve within the schema only, nothing is fetched.
        return cls(schema, registry=referencing.Registry())


_DEFAULT = ArgumentsValidator()


def validate_arguments(schema: Any, arguments: Any) -> list[Reason]:
    """`ArgumentsValidator().reasons` with the default bounds and a process-wide cache."""
    return _DEFAULT.reasons(schema, arguments)


def _validator_class(jsonschema: Any, schema: dict[str, Any] | bool) -> Any:
    """The draft the schema's `$schema` names (2020-12 when none or an unknown one)."""
    default = jsonschema.Draft202012Validator
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(declared, str):
        return default
    drafts = (
        jsonschema.Draft202012Validator,
        jsonschema.Draft201909Validator,
        jsonschema.Draft7Validator,
        jsonschema.Draft6Validator,
        jsonschema.Draft4Validator,
    )
    wanted = declared.rstrip("#")
    for cls in drafts:
        if str(cls.META_SCHEMA.get("$id", cls.META_SCHEMA.get("id", ""))).rstrip("#") == wanted:
            return cls
    return default


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests objects/arrays deeper than `limit` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _reason(error: Any) -> Reason:
    return Reason(pointer_of(error.absolute_path), _message(error))


def _message(error: Any) -> str:
    """jsonschema's message, made readable: alternatives spelled out, huge values described."""
    message = str(error.message)
    if error.validator in ("anyOf", "oneOf") and error.context:
        same_place = [e for e in error.context if not e.relative_path]
        types = [e.validator_value for e in same_place if e.validator == "type"]
        if same_place and len(types) == len(same_place):
            names = ", ".join(repr(t) for t in types[:6])
            message = f"{_short(error.instance)} is not of type {names}"
        elif same_place:
            alternatives = "; or ".join(_shorten(str(e.message), e.instance) for e in same_place[:3])
            message = f"{_short(error.instance)} matches none of the allowed forms: {alternatives}"
    return _shorten(message, error.instance)[:MAX_MESSAGE_CHARS]


def _short(value: Any) -> str:
    """`repr(value)` when short, else a description of it (its kind and length)."""
    if not _large(value):
        text = repr(value)
        if len(text) <= 60:
            return text
    if isinstance(value, dict):
        return f"an object of length {len(value)}"
    if isinstance(value, list):
        return f"an array of length {len(value)}"
    if isinstance(value, str):
        return f"a string of length {len(value)}"
    return f"a value of type {type(value).__name__}"


def _large(value: Any) -> bool:
    return isinstance(value, dict | list | str) and len(value) > 40


def _shorten(message: str, instance: Any) -> str:
    """Replace the echo of a large instance in jsonschema's message by a description of it."""
    if len(message) <= MAX_MESSAGE_CHARS // 2 or not _large(instance):
        return message
    try:
        full = repr(instance)
    except RecursionError:
        return _short(instance)
    return message.replace(full, _short(instance))
