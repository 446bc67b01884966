"""The oracle worker loop: claim jobs, run their steps, confirm them on-chain, check health.

Job rows are the truth; a wake-up message (Channels) only shortens the wait.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from apps.chain.work import run_worker
from apps.chat import ratings
from apps.chat.arena import advance_waiting, settle_battles
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
    # Saved ratings and arena votes go on their way here, never in the request that saved them: a
    # rating follows its answer's autoEval, a vote its two answers' (openBattle and the vote, in one transaction).
    return (len(claimed) + jobs.confirm_onchain() + ratings.queue_waiting_ratings() + ratings.settle_ratings()
            + settle_battles() + advance_waiting() + jobs.release_held())


def run_forever(metric=None, idle_sleep: float = 0.5, health: bool = True) -> None:
    """Passes until SIGTERM or Ctrl-C, with the endpoints' health checks every LLMCHAIN_HEALTH_INTERVAL_S.
    A failed pass (logged by run_once) is tried again 2 s later: its jobs wait for their lease."""
    from .weights import say_refusal

    metric = metric or load_metric()
    say_refusal(metric)
    next_health = 0.0

    def step() -> int:
        nonlocal next_health
        if health and time.monotonic() >= next_health:
            run_checks()
            next_health = time.monotonic() + settings.LLMCHAIN_HEALTH_INTERVAL_S
        return run_once(metric)

    run_worker(step, idle_sleep=idle_sleep, survive=lambda exc: True, pause=2, pause_max=2, name="oracle")
