"""`python manage.py runworker chain-submit`: Channels wakes the submitter as soon as a call is queued.

Messages are at-most-once, so they only wake a worker; the outbox rows are the truth, and
`manage.py chain work` (which polls) picks up anything a lost message left behind.
"""

from __future__ import annotations

from .ledger import default_ledger
from .outbox import CHANNEL
from .submitter import Submitter
from .work import WakeConsumer


class SubmitConsumer(WakeConsumer):
    """Runs the submitter until nothing is left to sign, send or confirm: a call is done only once
    its block is final, so a wake-up's work outlasts the pass that sends it."""

    channel = CHANNEL

    def work(self) -> None:
        submitter = Submitter(default_ledger())
        try:
            submitter.run_forever(until_idle=True)
        finally:
            submitter.release()
