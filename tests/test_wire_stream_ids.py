"""Stream ids (`wire/tokens.py: new_stream_id`), made ahead from one read of the OS's random
source: each one 22 URL-safe characters, none handed out twice, in any thread, nor by a forked
child after its parent."""

from __future__ import annotations

import os
import re
import sys
import threading

import pytest

from mcp_resume_asgi.wire import tokens
from mcp_resume_asgi.wire.tokens import IDS_PER_READ, new_stream_id

_ID = re.compile(r"[A-Za-z0-9_-]{22}")


def test_ids_are_url_safe_and_never_repeat_across_reads() -> None:
    ids = [new_stream_id() for _ in range(5 * IDS_PER_READ + 3)]
    assert all(_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_threads_taking_ids_at_once_never_share_one() -> None:
    tokens._ids.clear()  # (every thread starts on an empty supply: reads race too)
    taken: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def take(mine: list[str]) -> None:
        start.wait()
        for _ in range(3 * IDS_PER_READ):
            mine.append(new_stream_id())

    threads = [threading.Thread(target=take, args=(mine,)) for mine in taken]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads interleave as often as CPython lets them)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    every = [i for mine in taken for i in mine]
    assert len(every) == 8 * 3 * IDS_PER_READ and len(set(every)) == len(every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_does_not_hand_out_its_parents_ids() -> None:
    new_stream_id()  # (the supply is full: the ids made ahead are the parent's)
    ahead = list(tokens._ids)
    assert ahead
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first ids, to the parent
        try:
            os.write(write, ",".join(new_stream_id() for _ in range(3)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    assert len(child) == 3 and all(_ID.fullmatch(i) for i in child)
    assert not set(child) & set(ahead)
