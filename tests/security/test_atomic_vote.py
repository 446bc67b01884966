"""A battle is never open on-chain without its vote: the site's arena vote goes on-chain in the same
transaction as `openBattle` (both relayed requests, the oracle's and the user's, in one atomic
executeBatch), so a watcher of the chain who learns the models from BattleOpened finds the vote
already cast, and a direct `vote` after it changes nothing.

- On a real chain, a custodial and a wallet-signed vote: BattleOpened and Voted are in one
  transaction (no block holds one without the other), and a direct vote from the user's key reverts.
- A wallet vote whose forwarder nonce was used elsewhere before the relay: the atomic batch reverts,
  nothing of the battle is on-chain, and the battle ends as a lost vote counted like an abandon (no
  vote again); a custodial vote, or the oracle's openBattle, in the same spot is signed anew by the
  site and the pair lands once.
- On a chain whose blocks are final only some blocks deep: while the block holding the pair is mined
  but not final, before and after the indexer runs, the battle's user finds no model name, model id
  or autoEval transaction of a side on the battle page, the API's conversations or the account
  export, and the battle is not revealed; one block short of final it still is not; once the block
  is final and indexed, the names are there.
- The door takes openBattle only from the site's own oracle key; its gas bound is measured here.
- The submitter keeps the pair whole: one chunk of its own, atomic (no refund receiver), and the vote
  is sent with openBattle rather than after it is final.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from eth_abi import decode
from eth_account import Account
from eth_utils import to_checksum_address

from apps.chain import indexer, metatx, outbox, relay
from apps.chain.keys import account_for, oracle_address, relayer_address
from apps.chain.ledger import RELAYABLE, Ledger
from apps.chain.client import from_hex
from apps.chain.models import ArenaBattle, ChainTransaction, OutboxItem, Sender
from apps.chain.submitter import ZERO_ADDRESS, Submitter
from apps.chat import arena
from apps.chat.models import Battle
from apps.oracle.models import EvaluationJob
from lib.ids import b32
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, world  # noqa: F401  (fixtures)
from tests.chat.factories import make_contexts
from tests.chat.test_arena import _answered
from tests.chat.test_ratings import auto_eval_queued
from tests.chat.test_wallet import _link, _sign
from tests.contracts.test_access_control import C1, M1
from tests.personas import developer, user
from tests.security.test_blind_arena import _body, _model
from tests.security.test_relay_door import _least_gas
from tests.support import new_account

pytestmark = pytest.mark.usefixtures("quick_passwords")


@dataclass
class Chain:
    """What the tests through the site take of `world`: its ledger and the site's admin and oracle. Not
    world's accounts, context and model: a battle registers its own (`_site`), and world's drain of them
    took two blocks before every test."""

    ledger: Ledger
    admin: str
    oracle: str


@pytest.fixture
def chain(ledger, admin, oracle) -> Chain:
    return Chain(ledger, admin.address, oracle.address)


def decode_batch(data: bytes) -> tuple[list[str], str]:
    """(the signer of each request, the refund receiver) of an executeBatch's call data."""
    requests, refund = decode(["(address,address,uint256,uint256,uint48,bytes,bytes)[]", "address"], data[4:])
    return [to_checksum_address(r[0]) for r in requests], to_checksum_address(refund)


# -- the gas bound and the door ------------------------------------------------------------------------
@pytest.mark.chain
def test_open_battle_relayed_gets_the_gas_it_needs_with_a_margin_and_no_more(fresh_chain, admin, oracle):
    d = fresh_chain
    user_, developer_ = new_account(), new_account()
    d.transact(admin, "identity", "register", user_.address, 1, "ipfs://u")
    d.transact(admin, "identity", "register", developer_.address, 2, "ipfs://d")
    d.transact(admin, "reputation", "addContext", C1, "code")
    d.transact(developer_, "reputation", "addModelBatch", [M1, b"\xa2" * 32], ["ipfs://m1", "ipfs://m2"])
    iids = [bytes([0x60 + n]) * 32 for n in range(2)]
    for iid, model in zip(iids, (M1, b"\xa2" * 32)):
        d.transact(oracle, "reputation", "autoEval", iid, model, C1, user_.address, True, 7 * 10**17, 6 * 10**17,
                   "ipfs://evidence")
    call = d.ledger.abis["reputation"].fn("openBattle").encode(b"\xb8" * 32, *iids, True)
    need = _least_gas(d, oracle, call)
    print("openBattle's least gas through the forwarder:", need, "bound:", RELAYABLE["openBattle"])
    assert 1.5 * need <= RELAYABLE["openBattle"] <= 3 * need


@pytest.mark.django_db
def test_the_door_takes_open_battle_only_from_the_sites_oracle(chain):
    wallet = Account.create()
    clean = outbox.check_call("openBattle", {"battleId": rand_id(), "interactionA": rand_id(),
                                             "interactionB": rand_id(), "voided": False})
    dep = relay.deployment()
    request = metatx.sign_request(relay.unsigned(wallet.address, "openBattle", clean, 0), wallet.key, dep.chainId,
                                  dep.forwarder)
    with pytest.raises(outbox.InvalidCall, match="only when this site's oracle signs it"):
        outbox.enqueue("openBattle", wallet.address, clean, request=request)
    assert not OutboxItem.objects.filter(function="openBattle").exists()
    item = outbox.enqueue_signed("openBattle", chain.oracle, clean)  # the site's own oracle: taken
    assert item.signer == chain.oracle and item.request["gas"] == RELAYABLE["openBattle"]


# -- through the site, on a real chain ----------------------------------------------------------------
def _site(chain, settings, tmp_path, hostile, *, wallet: bool):
    """alice's battle in a context and between two models that exist on-chain, both answers in."""
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    settings.LLMCHAIN_RELAY = "auto"
    context, = make_contexts(f"writing-{rand_id()[2:8]}")
    outbox.enqueue("addContext", chain.admin, {"contextId": context.context_id, "name": context.name})
    dave = developer(f"dave{rand_id()[2:8]}")
    for name in ("lighthouse-3b", "harbour-7b"):
        _model(dave, f"{name}-{rand_id()[2:6]}", hostile.url())
    alice = user(f"alice{rand_id()[2:8]}")
    account = _link(alice)[0] if wallet else None
    drain(Submitter(chain.ledger, owner="setup"))
    battle = arena.start_battle(alice, context, random.Random(3))
    _answered(battle)
    return alice, account, Battle.objects.get(pk=battle.pk)


def _vote(alice, account, battle: Battle, outcome: str) -> Battle:
    if account is None:
        return arena.vote(alice, battle, outcome)
    prepared = arena.prepare_vote(alice, battle, outcome)
    return arena.vote(alice, Battle.objects.get(pk=battle.pk), outcome, _sign(prepared, account.key))


def _answers_on_chain(chain, battle: Battle) -> None:
    """What the oracle does once the vote is signed (its autoEval calls were held until then)."""
    for interaction in arena.first_answers(battle):
        auto_eval_queued(interaction)
    drain(Submitter(chain.ledger, owner="answers"))


def _events(chain, name: str, battle_id: str) -> list[dict]:
    """Every log of `name` about the battle (its id is the first indexed topic), from block 0."""
    abi = chain.ledger.abis["reputation"]
    client = chain.ledger.client
    return client.logs([chain.ledger.deployment.reputation], 0, client.block_number(),
                       ["0x" + abi.event_topic(name).hex(), battle_id])


def _direct(chain, account, to: str, data: bytes) -> dict:
    """A transaction sent straight from `account` (not through the site); its receipt."""
    client = chain.ledger.client
    signed = client.sign(account, to, data, client.nonce(account.address), 200_000)
    assert client.send_raw([signed.raw]) == [None]
    for _ in range(100):
        receipt = client.receipts([signed.hash])[0]
        if receipt:
            return receipt
        time.sleep(0.1)
    raise AssertionError("the direct transaction was not mined")


def _use_nonce_elsewhere(chain, signer_key, signer: str) -> None:
    """The signer spends its next forwarder nonce on another request (relayed by someone else, not
    through this site): a vote on a battle that does not exist, whose call reverts, its nonce used."""
    dep = relay.deployment()
    nonce = relay.chain_nonce(signer)
    clean = outbox.check_call("vote", {"battleId": rand_id(), "outcome": 1})
    request = metatx.sign_request(relay.unsigned(signer, "vote", clean, nonce), signer_key, dep.chainId, dep.forwarder)
    stranger = Account.create()
    to, data, _ = chain.ledger.relay_calldata([request], stranger.address)
    assert int(_direct(chain, stranger, to, data)["status"], 16) == 1
    assert relay.chain_nonce(signer) == nonce + 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["custodial", "wallet"])
def test_a_site_vote_lands_in_the_transaction_that_opens_its_battle_and_a_direct_vote_after_changes_nothing(
        chain, settings, tmp_path, hostile, kind):
    alice, account, battle = _site(chain, settings, tmp_path, hostile, wallet=kind == "wallet")
    battle = _vote(alice, account, battle, "b")
    _answers_on_chain(chain, battle)
    assert arena.advance_waiting() == 1
    battle.refresh_from_db()
    opened, voted = battle.open_item, battle.vote_item
    drain(Submitter(chain.ledger, owner="arena"))
    opened.refresh_from_db()
    voted.refresh_from_db()
    assert (opened.status, voted.status) == ("confirmed", "confirmed")
    assert opened.transaction_id == voted.transaction_id, "one transaction for both"
    tx = opened.transaction
    signers, refund = decode_batch(from_hex(chain.ledger.client.request("eth_getTransactionByHash", [tx.tx_hash])["input"]))
    assert refund == ZERO_ADDRESS and signers == [opened.signer, voted.signer], "atomic, in order"
    # What a watcher of the chain sees: BattleOpened only ever with its Voted, in the same transaction.
    opens, votes = _events(chain, "BattleOpened", battle.battle_id), _events(chain, "Voted", battle.battle_id)
    assert len(opens) == 1 and len(votes) == 1
    assert opens[0]["transactionHash"] == votes[0]["transactionHash"] == tx.tx_hash
    assert opens[0]["blockNumber"] == votes[0]["blockNumber"]
    assert int(opens[0]["logIndex"], 16) < int(votes[0]["logIndex"], 16)
    assert chain.ledger.view("reputation", "battle", b32(battle.battle_id))[7] == 2
    # The user, now able to learn the names, votes directly with their own key: reverted, nothing changes.
    key = account if account is not None else account_for(battle.signer)
    data = chain.ledger.abis["reputation"].fn("vote").encode(b32(battle.battle_id), 1)
    receipt = _direct(chain, key, chain.ledger.deployment.reputation, data)
    assert int(receipt["status"], 16) == 0
    assert chain.ledger.view("reputation", "battle", b32(battle.battle_id))[7] == 2, "the counted outcome stays B"
    assert len(_events(chain, "Voted", battle.battle_id)) == 1


@pytest.mark.django_db(transaction=True)
def test_a_wallet_vote_whose_nonce_was_used_elsewhere_leaves_nothing_on_chain_and_is_lost(chain, settings, tmp_path,
                                                                                          hostile):
    alice, account, battle = _site(chain, settings, tmp_path, hostile, wallet=True)
    battle = _vote(alice, account, battle, "a")
    _answers_on_chain(chain, battle)
    _use_nonce_elsewhere(chain, account.key, account.address)  # after signing the vote, before the relay
    assert arena.advance_waiting() == 1
    submitter = Submitter(chain.ledger, owner="arena")
    drain(submitter)
    assert submitter.stats["group_reverted"] == 1
    battle.refresh_from_db()
    assert battle.vote_item.status == "failed" and battle.vote_item.failure == OutboxItem.Failure.NONCE_USED
    assert battle.open_item.status == "failed" and battle.open_item.failure == OutboxItem.Failure.DEPENDENCY
    assert not _events(chain, "BattleOpened", battle.battle_id), "nothing of the battle is on-chain"
    assert chain.ledger.view("reputation", "battle", b32(battle.battle_id))[5] == ZERO_ADDRESS
    assert arena.settle_battles() == 1
    battle.refresh_from_db()
    assert battle.status == "lost" and "could not be sent" in battle.error and "counts like an abandoned" in battle.error
    assert arena.abandoned_recently(alice) == 1, "counted like an abandon"
    with pytest.raises(ValidationError, match="lost"):
        arena.prepare_vote(alice, battle, "b")
    assert not battle.revealed and not arena.summary(battle)["revealed"]
    client = Client()
    client.force_login(alice)
    page = client.get(f"/arena/{battle.pk}/").content.decode()
    assert "Vote lost" in page and "counts like an abandoned battle" in page and "form class=\"vote\"" not in page
    assert not any(c.model.name in page for c in (battle.conversation_a, battle.conversation_b)), "still blind"
    assert arena.unvoted(alice) is None, "a new battle can be started"
    # The oracle's forwarder nonce that the lost openBattle held is free again: the next battle lands.
    ok, _, fresh = _site(chain, settings, tmp_path, hostile, wallet=False)
    fresh = arena.vote(ok, fresh, "tie")
    _answers_on_chain(chain, fresh)
    assert arena.advance_waiting() == 1
    drain(Submitter(chain.ledger, owner="arena"))
    fresh.refresh_from_db()
    assert fresh.open_item.status == fresh.vote_item.status == "confirmed"
    assert len(_events(chain, "Voted", fresh.battle_id)) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stale", ["the custodial user's vote", "the oracle's openBattle"])
def test_a_request_the_site_signs_whose_nonce_was_used_elsewhere_is_signed_anew_and_the_pair_lands_once(
        chain, settings, tmp_path, hostile, stale):
    alice, _, battle = _site(chain, settings, tmp_path, hostile, wallet=False)
    battle = arena.vote(alice, battle, "bad")
    _answers_on_chain(chain, battle)
    assert arena.advance_waiting() == 1
    battle.refresh_from_db()
    row = battle.vote_item if stale.endswith("vote") else battle.open_item
    held = row.relay_nonce
    _use_nonce_elsewhere(chain, account_for(row.signer).key, row.signer)
    submitter = Submitter(chain.ledger, owner="arena")
    drain(submitter)
    assert submitter.stats["group_reverted"] == 1 and submitter.stats["resigned"] >= 1
    battle.refresh_from_db()
    row.refresh_from_db()
    assert battle.vote_item.status == battle.open_item.status == "confirmed"
    assert row.relay_nonce == held + 1, "signed anew with the signer's next nonce"
    assert battle.vote_item.transaction_id == battle.open_item.transaction_id
    votes, opens = _events(chain, "Voted", battle.battle_id), _events(chain, "BattleOpened", battle.battle_id)
    assert len(votes) == len(opens) == 1 and votes[0]["transactionHash"] == opens[0]["transactionHash"]
    assert chain.ledger.view("reputation", "battle", b32(battle.battle_id))[7] == 4
    assert ChainTransaction.objects.filter(status="reverted").count() == 1, "the one batch that found the nonce used"
    indexer.index_until_head(chain.ledger)
    assert arena.settle_battles() == 1 and Battle.objects.get(pk=battle.pk).status == "onchain"
    assert arena.abandoned_recently(alice) == 0


def _what_the_user_gets(alice, battle: Battle) -> dict[str, tuple[int, str]]:
    """(status, body) of what the battle's user asks about it: its page, its vote box as the page's
    poll asks for it, each side through the API, and the account export."""
    client = Client()
    client.force_login(alice)
    urls = {"page": f"/arena/{battle.pk}/", "poll": f"/arena/{battle.pk}/vote?hidden=1",
            "export": "/account/export.json"}
    for side, c in zip("ab", (battle.conversation_a, battle.conversation_b)):
        urls[f"api {side}"] = f"/api/conversations/{c.pk}"
    out = {}
    for what, url in urls.items():
        response = client.get(url)
        out[what] = (response.status_code, _body(response))
        if what == "poll":
            out["poll refreshes"] = (response.status_code, response.get("HX-Refresh") or "")
    return out


def _assert_blind(alice, battle: Battle, when: str) -> None:
    """Nothing the battle's user gets names or identifies a side's model, and the battle is not revealed."""
    sides = (battle.conversation_a, battle.conversation_b)
    secrets_ = [s for c in sides for s in (c.model.name, c.model.model_id)]
    secrets_ += [i.outbox_item.transaction.tx_hash for i in EvaluationJob.objects.filter(
        interaction__conversation__in=sides).select_related("outbox_item__transaction")]
    assert len(secrets_) == 6, "both sides' autoEval transactions are looked for too"
    seen = _what_the_user_gets(alice, battle)
    assert {status for status, _ in seen.values()} == {200}, (when, seen)
    leaks = [(what, s) for what, (_, body) in seen.items() for s in secrets_ if s.lower() in body.lower()]
    assert not leaks, (when, leaks)
    assert "on its way to the chain" in seen["page"][1], when
    assert seen["poll refreshes"][1] == "", f"{when}: the page is not told to reload with the names"
    for side, c in zip("ab", sides):
        api = json.loads(seen[f"api {side}"][1])
        assert (api["model"], api["model_name"]) == (None, f"Model {side.upper()}"), when
    export = json.loads(seen["export"][1])
    assert sorted((c["model"], c["model_id"]) for c in export["conversations"]) == [("Model A", None),
                                                                                   ("Model B", None)], when
    vote, = export["votes"]
    assert all(set(s) == {"conversation"} for s in vote["sides"].values()), when
    fresh = Battle.objects.get(pk=battle.pk)
    assert not fresh.revealed and not arena.summary(arena.refresh(fresh))["revealed"], when
    assert not ArenaBattle.objects.filter(battle_id=battle.battle_id, outcome__isnull=False).exists(), when


@pytest.mark.django_db(transaction=True)
def test_no_name_is_shown_before_the_block_holding_the_vote_is_final_and_all_are_once_it_is(chain, settings, tmp_path,
                                                                                              hostile):
    """A chain whose blocks are final `depth` blocks deep; the test mines the blocks itself from the
    moment the pair is sent, so that "mined, not final" lasts as long as the checks take."""
    depth = 3
    alice, _, battle = _site(chain, settings, tmp_path, hostile, wallet=False)
    settings.LLMCHAIN_FINALITY = str(depth)  # the answers' autoEval calls are confirmed once final too
    battle = arena.vote(alice, battle, "a")
    _answers_on_chain(chain, battle)
    indexer.index_until_head(chain.ledger)
    assert arena.advance_waiting() == 1
    battle.refresh_from_db()
    opened = battle.open_item
    client = chain.ledger.client

    def pair_tx() -> ChainTransaction | None:
        return OutboxItem.objects.select_related("transaction").get(pk=opened.pk).transaction

    client.request("evm_setIntervalMining", [0])
    try:
        drain(Submitter(chain.ledger, owner="arena"), what="sending the pair",
              until=lambda: pair_tx() is not None and pair_tx().status == ChainTransaction.Status.SENT)
        assert client.request("evm_mine") == "0x0"
        drain(Submitter(chain.ledger, owner="arena"), what="seeing the pair mined",
              until=lambda: pair_tx().status == ChainTransaction.Status.MINED)
        mined = pair_tx()
        assert mined.block_number == client.block_number() and mined.succeeded
        assert len(_events(chain, "Voted", battle.battle_id)) == 1, "the vote is on-chain, in the head block"
        _assert_blind(alice, battle, "mined, not final, not indexed")
        indexer.index_until_head(chain.ledger)
        _assert_blind(alice, battle, "mined, not final, indexed")
        assert ArenaBattle.objects.filter(battle_id=battle.battle_id).count() == 0, "the indexer folds final blocks only"
        client.request("anvil_mine", [hex(depth - 1)])
        indexer.index_until_head(chain.ledger)
        Submitter(chain.ledger, owner="arena").run_once()
        assert arena.settle_battles() == 0
        assert pair_tx().status == ChainTransaction.Status.MINED
        _assert_blind(alice, battle, f"{depth - 1} blocks on, one short of final, indexed")
        client.request("evm_mine")  # the pair's block is final now
        indexer.index_until_head(chain.ledger)
    finally:
        client.request("evm_setIntervalMining", [1])
    drain(Submitter(chain.ledger, owner="arena"))
    assert pair_tx().status == ChainTransaction.Status.CONFIRMED
    assert arena.settle_battles() == 1
    battle = Battle.objects.get(pk=battle.pk)
    assert battle.status == Battle.Status.ONCHAIN and battle.revealed
    seen = _what_the_user_gets(alice, battle)
    sides = (battle.conversation_a, battle.conversation_b)
    assert all(c.model.name in seen["page"][1] for c in sides), "the names appear on the battle page"
    assert seen["poll refreshes"][1] == "true", "a page that showed them hidden reloads to show them"
    for side, c in zip("ab", sides):
        api = json.loads(seen[f"api {side}"][1])
        assert (api["model"], api["model_name"]) == (c.model_id, c.model.name)
    export = json.loads(seen["export"][1])
    assert sorted((c["model"], c["model_id"]) for c in export["conversations"]) == sorted(
        (c.model.name, c.model.model_id) for c in sides)
    vote, = export["votes"]
    assert [vote["sides"][s]["model_id"] for s in "ab"] == [c.model.model_id for c in sides]


# -- the submitter keeps the pair whole -------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_pair_is_one_atomic_chunk_and_the_vote_does_not_wait_for_open_battle(world):
    """Queued as the arena queues them, with ratings of the same users around: a pass takes the pair while
    openBattle is still pending (no waiting for it to be final), puts it in a chunk of its own even with a
    batch size of 1 or a cap that would cut it, and signs it with no refund receiver (atomic)."""
    from tests.chain.test_relay import _scored

    other = rand_id()
    outbox.enqueue("addModel", world.developer, {"modelId": other, "metadataCid": "bafyother"})
    drain(Submitter(world.ledger, owner="setup"))
    sides = [_auto(world, world.users[0], model) for model in (world.model, other)]
    rated = _scored(world, world.users[1])[0]
    drain(Submitter(world.ledger, owner="setup"))
    battle = rand_id()
    oracle = oracle_address(battle)
    lane = relayer_address(oracle)
    together = {"relayer": lane, "atomic_group": f"battle:{battle}"}
    answers = dict.fromkeys(("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty"), 4)
    rating = outbox.enqueue_signed("humEval", world.users[1], {"interactionId": rated, **answers}, relayer=lane)
    opened = outbox.enqueue_signed("openBattle", oracle, {"battleId": battle, "interactionA": sides[0],
                                                          "interactionB": sides[1], "voided": False}, **together)
    voted = outbox.enqueue_signed("vote", world.users[0], {"battleId": battle, "outcome": 1}, **together)
    sender, _ = Sender.objects.get_or_create(address=lane)
    submitter = Submitter(world.ledger, owner="look", batch_size=1)
    items = submitter._ready_items(sender)
    assert {opened.pk, voted.pk, rating.pk} == {i.pk for i in items}, "the vote does not wait for openBattle"
    chunks = [[i.pk for i in c] for c in submitter.calls.chunks(items)]
    assert [opened.pk, voted.pk] in chunks and [rating.pk] in chunks, "one chunk of its own even at batch size 1"
    assert [[i.pk for i in c] for c in Submitter(world.ledger, owner="look", batch_size=64).calls.chunks(items)] in (
        [[opened.pk, voted.pk], [rating.pk]], [[rating.pk], [opened.pk, voted.pk]]), "never merged with others"
    pair = [i for i in items if i.atomic_group]
    assert [i.pk for i in Submitter(world.ledger, owner="cap", max_items=1).relaying.capped(pair + [rating])] == [], \
        "a cap never cuts the pair in two"
    assert [i.pk for i in Submitter(world.ledger, owner="cap", max_items=2).relaying.capped(pair + [rating])] == [
        opened.pk, voted.pk]
    to, data, _, _ = submitter.calls.call_of(pair)
    assert decode_batch(data) == ([oracle, world.users[0]], ZERO_ADDRESS) and to == world.ledger.deployment.forwarder
    assert decode_batch(submitter.calls.call_of([rating])[1])[1] == lane, "other requests: not atomic"
    drain(Submitter(world.ledger, owner="send"))
    for item in (opened, voted, rating):
        item.refresh_from_db()
    assert opened.transaction_id == voted.transaction_id != rating.transaction_id
    assert {opened.status, voted.status, rating.status} == {"confirmed"}


def _auto(world, user_: str, model: str) -> str:
    iid = rand_id()
    outbox.enqueue("autoEval", world.oracle, {
        "interactionId": iid, "modelId": model, "contextId": world.context, "user": user_, "hasReference": True,
        "sA": str(5 * 10**17), "wA": str(5 * 10**17), "evidenceCid": f"bafy{iid[2:14]}"})
    return iid
