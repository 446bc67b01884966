"""Reputation.updateModelMetadata: a model's owner publishes new metadata (an IPFS CID) for it;
the model keeps its id, owner and scores. Only the owner may (no role needed, like humEval),
an unknown model reverts UnknownModel, an empty CID reverts EmptyCid (as it now does in
addModel), and the ModelMetadataUpdated event is the only record of the new CID."""

from __future__ import annotations

import pytest
from eth_utils import keccak

from apps.chain.client import from_hex
from apps.chain.ledger import CALLS
from tests.support import Reverted, new_account

pytestmark = pytest.mark.chain

G = b"\x00" * 32
C1 = b"\xc1" * 32
M1, M2, M_UNKNOWN = b"\xa1" * 32, b"\xa2" * 32, b"\xaf" * 32
I1 = b"\x11" * 32
CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"  # a 59-character CIDv1
LONG_CID = "bafy" + "k" * 196  # 200 characters: the outbox's cap
DEVELOPER_ROLE = keccak(text="DEVELOPER_ROLE")

# Every non-owner: another developer, a user, the admin, the oracle, an unregistered stranger.
NON_OWNERS = ("other_dev", "user", "admin", "oracle", "stranger")


@pytest.fixture(scope="module")
def world(driver, admin, oracle):
    snap = driver.snapshot()
    w = {"admin": admin, "oracle": oracle, "dev": new_account(), "other_dev": new_account(), "user": new_account(),
         "stranger": new_account()}
    for name, code in (("dev", 2), ("other_dev", 2), ("user", 1)):
        driver.transact(admin, "identity", "register", w[name].address, code, "")
    driver.fund(w["stranger"].address)
    driver.transact(admin, "reputation", "addContext", C1, "ctx")
    driver.transact(w["dev"], "reputation", "addModel", M1, "ipfs://m1")
    driver.transact(w["other_dev"], "reputation", "addModel", M2, "ipfs://m2")
    driver.transact(oracle, "reputation", "autoEval", I1, M1, C1, w["user"].address, True, 7 * 10**17, 6 * 10**17,
                    "ipfs://e")
    yield w
    driver.revert_to(snap)


def state(driver) -> dict:
    view = driver.view
    return {
        "reputation": {(m, c): view("reputation", "reputation", m, c) for m in (M1, M2) for c in (G, C1)},
        "contexts": {c: view("reputation", "contextStats", c) for c in (G, C1)},
        "interaction": view("reputation", "interaction", I1),
        "models": {m: (view("reputation", "modelOwner", m), view("reputation", "modelExists", m))
                   for m in (M1, M2, M_UNKNOWN)},
        "counts": (view("reputation", "modelCount"), view("reputation", "contextCount")),
    }


def decoded_logs(driver, receipt) -> list[tuple[str, dict]]:
    abi = driver.ledger.abis["reputation"]
    return [abi.decode_log([from_hex(t) for t in log["topics"]], from_hex(log["data"])) for log in receipt.raw["logs"]]


def send_anyway(driver, account, function, *args) -> tuple[str, tuple]:
    """Simulate (for the error), then send and mine the call regardless: it must revert and log nothing."""
    ledger, client = driver.ledger, driver.client
    data = ledger.abis["reputation"].fn(function).encode(*args)
    decoded = ledger.simulate(account.address, ledger.address("reputation"), data, "reputation")
    assert decoded is not None, f"{function}{args} would not revert"
    signed = client.sign(account, ledger.address("reputation"), data, client.nonce(account.address, "pending"),
                         1_000_000)
    assert client.send_raw([signed.raw]) == [None]
    receipt = client.wait_receipt(signed.hash)
    assert int(receipt["status"], 16) == 0
    assert receipt["logs"] == []
    return decoded


# ----------------------------------------------------------------------------------------------
# The owner
# ----------------------------------------------------------------------------------------------
def test_the_owner_updates_the_metadata_and_the_event_records_the_new_cid(fresh_chain, world):
    before = state(fresh_chain)
    receipt = fresh_chain.transact(world["dev"], "reputation", "updateModelMetadata", M1, CID)
    assert receipt.status == 1
    assert decoded_logs(fresh_chain, receipt) == [("ModelMetadataUpdated", {"modelId": M1, "metadataCid": CID})]
    log = receipt.raw["logs"][0]
    assert log["address"].lower() == fresh_chain.deployment.reputation.lower()
    assert from_hex(log["topics"][1]) == M1  # modelId is indexed: logs can be filtered by model
    assert state(fresh_chain) == before  # same id, owner, count and scores


def test_the_owner_may_update_again_and_even_republish_the_same_cid(fresh_chain, world):
    for cid in (CID, "bafysecond", CID, CID):
        receipt = fresh_chain.transact(world["dev"], "reputation", "updateModelMetadata", M1, cid)
        assert decoded_logs(fresh_chain, receipt) == [("ModelMetadataUpdated", {"modelId": M1, "metadataCid": cid})]


def test_the_model_keeps_being_evaluated_after_an_update(fresh_chain, world):
    fresh_chain.transact(world["dev"], "reputation", "updateModelMetadata", M1, CID)
    fresh_chain.transact(world["user"], "reputation", "humEval", I1, 4, 5, 3, 4, 4, 2)
    fresh_chain.transact(world["stranger"], "reputation", "updateReputation", I1)
    assert fresh_chain.view("reputation", "reputation", M1, C1)[3:] == (1, 1)


def test_the_owner_needs_no_role_only_ownership(fresh_chain, world):
    """Like humEval: ownership is per model. A developer whose role was revoked still edits the
    metadata of the models they own (and cannot add new ones)."""
    dev = world["dev"]
    fresh_chain.transact(world["admin"], "access", "revokeRole", DEVELOPER_ROLE, dev.address)
    with pytest.raises(Reverted) as info:
        fresh_chain.transact(dev, "reputation", "addModel", b"\xa7" * 32, "x")
    assert info.value.name == "Unauthorized"
    receipt = fresh_chain.transact(dev, "reputation", "updateModelMetadata", M1, CID)
    assert decoded_logs(fresh_chain, receipt)[0][0] == "ModelMetadataUpdated"


# ----------------------------------------------------------------------------------------------
# Everyone else, unknown models, empty CIDs: reverted, nothing logged, nothing changed
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", NON_OWNERS)
def test_anyone_but_the_owner_gets_not_model_owner_and_changes_nothing(driver, world, caller):
    before = state(driver)
    name, args = send_anyway(driver, world[caller], "updateModelMetadata", M1, CID)
    assert name == "NotModelOwner"
    assert args[0] == M1 and args[1].lower() == world[caller].address.lower()
    assert state(driver) == before
    with pytest.raises(Reverted) as info:
        driver.transact(world[caller], "reputation", "updateModelMetadata", M1, CID)
    assert info.value.name == "NotModelOwner"


def test_a_developer_cannot_update_another_developers_model(driver, world):
    """Both own a model; each may only touch their own."""
    assert send_anyway(driver, world["dev"], "updateModelMetadata", M2, CID)[0] == "NotModelOwner"
    assert send_anyway(driver, world["other_dev"], "updateModelMetadata", M1, CID)[0] == "NotModelOwner"


@pytest.mark.parametrize("caller", ["dev", "stranger"])
def test_an_unknown_model_reverts_unknown_model(driver, world, caller):
    before = state(driver)
    name, args = send_anyway(driver, world[caller], "updateModelMetadata", M_UNKNOWN, CID)
    assert (name, tuple(args)) == ("UnknownModel", (M_UNKNOWN,))
    assert send_anyway(driver, world[caller], "updateModelMetadata", G, CID)[0] == "UnknownModel"
    assert state(driver) == before


def test_an_empty_cid_reverts_empty_cid_even_for_the_owner(driver, world):
    before = state(driver)
    assert send_anyway(driver, world["dev"], "updateModelMetadata", M1, "") == ("EmptyCid", ())
    assert state(driver) == before


def test_check_order_is_unknown_model_then_owner_then_cid(driver, world):
    assert send_anyway(driver, world["stranger"], "updateModelMetadata", M_UNKNOWN, "")[0] == "UnknownModel"
    assert send_anyway(driver, world["other_dev"], "updateModelMetadata", M1, "")[0] == "NotModelOwner"


def test_add_model_refuses_an_empty_cid_too(driver, world):
    before = state(driver)
    assert send_anyway(driver, world["dev"], "addModel", b"\xa7" * 32, "") == ("EmptyCid", ())
    assert send_anyway(driver, world["dev"], "addModelBatch", [b"\xa7" * 32, b"\xa8" * 32], ["x", ""]) == (
        "EmptyCid", ())
    # a duplicate id still says ModelExists first, as before
    assert send_anyway(driver, world["dev"], "addModel", M1, "")[0] == "ModelExists"
    assert state(driver) == before


# ----------------------------------------------------------------------------------------------
# Gas
# ----------------------------------------------------------------------------------------------
def test_update_model_metadata_gas_is_small_and_does_not_grow_with_the_models(fresh_chain, world):
    dev = world["dev"]
    short = fresh_chain.transact(dev, "reputation", "updateModelMetadata", M1, CID).gas_used
    long = fresh_chain.transact(dev, "reputation", "updateModelMetadata", M1, LONG_CID).gas_used
    fillers = [bytes([0xF0, k + 1]) * 16 for k in range(50)]
    fresh_chain.transact(dev, "reputation", "addModelBatch", fillers, ["ipfs://m"] * len(fillers), gas=30_000_000)
    crowded = fresh_chain.transact(dev, "reputation", "updateModelMetadata", M1, CID).gas_used
    print(f"\nupdateModelMetadata gas: 59-char CID {short}, 200-char CID {long}, after 50 more models {crowded}")
    assert 21_000 < short < long <= 40_000
    assert crowded == short
    assert CALLS["updateModelMetadata"].gas >= 2 * long  # the submitter's limit has ample headroom
