"""`python manage.py runworker oracle-jobs debate-jobs`: Channels wakes the oracle as soon as an
evaluation job is saved, and the debate worker as soon as a debate job is.

Messages are at-most-once, so they only wake a worker; the job rows are the truth, and
`manage.py oracle work` and `debate work` (which poll) pick up anything a lost message left behind.
"""

from __future__ import annotations

from apps.chain.work import WakeConsumer

from . import debates, jobs
from .worker import load_metric, run_once


class OracleWakeConsumer(WakeConsumer):
    channel = jobs.CHANNEL
    metric = None  # loaded on the first wake-up, then kept: loading the encoder takes seconds

    def step(self) -> int:
        if OracleWakeConsumer.metric is None:
            OracleWakeConsumer.metric = load_metric()
        return run_once(OracleWakeConsumer.metric)


class DebateWakeConsumer(WakeConsumer):
    channel = debates.CHANNEL

    def step(self) -> int:
        return debates.run_once()
