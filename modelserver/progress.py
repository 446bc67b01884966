"""What the built-in model server is doing while it starts, in a small JSON file the site reads to
show the model as "starting" with its progress (converting 40%) instead of "not answering".

The file holds {"state": "starting" | "serving" | "failed", "step", "done", "total", "pid", "updated"};
it is replaced whole on each write (never half-written) and refreshed every HEARTBEAT_S while the
server runs, so that a reader can tell a live server from one whose process died (read_status: a minute, since
the process that launches the server writes the first "launching" before the server has imported
its libraries)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

HEARTBEAT_S = 5.0
WRITE_EVERY_S = 0.5  # progress within a step is written at most this often


class StartupStatus:
    """The status file of one server process; every method is a no-op when `path` is None."""

    def __init__(self, path: Path | None):
        self.path = path
        self.fields: dict = {"state": "starting", "step": "loading", "done": None, "total": None}
        self._lock = threading.Lock()
        self._last_write = 0.0
        self._stop = threading.Event()

    def step(self, step: str, done: int | None = None, total: int | None = None, *, force: bool = True) -> None:
        with self._lock:
            self.fields.update(step=step, done=done, total=total)
            if force or time.monotonic() - self._last_write >= WRITE_EVERY_S:
                self._write()

    def serving(self, url: str) -> None:
        with self._lock:
            self.fields = {"state": "serving", "step": "serving", "done": None, "total": None, "url": url}
            self._write()

    def failed(self, error: str) -> None:
        self._stop.set()
        with self._lock:
            self.fields = {"state": "failed", "step": "failed", "done": None, "total": None, "error": error[:500]}
            self._write()

    def stopped(self) -> None:
        self._stop.set()
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def beat(self) -> None:
        """Refresh the file every HEARTBEAT_S until the server fails or stops (a thread)."""
        def loop():
            while not self._stop.wait(HEARTBEAT_S):
                with self._lock:
                    self._write()
        if self.path is not None:
            threading.Thread(target=loop, name="startup-status", daemon=True).start()

    def _write(self) -> None:
        if self.path is None:
            return
        self._last_write = time.monotonic()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({**self.fields, "pid": os.getpid(), "updated": time.time()})
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}-", dir=self.path.parent)
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, self.path)


def read_status(path: Path, *, stale_after: float = 60.0) -> dict | None:
    """The status a server wrote at `path`; None when there is none, it is unreadable, or its
    server stopped refreshing it (the process died)."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict):
        return None
    try:
        age = time.time() - float(status.get("updated") or 0)
    except (TypeError, ValueError):
        return None
    return None if age > stale_after else status


@contextlib.contextmanager
def conversion_progress(status: StartupStatus) -> Iterator[None]:
    """Report the tensors of transformers' GGUF conversion one by one, as the step "converting": its
    loader walks them through `tqdm`, which is swapped for a counter while this block runs."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)

    def counted(iterable: Iterable, *args, **kwargs):
        items = list(iterable)
        for n, item in enumerate(items):
            status.step("converting", n, len(items), force=n == 0)
            yield item
        status.step("converting", len(items), len(items))

    gguf_utils.tqdm = counted
    try:
        yield
    finally:
        gguf_utils.tqdm = original
