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
