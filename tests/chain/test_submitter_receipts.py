"""Receipts and finality (apps/chain/submitter/receipts.py), against a node faked at the client's
transport: a receipt makes a transaction mined, a final block confirms its calls, a receipt that
disappears sends the same bytes again, and a mined block is not read again until it changes."""

from __future__ import annotations

import pytest

from apps.chain.models import ChainTransaction, OutboxItem
from apps.chain.submitter import Submitter

from .fake_node import fake_ledger, queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(settings):
    """Three calls signed into one transaction, broadcast; (submitter, node, lanes)."""
    ledger = fake_ledger(settings)  # finality: 2 blocks
    queue(3)
    submitter = Submitter(ledger)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    submitter.lanes.broadcast(lanes)
    return submitter, ledger.client, lanes


def test_a_receipt_makes_it_mined_and_only_a_final_block_confirms_its_calls(sent):
    submitter, node, lanes = sent
    block = node.mine()
    submitter.receipts.check(lanes)
    tx = ChainTransaction.objects.get()
    assert (tx.status, tx.block_number, tx.succeeded) == ("mined", block, True)
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"signed"}, "not final yet"
    node.mine()
    node.mine()
    submitter.receipts.check(lanes)
    assert ChainTransaction.objects.get().status == "confirmed"
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert submitter.stats["mined"] == 1 and submitter.stats["confirmed"] == 1


def test_a_mined_transaction_whose_block_is_lost_is_sent_again_with_the_same_bytes(sent):
    submitter, node, lanes = sent
    node.mine()
    submitter.receipts.check(lanes)
    raw = bytes(ChainTransaction.objects.get().raw)
    node.lose_blocks(1)
    node.fork += 1  # the blocks after it are new ones
    node.mine()
    submitter.receipts.check(lanes)
    tx = ChainTransaction.objects.get()
    assert (tx.status, tx.block_number, tx.block_hash) == ("sent", None, "")
    assert submitter.stats["unmined"] == 1
    assert bytes(tx.raw) == raw, "never signed twice"


def test_a_mined_transaction_is_not_read_again_while_its_block_stays_the_nodes(sent):
    submitter, node, lanes = sent
    node.mine()
    submitter.receipts.check(lanes)
    node.methods.clear()
    submitter.receipts.check(lanes)
    assert node.methods["eth_getTransactionReceipt"] == 0
    assert node.methods["eth_getBlockByNumber"] == 1, "its block's header, once"


def test_a_reverted_batch_sends_each_call_alone_for_its_own_verdict(sent):
    submitter, node, lanes = sent
    node.reverts = lambda raw: True
    node.mine()
    node.mine()
    node.mine()
    submitter.receipts.check(lanes)
    assert ChainTransaction.objects.get().status == "reverted"
    assert list(OutboxItem.objects.values_list("status", "solo", "transaction", "attempts")) == [
        ("pending", True, None, 1)] * 3
    assert submitter.stats["reverted"] == 1
