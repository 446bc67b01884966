"""The submitter: signs queued calls, sends them in order, and confirms them once they are final.

Guarantees, whatever process (or node) dies when:
- a transaction is written to the database (raw bytes, hash, nonce) before any node sees it,
  so after a crash the very same bytes are sent again: a call can never be signed twice with
  two nonces and land twice;
- nonces are assigned here, per sender lane, under a lease that one process holds at a time;
- a receipt makes a transaction "mined"; its calls are confirmed only when its block is final
  (LLMCHAIN_FINALITY), and a mined transaction whose receipt disappears (its block was lost or
  reorganised away) is sent again with the same bytes;
- a node that lost its pool (restart) or its last blocks gets the lost transactions again, in
  nonce order, even ones that were final (a node that lost more blocks than the finality rule
  allows for): their calls go back to unconfirmed until they are final again;
- re-sends back off per transaction, and a lane that cannot progress says why once (the log,
  `chain status`, the admin), never on every pass;
- a revert that only says "already done" (a duplicate interaction id...) counts as confirmed
  only after the on-chain record is checked against the queued call.

The parts, each holding one concern (the Submitter below runs them in this order on every pass):
- lanes.py: leasing lanes, assigning nonces, signing queued calls, broadcasting, answering refusals;
- receipts.py: receipts, finality, reverts diagnosed;
- healing.py: what the node lost (pool, blocks, final ones), nonce gaps, stuck lanes;
- relaying.py: relayed requests in the forwarder's nonce order, signed anew, settled once final;
- calls.py: batches, call data, and a refused transaction replaced at its nonce;
- common.py: statuses, limits, outcomes and the backoff they share.
"""

from __future__ import annotations

import os
import socket
from collections import Counter

from ..client import ChainError
from ..ledger import Ledger
from ..models import ChainTransaction, OutboxItem, Sender
from ..work import run_worker
from .calls import Calls
from .common import ITEM, LIVE, NOOP, RELAY, ZERO_ADDRESS, Limits, Outcome, check_shard, parse_shard
from .healing import Healing
from .lanes import FEE_ERRORS, SEND_BATCH_BYTES, Lanes
from .receipts import Receipts
from .relaying import RELAYED_CALL_BYTES, Relaying, unrelayable

__all__ = ["FEE_ERRORS", "LIVE", "NOOP", "RELAY", "RELAYED_CALL_BYTES", "SEND_BATCH_BYTES", "Limits", "Outcome",
           "Submitter", "ZERO_ADDRESS", "check_shard", "parse_shard", "unrelayable"]


class Submitter:
    """One submitter: the parts above, sharing one ledger, one client, one set of limits and one
    tally (`stats`), run pass after pass."""

    def __init__(self, ledger: Ledger, *, owner: str | None = None, batch_size: int | None = None,
                 max_items: int | None = None, lease_s: float | None = None, resend_after_s: float | None = None,
                 max_attempts: int | None = None, shard: tuple[int, int] = (0, 1)):
        self.ledger = ledger
        self.client = ledger.client
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.shard = check_shard(*shard)
        self.limits = Limits.from_settings(batch_size=batch_size, max_items=max_items, lease_s=lease_s,
                                           resend_after_s=resend_after_s, max_attempts=max_attempts)
        self.stats: Counter = Counter()
        self.calls = Calls(ledger, self.client, self.limits, self.stats)
        self.relaying = Relaying(ledger, self.client, self.limits, self.stats)
        self.lanes = Lanes(self.client, self.limits, self.stats, self.calls, self.relaying,
                           owner=self.owner, shard=self.shard)
        self.receipts = Receipts(ledger, self.client, self.limits, self.stats, self.calls, self.relaying)
        self.healing = Healing(self.client, self.limits, self.stats, self.lanes.mine)

    # -- the loop --------------------------------------------------------------------------------
    def run_once(self) -> Counter:
        before = self.stats.copy()
        lanes = self._acquire_lanes()
        if lanes:
            self.receipts.check(lanes)
            self.healing.heal(lanes)
            self.lanes.sign_new(lanes)
            self.lanes.broadcast(lanes)
        return self.stats - before

    def run_forever(self, idle_sleep: float = 0.2, until_idle: bool = False) -> None:
        """Pass after pass until SIGTERM (or, `until_idle`, until nothing is left to send or confirm);
        any chain error (the node down, or refusing a call it may accept later) backs off up to 10 s."""
        run_worker(self.run_once, idle_sleep=idle_sleep, until=(lambda: not self.has_work()) if until_idle else None,
                   survive=lambda exc: isinstance(exc, ChainError), name="chain")

    def has_work(self) -> bool:
        return (OutboxItem.objects.filter(status__in=[ITEM.PENDING, ITEM.SIGNED]).exists()
                or ChainTransaction.objects.filter(status__in=LIVE).exists())

    def mine(self, address: str) -> bool:
        """Whether a lane is this submitter's to take (see Lanes.mine)."""
        return self.lanes.mine(address)

    def release(self) -> None:
        self.lanes.release()

    def _acquire_lanes(self) -> list[Sender]:
        """The lanes this pass works on: those with work, and those the node lost final blocks of."""
        return self.lanes.acquire(self.healing.lanes_behind_the_node())

    def _ready_items(self, lane: Sender) -> list[OutboxItem]:
        """What the next pass would sign for `lane`, in order (see Relaying.ready_items)."""
        return self.relaying.ready_items(lane)
