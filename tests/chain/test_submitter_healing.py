"""Healing (apps/chain/submitter/healing.py), against a node faked at the client's transport: what a
restarted node lost is sent again with the same bytes, final transactions in lost blocks are
unconfirmed, a nonce gap this site never signed makes the lane say why once and is then filled, and
the node is not asked again about a lane on every pass."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.chain.models import ChainTransaction, OutboxItem, Sender
from apps.chain.submitter import Submitter

from .fake_node import ORACLE, fake_ledger, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(settings):
    settings.LLMCHAIN_RESEND_AFTER_S = 5
    return fake_ledger(settings)


def run(submitter: Submitter):
    lanes = submitter.lanes.acquire()
    submitter.receipts.check(lanes)
    submitter.healing.heal(lanes)
    submitter.lanes.sign_new(lanes)
    submitter.lanes.broadcast(lanes)
    return lanes


def test_what_a_restarted_node_lost_from_its_pool_is_sent_again_with_the_same_bytes(ledger):
    node = ledger.client
    queue(2, function="addContext")
    OutboxItem.objects.update(payload={"contextId": "0x" + "0" * 63 + "1", "name": "a context"})
    submitter = Submitter(ledger)
    run(submitter)
    raws = sorted(node.pool.values())
    node.restart()
    lanes = submitter.lanes.acquire()
    submitter.healing.heal(lanes)
    assert submitter.stats["resent"] == 0, "not looked up before its backoff"
    ChainTransaction.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))  # the backoff passed
    submitter.healing.heal(lanes)  # the node's pending count is below both: both are looked up
    assert submitter.stats["resent"] == 2
    assert set(ChainTransaction.objects.values_list("status", "resends")) == {("signed", 1)}
    submitter.lanes.broadcast(lanes)
    assert sorted(node.pool.values()) == raws


def test_final_transactions_in_blocks_the_node_lost_are_unconfirmed_and_sent_again(ledger):
    node = ledger.client
    queue(1)
    submitter = Submitter(ledger)
    lanes = run(submitter)
    for _ in range(3):
        node.mine()
    submitter.receipts.check(lanes)
    assert OutboxItem.objects.get().status == "confirmed"
    node.lose_blocks(3)  # deeper than the finality rule allows for
    submitter.healing.heal(lanes)
    tx = ChainTransaction.objects.get()
    assert (tx.status, tx.block_number, tx.final_at) == ("signed", None, None)
    assert OutboxItem.objects.get().status == "signed"
    assert submitter.stats["unconfirmed"] == 1


def test_a_lane_behind_the_node_is_found_once_per_sweep_not_on_every_pass(ledger):
    node = ledger.client
    Sender.objects.create(address=ORACLE, next_nonce=3)  # the node counts 0: it lost them
    healing = Submitter(ledger).healing
    assert healing.lanes_behind_the_node() == {ORACLE}
    node.methods.clear()
    assert healing.lanes_behind_the_node() == set(), "the next sweep is LLMCHAIN_RESEND_AFTER_S away"
    assert node.methods == {}


def test_a_gap_this_site_never_signed_makes_the_lane_say_why_once_then_a_no_op_fills_it(ledger, caplog):
    node = ledger.client
    queue(1)
    node.count[ORACLE] = 0
    submitter = Submitter(ledger)
    lane = Sender.objects.create(address=ORACLE, next_nonce=2)  # nonces 0 and 1 went elsewhere and were lost
    lanes = run(submitter)
    assert ChainTransaction.objects.get().nonce == 2
    with caplog.at_level("WARNING", logger="apps.chain.submitter"):
        submitter.healing.heal(lanes)
        submitter.healing.heal(lanes)
    lane.refresh_from_db()
    assert "waits for nonce 0" in lane.stuck_reason
    assert sum("cannot progress" in r.getMessage() for r in caplog.records) == 1, "said once"
    Sender.objects.filter(pk=lane.pk).update(stuck_since=timezone.now() - timedelta(seconds=6))
    lanes = submitter.lanes.acquire()
    submitter.healing.heal(lanes)
    assert list(ChainTransaction.objects.filter(function="noop").order_by("nonce").values_list("nonce", flat=True)) == [0, 1]
    lane.refresh_from_db()
    assert lane.stuck_reason == ""
