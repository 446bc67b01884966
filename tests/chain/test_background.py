"""Values a page shows of the chain are read by a background thread: the page never waits longer than
it says, a slow read is made once however many pages ask, and a failed read is not kept."""

from __future__ import annotations

import threading
import time

from django.core.cache import cache

from apps.chain import background


def test_a_page_waits_at_most_what_it_says_and_one_read_serves_every_page():
    cache.clear()
    release, calls = threading.Event(), []

    def slow():
        calls.append(1)
        release.wait(5)
        return {"head": 7}

    started = time.monotonic()
    assert background.cached_read("t:slow", slow, fresh_s=None, wait_s=0.2) is None
    assert background.cached_read("t:slow", slow, fresh_s=None, wait_s=0.2) is None
    assert time.monotonic() - started < 1.0 and calls == [1], "one read in flight, pages do not wait for it"
    release.set()
    deadline = time.monotonic() + 5
    while background.cached_read("t:slow", slow, fresh_s=None, wait_s=0) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert background.cached_read("t:slow", slow, fresh_s=None, wait_s=0) == {"head": 7} and calls == [1]
    assert "t:slow" not in background._running, "a finished read leaves nothing behind"


def test_a_stale_value_is_answered_at_once_while_it_is_read_again():
    cache.clear()
    values = iter([1, 2])
    assert background.cached_read("t:stale", lambda: next(values), fresh_s=0.1, wait_s=1) == 1
    time.sleep(0.2)
    assert background.cached_read("t:stale", lambda: next(values), fresh_s=0.1, wait_s=1) == 1  # the old one, now
    deadline = time.monotonic() + 5
    while background.cached_read("t:stale", lambda: 3, fresh_s=10, wait_s=0) != 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_failed_read_keeps_nothing_and_is_tried_again():
    cache.clear()

    def broken():
        raise ConnectionError("node away")

    assert background.cached_read("t:broken", broken, fresh_s=None, wait_s=1) is None
    assert background.cached_read("t:broken", lambda: "back", fresh_s=None, wait_s=1) == "back"
