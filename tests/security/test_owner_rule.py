"""A model's owner neither rates nor votes on their own model, and the chain enforces it: a wallet
user who owns a model, named by the oracle as the user of their own chats (the site links accounts;
the chain knows only `modelOwner`), sends `humEval` and `vote` directly from their address, or signed
and relayed through the forwarder. Each reverts with OwnModel and changes nothing; the same calls on
someone else's model go through. The Python mirror refuses the same calls, and the audit replays a
chain that keeps the rule."""

from __future__ import annotations

import pytest

from apps.chain import metatx
from apps.chain.audit import replay
from apps.chain.indexer import fetch_all
from apps.chain.metatx import ForwardRequest
from lib.reputation import ReputationError, ReputationModel
from tests.contracts.test_access_control import ANSWERS, C1, ROLE, expect_revert
from tests.contracts.test_bad_input_changes_nothing import send_anyway
from tests.contracts.test_forwarder import _executed, _relay, _relayer
from tests.support import new_account

pytestmark = pytest.mark.chain

OWN, OTHER = b"\xd1" * 32, b"\xd2" * 32  # the owner's model, another developer's
RATE_OWN, RATE_OTHER = b"\xe1" * 32, b"\xe2" * 32
FIGHT_A, FIGHT_B = b"\xe3" * 32, b"\xe4" * 32  # OWN as side A, OTHER as B
FIGHT_C, FIGHT_D = b"\xe5" * 32, b"\xe6" * 32  # OTHER as side A, OWN as B
RELAYED = b"\xe7" * 32
BATTLE_OWN_A, BATTLE_OWN_B = b"\xf1" * 32, b"\xf2" * 32


@pytest.fixture
def owners(fresh_chain, admin, oracle):
    """An owner who is also a user (a wallet with USER_ROLE and DEVELOPER_ROLE) and a stranger's model."""
    d = fresh_chain
    owner, developer = new_account(), new_account()
    for account in (owner, developer):
        d.fund(account.address)
    d.transact(admin, "identity", "register", owner.address, 1, "ipfs://owner")
    d.transact(admin, "access", "grantRole", ROLE["DEVELOPER_ROLE"], owner.address)
    d.transact(admin, "identity", "register", developer.address, 2, "ipfs://developer")
    d.transact(admin, "reputation", "addContext", C1, "code")
    d.transact(owner, "reputation", "addModel", OWN, "ipfs://own")
    d.transact(developer, "reputation", "addModel", OTHER, "ipfs://other")
    for iid, model in ((RATE_OWN, OWN), (RATE_OTHER, OTHER), (FIGHT_A, OWN), (FIGHT_B, OTHER), (FIGHT_C, OTHER),
                       (FIGHT_D, OWN), (RELAYED, OWN)):
        d.transact(oracle, "reputation", "autoEval", iid, model, C1, owner.address, True, 7 * 10**17, 6 * 10**17,
                   "ipfs://evidence")
    d.transact(oracle, "reputation", "openBattleBatch", [BATTLE_OWN_A, BATTLE_OWN_B], [FIGHT_A, FIGHT_C],
               [FIGHT_B, FIGHT_D], [False, False])
    return d, owner


def test_an_owner_cannot_rate_their_own_model_directly_but_rates_another(owners):
    d, owner = owners
    before = d.view("reputation", "reputation", OWN, C1)
    err = expect_revert(lambda: d.transact(owner, "reputation", "humEval", RATE_OWN, *ANSWERS), "OwnModel")
    assert err.args_[0] == OWN and err.args_[1].lower() == owner.address.lower()
    assert send_anyway(d, owner, "reputation", "humEval", RATE_OWN, *ANSWERS) == "OwnModel"
    assert d.view("reputation", "reputation", OWN, C1) == before, "nHuman and Rh unchanged"
    assert d.view("reputation", "interaction", RATE_OWN)[8] is False
    assert d.transact(owner, "reputation", "humEval", RATE_OTHER, *ANSWERS).status == 1
    assert d.view("reputation", "reputation", OTHER, C1)[4] == 1


@pytest.mark.parametrize("battle", [BATTLE_OWN_A, BATTLE_OWN_B], ids=["own model as A", "own model as B"])
def test_an_owner_cannot_vote_on_a_battle_of_their_own_model(owners, battle):
    d, owner = owners
    err = expect_revert(lambda: d.transact(owner, "reputation", "vote", battle, 1), "OwnModel")
    assert err.args_[0] == OWN
    assert send_anyway(d, owner, "reputation", "vote", battle, 2) == "OwnModel"
    assert d.view("reputation", "battle", battle)[7:] == (0, False), "no outcome recorded"


def test_an_owners_relayed_rating_of_their_own_model_is_spent_without_effect(owners):
    d, owner = owners
    dep = d.deployment
    request = metatx.sign_request(ForwardRequest(
        sender=owner.address, to=dep.reputation, gas=200_000, nonce=0, deadline=d.latest_timestamp() + 3600,
        data=d.ledger.abis["reputation"].fn("humEval").encode(RELAYED, *ANSWERS)), owner.key, dep.chainId,
        dep.forwarder)
    receipt = _relay(d, _relayer(d), [request])
    assert _executed(d, receipt) == [(owner.address.lower(), 0, False)]
    assert d.view("reputation", "interaction", RELAYED)[8] is False


def test_the_mirror_refuses_what_the_contract_refuses_and_the_audit_replays_the_chain(owners):
    d, owner = owners
    m = ReputationModel()
    m.register(owner.address, 1)
    m.add_context(C1)
    m.add_model(OWN, owner.address)
    m.add_model(OTHER, new_account().address)
    m.auto_eval(RATE_OWN, OWN, C1, owner.address, True, 7 * 10**17, 6 * 10**17)
    m.auto_eval(RATE_OTHER, OTHER, C1, owner.address, True, 7 * 10**17, 6 * 10**17)
    with pytest.raises(ReputationError, match="owner"):
        m.hum_eval(RATE_OWN, owner.address, 100, *ANSWERS)
    m.hum_eval(RATE_OTHER, owner.address, 100, *ANSWERS)
    m.open_battle(BATTLE_OWN_B, RATE_OTHER, RATE_OWN)
    with pytest.raises(ReputationError, match="owner"):
        m.vote(BATTLE_OWN_B, owner.address, 1)

    d.transact(owner, "reputation", "humEval", RATE_OTHER, *ANSWERS)
    mirror = replay(d.ledger, fetch_all(d.ledger, d.deployment.deployBlock, d.client.block_number(), 10_000))
    assert mirror.owns(owner.address, OWN) and not mirror.owns(owner.address, OTHER)
    assert mirror.reputation(OTHER, C1) == d.view("reputation", "reputation", OTHER, C1)
    assert set(mirror.battles) == {BATTLE_OWN_A, BATTLE_OWN_B} and mirror.votes == {}
