"""What a task id carries (`tasks/operations.py`: `task_id_for`, `issued_task`), without an event loop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mcp_resume_asgi.tasks.operations import (
    IssuedTask,
    issued_task,
    owner_digest,
    stream_of_task,
    task_id_for,
)
from mcp_resume_asgi.tasks.record import TaskRecord
from mcp_resume_asgi.tasks.routing import MAX_TASK_ID
from mcp_resume_asgi.wire.tokens import TokenSigner, _CachedKeySigner

SECRET = "a-secret-shared-by-the-nodes"


def engine(secret: str = SECRET) -> Any:
    return SimpleNamespace(signer=TokenSigner(secret))


def record(principal: str | None = '["oauth","app","iss","alice"]') -> TaskRecord:
    return TaskRecord(
        "AbCdEfGhIjKlMnOpQrStUv", principal, 1_795_000_000.1239, 3_600_000, 500, "/mcp", "2026-07-28"
    )


def test_a_task_id_says_which_stream_when_its_ttl_ends_and_whose_without_saying_who() -> None:
    node = engine()
    task_id = task_id_for(node, record())
    assert len(task_id) <= MAX_TASK_ID and task_id.isascii()
    issued = issued_task(node, task_id)
    assert issued == IssuedTask(
        "AbCdEfGhIjKlMnOpQrStUv", 1_795_000_000_123, 3_600_000, owner_digest(node, record().principal)
    )
    assert issued.expires_at == 1_795_003_600.123
    assert "alice" not in task_id and issued.owner != owner_digest(node, '["oauth","app","iss","bob"]')
    assert owner_digest(node, None) != owner_digest(node, "null"), "anonymous is nobody's name"
    assert task_id_for(node, record()) == task_id, "the same task, the same id (a retry gets it again)"
    assert stream_of_task(node, task_id) == "AbCdEfGhIjKlMnOpQrStUv"


def test_ids_of_earlier_versions_still_resolve_and_forged_ones_do_not() -> None:
    node = engine()
    old = node.signer.sign("task", "AbCdEfGhIjKlMnOpQrStUv")
    assert issued_task(node, old) == IssuedTask("AbCdEfGhIjKlMnOpQrStUv")
    assert IssuedTask("x").expires_at is None
    task_id = task_id_for(node, record())
    assert issued_task(engine("another-secret-altogether"), task_id) is None
    assert issued_task(node, task_id[:-2] + "xx") is None
    for payload in (["s", -1, 5, "d"], ["s", 1, True, "d"], ["s", 1, 2], [1, 2, 3, "d"], {"s": 1}):
        assert issued_task(node, node.signer.sign("task", payload)) is None, payload


def test_an_id_minted_on_one_node_verifies_on_another_whatever_each_derived_first() -> None:
    """The owner digest's key is cached apart from the id's signing key (the key cache is by
    secret, salt, derivation and digest): a node that computed a digest first must not sign
    with another key."""
    _CachedKeySigner._keys.clear()
    minting = engine()
    owner_digest(minting, "alice")  # derived first on the minting node
    task_id = task_id_for(minting, record())
    _CachedKeySigner._keys.clear()  # another process
    assert stream_of_task(engine(), task_id) == "AbCdEfGhIjKlMnOpQrStUv"
