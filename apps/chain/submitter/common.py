"""What the submitter's parts share: the statuses they move rows between, the limits one submitter
works under, the outcomes of a relayed request, and the re-send backoff."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterable

from django.conf import settings

from ..models import ChainTransaction, OutboxItem, Sender
from ..work import backoff as _work_backoff

TX = ChainTransaction.Status
ITEM = OutboxItem.Status
WHY = OutboxItem.Failure
NOOP = "noop"
RELAY = "executeBatch"  # the function name of a relayer's transaction (ChainTransaction.function)
LIVE = [TX.SIGNED, TX.SENT, TX.MINED]  # sent or to send, not final yet
ZERO_ADDRESS = "0x" + "00" * 20  # an executeBatch's refund receiver for an atomic batch


class Outcome(enum.Enum):
    """What becomes of a relayed request (Relaying.settle)."""

    CONFIRM = "confirm"  # executed, or found already applied
    AGAIN = "again"  # a custodial request, signed anew
    FAIL = "fail"  # refused for good, or a wallet's request its signer must sign again
    WAIT = "wait"  # its nonce is ahead of the signer's: it waits for the earlier ones
    REFUSE = "refuse"  # failed before the forwarder saw it: its nonce is unused


@dataclass(frozen=True)
class Limits:
    """How much one submitter does per pass and how patiently: batch_size calls per transaction,
    max_items calls signed per lane and pass, lanes leased for lease_s, a sent transaction looked up
    after resend_after, and a call (or a refused transaction) given up after max_attempts."""

    batch_size: int
    max_items: int
    lease_s: float
    resend_after: timedelta
    max_attempts: int

    @classmethod
    def from_settings(cls, *, batch_size: int | None = None, max_items: int | None = None,
                      lease_s: float | None = None, resend_after_s: float | None = None,
                      max_attempts: int | None = None) -> "Limits":
        """Each limit as given, else its LLMCHAIN_* setting."""
        return cls(batch_size=max(1, batch_size or settings.LLMCHAIN_TX_BATCH),
                   max_items=max_items or settings.LLMCHAIN_SUBMIT_MAX_ITEMS,
                   lease_s=lease_s or settings.LLMCHAIN_LEASE_S,
                   resend_after=timedelta(seconds=resend_after_s if resend_after_s is not None
                                          else settings.LLMCHAIN_RESEND_AFTER_S),
                   max_attempts=max_attempts or settings.LLMCHAIN_TX_MAX_ATTEMPTS)


def check_shard(index: int, count: int) -> tuple[int, int]:
    """(index, count) of a submitter among `count` side by side; ValueError unless 0 <= index < count."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: I runs from 0 to N-1")
    return index, count


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N`: the I-th of N submitters (I from 0)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"{text!r} is not I/N (e.g. 0/2)") from None
    return check_shard(index, count)


def backoff(resends: int) -> timedelta:
    """How long a transaction sent `resends` times waits before it is looked up (or sent) again:
    1 s, doubling, up to LLMCHAIN_RESEND_MAX_S."""
    return _work_backoff(resends, cap=settings.LLMCHAIN_RESEND_MAX_S)


def live_txs(lanes: Iterable[Sender], statuses: list[str]) -> list[ChainTransaction]:
    """The lanes' transactions in `statuses`, by lane and nonce, without their signed bytes."""
    return list(ChainTransaction.objects.filter(sender__in=list(lanes), status__in=statuses)
                .select_related("sender").order_by("sender_id", "nonce").defer("raw"))
