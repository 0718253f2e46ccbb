"""JSON as the REST face reads it from clients and from the app, and as it writes it.

Python's `json` module takes more than JSON (RFC 8259) and can give back what no wire
carries: `NaN`, `Infinity` and `-Infinity` (and `1e999`, which becomes infinity), a
lone surrogate (`"\\ud800"`, or its raw bytes) that has no UTF-8 form, nesting that
breaks the encoder. A value holding one of those fails later - when it is written to
Redis, sent to the app, or answered - as a 500, after a record was made or a claim
taken. So each source has its rule, applied where the text comes in (sans-IO):

* a client's text (`parse_client`): refused as a whole (`NotAcceptedJSON`, a 400 the
  route words) unless it is UTF-8 JSON without those;
* the app's text (`parse_app`): taken as a browser would show it - each non-finite
  number `null` (what `JSON.stringify` writes), each lone surrogate U+FFFD - as the
  face only passes it on and must not fail on it;
* what the face writes (`dumps`): standard JSON in UTF-8, whatever the value holds
  (the same repair as `parse_app`, never an exception).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from mcp_resume_asgi.wire.jsonrpc import MAX_DEPTH
from mcp_resume_asgi.wire.jsonrpc import nesting_depth as depth_of

#: A JSON escape of a UTF-16 surrogate (paired or not: only then is the value walked).
_SURROGATE_ESCAPE = re.compile(r"\\[uU][dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONSTANTS = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}


class NotAcceptedJSON(ValueError):
    """A client's text the face does not take; `detail` says why, for the problem."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def parse_client(data: bytes) -> Any:
    """A client's JSON text: UTF-8, standard numbers, no lone surrogate, at most `MAX_DEPTH` deep."""
    try:
        text = data.decode("utf-8")  # strict: a surrogate's raw bytes are not UTF-8
    except UnicodeDecodeError:
        raise NotAcceptedJSON("the body is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except NotAcceptedJSON:
        raise
    except RecursionError:
        raise NotAcceptedJSON(f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise NotAcceptedJSON("the body is not JSON") from None
    if text.count("[") + text.count("{") > MAX_DEPTH and depth_of(value) > MAX_DEPTH:
        raise NotAcceptedJSON(f"the body nests deeper than {MAX_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(text) is not None and _has_lone_surrogate(value):
        raise NotAcceptedJSON("the body holds a lone surrogate (such as \\ud800): text with no UTF-8 form")
    return value


def parse_app(data: bytes) -> Any:
    """The app's JSON text, repaired where it holds what the face cannot pass on (`ValueError`,
    `RecursionError` when it is not JSON at all)."""
    text = data.decode("utf-8", "replace")
    value = json.loads(text, parse_constant=lambda _: None, parse_float=_float_or_none)
    if _SURROGATE_ESCAPE.search(text) is not None:
        value = repaired(value)
    return value


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """`value` as standard JSON in UTF-8 (repaired first when it holds what JSON cannot say)."""
    try:
        text = json.dumps(
            value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=sort_keys
        )
        return text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        text = json.dumps(repaired(value), separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
        return text.encode("utf-8")


def repaired(value: Any) -> Any:
    """A copy of `value` with every non-finite number `None` and every lone surrogate U+FFFD
    (iteratively: the value may nest deeper than the stack allows)."""
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, at = stack.pop()
        item = container[at]
        if isinstance(item, str):
            container[at] = _SURROGATE.sub("\ufffd", item)
        elif isinstance(item, float) and not math.isfinite(item):
            container[at] = None
        elif isinstance(item, dict):
            copied = {(_SURROGATE.sub("\ufffd", k) if isinstance(k, str) else k): v for k, v in item.items()}
            container[at] = copied
            stack.extend((copied, key) for key in copied)
        elif isinstance(item, list | tuple):
            items = list(item)
            container[at] = items
            stack.extend((items, index) for index in range(len(items)))
    return root[0]


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:  # (a valid pair was decoded to one character)
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _refuse_constant(name: str) -> Any:
    raise NotAcceptedJSON(f"the body holds {_CONSTANTS.get(name, name)}, which is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NotAcceptedJSON(f"the body holds {text[:32]}, a number too large for a double")
    return number


def _float_or_none(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None
