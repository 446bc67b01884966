"""Ratings signed by their raters and relayed: the Reputation contract trusts
OpenZeppelin's ERC2771Forwarder, so a relayer with no role at all submits `humEval` requests that
their raters signed (EIP-712), many in one `executeBatch`; the contract sees the rater as the sender.
A replay, an expired request, a request signed by someone else or addressed to another contract
changes nothing; in a batch, a request that fails neither blocks the others nor is retried."""

from __future__ import annotations

import pytest

from apps.chain import metatx
from apps.chain.metatx import ForwardRequest
from tests.support import Reverted, new_account

from tests.contracts.test_access_control import ANSWERS, C1, M1, expect_revert, world  # noqa: F401  (fixture)

pytestmark = pytest.mark.chain

HUM_GAS = 200_000
ZERO_ADDRESS = "0x" + "00" * 20


def _interaction(driver, oracle, user, n: int) -> bytes:
    iid = bytes([0x40 + n]) * 32
    driver.transact(oracle, "reputation", "autoEval", iid, M1, C1, user.address, True, 7 * 10**17, 6 * 10**17,
                    "ipfs://evidence")
    return iid


def _rating(driver, rater, iid: bytes, *, nonce: int, deadline: int | None = None, answers=ANSWERS,
            signer=None, to: str | None = None) -> ForwardRequest:
    """`rater`'s humEval of `iid` as a request, signed by `signer` (the rater unless told)."""
    d = driver.deployment
    data = driver.ledger.abis["reputation"].fn("humEval").encode(iid, *answers)
    request = ForwardRequest(sender=rater.address, to=to or d.reputation, gas=HUM_GAS, nonce=nonce,
                             deadline=deadline if deadline is not None else driver.latest_timestamp() + 3600,
                             data=data)
    return metatx.sign_request(request, (signer or rater).key, d.chainId, d.forwarder)


def _relayer(driver):
    """A funded account with no role and no registration: it only pays the gas."""
    relayer = new_account()
    driver.fund(relayer.address)
    return relayer


def _relay(driver, relayer, requests: list[ForwardRequest], *, atomic: bool = False):
    """executeBatch from `relayer`; not atomic: failed requests are skipped (refunds to the relayer)."""
    return driver.transact(relayer, "forwarder", "executeBatch", [metatx.request_tuple(r) for r in requests],
                           ZERO_ADDRESS if atomic else relayer.address, gas=6_000_000)


def _rated(driver, iid: bytes) -> bool:
    return driver.view("reputation", "interaction", iid)[8]


def _executed(driver, receipt) -> list[tuple[str, int, bool]]:
    """(signer, nonce, success) of each ExecutedForwardRequest in the receipt, in order."""
    abi = driver.ledger.abis["forwarder"]
    topic = abi.event_topic("ExecutedForwardRequest")
    out = []
    for log in receipt.raw["logs"]:
        topics = [bytes.fromhex(t[2:]) for t in log["topics"]]
        if topics and topics[0] == topic:
            event = abi.events[topic].decode(topics, bytes.fromhex(log["data"][2:]))
            out.append((event["signer"].lower(), event["nonce"], event["success"]))
    return out


def test_the_forwarder_is_the_one_reputation_trusts(driver):
    d = driver.deployment
    assert d.forwarder and d.forwarder.lower() != d.reputation.lower()
    assert driver.view("reputation", "isTrustedForwarder", d.forwarder) == (True,)
    assert driver.view("reputation", "trustedForwarder")[0].lower() == d.forwarder.lower()
    _, name, version, chain_id, verifying, *_ = driver.view("forwarder", "eip712Domain")
    assert (name, version, chain_id, verifying.lower()) == ("LLMChain", "1", d.chainId, d.forwarder.lower())


def test_a_relayer_with_no_role_submits_ratings_its_raters_signed_in_one_batch(fresh_chain, world, oracle):
    driver = fresh_chain
    raters = [world["user"], world["other_user"]]
    ids = [_interaction(driver, oracle, rater, n) for n, rater in enumerate(raters)]
    relayer = _relayer(driver)  # no role, not registered: it only pays the gas
    requests = [_rating(driver, rater, iid, nonce=0) for rater, iid in zip(raters, ids)]
    receipt = _relay(driver, relayer, requests)
    assert receipt.status == 1
    assert all(_rated(driver, iid) for iid in ids)
    assert _executed(driver, receipt) == [(r.address.lower(), 0, True) for r in raters]
    # The rater is the sender the contract saw: HumanEvaluated names them.
    hum = driver.ledger.abis["reputation"].event_topic("HumanEvaluated")
    logged = [log for log in receipt.raw["logs"] if log["topics"][0] == "0x" + hum.hex()]
    assert len(logged) == 2
    assert driver.view("forwarder", "nonces", raters[0].address) == (1,)


def test_a_replayed_request_changes_nothing(fresh_chain, world, oracle):
    driver = fresh_chain
    rater = world["user"]
    iid = _interaction(driver, oracle, rater, 5)
    relayer = _relayer(driver)
    request = _rating(driver, rater, iid, nonce=0)
    _relay(driver, relayer, [request])
    before = driver.view("reputation", "interaction", iid)
    again = _relay(driver, relayer, [request])  # the nonce is used: skipped, no call made
    assert _executed(driver, again) == []
    assert driver.view("reputation", "interaction", iid) == before
    with pytest.raises(Reverted) as info:
        driver.transact(relayer, "forwarder", "execute", metatx.request_tuple(request))
    assert info.value.name == "ERC2771ForwarderInvalidSigner"


@pytest.mark.parametrize("trick", ["expired", "signed by another", "for another contract", "answers changed"])
def test_a_bad_request_in_a_batch_is_skipped_and_the_others_go_through(fresh_chain, world, oracle, trick):
    driver = fresh_chain
    good_rater, bad_rater = world["user"], world["other_user"]
    good_id, bad_id = _interaction(driver, oracle, good_rater, 6), _interaction(driver, oracle, bad_rater, 7)
    relayer = _relayer(driver)
    if trick == "expired":
        bad = _rating(driver, bad_rater, bad_id, nonce=0, deadline=driver.latest_timestamp() - 1)
    elif trick == "signed by another":
        bad = _rating(driver, bad_rater, bad_id, nonce=0, signer=good_rater)
    elif trick == "for another contract":
        bad = _rating(driver, bad_rater, bad_id, nonce=0, to=driver.deployment.identity)
    else:
        signed = _rating(driver, bad_rater, bad_id, nonce=0)
        forged = driver.ledger.abis["reputation"].fn("humEval").encode(bad_id, 1, 1, 1, 5, 5, 1)
        bad = ForwardRequest(signed.sender, signed.to, signed.gas, signed.nonce, signed.deadline, forged,
                             signed.signature)
    receipt = _relay(driver, relayer, [bad, _rating(driver, good_rater, good_id, nonce=0)])
    assert receipt.status == 1
    assert _rated(driver, good_id) and not _rated(driver, bad_id)
    assert _executed(driver, receipt) == [(good_rater.address.lower(), 0, True)]
    assert driver.view("forwarder", "nonces", bad_rater.address) == (0,)  # the rater's own request still can go


def test_a_signed_request_the_contract_refuses_uses_its_nonce_and_is_reported_failed(fresh_chain, world, oracle):
    """A rating of someone else's interaction is well signed, so the forwarder makes the call; the
    contract refuses it (NotInteractionUser) and the batch goes on: the request is spent, not retried."""
    driver = fresh_chain
    owner, intruder = world["user"], world["other_user"]
    iid = _interaction(driver, oracle, owner, 8)
    relayer = _relayer(driver)
    receipt = _relay(driver, relayer, [_rating(driver, intruder, iid, nonce=0)])
    assert receipt.status == 1 and not _rated(driver, iid)
    assert _executed(driver, receipt) == [(intruder.address.lower(), 0, False)]
    assert driver.view("forwarder", "nonces", intruder.address) == (1,)


def test_an_atomic_batch_with_a_bad_request_reverts_whole(fresh_chain, world, oracle):
    driver = fresh_chain
    rater = world["user"]
    iid = _interaction(driver, oracle, rater, 9)
    relayer = _relayer(driver)
    expired = _rating(driver, rater, iid, nonce=0, deadline=driver.latest_timestamp() - 1)
    expect_revert(lambda: _relay(driver, relayer, [expired], atomic=True), "ERC2771ForwarderExpiredRequest")
    assert not _rated(driver, iid)


def test_direct_calls_keep_working(fresh_chain, world, oracle):
    driver = fresh_chain
    rater = world["user"]
    iid = _interaction(driver, oracle, rater, 10)
    driver.transact(rater, "reputation", "humEval", iid, *ANSWERS)
    assert _rated(driver, iid)


def test_update_reputation_is_relayed_for_anyone(fresh_chain, world, oracle):
    """updateReputation is open to anyone: a relayer sends it in a batch on a rater's signature too."""
    driver = fresh_chain
    rater = world["user"]
    iid = _interaction(driver, oracle, rater, 11)
    relayer = _relayer(driver)
    d = driver.deployment
    update = metatx.sign_request(ForwardRequest(
        sender=rater.address, to=d.reputation, gas=300_000, nonce=1, deadline=driver.latest_timestamp() + 3600,
        data=driver.ledger.abis["reputation"].fn("updateReputation").encode(iid)), rater.key, d.chainId, d.forwarder)
    receipt = _relay(driver, relayer, [_rating(driver, rater, iid, nonce=0), update])
    assert _executed(driver, receipt) == [(rater.address.lower(), 0, True), (rater.address.lower(), 1, True)]
    assert driver.view("reputation", "interaction", iid)[9] is True  # reputationDone


def test_a_wallet_s_signature_is_checked_before_it_is_stored(world, driver):
    """The server can check who signed a request a browser sent (recover_signer) before keeping it."""
    rater, other = world["user"], world["other_user"]
    request = _rating(driver, rater, b"\x01" * 32, nonce=0)
    d = driver.deployment
    assert metatx.recover_signer(request, d.chainId, d.forwarder).lower() == rater.address.lower()
    assert metatx.from_json(metatx.to_json(request)) == request
    forged = _rating(driver, rater, b"\x01" * 32, nonce=0, signer=other)
    assert metatx.recover_signer(forged, d.chainId, d.forwarder).lower() == other.address.lower()
    typed = metatx.typed_data(request, d.chainId, d.forwarder)
    assert typed["primaryType"] == "ForwardRequest" and typed["domain"]["name"] == "LLMChain"


@pytest.mark.django_db
def test_the_audit_replays_relayed_ratings_by_their_signers(fresh_chain, world, oracle):
    """chain audit reads a relayed humEval from the forwarder's batch (its signer, its answers) and
    the mirror reaches the contract's state to the wei."""
    from apps.chain.audit import run_audit

    driver = fresh_chain
    raters = [world["user"], world["other_user"]]
    ids = [_interaction(driver, oracle, rater, 20 + n) for n, rater in enumerate(raters)]
    relayer = _relayer(driver)
    _relay(driver, relayer, [_rating(driver, rater, iid, nonce=driver.view("forwarder", "nonces", rater.address)[0],
                                     answers=(5, 4, 3, 2, 5, 1 + n))
                             for n, (rater, iid) in enumerate(zip(raters, ids))])
    driver.transact(relayer, "reputation", "updateReputationBatch", ids)
    report = run_audit(driver.ledger)
    assert report.contract_mismatches == [] and report.interactions >= 2, report.contract_mismatches
