"""ClientKeys: requests must carry ``Authorization: Bearer <key>`` with one of the given keys.

Rules:

- A key is compared with every configured key, each with :func:`hmac.compare_digest`, and all of
  them every time: neither the position of a matching key nor the length of a common prefix
  shows in the time taken.
- Without a valid key: 401 in the OpenAI error shape (``invalid_api_key``), with
  ``WWW-Authenticate: Bearer``, and the app is not called (nothing reaches an upstream). The
  message never repeats the key that was sent.
- ``open_paths`` (the probes) need no key.
- Once checked, the client's ``Authorization`` header is taken out of the request: a client key
  is this server's, never a credential to pass on (the proxy sends its own ``--api-key``
  upstream, or none).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

from ._asgi import ASGIApp, Receive, Scope, Send, send_error

__all__ = ["ClientKeys", "read_key_file"]

_MISSING = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)
_INCORRECT = "Incorrect API key provided."


def read_key_file(path: str | Path) -> list[str]:
    """The keys in a file, one per line; blank lines and lines starting with ``#`` are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _bearer(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    for key, value in headers:
        if key.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else b""
    return None


class ClientKeys:
    """ASGI middleware: only requests with one of ``keys`` as a bearer token reach ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        keys: Iterable[str],
        *,
        open_paths: Iterable[str] = ("/health", "/ready"),
    ) -> None:
        self.app = app
        self._keys = tuple(key.encode() for key in keys)
        for key in self._keys:
            if not key or any(byte <= 0x20 or byte == 0x7F for byte in key):
                raise ValueError(
                    f"a client key must be non-empty, without spaces or control characters, "
                    f"got {key.decode()[:4]!r}..."
                )
        if not self._keys:
            raise ValueError("ClientKeys needs at least one key")
        self.open_paths = frozenset(open_paths)

    def allows(self, token: bytes) -> bool:
        """Whether ``token`` is one of the keys, in time that depends only on the keys."""
        found = False
        for key in self._keys:
            found |= hmac.compare_digest(token, key)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        token = _bearer(headers)
        if token is None or not self.allows(token):
            await send_error(
                send,
                401,
                _MISSING if token is None else _INCORRECT,
                code="invalid_api_key",
                headers=[(b"www-authenticate", b"Bearer")],
            )
            return
        kept = [(key, value) for key, value in headers if key.lower() != b"authorization"]
        await self.app({**scope, "headers": kept}, receive, send)
