"""Ratings signed by their raters and relayed in batches: the outbox keeps each signed
request before it is relayed, the relayer sends many in one executeBatch, and the submitter reads
from the forwarder's events what became of each one: executed (confirmed), skipped because it
expired or its nonce was used (a custodial request is signed again, a wallet user is told to sign
again, one already applied by someone else's relay is confirmed as such), or executed with its call
reverted (failed for good). Nothing is lost, nothing applied twice; the audit replays relayed
ratings by their signers."""

from __future__ import annotations

import time

import pytest
from eth_account import Account

from apps.chain import indexer, metatx, outbox, relay
from apps.chain.audit import run_audit
from apps.chain.client import ChainClient, account_from_key
from apps.chain.deploy import deploy, grant_role
from apps.chain.keys import new_key, relayer_address
from apps.chain.models import ChainTransaction, OutboxItem, Sender
from apps.chain.node import DEV_KEYS, AnvilNode
from apps.chain.submitter import RELAY, Submitter
from lib.ids import b32

from .conftest import drain, drain_sharded, rand_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]
ANSWERS = {"reliability": 4, "completeness": 5, "utility": 3, "familiarity": 4, "trust": 3, "uncertainty": 2}
# Blocks every quarter of a second here, where the package's ledger node (tests/chain/conftest.py) mines
# one a second as `make run` does: each test waits for a dependency's block again and again (the world's
# accounts, then its model; each autoEval, humEval, updateReputation after the other), about 60 of the
# module's 85 s at one a second, and what the tests check (batches, nonces, deadlines, skips and reverts)
# does not depend on how long a block takes. anvil stamps blocks with the wall clock's second, several
# blocks the same second, so the chain's clock keeps pace with this machine's, as the deadlines need.
BLOCK_TIME_S = 0.25


@pytest.fixture(scope="module")
def ledger_node(tmp_path_factory, admin, oracle):
    """The package's ledger node at BLOCK_TIME_S. The contracts are deployed on the interval-mining
    node itself (tests.support.deploy_on_interval_node switches to automine for them, but anvil takes
    only whole seconds back from evm_setIntervalMining): ten transactions, a block each."""
    path = tmp_path_factory.mktemp("ledger")
    node = AnvilNode(block_time=BLOCK_TIME_S, base_fee=0, state_file=path / "state.json", log_file=path / "anvil.log")
    node.start()
    try:
        client = ChainClient(node.url)
        deployment = deploy(client, account_from_key(DEV_KEYS[0]))
        grant_role(client, deployment, account_from_key(DEV_KEYS[0]), "ORACLE_ROLE", oracle.address)
        node.deployment_file = path / "deployment.json"
        deployment.save(node.deployment_file)
        node.deployment = deployment
        yield node
    finally:
        node.stop()


def _hum(world, iid: str) -> bool:
    return world.ledger.view("reputation", "interaction", b32(iid))[8]


def _wallet_user(world):
    """A registered user whose key the site does not hold (a wallet)."""
    wallet = Account.create()
    outbox.enqueue("register", world.admin, {"account": wallet.address, "role": "user"})
    drain(Submitter(world.ledger))
    return wallet


def _scored(world, user: str) -> tuple[str, OutboxItem]:
    """An interaction of `user` scored by the oracle (autoEval queued); returns (id, its autoEval row)."""
    iid = rand_id()
    auto = outbox.enqueue("autoEval", world.oracle, {
        "interactionId": iid, "modelId": world.model, "contextId": world.context, "user": user,
        "hasReference": True, "sA": str(6 * 10**17), "wA": str(5 * 10**17), "evidenceCid": f"bafy{iid[2:14]}"})
    return iid, auto


def _wallet_request(wallet, iid: str, nonce: int, *, deadline: int | None = None, answers=ANSWERS):
    clean = outbox.check_call("humEval", {"interactionId": iid, **answers})
    request = relay.unsigned(wallet.address, "humEval", clean, nonce, deadline)
    dep = relay.deployment()
    return clean, metatx.sign_request(request, wallet.key, dep.chainId, dep.forwarder)


def test_custodial_ratings_are_relayed_in_batches_once_each_and_the_audit_agrees(world):
    iids = [world.evaluation(world.users[i % 3], relayed=True) for i in range(12)]
    hum = OutboxItem.objects.filter(function="humEval")
    assert {i.sender_address for i in hum} == {relayer_address()}, "the relayer's lane sends every rating"
    assert {i.signer for i in hum} == set(world.users)
    # Each user's requests hold consecutive forwarder nonces from 0, in the order they were rated.
    for user in world.users:
        assert sorted(hum.filter(signer=user).values_list("relay_nonce", flat=True)) == [0, 1, 2, 3]
    drain(Submitter(world.ledger, batch_size=64))
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert all(_hum(world, iid) for iid in iids)
    relays = ChainTransaction.objects.filter(function=RELAY)
    assert 1 <= relays.count() < len(iids), "requests share executeBatch transactions"
    assert relays.filter(items__function="humEval").distinct().count() == relays.count()
    for user in world.users:
        assert world.ledger.view("forwarder", "nonces", user)[0] == 4
    rep = world.ledger.reputation(b32(world.model), b32(world.context))
    assert (rep[3], rep[4]) == (12, 12)
    indexer.index_until_head(world.ledger)
    report = run_audit(world.ledger)
    assert report.ok, report.summary()


def test_a_request_someone_else_relayed_first_is_confirmed_once_not_applied_twice(world, admin):
    """The forwarder is public: anyone holding a signed request may relay it. The site's copy is then
    skipped (its nonce is used) and found already applied."""
    user = world.users[0]
    iid, auto = _scored(world, user)
    drain(Submitter(world.ledger))
    item = outbox.enqueue_signed("humEval", user, {"interactionId": iid, **ANSWERS}, depends_on=auto)
    request = metatx.from_json(item.request)
    outsider = world.ledger.client
    tx = outsider.sign(admin, world.ledger.deployment.forwarder,
                       world.ledger.abis["forwarder"].fn("execute").encode(metatx.request_tuple(request)),
                       outsider.nonce(admin.address), 400_000)
    outsider.send_raw([tx.raw])
    outsider.wait_receipt(tx.hash)
    assert _hum(world, iid)
    drain(Submitter(world.ledger))
    item.refresh_from_db()
    assert item.status == "confirmed" and item.duplicate, item.last_error
    rep = world.ledger.reputation(b32(world.model), b32(world.context))
    assert rep[4] == 1


def test_an_expired_custodial_request_is_signed_again_and_lands_with_the_later_ones(world):
    user = world.users[1]
    first, auto1 = _scored(world, user)
    second, auto2 = _scored(world, user)
    a = outbox.enqueue_signed("humEval", user, {"interactionId": first, **ANSWERS}, depends_on=auto1)
    b = outbox.enqueue_signed("humEval", user, {"interactionId": second, **ANSWERS}, depends_on=auto2)
    assert (a.relay_nonce, b.relay_nonce) == (0, 1)
    # The first one's deadline passed while it waited (the chain was away for a day, say).
    stale = metatx.from_json(a.request)
    dep = relay.deployment()
    expired = metatx.sign_request(metatx.ForwardRequest(stale.sender, stale.to, stale.gas, stale.nonce,
                                                        int(time.time()) - 10, stale.data),
                                  relay.account_for(user).key, dep.chainId, dep.forwarder)
    OutboxItem.objects.filter(pk=a.pk).update(request=metatx.to_json(expired))
    submitter = Submitter(world.ledger)
    drain(submitter)
    assert submitter.stats["resigned"] >= 1
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.status, b.status) == ("confirmed", "confirmed"), (a.last_error, b.last_error)
    assert _hum(world, first) and _hum(world, second)
    assert world.ledger.view("forwarder", "nonces", user)[0] == 2


def test_a_wallet_request_that_expired_fails_with_words_and_does_not_block_its_batch(world):
    wallet = _wallet_user(world)
    iid, auto = _scored(world, wallet.address)
    other, auto2 = _scored(world, world.users[2])
    drain(Submitter(world.ledger))
    # Room for the door's minimum on a busy machine (enqueue comes a moment after signing), then past it.
    clean, request = _wallet_request(wallet, iid, 0, deadline=int(time.time()) + 6)
    item = outbox.enqueue("humEval", wallet.address, clean, depends_on=auto, request=request)
    assert item.signer == wallet.address and item.sender_address == relayer_address()
    fine = outbox.enqueue_signed("humEval", world.users[2], {"interactionId": other, **ANSWERS}, depends_on=auto2)
    time.sleep(max(0.0, request.deadline + 2 - time.time()))  # it expires before it is relayed (the relayer was away)
    drain(Submitter(world.ledger))
    item.refresh_from_db()
    fine.refresh_from_db()
    assert item.status == "failed" and item.failure == OutboxItem.Failure.EXPIRED and "expired" in item.last_error
    assert item.needs_new_signature, "the wallet's rater is asked to sign again"
    assert item.relay_nonce is None, "an expired request did not use its nonce"
    assert not _hum(world, iid)
    assert fine.status == "confirmed" and _hum(world, other)
    assert relay.next_nonce(wallet.address, read_chain=True) == 0


def test_a_request_whose_call_reverts_fails_for_good_and_the_others_land(world):
    """A wallet user signs a rating of someone else's answer: the forwarder executes it (its nonce is
    used), humEval refuses it (NotInteractionUser), and the rest of the batch goes on."""
    wallet = _wallet_user(world)
    theirs, auto = _scored(world, world.users[0])
    mine, auto2 = _scored(world, world.users[1])
    clean, request = _wallet_request(wallet, theirs, 0)
    bad = outbox.enqueue("humEval", wallet.address, clean, depends_on=auto, request=request, key="humEval:bad")
    good = outbox.enqueue_signed("humEval", world.users[1], {"interactionId": mine, **ANSWERS}, depends_on=auto2)
    drain(Submitter(world.ledger))
    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.status == "failed" and "NotInteractionUser" in bad.last_error
    assert bad.relay_nonce == 0, "executed: its nonce is used up"
    assert world.ledger.view("forwarder", "nonces", wallet.address)[0] == 1
    assert good.status == "confirmed" and _hum(world, mine) and not _hum(world, theirs)


def test_a_later_rating_waits_for_the_earlier_one_of_the_same_signer(world):
    """Nonces go in order: a rating whose answer was scored first waits for the rater's earlier one."""
    user = world.users[2]
    early, _ = _scored(world, user)
    late, auto_late = _scored(world, user)
    blocker = outbox.enqueue("addContext", world.admin, {"contextId": rand_id(), "name": "later"})
    a = outbox.enqueue_signed("humEval", user, {"interactionId": early, **ANSWERS}, depends_on=blocker)
    b = outbox.enqueue_signed("humEval", user, {"interactionId": late, **ANSWERS}, depends_on=auto_late)
    OutboxItem.objects.filter(function="autoEval").update(status="confirmed")
    lane = Submitter(world.ledger)._acquire_lanes()
    relayer = next(lane_ for lane_ in lane if lane_.address == relayer_address())
    assert [i.pk for i in Submitter(world.ledger)._ready_items(relayer)] == [], "nonce 1 waits for nonce 0"
    OutboxItem.objects.filter(pk=blocker.pk).update(status="confirmed")
    assert [i.pk for i in Submitter(world.ledger)._ready_items(relayer)] == [a.pk, b.pk]


@pytest.mark.parametrize("fault", ["forged", "other call", "expired", "other contract"])
def test_a_bad_signed_request_is_refused_at_the_door_and_nothing_is_queued(world, fault):
    wallet = _wallet_user(world)
    iid, auto = _scored(world, wallet.address)
    clean, request = _wallet_request(wallet, iid, 0)
    dep = relay.deployment()
    if fault == "forged":
        request = metatx.sign_request(request, Account.create().key, dep.chainId, dep.forwarder)
    elif fault == "other call":
        _, request = _wallet_request(wallet, iid, 0, answers={**ANSWERS, "utility": 1})
    elif fault == "expired":
        _, request = _wallet_request(wallet, iid, 0, deadline=int(time.time()) - 1)
    else:
        request = metatx.sign_request(metatx.ForwardRequest(request.sender, dep.identity, request.gas, 0,
                                                            request.deadline, request.data),
                                      wallet.key, dep.chainId, dep.forwarder)
    before = OutboxItem.objects.count()
    with pytest.raises(outbox.InvalidCall):
        outbox.enqueue("humEval", wallet.address, clean, depends_on=auto, request=request)
    assert OutboxItem.objects.count() == before


def test_a_wallet_rating_signed_after_an_earlier_one_still_waiting_lands_after_it(world):
    """A wallet user rates answer 1 (not scored yet: its request, nonce 0, is not queued) and then
    answer 2 (queued at once with nonce 1): the second waits for the first instead of being skipped."""
    wallet = _wallet_user(world)
    first, auto1 = _scored(world, wallet.address)
    second, auto2 = _scored(world, wallet.address)
    clean1, request1 = _wallet_request(wallet, first, 0)
    clean2, request2 = _wallet_request(wallet, second, 1)
    later = outbox.enqueue("humEval", wallet.address, clean2, depends_on=auto2, request=request2)
    submitter = Submitter(world.ledger)
    drain(submitter, until=lambda: OutboxItem.objects.filter(function="autoEval", status="confirmed").count() == 2)
    for _ in range(3):
        submitter.run_once()
    later.refresh_from_db()
    assert later.status == "pending" and later.transaction_id is None, "nonce 1 is not relayed before nonce 0"
    earlier = outbox.enqueue("humEval", wallet.address, clean1, depends_on=auto1, request=request1)
    drain(submitter)
    earlier.refresh_from_db()
    later.refresh_from_db()
    assert (earlier.status, later.status) == ("confirmed", "confirmed")
    assert _hum(world, first) and _hum(world, second)


def test_direct_and_relayed_ratings_mixed_keep_the_mirror_equal_to_the_contract(world):
    """The same raters rate some answers directly and some through the relayer (a deployment that
    turned relaying on): chain audit replays both kinds, by their signers, to the wei."""
    iids = [world.evaluation(world.users[i % 3], relayed=i % 2 == 0, answers=(1 + i % 5, 5, 2 + i % 4, 3, 4, 1 + i % 3))
            for i in range(10)]
    drain(Submitter(world.ledger, batch_size=4))
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert all(_hum(world, iid) for iid in iids)
    kinds = set(ChainTransaction.objects.filter(items__function="humEval").values_list("function", flat=True))
    assert kinds == {"humEval", RELAY}, "both kinds of rating went out"
    indexer.index_until_head(world.ledger)
    report = run_audit(world.ledger)
    assert report.ok and report.interactions >= 10, report.summary()


def test_deadlines_follow_the_chains_clock_when_it_runs_ahead_of_this_machines(world):
    """A node whose time was moved a day and a half ahead (a development chain told to skip time):
    requests signed now still have a day to go by the chain's clock, and land."""
    from django.core.cache import cache

    client = world.ledger.client
    client.request("evm_increaseTime", [36 * 3600])
    client.request("evm_mine", [])
    cache.clear()  # the chain's clock is read again, not taken from before the jump
    iid = world.evaluation(world.users[0], relayed=True)
    request = metatx.from_json(OutboxItem.objects.get(function="humEval").request)
    assert request.deadline > int(client.get_block("latest")["timestamp"], 16) + 23 * 3600
    submitter = Submitter(world.ledger)
    drain(submitter)
    assert submitter.stats["resigned"] == 0 and _hum(world, iid)


def test_an_arena_vote_is_opened_by_the_oracle_signed_by_its_user_relayed_and_indexed(world):
    """openBattle from the oracle after both answers' autoEval, then the user's vote as a signed
    request relayed with the ratings; the indexer folds both events into ArenaBattle. A vote on a
    voided battle is recorded as not counted."""
    from apps.chain.models import ArenaBattle

    other = rand_id()
    outbox.enqueue("addModel", world.developer, {"modelId": other, "metadataCid": "bafyother"})
    drain(Submitter(world.ledger))
    user = world.users[0]
    answered = []
    for _ in range(2):
        ids = []
        for model in (world.model, other):
            iid = rand_id()
            outbox.enqueue("autoEval", world.oracle, {
                "interactionId": iid, "modelId": model, "contextId": world.context, "user": user,
                "hasReference": True, "sA": str(5 * 10**17), "wA": str(5 * 10**17), "evidenceCid": f"bafy{iid[2:14]}"})
            ids.append(iid)
        answered.append(ids)
    drain(Submitter(world.ledger))  # apps/chat/arena.advance: both answers on-chain first
    battles = []
    for ids, (voided, outcome) in zip(answered, ((False, 2), (True, 1))):
        battle = rand_id()
        opened = outbox.enqueue("openBattle", world.oracle, {"battleId": battle, "interactionA": ids[0],
                                                             "interactionB": ids[1], "voided": voided})
        outbox.enqueue_signed("vote", user, {"battleId": battle, "outcome": outcome}, depends_on=opened)
        battles.append((battle, outcome, voided))
    drain(Submitter(world.ledger))
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert ChainTransaction.objects.filter(items__function="vote", function=RELAY).exists()
    indexer.index_until_head(world.ledger)
    for battle, outcome, voided in battles:
        row = ArenaBattle.objects.get(battle_id=battle)
        assert (row.user, row.model_a, row.model_b, row.outcome, row.counted, row.voided) == (
            user, world.model, other, outcome, not voided, voided)


def test_two_relayers_and_two_submitters_side_by_side_each_carry_their_own_raters(world, settings):
    """LLMCHAIN_RELAYER_KEY with two keys: a rater's requests (and the updateReputation after each)
    always go through the same relayer, chosen by the rater's address, and two submitters with
    `--shard 0/2` and `1/2` each take one relayer's lane: all land once, in each rater's nonce order."""
    first = Account.from_key(DEV_KEYS[2])
    parity = int(first.address, 16) % 2
    second = next(a for a in iter(Account.create, None) if int(a.address, 16) % 2 != parity)
    settings.LLMCHAIN_RELAYER_KEY = f"{DEV_KEYS[2]}, 0x{bytes(second.key).hex()}"
    # Raters on both relayers: the fixture's three, and one whose address picks the other relayer.
    other = next(k for k in iter(lambda: new_key("rater"), None)
                 if int(k.address, 16) % 2 != int(world.users[0], 16) % 2).address
    outbox.enqueue("register", world.admin, {"account": other, "role": "user"})
    drain(Submitter(world.ledger))
    raters = [*world.users, other]
    assert {relayer_address(r) for r in raters} == {first.address, second.address}
    assert relayer_address() == first.address, "without a signer: the first relayer"
    rater_of = {}
    for i in range(16):
        rater_of[world.evaluation(raters[i % 4], relayed=True)] = raters[i % 4]
    iids = list(rater_of)
    for item in OutboxItem.objects.filter(function__in=["humEval", "updateReputation"]):
        assert item.sender_address == relayer_address(rater_of[item.payload["interactionId"]]), item

    submitters = drain_sharded(world.ledger, [first.address, second.address])
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert all(_hum(world, iid) for iid in iids)
    for relayer in (first.address, second.address):
        assert ChainTransaction.objects.filter(sender__address=relayer, function=RELAY).exists(), relayer
        shard = int(relayer, 16) % 2
        assert submitters[shard].mine(relayer) and not submitters[1 - shard].mine(relayer)
        assert Sender.objects.get(address=relayer).lease_owner == "", "released"
    for rater in raters:
        assert world.ledger.view("forwarder", "nonces", rater)[0] == 4
    indexer.index_until_head(world.ledger)
    report = run_audit(world.ledger)
    assert report.ok, report.summary()
