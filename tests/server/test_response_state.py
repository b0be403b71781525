"""The response life cycle of the middleware: the table, and every row of it reached.

The table itself is checked pair by pair (every legal pair gives its state, every other one
raises ``IllegalTransition``), then one exchange per named case drives ``StopMiddleware``
through a path of the table, and the paths together reach every row.
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from streamstop.server import Message, Receive, Scope, Send, StopMiddleware
from streamstop.server._middleware import _Exchange
from streamstop.server._response_state import (
    LIVE,
    TRANSITIONS,
    Event,
    IllegalTransition,
    State,
    transition,
)

Step = tuple[State, Event, State]
S, E = State, Event


@pytest.mark.parametrize(
    ("state", "event"), list(itertools.product(State, Event)), ids=lambda v: v.name
)
def test_every_pair_is_a_row_or_refused(state: State, event: Event) -> None:
    if (state, event) in TRANSITIONS:
        assert transition(state, event) is TRANSITIONS[state, event]
        return
    with pytest.raises(IllegalTransition) as refused:
        transition(state, event)
    assert refused.value.state is state
    assert refused.value.event is event
    assert f"{event.name} in state {state.name}" in str(refused.value)


def test_the_table_in_words() -> None:
    # The illegal examples of the module's docstring, and the absorbing ends.
    for start in (E.START_PASS, E.START_STREAM, E.START_HOLD):
        for state in (S.PASSING, S.STREAMING, S.HOLDING, S.COMPLETE, S.CLIENT_GONE):
            assert (state, start) not in TRANSITIONS
    assert (S.COMPLETE, E.END) not in TRANSITIONS
    assert {TRANSITIONS[state, E.DISCONNECT] for state in LIVE} == {S.CLIENT_GONE}
    assert TRANSITIONS[S.COMPLETE, E.DISCONNECT] is S.COMPLETE


# -- every row, reached by an exchange ---------------------------------------------------------

SCOPE: Scope = {
    "type": "http",
    "method": "POST",
    "path": "/v1/chat/completions",
    "headers": [(b"content-type", b"application/json")],
    "query_string": b"",
}
REQUEST = json.dumps({"model": "m", "messages": [], "stop": ["STOP"]}).encode()
STREAM_REQUEST = json.dumps({"model": "m", "messages": [], "stop": ["STOP"], "stream": True})
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
WHOLE = json.dumps({"choices": [{"index": 0, "message": {"content": "hi STOP there"}}]}).encode()


def start(content_type: bytes, status: int = 200, *extra: tuple[bytes, bytes]) -> Message:
    headers = [(b"content-type", content_type), *extra]
    return {"type": "http.response.start", "status": status, "headers": headers}


def body(data: bytes, more: bool = False) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


class Client:
    """The server's side: gives the request, then a disconnect once ``leave`` is set; ``send``
    collects, and runs ``on_body`` (if any) at the first body."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.given = False
        self.leave = anyio.Event()
        self.reported = anyio.Event()  # the disconnect has been handed to the watcher
        self.sent: list[Message] = []
        self.on_body: Callable[[], Awaitable[None]] | None = None

    async def receive(self) -> Message:
        if not self.given:
            self.given = True
            return {"type": "http.request", "body": self.request, "more_body": False}
        await self.leave.wait()
        self.reported.set()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and self.on_body is not None:
            on_body, self.on_body = self.on_body, None
            await on_body()

    async def until_reported(self) -> None:
        """The client leaves; returns once the middleware has been told (shielded: the
        middleware cancels the app, whose send this is, when it hears)."""
        self.leave.set()
        with anyio.CancelScope(shield=True):
            await self.reported.wait()


App = Callable[[Scope, Receive, Send], Awaitable[None]]


def sends(*messages: Message, then_leave: Client | None = None, wait: bool = False) -> App:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        for message in messages:
            await send(message)
        if then_leave is not None:
            then_leave.leave.set()
            await anyio.sleep_forever()
        if wait:  # what an app does after its response: waits for the client to go
            assert (await receive())["type"] == "http.disconnect"

    return app


def passed(client: Client) -> App:
    async def leave_after_the_end() -> None:
        client.leave.set()

    client.on_body = leave_after_the_end
    return sends(start(b"text/plain", 404), body(b"no such model"), wait=True)


def gone_twice(client: Client) -> App:
    async def fail() -> None:
        await client.until_reported()
        raise OSError("the socket is closed")

    client.on_body = fail
    return sends(start(b"text/plain", 404), body(b"part", more=True), body(b"rest"))


def gone_while_inflating(client: Client) -> App:
    # Four pieces inflated: the client leaves while the first is sent; the rest (and the end)
    # are under way already.
    client.on_body = client.until_reported
    compressed = gzip.compress(b"x" * (4 * 64 * 1024))
    return sends(start(b"text/plain", 200, (b"content-encoding", b"gzip")), body(compressed))


# (name, request, the app given its client, the path through the table)
CASES: list[tuple[str, bytes, Callable[[Client], App], list[Step]]] = [
    ("passed on, then the client goes", REQUEST, passed,
     [(S.AWAITING_START, E.START_PASS, S.PASSING), (S.PASSING, E.END, S.COMPLETE),
      (S.COMPLETE, E.DISCONNECT, S.COMPLETE)]),
    ("a stream", STREAM_REQUEST.encode(),
     lambda c: sends(start(b"text/event-stream"), body(EVENT, more=True), body(b"")),
     [(S.AWAITING_START, E.START_STREAM, S.STREAMING), (S.STREAMING, E.END, S.COMPLETE)]),
    ("a whole body held and cut", REQUEST,
     lambda c: sends(start(b"application/json"), body(WHOLE)),
     [(S.AWAITING_START, E.START_HOLD, S.HOLDING), (S.HOLDING, E.END, S.COMPLETE)]),
    ("a body before any start", REQUEST, lambda c: sends(body(b"?")),
     [(S.AWAITING_START, E.END, S.COMPLETE)]),
    ("gone before the start", REQUEST, lambda c: sends(then_leave=c),
     [(S.AWAITING_START, E.DISCONNECT, S.CLIENT_GONE)]),
    ("gone while passing", REQUEST,
     lambda c: sends(start(b"text/plain", 404), then_leave=c),
     [(S.AWAITING_START, E.START_PASS, S.PASSING), (S.PASSING, E.DISCONNECT, S.CLIENT_GONE)]),
    ("gone while streaming", STREAM_REQUEST.encode(),
     lambda c: sends(start(b"text/event-stream"), body(EVENT, more=True), then_leave=c),
     [(S.AWAITING_START, E.START_STREAM, S.STREAMING),
      (S.STREAMING, E.DISCONNECT, S.CLIENT_GONE)]),
    ("gone while holding", REQUEST,
     lambda c: sends(start(b"application/json"), body(b"{", more=True), then_leave=c),
     [(S.AWAITING_START, E.START_HOLD, S.HOLDING), (S.HOLDING, E.DISCONNECT, S.CLIENT_GONE)]),
    ("gone, told by the watcher and by a failed send", REQUEST, gone_twice,
     [(S.AWAITING_START, E.START_PASS, S.PASSING), (S.PASSING, E.DISCONNECT, S.CLIENT_GONE),
      (S.CLIENT_GONE, E.DISCONNECT, S.CLIENT_GONE)]),
    ("gone while an inflated body is sent", REQUEST, gone_while_inflating,
     [(S.AWAITING_START, E.START_PASS, S.PASSING), (S.PASSING, E.DISCONNECT, S.CLIENT_GONE),
      (S.CLIENT_GONE, E.END, S.CLIENT_GONE)]),
]  # fmt: skip


async def walk(
    monkeypatch: pytest.MonkeyPatch, request: bytes, make: Callable[[Client], App]
) -> list[Step]:
    steps: list[Step] = []
    move = _Exchange._move

    def recording(self: _Exchange, event: Event) -> State:
        before = move(self, event)
        steps.append((before, event, self._state))
        return before

    monkeypatch.setattr(_Exchange, "_move", recording)
    client = Client(request)
    middleware = StopMiddleware(make(client))
    with anyio.fail_after(10):  # a hang guard, not a timing assertion
        await middleware(dict(SCOPE), client.receive, client.send)
    return steps


@pytest.mark.anyio
@pytest.mark.parametrize(("request_body", "make", "path"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
async def test_each_exchange_takes_its_path(
    monkeypatch: pytest.MonkeyPatch,
    request_body: bytes,
    make: Callable[[Client], App],
    path: list[Step],
) -> None:
    assert await walk(monkeypatch, request_body, make) == path


def test_the_exchanges_reach_every_row() -> None:
    reached = {(before, event): after for case in CASES for before, event, after in case[3]}
    assert reached == TRANSITIONS


@pytest.mark.anyio
async def test_an_illegal_move_of_the_exchange_is_a_clear_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A second END after the response is whole: the bug the table is there to catch.
    ends: list[Any] = []
    move = _Exchange._move

    def twice(self: _Exchange, event: Event) -> State:
        before = move(self, event)
        if event is Event.END and not ends:
            ends.append(event)
            move(self, event)
        return before

    monkeypatch.setattr(_Exchange, "_move", twice)
    client = Client(REQUEST)
    middleware = StopMiddleware(sends(start(b"text/plain", 404), body(b"x")))
    with pytest.raises(IllegalTransition, match="END in state COMPLETE"):
        await middleware(dict(SCOPE), client.receive, client.send)
