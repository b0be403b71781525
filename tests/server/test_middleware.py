"""StopMiddleware in-process, on asyncio and trio: ASGI messages driven by hand, one edge per test.

The client side plays a server: it hands over the request body (in pieces if asked), then
waits; ``receive`` reports ``http.disconnect`` once the response is complete or the client
leaves. The inner app is a small ASGI app recording what it saw and whether it was cancelled.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import anyio
import pytest

from streamstop.server import Message, Receive, Scope, Send, StopMiddleware
from streamstop.server._asgi import DISCONNECT_WATCHED, call_until_disconnect

from .conftest import Client, http_scope

pytestmark = pytest.mark.anyio


class App:
    """Reads the request, then sends ``pieces`` as body messages of the given content type."""

    def __init__(
        self,
        pieces: list[bytes],
        *,
        content_type: bytes = b"text/event-stream",
        status: int = 200,
        headers: list[tuple[bytes, bytes]] | None = None,
        hang: bool = False,
        fail: bool = False,
        end: bool = True,
    ) -> None:
        self.pieces = pieces
        self.headers = [(b"content-type", content_type), *(headers or [])]
        self.status = status
        self.hang = hang
        self.fail = fail
        self.end = end
        self.request_body = b""
        self.scope: Scope = {}
        self.receive: Receive | None = None
        self.sent = 0
        self.cancelled = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope, self.receive = scope, receive
        if scope["type"] != "http":
            return
        message = await receive()
        self.request_body = message.get("body", b"")
        try:
            await send(
                {"type": "http.response.start", "status": self.status, "headers": self.headers}
            )
            for piece in self.pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += 1
            if self.fail:
                raise RuntimeError("the model crashed")
            if self.hang:
                await anyio.sleep_forever()
            if self.end:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise


def request(stop: Any = "</s>", **fields: Any) -> bytes:
    return json.dumps({"model": "m", "stream": True, "stop": stop, **fields}).encode()


def sse(*contents: str, done: bool = True) -> bytes:
    events = [
        b"data: "
        + json.dumps(
            {"choices": [{"index": 0, "delta": {"content": c}, "finish_reason": None}]}
        ).encode()
        + b"\n\n"
        for c in contents
    ]
    return b"".join(events) + (b"data: [DONE]\n\n" if done else b"")


def text_of(body: bytes) -> str:
    text = ""
    for block in body.split(b"\n\n"):
        if block.startswith(b"data: {"):
            for choice in json.loads(block[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


async def run(app: App, client: Client, scope: Scope | None = None, **options: Any) -> None:
    await StopMiddleware(app, **options)(scope or http_scope(), client.receive, client.send)


async def test_sse_split_into_single_bytes_is_filtered_as_a_whole() -> None:
    body = sse("Hel", "lo </", "s> and", " more", done=True)
    app = App([body[i : i + 1] for i in range(len(body))])
    client = Client(request())
    await run(app, client)
    assert client.body == (
        # Passed through byte for byte while nothing changes.
        b'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}]}'
        b"\n\n"
        # Re-encoded once changed: the held "</" cut off, then the stop's empty delta.
        b'data: {"choices":[{"index":0,"delta":{"content":"lo "},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop",'
        b'"stop_reason":"</s>"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    assert text_of(client.body) == "Hello "
    assert client.body.endswith(b"data: [DONE]\n\n")
    assert client.complete
    assert b"content-length" not in client.headers
    assert app.cancelled  # stopped at the stop, not at the end of its body


async def test_one_message_per_body_of_the_app_and_none_for_a_body_all_held() -> None:
    # The usual path: each body the app sends is filtered and sent on as one message, at once;
    # a body whose text is all held sends nothing; the cut ends the response.
    events = [sse("Hi", done=False), sse("<", done=False), sse("3", done=False)]
    app = App([*events, b"".join([sse("a", done=False), sse("</s>", done=False)])], hang=True)
    client = Client(request())
    await run(app, client)
    assert client.messages[1:] == [
        {"type": "http.response.body", "body": events[0], "more_body": True},
        {
            "type": "http.response.body",
            "body": b'data: {"choices":[{"index":0,"delta":{"content":"<3"},'
            b'"finish_reason":null}]}\n\n',
            "more_body": True,
        },
        {
            "type": "http.response.body",
            "body": sse("a", done=False)
            + b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop",'
            b'"stop_reason":"</s>"}]}'
            b"\n\ndata: [DONE]\n\n",
            "more_body": False,
        },
    ]
    assert app.cancelled
    assert app.sent == 3  # cancelled in the send of the stop


async def test_bodies_after_the_client_left_are_not_sent() -> None:
    app = App([sse("a", done=False)] * 3, hang=True)
    client = Client(request(), fail_send_after=2)  # the start and the first body
    await run(app, client)
    assert [m.get("body") for m in client.messages[1:]] == [sse("a", done=False)]
    assert app.cancelled


async def test_the_cut_ends_the_response_and_cancels_the_app() -> None:
    app = App([sse("a", "b</s>c", done=False), sse("never")], hang=True)
    client = Client(request())
    await run(app, client)
    assert app.cancelled
    assert app.sent == 0  # cancelled in the very send that carried the stop
    assert text_of(client.body) == "ab"
    assert client.body.endswith(b"data: [DONE]\n\n")
    assert client.complete


async def test_n_choices_keep_the_app_running_until_all_are_over() -> None:
    def chunk(index: int, content: str) -> bytes:
        choice = {"index": index, "delta": {"content": content}, "finish_reason": None}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    app = App([chunk(0, "a</s>"), chunk(1, "b"), chunk(1, "c</s>"), chunk(0, "x")], hang=True)
    client = Client(request(n=2))
    await run(app, client)
    assert app.sent == 2  # cancelled while sending the third: then both choices were over
    assert app.cancelled
    assert client.body.count(b'"finish_reason":"stop"') == 2


async def test_whole_json_response_is_cut_with_a_new_content_length() -> None:
    response = {
        "choices": [{"index": 0, "message": {"content": "yes</s>no"}, "finish_reason": "length"}]
    }
    body = json.dumps(response).encode()
    app = App(
        [body[:10], body[10:]],
        content_type=b"application/json",
        headers=[(b"content-length", str(len(body)).encode())],
    )
    client = Client(request(stream=False))
    await run(app, client)
    cut = json.loads(client.body)
    assert cut["choices"][0] == {
        "index": 0,
        "message": {"content": "yes"},
        "finish_reason": "stop",
        "stop_reason": "</s>",
    }
    assert client.headers[b"content-length"] == str(len(client.body)).encode()
    assert [m["type"] for m in client.messages] == ["http.response.start", "http.response.body"]


async def test_stop_is_removed_from_the_forwarded_request_by_default() -> None:
    app = App([sse("x")])
    original = request(stop=["a", "b", "c", "d", "e"])
    scope = http_scope()
    scope["headers"].append((b"content-length", str(len(original)).encode()))
    await run(app, Client([original[:7], original[7:]]), scope)
    forwarded = json.loads(app.request_body)
    assert "stop" not in forwarded
    assert forwarded["model"] == "m"
    assert dict(app.scope["headers"])[b"content-length"] == str(len(app.request_body)).encode()

    keeping = App([sse("x")])
    await run(keeping, Client(original), scope, forward_stop=True)
    assert keeping.request_body == original


async def test_include_stop() -> None:
    client = Client(request())
    await run(App([sse("a</s>b")]), client, include_stop=True)
    assert text_of(client.body) == "a</s>"


async def test_body_too_large() -> None:
    app = App([])
    client = Client([b"x" * 600, b"x" * 600])
    await run(app, client, max_body_size=1000)
    assert client.status == 413
    assert "1000" in json.loads(client.body)["error"]["message"]
    assert app.receive is None  # never called


async def test_client_disconnect_cancels_the_app() -> None:
    app = App([sse("a", done=False)], hang=True)
    client = Client(request())
    async with anyio.create_task_group() as group:
        group.start_soon(run, app, client)
        await anyio.wait_all_tasks_blocked()
        assert app.sent == 1
        client.gone.set()
    assert app.cancelled
    assert not client.complete


async def test_a_filtered_app_is_told_the_middleware_watches_for_disconnects() -> None:
    # Only where the middleware watches (a request with stops) may the app leave it to it.
    watched, unfiltered = App([sse("a")]), App([sse("a")])
    await run(watched, Client(request()))
    await run(unfiltered, Client(request(stop=None)))
    assert watched.scope.get(DISCONNECT_WATCHED) is True
    assert DISCONNECT_WATCHED not in unfiltered.scope


async def test_call_until_disconnect_leaves_a_watched_request_to_the_layer_above() -> None:
    receives = 0

    async def receive() -> Message:
        nonlocal receives
        receives += 1
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    calls: list[str] = []

    async def function() -> None:
        await anyio.lowlevel.checkpoint()
        calls.append("done")

    assert await call_until_disconnect(receive, function, {DISCONNECT_WATCHED: True}) is False
    assert (calls, receives) == (["done"], 0)  # no watcher: nothing received
    assert await call_until_disconnect(receive, function, {}) is False
    assert (calls, receives) == (["done", "done"], 1)  # its own watcher, cancelled at the end


async def test_a_failing_send_cancels_the_app_quietly() -> None:
    app = App([sse("a", done=False)] * 5, hang=True)
    client = Client(request(), fail_send_after=2)
    await run(app, client)  # no error: the client is gone, nobody to tell
    assert app.cancelled
    assert len(client.messages) == 2


async def test_app_errors_propagate_unwrapped() -> None:
    with pytest.raises(RuntimeError, match="the model crashed"):
        await run(App([sse("a", done=False)], fail=True), Client(request()))


async def test_an_app_that_never_ends_its_body_is_ended_with_the_held_text() -> None:
    client = Client(request())
    await run(App([sse("a</", done=False)], end=False), client)
    assert text_of(client.body) == "a</"
    assert client.complete


# What App([b"data: </s>\n\n"]) sends: a stop in the body, which a filter would cut.
UNTOUCHED: list[Message] = [
    {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/event-stream")],
    },
    {"type": "http.response.body", "body": b"data: </s>\n\n", "more_body": True},
    {"type": "http.response.body", "body": b"", "more_body": False},
]


@pytest.mark.parametrize(
    ("scope", "messages"),
    [
        (http_scope(method="GET"), UNTOUCHED),
        (http_scope(path="/v1/embeddings"), UNTOUCHED),
        ({"type": "lifespan"}, []),
    ],
)
async def test_other_requests_pass_through_untouched(scope: Scope, messages: list[Message]) -> None:
    app = App([b"data: </s>\n\n"])
    client = Client(request())
    await run(app, client, dict(scope))
    # The server's own scope, receive and send, untouched.
    assert app.scope == scope
    assert app.receive == client.receive
    assert client.messages == messages
    assert app.request_body == (b"" if scope["type"] == "lifespan" else request())


async def test_responses_that_are_not_ours_to_touch() -> None:
    compressed = gzip.compress(sse("a</s>b"))
    client = Client(request())
    await run(App([compressed], headers=[(b"content-encoding", b"br")]), client)
    assert client.body == compressed  # an encoding it cannot read

    error = json.dumps({"error": {"message": "bad </s>"}}).encode()
    client = Client(request())
    await run(App([error], content_type=b"application/json", status=400), client)
    assert (client.status, client.body) == (400, error)

    no_stops = Client(request(stop=None))
    app = App([sse("a</s>b")])
    await run(app, no_stops)
    assert no_stops.body == sse("a</s>b")
    assert json.loads(app.request_body) == {"model": "m", "stream": True}
