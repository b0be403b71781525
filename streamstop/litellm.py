"""streamstop for LiteLLM: `StopHook`, exact stop strings for every provider the gateway routes to.

The LiteLLM proxy passes ``stop`` on to the provider as it is: OpenAI caps it at 4, reasoning
models refuse it (``drop_params`` then drops it, and the client gets text past its stop), other
providers ignore it or apply part of it, and a stream the provider does not cut is never cut.
A :class:`StopHook` is a LiteLLM ``CustomLogger`` that takes the stops out of the request and
applies them itself, with the library's filter core, whatever the provider. Load the ready one
in the proxy's config::

    litellm_settings:
      callbacks: streamstop.litellm.stop_hook

What it does, hook by hook (each runs only in the proxy; see :meth:`StopHook.acompletion` for
the SDK):

- ``async_pre_call_hook``: takes ``stop`` out of a chat or text completion request (and
  ``stop_sequences`` out of an Anthropic ``/v1/messages`` one), any number of stops, checked
  against :class:`~streamstop.server.RequestLimits` with the middleware's rules and messages (a
  400 naming the limit). The stops ride along in the request's LiteLLM metadata
  (``metadata.streamstop``), read by the two hooks below; the provider never sees them.
- ``async_post_call_streaming_iterator_hook``: cuts the stream with a
  :class:`~streamstop.chat.ChunkFilter` (chat chunks, text completion chunks) or, on
  ``/v1/messages``, the Anthropic adapter of the family core (that route's chunks are the SSE
  bytes of Anthropic's events). Only text that could still become a stop is held back; the cut
  choice ends with ``finish_reason: "stop"`` and ``stop_reason`` (the stop string), Anthropic's
  with ``stop_reason: "stop_sequence"`` and ``stop_sequence``. Once every choice is over the
  provider's stream is closed (in a ``finally``, shielded), so the model stops generating.
- ``async_post_call_success_hook``: cuts a whole response's text the same way (in place as
  well as returned: LiteLLM 1.80 ignores what a logger returns, 1.108 uses it).

A request without stops passes untouched. Stops that a deployment's ``litellm_params`` adds are
not seen (the router adds them after the hook runs): give them in the request, or as the
hook's own ``stops``.

Needs the ``litellm`` extra (``pip install 'streamstop[litellm]'``): LiteLLM from 1.94.0. Its
proxy consumes what ``async_post_call_streaming_iterator_hook`` yields from 1.80.9 on
(BerriAI/litellm#17626), but before 1.94.0 a config file's callbacks are imported only from
files beside it, not from installed packages, so ``streamstop.litellm.stop_hook`` does not
load (and 1.80.9 answers the hook's 400 as a 500 and does not close streams at the cut).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from ._automaton import StopAutomaton, Stops
from ._chunks import ChunkFilter, _replace, is_choice_count
from ._families import Anthropic
from ._family import FamilyStream, cut_text
from ._lifecycle import aclose_source
from .server._limits import RequestLimits
from .server._request import InvalidRequest, parse_n, parse_stops

__all__ = ["StopHook", "stop_hook"]

# The stop parameter of each call type LiteLLM names in its pre-call hook (older releases
# name the proxy's chat route "completion", newer ones "acompletion").
_STOP_PARAMS: dict[str, str] = {
    "completion": "stop",
    "acompletion": "stop",
    "text_completion": "stop",
    "atext_completion": "stop",
    "anthropic_messages": "stop_sequences",
    "aanthropic_messages": "stop_sequences",
}
# Where the plan rides between the hooks: LiteLLM's own metadata of the request, never sent to
# the provider (``litellm_metadata`` on /v1/messages, where ``metadata`` is Anthropic's own).
_METADATA_KEYS = ("litellm_metadata", "metadata")
_PLAN_KEY = "streamstop"


@dataclass(frozen=True)
class _Plan:
    """What the pre-call hook decided for one request: its stops, how many choices its response
    has (``None``: unknown), and whether its stream is Anthropic's events."""

    stops: tuple[str, ...]
    n: int | None
    anthropic: bool

    def to_metadata(self) -> dict[str, Any]:
        # Plain JSON: LiteLLM's loggers copy and serialize the metadata.
        return {"stops": list(self.stops), "n": self.n, "anthropic": self.anthropic}

    @classmethod
    def from_request(cls, data: Mapping[str, Any]) -> _Plan | None:
        for key in _METADATA_KEYS:
            metadata = data.get(key)
            entry = metadata.get(_PLAN_KEY) if isinstance(metadata, Mapping) else None
            if isinstance(entry, Mapping):
                n = entry.get("n")
                return cls(
                    tuple(str(stop) for stop in entry.get("stops", ())),
                    n if is_choice_count(n) else None,
                    entry.get("anthropic") is True,
                )
        return None


def _choice_count(data: Mapping[str, Any], text_completion: bool) -> int | None:
    """The number of choices a response to ``data`` has: ``n``, times the prompts of a text
    completion (a list of strings or of token lists is one prompt each); ``None`` if unknown,
    so the stream is read to its end."""
    n = parse_n(dict(data))
    if not text_completion:
        return n
    prompt = data.get("prompt")
    if isinstance(prompt, str) or prompt is None:
        return n
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return n  # one prompt of tokens
    if isinstance(prompt, list) and prompt:
        return n * len(prompt)
    return None


# How a refusal over a limit names a streamstop server's setting (server._limits.set_by).
_SERVER_SETTING = re.compile(r", set by the server's --([\w-]+) or STREAMSTOP_\w+\.$")


def _hook_setting(match: re.Match[str]) -> str:
    """The hook's own setting for a limit the server sets with a flag."""
    name = match.group(1).replace("-", "_")
    return f", set by StopHook(limits=RequestLimits({name}=...))."


def _proxy_error(error: InvalidRequest) -> Exception:
    """``error`` as the exception LiteLLM's proxy answers in the OpenAI error shape, with its
    status (a 400), ``param`` and ``code``."""
    from litellm.proxy._types import ProxyException  # the proxy's module: imported in the proxy

    exception: Exception = ProxyException(
        message=error.message,
        type="invalid_request_error",
        param=error.param,
        code=error.status,
        openai_code=error.code,
    )
    return exception


class StopHook(CustomLogger):  # type: ignore[misc]  # LiteLLM is untyped for mypy (skipped)
    """A LiteLLM callback that applies any number of stop strings itself (see the module's rules).

    - ``stops``: stops applied to every request, besides the request's own (none by default).
    - ``limits``: the bounds on a request's stops (``max_stops``, ``max_stop_length``,
      ``max_stop_chars``) and on an Anthropic stream's events (``max_sse_line_bytes``,
      ``max_sse_event_bytes``), as in the middleware; :class:`RequestLimits` by default.
    - ``include_stop``: keep the stop string at the end of the cut text.
    - ``forward_stop``: also send the request's stops on to the provider (off by default: the
      point is providers that refuse, cap or ignore them).

    LiteLLM runs a callback's ``async_pre_call_hook`` only if the callback's own class defines
    it: a subclass of StopHook must define it too (calling ``super()``).
    """

    def __init__(
        self,
        *,
        stops: Stops = (),
        limits: RequestLimits | None = None,
        include_stop: bool = False,
        forward_stop: bool = False,
    ) -> None:
        super().__init__()
        if limits is not None and not isinstance(limits, RequestLimits):
            raise TypeError(
                f"limits must be a streamstop.server.RequestLimits, got "
                f"{type(limits).__name__}: {limits!r}"
            )
        self.limits = limits if limits is not None else RequestLimits()
        self.stops: tuple[str, ...] = (
            () if stops is None else (stops,) if isinstance(stops, str) else tuple(stops)
        )
        if self.stops:
            StopAutomaton.from_stops(self.stops)  # an invalid stop fails here, not per request
        self.include_stop = bool(include_stop)
        self.forward_stop = bool(forward_stop)

    def __repr__(self) -> str:
        return (
            f"StopHook(stops={list(self.stops)!r}, include_stop={self.include_stop!r}, "
            f"forward_stop={self.forward_stop!r})"
        )

    # -- the request -----------------------------------------------------------------------

    def take_stops(self, data: dict[str, Any], call_type: str) -> _Plan | None:
        """Take the stops out of request ``data`` (in place) and return the plan for its
        response, or ``None`` if there is nothing to cut (another call type, no stops).
        A stop set over :attr:`limits` raises :class:`~streamstop.server.InvalidRequest`."""
        param = _STOP_PARAMS.get(call_type)
        if param is None:
            return None
        # parse_stops reads "stop"; ``param`` names the field in its errors.
        try:
            stops = parse_stops({"stop": data.get(param)}, self.limits, param=param)
        except InvalidRequest as error:
            # The limits here are the hook's, not a streamstop server's flags.
            error.message = _SERVER_SETTING.sub(_hook_setting, error.message)
            raise
        if not self.forward_stop:
            data.pop(param, None)
        stops = tuple(dict.fromkeys((*self.stops, *stops)))  # in order, once each
        if not stops:
            return None
        anthropic = param == "stop_sequences"
        n = 1 if anthropic else _choice_count(data, call_type.endswith("text_completion"))
        return _Plan(stops, n, anthropic)

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        try:
            plan = self.take_stops(data, call_type)
        except InvalidRequest as error:
            raise _proxy_error(error) from None
        if plan is not None:
            metadata = next(
                (data[key] for key in _METADATA_KEYS if isinstance(data.get(key), dict)), None
            )
            if metadata is None:
                metadata = data["litellm_metadata"] = {}
            metadata[_PLAN_KEY] = plan.to_metadata()
        return data

    # -- the response ----------------------------------------------------------------------

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        plan = _Plan.from_request(request_data)
        if plan is None:
            async for item in response:
                yield item
            return
        # Closed with this generator: a client that leaves closes the provider's stream now,
        # not when the garbage collector finds the inner generator.
        async with aclosing(self.cut_stream(response, plan)) as items:
            async for item in items:
                yield item

    async def cut_stream(
        self, source: AsyncIterable[Any], plan: _Plan
    ) -> AsyncGenerator[Any, None]:
        """``source`` (the provider's stream, as LiteLLM yields it) cut by ``plan``; the source
        is closed when the cut is complete, at its end, on an error and on cancellation."""
        automaton = StopAutomaton.from_stops(plan.stops)
        try:
            if plan.anthropic:
                events = FamilyStream(
                    Anthropic(),
                    automaton,
                    n=1,
                    include_stop=self.include_stop,
                    max_line_bytes=self.limits.max_sse_line_bytes,
                    max_event_bytes=self.limits.max_sse_event_bytes,
                )
                async for data in source:
                    if isinstance(data, str):
                        data = data.encode()
                    elif not isinstance(data, (bytes, bytearray, memoryview)):
                        yield data  # not an event of the stream: not ours to judge
                        continue
                    sent = events.feed(bytes(data))
                    if sent:
                        yield sent
                    if events.done:
                        return
                tail = events.flush()
                if tail:
                    yield tail
                return
            chunks: ChunkFilter[Any] = ChunkFilter(
                automaton, n=plan.n, include_stop=self.include_stop
            )
            cuts: dict[int, str] = {}
            async for chunk in source:
                out: Any = chunks.feed(chunk)
                if out is not None:
                    if len(chunks.stop_strings) != len(cuts):  # a choice was cut in this chunk
                        fresh = {i: s for i, s in chunks.stop_strings.items() if i not in cuts}
                        cuts.update(fresh)
                        out = _with_stop_reasons(out, fresh)
                    yield out
                if chunks.done:
                    return
            for tail_chunk in chunks.flush():
                yield tail_chunk
        finally:
            # Shielded: it finishes even when we are cancelled. The provider's stream first.
            await aclose_source(*reversed(_stream_chain(source)))

    def cut_response(self, response: Any, plan: _Plan) -> Any:
        """A whole response cut by ``plan``, in place (and returned): each choice's
        ``message.content`` (chat) or ``text`` (text completion) at its first stop, the cut
        choice ending with ``finish_reason: "stop"`` and ``stop_reason``; an Anthropic message's
        first text block that holds a stop, ending the message there."""
        automaton = StopAutomaton.from_stops(plan.stops)
        if isinstance(response, dict):
            if plan.anthropic:
                cut, fired = Anthropic().cut_whole(response, automaton, self.include_stop)
                if fired:
                    response.clear()
                    response.update(cut)
            return response
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            return response  # a stream, or not a completion: not ours
        for choice in choices:
            message = getattr(choice, "message", None)
            holder, field = (message, "content") if message is not None else (choice, "text")
            found = cut_text(getattr(holder, field, None), automaton, self.include_stop)
            if found is None:
                continue
            text, stop = found
            setattr(holder, field, text)
            choice.finish_reason = "stop"
            choice.stop_reason = stop
        return response

    async def async_post_call_success_hook(
        self, data: dict[str, Any], user_api_key_dict: Any, response: Any
    ) -> Any:
        plan = _Plan.from_request(data)
        return response if plan is None else self.cut_response(response, plan)

    # -- the SDK -----------------------------------------------------------------------------

    async def acompletion(self, **kwargs: Any) -> Any:
        """``litellm.acompletion(**kwargs)`` with its ``stop`` applied by this hook: a stream
        (``stream=True``) is an async iterator of the cut chunks that closes the provider's
        stream at the cut; a whole response is cut. The proxy's hooks do not run in the SDK
        (LiteLLM calls them from its proxy only): this is their twin for code. A stop set over
        :attr:`limits` raises ValueError."""
        import litellm

        return await self._call(litellm.acompletion, "acompletion", kwargs)

    async def atext_completion(self, **kwargs: Any) -> Any:
        """:meth:`acompletion` for ``litellm.atext_completion`` (legacy completions)."""
        import litellm

        return await self._call(litellm.atext_completion, "atext_completion", kwargs)

    async def _call(self, function: Any, call_type: str, kwargs: dict[str, Any]) -> Any:
        try:
            plan = self.take_stops(kwargs, call_type)
        except InvalidRequest as error:
            raise ValueError(error.message) from None
        response = await function(**kwargs)
        if plan is None:
            return response
        if kwargs.get("stream") is True:
            return self.cut_stream(response, plan)
        return self.cut_response(response, plan)


# How deep _stream_chain looks: LiteLLM 1.108 nests four wrappers around the provider's stream.
_MAX_WRAPPERS = 8


def _stream_chain(source: object) -> list[object]:
    """``source`` and the streams it wraps, outermost first, down to the provider's.

    Closing the outermost is not enough in every LiteLLM release: the proxy's boundary and the
    router's ``HiddenParamsAsyncIteratorWrapper`` pass ``aclose`` on (``_source``; ``_inner``
    in 1.94, ``inner`` in 1.108), but a text completion stream (``TextCompletionStreamWrapper``)
    has no close of its own, and its ``completion_stream`` is a generator
    (``_async_streaming``) over another (``OpenAITextCompletion.async_streaming``) over the
    ``openai`` client's stream, neither closing what it reads when it is closed. Each reads a
    local named ``response`` (as a callback's ``async_post_call_streaming_iterator_hook``
    does): the chain is followed through those names and generators' ``response``, and closed
    from the inside out."""
    chain = [source]
    current: Any = source
    for _ in range(_MAX_WRAPPERS):
        frame = getattr(current, "ag_frame", None)
        if frame is not None:
            inner = frame.f_locals.get("response")
        else:
            inner = next(
                (
                    value
                    for name in ("_source", "_inner", "inner", "completion_stream")
                    if (value := _own_attribute(current, name)) is not None
                ),
                None,
            )
        if inner is None or any(inner is seen for seen in chain):
            break
        chain.append(inner)
        current = inner
    return chain


def _own_attribute(obj: object, name: str) -> Any:
    """``obj.name`` if ``obj`` itself has it (a slot or an instance attribute), not one that a
    ``__getattr__`` forwards from what it wraps."""
    try:
        return object.__getattribute__(obj, name)
    except AttributeError:
        return None


def _with_stop_reasons(chunk: Any, stops: Mapping[int, str]) -> Any:
    """``chunk`` with ``stop_reason`` (the stop string, as vLLM writes it) on each choice that
    a stop in ``stops`` (by choice index) cut in it."""
    choices: Any = chunk.get("choices") if isinstance(chunk, Mapping) else chunk.choices
    rewritten = []
    for choice in choices:
        index = choice.get("index") if isinstance(choice, Mapping) else choice.index
        stop = stops.get(index if index is not None else 0)
        rewritten.append(choice if stop is None else _replace(choice, stop_reason=stop))
    return _replace(chunk, choices=rewritten)


stop_hook = StopHook()
"""The ready hook: ``litellm_settings: {callbacks: streamstop.litellm.stop_hook}``."""
