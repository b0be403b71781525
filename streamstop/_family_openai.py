"""OpenAI's chat completions and (legacy) completions as an API family, sans-I/O: :class:`OpenAI`.

Rules of this module (an adapter like the others; the filtering is :mod:`._sse_filter`'s and
:mod:`._chunks`'s, unchanged):

- Paths: ``/v1/chat/completions``, ``/v1/completions`` and the aliases without ``/v1``
  (:data:`OPENAI_ALIASES`: llama.cpp's ``/chat/completions``), all in :data:`OPENAI_PATHS`.
- Requests: the stops are ``stop`` (a string or a list), with ``stop_regex`` and
  ``stop_arm_after`` (:attr:`~streamstop._family.Family.stop_rules`); the fields are checked as
  OpenAI's (``n``, ``stream``, ``stream_options``...: :attr:`Family.openai_fields`); a response
  has ``n`` choices per prompt (a batch of prompts, on completions, has ``n`` each); a stream
  asked with ``stream_options.include_usage`` still ends with a usage chunk after a cut.
- Streams: the filter is an :class:`~streamstop.chat.SSEFilter` (:meth:`OpenAI.stream_filter`,
  once per stream), not :class:`~streamstop._family.FamilyStream`: it keeps its usual-event fast
  path (``ChunkFilter.feed_usual``), so an event that passes costs no call to this adapter.
  Only ``text/event-stream`` is a stream's type (or any type but JSON, asked for a stream).
- Whole responses are cut by :func:`~streamstop._chunks.cut_response` (each choice's
  ``message.content`` or ``text``; ``finish_reason: "stop"`` and ``stop_reason``).
- Errors are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: the
  :class:`~streamstop._family.Family` defaults, which every other family's clients but
  Gemini's read as well. It is also the shape of a path outside every family (the proxy's
  ``forward_other=True``).

>>> family = OpenAI()
>>> family.slots({"prompt": ["a", "b"], "n": 2}), family.include_usage({"stream": True})
(4, False)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._automaton import StopAutomaton, Stops
from ._chunks import cut_response, is_choice_count
from ._family import Family
from ._patterns import StopPatterns
from ._sse_filter import SSEFilter
from ._text import StopRules

__all__ = ["OPENAI_ALIASES", "OPENAI_PATHS", "OpenAI"]

# Paths that serve the OpenAI API without its /v1, and their /v1 twin: llama.cpp routes
# /chat/completions to the handler of /v1/chat/completions (tools/server/server.cpp).
OPENAI_ALIASES: dict[str, str] = {"/chat/completions": "/v1/chat/completions"}

# The paths of the OpenAI family, as FAMILY_PATHS maps the others'.
OPENAI_PATHS: dict[str, str] = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai",
    **dict.fromkeys(OPENAI_ALIASES, "openai"),
}


class OpenAI(Family):
    """OpenAI's ``/v1/chat/completions`` and ``/v1/completions``: SSE of ``data:`` chunks with
    ``choices``, ended by ``data: [DONE]``."""

    name = "openai"
    stop_rules = True
    openai_fields = True
    stream_types = (b"text/event-stream",)

    def slots(self, request: dict[str, Any]) -> int:
        # n was checked with the request (openai_fields): anything else is the default, 1.
        n = request.get("n")
        n = n if is_choice_count(n) else 1
        prompt = request.get("prompt")
        # A legacy completion with a batch of prompts has n choices per prompt (a list of ints
        # is one prompt in tokens).
        if isinstance(prompt, list) and prompt and not all(isinstance(p, int) for p in prompt):
            return n * len(prompt)
        return n

    def include_usage(self, request: dict[str, Any]) -> bool:
        options = request.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def stream_filter(
        self,
        stops: Stops | StopAutomaton,
        *,
        n: int | None = 1,
        include_stop: bool = False,
        include_usage: bool = False,
        max_line_bytes: int | None = None,
        max_event_bytes: int | None = None,
        regex: str | Iterable[str] | StopPatterns | None = None,
        arm_after: str | None = None,
    ) -> SSEFilter:
        return SSEFilter(
            stops,
            n=n,
            include_stop=include_stop,
            include_usage=include_usage,
            max_line_bytes=max_line_bytes,
            max_event_bytes=max_event_bytes,
            regex=regex,
            arm_after=arm_after,
        )

    def cut_whole(
        self, response: Any, automaton: StopAutomaton | StopRules, include_stop: bool
    ) -> tuple[Any, list[str]]:
        if not isinstance(response, dict):
            return response, []
        if isinstance(automaton, StopRules):  # regex stops, a marker: cut_response's own terms
            return cut_response(
                response,
                automaton.automaton,
                include_stop=include_stop,
                regex=automaton.patterns,
                arm_after=automaton.arm_after,
            )
        return cut_response(response, automaton, include_stop=include_stop)
