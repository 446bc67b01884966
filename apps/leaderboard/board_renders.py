"""Renders of many board views at once, outside the ASGI request path, shared between the site's
processes (apps/leaderboard/fastpath.py keeps them), and the HTTP encoding of the kept answers.

While the indexer folds, every board's version moves every second or two. Keeping each view of each
board within LLMCHAIN_BOARD_MAX_STALE_S then takes views x processes / bound renders a second, and a
render through Django's ASGI handler costs ~10 ms of thread hand-offs besides the view's few
milliseconds. So a board's kept views are rendered again together (`refresh`) through Django's handler
in its synchronous mode (the same middleware and views, no hand-offs), and gzipped there, in a child
process of each web process (`Renderer`: rendering in a thread of the web process starved its event
loop of the GIL); and where the cache is shared between processes (Redis: settings.CACHES), one process
renders a board's views for all of them at a time: it takes the board's lease (`cache.add`, held for
the refresh period), renders, and publishes each answer under its view; the others wait for it to
publish them (a few seconds at most) and take them instead of rendering their own."""

from __future__ import annotations

import hashlib
import io
import os
import time
import uuid
import zlib
from dataclasses import dataclass

from django.core.handlers.asgi import ASGIRequest
from django.core.handlers.base import BaseHandler
from django.db import close_old_connections

# Kept answers are gzipped at level 1: a board page of 272 KB packs to 51 KB in 1.2 ms, against 41 KB
# in 3.3 ms at zlib's default (6); a live site packs every view again each time its board moves.
GZIP_LEVEL = 1
GZIP_WBITS = 31  # zlib's gzip container
SHARED_PREFIX = "board-answer:"


def gzip_body(body: bytes) -> bytes:
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    return packer.compress(body) + packer.flush()


def accepts_gzip(request: ASGIRequest) -> bool:
    """Whether the client takes a gzip-encoded answer (Accept-Encoding names gzip without q=0)."""
    for part in request.META.get("HTTP_ACCEPT_ENCODING", "").lower().split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() in ("gzip", "*") and params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000"):
            return True
    return False


def gzip_headers(headers: list, length: int) -> list:
    """A kept answer's headers for its gzipped body: its length, its encoding, and Vary on Accept-Encoding."""
    out, varied = [], False
    for name, value in headers:
        low = name.lower()
        if low == b"content-length":
            continue
        if low == b"vary":
            value, varied = value + b", Accept-Encoding", True
        out.append((name, value))
    if not varied:
        out.append((b"Vary", b"Accept-Encoding"))
    return [*out, (b"Content-Encoding", b"gzip"), (b"Content-Length", str(length).encode())]


def quiet_scope(scope: dict) -> dict:
    """The request a kept view answered, to render it again: an anonymous GET with the same headers but
    its encoding (the kept body is gzipped here) and without the client's address."""
    return {**scope, "client": None, "headers": [(k, v) for k, v in scope.get("headers", [])
                                                  if k.lower() not in (b"accept-encoding", b"cookie")]}


@dataclass(frozen=True)
class Answer:
    """One rendered view: Django's 200 answer, its body gzipped; `shows` the board version it shows and
    `current_wall` the wall-clock time it was last known to be the board's (time.time(): the processes
    share it, not their monotonic clocks)."""

    shows: str
    headers: list
    packed: bytes
    current_wall: float


_handler: BaseHandler | None = None


def django_render(scope: dict) -> tuple[int, list, bytes | None]:
    """(status, headers, body) of Django's answer to this anonymous GET, made in this thread through the
    handler's synchronous middleware chain (call between close_old_connections, as a request's start
    and end do); body None for a streamed answer (never kept)."""
    global _handler
    if _handler is None:
        handler = BaseHandler()
        handler.load_middleware(is_async=False)
        _handler = handler
    response = _handler.get_response(ASGIRequest(scope, io.BytesIO()))
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()]
    headers += [(b"Set-Cookie", c.output(header="").encode("ascii").strip()) for c in response.cookies.values()]
    return response.status_code, headers, None if response.streaming else response.content


def _database() -> bytes:
    """Which database the boards are read from: processes share answers only when they read the same one
    (a Redis may serve several sites, or the test runs' databases)."""
    from django.db import connection

    settings = connection.settings_dict
    return "\0".join(str(settings.get(k) or "") for k in ("ENGINE", "HOST", "PORT", "NAME")).encode()


def shared_key(view: tuple) -> str:
    path, query, part = view
    digest = hashlib.sha256(b"\0".join([_database(), path.encode("latin-1"), query, part.encode()])).hexdigest()
    return SHARED_PREFIX + digest


def _board_key(prefix: str, context: str) -> str:
    return prefix + hashlib.sha256(_database() + b"\0" + context.encode()).hexdigest()


def lease_key(context: str) -> str:
    return _board_key("board-render-lease:", context)


def published_key(context: str) -> str:
    """Where the holder of a board's lease says it has published its answers (the lease's token)."""
    return _board_key("board-render-published:", context)


# How long a process that finds another holding a board's lease waits for that one's answers (a board's
# views take ~0.4 s to render on an idle machine, a few seconds on a busy one), polling every LEASE_POLL_S.
LEASE_WAIT_S = 5.0
LEASE_POLL_S = 0.02


def await_publication(shared, context: str, wait: float) -> None:
    """Wait until the process holding the board's lease has published its answers, at most `wait`
    seconds (and not at all once nobody holds the lease)."""
    deadline = time.monotonic() + wait
    while (holder := shared.get(lease_key(context))) is not None and shared.get(published_key(context)) != holder:
        if time.monotonic() >= deadline:
            return
        time.sleep(LEASE_POLL_S)


def not_older(shows: str, than: str) -> bool:
    """Whether a board version ("every-board.this-board" counters, entries.version_key) is the same as
    `than` or later in every part."""
    try:
        a, b = [int(x) for x in shows.split(".")], [int(x) for x in than.split(".")]
    except ValueError:
        return False
    return len(a) == len(b) and all(x >= y for x, y in zip(a, b))


def keepable(status: int, headers: list, body: bytes | None) -> bool:
    """Whether an answer is the same for every anonymous visitor: a whole 200 that sets no cookie."""
    return status == 200 and body is not None and not any(name.lower() == b"set-cookie" for name, _ in headers)


def shown_version(headers: list, version_header: bytes, default: str) -> str:
    return next((value.decode("latin-1") for name, value in headers if name.lower() == version_header), default)


def refresh(context: str, version: str, views: list[tuple[tuple, dict, float, str]], *, render, shared,
            period: float, version_header: bytes, needed: frozenset | set = frozenset(),
            prepare=None) -> dict[tuple, Answer]:
    """New answers for these kept views of one board ((view, its request's scope, the wall time its kept
    answer was last known current, the version it shows)), in this thread: those another process
    published since that show no older version, and the rest rendered with `render` and published: all of
    them when this process takes the board's lease (or nothing is shared), else, once the lease's holder
    has published its answers (`await_publication`), only the `needed` ones (a request waits for them)
    found nowhere. A view whose render is not keepable gets nothing (its kept answer stays).

    `prepare(context)`, called before the first render here, brings what the views are built from up to the board's current
    version (boards.current_standing) and returns (that version, the wall time from which it is known
    current), or None: an answer showing that version or a later one is current from then. Without it,
    an answer showing an older version than `version` is taken as current `period` before its render (a
    view may reuse a standing built up to that long before: boards.reuse_within). The difference matters:
    a refresh comes at most every `period` and its answers may be served until the bound (2 x `period`)
    after they were current, so taken `period` older they were past the bound as the next refresh began,
    and every read waited for it (at 100 evaluations a second, 6 refreshes a second per process)."""
    close_old_connections()
    try:
        found: dict[tuple, Answer] = {}
        token, lease_s = uuid.uuid4().hex, max(1, round(period))
        leased = False
        if shared is not None:
            leased = shared.add(lease_key(context), token, timeout=lease_s)
            if not leased:
                # Another process renders this board now, or did within `period`: its answers are taken
                # once it has published them. (Taken without waiting, they were those of its previous
                # refresh, already half the bound old: they expired just as this process's next refresh
                # came due, and readers here waited for renders of their own.)
                await_publication(shared, context, min(LEASE_WAIT_S, period))
            published = shared.get_many([shared_key(view) for view, _, _, _ in views])
            for view, _, kept_wall, kept_shows in views:
                answer = published.get(shared_key(view))
                if answer is not None and answer.current_wall > kept_wall and not_older(answer.shows, kept_shows):
                    found[view] = answer
            if not leased:
                # Only the views a request here waits for (`needed`) and found nowhere are rendered.
                views = [v for v in views if v[0] in needed and v[0] not in found]
        views = [v for v in views if not (v[0] in found and found[v[0]].shows == version)]
        # Brought up to date only when something is rendered here (a process that takes another's
        # answers builds nothing).
        fresh = prepare(context) if prepare is not None and views else None
        rendered: dict[str, Answer] = {}
        for view, scope, _, _ in views:
            began = time.time()
            status, headers, body = render(scope)
            if keepable(status, headers, body):
                shows = shown_version(headers, version_header, version)
                answer = Answer(shows, headers, gzip_body(body), _current_since(shows, version, began, fresh, period))
                found[view] = answer
                rendered[shared_key(view)] = answer
        if shared is not None and rendered:
            shared.set_many(rendered, timeout=max(60, round(10 * period)))
        if leased:
            shared.set(published_key(context), token, timeout=lease_s)
        return found
    finally:
        close_old_connections()


def _current_since(shows: str, version: str, began: float, fresh: tuple[str, float] | None, period: float) -> float:
    """The wall time from which an answer showing `shows`, rendered from `began`, is known current: from
    when `prepare` read the board's version if it shows that one or later; else from its render if it
    shows `version`; else (the view reused a standing built a little before, boards.reuse_within) from
    `period` before its render."""
    if fresh is not None and not_older(shows, fresh[0]):
        return fresh[1]
    return began if shows == version else began - period


def shared_cache():
    """Django's cache when every process of the site shares it (Redis), else None: a process-local cache
    (LocMem, Dummy) shares nothing between processes."""
    from django.conf import settings
    from django.core.cache import cache

    backend = settings.CACHES["default"]["BACKEND"]
    return cache if "redis" in backend.lower() or "memcached" in backend.lower() else None


# -- the renders in a process of their own -------------------------------------------------------------
# Rendering is CPU-bound Python: in a thread of the web process it holds the GIL, and the event loop,
# which gives it up at every socket call, waits to take it back each time (at 100 evaluations a second
# folded, a board served from memory took seconds). So each web process renders its boards in one child
# process. (At a lower CPU priority than serving, nice 10, the renders starved on a busy machine and the
# readers waiting for them with them: no answer at all in a second's window of the bench under load.)


class Renderer:
    """One child process (spawned by `start`, with Django set up as this process's) that runs `refresh`
    with `django_render` and the site's shared cache."""

    def __init__(self):
        self._pool = None

    def start(self) -> None:
        """Start the child now (it takes a second or more to set Django up), so that it is ready when a
        board first moves: called once a board view is kept."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_child, initargs=(os.getpid(),))
            self._pool.submit(os.getpid)  # a worker is spawned at the first submit

    def refresh(self, context: str, version: str, views: list, *, period: float, version_header: bytes,
                needed=frozenset()):
        """A concurrent.futures.Future of refresh(...)'s answers, made in the child."""
        self.start()
        return self._pool.submit(_refresh_in_child, context, version, views, period, version_header, set(needed))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


# The templates of the board's views: loaded (and kept by Django's cached loader) as the child starts,
# with the URL patterns and the views they import, so that its first refresh renders like the next ones.
BOARD_TEMPLATES = ("leaderboard/board.html", "leaderboard/_board.html", "leaderboard/_table.html")


def _start_child(parent: int) -> None:
    import threading

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmchain_site.settings")
    django.setup()
    from django.template.loader import get_template
    from django.urls import get_resolver

    from . import boards

    boards.keep_views = False  # each view rendered here once per version: no copy kept in the cache
    get_resolver().url_patterns
    for name in BOARD_TEMPLATES:
        get_template(name)

    def watch():  # the child ends with its web process, however that ends
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _refresh_in_child(context, version, views, period, version_header, needed):
    from .boards import current_standing

    return refresh(context, version, views, render=django_render, shared=shared_cache(), period=period,
                   version_header=version_header, needed=needed, prepare=current_standing)
