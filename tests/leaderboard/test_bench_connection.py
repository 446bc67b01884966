"""The load generator's client connection: every body counted to the byte, however the server sends it."""

from __future__ import annotations

import asyncio

import pytest

from bench.boards import Connection, HttpError

BIG = b"x" * 700_000  # several of the connection's buffers


def _answers() -> list[bytes]:
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (b"abc", BIG[:300_000], b"z"))
    return [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Board-Cache: hit\r\n\r\n%s" % (len(BIG), BIG),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\nX-Trailer: 1\r\n\r\n",
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    ]


async def _serve_then_read(answers: list[bytes], dribble: bool) -> list[tuple]:
    async def handle(reader, writer):
        for answer in answers:
            await reader.readuntil(b"\r\n\r\n")
            i = 0
            while i < len(answer):  # dribbled: the head and the chunk lines split across reads
                step = len(answer) if not dribble else 7 if i < 400 else 65_531
                writer.write(answer[i:i + step])
                await writer.drain()
                if dribble:
                    await asyncio.sleep(0)
                i += step
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await Connection.open(port)
    got = [await conn.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") for _ in answers]
    conn.close()
    server.close()
    await server.wait_closed()
    return got


@pytest.mark.parametrize("dribble", [False, True], ids=["in one piece", "in small pieces"])
def test_every_body_is_counted_to_the_byte(dribble):
    got = asyncio.run(_serve_then_read(_answers(), dribble))
    assert got == [(200, len(BIG), True, "hit"), (200, 300_004, True, ""), (200, 300_004, True, ""),
                   (404, 0, True, ""), (200, 2, False, "")]


def test_an_answer_without_a_length_is_an_error():
    with pytest.raises(HttpError, match="without Content-Length"):
        asyncio.run(_serve_then_read([b"HTTP/1.1 200 OK\r\n\r\nbody"], False))
