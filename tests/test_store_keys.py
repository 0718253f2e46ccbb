"""Every store key format, pinned to the exact text the previous versions wrote.

A key named differently by a new version is data the old one wrote (a running stream's
standalone GET, a task's record, a REST call, a spent resume token...) that the new one no
longer finds: during a rolling upgrade on a shared store, or after a restart on Redis. So
each format of `store/keys.py` is checked against literal strings, digests included,
taken from the code before the formats moved there.
"""

from __future__ import annotations

from mcp_resume_asgi.rest import calls
from mcp_resume_asgi.store import keys
from mcp_resume_asgi.tasks import limits, stored


def test_the_engine_keys() -> None:
    assert keys.idempotency("sess-1", "alice", "k-1") == "idem:sess-1:k-1"
    assert keys.idempotency(None, "alice", "k-1") == "idem:alice:k-1"
    assert keys.idempotency(None, None, "k-1") == "idem:-:k-1"
    assert keys.idempotency("", "", "k-1") == "idem:-:k-1", "an empty session or principal is none"
    assert keys.standalone("sess-1") == "standalone:sess-1"
    assert keys.client_answer("sess-1", 1) == "input:sess-1:1"
    assert keys.client_answer("sess-1", "1") == 'input:sess-1:"1"'
    assert keys.client_answer("sess-1", "é") == 'input:sess-1:"\\u00e9"'
    assert keys.rerun_request("s1") == "rerun-request:s1"
    assert keys.rerun_claim("s1", 0) == "rerun-claim:s1:0"
    assert keys.RUNNING_INDEX == "running"


def test_the_cluster_keys() -> None:
    assert keys.node("a1b2c3") == "node:a1b2c3"
    assert keys.nodes_index() == "nodes"
    assert keys.session_owner("sess-1") == "owner:sess-1"
    assert keys.session_record("sess-1") == "session-record:sess-1"
    assert keys.session_adoption("sess-1", "a1b2c3") == "session-adoption:sess-1:a1b2c3"


def test_a_cancel_binding() -> None:
    assert (
        keys.cancel_binding("/mcp", "alice", 7, None)
        == "cancel:ae784099e32085ee895fd35cfcefe305504d6b9446a7d7bd320deb6d4e067ac9"
    )
    assert (
        keys.cancel_binding("/mcp", None, "7", "k-1")
        == "cancel:5082d7fb287999e7c71418108caea0a6bc8121f37b49a4ec80337af45f4c4338"
    )
    assert keys.cancel_binding("/mcp", None, 7, None) is None, "anonymous and keyless: no binding"
    assert keys.CANCEL_BINDING_PREFIX == "cancel:"


def test_the_resume_token_key() -> None:
    assert keys.resume_token_spent("s1") == "resume-token-spent:s1"


def test_the_task_keys() -> None:
    assert keys.task_record("s1") == "task:s1"
    assert keys.task_answer("s1", "2/ask") == "task-answer:s1:2/ask"
    assert keys.task_round("s1", 2) == "task-round:s1:2"
    assert keys.task_index(None) == keys.ANONYMOUS_TASK_INDEX == "tasks:anonymous"
    assert keys.task_index("alice") == "tasks:2bd806c97f0e00af1a1fc3328fa763a9"
    assert keys.task_index("\udc80") == "tasks:37098e13faf72a017554139530f245f9"


def test_the_rest_keys() -> None:
    alice, anyone, tool = (
        "0a50500b2a3435fe7472877eb22d48d4",
        "74234e98afe7498fb5daf1f36ac2d78a",
        "2cce4a684da298d953ede42c",
    )
    member = "0b9cf8425cdbbc6264610862e4e91670"
    assert keys.rest_call("alice", "echo", "c-1") == f"rest:{alice}:{tool}:{member}"
    assert keys.rest_call(None, "echo", "c-1") == f"rest:{anyone}:{tool}:{member}"
    assert keys.rest_calls_index("alice", "echo") == f"rest-calls:{alice}:{tool}"
    assert keys.rest_calls_index(None, "echo") == f"rest-calls:{anyone}:{tool}"
    assert keys.rest_call_member("c-1") == member
    assert keys.rest_call_of_member("alice", "echo", member) == keys.rest_call("alice", "echo", "c-1")
    call = keys.rest_call("alice", "echo", "c-1")
    assert keys.rest_cancel(call) == f"{call}:cancel"
    assert keys.rest_store_mark() == "rest-store-mark"
    assert keys.rest_advance(call, "W/1", "0/k") == f"{call}:advance:W/1:a7146bf7ccf5e3e0"
    assert keys.rest_advance(call, "W/1", "1/k") != keys.rest_advance(call, "W/1", "0/k")
    assert keys.is_rest_call_member(member)
    assert not keys.is_rest_call_member(member.upper()) and not keys.is_rest_call_member(member + "0")


def test_no_two_formats_share_a_prefix() -> None:
    """A key of one kind can never be read as another's: each format has its own first segment
    (REST's cancel and advance keys extend their call's key on purpose)."""
    stored_keys = [
        keys.idempotency("s", None, "k"),
        keys.standalone("s"),
        keys.client_answer("s", 1),
        keys.rerun_request("s"),
        keys.rerun_claim("s", 0),
        keys.node("n"),
        keys.session_owner("s"),
        keys.resume_token_spent("s"),
        keys.task_record("s"),
        keys.task_answer("s", "k"),
        keys.task_round("s", 1),
        keys.rest_call(None, "t", "c"),
        keys.rest_store_mark(),
    ]
    indexes = [
        keys.cancel_binding("/", "p", 1, None) or "",
        keys.task_index("p"),
        keys.rest_calls_index(None, "t"),
        keys.nodes_index(),
    ]
    for names in (stored_keys, indexes):
        firsts = [name.split(":", 1)[0] for name in names]
        assert len(set(firsts)) == len(firsts), firsts


def test_the_old_names_build_the_same_keys() -> None:
    """Modules and tests that import the formats from where they were get the same functions."""
    assert calls.call_key is keys.rest_call
    assert calls.index_name is keys.rest_calls_index
    assert calls.index_member is keys.rest_call_member
    assert stored.task_key is keys.task_record
    assert limits.index_of is keys.task_index and limits.ANONYMOUS_INDEX == keys.ANONYMOUS_TASK_INDEX


def test_placement_on_a_sharded_store_keeps_a_task_with_its_stream() -> None:
    """`keys.placed_by` (where a key is kept on Redis Cluster) changes no name; a task's
    record goes with its stream, which `read_key_and_stream` reads with it in one step."""
    assert keys.placed_by(keys.task_record("s-1")) == "s-1"
    assert keys.placed_by(keys.session_owner("sess-1")) == "owner:sess-1"
    assert keys.placed_by(keys.task_answer("s-1", "0/k")) == "task-answer:s-1:0/k"
