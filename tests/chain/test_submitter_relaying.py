"""Relayed requests (apps/chain/submitter/relaying.py), against a node faked at the client's transport:
which can go next (each signer's in the forwarder's nonce order, without a gap), which can never go
as signed, what an expired one becomes, how an outcome is written, and the chain's clock the
deadlines are read against."""

from __future__ import annotations

import time

import pytest
from eth_account import Account

from apps.chain.models import OutboxItem, Sender
from apps.chain.submitter import Outcome, Submitter, unrelayable

from .fake_node import RELAYER, fake_ledger, queue, queue_signed

pytestmark = pytest.mark.django_db
WALLET = Account.from_key("0x" + "5a" * 32)


@pytest.fixture
def ledger(settings):
    return fake_ledger(settings)


def lane() -> Sender:
    return Sender.objects.get_or_create(address=RELAYER)[0]


def test_a_signers_requests_go_in_nonce_order_and_stop_at_a_gap(ledger):
    ledger.client.forwarder_nonces[WALLET.address.lower()] = 5
    late, first, second, after_gap = queue_signed(WALLET, [6, 5, 7, 9])
    ready = Submitter(ledger).relaying.ready_items(lane())
    assert [i.pk for i in ready] == [first.pk, late.pk, second.pk], "5, 6, 7; 9 waits for 8"


def test_requests_ahead_of_the_forwarders_nonce_wait(ledger):
    queue_signed(WALLET, [2, 3])  # the forwarder expects 0
    assert Submitter(ledger).relaying.ready_items(lane()) == []


def test_plain_calls_of_a_lane_come_first_in_queue_order(ledger):
    calls = queue(2, sender=RELAYER)
    [request] = queue_signed(WALLET, [0], start=10)
    assert [i.pk for i in Submitter(ledger).relaying.ready_items(lane())] == [calls[0].pk, calls[1].pk, request.pk]


@pytest.mark.parametrize("change, words", [({"gas": 10**6}, "gives its call 1000000 gas"),
                                           ({"data": b"\x00" * 10}, "another call"),
                                           ({"value": 1}, "cannot take")])
def test_a_request_its_signer_shaped_to_cost_the_relayer_is_refused_before_it_is_sent(ledger, change, words):
    [item] = queue_signed(WALLET, [0], **change)
    assert words in unrelayable(item)
    assert Submitter(ledger).relaying.ready_items(lane()) == []
    item.refresh_from_db()
    assert (item.status, item.failure, item.relay_nonce) == ("failed", OutboxItem.Failure.UNUSABLE, None)


def test_a_wallets_expired_request_fails_with_words_and_its_later_ones_fail_with_it(ledger):
    expired, later = queue_signed(WALLET, [0], deadline=int(time.time()) - 60) + queue_signed(WALLET, [1], start=5)
    assert Submitter(ledger).relaying.ready_items(lane()) == []
    expired.refresh_from_db()
    later.refresh_from_db()
    assert (expired.status, expired.failure) == ("failed", OutboxItem.Failure.EXPIRED)
    assert "expired" in expired.last_error
    assert (later.status, later.failure) == ("failed", OutboxItem.Failure.EARLIER_FAILED)


def test_a_request_that_waits_goes_back_to_the_queue_until_it_has_waited_too_often(ledger):
    [item] = queue_signed(WALLET, [3])
    relaying = Submitter(ledger, max_attempts=2).relaying
    relaying.settle([(Outcome.WAIT, item, "waits for the signer's nonce 1", OutboxItem.Failure.WAITED)], None)
    item.refresh_from_db()
    assert (item.status, item.attempts, item.relay_nonce) == ("pending", 1, 3)
    relaying.settle([(Outcome.WAIT, item, "waits for the signer's nonce 1", OutboxItem.Failure.WAITED)], None)
    item.refresh_from_db()
    assert (item.status, item.failure) == ("failed", OutboxItem.Failure.WAITED)


def test_a_wallets_request_the_forwarder_skipped_is_for_its_signer_to_sign_again(ledger):
    [item] = queue_signed(WALLET, [0])
    assert Submitter(ledger).relaying.redo(item) is Outcome.FAIL


def test_deadlines_are_read_against_the_chains_clock_when_it_runs_ahead(ledger):
    ledger.client.clock_ahead = 86_400
    relaying = Submitter(ledger).relaying
    assert abs(relaying.chain_now() - (time.time() + 86_400)) < 5
    ledger.client.clock_ahead = -30  # a latest block older than now: this machine's clock
    assert abs(relaying.chain_now() - time.time()) < 2
