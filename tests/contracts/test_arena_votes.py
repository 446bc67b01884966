"""Arena battles and votes on chain: the oracle attests that two interactions
of one user, in one context, by two models, answered one prompt (`openBattle`, ORACLE_ROLE only,
since the contract cannot see prompts); the user votes on it once (`vote`: 1 A better, 2 B better,
3 tie, 4 both bad), directly or relayed through the forwarder. A voided battle (an answer named its
own model) keeps its vote, not counted. The events alone rebuild the arena board; a refused call
changes nothing, neither state nor events, and a vote moves no reputation."""

from __future__ import annotations

import pytest

from apps.chain import metatx
from apps.chain.metatx import ForwardRequest
from tests.contracts.test_access_control import (  # noqa: F401  (world is a fixture)
    C1, M1, ROLE, expect_revert, world, wrong)
from tests.contracts.test_bad_input_changes_nothing import send_anyway
from tests.contracts.test_forwarder import _executed, _relay, _relayer
from tests.contracts.test_model_metadata import decoded_logs
from tests.support import Reverted

pytestmark = pytest.mark.chain

G = b"\x00" * 32
C2 = b"\xc2" * 32
M2, M3 = b"\xa2" * 32, b"\xa3" * 32
# Interactions of `user` in C1 unless said.
A, B = b"\x51" * 32, b"\x52" * 32  # M1, M2: the battle the tests open
OF_OTHER_USER = b"\x53" * 32  # M2, other_user's
IN_C2 = b"\x54" * 32  # M2 in C2
SAME_MODEL = b"\x55" * 32  # M1, as A
SPARE = b"\x56" * 32  # M3
OPEN_A, OPEN_B = b"\x61" * 32, b"\x62" * 32  # M1, M3: in battle OPEN, no vote yet
VOTED_A, VOTED_B = b"\x63" * 32, b"\x64" * 32  # M2, M3: in battle VOTED, voted "tie"
UNKNOWN = b"\x5f" * 32
INTERACTIONS = (A, B, OF_OTHER_USER, IN_C2, SAME_MODEL, SPARE, OPEN_A, OPEN_B, VOTED_A, VOTED_B, UNKNOWN)
OPEN, VOTED, NEW, NEW2 = b"\xb1" * 32, b"\xb2" * 32, b"\xb3" * 32, b"\xb4" * 32
BATTLES = (OPEN, VOTED, NEW, NEW2, G)
A_BETTER, B_BETTER, TIE, BOTH_BAD = 1, 2, 3, 4
VOTE_GAS = 100_000


@pytest.fixture(scope="module")
def arena(driver, world):
    snap = driver.snapshot()
    driver.transact(world["admin"], "reputation", "addContext", C2, "maths")
    driver.transact(world["developer"], "reputation", "addModelBatch", [M2, M3], ["ipfs://m2", "ipfs://m3"])
    rows = [(iid, model, ctx, world[who].address, True, 7 * 10**17, 6 * 10**17, "ipfs://e")
            for iid, model, ctx, who in ((A, M1, C1, "user"), (B, M2, C1, "user"),
                                         (OF_OTHER_USER, M2, C1, "other_user"), (IN_C2, M2, C2, "user"),
                                         (SAME_MODEL, M1, C1, "user"), (SPARE, M3, C1, "user"),
                                         (OPEN_A, M1, C1, "user"), (OPEN_B, M3, C1, "user"),
                                         (VOTED_A, M2, C1, "user"), (VOTED_B, M3, C1, "user"))]
    driver.transact(world["oracle"], "reputation", "autoEvalBatch", *[list(c) for c in zip(*rows)], gas=10_000_000)
    driver.transact(world["oracle"], "reputation", "openBattleBatch", [OPEN, VOTED], [OPEN_A, VOTED_A],
                    [OPEN_B, VOTED_B], [False, False])
    driver.transact(world["user"], "reputation", "vote", VOTED, TIE)
    yield world
    driver.revert_to(snap)


def state(driver, w) -> dict:
    """Everything a battle or a vote could touch, and what they must not."""
    view = driver.view
    return {
        "battles": {b: view("reputation", "battle", b) for b in BATTLES},
        "battle_of": {i: view("reputation", "battleOf", i) for i in INTERACTIONS},
        "interactions": {i: view("reputation", "interaction", i) for i in INTERACTIONS},
        "reputation": {(m, c): view("reputation", "reputation", m, c) for m in (M1, M2, M3) for c in (G, C1, C2)},
        "nonces": {who: view("forwarder", "nonces", w[who].address) for who in ("user", "other_user")},
    }


def events(driver, receipt) -> list[tuple[str, dict]]:
    """The Reputation contract's events in a receipt (a relayed call's forwarder event left out)."""
    return [e for e in decoded_logs(driver, receipt) if e is not None]


def _plain(values) -> tuple:
    return tuple(v.lower() if isinstance(v, str) else v for v in values)


def _vote_request(driver, voter, battle_id: bytes, outcome: int, *, nonce: int = 0, signer=None) -> ForwardRequest:
    """`voter`'s vote as a forwarder request, signed by `signer` (the voter unless told)."""
    d = driver.deployment
    request = ForwardRequest(sender=voter.address, to=d.reputation, gas=VOTE_GAS, nonce=nonce,
                             deadline=driver.latest_timestamp() + 3600,
                             data=driver.ledger.abis["reputation"].fn("vote").encode(battle_id, outcome))
    return metatx.sign_request(request, (signer or voter).key, d.chainId, d.forwarder)


# ----------------------------------------------------------------------------------------------
# Refusals: each reverts with its named error and changes nothing (state and events)
# ----------------------------------------------------------------------------------------------
def open_(battle_id, a, b, voided=False):
    return ("oracle", "openBattle", battle_id, a, b, voided)


def batch(*battles):
    return ("oracle", "openBattleBatch", *[list(c) for c in zip(*battles)])


CASES = {
    # openBattle
    "battle id zero": (lambda w: open_(G, A, B), "ZeroBattleId", lambda w: ()),
    "battle id already used": (lambda w: open_(OPEN, A, B), "BattleExists", lambda w: (OPEN,)),
    "unknown interaction A": (lambda w: open_(NEW, UNKNOWN, B), "UnknownInteraction", lambda w: (UNKNOWN,)),
    "unknown interaction B": (lambda w: open_(NEW, A, UNKNOWN), "UnknownInteraction", lambda w: (UNKNOWN,)),
    "A is B": (lambda w: open_(NEW, A, A), "SameInteraction", lambda w: (A,)),
    "different users": (lambda w: open_(NEW, A, OF_OTHER_USER), "DifferentUsers",
                        lambda w: (w["user"].address, w["other_user"].address)),
    "different contexts": (lambda w: open_(NEW, A, IN_C2), "DifferentContexts", lambda w: (C1, C2)),
    "same model": (lambda w: open_(NEW, A, SAME_MODEL), "SameModel", lambda w: (M1,)),
    "same model, voided": (lambda w: open_(NEW, A, SAME_MODEL, True), "SameModel", lambda w: (M1,)),
    "A already in another battle": (lambda w: open_(NEW, OPEN_A, B), "InteractionInBattle",
                                    lambda w: (OPEN_A, OPEN)),
    "B already in a voted battle": (lambda w: open_(NEW, A, VOTED_B), "InteractionInBattle",
                                    lambda w: (VOTED_B, VOTED)),
    # openBattleBatch: all or nothing
    "a bad battle last in a batch": (lambda w: batch((NEW, A, B, False), (NEW2, SAME_MODEL, IN_C2, False)),
                                     "DifferentContexts", lambda w: (C1, C2)),
    "an interaction in two battles of a batch": (lambda w: batch((NEW, A, B, False), (NEW2, SAME_MODEL, B, True)),
                                                 "InteractionInBattle", lambda w: (B, NEW)),
    "a battle id twice in a batch": (lambda w: batch((NEW, A, B, False), (NEW, SAME_MODEL, SPARE, False)),
                                     "BattleExists", lambda w: (NEW,)),
    "batch columns of different lengths": (lambda w: ("oracle", "openBattleBatch", [NEW, NEW2], [A, SAME_MODEL],
                                                      [B, SPARE], [False]), "LengthMismatch", lambda w: ()),
    # vote
    "vote on an unknown battle": (lambda w: ("user", "vote", NEW, A_BETTER), "UnknownBattle", lambda w: (NEW,)),
    "vote on battle id zero": (lambda w: ("user", "vote", G, A_BETTER), "UnknownBattle", lambda w: (G,)),
    "vote by another user": (lambda w: ("other_user", "vote", OPEN, A_BETTER), "NotBattleUser", lambda w: ()),
    "vote by the oracle": (lambda w: ("oracle", "vote", OPEN, A_BETTER), "NotBattleUser", lambda w: ()),
    "second vote": (lambda w: ("user", "vote", VOTED, A_BETTER), "AlreadyVoted", lambda w: ()),
    "second vote, same outcome": (lambda w: ("user", "vote", VOTED, TIE), "AlreadyVoted", lambda w: ()),
    "second vote, outcome out of range": (lambda w: ("user", "vote", VOTED, 0), "AlreadyVoted", lambda w: ()),
    **{f"outcome {bad}": (lambda w, bad=bad: ("user", "vote", OPEN, bad), "OutcomeOutOfRange", lambda w: ())
       for bad in (0, 5, 255)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_battle_or_vote_reverts_with_its_error_and_changes_nothing(driver, arena, case):
    build, expected, expected_args = CASES[case]
    sender, function, *args = build(arena)
    before = state(driver, arena)
    assert send_anyway(driver, arena[sender], "reputation", function, *args) == expected  # mined, no logs
    assert state(driver, arena) == before
    err = expect_revert(lambda: driver.transact(arena[sender], "reputation", function, *args), expected)
    assert _plain(err.args_) == _plain(expected_args(arena))


@pytest.mark.parametrize("function", ["openBattle", "openBattleBatch"])
@pytest.mark.parametrize("caller", wrong("oracle"))
def test_only_the_oracle_opens_battles(driver, arena, caller, function):
    args = open_(NEW, A, B)[2:] if function == "openBattle" else batch((NEW, A, B, False))[2:]
    before = state(driver, arena)
    assert send_anyway(driver, arena[caller], "reputation", function, *args) == "Unauthorized"
    assert state(driver, arena) == before
    err = expect_revert(lambda: driver.transact(arena[caller], "reputation", function, *args), "Unauthorized")
    assert _plain(err.args_) == _plain((ROLE["ORACLE_ROLE"], arena[caller].address))


def test_a_suspended_user_votes_nothing_until_reinstated(fresh_chain, arena):
    driver, user = fresh_chain, arena["user"]
    driver.transact(arena["admin"], "access", "revokeRole", ROLE["USER_ROLE"], user.address)
    before = state(driver, arena)
    assert send_anyway(driver, user, "reputation", "vote", OPEN, A_BETTER) == "NotAUser"
    relayed = _relay(driver, _relayer(driver), [_vote_request(driver, user, OPEN, A_BETTER)])
    assert _executed(driver, relayed) == [(user.address.lower(), 0, False)]  # spent, refused
    assert events(driver, relayed) == []
    assert {**state(driver, arena), "nonces": None} == {**before, "nonces": None}
    driver.transact(arena["admin"], "access", "grantRole", ROLE["USER_ROLE"], user.address)
    driver.transact(user, "reputation", "vote", OPEN, A_BETTER)
    assert driver.view("reputation", "battle", OPEN)[7:] == (A_BETTER, True)


# ----------------------------------------------------------------------------------------------
# Battles and votes recorded
# ----------------------------------------------------------------------------------------------
def test_an_unknown_battle_reads_all_zero_and_an_interaction_in_no_battle_reads_zero(driver, arena):
    assert driver.view("reputation", "battle", NEW) == (G, G, G, G, G, "0x" + "00" * 20, False, 0, False)
    assert driver.view("reputation", "battleOf", A) == (G,)
    assert driver.view("reputation", "battleOf", UNKNOWN) == (G,)


@pytest.mark.parametrize("outcome", [A_BETTER, B_BETTER, TIE, BOTH_BAD])
def test_a_battle_and_its_vote_are_recorded_and_emitted_and_move_no_reputation(fresh_chain, arena, outcome):
    driver, user = fresh_chain, arena["user"]
    scores = state(driver, arena)["reputation"]
    opened = driver.transact(arena["oracle"], "reputation", "openBattle", NEW, A, B, False)
    assert events(driver, opened) == [("BattleOpened", {
        "battleId": NEW, "contextId": C1, "modelA": M1, "modelB": M2, "interactionA": A, "interactionB": B,
        "user": user.address, "voided": False})]
    assert driver.view("reputation", "battle", NEW) == (C1, M1, M2, A, B, user.address, False, 0, False)
    assert driver.view("reputation", "battleOf", A) == driver.view("reputation", "battleOf", B) == (NEW,)

    voted = driver.transact(user, "reputation", "vote", NEW, outcome)
    assert events(driver, voted) == [("Voted", {"battleId": NEW, "user": user.address, "outcome": outcome,
                                                "counted": True})]
    assert driver.view("reputation", "battle", NEW) == (C1, M1, M2, A, B, user.address, False, outcome, True)
    assert state(driver, arena)["reputation"] == scores


def test_a_voided_battle_keeps_its_vote_not_counted(fresh_chain, arena):
    driver, user = fresh_chain, arena["user"]
    opened = driver.transact(arena["oracle"], "reputation", "openBattle", NEW, B, SPARE, True)
    assert events(driver, opened)[0][1]["voided"] is True
    voted = driver.transact(user, "reputation", "vote", NEW, B_BETTER)
    assert events(driver, voted) == [("Voted", {"battleId": NEW, "user": user.address, "outcome": B_BETTER,
                                                "counted": False})]
    assert driver.view("reputation", "battle", NEW) == (C1, M2, M3, B, SPARE, user.address, True, B_BETTER, True)
    expect_revert(lambda: driver.transact(user, "reputation", "vote", NEW, TIE), "AlreadyVoted")


def test_a_battle_batch_records_the_same_battles_as_single_calls(driver, arena):
    battles = [(NEW, A, B, False), (NEW2, SAME_MODEL, SPARE, True)]
    outcomes = []
    for send in ("single", "batch"):
        snap = driver.snapshot()
        try:
            if send == "single":
                logs = [e for b in battles
                        for e in events(driver, driver.transact(arena["oracle"], "reputation", "openBattle", *b))]
            else:
                logs = events(driver, driver.transact(arena["oracle"], "reputation", *batch(*battles)[1:]))
            outcomes.append((logs, state(driver, arena)))
        finally:
            driver.revert_to(snap)
    assert outcomes[0] == outcomes[1]
    assert [name for name, _ in outcomes[0][0]] == ["BattleOpened", "BattleOpened"]
    assert outcomes[0][1]["battle_of"][SPARE] == (NEW2,)


# ----------------------------------------------------------------------------------------------
# Votes relayed through the forwarder (signed by the user, sent by an account with no role)
# ----------------------------------------------------------------------------------------------
def test_a_relayed_vote_is_recorded_as_its_signers(fresh_chain, arena):
    driver, user = fresh_chain, arena["user"]
    relayer = _relayer(driver)
    receipt = _relay(driver, relayer, [_vote_request(driver, user, OPEN, BOTH_BAD)])
    assert _executed(driver, receipt) == [(user.address.lower(), 0, True)]
    assert events(driver, receipt) == [("Voted", {"battleId": OPEN, "user": user.address, "outcome": BOTH_BAD,
                                                  "counted": True})]
    assert driver.view("reputation", "battle", OPEN)[5:] == (user.address, False, BOTH_BAD, True)


def test_a_relayed_vote_signed_by_someone_else_is_refused(fresh_chain, arena):
    """Signed by another in the user's name: the forwarder skips it (and `execute` refuses it); signed
    by another in their own name: the forwarder makes the call and the contract refuses it."""
    driver, user, other = fresh_chain, arena["user"], arena["other_user"]
    relayer = _relayer(driver)
    before = state(driver, arena)
    forged = _vote_request(driver, user, OPEN, A_BETTER, signer=other)
    receipt = _relay(driver, relayer, [forged, _vote_request(driver, other, OPEN, A_BETTER)])
    assert _executed(driver, receipt) == [(other.address.lower(), 0, False)]
    assert events(driver, receipt) == []
    expect_revert(lambda: driver.transact(relayer, "forwarder", "execute", metatx.request_tuple(forged)),
                  "ERC2771ForwarderInvalidSigner")
    after = state(driver, arena)
    assert after["nonces"] == {"user": (0,), "other_user": (1,)}  # the other's own request is spent
    assert {**after, "nonces": None} == {**before, "nonces": None}


def test_a_replayed_vote_changes_nothing(fresh_chain, arena):
    driver, user = fresh_chain, arena["user"]
    relayer = _relayer(driver)
    request = _vote_request(driver, user, OPEN, B_BETTER)
    _relay(driver, relayer, [request])
    before = state(driver, arena)
    again = _relay(driver, relayer, [request])
    assert _executed(driver, again) == [] and events(driver, again) == []
    with pytest.raises(Reverted) as info:
        driver.transact(relayer, "forwarder", "execute", metatx.request_tuple(request))
    assert info.value.name == "ERC2771ForwarderInvalidSigner"
    assert state(driver, arena) == before
    assert before["battles"][OPEN][7:] == (B_BETTER, True)
