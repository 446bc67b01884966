"""The ASGI response cache in front of Django for anonymous board reads."""

import pytest

from apps.leaderboard import fastpath
from apps.leaderboard.fastpath import BoardResponseCache, board_context

CTX = "0x" + "ab" * 32
GLOBAL = "0x" + "00" * 32


class Inner:
    """A stand-in for Django: counts calls, answers with the status and cookies it is told to."""

    def __init__(self):
        self.calls = 0
        self.status = 200
        self.set_cookie = False

    async def __call__(self, scope, receive, send):
        self.calls += 1
        headers = [(b"content-type", b"text/html"), (b"x-frame-options", b"DENY")]
        if self.set_cookie:
            headers.append((b"set-cookie", b"csrftoken=abc"))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": f"call {self.calls} {scope['path']}".encode(),
                    "more_body": True})
        await send({"type": "http.response.body", "body": b" end"})


@pytest.fixture
def versions(monkeypatch):
    current = {"*": 1, CTX: 1}
    monkeypatch.setattr(fastpath, "_read_versions", lambda: dict(current))
    monkeypatch.setattr(fastpath, "VERSION_TTL_S", 0)
    return current


async def get(app, path, query=b"", headers=(), method="GET"):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "query_string": query, "headers": list(headers)},
              receive, send)
    start = sent[0]
    return start["status"], start["headers"], b"".join(m.get("body", b"") for m in sent[1:])


def test_board_reads_are_recognised():
    assert board_context("/", b"") == ""
    assert board_context("/", f"context={CTX}&sort=ra".encode()) == CTX
    assert board_context("/", f"context={CTX.upper().replace('0X', '0x')}".encode()) == CTX
    assert board_context("/", b"context=0xnope") is None
    assert board_context(f"/api/boards/{CTX}", b"") == CTX
    assert board_context(f"/api/boards/{CTX}.csv", b"") == CTX
    assert board_context("/api/boards/", b"") is None and board_context("/chat/", b"") is None


async def test_a_repeated_anonymous_read_is_answered_without_django(versions):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    first = await get(app, "/", f"context={CTX}".encode())
    again = await get(app, "/", f"context={CTX}".encode())
    assert first == again == (200, [(b"content-type", b"text/html"), (b"x-frame-options", b"DENY")],
                              "call 1 /".encode() + b" end")
    assert inner.calls == 1 and app.hits == 1
    await get(app, "/", f"context={CTX}&sort=ra".encode())
    await get(app, "/", f"context={CTX}".encode(), headers=[(b"hx-request", b"true"), (b"hx-target", b"board-table")])
    assert inner.calls == 3, "another query or another htmx target is another answer"


async def test_the_key_is_the_part_of_the_board_django_serves_not_the_raw_headers(versions):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    query = f"context={CTX}".encode()
    await get(app, "/", query)
    await get(app, "/", query, headers=[(b"hx-request", b"false")])
    await get(app, "/", query, headers=[(b"hx-request", b"true"), (b"hx-history-restore-request", b"true")])
    assert inner.calls == 1, "neither HX-Request: false nor a history restore is a fragment: the page"
    await get(app, "/", query, headers=[(b"hx-request", b"true"), (b"hx-target", b"x"), (b"hx-target", b"board-table")])
    await get(app, "/", query, headers=[(b"hx-request", b"true"), (b"hx-target", b"board-table")])
    assert inner.calls == 3, 'Django reads a repeated HX-Target as "x,board-table": that is the board, not the table'


async def test_the_answer_moves_with_the_boards_version(versions):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    await get(app, "/", f"context={CTX}".encode())
    await get(app, "/", b"")  # the global board
    versions[CTX] = 2  # the indexer changed this board
    assert (await get(app, "/", f"context={CTX}".encode()))[2].startswith(b"call 3")
    assert (await get(app, "/", b""))[2].startswith(b"call 2"), "the global board did not move"
    versions["*"] = 9  # every board moved
    assert (await get(app, "/", b""))[2].startswith(b"call 4")


async def test_what_is_not_the_same_for_every_visitor_goes_to_django(versions):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    for _ in range(2):
        await get(app, "/", b"", headers=[(b"cookie", b"csrftoken=x; sessionid=abc")])  # a logged-in user
        await get(app, "/chat/", b"")  # not a board
        await get(app, "/", b"", method="POST")
        await get(app, "/", b"context=0xnope")  # Django answers 400
    assert inner.calls == 8 and not app.store
    inner.status = 404
    await get(app, f"/api/boards/{CTX}", b"")
    inner.status, inner.set_cookie = 200, True
    await get(app, f"/api/boards/{CTX}", b"")
    assert not app.store, "errors and answers that set a cookie are never kept"
    await get(app, "/", b"", headers=[(b"cookie", b"csrftoken=x")])
    inner.set_cookie = False
    await get(app, "/", b"", headers=[(b"cookie", b"csrftoken=x")])
    await get(app, "/", b"", headers=[(b"cookie", b"csrftoken=y")])
    assert len(app.store) == 1 and app.hits == 1, "an anonymous visitor's CSRF cookie does not change the board"


async def test_nothing_is_cached_before_the_boards_were_derived(versions):
    versions.clear()
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    await get(app, "/", b"")
    await get(app, "/", b"")
    assert inner.calls == 2


async def test_the_store_is_bounded(versions, settings):
    settings.LLMCHAIN_BOARD_FASTPATH_MB = 40 / 2**20
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    for sort in ("r", "ra", "rh", "name"):
        await get(app, "/", f"sort={sort}".encode())
    assert app.size <= 40 and len(app.store) < 4
    assert app.size == sum(len(v[2]) for v in app.store.values())


def test_disabled_by_setting(settings):
    settings.LLMCHAIN_BOARD_FASTPATH = False
    assert BoardResponseCache(Inner()).enabled is False


@pytest.mark.parametrize("accept, gzipped", [(b"gzip, deflate, br", True), (b"br;q=1.0, gzip;q=0.8", True),
                                             (b"gzip;q=0", False), (b"identity", False), (None, False)])
async def test_a_kept_board_is_sent_gzipped_to_who_takes_it_and_plain_to_anyone_else(versions, accept, gzipped):
    import gzip

    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    query = f"context={CTX}".encode()
    _, _, plain = await get(app, "/", query)
    status, headers, body = await get(app, "/", query, headers=[(b"accept-encoding", accept)] if accept else [])
    named = dict(headers)
    assert status == 200 and inner.calls == 1 and app.hits == 1
    if gzipped:
        assert named[b"Content-Encoding"] == b"gzip" and b"Accept-Encoding" in named[b"Vary"]
        assert int(named[b"Content-Length"]) == len(body) and gzip.decompress(body) == plain
    else:
        assert b"Content-Encoding" not in named and body == plain

