"""Text stitched on text, charged in tokens: the layout behind a `Stitcher` that was given text.

Everything that decides where text chunks go lives in this file. The rules:
- Overlaps are found on characters, so they are found wherever the splitter cut (mid-word,
  before a newline that a BPE tokenizer would merge with the punctuation before it). The
  context is a list of *segments*, pieces of text joined by the separator.
- `order="retrieval"`: a chunk extends the last segment by what follows its longest
  character overlap with it, if that overlap has at least `min_overlap_chars` characters
  (quotes, punctuation and short words are not merged by coincidence); otherwise it starts a
  new segment after the separator.
- `order="document"`: a chunk that knows its document and start offset is laid out there.
  Segments of one document stay in position order, and documents in the order their first
  chunk came. A chunk that overlaps or touches segments of its document (by offsets, checked
  against the text: the characters both hold must be equal) merges with them into one
  segment, and the separators between them go; a chunk inside a segment is taken at no cost;
  a chunk whose offsets disagree with the text, or that has none, is a segment of its own at
  the end. Overlaps proven by offsets need no minimum length.
- The cost of a chunk is what it changes in the count of the whole context's tokens. Each
  change is an edit at one place (text added at the end of a segment, a separator replaced by
  the text of a gap, a new segment between two others); its cost is the difference in the
  token count of a window of _WINDOW characters either side of the edit, before and after, so
  the tokens the tokenizer merges across a seam are counted, and a chunk costs a few small
  encodings, not an encoding of the context.
- Exactness: near the end of the budget (within 16 tokens + 1% of it, either side, plus 2 for
  every seam charged by windows since the last exact count, in case a tokenizer merges past
  the window: a word longer than it), a chunk is charged by encoding the whole context it
  would make, and taken only if that
  count fits. So the text returned never costs more than the budget, and what was charged is
  that count up to the windowed seams since (benchmarks/ragstitch_real.py measures the gap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ._chunk import TextInfo
from ._overlap import overlap_native
from ._result import Segment

__all__ = ["DEFAULT_MIN_OVERLAP_CHARS", "Order", "Placement", "TextLayout"]

Order = Literal["retrieval", "document"]

#: In retrieval order, overlaps shorter than this many characters are not merged. Measured by
#: benchmarks/ragstitch_real.py on chunks that are not neighbours: in a novel none share more
#: than 9 characters (1 character: a quote or a newline, in 1 pair of 5 to 10); in the Python
#: Reference, which repeats its own sentences, 20 of 37,442 pairs of 1000-character chunks
#: share 32 or more, 13 of 276,150 of 400, 4 of 1,206,702 of 200.
DEFAULT_MIN_OVERLAP_CHARS = 32
# Characters of context each side of an edit when it is charged. A seam changes the tokens
# around it only as far as the tokenizer's pre-tokens reach: a word, a run of spaces.
_WINDOW = 64


def _margin(budget: int, seams: int) -> int:
    return 16 + budget // 100 + 2 * seams


class _Seg:
    """A segment: its text, where text[0] sits in its document, and the chunks it holds."""

    __slots__ = ("key", "members", "origin", "placed", "source", "text")

    def __init__(self, key: object, source: object, origin: int, placed: bool, text: str) -> None:
        self.key = key
        self.source = source
        self.origin = origin
        self.placed = placed
        self.text = text
        # (record index, start in document coordinates, length in characters)
        self.members: list[tuple[int, int, int]] = []

    @property
    def end(self) -> int:
        return self.origin + len(self.text)


@dataclass(frozen=True)
class Placement:
    """What adding a chunk would do: replace segments `[first, last)` with `segment`."""

    first: int
    last: int
    segment: _Seg | None  # None: nothing changes (empty, or contained in the context)
    member: tuple[int, int] | None  # (start in document coordinates, length)
    edits: tuple[tuple[str, str, str, str], ...]  # (left, old, new, right)
    added_chars: int
    separators: int  # separators added (negative when a chunk bridges a gap)
    shared: tuple[str, ...] = ()  # the pieces of the chunk already in the context


class TextLayout:
    """The segments of a text context and what they were charged. No I/O."""

    def __init__(
        self,
        count: Callable[[str], int],
        separator: str,
        min_overlap_chars: int,
        order: Order,
    ) -> None:
        self._count = count
        self._sep = separator
        self.separator_tokens = count(separator) if separator else 0
        self._min = min_overlap_chars
        self._order = order
        self._segs: list[_Seg] = []
        self.charged = 0
        self.covered = 0
        self.exact_counts = 0
        self._seams = 0  # edits charged by windows since the last exact count

    @property
    def text(self) -> str:
        return self._sep.join(seg.text for seg in self._segs)

    # -- planning ------------------------------------------------------------------------------

    def plan(self, info: TextInfo) -> Placement:
        text = info.text
        if not text:
            return Placement(0, 0, None, None, (), 0, 0)
        if self._order == "document" and info.source is not None and info.start is not None:
            placed = self._plan_placed(info.source, info.start, text)
            if placed is not None:
                return placed
            return self._plan_new(object(), info.source, text)
        if self._order == "document" and self._segs and self._segs[-1].placed:
            # An unplaced chunk is never merged into a document's text by a character overlap.
            return self._plan_new(object(), info.source, text)
        return self._plan_appended(text)

    def _plan_new(self, key: object, source: object, text: str) -> Placement:
        """A segment of its own at the end of the context."""
        segs = self._segs
        seg = _Seg(key, source, 0, False, text)
        if not segs:
            return Placement(0, 0, seg, (0, len(text)), (("", "", text, ""),), len(text), 0)
        edit = (segs[-1].text[-_WINDOW:], "", self._sep + text, "")
        n = len(segs)
        return Placement(n, n, seg, (0, len(text)), (edit,), len(text), 1)

    def _plan_appended(self, text: str) -> Placement:
        """Retrieval order: extend the last segment by what follows the overlap, or start one."""
        segs = self._segs
        if not segs:
            return self._plan_new(object(), None, text)
        last = segs[-1]
        # Overlaps are searched only in the last segment, and no longer than the chunk.
        k = overlap_native(last.text, text)
        if k < self._min:
            return self._plan_new(object(), None, text)
        start = last.end - k
        if k == len(text):
            return Placement(0, 0, None, (start, len(text)), (), 0, 0, (text,))
        seg = _Seg(last.key, last.source, last.origin, last.placed, last.text + text[k:])
        seg.members = last.members
        n = len(segs)
        edit = (last.text[-_WINDOW:], "", text[k:], "")
        return Placement(n - 1, n, seg, (start, len(text)), (edit,), len(text) - k, 0, (text[:k],))

    def _plan_placed(self, source: object, start: int, text: str) -> Placement | None:
        """Document order; `None` if the offsets disagree with the text already laid out."""
        segs = self._segs
        end = start + len(text)
        first = last = -1  # the range of the document's segments that this chunk touches
        insert = -1  # where a new segment of this document would go
        doc_end = -1
        shared: list[str] = []
        for i, seg in enumerate(segs):
            if not (seg.placed and seg.key == source):
                continue
            doc_end = i + 1
            if seg.end < start:
                continue
            if seg.origin > end:
                if insert < 0:
                    insert = i
                continue
            low, high = max(start, seg.origin), min(end, seg.end)
            piece = text[low - start : high - start]
            if piece != seg.text[low - seg.origin : high - seg.origin]:
                return None
            shared.append(piece)
            if first < 0:
                first = i
            last = i + 1
        sep = self._sep
        if first < 0:
            seg = _Seg(source, source, start, True, text)
            at = insert if insert >= 0 else (doc_end if doc_end >= 0 else len(segs))
            before = segs[at - 1] if at > 0 else None
            after = segs[at] if at < len(segs) else None
            edit = (
                before.text[-_WINDOW:] if before else "",
                sep if before and after else "",
                (sep if before else "") + text + (sep if after else ""),
                after.text[:_WINDOW] if after else "",
            )
            added = 1 if before is not None or after is not None else 0
            return Placement(at, at, seg, (start, len(text)), (edit,), len(text), added)
        head, tail = segs[first], segs[last - 1]
        if last - first == 1 and head.origin <= start and end <= head.end:
            return Placement(0, 0, None, (start, len(text)), (), 0, 0, (text,))
        origin = min(start, head.origin)
        pieces: list[str] = []
        edits: list[tuple[str, str, str, str]] = []
        added = 0
        if start < head.origin:
            new = text[: head.origin - start]
            left = segs[first - 1].text[-_WINDOW:] + sep if first > 0 else ""
            edits.append((left, "", new, head.text[:_WINDOW]))
            pieces.append(new)
            added += len(new)
        pieces.append(head.text)
        members = list(head.members)
        for i in range(first + 1, last):
            prev, seg = segs[i - 1], segs[i]
            gap = text[prev.end - start : seg.origin - start]
            edits.append((prev.text[-_WINDOW:], sep, gap, seg.text[:_WINDOW]))
            pieces.append(gap)
            pieces.append(seg.text)
            members.extend(seg.members)
            added += len(gap)
        if end > tail.end:
            new = text[tail.end - start :]
            right = sep + segs[last].text[:_WINDOW] if last < len(segs) else ""
            edits.append((tail.text[-_WINDOW:], "", new, right))
            pieces.append(new)
            added += len(new)
        merged = _Seg(source, source, origin, True, "".join(pieces))
        merged.members = members
        return Placement(
            first,
            last,
            merged,
            (start, len(text)),
            tuple(edits),
            added,
            -(last - first - 1),
            tuple(p for p in shared if p),
        )

    # -- charging and applying -----------------------------------------------------------------

    def estimate(self, placement: Placement) -> int:
        """What the placement changes in the context's token count, from windows around edits."""
        count = self._count
        return sum(
            count(left + new + right) - count(left + old + right)
            for left, old, new, right in placement.edits
        )

    def needs_exact(self, estimate: int, budget: int) -> bool:
        """Whether a chunk with this estimated cost must be charged by an exact count."""
        return abs(self.charged + estimate - budget) <= _margin(budget, self._seams)

    def exact(self, placement: Placement) -> int:
        """The token count of the whole context the placement would make."""
        segs = self._segs
        texts = [seg.text for seg in segs[: placement.first]]
        if placement.segment is not None:
            texts.append(placement.segment.text)
        texts.extend(seg.text for seg in segs[placement.last :])
        self.exact_counts += 1
        return self._count(self._sep.join(texts))

    def apply(self, placement: Placement, index: int, cost: int, exact: bool) -> None:
        """Lay the chunk out (record `index`) and charge `cost`; `exact` if it was counted."""
        self.charged += cost
        self._seams = 0 if exact else self._seams + len(placement.edits)
        self.covered += placement.added_chars
        segment = placement.segment
        member = placement.member
        if segment is not None:
            self._segs[placement.first : placement.last] = [segment]
            segment.members = [*segment.members]
        if member is None:
            return
        holder = segment if segment is not None else self._holder(member[0], member[1])
        holder.members.append((index, member[0], member[1]))

    def _holder(self, start: int, length: int) -> _Seg:
        # Contained chunk: the placement was planned against the current segments, so one of
        # them holds [start, start + length); only the last one can in retrieval order.
        if self._order == "retrieval":
            return self._segs[-1]
        for seg in self._segs:
            if seg.placed and seg.origin <= start and start + length <= seg.end:
                return seg
        return self._segs[-1]

    # -- provenance ----------------------------------------------------------------------------

    def locate(self) -> tuple[dict[int, tuple[int, int]], tuple[Segment, ...]]:
        """The character span in `text` of every laid-out chunk, and the segments."""
        spans: dict[int, tuple[int, int]] = {}
        segments: list[Segment] = []
        pos = 0
        for seg in self._segs:
            for index, start, length in seg.members:
                begin = pos + start - seg.origin
                spans[index] = (begin, begin + length)
            ordered = sorted(seg.members, key=lambda m: (m[1], m[0]))
            segments.append(
                Segment(
                    text=seg.text,
                    chars=(pos, pos + len(seg.text)),
                    records=tuple(m[0] for m in ordered),
                    source=seg.source,
                    start=seg.origin if seg.placed else None,
                )
            )
            pos += len(seg.text) + len(self._sep)
        return spans, tuple(segments)
