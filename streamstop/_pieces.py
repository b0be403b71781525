"""token_pieces: text cut into token-sized pieces, as a tokenizer would, for demos and tests.

The ``streamstop demo`` command and ``streamstop serve``'s echo model both stream text as a model
would: in pieces of 2 to 5 characters whose boundaries fall anywhere, so a stop string arrives
split across several of them. One rule for both, so what the demo shows is what the echo model
sends.
"""

from __future__ import annotations

__all__ = ["token_pieces"]

# The sizes cycle; their mix puts piece boundaries inside every stop of a few characters.
_PIECE_SIZES = (3, 2, 4, 5, 3, 2, 4)


def token_pieces(text: str, phase: int = 0) -> list[str]:
    """Cut ``text`` into pieces of 2 to 5 characters; ``phase`` shifts the cycle of sizes.

    >>> token_pieces("Hello, world!")
    ['Hel', 'lo', ', wo', 'rld!']
    """
    pieces = []
    position = 0
    index = phase
    while position < len(text):
        size = _PIECE_SIZES[index % len(_PIECE_SIZES)]
        pieces.append(text[position : position + size])
        position += size
        index += 1
    return pieces
