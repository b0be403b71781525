"""Filter a plain (synchronous) token iterator with SyncStopStream.

The "model" hands out raw bytes, three at a time, so a multi-byte character arrives cut in two:
the filter decodes it whole and cuts at the stop.

Install, from a clone:   pip install -e .
Install, once published: pip install streamstop
Start:                   nothing (offline: a generator stands in for the model)
Run:                     python examples/sync_stream.py
"""

from __future__ import annotations

from collections.abc import Iterator

from streamstop import SyncStopStream


def model_tokens() -> Iterator[bytes]:
    # Some servers hand out raw bytes per token; a multi-byte character may be cut in two.
    answer = "Voilà: the café opens at 9.\n\nUser: and on Sundays?".encode()
    for start in range(0, len(answer), 3):
        yield answer[start : start + 3]


def main() -> None:
    with SyncStopStream(model_tokens(), "\n\nUser:") as stream:
        for text in stream:
            print(repr(text))
    print(f"stop: {stream.stop_string!r}")


if __name__ == "__main__":
    main()
