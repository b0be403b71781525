"""streamstop for LangChain: `StopRunnable`, stop strings for any chat model or runnable.

Many providers cap the number of stops (OpenAI: 4), ignore them, or have none (a runnable that
streams text). Wrapped, a runnable's output is cut at the first of any number of stops:

- ``stream`` / ``astream`` pass each chunk on as soon as it is safe: only text that could still
  become a stop is held back. When a stop is complete the last chunk goes out (its text up to the
  stop, ``response_metadata`` saying which stop fired, see below) and the
  underlying stream is closed at once, so the model stops generating. At its own end, held text
  goes out in a last chunk.
- Which stop fired is said as streamstop's OpenAI paths say it: ``finish_reason: "stop"`` and
  ``stop_reason``, the stop (vLLM's field); ``stop_sequence`` says it too (Anthropic's name).
  A model that ends by itself keeps its own ``response_metadata``.
- ``invoke`` / ``ainvoke`` run the stream and aggregate it (a model that cannot stream gives one
  chunk: cut the same way); ``batch`` / ``abatch`` call them for each input.
- Chunks are ``str`` (a string runnable) or messages whose ``content`` is a string (chat
  models); other chunks (tool call chunks without text, content as lists of blocks) pass
  through untouched. Only the chunk's ``content`` is rewritten; its other fields are kept.
- A ``stop=...`` keyword given to a call is added to the wrapper's stops and kept from the
  wrapped runnable (as the proxy keeps stops from the upstream): pass ``forward_stop=True`` to
  send it on too.

Needs the ``langchain`` extra (``pip install 'streamstop[langchain]'``).

    >>> from langchain_core.language_models.fake_chat_models import FakeListChatModel
    >>> model = with_stops(FakeListChatModel(responses=["Hi!</s>junk"]), ["</s>"])
    >>> reply = model.invoke("hello")
    >>> reply.content, reply.response_metadata["stop_reason"]
    ('Hi!', '</s>')
    >>> "".join(chunk.content for chunk in model.stream("hello"))
    'Hi!'
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from ._extras import missing_extra

try:
    from langchain_core.messages import BaseMessage, BaseMessageChunk, message_chunk_to_message
    from langchain_core.runnables import Runnable, RunnableConfig
except ImportError as error:  # the langchain extra is not installed
    raise ImportError(
        missing_extra("streamstop.langchain", "langchain-core", "langchain")
    ) from error

from ._automaton import StopAutomaton, Stops
from ._buffer import StopBuffer
from ._lifecycle import aclose_source, close_source

__all__ = ["StopRunnable", "with_stops"]


def _text(chunk: Any) -> str | None:
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, BaseMessage) and isinstance(chunk.content, str):
        return chunk.content
    return None


def _with_text(chunk: Any, text: str, stop: str | None = None) -> Any:
    if isinstance(chunk, str):
        return text
    update: dict[str, Any] = {"content": text}
    if stop is not None:
        update["response_metadata"] = {
            **chunk.response_metadata,
            "finish_reason": "stop",
            "stop_reason": stop,
            "stop_sequence": stop,
        }
    return chunk.model_copy(update=update)


class _Cutter:
    """The sans-I/O part: chunks in, chunks out, ``stopped`` once a stop is complete."""

    def __init__(self, automaton: StopAutomaton, include_stop: bool) -> None:
        self._buffer = StopBuffer(automaton, include_stop=include_stop)
        self._template: Any = None
        self.stopped = False

    def feed(self, chunk: Any) -> Any | None:
        text = _text(chunk)
        if text is None or not text:
            return chunk  # no text of ours: a tool call chunk, a list of blocks...
        self._template = chunk
        piece = self._buffer.feed(text)
        if self._buffer.stopped:
            self.stopped = True
            return _with_text(chunk, piece, self._buffer.stop_string or "")
        if piece == text:
            return chunk
        if not piece:
            return None
        return _with_text(chunk, piece)

    def flush(self) -> Any | None:
        tail = self._buffer.flush()
        if tail and self._template is not None:
            return _with_text(self._template, tail)
        return None


def _aggregate(chunks: list[Any]) -> Any:
    if not chunks:
        return ""
    if all(isinstance(chunk, str) for chunk in chunks):
        return "".join(chunks)
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    if isinstance(total, BaseMessageChunk):
        return message_chunk_to_message(total)
    return total


class StopRunnable(Runnable[Any, Any]):
    """``bound`` with its output cut at the first of ``stops`` (see the module's rules).

    ``include_stop=True`` keeps the stop in the output. Build it with :func:`with_stops`.
    """

    def __init__(
        self,
        bound: Runnable[Any, Any],
        stops: Stops | StopAutomaton,
        *,
        include_stop: bool = False,
        forward_stop: bool = False,
    ) -> None:
        if not isinstance(bound, Runnable):
            raise TypeError(
                f"bound must be a LangChain Runnable (a chat model, a chain...), got "
                f"{type(bound).__name__}: {bound!r}"
            )
        self.bound = bound
        self.automaton = StopAutomaton.from_stops(stops)
        self.include_stop = bool(include_stop)
        self.forward_stop = bool(forward_stop)

    def __repr__(self) -> str:
        return f"StopRunnable({self.bound!r}, stops={list(self.automaton.stops)!r})"

    @property
    def InputType(self) -> Any:
        return self.bound.InputType

    @property
    def OutputType(self) -> Any:
        return self.bound.OutputType

    def _cutter(self, kwargs: dict[str, Any]) -> tuple[_Cutter, dict[str, Any]]:
        automaton = self.automaton
        extra = kwargs.get("stop")
        if extra:
            automaton = StopAutomaton.from_stops(
                [*automaton.stops, *([extra] if isinstance(extra, str) else extra)]
            )
        if not self.forward_stop:
            kwargs = {key: value for key, value in kwargs.items() if key != "stop"}
        return _Cutter(automaton, self.include_stop), kwargs

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> Iterator[Any]:
        cutter, kwargs = self._cutter(kwargs)
        source = self.bound.stream(input, config, **kwargs)
        try:
            for chunk in source:
                out = cutter.feed(chunk)
                if out is not None:
                    yield out
                if cutter.stopped:
                    return
            tail = cutter.flush()
            if tail is not None:
                yield tail
        finally:
            close_source(source)  # the model stops generating

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> AsyncIterator[Any]:
        cutter, kwargs = self._cutter(kwargs)
        source = self.bound.astream(input, config, **kwargs)
        try:
            async for chunk in source:
                out = cutter.feed(chunk)
                if out is not None:
                    yield out
                if cutter.stopped:
                    return
            tail = cutter.flush()
            if tail is not None:
                yield tail
        finally:
            await aclose_source(source)  # shielded: it finishes even when we are cancelled

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return _aggregate(list(self.stream(input, config, **kwargs)))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return _aggregate([chunk async for chunk in self.astream(input, config, **kwargs)])


def with_stops(
    runnable: Runnable[Any, Any],
    stops: Stops | StopAutomaton,
    *,
    include_stop: bool = False,
    forward_stop: bool = False,
) -> StopRunnable:
    """``runnable`` with its output cut at the first of ``stops``: a :class:`StopRunnable`."""
    return StopRunnable(runnable, stops, include_stop=include_stop, forward_stop=forward_stop)
