"""Lanes and broadcasting: a lane is one sending address, leased to one submitter at a time, which
assigns its nonces; queued calls are signed into transactions written to the database before any
node sees them, then sent in nonce order, and a refusal is answered (a batch split, fresh fees, a
no-op at the nonce, or the calls signed anew when another transaction took it)."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Iterable

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from lib.errors import is_permanent

from ..client import ChainClient, RpcError, from_hex
from ..keys import KeyError_, account_for, address_slot
from ..models import ChainTransaction, OutboxItem, Sender
from ..work import take
from .calls import Calls, function_of, link, tx_row
from .common import ITEM, LIVE, TX, WHY, Limits, Outcome, backoff
from .relaying import Relaying

log = logging.getLogger(__name__)
# A node refuses a JSON-RPC request over its body limit as a whole (anvil: 2 MiB; Besu, geth: 5 MB),
# and a relayer's executeBatch of 64 ratings is ~43 kB (86 kB as hex): broadcasts go in JSON-RPC
# batches of at most this many bytes of signed transactions (found by `bench chain`).
SEND_BATCH_BYTES = 512 * 1024


# A refusal about the price a transaction offers, which signing it again with fresh fees cures.
FEE_ERRORS = ("underpriced", "fee", "gas price")


def _about_fees(err: Exception) -> bool:
    text = str(err).lower()
    return any(word in text for word in FEE_ERRORS)


class Lanes:
    def __init__(self, client: ChainClient, limits: Limits, stats: Counter, calls: Calls, relaying: Relaying, *,
                 owner: str, shard: tuple[int, int]):
        self.client, self.limits, self.stats = client, limits, stats
        self.calls, self.relaying = calls, relaying
        self.owner, self.shard = owner, shard

    def acquire(self, behind: Iterable[str] = ()) -> list[Sender]:
        """Lease the lanes with work (calls to sign, transactions not final, and `behind`: lanes the
        node lost final transactions of) that are this submitter's, and renew the leases it holds."""
        addresses = set(OutboxItem.objects.filter(status=ITEM.PENDING)
                        .values_list("sender_address", flat=True).distinct())
        addresses |= set(ChainTransaction.objects.filter(status__in=LIVE)
                         .values_list("sender__address", flat=True).distinct())
        addresses |= set(behind)
        addresses = {a for a in addresses if self.mine(a)}
        now = timezone.now()
        # work.take, not work.claim: a lane is leased to its owner, which renews the lease on every
        # pass (so one process assigns a lane's nonces for as long as it lives), not a job to finish.
        free = Q(lease_owner=self.owner) | Q(lease_owner="") | Q(lease_until__lt=now)
        held = []
        for address in sorted(addresses):
            lane, _ = Sender.objects.get_or_create(address=address)
            if take(Sender.objects, [lane.pk], free, lease_owner=self.owner,
                    lease_until=now + timedelta(seconds=self.limits.lease_s)):
                lane.refresh_from_db()
                held.append(lane)
        return held

    def mine(self, address: str) -> bool:
        """Whether a lane is this submitter's to take: with `shard` (i, n), the lanes whose address is
        i modulo n, so that n submitters side by side work on different lanes (each still under a
        lease: two submitters given the same shard take turns, as before)."""
        index, count = self.shard
        return count == 1 or address_slot(address, count) == index

    def release(self) -> None:
        Sender.objects.filter(lease_owner=self.owner).update(lease_owner="", lease_until=None)

    def _next_nonce(self, lane: Sender) -> int:
        if lane.next_nonce is None:
            node_next = self.client.nonce(lane.address, "pending")
            ours = (ChainTransaction.objects.filter(sender=lane, status__in=[*LIVE, TX.CONFIRMED, TX.REVERTED])
                    .order_by("-nonce").values_list("nonce", flat=True).first())
            lane.next_nonce = max(node_next, (ours + 1) if ours is not None else 0)
        return lane.next_nonce

    def sign_new(self, lanes: list[Sender]) -> None:
        fees = None
        for lane in lanes:
            items = self.relaying.ready_items(lane)
            if not items:
                continue
            fees = fees or self.client.fee_fields()
            try:
                account = account_for(lane.address)
            except KeyError_ as exc:
                # A configuration fault, not the calls' fault: they wait until the key is there.
                log.error("cannot sign %d queued calls: %s", len(items), exc)
                self.stats["unsignable"] += len(items)
                continue
            nonce = self._next_nonce(lane)
            txs: list[ChainTransaction] = []
            groups: list[list[OutboxItem]] = []
            for chunk in self.calls.chunks(items):
                to, data, gas, _ = self.calls.call_of(chunk)
                gas *= 2 ** min(max(i.attempts for i in chunk), 3)
                signed = self.client.sign(account, to, data, nonce, gas, fees)
                txs.append(tx_row(lane, signed, function_of(chunk), gas))
                groups.append(chunk)
                nonce += 1
            with transaction.atomic():
                ChainTransaction.objects.bulk_create(txs)
                if not txs[0].pk:  # backends without RETURNING on bulk insert
                    by_hash = dict(ChainTransaction.objects.filter(
                        tx_hash__in=[t.tx_hash for t in txs]).values_list("tx_hash", "pk"))
                    for t in txs:
                        t.pk = by_hash[t.tx_hash]
                link(txs, groups)
                Sender.objects.filter(pk=lane.pk).update(next_nonce=nonce)
                lane.next_nonce = nonce
            self.stats["signed_txs"] += len(txs)
            self.stats["signed_items"] += len(items)

    def broadcast(self, lanes: list[Sender]) -> None:
        now = timezone.now()
        txs = list(ChainTransaction.objects.filter(sender__in=lanes, status=TX.SIGNED)
                   .filter(Q(next_send_at__isnull=True) | Q(next_send_at__lte=now))
                   .select_related("sender").order_by("sender_id", "nonce"))
        if not txs:
            return
        results: list[Exception | None] = []
        part, size = [], 0
        for raw in [bytes(tx.raw) for tx in txs]:
            if part and size + len(raw) > SEND_BATCH_BYTES:
                results += self.client.send_raw(part)
                part, size = [], 0
            part.append(raw)
            size += len(raw)
        results += self.client.send_raw(part)
        accepted = [tx for tx, err in zip(txs, results) if err is None]  # "already known": the node holds it
        for tx in accepted:  # not looked up (and so not re-sent) before its backoff
            tx.status, tx.sent_at, tx.attempts = TX.SENT, now, tx.attempts + 1
            tx.next_send_at = now + backoff(tx.resends)
        ChainTransaction.objects.bulk_update(accepted, ["status", "sent_at", "attempts", "next_send_at"],
                                             batch_size=500)
        self.stats["sent"] += len(accepted)
        for tx, err in zip(txs, results):
            if err is not None:
                self._rejected(tx, err)

    def _rejected(self, tx: ChainTransaction, err: Exception) -> None:
        self.stats["rejected"] += 1
        if isinstance(err, RpcError) and err.nonce_too_low:
            receipt = self.client.receipts([from_hex(tx.tx_hash)])[0]
            if receipt:
                ChainTransaction.objects.filter(pk=tx.pk).update(status=TX.SENT, sent_at=timezone.now())
                return  # it is mined: the next pass confirms it
            # Another transaction took this nonce (the key was used elsewhere): sign the items anew.
            with transaction.atomic():
                ChainTransaction.objects.filter(pk=tx.pk).update(status=TX.DROPPED, last_error=str(err))
                tx.items.filter(status=ITEM.SIGNED).update(status=ITEM.PENDING, transaction=None)
                Sender.objects.filter(pk=tx.sender_id).update(next_nonce=None)
            log.warning("nonce %d of %s was taken by another transaction; re-queued its calls",
                        tx.nonce, tx.sender.address)
            return
        permanent = is_permanent(err)
        if permanent and not _about_fees(err):
            items = list(tx.items.filter(status=ITEM.SIGNED).order_by("pk"))
            if len(items) > 1 and not items[0].atomic_group:
                self.calls.split(tx, items, str(err))
                return
            if items and items[0].atomic_group:
                # An atomic group is never split: a no-op takes the nonce, and its requests (none used
                # its forwarder nonce) are settled like ones the forwarder skipped.
                self.calls.resign(tx, fail_items=True, error=str(err))
                why = f"the node refused to relay it ({err})"
                self.relaying.settle([(self.relaying.redo(i, Outcome.REFUSE), i, why, WHY.NODE_REFUSED)
                                      for i in items], timezone.now())
                return
            if len(items) == 1 and items[0].signer:
                # A request alone that the node refuses (not for its fees) would be refused again: a no-op
                # takes its nonce, the relayer's lane goes on, and the request, which used no forwarder
                # nonce, is settled like one the forwarder skipped.
                self.calls.resign(tx, fail_items=True, error=str(err))
                item = items[0]
                why = f"the node refused to relay it ({err})"
                outcome = self.relaying.redo(item, Outcome.REFUSE)
                self.relaying.settle([(outcome, item, why, WHY.NODE_REFUSED)], timezone.now())
                return
        attempts = tx.attempts + 1
        if not permanent or attempts < self.limits.max_attempts:
            ChainTransaction.objects.filter(pk=tx.pk).update(attempts=attempts, last_error=str(err),
                                                             next_send_at=timezone.now() + backoff(attempts))
            if permanent:
                self.calls.resign(tx, fail_items=False, error=str(err))
            return
        log.error("node keeps refusing %s: %s; its calls fail and a no-op fills nonce %d", tx, err, tx.nonce)
        self.calls.resign(tx, fail_items=True, error=str(err))
