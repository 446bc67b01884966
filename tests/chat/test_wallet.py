"""Wallet users, on the site's side: linking a wallet by a signed sign-in message,
and ratings their wallet signs, checked before anything is stored. The chain is replaced at its one
adapter here (the forwarder nonce a wallet starts from, `relay.chain_nonce`); the relay itself runs
against a real node in tests/chain/test_relay.py and in the browser in
tests/browser/test_wallet_in_browser.py."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from eth_account import Account
from eth_account.messages import encode_defunct, encode_typed_data

from apps.chain import metatx, relay
from apps.chain.keys import relayer_address
from apps.chain.ledger import Deployment
from apps.chain.models import OutboxItem
from apps.chat import ratings, wallet
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Profile, Rating
from tests.personas import PASSWORD

from .test_ratings import GOOD, answered, auto_eval_queued  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db
DOMAIN, URI = "llmchain.example", "https://llmchain.example/account/"


@pytest.fixture
def deployed(settings, tmp_path, monkeypatch):
    """A deployment with a forwarder (its file only: nothing here talks to a node)."""
    path = tmp_path / "deployment.json"
    Deployment(chainId=31337, identity="0x" + "11" * 20, access="0x" + "22" * 20, reputation="0x" + "33" * 20,
               deployBlock=1, forwarder="0x" + "44" * 20).save(path)
    settings.LLMCHAIN_DEPLOYMENT = path
    settings.LLMCHAIN_RELAY = "auto"
    monkeypatch.setattr(relay, "chain_nonce", lambda signer, block="latest": 0)
    return relay.deployment()


def _link(user, account=None):
    account = account or Account.create()
    session = {}
    message = wallet.challenge(session, user=user, address=account.address, domain=DOMAIN, uri=URI)
    signature = Account.sign_message(encode_defunct(text=message), account.key).signature.hex()
    return account, wallet.link(session, user, message, "0x" + signature.removeprefix("0x"))


def _sign(prepared: dict, key) -> str:
    """What the browser does with what `prepare` gave: the wallet signs the typed data as it is."""
    typed = json.loads(json.dumps(prepared["typedData"]))
    signature = Account.sign_message(encode_typed_data(full_message=typed), key).signature.hex()
    return json.dumps({**prepared["request"], "signature": "0x" + signature.removeprefix("0x")})


def _wallet_answer(alice, interaction, text="And 3+3?"):
    """An answer alice had after linking her wallet: the oracle names the wallet as its user."""
    conv = start_conversation(alice, interaction.conversation.model, interaction.conversation.context)
    turn = begin_interaction(alice, conv, text)
    finish_interaction(turn, "6")
    return turn


def test_a_wallet_is_linked_by_a_sign_in_message_it_signed_and_registered(answered, deployed):
    alice, _ = answered
    account, profile = _link(alice)
    assert profile.wallet_address == account.address and profile.rating_address == account.address
    assert profile.address != account.address, "the custodial address stays for answers from before"
    register = OutboxItem.objects.get(key=f"register:{account.address}")
    assert register.payload == {"account": account.address, "role": 1, "profileCid": ""}


def test_a_sign_in_message_follows_eip_4361(answered):
    alice, _ = answered
    session = {}
    account = Account.create()
    message = wallet.challenge(session, user=alice, address=account.address.lower(), domain=DOMAIN, uri=URI)
    lines = message.split("\n")
    assert lines[0] == f"{DOMAIN} wants you to sign in with your Ethereum account:"
    assert lines[1] == account.address, "the address in its checksummed form"
    assert [line.split(": ")[0] for line in lines[5:]] == ["URI", "Version", "Chain ID", "Nonce", "Issued At",
                                                          "Expiration Time"]


@pytest.mark.parametrize("fault", ["other message", "other signer", "expired", "no challenge", "garbage"])
def test_a_bad_proof_links_nothing(answered, fault):
    alice, _ = answered
    account = Account.create()
    session = {}
    message = wallet.challenge(session, user=alice, address=account.address, domain=DOMAIN, uri=URI)
    signed_text = message.replace("Version: 1", "Version: 2") if fault == "other message" else message
    key = Account.create().key if fault == "other signer" else account.key
    signature = "0x" + Account.sign_message(encode_defunct(text=signed_text), key).signature.hex().removeprefix("0x")
    if fault == "expired":
        session[wallet.SESSION_KEY]["expires"] = 0
    if fault == "no challenge":
        session.clear()
    if fault == "garbage":
        signature = "0x1234"
    with pytest.raises(ValidationError):
        wallet.link(session, alice, signed_text, signature)
    assert Profile.objects.get(user=alice).wallet_address == ""
    assert not OutboxItem.objects.filter(key=f"register:{account.address}").exists()


def test_a_wallet_whose_key_the_site_holds_or_linked_elsewhere_is_refused(answered, deployed):
    alice, _ = answered
    with pytest.raises(ValidationError, match="held by this site"):
        _link(alice, Account.from_key(relay.account_for(alice.profile.address).key))
    from tests.personas import user
    bob = user("bob")
    account, _ = _link(bob)
    with pytest.raises(ValidationError, match="another account"):
        _link(alice, account)


def test_a_wallet_users_rating_is_signed_by_the_wallet_and_relayed_as_signed(answered, deployed):
    alice, old = answered
    account, _ = _link(alice)
    interaction = _wallet_answer(alice, old)
    assert ratings.needs_wallet(interaction) and ratings.signer_of(interaction) == account.address
    prepared = ratings.prepare(alice, interaction, GOOD)
    assert prepared["address"] == account.address
    assert prepared["typedData"]["message"]["from"] == account.address
    assert prepared["typedData"]["domain"]["verifyingContract"].lower() == deployed.forwarder.lower()
    signed = _sign(prepared, account.key)
    rating = ratings.submit_rating(alice, interaction, {**GOOD, "signed_request": signed})
    assert rating.signer == account.address and rating.request["signature"] == json.loads(signed)["signature"]
    auto_eval_queued(interaction)
    ratings.queue_waiting(interaction)
    hum = OutboxItem.objects.get(function="humEval")
    assert (hum.signer, hum.sender_address, hum.relay_nonce) == (account.address, relayer_address(), 0)
    assert hum.request == json.loads(signed), "the very request the wallet signed is relayed"
    update = OutboxItem.objects.get(function="updateReputation")
    assert update.sender_address == relayer_address() and update.depends_on_id == hum.pk


def test_an_answer_from_before_the_link_is_still_rated_with_the_sites_key(answered, deployed):
    alice, interaction = answered
    auto_eval_queued(interaction)  # named the custodial address
    _link(alice)
    assert not ratings.needs_wallet(interaction)
    ratings.submit_rating(alice, interaction, GOOD)
    ratings.queue_waiting_ratings()
    hum = OutboxItem.objects.get(function="humEval")
    assert hum.signer == alice.profile.address and hum.request["signature"] != "0x"
    request = metatx.from_json(hum.request)
    assert metatx.recover_signer(request, deployed.chainId, deployed.forwarder) == alice.profile.address


@pytest.mark.parametrize("fault", ["unsigned", "other key", "other answers", "garbage"])
def test_a_wallet_rating_without_the_wallets_signature_for_these_answers_is_refused(answered, deployed, fault):
    alice, old = answered
    account, _ = _link(alice)
    interaction = _wallet_answer(alice, old)
    prepared = ratings.prepare(alice, interaction, GOOD)
    signed = {"unsigned": "", "other key": _sign(prepared, Account.create().key),
              "other answers": _sign(ratings.prepare(alice, interaction, {**GOOD, "utility": "1"}), account.key),
              "garbage": "{not json"}[fault]
    with pytest.raises(ValidationError) as info:
        ratings.submit_rating(alice, interaction, {**GOOD, "signed_request": signed})
    assert info.value.message_dict["form"]
    assert not Rating.objects.exists() and not OutboxItem.objects.filter(function="humEval").exists()


def test_a_wallet_rating_that_could_not_be_relayed_is_signed_again(answered, deployed):
    alice, old = answered
    account, _ = _link(alice)
    interaction = _wallet_answer(alice, old)
    rating = ratings.submit_rating(alice, interaction, {**GOOD, "signed_request": _sign(
        ratings.prepare(alice, interaction, GOOD), account.key)})
    auto_eval_queued(interaction)
    ratings.queue_waiting(interaction)
    rating.refresh_from_db()
    # What the submitter records when the forwarder skipped the expired request.
    OutboxItem.objects.filter(pk=rating.hum_item_id).update(
        status="failed", relay_nonce=None, failure=OutboxItem.Failure.EXPIRED,
        last_error="the signed request expired before it was relayed")
    OutboxItem.objects.filter(pk=rating.update_item_id).update(status="failed", failure=OutboxItem.Failure.DEPENDENCY,
                                                               last_error="the call it depends on failed")
    rating = ratings.refresh(rating)
    assert rating.status == "failed" and rating.error == ("Your wallet's signature could not be used (the signature "
                                                          "expired before it could be sent): sign the rating again.")
    assert ratings.can_sign_again(rating)
    again = ratings.prepare_again(alice, rating)
    assert again["request"]["nonce"] == 0
    rating = ratings.sign_again(alice, rating, _sign(again, account.key))
    assert rating.status == "queued" and rating.error == ""
    hum = OutboxItem.objects.get(pk=rating.hum_item_id)
    assert (hum.status, hum.relay_nonce, hum.request["signature"]) == ("pending", 0, rating.request["signature"])
    assert OutboxItem.objects.get(pk=rating.update_item_id).status == "pending"


def test_the_pages_say_which_key_signs(answered, deployed):
    alice, old = answered
    auto_eval_queued(old)  # scored before the link: the oracle named the custodial address
    account, _ = _link(alice)
    interaction = _wallet_answer(alice, old)
    client = Client()
    client.login(username="alice", password=PASSWORD)
    form = client.get(f"/chat/interactions/{interaction.pk}/rating").content.decode()
    assert f'data-wallet="{account.address}"' in form and "Sign with my wallet and send" in form
    assert "cannot sign for you" in form
    response = client.post(f"/chat/interactions/{interaction.pk}/rating/prepare", GOOD)
    assert response.status_code == 200 and response.json()["address"] == account.address
    assert client.post(f"/chat/interactions/{interaction.pk}/rating/prepare", {**GOOD, "trust": "9"}).status_code == 400
    page = client.get("/account/").content.decode()
    assert account.address in page and "cannot rate for you" in page
    custodial = client.get(f"/chat/interactions/{old.pk}/rating").content.decode()
    assert "data-wallet" not in custodial
