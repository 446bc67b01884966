"""`python manage.py runworker oracle-jobs`: Channels wakes the oracle as soon as a job is saved.

Messages are at-most-once, so they only wake a worker; the job rows are the truth, and
`manage.py oracle work` (which polls) picks up anything a lost message left behind.
"""

from __future__ import annotations

from channels.consumer import SyncConsumer

from .worker import load_metric, run_once

CHANNEL = "oracle-jobs"


class OracleWakeConsumer(SyncConsumer):
    metric = None

    def job_created(self, message):
        if OracleWakeConsumer.metric is None:
            OracleWakeConsumer.metric = load_metric()
        while run_once(OracleWakeConsumer.metric):
            pass
