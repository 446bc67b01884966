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
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import time
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Iterable

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Max, Min, Q
from django.utils import timezone

from lib.errors import is_permanent

from .client import ChainError, RpcError, SignedTx, from_hex, to_hex
from .keys import KeyError_, account_for, address_slot
from .ledger import CALLS, RELAYABLE, Ledger
from .metatx import ForwardRequest, from_json, recover_signer, sign_request, to_json
from .models import ChainTransaction, OutboxItem, Sender, SigningKey
from .work import backoff, run_worker, take

log = logging.getLogger(__name__)
TX = ChainTransaction.Status
ITEM = OutboxItem.Status
WHY = OutboxItem.Failure
NOOP = "noop"
RELAY = "executeBatch"  # the function name of a relayer's transaction (ChainTransaction.function)
LIVE = [TX.SIGNED, TX.SENT, TX.MINED]  # sent or to send, not final yet
# A node refuses a JSON-RPC request over its body limit as a whole (anvil: 2 MiB; Besu, geth: 5 MB),
# and a relayer's executeBatch of 64 ratings is ~43 kB (86 kB as hex): broadcasts go in JSON-RPC
# batches of at most this many bytes of signed transactions (found by `bench chain`).
SEND_BATCH_BYTES = 512 * 1024


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


# A refusal about the price a transaction offers, which signing it again with fresh fees cures.
FEE_ERRORS = ("underpriced", "fee", "gas price")


def _about_fees(err: Exception) -> bool:
    text = str(err).lower()
    return any(word in text for word in FEE_ERRORS)


UINT48, UINT256 = 2**48, 2**256
# The call data of each relayed call: a selector and its fixed-size arguments (humEval: an id and six
# answers; vote: an id and an outcome).
RELAYED_CALL_BYTES = {"humEval": 4 + 7 * 32, "vote": 4 + 2 * 32}


def unrelayable(item: OutboxItem) -> str:
    """Why a queued relayed request cannot go into a relayer's batch as it is (its signer chose every
    value in it), or "": it must give its call exactly the gas RELAYABLE says (more would let it spend
    the batch's gas, or push the batch past the block's gas limit), send no value, carry call data of its
    call's length (the relayed calls take fixed-size arguments: more would make the batch cost more
    than it gives) and hold values the forwarder's types can carry."""
    try:
        request = from_json(item.request)
    except (KeyError, TypeError, ValueError):
        return "the signed request cannot be read"
    needed = RELAYABLE.get(item.function)
    if needed is None:
        return f"{item.function} is not relayed"
    if request.gas != needed:
        return f"the signed request gives its call {request.gas} gas, not the {needed} it needs"
    if len(request.data) != RELAYED_CALL_BYTES.get(item.function):
        return "the signed request carries another call than the one queued"
    if request.value != 0 or not 0 <= request.nonce < UINT256 or not 0 <= request.deadline < UINT48:
        return "the signed request holds a value the forwarder cannot take"
    if len(request.signature) != 65:
        return "the signed request's signature is malformed"
    return ""


class Outcome(enum.Enum):
    """What becomes of a relayed request (Submitter._settle)."""

    CONFIRM = "confirm"  # executed, or found already applied
    AGAIN = "again"  # a custodial request, signed anew
    FAIL = "fail"  # refused for good, or a wallet's request its signer must sign again
    WAIT = "wait"  # its nonce is ahead of the signer's: it waits for the earlier ones
    REFUSE = "refuse"  # failed before the forwarder saw it: its nonce is unused


def _link(txs: list[ChainTransaction], groups: list[list[OutboxItem]]) -> None:
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


class Submitter:
    def __init__(self, ledger: Ledger, *, owner: str | None = None, batch_size: int | None = None,
                 max_items: int | None = None, lease_s: float | None = None, resend_after_s: float | None = None,
                 max_attempts: int | None = None, shard: tuple[int, int] = (0, 1)):
        self.ledger = ledger
        self.client = ledger.client
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.batch_size = max(1, batch_size or settings.LLMCHAIN_TX_BATCH)
        self.max_items = max_items or settings.LLMCHAIN_SUBMIT_MAX_ITEMS
        self.lease_s = lease_s or settings.LLMCHAIN_LEASE_S
        self.resend_after = timedelta(seconds=resend_after_s if resend_after_s is not None
                                      else settings.LLMCHAIN_RESEND_AFTER_S)
        self.max_attempts = max_attempts or settings.LLMCHAIN_TX_MAX_ATTEMPTS
        self.stats: Counter = Counter()
        self._next_sweep = 0.0
        self.shard = check_shard(*shard)

    # -- the loop --------------------------------------------------------------------------------
    def run_once(self) -> Counter:
        before = self.stats.copy()
        lanes = self._acquire_lanes()
        if lanes:
            self._check_receipts(lanes)
            self._heal(lanes)
            self._sign_new(lanes)
            self._broadcast(lanes)
        return self.stats - before

    def run_forever(self, idle_sleep: float = 0.2, until_idle: bool = False) -> None:
        """Pass after pass until SIGTERM (or, `until_idle`, until nothing is left to send or confirm);
        any chain error (the node down, or refusing a call it may accept later) backs off up to 10 s."""
        run_worker(self.run_once, idle_sleep=idle_sleep, until=(lambda: not self.has_work()) if until_idle else None,
                   survive=lambda exc: isinstance(exc, ChainError), name="chain")

    def has_work(self) -> bool:
        return (OutboxItem.objects.filter(status__in=[ITEM.PENDING, ITEM.SIGNED]).exists()
                or ChainTransaction.objects.filter(status__in=LIVE).exists())

    # -- lanes -----------------------------------------------------------------------------------
    def _acquire_lanes(self) -> list[Sender]:
        addresses = set(OutboxItem.objects.filter(status=ITEM.PENDING)
                        .values_list("sender_address", flat=True).distinct())
        addresses |= set(ChainTransaction.objects.filter(status__in=LIVE)
                         .values_list("sender__address", flat=True).distinct())
        addresses |= self._lanes_behind_the_node()
        addresses = {a for a in addresses if self.mine(a)}
        now = timezone.now()
        # work.take, not work.claim: a lane is leased to its owner, which renews the lease on every
        # pass (so one process assigns a lane's nonces for as long as it lives), not a job to finish.
        free = Q(lease_owner=self.owner) | Q(lease_owner="") | Q(lease_until__lt=now)
        held = []
        for address in sorted(addresses):
            lane, _ = Sender.objects.get_or_create(address=address)
            if take(Sender.objects, [lane.pk], free, lease_owner=self.owner,
                    lease_until=now + timedelta(seconds=self.lease_s)):
                lane.refresh_from_db()
                held.append(lane)
        return held

    def mine(self, address: str) -> bool:
        """Whether a lane is this submitter's to take: with `shard` (i, n), the lanes whose address is
        i modulo n, so that n submitters side by side work on different lanes (each still under a
        lease: two submitters given the same shard take turns, as before)."""
        index, count = self.shard
        return count == 1 or address_slot(address, count) == index

    def _lanes_behind_the_node(self) -> set[str]:
        """Every LLMCHAIN_RESEND_AFTER_S, the lanes whose next nonce is above the node's count of their
        mined transactions although nothing of theirs is live: the node lost final blocks of theirs."""
        if time.monotonic() < self._next_sweep:
            return set()
        self._next_sweep = time.monotonic() + self.resend_after.total_seconds()
        lanes = [(a, n) for a, n in Sender.objects.filter(next_nonce__isnull=False)
                 .values_list("address", "next_nonce") if self.mine(a)]
        counts = self.client.batch([("eth_getTransactionCount", [a, "latest"]) for a, _ in lanes]) if lanes else []
        return {a for (a, n), c in zip(lanes, counts) if not isinstance(c, RpcError) and int(c, 16) < n}

    def release(self) -> None:
        Sender.objects.filter(lease_owner=self.owner).update(lease_owner="", lease_until=None)

    # -- receipts --------------------------------------------------------------------------------
    def _live(self, lanes: Iterable[Sender], statuses: list[str]) -> list[ChainTransaction]:
        return list(ChainTransaction.objects.filter(sender__in=list(lanes), status__in=statuses)
                    .select_related("sender").order_by("sender_id", "nonce").defer("raw"))

    def _check_receipts(self, lanes: list[Sender]) -> None:
        """Receipts of everything sent and not final: a receipt makes a transaction mined, a final
        block confirms it (or, reverted, has it diagnosed), and a mined transaction whose receipt is
        gone (its block was lost or reorganised away) is sent again, with the same signed bytes."""
        live = self._live(lanes, [TX.SIGNED, TX.SENT, TX.MINED])
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
        outcomes = self._relay_outcomes(relayed) if relayed else []
        with transaction.atomic():
            ChainTransaction.objects.bulk_update(
                changed, ["status", "block_number", "block_hash", "succeeded", "gas_used", "mined_at", "final_at",
                          "next_send_at"], batch_size=500)
            if outcomes:
                self._settle(outcomes, now)
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
        if len(items) > 1:
            # One bad call spoils a batch: send each alone, so each gets its own verdict.
            OutboxItem.objects.filter(pk__in=[i.pk for i in items]).update(
                status=ITEM.PENDING, solo=True, transaction=None, attempts=F("attempts") + 1,
                last_error=f"batch {tx.tx_hash} reverted; retrying one by one")
            return
        for item in items:
            to, data, _, contract = self._call_of([item])
            verdict = self.ledger.simulate(item.sender_address, to, data, contract)
            if verdict is None:
                # It would pass now (out of gas, or it raced its dependency): retry, with more gas.
                status, error = (ITEM.PENDING, f"tx {tx.tx_hash} reverted (gas used {tx.gas_used}); retrying")
            elif self.ledger.already_applied(item.function, item.sender_address, item.payload, verdict[0]):
                item.duplicate = True
                status, error = ITEM.CONFIRMED, f"already on-chain ({verdict[0]}); record matches"
            else:
                status, error = ITEM.FAILED, f"reverted: {verdict[0]}{tuple(verdict[1]) if verdict[1] else ''}"
            if status == ITEM.PENDING and item.attempts + 1 >= self.max_attempts:
                status = ITEM.FAILED
            OutboxItem.objects.filter(pk=item.pk).update(
                status=status, last_error=error, duplicate=item.duplicate, attempts=F("attempts") + 1,
                failure=WHY.REVERTED if status == ITEM.FAILED else "",
                transaction=tx if status == ITEM.CONFIRMED else None,
                confirmed_at=timezone.now() if status == ITEM.CONFIRMED else None)
            self.stats[f"item_{status}"] += 1
            log.info("%s: %s", item.key, error)

    # -- what the node lost ----------------------------------------------------------------------
    def _heal(self, lanes: list[Sender]) -> None:
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
        stale = now - self.resend_after
        live: dict[int, list[ChainTransaction]] = defaultdict(list)
        for tx in self._live(lanes, LIVE):
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
            tx.next_send_at = now + self._backoff(tx.resends + 3)
        ChainTransaction.objects.bulk_update(resend + keep, ["status", "resends", "next_send_at"], batch_size=500)
        if resend:
            self.stats["resent"] += len(resend)
            log.info("re-sending %d transactions the node does not hold", len(resend))

    def _backoff(self, resends: int) -> timedelta:
        return backoff(resends, cap=settings.LLMCHAIN_RESEND_MAX_S)

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
        if lane.stuck_since and now - lane.stuck_since >= self.resend_after:
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

    # -- signing ---------------------------------------------------------------------------------
    def _ready_items(self, lane: Sender) -> list[OutboxItem]:
        base = OutboxItem.objects.filter(status=ITEM.PENDING, sender_address=lane.address)
        failed_dep = base.filter(depends_on__status=ITEM.FAILED)
        if failed_dep.exists():
            failed_dep.update(status=ITEM.FAILED, failure=WHY.DEPENDENCY, last_error="the call it depends on failed")
        ready = base.filter(Q(depends_on__isnull=True) | Q(depends_on__status=ITEM.CONFIRMED))
        items = list(ready.filter(signer="").order_by("id")[: self.max_items])
        # Relayed requests: those the forwarder can take next are picked among all that are queued, and
        # only then capped, so that requests signed with nonces far ahead (which only wait) cannot fill a
        # pass and starve the others.
        relayed = list(ready.exclude(signer="").order_by("id"))
        if relayed:
            items += self._in_nonce_order(relayed)[: self.max_items]
        return items

    def _in_nonce_order(self, items: list[OutboxItem]) -> list[OutboxItem]:
        """The ready items, keeping of each signer's relayed requests only those the forwarder can take
        next, in nonce order without a gap: a later rating whose answer was scored first waits for the
        earlier one. The next nonce is known without asking the node when the signer's last request
        sent is just below the lowest waiting one; otherwise (a first request, or a gap) the forwarder
        is asked, for those signers only. A waiting request whose deadline passed is settled at once
        (signed again for a custodial rater, failed with words for a wallet user); requests to sign
        again (request None) are signed here, once none of the signer's requests is in flight."""
        relayed = [i for i in items if i.signer]
        refused = [(i, why) for i in relayed if i.request and (why := unrelayable(i))]
        if refused:
            self._settle([(self._redo(i, Outcome.REFUSE), i, why, WHY.UNUSABLE) for i, why in refused], timezone.now())
            gone = {i.pk for i, _ in refused}
            relayed = [i for i in relayed if i.pk not in gone]
        now_s = self._chain_now()
        stale = [i for i in relayed if i.request and from_json(i.request).deadline <= now_s]
        if stale:
            self._settle([(self._redo(i), i, "the signed request expired before it was relayed", WHY.EXPIRED)
                          for i in stale], timezone.now())
            relayed = [i for i in relayed if i not in stale]
        to_sign = [i for i in relayed if i.request is None]
        if to_sign:
            self._sign_again(to_sign)
        signers = {i.signer for i in relayed}
        mine = OutboxItem.objects.filter(signer__in=signers, relay_nonce__isnull=False)
        lowest = dict(mine.filter(status=ITEM.PENDING).values("signer").annotate(n=Min("relay_nonce"))
                      .values_list("signer", "n"))
        used = dict(mine.exclude(status=ITEM.PENDING).values("signer").annotate(n=Max("relay_nonce"))
                    .values_list("signer", "n"))
        expected = {s: n for s, n in lowest.items() if used.get(s) is not None and n == used[s] + 1}
        in_flight = set(OutboxItem.objects.filter(signer__in=signers, status=ITEM.SIGNED)
                        .values_list("signer", flat=True))
        ask = sorted(s for s in lowest if s not in expected and s not in in_flight)
        for signer, nonce in zip(ask, self._forwarder_nonces(ask)):
            # Below the forwarder's count, the nonce was used elsewhere (someone relayed the request
            # first, or the wallet signed another one): sent anyway, the skip is diagnosed on receipt.
            if nonce >= lowest[signer]:
                expected[signer] = lowest[signer]
        ready: set[int] = set()
        by_signer: dict[str, list[OutboxItem]] = defaultdict(list)
        for item in relayed:
            if item.relay_nonce is not None and item.request is not None:
                by_signer[item.signer].append(item)
        for signer, own in by_signer.items():
            nonce = expected.get(signer)
            for item in sorted(own, key=lambda i: i.relay_nonce):
                if item.relay_nonce != nonce:
                    break
                ready.add(item.pk)
                nonce += 1
        # A signer's requests go into the batches in nonce order, whatever order they were queued in.
        return ([i for i in items if not i.signer]
                + sorted((i for i in relayed if i.pk in ready), key=lambda i: (i.relay_nonce, i.pk)))

    def _chain_now(self) -> int:
        """The chain's time (its latest block's timestamp, which the forwarder checks deadlines
        against), or this machine's when that is later (blocks come every few seconds)."""
        return max(int(time.time()), int(self.client.get_block("latest")["timestamp"], 16))

    def _forwarder_nonces(self, signers: list[str], block: str | int = "latest") -> list[int]:
        """Each signer's next nonce as the forwarder counts it, in one batch of calls."""
        if not signers:
            return []
        fn = self.ledger.abis["forwarder"].fn("nonces")
        replies = self.client.batch([("eth_call", [{"to": self.ledger.deployment.forwarder,
                                                     "data": to_hex(fn.encode(s))}, block]) for s in signers])
        for reply in replies:
            if isinstance(reply, RpcError):
                raise reply
        return [fn.decode_output(from_hex(reply))[0] for reply in replies]

    def _redo(self, item: OutboxItem, otherwise: Outcome = Outcome.FAIL) -> Outcome:
        """A request the forwarder did not run: signed anew here for a custodial signer; a wallet's
        fails (`otherwise`), and its signer signs it again."""
        return Outcome.AGAIN if self._custodial(item) else otherwise

    def _sign_again(self, items: list[OutboxItem]) -> None:
        """Sign anew, with the site's key, the custodial requests the forwarder skipped (expired, or
        their nonce used): from the signer's nonce on-chain, in the order they were queued, once none
        of the signer's requests is in a transaction still on its way (they would take nonces first)."""
        signers = sorted({i.signer for i in items})
        busy = set(OutboxItem.objects.filter(signer__in=signers, status=ITEM.SIGNED).values_list("signer", flat=True))
        signers = [s for s in signers if s not in busy]
        if not signers:
            return
        dep = self.ledger.deployment
        deadline = self._chain_now() + settings.LLMCHAIN_RELAY_DEADLINE_S
        for signer, nonce in zip(signers, self._forwarder_nonces(signers)):
            key = account_for(signer).key
            own = list(OutboxItem.objects.filter(signer=signer, status=ITEM.PENDING).order_by("id"))
            with transaction.atomic():
                OutboxItem.objects.filter(pk__in=[i.pk for i in own]).update(relay_nonce=None)
                for row in own:
                    to, data = self.ledger.request_calldata(row.function, row.payload)
                    fresh = sign_request(ForwardRequest(sender=signer, to=to, gas=RELAYABLE[row.function], nonce=nonce,
                                                        deadline=deadline,
                                                        data=data), key, dep.chainId, dep.forwarder)
                    row.request, row.relay_nonce = to_json(fresh), nonce
                    OutboxItem.objects.filter(pk=row.pk).update(request=row.request, relay_nonce=nonce)
                    nonce += 1
            signed_anew = {row.pk: row for row in own}
            for item in items:
                if item.pk in signed_anew:
                    item.request, item.relay_nonce = signed_anew[item.pk].request, signed_anew[item.pk].relay_nonce
            self.stats["resigned"] += len(own)
            log.info("signed %d requests of %s again from forwarder nonce %d", len(own), signer, nonce - len(own))

    def _chunks(self, items: list[OutboxItem]) -> list[list[OutboxItem]]:
        """Consecutive calls of one function in batches of LLMCHAIN_TX_BATCH (relayed requests of any
        function together, in one executeBatch), each alone when it has no batch form or was `solo`."""
        def kind(item: OutboxItem) -> str:
            return RELAY if item.signer else item.function

        chunks: list[list[OutboxItem]] = []
        for item in items:
            last = chunks[-1] if chunks else None
            if (last and self.batch_size > 1 and not item.solo and not last[0].solo
                    and kind(last[0]) == kind(item) and (item.signer or CALLS[item.function].batch)
                    and len(last) < self.batch_size):
                last.append(item)
            else:
                chunks.append([item])
        return chunks

    def _call_of(self, items: list[OutboxItem]) -> tuple[str, bytes, int, str]:
        """(to, data, gas, contract) of the transaction that makes these calls: the call or its batch
        form, or, for relayed requests, the relayer's executeBatch through the forwarder."""
        if items[0].signer:
            to, data, gas = self.ledger.relay_calldata([from_json(i.request) for i in items],
                                                       items[0].sender_address)
            return to, data, gas, "forwarder"
        to, data, gas = self.ledger.calldata(items[0].function, [i.payload for i in items])
        return to, data, gas, CALLS[items[0].function].contract

    # -- relayed requests: what the forwarder did with each ----------------------------------
    def _relay_outcomes(self, receipts: dict[int, dict]) -> list[tuple[Outcome, OutboxItem, str, str]]:
        """(outcome, item, why, failure) for each request of the final relay transactions (their
        receipts by transaction pk): why in words for operators, failure an OutboxItem.Failure."""
        # At full load this runs for thousands of requests a second (measured by bench chain): one query
        # for every transaction of the pass; an executed request is settled from its row's relay_nonce
        # and the event's words alone; its payload and request are loaded (deferred) and decoded only
        # for the others.
        items = OutboxItem.objects.filter(transaction_id__in=list(receipts), status=ITEM.SIGNED).defer(
            "payload", "request").order_by("transaction_id", "id")
        by_tx: dict[int, list[OutboxItem]] = defaultdict(list)
        for item in items:
            by_tx[item.transaction_id].append(item)
        return [outcome for pk, receipt in receipts.items() for outcome in self._request_outcomes(by_tx[pk], receipt)]

    def _request_outcomes(self, items: list[OutboxItem], receipt: dict) -> list[tuple[Outcome, OutboxItem, str, str]]:
        """The outcomes of one relay transaction's requests (`items`), from its final `receipt`."""
        topic = to_hex(self.ledger.abis["forwarder"].event_topic("ExecutedForwardRequest"))
        forwarder = self.ledger.deployment.forwarder.lower()
        executed: dict[tuple[str, int], bool] = {}
        for entry in receipt.get("logs", []):
            # ExecutedForwardRequest(address indexed signer, uint256 nonce, bool success): the signer
            # is topic 1, the nonce and success the data's two words.
            topics = entry["topics"]
            if topics and topics[0].lower() == topic and entry["address"].lower() == forwarder:
                data = from_hex(entry["data"])
                executed[("0x" + topics[1][-40:].lower(), int.from_bytes(data[:32], "big"))] = data[63] == 1
        block = int(receipt["blockNumber"], 16)
        out = []
        timestamp = None
        for item in items:
            nonce = item.relay_nonce if item.relay_nonce is not None else from_json(item.request).nonce
            success = executed.get((item.signer.lower(), nonce))
            if success:
                out.append((Outcome.CONFIRM, item, "", ""))
                continue
            request = from_json(item.request)
            verdict = self.ledger.simulate(item.signer, request.to, request.data, CALLS[item.function].contract)
            if verdict is not None and self.ledger.already_applied(item.function, item.signer, item.payload, verdict[0]):
                item.duplicate = True
                out.append((Outcome.CONFIRM, item, f"already on-chain ({verdict[0]}); record matches", ""))
                continue
            if success is False:  # executed, and its call reverted: the nonce is used up
                why = f"reverted: {verdict[0]}{tuple(verdict[1]) if verdict[1] else ''}" if verdict else (
                    "its call failed (out of gas, or a condition that has changed since)")
                out.append((self._redo(item) if verdict is None else Outcome.FAIL, item, why, WHY.REVERTED))
                continue
            if timestamp is None:
                timestamp = int(self.client.get_block(block)["timestamp"], 16)
            nonce, = self.ledger.view("forwarder", "nonces", item.signer, block=block)
            if request.deadline < timestamp:
                why, failure = "the signed request expired before it was relayed", WHY.EXPIRED
            elif recover_signer(request, self.ledger.deployment.chainId, forwarder) != item.signer:
                out.append((Outcome.FAIL, item, "the forwarder refused the request's signature", WHY.BAD_SIGNATURE))
                continue
            elif request.nonce >= nonce:
                # An earlier request of the signer had not landed (a rating still waiting for its answer
                # to be scored): this one stays valid and waits for it.
                out.append((Outcome.WAIT, item, f"waits for the signer's nonce {nonce} (it holds {request.nonce})",
                            WHY.WAITED))
                continue
            else:
                why, failure = f"the signed request's nonce {request.nonce} was used by another request", WHY.NONCE_USED
            out.append((self._redo(item), item, why, failure))
        return out

    @staticmethod
    def _custodial(item: OutboxItem) -> bool:
        return SigningKey.objects.filter(address=item.signer).exists()

    def _settle(self, outcomes: list[tuple[Outcome, OutboxItem, str, str]], now) -> None:
        """Write each request's outcome (_relay_outcomes'), with why (for operators) and its failure."""
        executed = [item.pk for verdict, item, why, _ in outcomes if verdict is Outcome.CONFIRM and not why]
        for start in range(0, len(executed), 500):  # the usual case, one UPDATE per 500
            OutboxItem.objects.filter(pk__in=executed[start:start + 500]).update(status=ITEM.CONFIRMED,
                                                                                 confirmed_at=now)
        self.stats["confirmed_requests"] += len(executed)
        for verdict, item, why, failure in outcomes:
            if verdict is Outcome.CONFIRM:
                if why:  # found applied by someone else's relay
                    OutboxItem.objects.filter(pk=item.pk).update(status=ITEM.CONFIRMED, confirmed_at=now,
                                                                 duplicate=item.duplicate, last_error=why)
                    self.stats["confirmed_requests"] += 1
                continue
            if verdict is Outcome.WAIT and item.attempts + 1 < self.max_attempts:
                OutboxItem.objects.filter(pk=item.pk).update(status=ITEM.PENDING, transaction=None, last_error=why,
                                                             attempts=F("attempts") + 1)
                self.stats["request_waits"] += 1
                continue
            again = verdict is Outcome.AGAIN and item.attempts + 1 < self.max_attempts
            # Whether the request did not use its nonce.
            unused = verdict is not Outcome.FAIL or failure in (WHY.EXPIRED, WHY.NONCE_USED)
            fields = {"status": ITEM.PENDING if again else ITEM.FAILED, "transaction": None, "last_error": why,
                      "failure": "" if again else failure, "attempts": F("attempts") + 1}
            if unused:
                fields["relay_nonce"] = None
            later = OutboxItem.objects.filter(signer=item.signer, status=ITEM.PENDING).exclude(pk=item.pk)
            if again:
                fields["request"] = None  # signed anew by _sign_again
                # The signer's later requests hold nonces after this one: they are signed anew with it.
                later.update(request=None, relay_nonce=None)
            elif unused and not self._custodial(item):
                # A wallet's later requests hold nonces after this unused one: the forwarder would never
                # take them. They fail too, and the rater signs them again.
                later.filter(relay_nonce__gt=item.relay_nonce or -1).update(
                    status=ITEM.FAILED, relay_nonce=None, transaction=None, failure=WHY.EARLIER_FAILED,
                    last_error=f"an earlier signed request of its signer was not relayed ({item.key})")
            OutboxItem.objects.filter(pk=item.pk).update(**fields)
            self.stats[f"request_{'again' if again else 'failed'}"] += 1
            log.info("%s relayed for %s: %s%s", item.key, item.signer, why, "; signing it again" if again else "")

    def _next_nonce(self, lane: Sender) -> int:
        if lane.next_nonce is None:
            node_next = self.client.nonce(lane.address, "pending")
            ours = (ChainTransaction.objects.filter(sender=lane, status__in=[*LIVE, TX.CONFIRMED, TX.REVERTED])
                    .order_by("-nonce").values_list("nonce", flat=True).first())
            lane.next_nonce = max(node_next, (ours + 1) if ours is not None else 0)
        return lane.next_nonce

    def _sign_new(self, lanes: list[Sender]) -> None:
        fees = None
        for lane in lanes:
            items = self._ready_items(lane)
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
            for chunk in self._chunks(items):
                to, data, gas, _ = self._call_of(chunk)
                gas *= 2 ** min(max(i.attempts for i in chunk), 3)
                signed = self.client.sign(account, to, data, nonce, gas, fees)
                txs.append(self._tx_row(lane, signed, RELAY if chunk[0].signer else chunk[0].function
                                        if len(chunk) == 1 else CALLS[chunk[0].function].batch, gas))
                groups.append(chunk)
                nonce += 1
            with transaction.atomic():
                ChainTransaction.objects.bulk_create(txs)
                if not txs[0].pk:  # backends without RETURNING on bulk insert
                    by_hash = dict(ChainTransaction.objects.filter(
                        tx_hash__in=[t.tx_hash for t in txs]).values_list("tx_hash", "pk"))
                    for t in txs:
                        t.pk = by_hash[t.tx_hash]
                _link(txs, groups)
                Sender.objects.filter(pk=lane.pk).update(next_nonce=nonce)
                lane.next_nonce = nonce
            self.stats["signed_txs"] += len(txs)
            self.stats["signed_items"] += len(items)

    @staticmethod
    def _tx_row(lane: Sender, signed: SignedTx, function: str, gas: int) -> ChainTransaction:
        return ChainTransaction(sender=lane, nonce=signed.nonce, function=function, tx_hash=to_hex(signed.hash),
                                raw=signed.raw, gas_limit=gas)

    # -- broadcasting ----------------------------------------------------------------------------
    def _broadcast(self, lanes: list[Sender]) -> None:
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
            tx.next_send_at = now + self._backoff(tx.resends)
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
            if len(items) > 1:
                self._split(tx, items, str(err))
                return
            if len(items) == 1 and items[0].signer:
                # A request alone that the node refuses (not for its fees) would be refused again: a no-op
                # takes its nonce, the relayer's lane goes on, and the request, which used no forwarder
                # nonce, is settled like one the forwarder skipped.
                self._resign(tx, fail_items=True, error=str(err))
                item = items[0]
                why = f"the node refused to relay it ({err})"
                self._settle([(self._redo(item, Outcome.REFUSE), item, why, WHY.NODE_REFUSED)], timezone.now())
                return
        attempts = tx.attempts + 1
        if not permanent or attempts < self.max_attempts:
            ChainTransaction.objects.filter(pk=tx.pk).update(attempts=attempts, last_error=str(err),
                                                             next_send_at=timezone.now() + self._backoff(attempts))
            if permanent:
                self._resign(tx, fail_items=False, error=str(err))
            return
        log.error("node keeps refusing %s: %s; its calls fail and a no-op fills nonce %d", tx, err, tx.nonce)
        self._resign(tx, fail_items=True, error=str(err))

    def _split(self, tx: ChainTransaction, items: list[OutboxItem], error: str) -> None:
        """A batch the node refuses: its first half is signed again at the same nonce (a refusal splits it
        again) and the others go back to the queue, each to be sent alone; so every request the node
        takes goes through, and the one it refuses ends alone, and fails alone."""
        first, rest = items[: len(items) // 2], items[len(items) // 2:]
        to, data, gas, _ = self._call_of(first)
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

    def _resign(self, tx: ChainTransaction, *, fail_items: bool, error: str) -> None:
        """Replace a refused transaction at the same nonce: the same calls with fresh fees, or,
        when they keep failing, a no-op transfer so that the sender's later nonces can be mined."""
        account = account_for(tx.sender.address)
        self.client._fees = None
        items = list(tx.items.filter(status=ITEM.SIGNED))
        if fail_items or not items:
            signed = self.client.sign(account, account.address, b"", tx.nonce, 21_000)
            function, gas = NOOP, 21_000
        else:
            to, data, _, _ = self._call_of(items)
            signed = self.client.sign(account, to, data, tx.nonce, tx.gas_limit)
            function, gas = tx.function, tx.gas_limit
        if to_hex(signed.hash) == tx.tx_hash:
            return  # nothing changed (same fees): the same bytes are sent again next pass
        with transaction.atomic():
            ChainTransaction.objects.filter(pk=tx.pk).update(status=TX.DROPPED, last_error=error)
            new = ChainTransaction.objects.create(sender=tx.sender, nonce=tx.nonce, function=function,
                                                  tx_hash=to_hex(signed.hash), raw=signed.raw, gas_limit=gas,
                                                  attempts=tx.attempts + 1,
                                                  next_send_at=timezone.now() + self._backoff(tx.attempts + 1))
            if fail_items:
                OutboxItem.objects.filter(pk__in=[i.pk for i in items]).update(
                    status=ITEM.FAILED, transaction=None, failure=WHY.NODE_REFUSED,
                    last_error=f"refused by the node: {error}")
            else:
                OutboxItem.objects.filter(pk__in=[i.pk for i in items]).update(transaction=new)
