"""Every name the library gives a store key, index or channel, in one place.

The store holds keys written by every part of the library (the engine, the cluster, the
Tasks and REST faces, the features), side by side in one namespace. Here is each format:
to see at a glance that no two collide, and to change none by accident - a key a new
version names differently is data the old version wrote that the new one no longer finds
(`tests/test_store_keys.py` pins each format to its exact text).

Keys (`Store.set_key` and the rest) and indexes (`Store.index_add` and the rest) are
separate namespaces in every store; a node's key is also the name of its pub/sub channel.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

# -- the engine ----------------------------------------------------------------------------


def idempotency(session_id: str | None, principal: str | None, key: str) -> str:
    """A request's `Idempotency-Key`, scoped to its session, else its principal, else to
    nobody (`-`); its value is the stream of the first request carrying it (`engine/retried_posts`)."""
    return f"idem:{session_id or principal or '-'}:{key}"


def standalone(session_id: str) -> str:
    """The stream of a session's standalone GET (its value: the stream id)."""
    return f"standalone:{session_id}"


def client_answer(session_id: str, message_id: Any) -> str:
    """The stream waiting for the client's answer to the request `message_id` the app sent it
    in `session_id` (sampling, elicitation: `http/client_answers`); the id as JSON, so `1` and
    `"1"` are different keys."""
    return f"input:{session_id}:{json.dumps(message_id)}"


def rerun_request(stream_id: str) -> str:
    """The request of a running call on a route with `rerun_on_loss` (`engine/rerun.py`): what
    another node runs again when the call's node is lost; deleted once the call is answered."""
    return f"rerun-request:{stream_id}"


#: The index of the requests whose stream runs on some node now (`engine/sweep.py` reads it): a
#: member is added when a request's record opens without its answer and taken out when its app's
#: end is recorded, so what a lost node left running is found there.
RUNNING_INDEX = "running"


def rerun_claim(stream_id: str, round_: int) -> str:
    """Taken (`add_key`) by the one node that runs the stream's request again after its
    `round_`-th loss (0: the first run's node was lost)."""
    return f"rerun-claim:{stream_id}:{round_}"


# -- the cluster ---------------------------------------------------------------------------


def node(node_id: str) -> str:
    """A node's heartbeat key (present while it lives) and the channel it listens on."""
    return f"node:{node_id}"


def nodes_index() -> str:
    """The nodes that may serve clients now (an index: each member a node id, expiring with its
    heartbeat; a draining node takes itself out)."""
    return "nodes"


def session_owner(session_id: str) -> str:
    """The node holding a session (its value: the node id)."""
    return f"owner:{session_id}"


def session_record(session_id: str) -> str:
    """What makes a session, sealed, for a node that takes it over (`wire/session_record.py`)."""
    return f"session-record:{session_id}"


def session_adoption(session_id: str, lost: str) -> str:
    """Taken (`add_key`) by the one node that takes the session over from node `lost`, which
    held it and is gone (its value: the adopting node's id)."""
    return f"session-adoption:{session_id}:{lost}"


# -- cancel notices ------------------------------------------------------------------------

#: The start of every cancel binding's index name (`cancel_binding`).
CANCEL_BINDING_PREFIX = "cancel:"


def cancel_binding(path: str, principal: str | None, request_id: Any, key: str | None) -> str | None:
    """The store index of the running requests a notice from `principal` on `path` naming
    `request_id` (with the `Idempotency-Key` `key`, if any) may cancel. None: an anonymous
    request without a key, which no notice may cancel (`cancel_notices`' module docstring)."""
    if principal is None and key is None:
        return None
    named_by = json.dumps([path, principal, request_id, key], separators=(",", ":"))
    return CANCEL_BINDING_PREFIX + hashlib.sha256(named_by.encode()).hexdigest()


# -- resume tokens -------------------------------------------------------------------------


def resume_token_spent(stream_id: str) -> str:
    """Set once a `requests/resume` token's stream was served to its end: it is not served twice."""
    return f"resume-token-spent:{stream_id}"


# -- Tasks ---------------------------------------------------------------------------------


def task_record(stream_id: str) -> str:
    """A task's record, under the stream of its first round (`tasks/stored`)."""
    return f"task:{stream_id}"


def task_answer(origin: str, key: str) -> str:
    """The client's answer to input request `key` (`<round>/<app's key>`) of the task whose
    first stream is `origin`: taken by the first `tasks/update` that writes it."""
    return f"task-answer:{origin}:{key}"


def task_round(origin: str, round_: int) -> str:
    """Claimed by the one `tasks/update` that issues the round after `round_` (the others stop)."""
    return f"task-round:{origin}:{round_}"


#: The index of the tasks of the anonymous principal (`task_index(None)`).
ANONYMOUS_TASK_INDEX = "tasks:anonymous"


def task_index(principal: str | None) -> str:
    """The store index of a principal's tasks: a digest, so any principal fits the index's
    name bound and none is written out in the store's key names."""
    if principal is None:
        return ANONYMOUS_TASK_INDEX
    return "tasks:" + hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32]


# -- the REST face -------------------------------------------------------------------------

#: An index member of a REST call (`rest_call_member`): a call id's digest.
_REST_MEMBER = re.compile(r"[0-9a-f]{32}")


def _digest(value: str | None, size: int = 32) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:size]


def rest_call(principal: str | None, tool: str, call_id: str) -> str:
    """A REST call's record: digests, so any name fits a key and another principal's call of
    the same id is another key."""
    return f"rest:{_digest(principal)}:{_digest(tool, 24)}:{_digest(call_id)}"


def rest_calls_index(principal: str | None, tool: str) -> str:
    """The caller's calls of `tool`: members are call digests, ordered by expiry."""
    return f"rest-calls:{_digest(principal)}:{_digest(tool, 24)}"


def rest_call_member(call_id: str) -> str:
    """A call's member in `rest_calls_index`."""
    return _digest(call_id)


def is_rest_call_member(text: str) -> bool:
    """Whether `text` is what `rest_call_member` gives (a listing cursor must name one)."""
    return _REST_MEMBER.fullmatch(text) is not None


def rest_call_of_member(principal: str | None, tool: str, member: str) -> str:
    """The record of the call whose member of `rest_calls_index` is `member`: `rest_call`'s key."""
    return f"rest:{_digest(principal)}:{_digest(tool, 24)}:{member}"


def rest_store_mark() -> str:
    """The REST face's mark of the store (`rest/store_mark`): a random id, which a store that
    lost what it held no longer has, and when a node found that out."""
    return "rest-store-mark"


def rest_cancel(call_key: str) -> str:
    """Set when a cancel arrives before the call's task exists (its PUT then cancels it)."""
    return f"{call_key}:cancel"


def rest_advance(call_key: str, etag: str, input_key: str) -> str:
    """Claimed by the one `advance` that answers input request `input_key` (the task's
    `<round>/<app's key>`) in the state `etag` (the others get 412).

    The input key is named because the ETag is not enough: it digests what the resource
    shows, the question and not its key, so a question asked twice (two requests of one
    round, or again in a later round) makes two states with one ETag. A digest, so any
    key fits. (A claim without the digest, `<call>:advance:<etag>`, is not read: it expires with
    its call's record.)"""
    return f"{call_key}:advance:{etag}:{_digest(input_key, 16)}"


# -- placement on a sharded store ----------------------------------------------------------


def placed_by(key: str) -> str:
    """What decides where a key (`Store.set_key`'s name) is kept on a sharded store (Redis
    Cluster): a task's record goes with its stream, which `Store.read_key_and_stream` reads
    together with it in one step; any other key by itself. The key's name is unchanged."""
    if key.startswith("task:"):
        return key.removeprefix("task:")
    return key
