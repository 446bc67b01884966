"""Values a page shows of the chain without waiting on it: read by a background thread into the
cache, and answered from the cache (possibly a little stale) while the next read runs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.core.cache import cache

log = logging.getLogger(__name__)
KEPT_S = 3600  # how long a value stays readable once nobody reads it again

_lock = threading.Lock()
_running: dict[str, threading.Thread] = {}


def _read_into_cache(key: str, read: Callable[[], object], keep_s: float | None) -> None:
    try:
        value = read()
        if value is not None:
            cache.set(key, {"at": time.time(), "value": value}, keep_s)
    except Exception:  # a background read never takes its error to a page
        log.exception("background read of %s failed", key)
    finally:
        with _lock:  # keys come and go (a check per block): forget this one's thread
            if _running.get(key) is threading.current_thread():
                del _running[key]


def _start(key: str, read: Callable[[], object], keep_s: float | None) -> threading.Thread:
    with _lock:
        thread = _running.get(key)
        if thread is None or not thread.is_alive():
            thread = threading.Thread(target=_read_into_cache, args=(key, read, keep_s), daemon=True,
                                      name=f"read {key[:40]}")
            _running[key] = thread
            thread.start()
        return thread


def cached_read(key: str, read: Callable[[], object], *, fresh_s: float | None, wait_s: float,
                keep_s: float | None = KEPT_S):
    """The value of `read()` kept under `key`, or None while none was read yet. Once it is older than
    `fresh_s` (None: never), one background thread per process and key reads it again; the caller
    gets the older value at once. Only when nothing is kept does the caller wait, `wait_s` at most.
    `read` must not use the database (it runs outside the caller's transaction) and may return None
    for "nothing to keep"."""
    found = cache.get(key)
    if found is None or (fresh_s is not None and time.time() - found["at"] > fresh_s):
        thread = _start(key, read, keep_s)
        if found is None:
            thread.join(wait_s)
            found = cache.get(key)
    return found["value"] if found else None
