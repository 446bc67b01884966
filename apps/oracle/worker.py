"""The oracle worker loop: claim jobs, run their steps, confirm them on-chain, check health.

Job rows are the truth; a wake-up message (Channels) only shortens the wait.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from apps.chat.health import run_checks

from . import jobs

log = logging.getLogger(__name__)


def load_metric():
    from lib.metrics import get_metric  # imports torch: only workers pay for it

    return get_metric(settings.LLMCHAIN_ORACLE_METRIC)


def run_once(metric) -> int:
    """One pass; returns how many jobs moved."""
    claimed = jobs.claim(settings.LLMCHAIN_ORACLE_BATCH)
    if claimed:
        try:
            jobs.process(claimed, metric)
        except Exception:
            log.exception("oracle: a pass failed; its jobs are retried after their lease")
            raise
    return len(claimed) + jobs.confirm_onchain()


def run_forever(stop: list, metric=None, idle_sleep: float = 0.5, health: bool = True) -> None:
    metric = metric or load_metric()
    next_health = 0.0
    while not stop:
        if health and time.monotonic() >= next_health:
            run_checks()
            next_health = time.monotonic() + settings.LLMCHAIN_HEALTH_INTERVAL_S
        try:
            moved = run_once(metric)
        except Exception:
            moved = 0
            time.sleep(2)
        if not moved:
            time.sleep(idle_sleep)
