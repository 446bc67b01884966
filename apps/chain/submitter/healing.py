"""Healing: give the node back what it lost (its pool after a restart, its last blocks, even final
ones), fill a nonce gap this site never signed, and say once why a lane cannot progress; every
re-send backs off, so a node that is behind is not hammered."""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from typing import Callable

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from ..client import ChainClient, RpcError, to_hex
from ..keys import account_for
from ..models import ChainTransaction, OutboxItem, Sender
from .common import ITEM, LIVE, NOOP, TX, Limits, backoff, live_txs

log = logging.getLogger(__name__)


class Healing:
    def __init__(self, client: ChainClient, limits: Limits, stats: Counter, mine: Callable[[str], bool]):
        """`mine`: whether a lane (by address) is this submitter's to heal."""
        self.client, self.limits, self.stats, self.mine = client, limits, stats, mine
        self._next_sweep = 0.0

    def lanes_behind_the_node(self) -> set[str]:
        """Every LLMCHAIN_RESEND_AFTER_S, the lanes whose next nonce is above the node's count of their
        mined transactions although nothing of theirs is live: the node lost final blocks of theirs."""
        if time.monotonic() < self._next_sweep:
            return set()
        self._next_sweep = time.monotonic() + self.limits.resend_after.total_seconds()
        lanes = [(a, n) for a, n in Sender.objects.filter(next_nonce__isnull=False)
                 .values_list("address", "next_nonce") if self.mine(a)]
        counts = self.client.batch([("eth_getTransactionCount", [a, "latest"]) for a, _ in lanes]) if lanes else []
        return {a for (a, n), c in zip(lanes, counts) if not isinstance(c, RpcError) and int(c, 16) < n}

    def heal(self, lanes: list[Sender]) -> None:
        """Give the node back what it lost, without hammering it.

        Per lane, the node's nonces say what it holds: `latest` counts the sender's transactions in
        its chain, `pending` those it could mine next. A final transaction (confirmed or reverted)
        at or above `latest` was in blocks the node lost: it is sent again with the same bytes and
        its calls are unconfirmed until it is final again. A sent transaction at or above `pending`,
        or sent long ago, is looked up: one the node does not hold is sent again, each re-send
        backing off (1 s, doubling, up to LLMCHAIN_RESEND_MAX_S). A nonce below all of this lane's
        live transactions that the node still waits for, and that this site never signed, is a gap
        nothing here can fill by re-sending: a no-op fills it once it has stayed for
        LLMCHAIN_RESEND_AFTER_S, and the lane says why it waits meanwhile."""
        if not lanes:
            return
        counts = self.client.batch([("eth_getTransactionCount", [lane.address, tag])
                                    for lane in lanes for tag in ("latest", "pending")])
        for reply in counts:
            if isinstance(reply, RpcError):
                raise reply
        nonces = {lane.pk: (int(counts[2 * i], 16), int(counts[2 * i + 1], 16)) for i, lane in enumerate(lanes)}
        self._unfinalise_lost(lanes, {pk: latest for pk, (latest, _) in nonces.items()})
        now = timezone.now()
        stale = now - self.limits.resend_after
        live: dict[int, list[ChainTransaction]] = defaultdict(list)
        for tx in live_txs(lanes, LIVE):
            live[tx.sender_id].append(tx)
        to_check = []
        for lane in lanes:
            pending = nonces[lane.pk][1]
            txs = live[lane.pk]
            to_check += [tx for tx in txs if tx.status == TX.SENT
                         and (tx.nonce >= pending or (tx.sent_at is not None and tx.sent_at < stale))
                         and (tx.next_send_at is None or tx.next_send_at <= now)]
            self._fill_gap(lane, pending, next((tx.nonce for tx in txs if tx.nonce >= pending), None), now)
        if not to_check:
            return
        held = self.client.batch([("eth_getTransactionByHash", [tx.tx_hash]) for tx in to_check])
        resend, keep = [], []
        for tx, found in zip(to_check, held):
            if isinstance(found, RpcError):
                raise found
            (keep if found else resend).append(tx)
        for tx in resend:  # broadcast on this pass; looked up again only after a longer wait each time
            tx.status, tx.resends, tx.next_send_at = TX.SIGNED, tx.resends + 1, None
        for tx in keep:  # held (in its pool, maybe waiting behind a gap): look again later, not every pass
            tx.next_send_at = now + backoff(tx.resends + 3)
        ChainTransaction.objects.bulk_update(resend + keep, ["status", "resends", "next_send_at"], batch_size=500)
        if resend:
            self.stats["resent"] += len(resend)
            log.info("re-sending %d transactions the node does not hold", len(resend))

    def _unfinalise_lost(self, lanes: list[Sender], latest: dict[int, int]) -> None:
        """Final transactions at nonces the node's chain no longer counts (`latest`, by lane) were in
        blocks it lost: back to signed, their calls unconfirmed. One query finds each lane's highest
        final nonce; only a lane the node is below is read."""
        final = [TX.CONFIRMED, TX.REVERTED]
        top = dict(ChainTransaction.objects.filter(sender__in=lanes, status__in=final).values("sender")
                   .annotate(top=Max("nonce")).values_list("sender", "top"))
        for lane in lanes:
            if top.get(lane.pk, -1) >= latest[lane.pk]:
                self._unfinalise(lane, list(ChainTransaction.objects.filter(
                    sender=lane, nonce__gte=latest[lane.pk], status__in=final).defer("raw")))

    def _unfinalise(self, lane: Sender, lost: list[ChainTransaction]) -> None:
        with transaction.atomic():
            ChainTransaction.objects.filter(pk__in=[tx.pk for tx in lost]).update(
                status=TX.SIGNED, block_number=None, block_hash="", succeeded=None, final_at=None, next_send_at=None)
            OutboxItem.objects.filter(transaction__in=[tx.pk for tx in lost], status=ITEM.CONFIRMED,
                                      duplicate=False).update(status=ITEM.SIGNED, confirmed_at=None)
        self.stats["unconfirmed"] += len(lost)
        log.warning("the node lost %d final transactions of %s (nonces %d..%d; it lost blocks deeper than "
                    "LLMCHAIN_FINALITY): their calls are unconfirmed and sent again", len(lost), lane.address,
                    min(tx.nonce for tx in lost), max(tx.nonce for tx in lost))

    def _fill_gap(self, lane: Sender, pending: int, ours: int | None, now) -> None:
        """`ours`: the lane's lowest live nonce at or above the node's `pending` (a final transaction up
        there was unfinalised just before, so live ones are all there can be)."""
        if ours is None or ours == pending:
            self._set_stuck(lane, "")
            return
        # The node waits for `pending`, which this site never signed (the key was used elsewhere, or
        # the node's pool lost a transaction another process sent): nothing of ours at that nonce.
        reason = (f"the node waits for nonce {pending} of {lane.address}, which this site never signed; "
                  f"its transactions from nonce {ours} on wait behind it")
        self._set_stuck(lane, reason)
        if lane.stuck_since and now - lane.stuck_since >= self.limits.resend_after:
            account = account_for(lane.address)
            for nonce in range(pending, ours):
                signed = self.client.sign(account, account.address, b"", nonce, 21_000)
                ChainTransaction.objects.create(sender=lane, nonce=nonce, function=NOOP, tx_hash=to_hex(signed.hash),
                                                raw=signed.raw, gas_limit=21_000)
            log.warning("filled nonces %d..%d of %s with no-op transfers", pending, ours - 1, lane.address)
            self._set_stuck(lane, "")

    def _set_stuck(self, lane: Sender, reason: str) -> None:
        """Record why a lane cannot progress; say it in the log only when it changes."""
        if reason == lane.stuck_reason:
            return
        since = timezone.now() if reason else None
        Sender.objects.filter(pk=lane.pk).update(stuck_reason=reason, stuck_since=since)
        lane.stuck_reason, lane.stuck_since = reason, since
        if reason:
            log.warning("lane %s cannot progress: %s", lane.address, reason)
        else:
            log.info("lane %s progresses again", lane.address)
