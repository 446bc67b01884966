"""A versioned response cache in front of Django for anonymous board reads.

Under ASGI, Django runs each sync middleware hook and the view in a worker thread: a cached board
still costs ~16 thread hand-offs, 5-9 ms of CPU per request. This ASGI layer answers a repeated
anonymous GET of a board (the page, its htmx fragments, the JSON and CSV exports) with the very
response Django produced the first time, status, headers and body, without entering Django.

Keys are the full request target, the part of the board an htmx request asks for (read from the
request exactly as the view reads it: `views.board.board_part` of django-htmx's `request.htmx`, so a
header the view does not take as htmx, say `HX-Request: false` or a repeated header Django joins, can
never make a fragment stand for the page), and the board's version
(`entries.version`: it moves whenever the indexer changes that board), read from the database at
most every VERSION_TTL_S per process, so a board is served at most that much staler than its
table. Only what is the same for every anonymous visitor is kept: a 200 answer to a request
without a session cookie that sets no cookie. Anything else (a logged-in user, an error, another
path) goes to Django unchanged.
"""

from __future__ import annotations

import io
import re
import time
import zlib
from collections import OrderedDict
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django_htmx.middleware import HtmxDetails

from lib.ids import HEX32_PATTERN
from lib.reputation import GLOBAL_CONTEXT_ID

from . import entries
from .boards import BoardError, parse_context_id
from .views.board import board_part

VERSION_TTL_S = 0.5
# The store holds LLMCHAIN_BOARD_FASTPATH_MB per process; least recently used answers go first. Every
# view of 21 boards of 100 models (7 sorts x 2 directions, page and JSON) is ~74 MB: below that bound an
# LRU store thrashes under a uniform mix.
API_BOARD = re.compile(rf"/api/boards/({HEX32_PATTERN})(?:\.csv)?")


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


class BoardResponseCache:
    def __init__(self, app, *, enabled: bool | None = None):
        self.app = app
        self.enabled = settings.LLMCHAIN_BOARD_FASTPATH if enabled is None else enabled
        self.max_bytes = int(settings.LLMCHAIN_BOARD_FASTPATH_MB * 2**20)
        self.store: OrderedDict[tuple, tuple[int, list, bytes]] = OrderedDict()  # gzipped answers
        self.size = 0
        # The most recently sent of them inflated too, for clients that do not take gzip (inflating a
        # board costs ~1 ms): the same byte budget again.
        self.plain: OrderedDict[tuple, bytes] = OrderedDict()
        self.plain_size = 0
        self._versions: dict[str, int] = {}
        self._versions_at = 0.0
        self.hits = self.misses = 0

    def inflated(self, key: tuple, packed: bytes) -> bytes:
        body = self.plain.get(key)
        if body is not None:
            self.plain.move_to_end(key)
            return body
        body = zlib.decompress(packed, wbits=GZIP_WBITS)
        if len(body) <= self.max_bytes:
            self.plain[key] = body
            self.plain_size += len(body)
            while self.plain_size > self.max_bytes:
                self.plain_size -= len(self.plain.popitem(last=False)[1])
        return body

    async def versions(self) -> dict[str, int]:
        now = time.monotonic()
        if now - self._versions_at > VERSION_TTL_S:
            self._versions = await sync_to_async(_read_versions, thread_sensitive=False)()
            self._versions_at = now
        return self._versions

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
        key = (scope["path"], scope.get("query_string", b""), board_part(HtmxDetails(request)), version)
        hit = self.store.get(key)
        if hit is not None:
            self.hits += 1
            self.store.move_to_end(key)
            status, response_headers, packed = hit
            if accepts_gzip(request):
                response_headers, body = gzip_headers(response_headers, len(packed)), packed
            else:
                body = self.inflated(key, packed)
            await send({"type": "http.response.start", "status": status, "headers": response_headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.misses += 1
        captured: dict = {"body": []}

        async def capture(message):
            if message["type"] == "http.response.start":
                captured["status"] = message["status"]
                captured["headers"] = list(message.get("headers") or [])
            elif message["type"] == "http.response.body":
                captured["body"].append(message.get("body", b""))
                if not message.get("more_body"):
                    captured["done"] = True
            await send(message)

        await self.app(scope, receive, capture)
        if (captured.get("done") and captured.get("status") == 200
                and not any(name.lower() == b"set-cookie" for name, _ in captured["headers"])):
            # Kept gzipped: a board's page shrinks about 6x and its JSON 3x, so every view of every board
            # (12 sorts x 2 directions x page and API of 21 boards, ~190 MB as sent) fits in the store;
            # a client that takes gzip gets it as kept, another one the inflated copy (`inflated`).
            body = b"".join(captured["body"])
            packed = gzip_body(body)
            if len(packed) <= self.max_bytes:
                self.store[key] = (200, captured["headers"], packed)
                self.size += len(packed)
                self.plain[key] = body
                self.plain_size += len(body)
            while self.size > self.max_bytes:
                self.size -= len(self.store.popitem(last=False)[1][2])
            while self.plain_size > self.max_bytes:
                self.plain_size -= len(self.plain.popitem(last=False)[1])


GZIP_WBITS = 31  # zlib's gzip container


def gzip_body(body: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, GZIP_WBITS)
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


def _read_versions() -> dict[str, int]:
    from django.db import close_old_connections

    close_old_connections()
    try:
        return entries.all_versions()
    finally:
        close_old_connections()
