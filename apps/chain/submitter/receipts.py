"""Receipts and finality: a receipt makes a transaction mined, a final block confirms its calls
(a relayer's, once what the forwarder did with each request is read), a reverted one is diagnosed
call by call, and a mined one whose receipt is gone is sent again with the same bytes."""

from __future__ import annotations

import logging
from collections import Counter

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..client import ChainClient, from_hex
from ..ledger import Ledger
from ..models import ChainTransaction, OutboxItem, Sender
from .calls import Calls
from .common import ITEM, RELAY, TX, WHY, Limits, live_txs
from .relaying import Relaying

log = logging.getLogger(__name__)


class Receipts:
    def __init__(self, ledger: Ledger, client: ChainClient, limits: Limits, stats: Counter, calls: Calls,
                 relaying: Relaying):
        self.ledger, self.client, self.limits, self.stats = ledger, client, limits, stats
        self.calls, self.relaying = calls, relaying

    def check(self, lanes: list[Sender]) -> None:
        """Receipts of everything sent and not final: a receipt makes a transaction mined, a final
        block confirms it (or, reverted, has it diagnosed), and a mined transaction whose receipt is
        gone (its block was lost or reorganised away) is sent again, with the same signed bytes."""
        live = live_txs(lanes, [TX.SIGNED, TX.SENT, TX.MINED])
        if not live:
            return
        _, final = self.ledger.head_and_final()
        # A mined transaction not yet final is looked at again only if its block stopped being the
        # node's (a reorganisation, or lost blocks): its receipt, which carries every event of its batch,
        # is read when it is mined and when it is final, not on every pass in between (at full load
        # that was most of the node's work and of the submitter's JSON; measured by bench chain).
        waiting = [tx for tx in live if tx.status == TX.MINED and tx.block_number is not None and tx.block_number > final]
        headers = self.client.block_hashes(sorted({tx.block_number for tx in waiting})) if waiting else {}
        unchanged = {tx.pk for tx in waiting if (headers.get(tx.block_number) or {}).get("hash") == tx.block_hash}
        live = [tx for tx in live if tx.pk not in unchanged]
        receipts = self.client.receipts([from_hex(tx.tx_hash) for tx in live])
        changed: list[ChainTransaction] = []
        confirmed: list[ChainTransaction] = []
        relayed: dict[int, dict] = {}  # receipts of final relay transactions, by tx pk
        reverted: list[ChainTransaction] = []
        lost: list[ChainTransaction] = []
        now = timezone.now()
        for tx, receipt in zip(live, receipts):
            if not receipt:
                if tx.status == TX.MINED:
                    tx.status, tx.block_number, tx.block_hash, tx.succeeded = TX.SENT, None, "", None
                    tx.next_send_at = now  # the node may not hold it any more: check at once
                    lost.append(tx)
                    changed.append(tx)
                continue
            block, block_hash = int(receipt["blockNumber"], 16), receipt["blockHash"]
            newly_mined = tx.status != TX.MINED or tx.block_hash != block_hash
            if newly_mined:
                tx.status, tx.block_number, tx.block_hash = TX.MINED, block, block_hash
                tx.gas_used = int(receipt["gasUsed"], 16)
                tx.succeeded = int(receipt["status"], 16) == 1
                tx.mined_at = now
                self.stats["mined"] += 1
            if block <= final:
                tx.status, tx.final_at = (TX.CONFIRMED if tx.succeeded else TX.REVERTED), now
                (confirmed if tx.succeeded else reverted).append(tx)
                if tx.succeeded and tx.function == RELAY:
                    relayed[tx.pk] = receipt
            if newly_mined or block <= final:
                changed.append(tx)
        # What became of each relayed request is read (and diagnosed) before the write that makes its
        # transaction final, and written with it: a crash in between leaves both to do again.
        outcomes = self.relaying.relay_outcomes(relayed) if relayed else []
        with transaction.atomic():
            ChainTransaction.objects.bulk_update(
                changed, ["status", "block_number", "block_hash", "succeeded", "gas_used", "mined_at", "final_at",
                          "next_send_at"], batch_size=500)
            if outcomes:
                self.relaying.settle(outcomes, now)
            ids = [tx.pk for tx in confirmed if tx.pk not in relayed]
            for start in range(0, len(ids), 500):
                OutboxItem.objects.filter(transaction_id__in=ids[start:start + 500], status=ITEM.SIGNED).update(
                    status=ITEM.CONFIRMED, confirmed_at=now)
        self.stats["confirmed"] += len(confirmed)
        if lost:
            self.stats["unmined"] += len(lost)
            log.warning("%d mined transactions lost their block (a reorganisation, or a node that lost its last "
                        "blocks): sending them again with the same signed bytes", len(lost))
        for tx in reverted:
            self._diagnose_revert(tx)

    def _diagnose_revert(self, tx: ChainTransaction) -> None:
        self.stats["reverted"] += 1
        items = list(tx.items.filter(status=ITEM.SIGNED))
        if items and items[0].atomic_group:  # never sent apart: see what made the whole batch revert
            self.relaying.diagnose_group(tx, items)
            return
        if len(items) > 1:
            # One bad call spoils a batch: send each alone, so each gets its own verdict.
            OutboxItem.objects.filter(pk__in=[i.pk for i in items]).update(
                status=ITEM.PENDING, solo=True, transaction=None, attempts=F("attempts") + 1,
                last_error=f"batch {tx.tx_hash} reverted; retrying one by one")
            return
        for item in items:
            to, data, _, contract = self.calls.call_of([item])
            verdict = self.ledger.simulate(item.sender_address, to, data, contract)
            if verdict is None:
                # It would pass now (out of gas, or it raced its dependency): retry, with more gas.
                status, error = (ITEM.PENDING, f"tx {tx.tx_hash} reverted (gas used {tx.gas_used}); retrying")
            elif self.ledger.already_applied(item.function, item.sender_address, item.payload, verdict[0]):
                item.duplicate = True
                status, error = ITEM.CONFIRMED, f"already on-chain ({verdict[0]}); record matches"
            else:
                status, error = ITEM.FAILED, f"reverted: {verdict[0]}{tuple(verdict[1]) if verdict[1] else ''}"
            if status == ITEM.PENDING and item.attempts + 1 >= self.limits.max_attempts:
                status = ITEM.FAILED
            OutboxItem.objects.filter(pk=item.pk).update(
                status=status, last_error=error, duplicate=item.duplicate, attempts=F("attempts") + 1,
                failure=WHY.REVERTED if status == ITEM.FAILED else "",
                transaction=tx if status == ITEM.CONFIRMED else None,
                confirmed_at=timezone.now() if status == ITEM.CONFIRMED else None)
            self.stats[f"item_{status}"] += 1
            log.info("%s: %s", item.key, error)
