"""ChunkFilter and truncate_response: stop strings applied to OpenAI chat and completion chunks.

Rules of this module (everything about chunks and choices lives here; sans-I/O, no anyio):

- One :class:`~streamstop.StopBuffer` per choice ``index``, created when the index is first
  seen; choices are independent (``n > 1`` works). The text field is ``choices[i].delta.content``
  for chat chunks and ``choices[i].text`` for legacy completions; nothing else is rewritten.
- A chunk whose text comes out unchanged is returned *as it is* (the same object). A chunk that
  changes is a copy: dicts are copied where rewritten, ``openai`` client objects (pydantic
  models) through their ``model_copy``. Caller's chunks are never mutated.
- Text that could still become a stop is held and goes out with a later chunk of its choice.
  With stop ``"</s>"``, chunks ``"Hi<"`` and ``"/s>junk"`` become ``"Hi"`` and ``""`` with
  ``finish_reason: "stop"``; chunks ``"Hi<"`` and ``"3"`` become ``"Hi"`` and ``"<3"``. A
  choice whose text is all held and that carries nothing else is left out of its chunk.
- Once a choice completes a stop, that chunk carries its last text, ``finish_reason: "stop"``
  and ``stop_reason``: the stop that fired (vLLM's field; a whole response's cut choice says it
  the same way). A choice not cut keeps the ``stop_reason`` its upstream sent, if any. Later
  chunks of that choice are dropped (a chunk left with no choices and no ``usage`` is
  dropped whole). When the upstream finishes a choice itself (``"length"``, ``"stop"``), the
  held text is released into that chunk, before its ``finish_reason``.
- At the end of the upstream, held text of unfinished choices goes out in synthesized chunks
  (one per choice, built from the last chunk of that choice, ``finish_reason: null``).
- Chunks without text for a live choice (the role, tool calls) and chunks without choices
  (usage, errors) pass through unchanged and in order.
- Closing early: with ``n`` (the number of choices requested) the filter is :attr:`done` once
  all ``n`` choices have finished and at least one was cut by a stop; the upstream may then be
  closed, the model stops generating. Without ``n`` there is no telling whether another choice
  will come, so the stream runs to the upstream's end (the output is the same, only later).
  An early close loses what the upstream would have sent after: a final ``usage`` chunk.

Logprobs are passed along with the chunk they came in and are not realigned with the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeGuard, TypeVar

from ._automaton import StopAutomaton, Stops
from ._buffer import StopBuffer
from ._patterns import StopPatterns, checked_rules
from ._text import find_stop

__all__ = [
    "NOT_USUAL",
    "ChunkFilter",
    "ChunkT",
    "check_n",
    "cut_response",
    "is_choice_count",
    "truncate_response",
]

ChunkT = TypeVar("ChunkT")

# What ChunkFilter.feed_usual answers for a chunk that is not the usual one.
NOT_USUAL: Any = object()


def _get(obj: Any, name: str) -> Any:
    if type(obj) is dict:  # parsed JSON, the usual: no ABC check
        return obj.get(name)
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _choice_fields(choice: Any) -> tuple[Any, Any, Any]:
    """``(delta, text, finish_reason)`` of a choice: a chat chunk's delta and its content, or no
    delta and a legacy completion's text. One call per choice on the hot path, not five."""
    if type(choice) is dict:
        get = choice.get
        delta = get("delta")
        if delta is None:
            return None, get("text"), get("finish_reason")
        text = delta.get("content") if type(delta) is dict else _get(delta, "content")
        return delta, text, get("finish_reason")
    delta = _get(choice, "delta")
    text = _get(delta, "content") if delta is not None else _get(choice, "text")
    return delta, text, _get(choice, "finish_reason")


def _replace(obj: Any, **changes: Any) -> Any:
    """A copy of ``obj`` with fields changed: a new dict, or a pydantic ``model_copy``."""
    if type(obj) is dict or isinstance(obj, Mapping):
        return {**obj, **changes}
    model_copy = getattr(obj, "model_copy", None)
    if model_copy is None:
        raise TypeError(
            f"chunks must be dicts or pydantic models (like the openai client's), "
            f"got {type(obj).__name__}: {obj!r}"
        )
    return model_copy(update=changes)


def _blank_like(obj: Any, **fields: Any) -> Any:
    """A new object of ``obj``'s kind holding only ``fields``."""
    if isinstance(obj, Mapping):
        return dict(fields)
    model_validate = getattr(type(obj), "model_validate", None)
    if model_validate is None:
        return _replace(obj, **fields)
    return model_validate(fields)


def _set_fields(obj: Any) -> set[str]:
    """The names of the fields of ``obj`` that are not ``None`` (none for ``None``)."""
    if obj is None:
        return set()
    if isinstance(obj, Mapping):
        return {key for key, value in obj.items() if value is not None}
    model_dump = getattr(obj, "model_dump", None)
    if model_dump is None:
        return {"<unknown>"}
    return set(model_dump(exclude_none=True))


def _cut_fields(stop: str) -> dict[str, str]:
    """The fields of a choice that a stop cut, streamed or whole: ``finish_reason: "stop"``, as
    OpenAI's own stops, and ``stop_reason``, the stop itself, as vLLM's OpenAI server says it
    (OpenAI's API has no field for it). The one place a cut says which stop fired."""
    return {"finish_reason": "stop", "stop_reason": stop}


def is_choice_count(n: object) -> TypeGuard[int]:
    """Whether ``n`` is a number of choices: a positive int (not a bool). The one rule for ``n``,
    in the ChunkFilter API (:func:`check_n`) and in requests (``server._request.parse_n``)."""
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def check_n(n: int | None) -> int | None:
    """``n`` itself if it is ``None`` or a positive int (a number of choices), else ValueError."""
    if n is None:
        return None
    if not is_choice_count(n):
        raise ValueError(f"n must be None or a positive int (the number of choices), got {n!r}")
    return n


class ChunkFilter(Generic[ChunkT]):
    """Sans-I/O stop filter for a stream of OpenAI chat or completion chunks.

    Chunks are dicts (parsed SSE JSON) or the ``openai`` client's chunk objects:

    >>> chunks = ChunkFilter(["</s>"], n=1)
    >>> chunks.feed({"choices": [{"index": 0, "delta": {"content": "Hi<"}}]})
    {'choices': [{'index': 0, 'delta': {'content': 'Hi'}}]}
    >>> out = chunks.feed({"choices": [{"index": 0, "delta": {"content": "/s>junk"}}]})
    >>> (cut,) = out["choices"]
    >>> cut
    {'index': 0, 'delta': {'content': ''}, 'finish_reason': 'stop', 'stop_reason': '</s>'}
    >>> chunks.done, chunks.stop_strings
    (True, {0: '</s>'})

    :meth:`feed` returns the chunk to send now, or ``None`` when nothing is left of it;
    :meth:`flush` ends the input and returns chunks for the text still held.
    """

    __slots__ = (
        "_arm_after",
        "_automaton",
        "_buffers",
        "_done",
        "_finished",
        "_flushed",
        "_include_stop",
        "_live",
        "_n",
        "_patterns",
        "_stop_patterns",
        "_stop_strings",
        "_templates",
    )

    def __init__(
        self,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = None,
        include_stop: bool = False,
        regex: str | Iterable[str] | StopPatterns | None = None,
        max_match_chars: int | None = None,
        arm_after: str | None = None,
    ) -> None:
        self._automaton = StopAutomaton.from_stops(stops)
        # Regex stops and the marker: StopBuffer's (built once here for every choice).
        self._patterns, self._arm_after = checked_rules(regex, max_match_chars, arm_after)
        self._stop_patterns: dict[int, str] = {}
        self._n = check_n(n)
        self._include_stop = bool(include_stop)
        self._buffers: dict[int, StopBuffer] = {}
        # The buffers of the choices not finished: one lookup tells the usual chunk's choice is
        # known and live.
        self._live: dict[int, StopBuffer] = {}
        # The last chunk and choice seen for each choice index: templates for flush().
        self._templates: dict[int, tuple[Any, Any]] = {}
        self._finished: set[int] = set()
        self._stop_strings: dict[int, str] = {}
        self._flushed = False
        self._done = False  # kept by _finish: read after every chunk, so not computed there

    def __repr__(self) -> str:
        return (
            f"<ChunkFilter n={self._n!r}, finished={sorted(self._finished)!r}, "
            f"stops={list(self._automaton.stops)!r}>"
        )

    @property
    def automaton(self) -> StopAutomaton:
        return self._automaton

    @property
    def n(self) -> int | None:
        """The number of choices expected, if known."""
        return self._n

    @property
    def stop_strings(self) -> dict[int, str]:
        """The stop that cut each choice, by choice index (choices not cut are absent)."""
        return dict(self._stop_strings)

    @property
    def stop_patterns(self) -> dict[int, str]:
        """The regex stop that cut each choice so cut, by choice index (its match is in
        :attr:`stop_strings`)."""
        return dict(self._stop_patterns)

    @property
    def finished(self) -> frozenset[int]:
        """Indexes of the choices that will emit nothing more (cut, or finished upstream)."""
        return frozenset(self._finished)

    # Read after every chunk: a getter in C (no Python frame).
    if TYPE_CHECKING:

        @property
        def done(self) -> bool:
            """Whether the upstream may be closed: all ``n`` choices finished, at least one cut."""

    else:
        done = property(
            attrgetter("_done"),
            doc="Whether the upstream may be closed: all ``n`` choices finished, at least one cut.",
        )

    def _finish(self, index: int, stop: str | None = None) -> None:
        """Choice ``index`` will emit nothing more (cut by ``stop``, if given)."""
        self._finished.add(index)
        self._live.pop(index, None)
        if stop is not None:
            self._stop_strings[index] = stop
        self._done = (
            self._n is not None and bool(self._stop_strings) and len(self._finished) >= self._n
        )

    def held(self, index: int) -> str:
        """The text held back for choice ``index`` (``""`` if none)."""
        buffer = self._buffers.get(index)
        return buffer.held if buffer is not None else ""

    def feed(self, chunk: ChunkT) -> ChunkT | None:
        """Take the next chunk; return it, rewritten if need be, or ``None`` to drop it."""
        usual = self.feed_usual(chunk)
        if usual is not NOT_USUAL:
            result: ChunkT | None = usual
            return result
        if self._flushed:
            raise RuntimeError(f"ChunkFilter.feed({chunk!r}) called after flush()")
        choices = _get(chunk, "choices")
        if not isinstance(choices, list) or not choices:
            return chunk
        kept: list[Any] = []
        changed = False
        for choice in choices:
            index = choice.get("index") if type(choice) is dict else _get(choice, "index")
            if index is None:
                index = 0
            if type(index) is not int and (not isinstance(index, int) or isinstance(index, bool)):
                kept.append(choice)  # not ours to judge
                continue
            if index in self._finished:
                changed = True  # past the end of its choice: dropped
                continue
            rewritten = self._feed_choice(index, chunk, choice)
            changed = changed or rewritten is not choice
            if rewritten is not None:
                kept.append(rewritten)
        if not changed:
            return chunk
        if not kept and _get(chunk, "usage") is None:
            return None
        return _replace(chunk, choices=kept)  # type: ignore[no-any-return]

    def feed_usual(
        self, chunk: Any, source: Any = None, reread: Callable[[Any], Any] | None = None
    ) -> Any:
        """:meth:`feed` of the usual chunk: a dict (parsed JSON) of one choice, live, with text
        and no ``finish_reason``; :data:`NOT_USUAL` for any other chunk, nothing done.

        Besides the structure and the text, it reads only the choice's index, and only if it
        is an int: a reader that may read integers beyond 64 bits as floats (``loads_lossy``)
        finds the same usual chunks. Such a reader passes ``reread``: before the chunk is kept
        (as the template of its choice) or rewritten, ``reread(source)`` returns it read
        exactly (``None``: it was), so that what is written later holds the exact values. An
        unchanged chunk is returned as given."""
        if type(chunk) is not dict:
            return NOT_USUAL
        choices = chunk.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return NOT_USUAL
        choice = choices[0]
        if type(choice) is not dict or choice.get("finish_reason") is not None:
            return NOT_USUAL
        delta = choice.get("delta")
        if type(delta) is dict:
            text = delta.get("content")
        else:  # a legacy completion's text, or not the usual chunk
            text = choice.get("text") if delta is None else None
        index = choice.get("index", 0)
        if type(text) is not str or not text or type(index) is not int:
            return NOT_USUAL
        buffer = self._live.get(index)
        if buffer is None:  # a new choice, one finished, or after flush
            return NOT_USUAL
        piece = buffer.feed(text)
        unchanged = piece == text and not buffer.stopped
        # The template is needed only while text is held (see flush): an unchanged chunk after
        # which nothing is held need not be kept (nor read again).
        if unchanged and buffer._at_root:
            return chunk
        given = chunk
        if reread is not None:
            exact = reread(source)
            if exact is not None:
                chunk = exact  # the same structure and text: only numbers differ
                choice = chunk["choices"][0]
                delta = choice.get("delta")
        self._templates[index] = (chunk, choice)
        if unchanged:
            return given
        rewritten = self._after_feed(buffer, index, choice, delta, text, None, piece)
        if rewritten is None and chunk.get("usage") is None:
            return None
        return {**chunk, "choices": [] if rewritten is None else [rewritten]}

    def _feed_choice(self, index: int, chunk: Any, choice: Any) -> Any:
        buffer = self._buffers.get(index)
        if buffer is None:
            buffer = self._buffers[index] = self._live[index] = StopBuffer(
                self._automaton,
                include_stop=self._include_stop,
                regex=self._patterns,
                arm_after=self._arm_after,
            )
        self._templates[index] = (chunk, choice)
        delta, text, finish_reason = _choice_fields(choice)
        piece: str | None = None
        if isinstance(text, str) and text:
            piece = buffer.feed(text)
        return self._after_feed(buffer, index, choice, delta, text, finish_reason, piece)

    def _after_feed(
        self,
        buffer: StopBuffer,
        index: int,
        choice: Any,
        delta: Any,
        text: Any,
        finish_reason: Any,
        piece: str | None,
    ) -> Any:
        """The choice to send once its text (if any) went into its buffer, giving ``piece``."""
        if piece is not None and buffer.stopped:
            stop = buffer.stop_string or ""
            pattern = buffer.stop_pattern
            if pattern is not None:
                self._stop_patterns[index] = pattern
            self._finish(index, stop)
            # stop_reason names the stop that fired: for a regex stop, the pattern.
            return self._rewrite(choice, delta, piece, "stop", pattern or stop)
        if finish_reason is not None:
            self._finish(index)
            tail = buffer.flush()
            if tail:
                piece = (piece or "") + tail
        if piece is None or piece == text:
            return choice
        if not piece and finish_reason is None and _set_fields(delta) <= {"content"}:
            return None  # all of its text is held, and it carries nothing else
        return self._rewrite(choice, delta, piece, finish_reason)

    @staticmethod
    def _rewrite(
        choice: Any, delta: Any, text: str, finish_reason: Any, stop: str | None = None
    ) -> Any:
        """``choice`` with its text replaced; with ``stop``, the choice that ``stop`` cut: it
        says so in ``finish_reason: "stop"`` and ``stop_reason`` (see :func:`_cut_fields`)."""
        changes: dict[str, Any]
        if stop is not None:
            changes = _cut_fields(stop)
        else:
            changes = {} if finish_reason is None else {"finish_reason": finish_reason}
        if delta is not None:
            return _replace(choice, delta=_replace(delta, content=text), **changes)
        return _replace(choice, text=text, **changes)

    def flush(self) -> list[ChunkT]:
        """End of the upstream: chunks carrying the text still held, by choice index.

        Calling it twice is harmless (the second call returns ``[]``).
        """
        if self._flushed:
            return []
        self._flushed = True
        out: list[ChunkT] = []
        for index in sorted(self._buffers):
            if index in self._finished:
                continue
            self._finish(index)
            tail = self._buffers[index].flush()
            if tail:
                out.append(self._synthesize(index, tail))
        return out

    def _synthesize(self, index: int, text: str) -> Any:
        chunk, choice = self._templates[index]
        delta = _get(choice, "delta")
        if delta is not None:
            choice = _replace(
                choice,
                delta=_blank_like(delta, content=text),
                finish_reason=None,
                logprobs=None,
            )
        else:
            choice = _replace(choice, text=text, finish_reason=None, logprobs=None)
        if _get(chunk, "usage") is not None:
            return _replace(chunk, choices=[choice], usage=None)
        return _replace(chunk, choices=[choice])


# -- whole responses ---------------------------------------------------------------------------


def truncate_response(
    response: Mapping[str, Any],
    stops: Stops | StopAutomaton,
    *,
    include_stop: bool = False,
    regex: str | Iterable[str] | StopPatterns | None = None,
    max_match_chars: int | None = None,
    arm_after: str | None = None,
) -> dict[str, Any]:
    """Cut each choice of a non-streaming chat or completion response at its first stop.

    Returns a new dict (the argument is not modified); a choice that was cut gets
    ``finish_reason: "stop"`` and ``stop_reason``, the stop that cut it; the others are left as
    they are. ``message.content`` (chat) or ``text`` (completions) is cut.

    >>> truncate_response({"choices": [{"index": 0, "text": "Hi</s>junk"}]}, "</s>")
    {'choices': [{'index': 0, 'text': 'Hi', 'finish_reason': 'stop', 'stop_reason': '</s>'}]}
    """
    return cut_response(
        response,
        stops,
        include_stop=include_stop,
        regex=regex,
        max_match_chars=max_match_chars,
        arm_after=arm_after,
    )[0]


def cut_response(
    response: Mapping[str, Any],
    stops: Stops | StopAutomaton,
    *,
    include_stop: bool = False,
    regex: str | Iterable[str] | StopPatterns | None = None,
    max_match_chars: int | None = None,
    arm_after: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """:func:`truncate_response`, and the stop that cut each choice that was cut, in order
    (for a regex stop, the text it matched). ``regex``, ``max_match_chars`` and ``arm_after``
    are :class:`~streamstop.StopBuffer`'s.

    >>> cut_response({"choices": [{"index": 0, "text": "a.b"}, {"text": "c"}]}, ".")[1]
    ['.']
    """
    automaton = StopAutomaton.from_stops(stops)
    find: Callable[[str], Any] = automaton.find
    if regex is not None or arm_after is not None or max_match_chars is not None:
        patterns, marker = checked_rules(regex, max_match_chars, arm_after)

        def find(text: str) -> Any:
            return find_stop(text, automaton, regex=patterns, arm_after=marker)

    choices = response.get("choices")
    if not isinstance(choices, list):
        return dict(response), []
    fired: list[str] = []
    new_choices: list[Any] = []
    for choice in choices:
        if not isinstance(choice, Mapping):
            new_choices.append(choice)
            continue
        message = choice.get("message")
        text = message.get("content") if isinstance(message, Mapping) else choice.get("text")
        match = find(text) if isinstance(text, str) else None
        if match is not None:
            fired.append(match.stop)
            cut = str(text)[: match.end if include_stop else match.start]
            if isinstance(message, Mapping):
                choice = {
                    **choice,
                    "message": {**message, "content": cut},
                    **_cut_fields(match.pattern or match.stop),
                }
            else:
                choice = {**choice, "text": cut, **_cut_fields(match.pattern or match.stop)}
        new_choices.append(choice)
    return {**response, "choices": new_choices}, fired
