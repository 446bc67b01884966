"""Lanes and broadcasting (apps/chain/submitter/lanes.py), against a node faked at the client's transport:
leases, nonces, transactions written before any node sees them, broadcasts in nonce order and in
bounded JSON-RPC batches, and the answers to a refusal."""

from __future__ import annotations

import pytest

from apps.chain.models import ChainTransaction, OutboxItem, Sender
from apps.chain.submitter import SEND_BATCH_BYTES, Submitter
from apps.chain.submitter.lanes import Lanes

from .fake_node import ORACLE, RELAYER, data_of, fake_ledger, nonce_of, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(settings):
    return fake_ledger(settings)


def test_a_lane_with_work_is_leased_to_one_owner_until_it_releases_it(ledger):
    queue(1)
    first, second = Submitter(ledger, owner="a").lanes, Submitter(ledger, owner="b").lanes
    assert [lane.address for lane in first.acquire()] == [ORACLE]
    assert second.acquire() == [], "held by a"
    first.release()
    assert [lane.address for lane in second.acquire()] == [ORACLE]


def test_a_lane_without_work_is_left_alone_unless_the_node_is_behind_it(ledger):
    lanes = Submitter(ledger).lanes
    assert lanes.acquire() == []
    assert [lane.address for lane in lanes.acquire(behind={RELAYER})] == [RELAYER]


def test_shards_divide_the_lanes_between_them(ledger):
    shards = [Submitter(ledger, shard=(i, 2)).lanes for i in range(2)]
    for address in (ORACLE, RELAYER, "0x" + "ab" * 20, "0x" + "cd" * 20):
        assert [s.mine(address) for s in shards].count(True) == 1


def test_calls_are_signed_into_rows_before_the_node_sees_them_with_nonces_from_the_nodes_count(ledger):
    node = ledger.client
    node.count[ORACLE] = 7
    items = queue(5)
    submitter = Submitter(ledger, batch_size=2)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    txs = list(ChainTransaction.objects.order_by("nonce"))
    assert [tx.nonce for tx in txs] == [7, 8, 9] and all(tx.status == "signed" and tx.raw for tx in txs)
    assert [nonce_of(bytes(tx.raw)) for tx in txs] == [7, 8, 9]
    assert node.sent == [] and node.pool == {}
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"signed"}
    assert [tx.items.count() for tx in txs] == [2, 2, 1]
    assert Sender.objects.get(address=ORACLE).next_nonce == 10
    assert submitter.stats["signed_txs"] == 3 and submitter.stats["signed_items"] == len(items)


def test_broadcasts_go_in_nonce_order_in_batches_the_node_takes(ledger, monkeypatch):
    node = ledger.client
    queue(6, function="addContext")  # no batch form: one transaction each
    OutboxItem.objects.update(payload={"contextId": "0x" + "0" * 63 + "1", "name": "a context"})
    submitter = Submitter(ledger)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    size = len(bytes(ChainTransaction.objects.first().raw))
    monkeypatch.setattr("apps.chain.submitter.lanes.SEND_BATCH_BYTES", 2 * size)
    submitter.lanes.broadcast(lanes)
    assert [len(part) for part in node.sent] == [2, 2, 2]
    assert [nonce_of(raw) for part in node.sent for raw in part] == list(range(6))
    assert set(ChainTransaction.objects.values_list("status", flat=True)) == {"sent"}
    assert SEND_BATCH_BYTES >= 64 * 1024  # a relayer's batch of ratings fits many times over


def test_a_nonce_another_transaction_took_sends_the_calls_back_to_be_signed_anew(ledger):
    node = ledger.client
    queue(1)
    submitter = Submitter(ledger)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    node.count[ORACLE] = 1  # the key was used elsewhere: nonce 0 is taken
    submitter.lanes.broadcast(lanes)
    assert ChainTransaction.objects.get().status == "dropped"
    assert OutboxItem.objects.get().status == "pending"
    assert Sender.objects.get(address=ORACLE).next_nonce is None, "read from the node again"


def test_a_batch_the_node_refuses_is_split_at_the_same_nonce(ledger):
    node = ledger.client
    queue(4)
    node.refuse = lambda raw: "exceeds block gas limit" if len(data_of(raw)) > 4 + 64 + 2 * 32 else None  # > 2 calls
    submitter = Submitter(ledger, batch_size=4)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    submitter.lanes.broadcast(lanes)
    assert submitter.stats["split"] == 1
    dropped, again = ChainTransaction.objects.order_by("pk")
    assert (dropped.status, again.status, again.nonce) == ("dropped", "signed", 0)
    assert again.items.count() == 2
    assert list(OutboxItem.objects.filter(transaction=None).values_list("status", "solo")) == [("pending", True)] * 2


def test_a_call_refused_for_good_fails_and_a_no_op_keeps_the_lane_going(ledger):
    node = ledger.client
    queue(1)
    node.refuse = lambda raw: "invalid opcode" if data_of(raw) else None  # a no-op transfer goes through
    submitter = Submitter(ledger, max_attempts=1)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    submitter.lanes.broadcast(lanes)
    item = OutboxItem.objects.get()
    assert (item.status, item.failure) == ("failed", OutboxItem.Failure.NODE_REFUSED)
    noop = ChainTransaction.objects.get(status="signed")
    assert (noop.function, noop.nonce) == ("noop", 0)


def test_lanes_is_built_from_its_collaborators_only(ledger):
    submitter = Submitter(ledger)
    assert isinstance(submitter.lanes, Lanes)
    assert submitter.lanes.calls is submitter.calls and submitter.lanes.relaying is submitter.relaying
