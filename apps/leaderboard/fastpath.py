"""A versioned response cache in front of Django for anonymous board reads.

Under ASGI, Django runs each sync middleware hook and the view in a worker thread: a cached board
still costs ~16 thread hand-offs, 5-9 ms of CPU per request. This ASGI layer answers a repeated
anonymous GET of a board (the page, its htmx fragments, the JSON and CSV exports) with the very
response Django produced the first time, status, headers and body, without entering Django.

A view of a board is the full request target and the part of the board an htmx request asks for
(read from the request exactly as the view reads it: `views.board.board_part` of django-htmx's
`request.htmx`, so a header the view does not take as htmx, say `HX-Request: false` or a repeated
header Django joins, can never make a fragment stand for the page). The store keeps the latest
answer of each view with the board's version it was rendered at (`entries.version`: it moves
whenever the indexer changes that board), read from the database at most every VERSION_TTL_S per
process (one read at a time). Only what is the same for every anonymous visitor is kept: a 200
answer to a request without a session cookie that sets no cookie. Anything else (a logged-in user,
an error, another path) goes to Django unchanged.

While the indexer folds, boards' versions move every second or two (every board's, with evaluations
spread over the contexts), and rendering every view again at each move would stop the site. So once a
view's board has moved, its kept answer is still served while it is at most LLMCHAIN_BOARD_MAX_STALE_S
old, counted from the last moment the site knew it was current (stale while revalidate). With `render`
(the site's: board_renders.django_render) the board's views are rendered again together: a stale read
sets off, at most once per half the bound per board and while a render slot is free, one refresh in a
worker thread of every view of the board read within the bound; a read whose answer is past the bound
waits for its board's refresh (it and every other such read join the refresh until it starts rendering),
and where the site's processes share a cache one of them renders a board for all (board_renders.refresh).
Without `render`, each view is rendered again through `app`, at most once per half the bound (a render
that kept nothing too), and a view whose answer is past the bound is rendered for the request that asks
for it, once however many ask: the others wait for that render (single flight). A view never kept is
rendered for its request that way in both cases. An answer is one board rendered at one moment, with
the version it shows (the view's X-Board-Version header: while a board moves, its views share one
build of it for half the bound, boards.reuse_within): a stale page shows the board as it was then,
each row with its own block, never parts of two versions. Each answer says what it was in
X-Board-Cache: hit (current), stale (from before the board moved, within the bound), updating (the
same, and this request set off the view's render), miss (rendered for this request, alone or with the
other views of its board), waited (rendered for another request this one waited for).
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django_htmx.middleware import HtmxDetails

from lib.ids import HEX32_PATTERN
from lib.reputation import GLOBAL_CONTEXT_ID

from . import board_renders, boards, entries
from .board_renders import GZIP_WBITS, accepts_gzip, gzip_body, gzip_headers, quiet_scope
from .boards import BoardError, parse_context_id
from .views.board import board_part

log = logging.getLogger(__name__)

VERSION_TTL_S = 0.5
# Renders through this cache at once per process, and of them in the background: more would only share
# the same core (the GIL) and slow the answers served meanwhile from the event loop. Requests whose view
# has no answer to serve queue for a slot; a background render starts only when one is free.
RENDERING = 2
REVALIDATING = 2
# The store holds LLMCHAIN_BOARD_FASTPATH_MB per process; least recently used answers go first. Every
# view of 21 boards of 100 models (7 sorts x 2 directions, page and JSON) is ~74 MB: below that bound an
# LRU store thrashes under a uniform mix.
API_BOARD = re.compile(rf"/api/boards/({HEX32_PATTERN})(?:\.csv)?")
CACHE_HEADER = b"X-Board-Cache"
VERSION_HEADER = boards.VERSION_HEADER.lower().encode()
HIT, STALE, UPDATING, MISS, WAITED = b"hit", b"stale", b"updating", b"miss", b"waited"


def board_context(path: str, query: bytes) -> str | None:
    """The context whose board this request reads ("" for the global one), or None: not a board read."""
    m = API_BOARD.fullmatch(path)
    if m:
        return m.group(1).lower()
    if path == "/":
        values = parse_qs(query.decode("latin-1")).get("context", [""])
        raw = values[-1]
        if raw == "":
            return ""
        try:
            return parse_context_id(raw)
        except BoardError:
            return None
    return None


@dataclass(eq=False)
class Kept:
    """The latest answer kept for one view: a 200 as Django sent it, its body gzipped."""

    version: str  # the board's version it was rendered at
    headers: list  # Django's, for the inflated body
    gzip_headers: list  # for the gzipped body
    packed: bytes
    rendered_at: float  # time.monotonic() when the request that rendered it came in
    current_at: float  # the last moment its version was known to be the board's (it shows the board then)
    tried_at: float = 0.0  # when the latest render of the view began (this one's, or one that kept nothing)
    context: str = ""  # the board it is a view of
    scope: dict | None = None  # the request it answered, to render the view again
    read_at: float = 0.0  # when it was last sent
    hit_headers: tuple[list, list] = field(init=False, repr=False)  # (inflated, gzipped), labelled hit once

    def __post_init__(self):
        self.hit_headers = ([*self.headers, (CACHE_HEADER, HIT)], [*self.gzip_headers, (CACHE_HEADER, HIT)])


@dataclass
class BoardRefresh:
    """One refresh of a board's views under way: `views` (view -> (view, the request's scope, the wall time
    its kept answer was last known current, the version it shows)), `needed` those a request waits for."""

    done: asyncio.Future
    views: dict = field(default_factory=dict)
    needed: set = field(default_factory=set)
    started: bool = False  # rendering: no view joins any more

    def join(self, view: tuple, kept: Kept, wall: float, *, needed: bool = True) -> bool:
        """Add a view (`wall`: a monotonic time plus this is its wall-clock time); False once started."""
        if self.started:
            return view in self.views
        self.views[view] = (view, kept.scope, kept.current_at + wall, kept.version)
        if needed:
            self.needed.add(view)
        return True


class BoardResponseCache:
    def __init__(self, app, *, enabled: bool | None = None, render=None, shared=None, renderer=None, prepare=None):
        """`render`: a synchronous render of one view from its request's scope ((status, headers, body):
        board_renders.django_render), with which a moved board's views are rendered again together in
        a worker thread; `renderer` (a board_renders.Renderer): the same in a process of its own; with
        neither, each view is rendered again through `app`. `shared`: a cache that the site's processes
        share (Django's cache API), through which one process renders a moved board's views for all of
        them (a renderer uses the site's). `prepare`: board_renders.refresh's, with `render`."""
        self.app = app
        self.render = render
        self.renderer = renderer
        self.shared = shared
        self.prepare = prepare
        self.batched = render is not None or renderer is not None
        self.enabled = settings.LLMCHAIN_BOARD_FASTPATH if enabled is None else enabled
        self.max_bytes = int(settings.LLMCHAIN_BOARD_FASTPATH_MB * 2**20)
        self.max_stale = float(settings.LLMCHAIN_BOARD_MAX_STALE_S)
        self.reuse_within = boards.reuse_within()
        self.store: OrderedDict[tuple, Kept] = OrderedDict()  # view -> its latest answer, gzipped
        self.size = 0
        # The most recently sent of them inflated too, for clients that do not take gzip (inflating a
        # board costs ~1 ms): in what the gzipped answers leave of twice the budget. Every view of the
        # bench's 21 boards is ~35 MB gzipped and ~190 MB inflated: with a budget of its own (128 MB) the
        # inflated store held two thirds of them and a uniform load inflated ~40% of its answers again.
        self.plain: OrderedDict[tuple, tuple[Kept, bytes]] = OrderedDict()
        self.plain_size = 0
        self._versions: dict[str, int] = {}
        self._versions_at = 0.0  # when the read that gave them began
        self._reading: asyncio.Future | None = None
        self._flights: dict[tuple, asyncio.Future] = {}  # view -> its render under way, done when it ends
        self._boards_due: dict[str, float] = {}  # board -> when its views may be rendered again together
        self._board_flights: dict[str, BoardRefresh] = {}  # board -> its refresh under way
        self._updating = 0  # background renders under way
        self._slots = asyncio.Semaphore(RENDERING)
        self._refreshing = asyncio.Semaphore(1)  # one board's views rendered again at a time
        self._tasks: set[asyncio.Task] = set()
        self.hits = self.stale = self.waited = self.misses = self.revalidations = 0
        self.refreshed = 0  # views rendered again (or taken from another process) in a board's refresh

    @property
    def renders(self) -> int:
        """Board answers Django rendered through this cache: for a request, or in the background."""
        return self.misses + self.revalidations + self.refreshed

    # -- the kept answers ----------------------------------------------------------------------------
    def inflated(self, view: tuple, kept: Kept) -> bytes:
        found = self.plain.get(view)
        if found is not None and found[0] is kept:
            self.plain.move_to_end(view)
            return found[1]
        body = zlib.decompress(kept.packed, wbits=GZIP_WBITS)
        self._keep_plain(view, kept, body)
        return body

    def plain_budget(self) -> int:
        """Bytes the inflated copies may hold: both stores together stay within twice the budget."""
        return 2 * self.max_bytes - self.size

    def _keep_plain(self, view: tuple, kept: Kept, body: bytes) -> None:
        self._drop_plain(view)
        if len(body) <= self.plain_budget():
            self.plain[view] = (kept, body)
            self.plain_size += len(body)
            self._trim_plain()

    def _drop_plain(self, view: tuple) -> None:
        found = self.plain.pop(view, None)
        if found is not None:
            self.plain_size -= len(found[1])

    def _trim_plain(self) -> None:
        while self.plain_size > self.plain_budget():
            self.plain_size -= len(self.plain.popitem(last=False)[1][1])

    def _keep(self, view: tuple, version: str, started: float, current_at: float, headers: list,
              body: bytes | None, packed: bytes | None = None, scope: dict | None = None) -> None:
        """Keep an answer (its body, or `packed`: gzipped already) as the view's, unless a later one is."""
        old = self.store.get(view)
        if old is not None and old.rendered_at > started:
            return  # a render that began later finished first: it stays
        if packed is None:
            packed = gzip_body(body)
        if old is not None:
            del self.store[view]
            self.size -= len(old.packed)
            self._drop_plain(view)
        if len(packed) <= self.max_bytes:
            # Kept gzipped: a board's page shrinks about 6x and its JSON 3x, so every view of every board
            # (12 sorts x 2 directions x page and API of 21 boards, ~190 MB as sent) fits in the store;
            # a client that takes gzip gets it as kept, another one the inflated copy (`inflated`).
            read_at = started if scope is not None else old.read_at if old is not None else 0.0  # sent as rendered
            if scope is None and old is not None:
                scope = old.scope
            kept = Kept(version, headers, gzip_headers(headers, len(packed)), packed, started, current_at, started,
                        context=_board_of(view), scope=scope, read_at=read_at)
            self.store[view] = kept
            self.size += len(packed)
            if self.renderer is not None and self.max_stale > 0:
                self.renderer.start()  # ready before the board first moves
            while self.size > self.max_bytes:
                gone, evicted = self.store.popitem(last=False)
                self.size -= len(evicted.packed)
                self._drop_plain(gone)
            if body is not None:
                self._keep_plain(view, kept, body)
        self._trim_plain()

    # -- the boards' versions ----------------------------------------------------------------------
    async def versions(self) -> dict[str, int]:
        """Every board's version, read at most every VERSION_TTL_S: one read at a time, which the requests
        that need it meanwhile share."""
        if time.monotonic() - self._versions_at > VERSION_TTL_S:
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read())
            await asyncio.shield(self._reading)
        return self._versions

    async def _read(self) -> None:
        began = time.monotonic()
        try:
            self._versions = await sync_to_async(_read_versions, thread_sensitive=False)()
            self._versions_at = began
        finally:
            self._reading = None

    # -- requests ------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        if not self.enabled or scope["type"] != "http" or scope["method"] != "GET":
            return await self.app(scope, receive, send)
        context = board_context(scope["path"], scope.get("query_string", b""))
        if context is None:
            return await self.app(scope, receive, send)
        request = ASGIRequest(scope, io.BytesIO())  # the headers as Django will read them (~5 us)
        if settings.SESSION_COOKIE_NAME + "=" in request.META.get("HTTP_COOKIE", ""):
            return await self.app(scope, receive, send)
        version = entries.version_key(await self.versions(), context or GLOBAL_CONTEXT_ID)
        if not version:
            return await self.app(scope, receive, send)
        known_at = self._versions_at  # when `version` was the board's
        view = (scope["path"], scope.get("query_string", b""), board_part(HtmxDetails(request)))
        gzipped = accepts_gzip(request)
        board = context or GLOBAL_CONTEXT_ID
        waited = set_off = False  # set_off: this request set off the board's refresh it waited for
        board_waits = 0
        while True:
            kept, now = self.store.get(view), time.monotonic()
            current = kept is not None and kept.version == version
            within = kept is not None and self.max_stale > 0 and now - kept.current_at <= self.max_stale
            # Current, or the answer this read waited for (it may show the board a little before `version`).
            if current or (waited and within):
                if current:
                    kept.current_at = max(kept.current_at, known_at)
                counter, label = ("misses", MISS) if set_off else ("waited", WAITED) if waited else ("hits", HIT)
                setattr(self, counter, getattr(self, counter) + 1)
                return await self._send(view, kept, gzipped, send, label)
            if within:
                label = STALE
                if self.batched:
                    if self._board_due(board, now):
                        self._refresh_board(board, version)
                        label = UPDATING
                elif (view not in self._flights and self._updating < REVALIDATING and not self._slots.locked()
                        and now - kept.tried_at >= self.reuse_within):
                    self._revalidate(view, scope, version)
                    label = UPDATING
                self.stale += 1
                return await self._send(view, kept, gzipped, send, label)
            if self.batched and self.max_stale > 0 and kept is not None and kept.scope is not None and board_waits < 2:
                # Past the bound: the board's views are rendered again together, this one among them (it
                # joins the board's refresh while that waits for a render slot); the request waits for it.
                refresh = self._board_flights.get(board)
                if refresh is None:
                    refresh = self._refresh_board(board, version, need=(view, kept))
                    set_off = refresh is not None
                else:
                    refresh.join(view, kept, time.time() - now)
                if refresh is not None:
                    board_waits += 1
                    await asyncio.shield(refresh.done)
                    waited = True
                    continue
            flight = self._flights.get(view)
            if flight is None or waited:
                break
            # No answer may be served yet: wait for the render under way (its client may leave, the
            # render goes on), then look again; once only, a render that kept nothing is not waited for.
            await asyncio.shield(flight)
            waited = True
        await self._render(view, scope, receive, send, version, single=not waited)

    async def _send(self, view: tuple, kept: Kept, gzipped: bool, send, label: bytes) -> None:
        self.store.move_to_end(view)
        kept.read_at = time.monotonic()
        if gzipped:
            body = kept.packed
            headers = kept.hit_headers[1] if label is HIT else [*kept.gzip_headers, (CACHE_HEADER, label)]
        else:
            body = self.inflated(view, kept)
            headers = kept.hit_headers[0] if label is HIT else [*kept.headers, (CACHE_HEADER, label)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    # -- a moved board's views, rendered again together ---------------------------------------------
    def _board_due(self, context: str, now: float) -> bool:
        # Due though another board's refresh is under way: it queues for `_refreshing` behind that one.
        return context not in self._board_flights and now >= self._boards_due.get(context, 0.0)

    def _refresh_board(self, context: str, version: str, *, need: tuple | None = None) -> BoardRefresh | None:
        """Render again, in one worker thread, every view of this board kept here that was read within the
        bound and is not at `version` (or take them from another process: board_renders.refresh), and
        `need` ((view, its kept answer): a request waits for it); None when there is nothing to render.
        Set off by a stale read at most once per half the bound per board; by a request whose answer is
        past the bound when none is under way (other such requests join it until it starts)."""
        now = time.monotonic()
        self._boards_due[context] = now + self.reuse_within
        wall = time.time() - now  # a monotonic time plus this is its wall-clock time
        refresh = BoardRefresh(asyncio.get_running_loop().create_future())
        for view, kept in self.store.items():
            if (kept.context == context and kept.version != version and kept.scope is not None
                    and now - kept.read_at <= self.max_stale and view not in self._flights):
                refresh.join(view, kept, wall, needed=False)
        if need is not None:
            refresh.join(*need, wall)
        if not refresh.views:
            return None
        self._board_flights[context] = refresh
        self._updating += 1
        self.revalidations += 1

        async def run():
            try:
                async with self._refreshing:
                    refresh.started = True
                    began = time.monotonic()
                    views = list(refresh.views.values())
                    if self.renderer is not None:
                        found = await asyncio.wrap_future(self.renderer.refresh(
                            context, version, views, period=self.reuse_within, version_header=VERSION_HEADER,
                            needed=refresh.needed))
                    else:
                        found = await sync_to_async(board_renders.refresh, thread_sensitive=False)(
                            context, version, views, render=self.render, shared=self.shared,
                            period=self.reuse_within, version_header=VERSION_HEADER, needed=refresh.needed,
                            prepare=self.prepare)
                wall_now = time.time() - time.monotonic()
                for view, answer in found.items():
                    current_at = answer.current_wall - wall_now
                    self._keep(view, answer.shows, max(began, current_at), current_at, answer.headers, None,
                               packed=answer.packed)
                self.refreshed += len(found)
            except Exception:  # a failed refresh keeps the answers there were: a later request tries again
                log.exception("rendering the board %s again failed", context)
            finally:
                self._updating -= 1
                if self._board_flights.get(context) is refresh:
                    del self._board_flights[context]
                refresh.done.set_result(None)

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return refresh

    def _revalidate(self, view: tuple, scope: dict, version: str) -> None:
        """Render the view again in the background, as an anonymous request like this one."""
        flight = asyncio.get_running_loop().create_future()
        self._flights[view] = flight
        self._updating += 1
        self.revalidations += 1

        async def run():
            try:
                await self._render(view, dict(scope), _empty_request(), None, version, flight=flight)
            except Exception:  # a failed render keeps the answer there was: the next request tries again
                log.exception("rendering %s again failed", scope["path"])
            finally:
                self._updating -= 1

        task = asyncio.ensure_future(run())
        self._tasks.add(task)  # held until done (the loop keeps only weak references)
        task.add_done_callback(self._tasks.discard)

    async def _render(self, view: tuple, scope, receive, send, version: str, *, single: bool = True,
                      flight: asyncio.Future | None = None) -> None:
        """Django's answer to this request, kept when it is the same for every anonymous visitor and
        passed on to `send` (None: no client, a background render). `single`: others asking for the
        view meanwhile wait for this render."""
        started = time.monotonic()
        if flight is None:
            self.misses += 1
            if single:
                flight = self._flights[view] = asyncio.get_running_loop().create_future()
        captured: dict = {"body": []}

        async def capture(message):
            if message["type"] == "http.response.start":
                captured["status"] = message["status"]
                captured["headers"] = list(message.get("headers") or [])
                message = {**message, "headers": [*captured["headers"], (CACHE_HEADER, MISS)]}
            elif message["type"] == "http.response.body":
                captured["body"].append(message.get("body", b""))
                if not message.get("more_body"):
                    captured["done"] = True
            if send is not None:
                await send(message)

        kept = self.store.get(view)
        if kept is not None:
            kept.tried_at = started  # a render that keeps nothing is not tried again at once
        try:
            async with self._slots:
                await self.app(scope, receive, capture)
            headers = captured.get("headers", [])
            if (captured.get("done") and captured.get("status") == 200
                    and not any(name.lower() == b"set-cookie" for name, _ in headers)):
                # The version the answer shows, as the view says (it may show the board a little older
                # than `version`: boards.reuse_within); it was current then, at most that long ago.
                shows = next((value.decode("latin-1") for name, value in headers if name.lower() == VERSION_HEADER),
                             version)
                current_at = started if shows == version else started - self.reuse_within
                self._keep(view, shows, started, current_at, headers, b"".join(captured["body"]), scope=quiet_scope(scope))
        finally:
            if flight is not None:
                if self._flights.get(view) is flight:
                    del self._flights[view]
                if not flight.done():
                    flight.set_result(None)

    def stats(self) -> dict:
        return {"hits": self.hits, "stale": self.stale, "waited": self.waited, "misses": self.misses,
                "revalidations": self.revalidations, "refreshed": self.refreshed, "renders": self.renders,
                "kept": len(self.store), "bytes": self.size}


def _board_of(view: tuple) -> str:
    return board_context(view[0], view[1]) or GLOBAL_CONTEXT_ID


def _empty_request():
    """`receive` of a request without a body whose client never leaves (Django listens for the client
    leaving while it answers, and stops listening once it has)."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()

    return receive


def _read_versions() -> dict[str, int]:
    from django.db import close_old_connections

    close_old_connections()
    try:
        return entries.all_versions()
    finally:
        close_old_connections()
