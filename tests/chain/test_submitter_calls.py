"""What a transaction carries (apps/chain/submitter/calls.py): queued calls cut into batches, the call
data of a batch, and a refused transaction replaced at its nonce. The node is faked at the client's
transport; the call data is the contracts' real ABI encoding."""

from __future__ import annotations

import pytest
from eth_account import Account

from apps.chain.models import ChainTransaction, OutboxItem
from apps.chain.submitter import Submitter, parse_shard
from apps.chain.submitter.calls import function_of
from apps.chain.submitter.common import Limits, backoff

from .fake_node import DEPLOYMENT, fake_ledger, queue, queue_signed

pytestmark = pytest.mark.django_db
WALLET = Account.from_key("0x" + "5a" * 32)


@pytest.fixture
def ledger(settings):
    return fake_ledger(settings)


def test_consecutive_calls_of_one_function_share_a_batch_up_to_its_size(ledger):
    calls = Submitter(ledger, batch_size=2).calls
    items = queue(3) + queue(1, function="addContext", start=10) + queue(1, start=20)
    assert [[i.pk for i in c] for c in calls.chunks(items)] == [
        [items[0].pk, items[1].pk], [items[2].pk], [items[3].pk], [items[4].pk]]


def test_a_call_without_a_batch_form_or_marked_solo_goes_alone(ledger):
    calls = Submitter(ledger, batch_size=10).calls
    contexts = queue(2, function="addContext")
    solo = queue(2, start=10, solo=True)
    assert [len(c) for c in calls.chunks(contexts + solo)] == [1, 1, 1, 1]


def test_relayed_requests_go_together_into_one_executeBatch(ledger):
    calls = Submitter(ledger, batch_size=10).calls
    requests = queue_signed(WALLET, [0, 1, 2])
    [chunk] = calls.chunks(requests)
    to, data, gas, contract = calls.call_of(chunk)
    assert (to, contract, function_of(chunk)) == (DEPLOYMENT.forwarder, "forwarder", "executeBatch")
    assert data[:4] == ledger.abis["forwarder"].fn("executeBatch").selector
    assert gas > sum(OutboxItem.objects.filter(pk__in=[i.pk for i in chunk]).values_list("request__gas", flat=True))


def test_a_batch_of_plain_calls_is_the_calls_batch_form(ledger):
    calls = Submitter(ledger).calls
    one, two = queue(2)
    assert function_of([one]) == "updateReputation" and function_of([one, two]) == "updateReputationBatch"
    assert calls.call_of([one, two])[1][:4] == ledger.abis["reputation"].fn("updateReputationBatch").selector
    assert calls.call_of([one])[3] == "reputation"


def test_a_refused_transaction_is_replaced_by_a_no_op_at_its_nonce_and_its_calls_fail(ledger):
    submitter = Submitter(ledger)
    queue(1)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    tx = ChainTransaction.objects.get()
    submitter.calls.resign(tx, fail_items=True, error="refused")
    noop = ChainTransaction.objects.get(status="signed")
    assert (noop.function, noop.nonce, noop.gas_limit) == ("noop", tx.nonce, 21_000)
    assert ChainTransaction.objects.get(pk=tx.pk).status == "dropped"
    assert OutboxItem.objects.get().failure == OutboxItem.Failure.NODE_REFUSED


def test_signing_the_same_calls_again_with_the_same_fees_changes_nothing(ledger):
    submitter = Submitter(ledger)
    queue(1)
    lanes = submitter.lanes.acquire()
    submitter.lanes.sign_new(lanes)
    tx = ChainTransaction.objects.get()
    submitter.calls.resign(tx, fail_items=False, error="underpriced")
    assert list(ChainTransaction.objects.values_list("pk", "status")) == [(tx.pk, "signed")], "the same bytes"


def test_the_limits_come_from_the_settings_unless_given(settings):
    settings.LLMCHAIN_TX_BATCH, settings.LLMCHAIN_RESEND_AFTER_S = 16, 7
    limits = Limits.from_settings(max_attempts=3)
    assert (limits.batch_size, limits.resend_after.total_seconds(), limits.max_attempts) == (16, 7, 3)
    assert Limits.from_settings(batch_size=0).batch_size == 16
    assert Limits.from_settings(resend_after_s=0).resend_after.total_seconds() == 0


def test_backoff_doubles_up_to_its_cap(settings):
    settings.LLMCHAIN_RESEND_MAX_S = 8
    assert [backoff(n).total_seconds() for n in range(6)] == [1, 1, 2, 4, 8, 8]


def test_a_shard_is_i_of_n():
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "x", "1"):
        with pytest.raises(ValueError):
            parse_shard(bad)
