"""What a transaction carries: queued calls cut into batches, the call data of a batch, and the
replacement of a transaction the node refuses by another at the same nonce (its batch split in
two, the same calls with fresh fees, or a no-op so that the lane's later nonces can be mined)."""

from __future__ import annotations

import logging
from collections import Counter

from django.db import connection, transaction
from django.utils import timezone

from ..client import ChainClient, SignedTx, to_hex
from ..keys import account_for
from ..ledger import CALLS, Ledger
from ..metatx import from_json
from ..models import ChainTransaction, OutboxItem, Sender
from .common import ITEM, NOOP, RELAY, TX, WHY, ZERO_ADDRESS, Limits, backoff

log = logging.getLogger(__name__)


def tx_row(lane: Sender, signed: SignedTx, function: str, gas: int) -> ChainTransaction:
    """The (unsaved) row of a transaction signed for `lane`."""
    return ChainTransaction(sender=lane, nonce=signed.nonce, function=function, tx_hash=to_hex(signed.hash),
                            raw=signed.raw, gas_limit=gas)


def link(txs: list[ChainTransaction], groups: list[list[OutboxItem]]) -> None:
    """Each group's items signed into its transaction: on PostgreSQL one UPDATE for the whole pass
    (a join on two arrays), elsewhere one per transaction."""
    if connection.vendor == "postgresql":
        ids = [item.pk for chunk in groups for item in chunk]
        tx_ids = [tx.pk for tx, chunk in zip(txs, groups) for _ in chunk]
        table = connection.ops.quote_name(OutboxItem._meta.db_table)
        column = connection.ops.quote_name(OutboxItem._meta.get_field("transaction").column)
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} AS o SET status = %s, {column} = v.tx "
                           "FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, tx) WHERE o.id = v.id",
                           [ITEM.SIGNED, ids, tx_ids])
        return
    for tx, chunk in zip(txs, groups):
        OutboxItem.objects.filter(pk__in=[i.pk for i in chunk]).update(status=ITEM.SIGNED, transaction_id=tx.pk)


def function_of(chunk: list[OutboxItem]) -> str:
    """The function name recorded for a transaction making these calls: a relayer's executeBatch,
    the call alone, or its batch form."""
    return RELAY if chunk[0].signer else chunk[0].function if len(chunk) == 1 else CALLS[chunk[0].function].batch


class Calls:
    def __init__(self, ledger: Ledger, client: ChainClient, limits: Limits, stats: Counter):
        self.ledger, self.client, self.limits, self.stats = ledger, client, limits, stats

    def chunks(self, items: list[OutboxItem]) -> list[list[OutboxItem]]:
        """Consecutive calls of one function in batches of LLMCHAIN_TX_BATCH (relayed requests of any
        function together, in one executeBatch), each alone when it has no batch form or was `solo`; an
        atomic group's requests (OutboxItem.atomic_group, side by side in `items`) in a chunk of their own."""
        def kind(item: OutboxItem) -> str:
            return RELAY if item.signer else item.function

        size = self.limits.batch_size
        chunks: list[list[OutboxItem]] = []
        for item in items:
            last = chunks[-1] if chunks else None
            if last and (item.atomic_group or last[0].atomic_group):
                # An atomic group is a chunk of its own, whole, whatever the batch size.
                if item.atomic_group == last[0].atomic_group:
                    last.append(item)
                else:
                    chunks.append([item])
            elif (last and size > 1 and not item.solo and not last[0].solo
                    and kind(last[0]) == kind(item) and (item.signer or CALLS[item.function].batch)
                    and len(last) < size):
                last.append(item)
            else:
                chunks.append([item])
        return chunks

    def call_of(self, items: list[OutboxItem]) -> tuple[str, bytes, int, str]:
        """(to, data, gas, contract) of the transaction that makes these calls: the call or its batch
        form, or, for relayed requests, the relayer's executeBatch through the forwarder."""
        if items[0].signer:
            # An atomic group's batch has no refund receiver: the forwarder then reverts the whole batch
            # when one of its requests is invalid (expired, its nonce used, a bad signature).
            to, data, gas = self.ledger.relay_calldata([from_json(i.request) for i in items],
                                                       ZERO_ADDRESS if items[0].atomic_group else items[0].sender_address)
            return to, data, gas, "forwarder"
        to, data, gas = self.ledger.calldata(items[0].function, [i.payload for i in items])
        return to, data, gas, CALLS[items[0].function].contract

    def split(self, tx: ChainTransaction, items: list[OutboxItem], error: str) -> None:
        """A batch the node refuses: its first half is signed again at the same nonce (a refusal splits it
        again) and the others go back to the queue, each to be sent alone; so every request the node
        takes goes through, and the one it refuses ends alone, and fails alone."""
        first, rest = items[: len(items) // 2], items[len(items) // 2:]
        to, data, gas, _ = self.call_of(first)
        signed = self.client.sign(account_for(tx.sender.address), to, data, tx.nonce, gas)
        function = RELAY if first[0].signer else first[0].function if len(first) == 1 else tx.function
        with transaction.atomic():
            ChainTransaction.objects.filter(pk=tx.pk).update(status=TX.DROPPED, last_error=error)
            new = ChainTransaction.objects.create(sender=tx.sender, nonce=tx.nonce, function=function,
                                                  tx_hash=to_hex(signed.hash), raw=signed.raw, gas_limit=gas)
            OutboxItem.objects.filter(pk__in=[i.pk for i in first]).update(transaction=new)
            OutboxItem.objects.filter(pk__in=[i.pk for i in rest]).update(
                status=ITEM.PENDING, transaction=None, solo=True,
                last_error=f"its batch was refused by the node ({error}); sent alone")
        self.stats["split"] += 1
        log.warning("the node refused a batch of %d calls of %s (%s): %d sent again at nonce %d, %d alone",
                    len(items), tx.sender.address, error, len(first), tx.nonce, len(rest))

    def resign(self, tx: ChainTransaction, *, fail_items: bool, error: str) -> None:
        """Replace a refused transaction at the same nonce: the same calls with fresh fees, or,
        when they keep failing, a no-op transfer so that the sender's later nonces can be mined."""
        account = account_for(tx.sender.address)
        self.client.forget_fees()
        items = list(tx.items.filter(status=ITEM.SIGNED))
        if fail_items or not items:
            signed = self.client.sign(account, account.address, b"", tx.nonce, 21_000)
            function, gas = NOOP, 21_000
        else:
            to, data, _, _ = self.call_of(items)
            signed = self.client.sign(account, to, data, tx.nonce, tx.gas_limit)
            function, gas = tx.function, tx.gas_limit
        if to_hex(signed.hash) == tx.tx_hash:
            return  # nothing changed (same fees): the same bytes are sent again next pass
        with transaction.atomic():
            ChainTransaction.objects.filter(pk=tx.pk).update(status=TX.DROPPED, last_error=error)
            new = ChainTransaction.objects.create(sender=tx.sender, nonce=tx.nonce, function=function,
                                                  tx_hash=to_hex(signed.hash), raw=signed.raw, gas_limit=gas,
                                                  attempts=tx.attempts + 1,
                                                  next_send_at=timezone.now() + backoff(tx.attempts + 1))
            if fail_items:
                OutboxItem.objects.filter(pk__in=[i.pk for i in items]).update(
                    status=ITEM.FAILED, transaction=None, failure=WHY.NODE_REFUSED,
                    last_error=f"refused by the node: {error}")
            else:
                OutboxItem.objects.filter(pk__in=[i.pk for i in items]).update(transaction=new)
