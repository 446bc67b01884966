"""Duplicate and out-of-range inputs revert with the named error and change nothing; batch forms
are all-or-nothing and give the same scores as the single forms (CONTRACTS.md).

Each bad call is first simulated (to read the contract's error name) and then really sent and
mined, so that "changes nothing" is checked on a reverted transaction, not on a call that never
left the client.
"""

from __future__ import annotations

import pytest

from apps.chain.client import Reverted
from tests.support import new_account

pytestmark = pytest.mark.chain

WAD = 10**18
DAY = 86_400
G = b"\x00" * 32
C1, C2, C_UNKNOWN = b"\xc1" * 32, b"\xc2" * 32, b"\xcf" * 32
M1, M2, M_UNKNOWN = b"\xa1" * 32, b"\xa2" * 32, b"\xaf" * 32
I_NEW = b"\x01" * 32  # automatic part only (M1 in C1, user u1, with a reference)
I_HUM = b"\x02" * 32  # human part in, no updateReputation (M2 in C2, u1)
I_DONE = b"\x03" * 32  # all three steps (M1 in C2, u2, no reference)
I_FRESH = b"\x0f" * 32  # never used
INTERACTIONS = (I_NEW, I_HUM, I_DONE, I_FRESH, b"\x10" * 32, b"\x11" * 32)
ANSWERS = (4, 5, 3, 4, 4, 2)


@pytest.fixture(scope="module")
def world(driver, admin, oracle):
    snap = driver.snapshot()
    w = {"admin": admin, "oracle": oracle, "u1": new_account(), "u2": new_account(), "dev": new_account(),
         "stranger": new_account()}
    t = driver.latest_timestamp() + 10
    for name, code in (("u1", 1), ("u2", 1), ("dev", 2)):
        driver.set_next_timestamp(t)
        driver.transact(admin, "identity", "register", w[name].address, code, "")
    for ctx in (C1, C2):
        driver.transact(admin, "reputation", "addContext", ctx, "ctx")
    driver.transact(w["dev"], "reputation", "addModelBatch", [M1, M2], ["m1", "m2"])
    driver.transact(oracle, "reputation", "autoEval", I_NEW, M1, C1, w["u1"].address, True, 9 * 10**17,
                    6 * 10**17, "e")
    driver.transact(oracle, "reputation", "autoEval", I_HUM, M2, C2, w["u1"].address, True, 3 * 10**17,
                    8 * 10**17, "e")
    driver.transact(oracle, "reputation", "autoEval", I_DONE, M1, C2, w["u2"].address, False, 0, 0, "e")
    driver.set_next_timestamp(t + 3_600)
    driver.transact(w["u1"], "reputation", "humEval", I_HUM, *ANSWERS)
    driver.set_next_timestamp(t + 7_200)
    driver.transact(w["u2"], "reputation", "humEval", I_DONE, 1, 2, 1, 5, 5, 1)
    driver.transact(oracle, "reputation", "updateReputation", I_DONE)
    yield w
    driver.revert_to(snap)


def state(driver, w) -> dict:
    """Everything a bad call could touch."""
    view = driver.view
    accounts = [w[k].address for k in ("u1", "u2", "dev", "stranger")]
    return {
        "reputation": {(m, c): view("reputation", "reputation", m, c)
                       for m in (M1, M2, M_UNKNOWN) for c in (G, C1, C2, C_UNKNOWN)},
        "contexts": {c: view("reputation", "contextStats", c) for c in (G, C1, C2, C_UNKNOWN)},
        "interactions": {i: view("reputation", "interaction", i) for i in INTERACTIONS},
        "models": {m: view("reputation", "modelOwner", m) for m in (M1, M2, M_UNKNOWN)},
        "counts": (view("reputation", "modelCount"), view("reputation", "contextCount")),
        "registered": {a: (view("identity", "isRegistered", a), view("identity", "registeredAt", a),
                           view("identity", "registeredRole", a)) for a in accounts},
        "last_human": {a: view("reputation", "lastHumanEvalAt", a) for a in accounts},
    }


def send_anyway(driver, account, contract, function, *args) -> str:
    """Simulate (for the error name), then send and mine the transaction regardless; the receipt
    must say it reverted and logged nothing. Returns the error name."""
    ledger, client = driver.ledger, driver.client
    data = ledger.abis[contract].fn(function).encode(*args)
    decoded = ledger.simulate(account.address, ledger.address(contract), data, contract)
    assert decoded is not None, f"{function}{args} would not revert"
    block_before = client.block_number()
    signed = client.sign(account, ledger.address(contract), data, client.nonce(account.address, "pending"), 3_000_000)
    assert client.send_raw([signed.raw]) == [None]
    receipt = client.wait_receipt(signed.hash)
    assert int(receipt["status"], 16) == 0
    assert receipt["logs"] == []
    assert int(receipt["blockNumber"], 16) == block_before + 1
    return decoded[0]


def auto(w, iid=I_FRESH, model=M1, ctx=C1, user="u1", ref=True, sa=5 * 10**17, wa=5 * 10**17):
    return ("oracle", "reputation", "autoEval", iid, model, ctx, w[user].address if user in w else user,
            ref, sa, wa, "ipfs://e")


LIKERT_CASES = {}
for _pos, _field in enumerate(("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")):
    for _bad in (0, 6):
        _answers = list(ANSWERS)
        _answers[_pos] = _bad
        LIKERT_CASES[f"{_field}={_bad}"] = (
            lambda w, a=tuple(_answers): ("u1", "reputation", "humEval", I_NEW, *a), "AnswerOutOfRange")

CASES = {
    "duplicate interaction id": (lambda w: auto(w, iid=I_NEW), "InteractionExists"),
    "duplicate interaction id (finished one)": (lambda w: auto(w, iid=I_DONE, ctx=C2), "InteractionExists"),
    "duplicate model id": (lambda w: ("dev", "reputation", "addModel", M1, "again"), "ModelExists"),
    "empty metadata CID in addModel": (lambda w: ("dev", "reputation", "addModel", b"\xa7" * 32, ""), "EmptyCid"),
    "metadata update by a non-owner": (lambda w: ("u1", "reputation", "updateModelMetadata", M1, "bafy2"),
                                       "NotModelOwner"),
    "metadata update of an unknown model": (lambda w: ("dev", "reputation", "updateModelMetadata", M_UNKNOWN,
                                                       "bafy2"), "UnknownModel"),
    "metadata update with an empty CID": (lambda w: ("dev", "reputation", "updateModelMetadata", M1, ""),
                                          "EmptyCid"),
    "duplicate context": (lambda w: ("admin", "reputation", "addContext", C1, "again"), "ContextExists"),
    "global context added again": (lambda w: ("admin", "reputation", "addContext", G, "again"), "ContextExists"),
    "second register": (lambda w: ("admin", "identity", "register", w["u1"].address, 2, ""), "AlreadyRegistered"),
    "second register, same role": (lambda w: ("admin", "identity", "register", w["dev"].address, 2, ""),
                                   "AlreadyRegistered"),
    "register the zero address": (lambda w: ("admin", "identity", "register", "0x" + "00" * 20, 1, ""),
                                  "ZeroAddress"),
    "register with role code 0": (lambda w: ("admin", "identity", "register", w["stranger"].address, 0, ""),
                                  "UnknownRoleCode"),
    "register with role code 6": (lambda w: ("admin", "identity", "register", w["stranger"].address, 6, ""),
                                  "UnknownRoleCode"),
    "second humEval": (lambda w: ("u1", "reputation", "humEval", I_HUM, *ANSWERS), "AlreadyEvaluated"),
    "second humEval (finished one)": (lambda w: ("u2", "reputation", "humEval", I_DONE, *ANSWERS),
                                      "AlreadyEvaluated"),
    "humEval of an unknown interaction": (lambda w: ("u1", "reputation", "humEval", I_FRESH, *ANSWERS),
                                          "UnknownInteraction"),
    "second updateReputation": (lambda w: ("oracle", "reputation", "updateReputation", I_DONE), "AlreadyUpdated"),
    "updateReputation before humEval": (lambda w: ("oracle", "reputation", "updateReputation", I_NEW),
                                        "NoHumanEvaluation"),
    "updateReputation of an unknown interaction": (
        lambda w: ("oracle", "reputation", "updateReputation", I_FRESH), "UnknownInteraction"),
    "sA = 1e18 + 1": (lambda w: auto(w, sa=WAD + 1), "ScoreOutOfRange"),
    "wA = 1e18 + 1": (lambda w: auto(w, wa=WAD + 1), "ScoreOutOfRange"),
    "sA = 1e18 + 1 without a reference": (lambda w: auto(w, ref=False, sa=WAD + 1), "ScoreOutOfRange"),
    "sA = 2**256 - 1": (lambda w: auto(w, sa=2**256 - 1), "ScoreOutOfRange"),
    "unknown model": (lambda w: auto(w, model=M_UNKNOWN), "UnknownModel"),
    "unknown context": (lambda w: auto(w, ctx=C_UNKNOWN), "UnknownContext"),
    "context 0 in autoEval": (lambda w: auto(w, ctx=G), "UnknownContext"),
    "unregistered user": (lambda w: auto(w, user="stranger"), "UserNotRegistered"),
    "zero-address user": (lambda w: auto(w, user="0x" + "00" * 20), "UserNotRegistered"),
    **LIKERT_CASES,
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_reverts_with_its_named_error_and_changes_nothing(driver, world, case):
    build, expected = CASES[case]
    sender, contract, function, *args = build(world)
    before = state(driver, world)
    assert send_anyway(driver, world[sender], contract, function, *args) == expected
    assert state(driver, world) == before
    # the Driver reports the same name
    with pytest.raises(Reverted) as info:
        driver.transact(world[sender], contract, function, *args)
    assert info.value.name == expected


def test_the_bad_inputs_leave_the_good_ones_working(fresh_chain, world):
    """After every refusal above, the pending interactions still go through normally."""
    for case in ("second humEval", "updateReputation before humEval", "reliability=0"):
        build, _ = CASES[case]
        sender, contract, function, *args = build(world)
        send_anyway(fresh_chain, world[sender], contract, function, *args)
    fresh_chain.transact(world["u1"], "reputation", "humEval", I_NEW, *ANSWERS)
    fresh_chain.transact(world["u1"], "reputation", "updateReputation", I_NEW)
    fresh_chain.transact(world["u1"], "reputation", "updateReputation", I_HUM)
    assert fresh_chain.view("reputation", "reputation", M1, C1)[4] == 1


# ----------------------------------------------------------------------------------------------
# Batches: all or nothing
# ----------------------------------------------------------------------------------------------
def batch_columns(rows):
    return [list(col) for col in zip(*[r[3:] for r in rows])]


BATCH_CASES = {
    "unknown model last": (lambda w: [auto(w, iid=b"\x10" * 32), auto(w, iid=b"\x11" * 32, model=M2),
                                      auto(w, model=M_UNKNOWN)], "UnknownModel"),
    "id repeated inside the batch": (lambda w: [auto(w, iid=b"\x10" * 32), auto(w, iid=b"\x10" * 32, ctx=C2)],
                                     "InteractionExists"),
    "an existing id": (lambda w: [auto(w, iid=b"\x10" * 32), auto(w, iid=I_HUM)], "InteractionExists"),
    "sA out of range in the middle": (lambda w: [auto(w, iid=b"\x10" * 32), auto(w, sa=WAD + 1),
                                                 auto(w, iid=b"\x11" * 32)], "ScoreOutOfRange"),
    "unregistered user last": (lambda w: [auto(w, iid=b"\x10" * 32, ctx=C2), auto(w, user="stranger")],
                               "UserNotRegistered"),
    "context 0 first": (lambda w: [auto(w, ctx=G), auto(w, iid=b"\x10" * 32)], "UnknownContext"),
}


@pytest.mark.parametrize("case", list(BATCH_CASES))
def test_one_bad_item_reverts_the_whole_auto_eval_batch(driver, world, case):
    build, expected = BATCH_CASES[case]
    rows = build(world)
    before = state(driver, world)
    assert send_anyway(driver, world["oracle"], "reputation", "autoEvalBatch", *batch_columns(rows)) == expected
    assert state(driver, world) == before


def test_an_auto_eval_batch_with_columns_of_different_lengths_reverts(driver, world):
    columns = batch_columns([auto(world, iid=b"\x10" * 32), auto(world, iid=b"\x11" * 32)])
    columns[5] = columns[5][:1]  # one sA short
    before = state(driver, world)
    assert send_anyway(driver, world["oracle"], "reputation", "autoEvalBatch", *columns) == "LengthMismatch"
    assert state(driver, world) == before


def test_one_duplicate_reverts_the_whole_add_model_batch(driver, world):
    new = [b"\xa5" * 32, b"\xa6" * 32]
    before = state(driver, world)
    assert send_anyway(driver, world["dev"], "reputation", "addModelBatch", [new[0], M2, new[1]],
                       ["x", "y", "z"]) == "ModelExists"
    assert send_anyway(driver, world["dev"], "reputation", "addModelBatch", [new[0], new[0]],
                       ["x", "y"]) == "ModelExists"
    assert state(driver, world) == before
    assert not any(driver.view("reputation", "modelExists", m)[0] for m in new)


def test_one_pending_item_reverts_the_whole_update_reputation_batch(driver, world):
    before = state(driver, world)
    assert send_anyway(driver, world["oracle"], "reputation", "updateReputationBatch",
                       [I_HUM, I_NEW]) == "NoHumanEvaluation"
    assert send_anyway(driver, world["oracle"], "reputation", "updateReputationBatch",
                       [I_HUM, I_DONE]) == "AlreadyUpdated"
    assert send_anyway(driver, world["oracle"], "reputation", "updateReputationBatch",
                       [I_HUM, I_HUM]) == "AlreadyUpdated"
    assert state(driver, world) == before
    assert driver.view("reputation", "interaction", I_HUM)[9] is False


# ----------------------------------------------------------------------------------------------
# Batches give the same scores as the single forms
# ----------------------------------------------------------------------------------------------
def sequence(w):
    """A dozen automatic parts: new models entering contexts, with and without references,
    sA/wA through the edges, both users."""
    values = [0, WAD, 5 * 10**17, 123_456_789_012_345_678, 987_654_321_098_765_432, 1]
    rows = []
    for k in range(12):
        rows.append(auto(w, iid=(0x40 + k).to_bytes(32, "big"), model=(M1, M2)[k % 2], ctx=(C1, C2, C1)[k % 3],
                         user=("u1", "u2")[k % 2], ref=k % 4 != 1, sa=values[k % 6], wa=values[(k + 3) % 6]))
    return rows


def scores(driver) -> dict:
    return {
        "reputation": {(m, c): driver.view("reputation", "reputation", m, c) for m in (M1, M2) for c in (G, C1, C2)},
        "contexts": {c: driver.view("reputation", "contextStats", c) for c in (G, C1, C2)},
    }


def test_auto_eval_batch_and_single_auto_evals_give_identical_scores(driver, world):
    rows = sequence(world)
    snap = driver.snapshot()
    try:
        for row in rows:
            driver.transact(world["oracle"], *row[1:])
        single = scores(driver)
        single_interactions = [driver.view("reputation", "interaction", r[3]) for r in rows]
    finally:
        driver.revert_to(snap)
    snap = driver.snapshot()
    try:
        driver.transact(world["oracle"], "reputation", "autoEvalBatch", *batch_columns(rows), gas=10_000_000)
        batched = scores(driver)
        batched_interactions = [driver.view("reputation", "interaction", r[3]) for r in rows]
    finally:
        driver.revert_to(snap)
    assert single == batched
    assert single_interactions == batched_interactions
    assert single["reputation"][(M2, C2)][0] not in (0, 5 * 10**17)  # the sequence did move scores


def test_update_reputation_batch_and_single_updates_give_identical_scores(driver, world):
    rows = sequence(world)
    outer = driver.snapshot()
    try:
        driver.transact(world["oracle"], "reputation", "autoEvalBatch", *batch_columns(rows), gas=10_000_000)
        t = driver.latest_timestamp()
        for k, row in enumerate(rows):
            driver.set_next_timestamp(t + 600 * (k + 1))
            user = world[("u1", "u2")[k % 2]]
            driver.transact(user, "reputation", "humEval", row[3], 1 + k % 5, 5 - k % 5, 3, 4, 1 + k % 5, 2)
        iids = [row[3] for row in rows] + [I_HUM]
        snap = driver.snapshot()
        for iid in iids:
            driver.transact(world["stranger"], "reputation", "updateReputation", iid)
        single = scores(driver)
        driver.revert_to(snap)
        driver.transact(world["stranger"], "reputation", "updateReputationBatch", iids, gas=10_000_000)
        batched = scores(driver)
    finally:
        driver.revert_to(outer)
    assert single == batched
