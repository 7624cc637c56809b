"""`HTTPClient` (core/adapter/http_client.py), the client of the Telegram and Matrix adapters' per-message requests:
against aiohttp's server (someone else's HTTP: kept-alive connections, chunked answers, `Connection: close`), and
against a raw socket server for what a well-behaved server never does (a body that ends with the connection, an idle
connection closed, an answer that is not HTTP, no answer in time). The adapters' tests run it against
telegram-test-api and Synapse.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from aiohttp import web

from core.adapter.http_client import Headers, HTTPClient, HTTPError
from tests.adapter.closing_server import ClosingServer

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def aiohttp_server(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def raw_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A server that reads one request head per turn and lets `answer` write whatever it likes."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await answer(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_requests_carry_their_method_target_headers_and_body_and_reuse_one_connection() -> None:
    seen: list[tuple[str, str, str | None, str | None, bytes, object]] = []

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        seen.append((request.method, request.path_qs, request.headers.get("X-Bot"), request.content_type, body, peer))
        return web.json_response({"got": body.decode()}, status=201 if request.method == "PUT" else 200)

    async with aiohttp_server(echo) as url:
        client = HTTPClient(url + "/ignored/path", headers={"X-Bot": "hookchat"})
        try:
            first = await client.request("POST", "/bot1:x/sendMessage", b'{"a": 1}', timeout=5)
            second = await client.request("PUT", "/rooms/%21r/send?x=1", b"{}", timeout=5)
            third = await client.request(
                "GET", "/sync?since=s1", headers=Headers({"Authorization": "Bearer t"}), timeout=5
            )
        finally:
            await client.close()
    assert (first.status, first.body) == (200, b'{"got": "{\\"a\\": 1}"}')
    assert (second.status, third.status, third.body) == (201, 200, b'{"got": ""}')
    assert [s[:5] for s in seen] == [
        ("POST", "/bot1:x/sendMessage", "hookchat", "application/json", b'{"a": 1}'),
        ("PUT", "/rooms/%21r/send?x=1", "hookchat", "application/json", b"{}"),
        ("GET", "/sync?since=s1", "hookchat", "application/octet-stream", b""),
    ]
    assert len({s[5] for s in seen}) == 1  # one connection, kept alive


async def test_concurrent_requests_each_take_a_connection_and_get_their_own_answer() -> None:
    async def slow_echo(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.Response(body=request.path.encode())

    async with aiohttp_server(slow_echo) as url:
        client = HTTPClient(url, limit=3)
        try:
            answers = await asyncio.gather(*(client.request("GET", f"/{n}", timeout=5) for n in range(10)))
        finally:
            await client.close()
    assert [a.body for a in answers] == [f"/{n}".encode() for n in range(10)]


async def test_a_chunked_answer_is_read_whole_and_a_connection_close_answer_is_not_reused() -> None:
    peers = []

    async def chunked(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        if request.path == "/close":
            response.force_close()
        await response.prepare(request)
        for part in (b"one ", b"two ", b"three"):
            await response.write(part)
        await response.write_eof()
        return response

    async with aiohttp_server(chunked) as url:
        client = HTTPClient(url)
        try:
            closing = await client.request("GET", "/close", timeout=5)
            after = await client.request("GET", "/", timeout=5)
        finally:
            await client.close()
    assert closing.body == after.body == b"one two three"
    assert peers[0] != peers[1]  # the server said Connection: close: the next request opened another


async def test_a_body_that_ends_with_the_connection_is_whole() -> None:
    async def http10(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"ok": true}')
        await writer.drain()

    async with raw_server(http10) as url:
        client = HTTPClient(url)
        try:
            answer = await client.request("GET", "/", timeout=5)
        finally:
            await client.close()
    assert (answer.status, answer.body) == (200, b'{"ok": true}')


async def test_an_answer_cut_short_a_server_that_is_not_http_and_no_answer_in_time_raise() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        await writer.drain()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    for answer, expected, words in (
        (cut, HTTPError, "in the middle of its answer"),
        (garbage, HTTPError, "not HTTP"),
        (silent, TimeoutError, None),  # a timeout says nothing more than its type
    ):
        async with raw_server(answer) as url:
            client = HTTPClient(url)
            try:
                with pytest.raises(expected, match=words):
                    await client.request("POST", "/", b"{}", timeout=0.3)
            finally:
                await client.close()


async def test_an_answer_larger_than_max_body_fails_its_request_and_the_next_gets_a_new_connection() -> None:
    served = []

    async def huge_then_small(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(writer)
        if len(served) == 1:  # 100 MB in chunks, to a client that takes at most 1 MB: it hangs up midway
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            with contextlib.suppress(ConnectionError):
                for _ in range(100):
                    writer.write(b"%x\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20)))
                    await writer.drain()
            return
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async with raw_server(huge_then_small) as url:
        client = HTTPClient(url, max_body=1 << 20)
        try:
            with pytest.raises(HTTPError, match="passed 1,048,576 bytes"):
                await client.request("GET", "/", timeout=10)
            answer = await client.request("GET", "/", timeout=10)
        finally:
            await client.close()
    assert (answer.status, answer.body, len(served)) == (200, b"ok", 2)


async def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    served = []

    async def once_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        served.append(writer.get_extra_info("peername"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # then the server closes the connection (keep-alive timed out, say), while the client holds it idle

    async with raw_server(once_per_connection) as url:
        client = HTTPClient(url)
        try:
            first = await client.request("POST", "/", b"{}", timeout=5)
            await asyncio.sleep(0.1)
            second = await client.request("POST", "/", b"{}", timeout=5)  # POST: it could not have been retried
        finally:
            await client.close()
    assert first.body == second.body == b"ok"
    assert len(set(served)) == 2


async def test_refusals() -> None:
    with pytest.raises(ValueError, match="not an http"):
        HTTPClient("ftp://example.org")
    with pytest.raises(ValueError, match="cannot hold"):
        Headers({"Authorization": "Bearer x\r\nX-Evil: 1"})
    client = HTTPClient("http://127.0.0.1:9")
    await client.close()
    with pytest.raises(HTTPError, match="closed"):
        await client.request("GET", "/", timeout=1)


async def test_a_request_written_as_the_server_closes_the_idle_connection_is_sent_again_once_when_allowed() -> None:
    async with ClosingServer() as server:
        client = HTTPClient(server.url)
        try:
            await client.request("POST", "/sendMessage?n=1", b"{}", timeout=5)
            server.end(0)  # the server's keep-alive limit: the client has not seen it yet
            answer = await client.request("POST", "/sendMessage?n=2", b"{}", timeout=5, retry_unanswered=True)

            await client.request("POST", "/sendMessage?n=3", b"{}", timeout=5)
            server.end(1)
            with pytest.raises(HTTPError, match="closed a kept-alive connection before answering"):
                await client.request("POST", "/sendMessage?n=4", b"{}", timeout=5)  # not marked: not sent again
        finally:
            await client.close()
    assert answer.body == b"ok"
    assert server.requests == [
        (0, b"POST /sendMessage?n=1 HTTP/1.1"),
        (1, b"POST /sendMessage?n=2 HTTP/1.1"),  # once, on a new connection
        (1, b"POST /sendMessage?n=3 HTTP/1.1"),
    ]


async def test_a_shorter_timeout_on_a_reused_connection_still_ends_the_request_in_time() -> None:
    async def answers_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(60)  # the second request on the connection gets no answer

    async with raw_server(answers_once) as url:
        client = HTTPClient(url)
        try:
            first = await client.request("GET", "/", timeout=60)  # a long poll's timeout, say
            with anyio.fail_after(10), pytest.raises(TimeoutError):  # not the first request's 60 s
                await client.request("GET", "/", timeout=0.2)
        finally:
            await client.close()
    assert first.body == b"ok"
