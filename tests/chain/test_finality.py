"""Confirmation that waits for finality, and a submitter that heals what a node lost without a hot loop.

Each test loses blocks the way a crashed node does: `evm_snapshot` before the submitter's
transactions are mined and `evm_revert` after, so that the node no longer holds them and mines
other blocks at the same heights.
"""

from __future__ import annotations

from collections import Counter

import pytest

from apps.chain import indexer
from apps.chain.audit import run_audit
from apps.chain.client import account_from_key
from apps.chain.models import ChainTransaction, OutboxItem, Sender
from apps.chain.node import DEV_KEYS
from apps.chain.submitter import Submitter

from .conftest import drain

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]


def counting_sends(submitter: Submitter) -> Counter:
    """Count every broadcast of each signed transaction (by its raw bytes)."""
    sends: Counter = Counter()
    send_raw = submitter.client.send_raw

    def counted(raws):
        sends.update(bytes(r) for r in raws)
        return send_raw(raws)

    submitter.client.send_raw = counted
    return sends


def other_blocks(world, n: int) -> None:
    """Mine `n` blocks of someone else's transfers, so the lost heights hold different blocks."""
    client = world.ledger.client
    stranger = account_from_key(DEV_KEYS[3])
    for _ in range(n):
        nonce = client.nonce(stranger.address, "pending")
        client.send_raw([client.sign(stranger, stranger.address, b"", nonce, 21_000).raw])
        client.request("evm_mine", [])


def test_a_call_is_confirmed_only_when_its_block_is_final(world, settings):
    settings.LLMCHAIN_FINALITY = "3"
    iid = world.evaluation(world.users[0])
    submitter = Submitter(world.ledger)
    drain(submitter, until=lambda: ChainTransaction.objects.filter(function__startswith="autoEval",
                                                                   status="mined").exists(), what="mined")
    mined = ChainTransaction.objects.get(function__startswith="autoEval", status="mined")
    assert mined.succeeded is True and mined.block_hash.startswith("0x")
    assert OutboxItem.objects.get(key=f"autoEval:{iid}").status == "signed"  # a receipt is not final
    # humEval depends on autoEval: nothing of it is sent before autoEval is final.
    assert OutboxItem.objects.get(key=f"humEval:{iid}").status == "pending"
    drain(submitter, until=lambda: OutboxItem.objects.get(key=f"autoEval:{iid}").status == "confirmed",
          what="final")
    head = world.ledger.client.block_number()
    assert head - ChainTransaction.objects.get(pk=mined.pk).block_number >= 3
    drain(submitter, timeout=120)
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}


def test_the_indexer_folds_only_final_blocks(world, settings):
    settings.LLMCHAIN_FINALITY = "4"
    world.evaluation(world.users[0])
    drain(Submitter(world.ledger), timeout=120)
    head, final = world.ledger.head_and_final()
    assert final == head - 4
    indexer.index_until_head(world.ledger)
    head_after, final_after = world.ledger.head_and_final()
    cursor = indexer.IndexerCursor.objects.get(name=indexer.cursor_name(world.ledger))
    # A block a second: the head may have moved on while the indexer read, never past what was final.
    assert final <= cursor.last_block <= final_after == head_after - 4
    assert cursor.last_hash == world.ledger.client.get_block(cursor.last_block)["hash"]


def test_a_mined_transaction_that_loses_its_block_is_sent_again(world, settings):
    settings.LLMCHAIN_FINALITY = "50"  # nothing gets final during the test before the blocks are lost
    client = world.ledger.client
    snap = client.request("evm_snapshot", [])
    iids = [world.evaluation(u) for u in world.users]
    submitter = Submitter(world.ledger)
    sends = counting_sends(submitter)
    drain(submitter, until=lambda: ChainTransaction.objects.filter(function__startswith="autoEval",
                                                                   status="mined").exists(), what="mined")
    lost = ChainTransaction.objects.get(function__startswith="autoEval", status="mined")
    client.request("evm_revert", [snap])  # the node loses the block, and the transaction with it
    other_blocks(world, 2)
    settings.LLMCHAIN_FINALITY = "0"
    drain(submitter, timeout=120)
    again = ChainTransaction.objects.get(pk=lost.pk)
    assert again.status == "confirmed" and again.block_hash != lost.block_hash
    assert sends[bytes(lost.raw)] == 2  # the very same bytes, sent once more
    assert submitter.stats["unmined"] >= 1
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    indexer.index_until_head(world.ledger)
    assert run_audit(world.ledger).ok
    assert all(world.ledger.view("reputation", "interaction", bytes.fromhex(i[2:]))[9] for i in iids)


def test_final_transactions_a_node_lost_are_healed_from_the_gap(world, settings):
    """The issue's case: confirmed on the first receipt, then the node lost the block. The sender's
    later transactions wait in the node's queue behind the gap until the lost ones are re-sent."""
    settings.LLMCHAIN_RESEND_AFTER_S = 1
    client = world.ledger.client
    snap = client.request("evm_snapshot", [])
    first = [world.evaluation(u) for u in world.users]
    submitter = Submitter(world.ledger)
    sends = counting_sends(submitter)
    drain(submitter, timeout=120)
    indexer.index_until_head(world.ledger)
    confirmed = list(ChainTransaction.objects.filter(status="confirmed", sender__address=world.oracle)
                     .values_list("nonce", flat=True))
    client.request("evm_revert", [snap])  # every block since the snapshot is gone, final or not
    other_blocks(world, 3)
    # New work for one user only: the other users' lanes have nothing live, and are found by the
    # submitter's periodic look at lanes whose next nonce the node is below.
    later = [world.evaluation(world.users[0])]

    def everything_on_chain() -> bool:
        records = [world.ledger.view("reputation", "interaction", bytes.fromhex(i[2:])) for i in first + later]
        return all(r[8] and r[9] for r in records) and not submitter.has_work()  # rated, reputation updated

    drain(submitter, until=everything_on_chain, timeout=120, what="every evaluation on-chain again")
    assert submitter.stats["unconfirmed"] >= len(confirmed)
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    # No hot loop: every signed transaction went out a handful of times at most.
    assert max(sends.values()) <= 3, sends.most_common(3)
    indexer.index_until_head(world.ledger)
    report = run_audit(world.ledger)
    assert report.ok, report.summary()


def test_a_gap_nobody_here_signed_is_said_once_and_filled(world, settings, ledger_node, caplog):
    """Someone else used the oracle's key at nonce N and the node lost that transaction from its pool:
    the site's transactions from N + 1 on wait behind it. The lane says why, once, and after
    LLMCHAIN_RESEND_AFTER_S a no-op fills the nonce so that they can be mined."""
    # Long enough that the lane is seen waiting before the no-op fills the gap, on a busy machine too.
    settings.LLMCHAIN_RESEND_AFTER_S = 6
    client = world.ledger.client
    client.request("evm_setIntervalMining", [0])  # hold blocks: the pool is lost on restart
    oracle = account_from_key(DEV_KEYS[1])
    outsider_nonce = client.nonce(oracle.address, "pending")
    client.send_raw([client.sign(oracle, oracle.address, b"", outsider_nonce, 21_000).raw])
    iid = world.evaluation(world.users[0])
    submitter = Submitter(world.ledger)
    submitter.run_once()
    assert ChainTransaction.objects.get(function__startswith="autoEval").nonce == outsider_nonce + 1
    ledger_node.restart()  # the pool, with the outsider's transaction, is gone; ours are re-sent
    with caplog.at_level("WARNING", logger="apps.chain.submitter"):
        for _ in range(5):
            submitter.run_once()
            lane = Sender.objects.get(address=world.oracle)
            if lane.stuck_reason:
                break
        assert f"waits for nonce {outsider_nonce}" in lane.stuck_reason
        drain(submitter, timeout=60)
    said = [r.getMessage() for r in caplog.records if "cannot progress" in r.getMessage()]
    assert len(said) == 1, said
    assert Sender.objects.get(address=world.oracle).stuck_reason == ""
    noop = ChainTransaction.objects.get(sender__address=world.oracle, nonce=outsider_nonce)
    assert (noop.function, noop.status) == ("noop", "confirmed")
    assert OutboxItem.objects.get(key=f"autoEval:{iid}").status == "confirmed"
