"""StopMiddleware: stop strings for any ASGI app serving the OpenAI completion endpoints.

Why this module runs past 600 lines: it is the life cycle of one request, from the body read
to the last byte sent, and every step of it shares one exchange's state (``_Exchange``). What
does not share it is elsewhere already: parsing and limits (:mod:`._request`, :mod:`._limits`),
the filters (:mod:`streamstop.chat`, ``_family.py``), the request record (:mod:`._record`).

Rules of this module (the life cycle of one request lives here, its states and their table in
:mod:`._response_state`; the filtering in :mod:`streamstop.chat`):

- Only ``POST`` to the configured paths is touched; everything else goes to the app as it is.
- The request body is read whole (up to ``RequestLimits.max_body_bytes``, else 413) and parsed
  by :mod:`._request` (malformed JSON, too deep or too many values for its size, fields of
  the wrong type: 400 naming the field); ``stop`` must be ``null``, a string or a list of
  strings within the limits on their number and length (else 400, ``param: "stop"``). A body over
  ``_PARSE_IN_THREAD_BYTES`` is parsed in a worker thread, and an automaton over
  ``_BUILD_IN_THREAD_CHARS`` stop characters built in one, so no request stalls the loop.
- By default ``stop`` is taken out of the body the app sees, so a backend with a 4-stop cap, or
  none, still works; the body is then re-encoded and ``content-length`` fixed. The app receives
  the body once, then waits. On a filtered request the app is asked for an uncompressed
  response (``accept-encoding: identity``): compression belongs outside this middleware. A
  2xx body the app compresses anyway with gzip or deflate is inflated piece by piece (never
  more than ``INFLATE_PIECE`` bytes at once, so a gzip bomb never materialises), and sent
  uncompressed; other encodings pass untouched.
- Memory stays bounded whatever the app sends: a JSON body held whole, and the inflated size
  of a compressed body, are capped by ``RequestLimits.max_response_bytes``. Over it: a 502 in
  the OpenAI error shape (``code: "response_too_large"``) for a body not yet started, an error
  event and a clean end (held text dropped) for a stream, and the app is cancelled. (A
  compressed body passed through unfiltered is cut off at the limit: its head is out.)
- The response decides the filter: ``text/event-stream``, or any type but ``application/json``
  when the request asked for ``stream: true``, goes through an
  :class:`~streamstop.chat.SSEFilter` as it arrives (lines and events capped by the limits);
  a 2xx ``application/json`` body is held, cut with :func:`~streamstop.chat.truncate_response`
  and sent with a new ``content-length``; anything else (errors, bodies in other encodings)
  passes through.
- On the OpenAI paths (Responses too) ``stop_regex`` (a pattern or a list: regex stops,
  SGLang's field; a cut's ``stop_reason`` names the pattern) and
  ``stop_arm_after`` (a marker the stops wait for) are read and checked by
  :func:`._request.parse_stop_rules` (400 naming the field); ``stop_regex`` is taken out of the
  body as ``stop`` is, ``stop_arm_after`` always (no backend knows it). A pattern that times
  out on the app's text ends a stream with an error event, a whole response with a 400 (code
  ``stop_regex_timeout``).
- The :class:`~streamstop.server._record.RequestRecord` of the scope, if any, gets the model, the
  number of stops, which stop fired and how many choices it cut.
- Once every choice of a stream is over (``n`` is read from the request), ``data: [DONE]`` is
  sent, the response ends, and the app is cancelled: its ``await send(...)`` raises the
  cancellation, so an app that is a proxy closes its upstream and a model stops generating.
- A client that disconnects (``http.disconnect``, or ``send`` failing) cancels the app too.
- Every filtered path has a family (:mod:`streamstop._families`): OpenAI's for ``paths``
  (:mod:`streamstop._family_openai`), and for the others Anthropic's ``/v1/messages``, Ollama's
  ``/api/chat`` and ``/api/generate``, llama.cpp's ``/completion``, TGI's ``/generate`` and
  ``/generate_stream``, OpenAI's Responses API ``/v1/responses``, Gemini's
  ``/v1beta/models/{model}:streamGenerateContent`` and ``:generateContent``. They all go
  through the same life cycle, limits, checks and record: only where the stops are read, how
  the response is framed (SSE, NDJSON, whole JSON), how a cut is written and the shape of an
  error (Gemini's own; OpenAI's for the others) differ, and that is the family's adapter. This
  module never asks which family it holds: a stream's filter is the family's
  (:meth:`~streamstop._family.Family.stream_filter`, one
  :class:`~streamstop._stream_filter.StreamFilter` protocol), a whole response's cut too
  (:meth:`~streamstop._family.Family.cut_whole`), and so are the error shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from .. import _json
from .._automaton import StopAutomaton
from .._families import FAMILIES, FAMILY_PATHS, family_route
from .._family import Family
from .._family_openai import OPENAI_PATHS
from .._faults import Fault, recorded
from .._patterns import StopPatterns, StopPatternTimeout
from .._stream_filter import StreamFilter
from .._text import StopRules
from ._asgi import (
    DISCONNECT_WATCHED,
    ASGIApp,
    BodyTooLarge,
    Message,
    Receive,
    Scope,
    Send,
    error_payload,
    header,
    read_body,
    send_error,
    send_json,
    too_large,
)
from ._inflate import INFLATABLE, Inflater, ResponseTooLarge
from ._limits import RequestLimits
from ._record import RequestRecord, record_of
from ._request import (
    STOP_RULE_FIELDS,
    InvalidRequest,
    parse_body,
    parse_stop_rules,
    parse_stops,
    without_key,
)
from ._response_state import LIVE, Event, State, transition

__all__ = ["DEFAULT_FAMILY_PATHS", "DEFAULT_PATHS", "StopMiddleware"]

# OpenAI's endpoints, and their aliases without /v1 (llama.cpp's /chat/completions).
DEFAULT_PATHS = tuple(OPENAI_PATHS)
_OPENAI = FAMILIES[OPENAI_PATHS[DEFAULT_PATHS[0]]]  # the family of the paths given as ``paths``
# The native APIs filtered besides OpenAI's: path -> family (see streamstop._families).
DEFAULT_FAMILY_PATHS: dict[str, str] = dict(FAMILY_PATHS)

# json.loads runs at roughly 100-300 MB/s: 256 KiB is about 1-3 ms on the loop; larger bodies
# (up to max_body_bytes) are parsed in a worker thread.
_PARSE_IN_THREAD_BYTES = 256 * 1024
# A stop set of more characters than this is built in a worker thread (a cached one costs the
# thread hop only): at the automaton's worst build speed it is a few ms on the loop at most.
_BUILD_IN_THREAD_CHARS = 1024
# Above this size the body the app gets is the received one with ``stop`` cut out of the bytes
# (when that is safe), not a re-encoding: the same JSON, without a second GIL-holding pass.
_SPLICE_BYTES = 64 * 1024


_REGEX_TIMEOUT = "stop_regex_timeout"


def _timeout_in(error: BaseException) -> StopPatternTimeout | None:
    """The regex stop's timeout that ``error`` is or was raised from, if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, StopPatternTimeout):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _caused_by(error: BaseException, cause: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if current is cause:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


_TOO_LARGE = "response_too_large"


def _with_content_length(
    headers: Iterable[tuple[bytes, bytes]], length: int | None
) -> list[tuple[bytes, bytes]]:
    kept = [
        (key, value)
        for key, value in headers
        if key.lower() not in (b"content-length", b"transfer-encoding")
    ]
    if length is not None:
        kept.append((b"content-length", str(length).encode()))
    return kept


def _identity_encoding(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers with ``accept-encoding: identity``: the app is asked not to compress."""
    kept = [(key, value) for key, value in headers if key.lower() != b"accept-encoding"]
    kept.append((b"accept-encoding", b"identity"))
    return kept


class StopMiddleware:
    """ASGI middleware applying the request's ``stop`` to OpenAI-compatible responses.

    ::

        app = StopMiddleware(app)                  # any ASGI app
        app.add_middleware(StopMiddleware)         # Starlette or FastAPI

    ``forward_stop=False`` (the default) removes ``stop`` from the request the app sees, so the
    stops apply even where the backend caps their number (OpenAI: 4) or ignores them; for
    streams the cost is nothing, the backend is stopped when the stop is found. For
    non-streaming requests the backend then generates to its own end before the cut: pass
    ``forward_stop=True`` if it can handle your stops itself (they are still applied here).

    ``include_stop=True`` keeps the matched stop in the output. ``paths`` are the OpenAI
    endpoints filtered (exact match on the ASGI ``path``); ``family_paths`` maps the other
    APIs' endpoints to their family (default :data:`DEFAULT_FAMILY_PATHS`; ``{}``: none; a key
    with ``{model}`` is a pattern, ``{model}`` one path segment: Gemini's paths; a value is a
    name of ``streamstop._families.FAMILIES``, ``"openai"`` included).
    ``limits`` bounds what a request may ask (stops, body, JSON depth) and what the app's
    stream may send (lines, events); the older
    ``max_body_size``, if given, overrides ``limits.max_body_bytes``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        forward_stop: bool = False,
        include_stop: bool = False,
        paths: Iterable[str] = DEFAULT_PATHS,
        limits: RequestLimits | None = None,
        max_body_size: int | None = None,
        family_paths: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self.forward_stop = bool(forward_stop)
        self.include_stop = bool(include_stop)
        self.paths = frozenset(paths)
        family_paths = DEFAULT_FAMILY_PATHS if family_paths is None else family_paths
        unknown = sorted(set(family_paths.values()) - set(FAMILIES))
        if unknown:
            raise ValueError(
                f"unknown API families {unknown!r} in family_paths: known are {sorted(FAMILIES)}"
            )
        self.family_paths = {
            path: FAMILIES[name] for path, name in family_paths.items() if path not in self.paths
        }
        # Every filtered path and its family: ``paths`` are OpenAI's (and win over a
        # family_paths key of the same path).
        self._families: dict[str, Family] = {
            **self.family_paths,
            **dict.fromkeys(self.paths, _OPENAI),
        }
        limits = limits if limits is not None else RequestLimits()
        if max_body_size is not None:
            limits = dataclasses.replace(limits, max_body_bytes=max_body_size)
        self.limits = limits

    @property
    def max_body_size(self) -> int:
        return self.limits.max_body_bytes

    def _family_of(self, path: Any) -> Family | None:
        """The family filtering ``path``, or ``None``: the path is not this layer's."""
        families = self._families
        family = families.get(path)
        if family is None and isinstance(path, str):
            route = family_route(path, families)  # a pattern: Gemini's {model}
            family = None if route is None else families[route]
        return family

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        path = scope.get("path")
        family = self._family_of(path)
        if family is None:
            await self.app(scope, receive, send)
            return
        received = await _read_family_body(receive, send, self.limits.max_body_bytes, family)
        if received is None:
            return  # the client left before sending its request, or it was too large
        query = scope.get("query_string", b"")
        try:
            if len(received) > _PARSE_IN_THREAD_BYTES:
                prepared = await anyio.to_thread.run_sync(
                    self._prepare, received, family, path, query
                )
            else:
                prepared = self._prepare(received, family, path, query)
        except InvalidRequest as error:
            await _send_invalid(send, error, family)
            return
        body, stops = prepared.body, prepared.stops
        if body is not received:
            scope = {**scope, "headers": _with_content_length(scope["headers"], len(body))}
        record = record_of(scope)
        if record is not None:
            record.model = prepared.model
            record.stops = len(stops)
        if not stops and prepared.patterns is None:
            await self.app(scope, _replay(body, receive), send)
            return
        if sum(map(len, stops)) > _BUILD_IN_THREAD_CHARS:
            automaton = await anyio.to_thread.run_sync(StopAutomaton.from_stops, stops)
        else:
            automaton = StopAutomaton.from_stops(stops)
        # The exchange watches for the client's disconnect and cancels the app on it.
        scope = {
            **scope,
            "headers": _identity_encoding(scope["headers"]),
            DISCONNECT_WATCHED: True,
        }
        exchange = _Exchange(
            self.app,
            automaton,
            n=prepared.choices,
            include_stop=self.include_stop,
            stream=prepared.stream,
            include_usage=prepared.include_usage,
            limits=self.limits,
            record=record,
            send=send,
            family=family,
            patterns=prepared.patterns,
            arm_after=prepared.arm_after,
        )
        await exchange.run(scope, body, receive)

    def _prepare(
        self, body: bytes, family: Family = _OPENAI, path: Any = None, query: bytes = b""
    ) -> _Prepared:
        """Parse and check the body; what this layer needs of it, and the body the app gets
        (the stops removed unless forwarded). Pure CPU work, run in a worker thread for large
        bodies; the parsed request dies here, so a large one is freed in that thread too."""
        request = parse_body(body, self.limits, openai=family.openai_fields)
        path = str(path)
        param = ".".join(family.stop_path)
        stops = parse_stops({"stop": family.stops_value(request)}, self.limits, param=param)
        patterns: StopPatterns | None = None
        arm_after: str | None = None
        taken: list[str] = []
        if family.stop_rules:  # an OpenAI API's: stop_regex and stop_arm_after too
            patterns, arm_after = parse_stop_rules(request, self.limits)
            taken = [
                key
                for key in STOP_RULE_FIELDS
                if key in request and (key == "stop_arm_after" or not self.forward_stop)
            ]
        refusal = family.refusal(request, path, query) if stops or patterns else None
        if refusal is not None:
            raise InvalidRequest(400, refusal, param=param, code="unsupported_stream_format")
        for key in taken:
            del request[key]
        removed = not self.forward_stop and family.remove_stops(request)
        if removed or taken:
            # Cut out of the bytes when it can be (top-level keys only): json.dumps of a large
            # body holds the GIL.
            nested = removed and len(family.stop_path) > 1
            cut: bytes | None = body if len(body) > _SPLICE_BYTES and not nested else None
            for key in [*(family.stop_path[:1] if removed else ()), *taken]:
                cut = without_key(cut, key) if cut is not None else None
            body = cut if cut is not None else _json.dumps(request)
        stream = family.streams(request, path)
        return _Prepared(
            body=body,
            stops=stops,
            model=family.model(request, path),
            choices=family.slots(request),
            stream=stream,
            include_usage=stream and family.include_usage(request),
            patterns=patterns,
            arm_after=arm_after,
        )


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What the middleware keeps of a request: its body for the app, and a few fields."""

    body: bytes
    stops: tuple[str, ...]
    model: str | None
    choices: int | None
    stream: bool
    include_usage: bool
    patterns: StopPatterns | None = None  # stop_regex
    arm_after: str | None = None  # stop_arm_after


async def _send_invalid(send: Send, error: InvalidRequest, family: Family) -> None:
    """Answer ``error`` in the shape the family's clients read."""
    payload = family.error_body(error.status, error.message, param=error.param, code=error.code)
    headers = [(b"allow", error.allow.encode())] if error.allow else []
    await send_json(send, error.status, payload, headers=headers)


async def _read_family_body(
    receive: Receive, send: Send, limit: int, family: Family
) -> bytes | None:
    """:func:`~._asgi.read_body_or_413`, the 413 in the family's error shape."""
    try:
        return await read_body(receive, limit)
    except BodyTooLarge as error:
        await _send_invalid(send, _body_too_large(error.limit), family)
        return None


def _body_too_large(limit: int) -> InvalidRequest:
    """read_body_or_413's 413, with its code (every family's now, not only OpenAI's)."""
    return InvalidRequest(413, too_large(limit), code="max_body_bytes_exceeded")


def _replay(body: bytes, then: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then defers to ``then``."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return replay


class _Exchange:
    """One filtered request: the app runs in a cancel scope; ``send`` is intercepted."""

    def __init__(
        self,
        app: ASGIApp,
        automaton: StopAutomaton,
        *,
        n: int | None,
        include_stop: bool,
        stream: bool,
        include_usage: bool,
        limits: RequestLimits,
        record: RequestRecord | None,
        send: Send,
        family: Family = _OPENAI,
        patterns: StopPatterns | None = None,
        arm_after: str | None = None,
    ) -> None:
        self._family = family
        self._patterns = patterns
        self._arm_after = arm_after
        self._app = app
        self._automaton = automaton
        self._n = n
        self._include_stop = include_stop
        self._stream = stream
        self._include_usage = include_usage
        self._limits = limits
        self._record = record
        self._send = send
        # Where the response is in its life cycle (see ._response_state for the table).
        self._state = State.AWAITING_START
        # Inflates a body the app compressed although asked not to (gzip or deflate).
        self._inflate: Inflater | None = None
        self._sse: StreamFilter | None = None
        # The filter while a stream's bodies take the usual path (STREAMING, no inflation: kept
        # by _move): _intercept's first test, so that routing a body costs one attribute test.
        self._streaming: StreamFilter | None = None
        self._start: Message | None = None
        self._json_parts: list[bytes] = []
        self._json_size = 0
        # Set with DISCONNECT: what wakes the app's receive (only the watcher reads the real one).
        self._disconnected = anyio.Event()
        self._app_scope = anyio.CancelScope()
        self._send_error: Exception | None = None

    def _move(self, event: Event) -> State:
        """Take ``event`` (IllegalTransition if the table has no row for it); the state before."""
        before = self._state
        self._state = state = transition(before, event)
        self._streaming = self._sse if state is State.STREAMING and self._inflate is None else None
        return before

    async def run(self, scope: Scope, body: bytes, receive: Receive) -> None:
        error: Exception | None = None
        app_receive = _replay(body, self._wait_for_disconnect)
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch, receive)
            with self._app_scope:
                try:
                    await self._app(scope, app_receive, self._intercept)
                except Exception as exc:  # raised below, outside the task group: not wrapped
                    error = exc
            group.cancel_scope.cancel()
        if error is not None:
            if self._send_error is not None and _caused_by(error, self._send_error):
                return  # the client is gone: nobody to tell
            timeout = _timeout_in(error)
            if timeout is not None and self._state in LIVE:
                await self._pattern_timed_out(timeout)
                return
            raise error
        if self._state in LIVE and self._state is not State.AWAITING_START:
            await self._finish_body(b"")

    async def _pattern_timed_out(self, error: StopPatternTimeout) -> None:
        """A regex stop timed out on the app's text (raised through the app's ``send``): the
        text cannot be judged, so none of what is held goes out; the client is told."""
        before = self._move(Event.END)
        message = f"Invalid 'stop_regex': {error}."
        if before is State.STREAMING and self._sse is not None:
            payload = error_payload(message, type="invalid_request_error", code=_REGEX_TIMEOUT)
            data = self._sse.fail(payload)
            await self._downstream({"type": "http.response.body", "body": data, "more_body": False})
        elif before is State.HOLDING:  # nothing of the response is out yet
            await send_error(
                self._downstream, 400, message, param="stop_regex", code=_REGEX_TIMEOUT
            )

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._client_gone()

    def _client_gone(self) -> None:
        before = self._move(Event.DISCONNECT)
        self._disconnected.set()
        if before is not State.COMPLETE:
            self._app_scope.cancel()

    async def _wait_for_disconnect(self) -> Message:
        """What the app receives after its body: only the watcher reads the real ``receive``."""
        await self._disconnected.wait()
        return {"type": "http.disconnect"}

    async def _downstream(self, message: Message) -> None:
        try:
            await self._send(message)
        except Exception as error:
            await self._send_failed(error)
            raise

    async def _send_failed(self, error: Exception) -> None:
        # The client is gone: stop the app rather than let it write into the void.
        self._send_error = error
        self._client_gone()
        await anyio.lowlevel.checkpoint()

    async def _intercept(self, message: Message) -> None:
        sse = self._streaming
        if (
            sse is not None
            and message["type"] == "http.response.body"
            and message.get("more_body", False)
        ):
            # The usual body of a stream: filtered and sent on, with no other call in between
            # (this runs once per upstream read).
            data = sse.feed(message.get("body", b""))
            if sse.done:
                await self._end_stream(sse, data)
            elif data:
                try:
                    await self._send(
                        {"type": "http.response.body", "body": data, "more_body": True}
                    )
                except Exception as error:
                    await self._send_failed(error)
                    raise
            return
        state = self._state
        if state not in LIVE:
            return
        kind = message["type"]
        if kind == "http.response.start" and state is State.AWAITING_START:
            await self._on_start(message)
        elif kind == "http.response.body" and state is State.STREAMING:
            await self._on_sse_body(message)
        elif kind == "http.response.body" and state is State.HOLDING:
            try:
                self._hold_json(message)
            except ResponseTooLarge as error:
                await self._refuse_too_large(error)
                return
            if not message.get("more_body", False):
                await self._send_json_response()
        elif kind == "http.response.body" and self._inflate is not None:
            await self._on_inflated_body(message)
        else:
            # Passed on as it is: a body of PASSING, or what an app sends out of order (a
            # body before its start, a second start), for the server to refuse.
            if kind == "http.response.body" and not message.get("more_body", False):
                self._move(Event.END)
            await self._downstream(message)

    def _hold_json(self, message: Message) -> None:
        limit = self._limits.max_response_bytes
        for piece in self._inflated(message):
            self._json_size += len(piece)
            if self._json_size > limit:
                self._json_parts = []
                raise ResponseTooLarge(limit)
            self._json_parts.append(piece)

    async def _refuse_too_large(self, error: ResponseTooLarge) -> None:
        """A 502 instead of a held body over the limit; the app is stopped."""
        self._start = None
        if self._record is not None:
            self._record.upstream_error = Fault.TOO_LARGE
        self._move(Event.END)
        payload = self._family.error_body(502, str(error), type="server_error", code=_TOO_LARGE)
        await send_json(self._downstream, 502, payload)
        self._app_scope.cancel()
        await anyio.lowlevel.checkpoint()

    async def _on_inflated_body(self, message: Message) -> None:
        """A compressed body passed through: sent as it is inflated, cut off at the limit."""
        more = bool(message.get("more_body", False))
        try:
            for piece in self._inflated(message):
                if piece:
                    await self._downstream(
                        {"type": "http.response.body", "body": piece, "more_body": True}
                    )
        except ResponseTooLarge:
            if self._record is not None:
                self._record.upstream_error = Fault.TOO_LARGE
            more = False
            self._app_scope.cancel()
        if not more:
            self._move(Event.END)
            await self._downstream({"type": "http.response.body", "body": b"", "more_body": False})
        await anyio.lowlevel.checkpoint()

    async def _on_start(self, message: Message) -> None:
        headers = list(message.get("headers", []))
        content_type = (header(headers, b"content-type") or b"").lower()
        encoding = (header(headers, b"content-encoding") or b"identity").lower()
        status = int(message["status"])
        if encoding in INFLATABLE and 200 <= status < 300:
            # Asked for identity, the app compressed anyway: the text must be read to be cut.
            self._inflate = Inflater(self._limits.max_response_bytes)
            headers = [(key, value) for key, value in headers if key.lower() != b"content-encoding"]
            message = {**message, "headers": _with_content_length(headers, None)}
            encoding = b"identity"
        if encoding != b"identity":
            self._move(Event.START_PASS)
        elif content_type.startswith(self._family.stream_types) or (
            # Asked for a stream: SSE by its framing, whatever the label (none, text/plain).
            self._stream
            and 200 <= status < 300
            and not content_type.startswith(b"application/json")
        ):
            # The family's own filter (OpenAI's: SSEFilter, its fast path kept), made once.
            self._sse = self._family.stream_filter(
                self._automaton,
                n=self._n,
                include_stop=self._include_stop,
                include_usage=self._include_usage,
                max_line_bytes=self._limits.max_sse_line_bytes,
                max_event_bytes=self._limits.max_sse_event_bytes,
                regex=self._patterns,
                arm_after=self._arm_after,
            )
            self._move(Event.START_STREAM)
            message = {**message, "headers": _with_content_length(headers, None)}
        elif 200 <= status < 300 and content_type.startswith(b"application/json"):
            self._move(Event.START_HOLD)
            self._start = message
            return  # sent with the body, once its length is known
        else:
            self._move(Event.START_PASS)
        await self._downstream(message)

    async def _on_sse_body(self, message: Message) -> None:
        assert self._sse is not None
        if self._inflate is None:
            data = self._sse.feed(message.get("body", b""))
        else:
            data = await self._feed_inflated(self._sse, message)
        if not message.get("more_body", False):
            await self._finish_body(data)
        elif self._sse.done:
            await self._end_stream(self._sse, data)
        elif data:
            await self._downstream({"type": "http.response.body", "body": data, "more_body": True})

    async def _end_stream(self, sse: StreamFilter, data: bytes) -> None:
        """The stream is over (``sse.done``) before the app's last body: end the response."""
        await self._finish_body(data)
        if sse.cut or sse.error is not None:
            # Every choice was cut or is over, or the stream failed: stop the app, at this
            # very await. (After the upstream's own [DONE] the app ends by itself; what it
            # sends is dropped.)
            self._app_scope.cancel()
            await anyio.lowlevel.checkpoint()

    async def _feed_inflated(self, sse: StreamFilter, message: Message) -> bytes:
        """Feed the inflated pieces of ``message`` to ``sse``, sending what comes out of all
        but the last; over the limit the stream ends in error. Returns what is left to send."""
        data = b""
        try:
            for piece in self._inflated(message):
                if data:
                    await self._downstream(
                        {"type": "http.response.body", "body": data, "more_body": True}
                    )
                data = sse.feed(piece)
                if sse.done:
                    break
        except ResponseTooLarge as error:
            if self._record is not None:
                self._record.upstream_error = Fault.TOO_LARGE
            data += sse.fail(self._family.error_payload(str(error), _TOO_LARGE))
        return data

    def _inflated(self, message: Message) -> Iterable[bytes]:
        """The body of ``message`` in pieces, inflated if the app compressed it."""
        body: bytes = message.get("body", b"")
        if self._inflate is None:
            return (body,)
        return self._inflate.pieces(body, final=not message.get("more_body", False))

    def _observe_stream(self, sse: StreamFilter) -> None:
        record = self._record
        if record is None:
            return
        fired = sse.stop_strings
        if fired:
            record.stop_fired = fired[min(fired)]
            record.choices_cut = len(fired)
        if sse.error in (Fault.TOO_LARGE, Fault.TRUNCATED):
            record.upstream_error = sse.error
        elif sse.error is not None and record.upstream_error is None:
            record.upstream_error = recorded(sse.error)

    async def _finish_body(self, data: bytes) -> None:
        if self._sse is not None:
            data += self._sse.flush()
            self._observe_stream(self._sse)
        elif self._state is State.HOLDING and self._start is not None:
            await self._send_json_response()
            return
        self._move(Event.END)
        await self._downstream({"type": "http.response.body", "body": data, "more_body": False})

    async def _send_json_response(self) -> None:
        assert self._start is not None
        start, self._start = self._start, None
        body = b"".join(self._json_parts)
        self._json_parts = []
        if len(body) > _PARSE_IN_THREAD_BYTES:
            body, fired = await anyio.to_thread.run_sync(self._cut_json, body)
        else:
            body, fired = self._cut_json(body)
        if fired and self._record is not None:
            self._record.stop_fired = fired[0]
            self._record.choices_cut = len(fired)
        headers = _with_content_length(start.get("headers", []), len(body))
        self._move(Event.END)
        await self._downstream({**start, "headers": headers})
        await self._downstream({"type": "http.response.body", "body": body, "more_body": False})

    def _cut_json(self, body: bytes) -> tuple[bytes, list[str]]:
        """The body cut at its stops (itself if it is not a JSON object or nothing was cut),
        and the stops that fired. Pure CPU work: run in a worker thread for large bodies."""
        try:
            response = _json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return body, []
        finder: Any = self._automaton
        if self._patterns is not None or self._arm_after is not None:
            finder = StopRules(self._automaton, regex=self._patterns, arm_after=self._arm_after)
        cut, fired = self._family.cut_whole(response, finder, self._include_stop)
        return (_json.dumps(cut) if fired else body), fired
