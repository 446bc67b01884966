"""The job machine: what every worker row has, and the one way workers take, retry and loop over it.

Work that must happen is a row, never only a message (Channels messages are at most once). A job
kind is a model plus a step function (docs/architecture.md, "Layers"):

- the model inherits `WorkRow` (status, attempts, claimed_until, next_attempt_at, last_error) and
  narrows `status` to its own `Status` choices, which include FAILED = "failed";
- the step function takes due rows with `claim` (a conditional UPDATE per row: two workers never
  hold the same row, and a dead worker's claim runs out after its lease), moves each one on, and
  ends it with `finish`, `fail`, or `retry_later` (back in the queue after a backoff, or failed
  for good when the error is permanent or the row has used its attempts); it returns how much it
  did (0: nothing to do);
- a command runs the step with `run_worker` (until SIGTERM or Ctrl-C, sleeping when idle,
  surviving an outside system's transient failure), and with a shared (Redis) channel layer a
  `WakeConsumer` (`manage.py runworker <channel>`) runs it at once when `wake_on_commit(channel)`
  says a row was saved.

The error kind of every adapter is lib.errors.ServiceError, with one `permanent` flag.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta

from asgiref.sync import async_to_sync
from channels.consumer import SyncConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from lib.errors import is_permanent

log = logging.getLogger(__name__)
ERROR_MAX_CHARS = 2000  # of last_error
WAKE = {"type": "work.wake"}  # the message a WakeConsumer handles (work_wake)


class WorkRow(models.Model):
    """A row a worker takes, works on and gives back (abstract: each job kind is its own table)."""

    status = models.CharField(max_length=16, db_index=True)  # each kind narrows it to its Status choices
    attempts = models.PositiveIntegerField(default=0)  # claims so far (`claim` counts them)
    claimed_until = models.DateTimeField(null=True, blank=True)  # a worker holds the row until then
    next_attempt_at = models.DateTimeField(default=timezone.now)  # not claimed before then (the backoff)
    last_error = models.TextField(blank=True)

    class Meta:
        abstract = True


# --- claims -------------------------------------------------------------------------------------

def take(rows: QuerySet, pks: Iterable, free: Q, **held) -> list:
    """Of `pks`, the rows this process now holds: each is changed by `held` in one UPDATE whose
    WHERE checks `free` again, so of two processes racing for a row exactly one gets it.

    Every claim in the project is this: `claim` below for work rows; the submitter's sender lanes
    (a lease keyed by its owner, which the owner renews) and the expert queue (an item held for one
    named expert) take their rows with their own `free` condition."""
    return [pk for pk in pks if rows.filter(free, pk=pk).update(**held)]


def claim(rows: type[WorkRow] | QuerySet, active: Iterable[str], limit: int, lease_s: float) -> list:
    """The pks of up to `limit` rows (of a WorkRow model, or a queryset of one), oldest first, in an
    `active` status, due (next_attempt_at passed) and held by nobody: now held for `lease_s`
    seconds, each claim counted in `attempts`."""
    rows = rows._default_manager.all() if isinstance(rows, type) else rows
    now = timezone.now()
    free = Q(status__in=list(active), next_attempt_at__lte=now) & (Q(claimed_until=None) | Q(claimed_until__lt=now))
    due = list(rows.filter(free).order_by("pk").values_list("pk", flat=True)[:limit])
    return take(rows, due, free, claimed_until=now + timedelta(seconds=lease_s), attempts=F("attempts") + 1)


# --- ending an attempt ----------------------------------------------------------------------------

def backoff(attempts: int, *, base: float = 1.0, cap: float) -> timedelta:
    """The wait after the `attempts`-th failed try: base, 2 base, 4 base... never more than `cap`
    seconds (`base` when nothing was tried yet)."""
    return timedelta(seconds=min(base * 2.0 ** (min(max(attempts, 1), 64) - 1), cap))


def _write(row: models.Model, **fields) -> None:
    type(row)._default_manager.filter(pk=row.pk).update(**fields)
    for name, value in fields.items():
        setattr(row, name, value)


def finish(row: WorkRow, status: str, **fields) -> None:
    """The row moved on to `status` (done, or its next step): its claim released, its error cleared."""
    _write(row, status=status, claimed_until=None, last_error="", **fields)


def fail(row: WorkRow, error: BaseException | str, **fields) -> None:
    """The row failed for good (its kind's Status.FAILED); last_error says why."""
    _write(row, status=type(row).Status.FAILED, claimed_until=None, last_error=str(error)[:ERROR_MAX_CHARS],
           **fields)


def retry_later(row: WorkRow, error: BaseException, *, message: str | None = None, base: float = 1.0, cap: float,
                max_attempts: int | None = None, **fields) -> bool:
    """After a failed attempt at a claimed row: back in the queue, claimable again after
    `backoff(row.attempts, base=base, cap=cap)`; or failed for good when the error is permanent
    (lib.errors.is_permanent) or the row has had `max_attempts` attempts. Its status stays; last_error
    is `message` (default: the error's text). Returns whether the row will be tried again."""
    message = message if message is not None else str(error)
    if is_permanent(error) or (max_attempts is not None and row.attempts >= max_attempts):
        fail(row, message, **fields)
        return False
    _write(row, claimed_until=None, last_error=message[:ERROR_MAX_CHARS],
           next_attempt_at=timezone.now() + backoff(row.attempts, base=base, cap=cap), **fields)
    return True


# --- the worker loop --------------------------------------------------------------------------------

def _transient(error: BaseException) -> bool:
    return not is_permanent(error)


def in_turns(*steps: Callable[[], object]) -> Callable[[], object]:
    """One step out of several kinds of work, each taking its turn: every call starts with the kind
    after the one that last did something, and moves on while a kind finds nothing to do. A worker
    serving two queues this way cannot starve one while the other keeps filling."""
    turn = 0

    def step() -> object:
        nonlocal turn
        for offset in range(len(steps)):
            index = (turn + offset) % len(steps)
            did = steps[index]()
            if did:
                turn = (index + 1) % len(steps)
                return did
        return 0

    return step


def run_worker(step: Callable[[], object], *, idle_sleep: float, until: Callable[[], bool] | None = None,
               survive: Callable[[BaseException], bool] = _transient, pause: float | None = None,
               pause_max: float = 10.0, name: str = "worker", say: Callable[[str], object] | None = log.warning,
               stop: threading.Event | None = None) -> None:
    """Call `step()` until SIGTERM or Ctrl-C (or until `stop` is set, or `until()` is true after a step).

    `step` returns what it did; after a step that did nothing (a falsy result) the loop sleeps
    `idle_sleep` seconds. A step that raises an error `survive` accepts (by default a transient one:
    an outside system that is down, busy or slow) is tried again after a pause that doubles from
    `pause` (default `idle_sleep`) up to `pause_max`; the first error of a run of them is said once
    (`say`, the log by default; None: silent), and so is the recovery. Any other error ends the loop.
    SIGTERM is caught only in the main thread (a consumer's thread cannot, and need not, handle it);
    sleeps end at once when it arrives."""
    stop = stop or threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) \
        if threading.current_thread() is threading.main_thread() else None
    first_pause = pause if pause is not None else idle_sleep
    wait, failing_since = first_pause, None
    try:
        while not stop.is_set():
            try:
                did = step()
            except Exception as exc:
                if not survive(exc):
                    raise
                if failing_since is None:
                    failing_since = time.monotonic()
                    if say is not None:
                        say(f"{name} failing: {exc}; retrying " + (
                            f"every {wait:g} s" if wait >= pause_max else f"in {wait:g} s, then less often"))
                stop.wait(wait)
                wait = min(wait * 2, pause_max)
                if until is not None and until():
                    return
                continue
            if failing_since is not None:
                if say is not None:
                    say(f"{name} working again after {time.monotonic() - failing_since:.0f} s")
                wait, failing_since = first_pause, None
            if until is not None and until():
                return
            if not did:
                stop.wait(idle_sleep)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# --- waking workers ---------------------------------------------------------------------------------

def wake_on_commit(channel: str) -> None:
    """Wake the background consumer of `channel` once the current transaction commits (at once
    outside one). Best-effort, and only with the shared (Redis) channel layer: the in-memory layer
    of `make run` has no other process to wake, and there the polling commands find the row. A lost
    wake-up only delays the row until the next wake-up or poll."""
    if settings.REDIS_URL:
        transaction.on_commit(lambda: _wake(channel))


def _wake(channel: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.send)(channel, WAKE)
    except Exception as exc:  # noqa: BLE001 - a full channel or a Redis hiccup must not fail the save
        log.debug("could not wake %s: %s", channel, exc)


class WakeConsumer(SyncConsumer):
    """The worker of one channel (`manage.py runworker <channel>`, routed in llmchain_site/asgi.py):
    each wake-up runs `work()`, by default `step()` until a step does nothing. Subclasses name their
    `channel` and give `step` (or `work`, for a worker that must go on until something else is true)."""

    channel: str = ""

    def work_wake(self, message) -> None:
        self.work()

    def work(self) -> None:
        while self.step():
            pass

    def step(self) -> object:
        raise NotImplementedError
