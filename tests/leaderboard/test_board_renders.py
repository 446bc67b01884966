"""A board view rendered through Django's handler in its synchronous mode (board_renders.django_render,
with which the response cache renders a moved board's views again together) is the answer Django's ASGI
handler gives the same request: status, headers and body."""

import pytest
from asgiref.sync import async_to_sync
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections

from apps.chain.models import Context
from apps.leaderboard import board_renders, entries
from tests.leaderboard.test_boards import CTX, rep

pytestmark = pytest.mark.django_db


def asgi_answer(scope: dict) -> tuple[int, list, bytes]:
    import asyncio

    sent, asked = [], []

    async def receive():  # the body, then a client that never leaves
        if asked:
            await asyncio.Event().wait()
        asked.append(1)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    # As Django's test client does: a request's end would close the test's connection, in its transaction.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        async_to_sync(ASGIHandler())(scope, receive, send)
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return sent[0]["status"], list(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("path, query, headers", [
    ("/", f"context={CTX}&sort=ra&dir=asc", []),
    ("/", f"context={CTX}&sort=name", [(b"hx-request", b"true"), (b"hx-target", b"board-table")]),
    (f"/api/boards/{CTX}", "sort=r&dir=desc", []),
    (f"/api/boards/{CTX}.csv", "", []),
    ("/", "context=0xnope", []),
])
def test_the_synchronous_render_is_the_asgi_handlers_answer(path, query, headers):
    Context.objects.create(context_id=CTX, name="math", block_number=1)
    rep(1, 0.7, n_human=3, name="alpha <b>", band=(0.61, 0.78))
    rep(2, 0.9, n_human=4, name="bravo", band=(0.85, 0.93))
    entries.bump({CTX})
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"testserver"), *headers], "client": None, "server": ("testserver", 80)}
    status, sent_headers, body = board_renders.django_render(scope)
    assert (status, sent_headers, body) == asgi_answer(scope)
    assert status == (400 if "nope" in query else 200) and body
    if status == 200 and path == "/":
        assert b"alpha &lt;b&gt;" in body and b"alpha <b>" not in body
    assert board_renders.keepable(status, sent_headers, body) == (status == 200)


class Rendering:
    def __init__(self, shows: str):
        self.shows, self.calls = shows, 0

    def __call__(self, scope):
        self.calls += 1
        return 200, [(b"content-type", b"text/html"), (b"X-Board-Version", self.shows.encode())], b"board"


def refreshed(shared, render, *, kept_wall=100.0, kept_shows="5.5", version="5.6"):
    view = ("/", b"context=" + CTX.encode(), "page")
    return board_renders.refresh(CTX, version, [(view, {}, kept_wall, kept_shows)], render=render,
                                             shared=shared, period=2.5, version_header=b"x-board-version")


@pytest.fixture
def shared(monkeypatch):
    from django.core.cache.backends.locmem import LocMemCache

    # What a request's end does would end the test's transaction: refresh's own are not needed here.
    monkeypatch.setattr(board_renders, "close_old_connections", lambda: None)

    cache = LocMemCache("board-renders-test", {})
    cache.clear()  # LocMem caches of one name share their entries
    return cache


def test_an_answer_another_process_published_for_the_same_database_is_taken(shared):
    refreshed(shared, Rendering("5.6"))
    shared.delete(board_renders.lease_key(CTX))
    again = Rendering("5.6")
    assert [a.shows for a in refreshed(shared, again).values()] == ["5.6"] and again.calls == 0


def test_answers_published_for_another_database_or_an_older_version_are_not_taken(shared, monkeypatch):
    elsewhere = board_renders._database()
    with monkeypatch.context() as patch:
        patch.setattr(board_renders, "_database", lambda: elsewhere + b"-another")
        refreshed(shared, Rendering("9.9"))
    mine = Rendering("5.6")
    assert [a.shows for a in refreshed(shared, mine).values()] == ["5.6"] and mine.calls == 1

    shared.clear()
    refreshed(shared, Rendering("5.4"))  # older than the answer kept (5.5), though published later
    shared.delete(board_renders.lease_key(CTX))
    mine = Rendering("5.6")
    assert [a.shows for a in refreshed(shared, mine).values()] == ["5.6"] and mine.calls == 1


def test_versions_compare_part_by_part():
    assert board_renders.not_older("5.6", "5.6") and board_renders.not_older("6.6", "5.6")
    assert not board_renders.not_older("6.5", "5.6") and not board_renders.not_older("5", "5.6")
    assert not board_renders.not_older("", "5.6")


def test_a_renderer_process_keeps_no_copy_of_the_views_it_renders(monkeypatch):
    from django.core.cache import cache

    from apps.leaderboard import boards

    calls = []
    monkeypatch.setattr(boards, "keep_views", False)
    for _ in range(2):
        boards.cached("json", CTX, "r", "desc", lambda: calls.append(1) or {"body": b"x"}, version="7.7")
    assert len(calls) == 2 and cache.get(f"board:7.7:{boards.min_evaluations()}:{boards.min_rated()}:json:{CTX}:r:desc") is None
    monkeypatch.setattr(boards, "keep_views", True)
    for _ in range(2):
        boards.cached("json", CTX, "r", "desc", lambda: calls.append(1) or {"body": b"x"}, version="7.7")
    assert len(calls) == 3, "a web process keeps it"


class SlowRendering(Rendering):
    """A render that takes a while: the board's lease is held meanwhile."""

    def __init__(self, shows: str, seconds: float):
        super().__init__(shows)
        self.seconds = seconds

    def __call__(self, scope):
        import time

        time.sleep(self.seconds)
        return super().__call__(scope)


def test_a_process_finding_the_lease_held_waits_for_the_holders_answers_instead_of_rendering(shared):
    import threading
    import time

    holder, results = SlowRendering("5.6", 0.4), {}
    first = threading.Thread(target=lambda: results.setdefault("holder", refreshed(shared, holder)))
    first.start()
    while shared.get(board_renders.lease_key(CTX)) is None:
        time.sleep(0.005)
    view = ("/", b"context=" + CTX.encode(), "page")
    waiting = Rendering("5.6")
    began = time.monotonic()
    taken = board_renders.refresh(CTX, "5.6", [(view, {}, 100.0, "5.5")], render=waiting, shared=shared,
                                  period=2.5, version_header=b"x-board-version", needed={view})
    first.join()
    assert waiting.calls == 0, "the view a reader waits for was the holder's to render"
    assert taken[view] == results["holder"][view], "the holder's answer, not one of its own"
    assert 0.2 < time.monotonic() - began < 2.5


def test_a_reader_is_not_left_waiting_for_a_holder_that_never_publishes(shared, monkeypatch):
    import time

    monkeypatch.setattr(board_renders, "LEASE_WAIT_S", 0.2)
    assert shared.add(board_renders.lease_key(CTX), "gone", timeout=60)  # its process died while rendering
    view = ("/", b"context=" + CTX.encode(), "page")
    mine = Rendering("5.6")
    began = time.monotonic()
    taken = board_renders.refresh(CTX, "5.6", [(view, {}, 100.0, "5.5")], render=mine, shared=shared,
                                  period=2.5, version_header=b"x-board-version", needed={view})
    assert mine.calls == 1 and [a.shows for a in taken.values()] == ["5.6"]
    assert time.monotonic() - began < 1.5
    unread, other = Rendering("5.6"), ("/", b"context=" + CTX.encode() + b"&sort=ra", "page")
    assert board_renders.refresh(CTX, "5.6", [(other, {}, 100.0, "5.5")], render=unread, shared=shared, period=2.5,
                                 version_header=b"x-board-version") == {} and unread.calls == 0, \
        "a view no reader waits for stays the lease holder's"
