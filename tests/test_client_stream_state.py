"""The decisions of one resumed stream on the client side (`client/stream_state.py`, `client/answers.py`).

No server and no event loop: events and answers go in, what to emit, where to
resume and when to give up come out. The same rules against a scripted server
over real HTTP are in tests/test_client_transport.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mcp_resume_asgi.client.answers import AnswerBuffer, answers_body
from mcp_resume_asgi.client.errors import GiveUp
from mcp_resume_asgi.client.resumable_requests import TokenBook
from mcp_resume_asgi.client.sse_reader import SSEEvent, SSEParser
from mcp_resume_asgi.client.stream_state import (
    DEDUP_WINDOW,
    MAX_EVENT_ID_LENGTH,
    Refused,
    Resume,
    StreamState,
    check_status,
    is_continuation,
)

MCP = httpx.URL("http://127.0.0.1:1/mcp")
LINK = httpx.URL("http://127.0.0.1:1/streams/abc")


@dataclass
class Limits:
    default_retry_ms: int = 1000
    max_retry_ms: int = 30_000
    max_attempts: int = 3
    flush_after_s: float = 1.0
    max_pending_requests: int = 4
    reconnect_s: float = 60.0


def state(link: httpx.URL | None = None, tokens: TokenBook | None = None, **limits: Any) -> StreamState:
    headers = [
        (b"mcp-session-id", b"s"),
        (b"authorization", b"Bearer t"),
        (b"content-length", b"42"),
        (b"accept", b"application/json"),
        (b"last-event-id", b"stale"),
    ]
    return StreamState(
        Limits(**limits),
        mcp_url=MCP,
        session_id="s",
        request_id=1,
        request_headers=headers,
        link=link,
        tokens=tokens if tokens is not None else TokenBook(),
    )


def event(
    data: Any = None, id: str | None = None, retry: int | None = None, name: str | None = None
) -> SSEEvent:
    text = data if isinstance(data, str) or data is None else json.dumps(data)
    return SSEEvent(data=text or "", id=id, event=name, retry=retry)


def result(request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {}}


def server_request(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create", "params": {}}


# -- events in ----------------------------------------------------------------------------------------


def test_events_are_reemitted_and_replays_dropped() -> None:
    s = state()
    emitted, final = s.receive_event(event({"jsonrpc": "2.0", "method": "notifications/progress"}, id="e1"))
    assert not final
    [again] = list(SSEParser(1 << 16).feed(emitted or b""))
    assert again.id == "e1" and json.loads(again.data)["method"] == "notifications/progress"
    assert s.receive_event(event({"x": 1}, id="e1")) == (None, False)
    assert s.last_event_id == "e1" and s.new_events == 1


def test_priming_events_move_the_cursor_and_set_the_retry_but_emit_nothing() -> None:
    s = state()
    assert s.receive_event(event(id="p0", retry=250)) == (None, False)
    assert (s.last_event_id, s.retry_ms) == ("p0", 250)
    s.receive_event(event(id=""))
    assert s.last_event_id is None  # an empty id resets it, as the SSE spec says


def test_only_the_response_to_our_own_request_id_ends_the_stream() -> None:
    s = state()
    assert not s.receive_event(event(result("1"), id="a"))[1]
    assert not s.receive_event(event(result(2), id="b"))[1]
    assert not s.receive_event(event(result(1), id="c", name="other"))[1]  # not a message event
    assert s.receive_event(event([result(2), result(1)], id="d"))[1]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (event("{not json", id="x"), "not JSON"),
        (event("{}", id="x" * (MAX_EVENT_ID_LENGTH + 1)), "event id longer"),
        (event("[" * 100_000 + "]" * 100_000, id="deep"), "not JSON"),
    ],
)
def test_hostile_events_end_the_stream(bad: SSEEvent, why: str) -> None:
    with pytest.raises(GiveUp, match=why):
        state().receive_event(bad)


def test_the_replay_window_is_bounded() -> None:
    s = state()
    for n in range(DEDUP_WINDOW + 1):
        s.receive_event(event(id=f"e{n}"))
    assert s.receive_event(event({"m": 1}, id="e0"))[0] is not None  # forgotten: passed on again
    assert s.receive_event(event({"m": 1}, id=f"e{DEDUP_WINDOW}"))[0] is None


def test_a_json_answer_is_reemitted_as_message_events_up_to_our_response() -> None:
    s = state()
    body = json.dumps([{"jsonrpc": "2.0", "method": "notifications/message"}, result(1), result(2)]).encode()
    out, final = s.receive_json(body)
    events = list(SSEParser(1 << 16).feed(out))
    assert final and [json.loads(e.data).get("id") for e in events] == [None, 1]
    assert all(e.event == "message" and e.id is None for e in events)
    with pytest.raises(GiveUp, match="malformed JSON"):
        s.receive_json(b"{")
    with pytest.raises(GiveUp, match="not a JSON-RPC message"):
        s.receive_json(b"[1]")


def test_a_resume_policy_for_this_request_gives_it_a_token_the_transport_remembers() -> None:
    tokens = TokenBook()
    s = state(tokens=tokens)
    policy = {
        "method": "notifications/requests/resumePolicy",
        "params": {"requestId": 1, "resumeToken": "t1"},
    }
    emitted, final = s.receive_event(event(policy, id="e1"))
    assert emitted is not None and not final
    assert s.resume_token == "t1" and len(tokens) == 1
    request = tokens.status_request(MCP, 1, "s")
    assert request.headers["authorization"] == "Bearer t"
    assert "last-event-id" not in request.headers and request.headers["content-length"] != "42"


# -- server requests and the application's answers -----------------------------------------------------


def test_server_requests_are_awaited_only_on_a_stream_with_a_link() -> None:
    without = state()
    without.receive_event(event(server_request("q"), id="e1"))
    assert len(without.answers) == 0
    with_link = state(LINK)
    with_link.receive_event(event(server_request("q"), id="e1"))
    assert with_link.answers.awaits(("s", "q")) and not with_link.answers.awaits(("s", "other"))


def test_too_many_unanswered_server_requests_end_the_stream() -> None:
    s = state(LINK, max_pending_requests=2)
    s.receive_message(server_request(1))
    s.receive_message(server_request(1))  # the same request again is not another one
    s.receive_message(server_request(2))
    with pytest.raises(GiveUp, match="too many"):
        s.receive_message(server_request(3))


def test_answers_are_flushed_once_all_are_in_and_the_server_kept_the_stream_open() -> None:
    s = state(LINK, flush_after_s=0.5)
    s.receive_message(server_request(1))
    s.receive_message(server_request(2))
    assert not s.answers.capture(("i", 1), result(1), now=10.0)
    assert s.flush_deadline() is None
    assert s.answers.capture(("i", 2), result(2), now=11.0)
    assert s.flush_deadline() == 11.5
    s.receive_message(server_request(3))  # the server asks again: wait for that answer too
    assert s.flush_deadline() is None and not s.answers.all_answered()


def test_answers_sent_are_forgotten_and_later_ones_kept() -> None:
    answers = AnswerBuffer()
    for n in (1, 2):
        answers.expect(("i", n), limit=10)
    answers.capture(("i", 1), result(1), now=1.0)
    batch = answers.batch()
    answers.capture(("i", 2), result(2), now=2.0)  # arrives while the batch is being sent
    assert json.loads(answers_body(batch)) == [result(1)]
    answers.sent(batch)
    assert len(answers) == 1 and answers.all_answered() and answers.complete_at == 2.0
    assert answers.batch() == [(("i", 2), result(2))]
    answers.sent(answers.batch())
    assert len(answers) == 0 and answers.complete_at is None


# -- resuming ------------------------------------------------------------------------------------------


def test_the_delay_is_the_servers_retry_clamped() -> None:
    s = state(default_retry_ms=700, max_retry_ms=2000)
    assert s.delay_s() == 0.7
    s.receive_event(event(retry=50_000))
    assert s.delay_s() == 2.0


def test_internal_requests_carry_the_posts_headers_and_the_cursor() -> None:
    s = state()
    s.receive_event(event(id="e9"))
    get = dict(s.headers(post=False))
    assert get == {
        b"mcp-session-id": b"s",
        b"authorization": b"Bearer t",
        b"accept": b"text/event-stream",
        b"cache-control": b"no-store",
        b"last-event-id": b"e9",
    }
    post = dict(s.headers(post=True))
    assert post[b"content-type"] == b"application/json" and post[b"last-event-id"] == b"e9"


def test_where_a_stream_resumes() -> None:
    s = state()
    with pytest.raises(GiveUp, match="before any event id"):
        s.next_resume()
    s.receive_event(event(id="e1"))
    assert s.next_resume() == Resume("GET", MCP)
    s.follow(None)
    s.follow(LINK)
    assert s.next_resume() == Resume("GET", LINK)
    s.resume_token = "tok"
    resume = s.next_resume()
    assert (
        resume.by_token
        and resume.url == MCP
        and json.loads(resume.body or b"")["method"] == "requests/resume"
    )
    s.receive_message(server_request("q"))  # answers to deliver first: they go to the Link
    assert s.next_resume() == Resume("GET", LINK)


def test_failed_attempts_in_a_row_give_up_and_new_events_restart_the_count() -> None:
    s = state(max_attempts=3)
    s.failed("ConnectError")
    s.failed("HTTP 503")
    s.receive_event(event(id="e1"))
    assert s.attempts == 0
    s.failed("x")
    s.failed("x")
    with pytest.raises(GiveUp, match=r"3 reconnect attempts failed \(last: ReadError\)"):
        s.failed("ReadError")


def test_a_polling_server_is_not_a_failure_but_a_broken_or_empty_connection_is() -> None:
    s = state(max_attempts=2)
    s.receive_event(event(id="p"))
    before = s.new_events
    s.receive_event(event(id="p"))  # the priming event again, then a clean end
    s.connection_ended(new_events_before=before, got_events=True, broke=False)
    assert s.attempts == 0
    s.receive_event(event(id="e1"))  # progress, then the connection broke: not a failed attempt
    s.connection_ended(new_events_before=before, got_events=True, broke=True)
    assert s.attempts == 0
    before = s.new_events
    s.connection_ended(new_events_before=before, got_events=True, broke=True)
    s.connection_ended(new_events_before=before, got_events=False, broke=False)
    with pytest.raises(GiveUp, match="brought no new events"):
        s.check_budget()


@pytest.mark.parametrize(
    ("status", "media", "by_token", "goes_on"),
    [
        (200, "text/event-stream", False, True),
        (200, "application/json", False, True),
        (204, "text/event-stream", False, False),
        (204, "text/event-stream", True, True),
        (200, "text/html", False, False),
        (503, "text/event-stream", False, False),
    ],
)
def test_which_answers_continue_the_stream(status: int, media: str, by_token: bool, goes_on: bool) -> None:
    assert is_continuation(status, media, by_token=by_token) is goes_on


@pytest.mark.parametrize(("status", "why"), [(404, "unknown or expired"), (400, "token"), (401, "HTTP 401")])
def test_statuses_after_which_retrying_cannot_help(status: int, why: str) -> None:
    with pytest.raises(GiveUp, match=why):
        check_status(status)
    for retryable in (408, 425, 429, 500, 502, 503, 504):
        check_status(retryable)


def test_a_204_means_wait_for_answers_only_when_some_are_awaited_on_a_link_stream() -> None:
    with pytest.raises(GiveUp, match="no more events"):
        state().refused(204, "", by_token=False)
    with pytest.raises(GiveUp, match="without a response"):
        state(LINK).refused(204, "", by_token=False)
    s = state(LINK)
    s.receive_message(server_request("q"))
    assert s.refused(204, "", by_token=False) is Refused.WAIT_FOR_ANSWERS


def test_other_refusals_are_retried_or_given_up() -> None:
    s = state(max_attempts=2)
    assert s.refused(503, "text/plain", by_token=False) is Refused.RETRY
    with pytest.raises(GiveUp, match="content type 'text/html'"):
        s.refused(200, "text/html", by_token=False)
    with pytest.raises(GiveUp, match="HTTP 200"):
        state().refused(200, "text/html", by_token=True)
    with pytest.raises(GiveUp, match="2 reconnect attempts failed"):
        s.refused(502, "", by_token=True)


def test_attempts_no_server_answers_go_on_for_reconnect_s_then_give_up_saying_so() -> None:
    """A restart or a deploy: no server answers for a while. Those attempts do not spend the
    attempt budget; they go on for `reconnect_s` from the first of them, then give up clearly."""
    s = state(max_attempts=2, reconnect_s=10.0)
    for now in (100.0, 103.0, 106.0, 109.9):
        s.unanswered("ConnectError: refused", now)
    assert s.attempts == 0
    s.answered_attempt()  # a server answered: the next silence counts from its own start
    s.unanswered("HTTP 502", 200.0)
    with pytest.raises(GiveUp, match=r"no server answered for 10 s \(reconnect_s=10"):
        s.unanswered("HTTP 502", 210.0)


def test_the_stream_of_an_initialize_resumes_in_the_session_its_answer_named() -> None:
    """An `initialize` POST carries no session id; its SSE answer names one. A resume of that
    stream goes out with it: a node other than the one that answered checks the resume's
    session against the stream's, and refused (404) one without it."""
    import weakref

    from mcp_resume_asgi.client import ResumableTransport
    from mcp_resume_asgi.client.logical_stream import LogicalStream

    request = httpx.Request("POST", MCP, headers={"accept": "application/json, text/event-stream"})
    response = httpx.Response(200, headers={"content-type": "text/event-stream", "mcp-session-id": "s-9"})
    stream = LogicalStream(
        ResumableTransport(httpx.AsyncHTTPTransport()),
        request,
        0,
        response,
        tokens=TokenBook(),
        live=weakref.WeakSet(),
    )
    assert stream.state.session_id == "s-9"
    assert dict(stream.state.headers(post=False))[b"mcp-session-id"] == b"s-9"
