"""The proxy's upstream clients (streamstop/server/_upstream.py): which one runs where, and what
each sends upstream. The faults and hostile inputs are test_proxy_faults.py's and
test_proxy.py's, each case run with both clients (the ``each_upstream_client`` fixture)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import anyio
import httpx
import pytest

from streamstop.server import ProxyApp, StopMiddleware
from streamstop.server._upstream import choose

from .conftest import http_response, proxied, raw_upstream

pytestmark = pytest.mark.usefixtures("each_upstream_client")

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}'


def test_choose_names_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"upstream_client must be one of .*'curl'"):
        choose("curl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"upstream_client must be .*'curl'"):
        ProxyApp("http://localhost:8000/v1", upstream_client="curl")  # type: ignore[arg-type]


def test_auto_is_aiohttp_on_asyncio_and_httpx_elsewhere() -> None:
    async def chosen() -> str:
        return choose("auto")

    assert asyncio.run(chosen()) == "aiohttp"
    assert anyio.run(chosen, backend="trio") == "httpx"
    assert choose("auto") == "httpx"  # no loop running
    assert asyncio.run(_choose("httpx")) == "httpx"


async def _choose(client: Any) -> str:
    return choose(client)


def test_aiohttp_asked_for_where_it_cannot_run_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="asyncio only"):
        anyio.run(_choose, "aiohttp", backend="trio")
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # not installed
    assert asyncio.run(_choose("auto")) == "httpx"
    with pytest.raises(RuntimeError, match=r"needs aiohttp: pip install 'streamstop\[fast\]'"):
        asyncio.run(_choose("aiohttp"))


def test_aiohttp_asked_for_without_it_is_refused_before_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # not installed
    with pytest.raises(ValueError, match=r"needs aiohttp: pip install 'streamstop\[fast\]'"):
        ProxyApp("http://localhost:8000/v1", upstream_client="aiohttp")
    assert ProxyApp("http://localhost:8000/v1").upstream_client == "auto"


def test_aiohttp_asked_for_under_trio_is_a_json_500_that_says_why() -> None:
    async def ask() -> httpx.Response:
        proxy = ProxyApp("http://127.0.0.1:9/v1", upstream_client="aiohttp")
        transport = httpx.ASGITransport(app=StopMiddleware(proxy))
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy/v1") as client:
            return await client.post("/chat/completions", json=CHAT)

    response = anyio.run(ask, backend="trio")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "upstream_client_unavailable"
    assert "runs on asyncio only" in error["message"]


def test_a_client_given_is_the_one_used() -> None:
    client = httpx.AsyncClient()
    assert ProxyApp("http://localhost:8000/v1", client=client).upstream_client == "httpx"
    asyncio.run(client.aclose())


@pytest.mark.asyncio
async def test_the_request_goes_upstream_as_the_client_sent_it() -> None:
    # The path and query percent-encoded as received, the client's headers, no Expect (the
    # proxy has the whole body), no content type the client did not send, identity asked for.
    async with (
        raw_upstream(lambda _: http_response("200 OK", "application/json", ANSWER)) as upstream,
        proxied(upstream.url) as (client, _),
    ):
        response = await client.post(
            "/chat/completions?api-version=2024%2D01",
            content=httpx.Request("POST", "http://x", json=CHAT).content,
            headers={"expect": "100-continue", "x-trace": "a b", "content-type": ""},
        )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "ok"
    head, _, body = upstream.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?api-version=2024%2D01 HTTP/1.1"
    names = {line.split(b":")[0].lower(): line.split(b":", 1)[1].strip() for line in lines[1:]}
    assert b"expect" not in names
    assert names[b"x-trace"] == b"a b"
    assert names[b"accept-encoding"] == b"identity"
    assert names[b"content-length"] == str(len(body)).encode()
    assert names.get(b"content-type", b"") == b""
    assert b'"messages"' in body


@pytest.mark.asyncio
async def test_a_redirect_is_passed_on_not_followed() -> None:
    answer = (
        b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://elsewhere.invalid/v1/x\r\n"
        b"content-length: 0\r\nconnection: close\r\n\r\n"
    )
    async with raw_upstream(lambda _: answer) as upstream, proxied(upstream.url) as (client, _):
        response = await client.post("/chat/completions", json=CHAT)
    assert response.status_code == 307
    assert response.headers["location"] == "http://elsewhere.invalid/v1/x"
    assert len(upstream.requests) == 1


@pytest.mark.asyncio
async def test_a_body_in_an_encoding_not_inflated_here_is_relayed_as_received() -> None:
    body = b"\x8b\x01\x80not-really-brotli"
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: br\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )
    async with (
        raw_upstream(lambda _: answer) as upstream,
        proxied(upstream.url) as (client, _),
        client.stream("POST", "/chat/completions", json=CHAT) as response,
    ):
        raw = b"".join([piece async for piece in response.aiter_raw()])
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "br"
    assert raw == body


@pytest.mark.asyncio
async def test_the_upstream_is_reached_direct_whatever_the_proxy_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As before aiohttp: httpx, given a transport of its own, reads no HTTP_PROXY.
    async with (
        raw_upstream(lambda _: http_response("200 OK", "application/json", ANSWER)) as upstream,
        raw_upstream(lambda _: http_response("200 OK", "application/json", ANSWER)) as forward,
    ):
        monkeypatch.setenv("HTTP_PROXY", forward.url.removesuffix("/v1"))
        monkeypatch.setenv("http_proxy", forward.url.removesuffix("/v1"))
        async with proxied(upstream.url) as (client, _):
            response = await client.post("/chat/completions", json=CHAT)
    assert response.status_code == 200, response.text
    assert len(upstream.requests) == 1
    assert forward.requests == []


@pytest.mark.asyncio
async def test_no_netrc_password_is_added(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login me password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    async with (
        raw_upstream(lambda _: http_response("200 OK", "application/json", ANSWER)) as upstream,
        proxied(upstream.url) as (client, _),
    ):
        response = await client.post("/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert b"authorization" not in upstream.requests[0].lower()


LOCATIONS = {
    "a path under the root": ("http://up:8001/v1/chat/completions?x=1", "/v1/chat/completions"),
    "percent-encoding kept": ("http://up:8001/v1/a%2Db", "/v1/a%2Db"),
    "no path": ("http://up:8001", "/"),
    "not a URL": ("up:8001/v1", None),
}


@pytest.mark.parametrize("case", LOCATIONS)
@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_locate_is_where_the_client_would_send(case: str, kind: Any) -> None:
    from streamstop.server._upstream import make_upstream

    url, path = LOCATIONS[case]

    async def located() -> Any:
        upstream = make_upstream(kind, 1.0, None)
        try:
            return upstream.locate(url)
        finally:
            await upstream.aclose()

    found = asyncio.run(located())
    if path is None:
        assert found is None
    else:
        assert found is not None
        (scheme, host, _), got = found
        assert (scheme, host, got) == ("http", "up", path)
