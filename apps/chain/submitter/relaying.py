"""Relayed requests: which of a lane's queued calls can go next (each signer's requests in the
forwarder's nonce order, without a gap), custodial requests signed anew, and, once a relayer's
transaction is final, what the forwarder did with each request and what becomes of it."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict, deque

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Min, Q
from django.utils import timezone

from ..client import ChainClient, RpcError, chain_time, from_hex, to_hex
from ..keys import account_for, oracle_addresses
from ..ledger import CALLS, RELAYABLE, Ledger
from ..metatx import ForwardRequest, from_json, recover_signer, sign_request, to_json
from ..models import ChainTransaction, OutboxItem, Sender, SigningKey
from .common import ITEM, WHY, Limits, Outcome

log = logging.getLogger(__name__)

UINT48, UINT256 = 2**48, 2**256
# The call data of each relayed call: a selector and its fixed-size arguments (humEval: an id and six
# answers; vote: an id and an outcome; openBattle: three ids and a flag).
RELAYED_CALL_BYTES = {"humEval": 4 + 7 * 32, "vote": 4 + 2 * 32, "openBattle": 4 + 4 * 32}


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


class Relaying:
    def __init__(self, ledger: Ledger, client: ChainClient, limits: Limits, stats: Counter):
        self.ledger, self.client, self.limits, self.stats = ledger, client, limits, stats

    def ready_items(self, lane: Sender) -> list[OutboxItem]:
        base = OutboxItem.objects.filter(status=ITEM.PENDING, sender_address=lane.address)
        failed_dep = base.filter(depends_on__status=ITEM.FAILED)
        if failed_dep.exists():
            failed_dep.update(status=ITEM.FAILED, failure=WHY.DEPENDENCY, last_error="the call it depends on failed")
        self._fail_broken_groups(base)
        ready = base.filter(Q(depends_on__isnull=True) | Q(depends_on__status=ITEM.CONFIRMED))
        items = list(ready.filter(signer="").order_by("id")[: self.limits.max_items])
        # Relayed requests: those the forwarder can take next are picked among all that are queued, and
        # only then capped, so that requests signed with nonces far ahead (which only wait) cannot fill a
        # pass and starve the others.
        relayed = list(ready.exclude(signer="").order_by("id"))
        if relayed:
            items += self.capped(self._in_nonce_order(relayed))
        return items

    # -- atomic groups (an arena battle's openBattle and its vote) ------------------------------------
    def _fail_broken_groups(self, base) -> None:
        """Queued requests of an atomic group one of whose requests failed never go alone: they fail
        too, with the nonce they held freed (a custodial signer's later requests are signed anew)."""
        broken = list(base.exclude(atomic_group="").filter(atomic_group__in=OutboxItem.objects.filter(
            status=ITEM.FAILED).exclude(atomic_group="").values("atomic_group")))
        for item in broken:
            with transaction.atomic():
                OutboxItem.objects.filter(pk=item.pk, status=ITEM.PENDING).update(
                    status=ITEM.FAILED, failure=WHY.DEPENDENCY, transaction=None, relay_nonce=None,
                    last_error="a request it goes on-chain with, in one atomic batch, could not be sent")
                if item.relay_nonce is not None and self._custodial(item):
                    OutboxItem.objects.filter(signer=item.signer, status=ITEM.PENDING,
                                              relay_nonce__gt=item.relay_nonce).update(request=None, relay_nonce=None)
            self.stats["group_failed"] += 1
            log.info("%s fails with its atomic group %s", item.key, item.atomic_group)

    def capped(self, items: list[OutboxItem]) -> list[OutboxItem]:
        """The first max_items of `items`, without cutting an atomic group in two."""
        out = items[: self.limits.max_items]
        if len(items) > len(out) and out and out[-1].atomic_group and items[len(out)].atomic_group == out[-1].atomic_group:
            group = out[-1].atomic_group
            while out and out[-1].atomic_group == group:
                out.pop()
        return out

    def _with_groups(self, relayed: list[OutboxItem], ready: set[int]) -> list[OutboxItem]:
        """The ready relayed requests in an order that keeps each signer's nonce order, each atomic group's
        requests side by side (in id order) and only once all of its unconfirmed requests are ready: a
        request of a group waits, with its signer's later ones, until every other one can go with it. A
        group whose signer has a request in flight in another relayer's lane waits for it too (another
        lane's transaction could land after this one and take a nonce this batch needs)."""
        lane = relayed[0].sender_address
        groups = {i.atomic_group for i in relayed if i.atomic_group}
        unconfirmed: dict[str, set[int]] = defaultdict(set)
        for group, pk in OutboxItem.objects.filter(atomic_group__in=groups).exclude(status=ITEM.CONFIRMED).values_list(
                "atomic_group", "pk"):
            unconfirmed[group].add(pk)
        members: dict[str, list[OutboxItem]] = defaultdict(list)
        by_signer: dict[str, list[OutboxItem]] = defaultdict(list)
        for item in relayed:
            if item.pk in ready:
                by_signer[item.signer].append(item)
                if item.atomic_group:
                    members[item.atomic_group].append(item)
        signers = {i.signer for group in members.values() for i in group}
        elsewhere = set(OutboxItem.objects.filter(signer__in=signers, status=ITEM.SIGNED).exclude(
            sender_address=lane).values_list("signer", flat=True))
        whole = {group: sorted(own, key=lambda i: i.pk) for group, own in members.items()
                 if {i.pk for i in own} == unconfirmed[group] and len({i.signer for i in own}) == len(own)
                 and not {i.signer for i in own} & elsewhere}
        queues = {signer: deque(sorted(own, key=lambda i: i.relay_nonce)) for signer, own in sorted(by_signer.items())}
        out: list[OutboxItem] = []
        moved = True
        while moved:
            moved = False
            for queue in queues.values():
                while queue:
                    head = queue[0]
                    if not head.atomic_group:
                        out.append(queue.popleft())
                        moved = True
                        continue
                    group = whole.get(head.atomic_group)
                    if group is None or not all(queues[m.signer] and queues[m.signer][0] is m for m in group):
                        break
                    for m in group:
                        queues[m.signer].popleft()
                    out += group
                    moved = True
        return out

    def diagnose_group(self, tx: ChainTransaction, items: list[OutboxItem]) -> None:
        """An atomic group's batch reverted: nothing of it is on-chain. Each request is checked as the
        forwarder would now: one that expired, whose nonce was used elsewhere or whose signature does not
        hold is signed anew when the site holds its signer's key (a custodial user's vote, the oracle's
        openBattle) and fails otherwise (a wallet's vote: then its group fails with it, `_fail_broken_groups`);
        one whose nonce is still ahead waits; the others go back to the queue as they are, to be sent
        again with more gas (a batch that ran out)."""
        dep = self.ledger.deployment
        now_s = self.chain_now()
        signers = sorted({i.signer for i in items})
        nonces = dict(zip(signers, self._forwarder_nonces(signers)))
        outcomes = []
        for item in items:
            try:
                request = from_json(item.request)
                signed_by = recover_signer(request, dep.chainId, dep.forwarder)
            except (KeyError, TypeError, ValueError):
                request, signed_by = None, ""
            nonce = nonces[item.signer]
            if request is None or signed_by != item.signer:
                outcomes.append((self.redo(item), item, "the forwarder refused the request's signature",
                                 WHY.BAD_SIGNATURE))
            elif request.deadline < now_s:
                outcomes.append((self.redo(item), item, "the signed request expired before it was relayed", WHY.EXPIRED))
            elif request.nonce < nonce:
                outcomes.append((self.redo(item), item, f"the signed request's nonce {request.nonce} was used by "
                                 "another request", WHY.NONCE_USED))
            else:
                why = (f"waits for the signer's nonce {nonce} (it holds {request.nonce})" if request.nonce > nonce
                       else f"its atomic batch {tx.tx_hash} reverted (gas used {tx.gas_used}); sent again")
                outcomes.append((Outcome.WAIT, item, why, WHY.WAITED))
        self.settle(outcomes, timezone.now())
        self.stats["group_reverted"] += 1

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
            self.settle([(self.redo(i, Outcome.REFUSE), i, why, WHY.UNUSABLE) for i, why in refused], timezone.now())
            gone = {i.pk for i, _ in refused}
            relayed = [i for i in relayed if i.pk not in gone]
        now_s = self.chain_now()
        stale = [i for i in relayed if i.request and from_json(i.request).deadline <= now_s]
        if stale:
            self.settle([(self.redo(i), i, "the signed request expired before it was relayed", WHY.EXPIRED)
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
        if any(i.atomic_group for i in relayed):
            return [i for i in items if not i.signer] + self._with_groups(relayed, ready)
        # A signer's requests go into the batches in nonce order, whatever order they were queued in.
        return ([i for i in items if not i.signer]
                + sorted((i for i in relayed if i.pk in ready), key=lambda i: (i.relay_nonce, i.pk)))

    def chain_now(self) -> int:
        """The chain's clock, read from the node now (client.chain_time): the forwarder checks
        deadlines against it."""
        return chain_time(self.client.clock_offset())

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

    def redo(self, item: OutboxItem, otherwise: Outcome = Outcome.FAIL) -> Outcome:
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
        deadline = self.chain_now() + settings.LLMCHAIN_RELAY_DEADLINE_S
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

    # -- relayed requests: what the forwarder did with each ----------------------------------
    def relay_outcomes(self, receipts: dict[int, dict]) -> list[tuple[Outcome, OutboxItem, str, str]]:
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
                out.append((self.redo(item) if verdict is None else Outcome.FAIL, item, why, WHY.REVERTED))
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
            out.append((self.redo(item), item, why, failure))
        return out

    @staticmethod
    def _custodial(item: OutboxItem) -> bool:
        """Whether the site holds the signer's key: a user's stored key, or its own oracle's."""
        return item.signer in oracle_addresses() or SigningKey.objects.filter(address=item.signer).exists()

    def settle(self, outcomes: list[tuple[Outcome, OutboxItem, str, str]], now) -> None:
        """Write each request's outcome (as relay_outcomes gives them), with why (for operators) and its failure."""
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
            if verdict is Outcome.WAIT and item.attempts + 1 < self.limits.max_attempts:
                OutboxItem.objects.filter(pk=item.pk).update(status=ITEM.PENDING, transaction=None, last_error=why,
                                                             attempts=F("attempts") + 1)
                self.stats["request_waits"] += 1
                continue
            again = verdict is Outcome.AGAIN and item.attempts + 1 < self.limits.max_attempts
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
