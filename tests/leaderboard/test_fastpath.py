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
    """(status, headers, body) of the answer, without its X-Board-Cache label (`fetch` has it)."""
    status, sent_headers, body, _ = await fetch(app, path, query, headers, method)
    return status, sent_headers, body


async def fetch(app, path, query=b"", headers=(), method="GET"):
    """(status, headers, body, X-Board-Cache label or None) of the answer."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "query_string": query, "headers": list(headers)},
              receive, send)
    start = sent[0]
    label = dict(start["headers"]).get(b"X-Board-Cache")
    return (start["status"], [h for h in start["headers"] if h[0] != b"X-Board-Cache"],
            b"".join(m.get("body", b"") for m in sent[1:]), label)


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


async def test_the_answer_moves_with_the_boards_version(versions, settings):
    settings.LLMCHAIN_BOARD_MAX_STALE_S = 0  # no answer served once its board changed
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
    assert app.size == sum(len(v.packed) for v in app.store.values())


async def test_the_inflated_copies_use_what_the_gzipped_answers_leave_of_twice_the_budget(versions, settings):
    """Boards shrink ~6x gzipped: their inflated copies may outgrow the budget the gzipped ones need."""
    settings.LLMCHAIN_BOARD_FASTPATH_MB = 1500 / 2**20

    async def big(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": scope["query_string"] * 100})

    app = BoardResponseCache(big, enabled=True)
    for sort in ("r", "ra"):
        await get(app, "/", f"sort={sort:<8}".encode())  # 1,300 bytes each, ~40 gzipped
    assert app.size < 100 and app.plain_size == 2600 > app.max_bytes, "both kept inflated"
    await get(app, "/", b"sort=rh      ")  # a third would pass twice the budget: the oldest copy goes
    assert len(app.plain) == 2 and list(app.plain)[0][1] == b"sort=ra      "
    assert app.size + app.plain_size <= 2 * app.max_bytes and len(app.store) == 3


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



# --- while the boards change: stale while revalidate, single flight ---------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def time(self):  # the wall clock, here the same as the monotonic one
        return self.now

    def sleep(self, seconds):  # a wait for another process (board_renders.await_publication) takes no time
        self.now += seconds


@pytest.fixture
def clock(monkeypatch, settings):
    settings.LLMCHAIN_BOARD_MAX_STALE_S = 5
    c = Clock()
    monkeypatch.setattr(fastpath, "time", c)
    return c


class Gated(Inner):
    """Inner whose answers wait for `gate` (a render under way) while it is set to an Event."""

    def __init__(self):
        super().__init__()
        self.gate = None

    async def __call__(self, scope, receive, send):
        if self.gate is not None:
            await self.gate.wait()
        await super().__call__(scope, receive, send)


async def settle(app):
    """Let the background renders finish."""
    import asyncio

    while app._tasks:
        await asyncio.gather(*app._tasks)


QUERY = f"context={CTX}".encode()


async def test_a_changed_board_is_served_as_it_was_within_the_bound_while_one_render_makes_the_new_one(
        versions, clock):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 1 / end", b"miss")
    versions[CTX] = 2  # the indexer changed the board
    clock.now += 1  # rendered 1 s ago: not due again before half the bound
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 1 / end", b"stale")
    await settle(app)
    assert inner.calls == 1
    clock.now += 2  # 3 s: due; this request sets the render off and is served at once
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 1 / end", b"updating")
    assert (await fetch(app, "/", QUERY))[3] == b"stale", "one render under way at a time"
    await settle(app)
    assert inner.calls == 2 and (await fetch(app, "/", QUERY))[2:] == (b"call 2 / end", b"hit")
    assert app.stats()["renders"] == 2 and app.revalidations == 1


async def test_a_kept_answer_is_never_served_beyond_the_bound(versions, clock):
    inner = Gated()
    app = BoardResponseCache(inner, enabled=True)
    await fetch(app, "/", QUERY)
    clock.now += 4
    assert (await fetch(app, "/", QUERY))[3] == b"hit"  # still current 4 s later: known current now
    versions[CTX] = 2
    clock.now += 5  # 5 s since it was last known current: still within the bound
    import asyncio
    inner.gate = asyncio.Event()  # the render it sets off takes a while
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 1 / end", b"updating")
    clock.now += 0.5  # past the bound: no request gets the old board any more, they wait for the new one
    waiting = [asyncio.ensure_future(fetch(app, "/", QUERY)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiting)
    inner.gate.set()
    done = await asyncio.gather(*waiting)
    assert [d[2:] for d in done] == [(b"call 2 / end", b"waited")] * 3 and inner.calls == 2
    versions[CTX] = 3
    clock.now += 6  # long after: the next request renders for itself
    inner.gate = None
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 3 / end", b"miss")


async def test_concurrent_requests_for_one_view_cost_one_render(versions, clock):
    import asyncio

    inner = Gated()
    inner.gate = asyncio.Event()
    app = BoardResponseCache(inner, enabled=True)
    first = [asyncio.ensure_future(fetch(app, "/", QUERY)) for _ in range(20)]
    other = asyncio.ensure_future(fetch(app, "/", QUERY + b"&sort=ra"))  # another view: its own render
    await asyncio.sleep(0.05)
    inner.gate.set()
    answers = await asyncio.gather(*first)
    await other
    assert inner.calls == 2 and len({a[2] for a in answers}) == 1
    assert sorted(a[3] for a in answers) == [b"miss"] + [b"waited"] * 19
    versions[CTX] = 2
    clock.now += 3
    inner.gate = asyncio.Event()
    answers = await asyncio.gather(*(fetch(app, "/", QUERY) for _ in range(20)))  # served at once, stale
    assert sorted(a[3] for a in answers) == [b"stale"] * 19 + [b"updating"] and inner.calls == 2
    inner.gate.set()
    await settle(app)
    assert inner.calls == 3


async def test_with_a_stale_board_a_logged_in_user_and_an_error_still_go_to_django(versions, clock):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    await fetch(app, "/", QUERY)
    versions[CTX] = 2
    clock.now += 1
    status, _, body, label = await fetch(app, "/", QUERY, headers=[(b"cookie", b"sessionid=abc")])
    assert body.startswith(b"call 2") and label is None, "a logged-in user's board is rendered by Django for them"
    inner.status = 500  # the render the next due request sets off fails
    clock.now += 2
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 1 / end", b"updating")
    await settle(app)
    assert (await fetch(app, "/", QUERY))[2][:6] == b"call 1", "the failed render kept nothing: the old board stays"
    clock.now += 3  # past the bound: the error goes to the client, and is not kept
    assert (await fetch(app, "/", QUERY))[0::3] == (500, b"miss")
    assert (await fetch(app, "/", QUERY))[0::3] == (500, b"miss")
    inner.status = 200
    assert (await fetch(app, "/", QUERY))[2:] == (b"call 6 / end", b"miss")


async def test_after_its_board_changed_an_anonymous_reader_soon_gets_the_new_board(versions, clock):
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True)
    await fetch(app, "/", QUERY)
    clock.now += 30
    await fetch(app, "/", QUERY)  # still current: known so now
    versions[CTX] = 2
    seen = []
    for _ in range(20):  # a reader every half second
        clock.now += 0.5
        seen.append((await fetch(app, "/", QUERY))[2])
        await settle(app)
    assert seen[0] == b"call 1 / end" and seen[-1] == b"call 2 / end" and inner.calls == 2
    assert seen.index(b"call 2 / end") <= 2 * app.max_stale, "served the old board longer than the bound"


async def test_without_a_stale_bound_every_reader_waits_for_the_one_render(versions, settings):
    import asyncio

    settings.LLMCHAIN_BOARD_MAX_STALE_S = 0
    inner = Gated()
    app = BoardResponseCache(inner, enabled=True)
    await fetch(app, "/", QUERY)
    versions[CTX] = 2
    inner.gate = asyncio.Event()
    waiting = [asyncio.ensure_future(fetch(app, "/", QUERY)) for _ in range(5)]
    await asyncio.sleep(0.05)
    inner.gate.set()
    answers = await asyncio.gather(*waiting)
    assert {a[2] for a in answers} == {b"call 2 / end"} and inner.calls == 2


async def test_the_boards_versions_are_read_once_for_the_requests_that_need_them(monkeypatch):
    import asyncio
    import threading
    import time

    reads = []

    def slow_read():
        reads.append(threading.get_ident())
        time.sleep(0.05)
        return {"*": 1, CTX: 1}

    monkeypatch.setattr(fastpath, "_read_versions", slow_read)
    app = BoardResponseCache(Inner(), enabled=True)
    await asyncio.gather(*(fetch(app, "/", QUERY) for _ in range(10)))
    assert len(reads) == 1


async def test_an_answer_is_kept_as_the_version_it_says_it_shows(versions, clock):
    """The view may show a board a little older than the version just read (boards.reuse_within): it says
    so, and the answer counts as at most that much older."""

    async def older(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html"), (b"X-Board-Version", b"1.1")]})
        await send({"type": "http.response.body", "body": b"board at 1.1"})

    versions[CTX] = 2
    app = BoardResponseCache(older, enabled=True)
    assert (await fetch(app, "/", QUERY))[3] == b"miss"
    assert (await fetch(app, "/", QUERY))[2:] == (b"board at 1.1", b"stale"), "not the current version"
    clock.now += 2.6  # 2.5 s older than the render when it was rendered: past the bound of 5 s now
    assert (await fetch(app, "/", QUERY))[3] == b"miss"


class Renders:
    """A stand-in for board_renders.django_render: counts the views it renders, in the worker thread."""

    def __init__(self, label: str = "r"):
        self.label, self.calls = label, []

    def __call__(self, scope):
        self.calls.append((scope["path"], scope["query_string"]))
        body = f"{self.label}{len(self.calls)} {scope['query_string'].decode()}".encode()
        return 200, [(b"content-type", b"text/html")], body


@pytest.fixture
def walls(clock, monkeypatch):
    from apps.leaderboard import board_renders

    monkeypatch.setattr(board_renders, "time", clock)
    return clock


async def test_a_moved_board_has_the_views_read_lately_rendered_again_together_once(versions, walls):
    renders = Renders()
    app = BoardResponseCache(Inner(), enabled=True, render=renders)
    sorts = [QUERY + f"&sort={s}".encode() for s in ("r", "ra", "rh")]
    for query in sorts:
        assert (await fetch(app, "/", query))[3] == b"miss"
    other = f"context={GLOBAL}".encode()
    await fetch(app, "/", other)  # another board: it did not move
    walls.now += 1
    await fetch(app, "/", sorts[0])
    await fetch(app, "/", sorts[1])
    walls.now += 4.5  # sorts[2] was last read 5.5 s ago: not rendered again until it is read
    versions[CTX] = 2
    labels = [(await fetch(app, "/", query))[3] for query in sorts[:2]]
    assert labels == [b"updating", b"stale"], "served at once, as they were"
    await settle(app)
    assert sorted(renders.calls) == [("/", q) for q in sorts[:2]], "one refresh, the two views read lately"
    assert app.revalidations == 1 and app.refreshed == 2
    assert [(await fetch(app, "/", q))[2:] for q in sorts[:2]] == [
        (f"r{k + 1} {q.decode()}".encode(), b"hit") for k, q in enumerate(sorted(sorts[:2]))]
    assert (await fetch(app, "/", other))[3] == b"hit"
    versions[CTX] = 3
    walls.now += 1  # not due again before half the bound
    assert (await fetch(app, "/", sorts[0]))[3] == b"stale"
    await settle(app)
    assert len(renders.calls) == 2


async def test_the_processes_sharing_a_cache_render_a_moved_board_once_between_them(versions, walls):
    from django.core.cache.backends.locmem import LocMemCache

    shared = LocMemCache("shared-answers", {})
    first, second = Renders("first-"), Renders("second-")
    a = BoardResponseCache(Inner(), enabled=True, render=first, shared=shared)
    b = BoardResponseCache(Inner(), enabled=True, render=second, shared=shared)
    for app in (a, b):
        await fetch(app, "/", QUERY)
    versions[CTX] = 2
    walls.now += 1
    assert (await fetch(a, "/", QUERY))[3] == b"updating"
    await settle(a)
    assert len(first.calls) == 1
    assert (await fetch(b, "/", QUERY))[3] == b"updating"
    await settle(b)
    assert second.calls == [], "the board's lease is the first process's: the second takes its answer"
    assert (await fetch(b, "/", QUERY))[2:] == (b"first-1 " + QUERY, b"hit") and b.refreshed == 1


async def test_readers_of_views_past_the_bound_wait_for_one_refresh_of_their_board(versions, walls):
    import asyncio

    renders = Renders()
    inner = Inner()
    app = BoardResponseCache(inner, enabled=True, render=renders)
    sorts = [QUERY + f"&sort={s}".encode() for s in ("r", "ra")]
    for query in sorts:
        await fetch(app, "/", query)
    versions[CTX] = 2
    walls.now += 60  # every kept answer is past the bound, none read lately
    answers = await asyncio.gather(*(fetch(app, "/", query) for query in sorts for _ in range(5)))
    labels = [a[3] for a in answers]
    assert labels.count(b"miss") == 1 and labels.count(b"waited") == 9, "none served past the bound, one refresh"
    assert inner.calls == 2, "Django rendered only the first reads"
    assert sorted(renders.calls) == sorted(("/", q) for q in sorts), "one render of each view"
    assert app.revalidations == 1, "in one refresh of the board"
    assert {a[2] for a in answers} == {f"r{k} {q.decode()}".encode() for k, q in enumerate(sorts, 1)} or {
        a[2] for a in answers} == {f"r{k} {q.decode()}".encode() for k, q in enumerate(reversed(sorts), 1)}


async def test_a_view_a_reader_waits_for_is_rendered_though_another_process_holds_the_lease(versions, walls):
    from django.core.cache.backends.locmem import LocMemCache

    from apps.leaderboard import board_renders

    shared = LocMemCache("shared-answers-lease", {})
    shared.clear()
    renders = Renders()
    app = BoardResponseCache(Inner(), enabled=True, render=renders, shared=shared)
    await fetch(app, "/", QUERY)
    versions[CTX] = 2
    walls.now += 60
    assert shared.add(board_renders.lease_key(CTX), "2.2", timeout=60)
    status, _, body, label = await fetch(app, "/", QUERY)
    assert (status, body, label) == (200, b"r1 " + QUERY, b"miss") and len(renders.calls) == 1


class NewerRenders(Renders):
    """Renders that show a later version than the one the refresh was set off at (the board moved between
    the process's read of its versions and the render)."""

    def __init__(self, shows: str):
        super().__init__()
        self.shows = shows

    def __call__(self, scope):
        status, headers, body = super().__call__(scope)
        return status, [*headers, (b"X-Board-Version", self.shows.encode())], body


@pytest.mark.parametrize("prepared", [True, False])
async def test_a_refresh_that_brings_its_board_up_to_date_keeps_its_answers_until_the_next_refresh(
        versions, walls, prepared):
    prepares = []

    def prepare(context):  # as boards.current_standing: the version the views will show, and since when
        prepares.append(context)
        return "1.3", walls.now

    renders = NewerRenders("1.3")
    app = BoardResponseCache(Inner(), enabled=True, render=renders, prepare=prepare if prepared else None)
    await fetch(app, "/", QUERY)
    versions[CTX] = 2
    walls.now += 1
    assert (await fetch(app, "/", QUERY))[3] == b"updating"
    versions[CTX] = 3  # the board moved again before the render: it shows 1.3, newer than 1.2
    await settle(app)
    versions[CTX] = 4
    walls.now += 2.6  # the refresh is due again (half the bound of 5 s), its answers 2.6 s old
    label = (await fetch(app, "/", QUERY))[3]
    if prepared:
        assert prepares == [CTX] and label == b"updating", "current when rendered: served while the next is made"
    else:
        # Without knowing since when the views' standing was current, an answer showing another version
        # than the refresh's is taken as half the bound older: past the bound when the next refresh is
        # due, so the read set off that refresh and waited for its render, and its answer says so (though it
        # shows the board a little before the version the read found).
        assert label == b"miss" and len(renders.calls) == 2 and app.stale == 1
    await settle(app)


async def test_a_moved_boards_refresh_is_set_off_while_another_boards_is_under_way(versions, walls):
    import asyncio
    import threading

    class HeldRenders(Renders):
        def __init__(self):
            super().__init__()
            self.entered, self.release = threading.Event(), threading.Event()

        def __call__(self, scope):
            self.entered.set()
            self.release.wait(10)
            return super().__call__(scope)

    renders = HeldRenders()
    app = BoardResponseCache(Inner(), enabled=True, render=renders)
    other = f"context={GLOBAL}".encode()
    versions[GLOBAL] = 1
    for query in (QUERY, other):
        await fetch(app, "/", query)
    versions[CTX] = versions[GLOBAL] = 2
    walls.now += 1
    assert (await fetch(app, "/", QUERY))[3] == b"updating"
    while not renders.entered.is_set():  # the first board's refresh is rendering
        await asyncio.sleep(0.01)
    assert (await fetch(app, "/", other))[3] == b"updating", "set off, waiting for the render under way"
    renders.release.set()
    await settle(app)
    assert sorted(renders.calls) == sorted([("/", QUERY), ("/", other)]) and app.revalidations == 2
    assert [(await fetch(app, "/", q))[3] for q in (QUERY, other)] == [b"hit", b"hit"]
