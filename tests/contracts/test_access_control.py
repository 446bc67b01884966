"""Every restricted function reverts for every wrong role, and succeeds for the right one
(CONTRACTS.md, "Roles (ACSC)", "Identity (ISC)", "Reputation (RSC)")."""

from __future__ import annotations

import dataclasses

import pytest
from eth_utils import keccak

from apps.chain.deploy import _create
from tests.support import Driver, Reverted, new_account

pytestmark = pytest.mark.chain

ZERO = b"\x00" * 32
ROLE_NAMES = ("REGISTRAR_ROLE", "DEVELOPER_ROLE", "ORACLE_ROLE", "USER_ROLE", "EXPERT_ROLE")
ROLE = {name: keccak(text=name) for name in ROLE_NAMES}
ROLE["DEFAULT_ADMIN_ROLE"] = ZERO

C1 = b"\xc1" * 32
M1 = b"\xa1" * 32
I1 = b"\x11" * 32

# Everyone who may call: the deployer (admin + registrar), the oracle (ORACLE_ROLE by grantRole) and
# accounts registered through Identity with each role code, plus an unregistered stranger.
CALLERS = ("admin", "oracle", "user", "other_user", "developer", "expert", "registrar", "stranger")


@pytest.fixture(scope="module")
def world(driver, admin, oracle):
    snap = driver.snapshot()
    accounts = {"admin": admin, "oracle": oracle, "stranger": new_account()}
    for name, code in (("user", 1), ("other_user", 1), ("developer", 2), ("expert", 1), ("registrar", 1)):
        accounts[name] = new_account()
        driver.transact(admin, "identity", "register", accounts[name].address, code, f"ipfs://{name}")
    # Identity registers users and developers only: the expert and registrar roles come from the admin.
    for name in ("expert", "registrar"):
        driver.transact(admin, "access", "grantRole", ROLE[f"{name.upper()}_ROLE"], accounts[name].address)
    driver.transact(admin, "reputation", "addContext", C1, "code")
    driver.transact(accounts["developer"], "reputation", "addModel", M1, "ipfs://m1")
    driver.transact(oracle, "reputation", "autoEval", I1, M1, C1, accounts["user"].address, True, 7 * 10**17,
                    6 * 10**17, "ipfs://evidence")
    yield accounts
    driver.revert_to(snap)


def has_role(driver, role: str, account) -> bool:
    return driver.view("access", "hasRole", ROLE[role], account.address)[0]


def expect_revert(callable_, name: str) -> Reverted:
    with pytest.raises(Reverted) as info:
        callable_()
    assert info.value.name == name, info.value
    return info.value


def assert_unauthorized(err: Reverted, role: str, caller) -> None:
    assert err.args_[0] == ROLE[role]
    assert err.args_[1].lower() == caller.address.lower()


def wrong(*allowed):
    return [c for c in CALLERS if c not in allowed]


# ----------------------------------------------------------------------------------------------
# Role hashes
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ROLE_NAMES)
def test_each_role_hash_is_keccak256_of_its_name(driver, name):
    assert driver.view("access", name)[0] == keccak(text=name)


def test_the_default_admin_role_is_the_zero_hash(driver):
    assert driver.view("access", "DEFAULT_ADMIN_ROLE")[0] == ZERO


def test_identity_checks_the_same_registrar_role_hash(driver):
    assert driver.view("identity", "REGISTRAR_ROLE")[0] == keccak(text="REGISTRAR_ROLE")


@pytest.mark.parametrize("code, name", [(1, "USER_ROLE"), (2, "DEVELOPER_ROLE"), (3, "ORACLE_ROLE"),
                                        (4, "EXPERT_ROLE"), (5, "REGISTRAR_ROLE")])
def test_role_codes_map_to_the_roles_of_the_spec(driver, code, name):
    assert driver.view("access", "roleFor", code)[0] == keccak(text=name)


def test_the_deployer_holds_admin_and_registrar_but_not_oracle_or_developer(driver, admin):
    assert has_role(driver, "DEFAULT_ADMIN_ROLE", admin) and has_role(driver, "REGISTRAR_ROLE", admin)
    assert not has_role(driver, "ORACLE_ROLE", admin) and not has_role(driver, "DEVELOPER_ROLE", admin)


@pytest.mark.parametrize("who, code, roles", [
    ("user", 1, {"USER_ROLE"}), ("developer", 2, {"USER_ROLE", "DEVELOPER_ROLE"}),
    ("expert", 1, {"USER_ROLE", "EXPERT_ROLE"}), ("registrar", 1, {"USER_ROLE", "REGISTRAR_ROLE"})])
def test_registration_grants_the_role_of_its_code(driver, world, who, code, roles):
    """A user gets USER_ROLE, a developer USER_ROLE and DEVELOPER_ROLE (a developer also chats and
    rates); the expert and the registrar here were registered as users and granted by the admin."""
    assert {r for r in ROLE if has_role(driver, r, world[who])} == roles
    assert driver.view("identity", "registeredRole", world[who].address)[0] == code


# ----------------------------------------------------------------------------------------------
# Identity.register: REGISTRAR only
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", wrong("admin", "registrar"))
def test_register_reverts_for_a_non_registrar(driver, world, caller):
    newcomer = new_account()
    err = expect_revert(lambda: driver.transact(world[caller], "identity", "register", newcomer.address, 1, ""),
                        "Unauthorized")
    assert_unauthorized(err, "REGISTRAR_ROLE", world[caller])
    assert driver.view("identity", "isRegistered", newcomer.address)[0] is False


@pytest.mark.parametrize("caller", ["admin", "registrar"])
@pytest.mark.parametrize("code, role", [(1, "USER_ROLE"), (2, "DEVELOPER_ROLE")])
def test_register_succeeds_for_a_registrar(fresh_chain, world, caller, code, role):
    driver, newcomer = fresh_chain, new_account()
    receipt = driver.transact(world[caller], "identity", "register", newcomer.address, code, "ipfs://p")
    assert driver.view("identity", "isRegistered", newcomer.address)[0] is True
    assert driver.view("identity", "registeredAt", newcomer.address)[0] == receipt.timestamp
    assert has_role(driver, role, newcomer) and has_role(driver, "USER_ROLE", newcomer)


@pytest.mark.parametrize("caller", ["admin", "registrar"])
@pytest.mark.parametrize("code, role", [(3, "ORACLE_ROLE"), (4, "EXPERT_ROLE"), (5, "REGISTRAR_ROLE")])
def test_a_registrar_cannot_register_an_operator_or_expert_account(driver, world, caller, code, role):
    """ORACLE, REGISTRAR and EXPERT stay with the admin; a registrar (which the admin may
    have made of anyone) registering one is refused and changes nothing."""
    newcomer = new_account()
    err = expect_revert(lambda: driver.transact(world[caller], "identity", "register", newcomer.address, code, ""),
                        "RoleNotRegistrable")
    assert err.args_[0] == code
    assert driver.view("identity", "isRegistered", newcomer.address)[0] is False
    assert not any(has_role(driver, r, newcomer) for r in ROLE)


# ----------------------------------------------------------------------------------------------
# Reputation.addContext: admin only
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", wrong("admin"))
def test_add_context_reverts_for_a_non_admin(driver, world, caller):
    ctx = b"\xc9" * 32
    err = expect_revert(lambda: driver.transact(world[caller], "reputation", "addContext", ctx, "x"), "Unauthorized")
    assert_unauthorized(err, "DEFAULT_ADMIN_ROLE", world[caller])
    assert driver.view("reputation", "contextExists", ctx)[0] is False


def test_add_context_succeeds_for_the_admin(fresh_chain, world):
    fresh_chain.transact(world["admin"], "reputation", "addContext", b"\xc9" * 32, "x")
    assert fresh_chain.view("reputation", "contextExists", b"\xc9" * 32)[0] is True


# ----------------------------------------------------------------------------------------------
# Reputation.addModel / addModelBatch: DEVELOPER only
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", wrong("developer"))
def test_add_model_reverts_for_a_non_developer(driver, world, caller):
    model = b"\xa9" * 32
    err = expect_revert(lambda: driver.transact(world[caller], "reputation", "addModel", model, "x"), "Unauthorized")
    assert_unauthorized(err, "DEVELOPER_ROLE", world[caller])
    assert driver.view("reputation", "modelExists", model)[0] is False


@pytest.mark.parametrize("caller", wrong("developer"))
def test_add_model_batch_reverts_for_a_non_developer(driver, world, caller):
    models = [b"\xa8" * 32, b"\xa9" * 32]
    err = expect_revert(lambda: driver.transact(world[caller], "reputation", "addModelBatch", models, ["x", "y"]),
                        "Unauthorized")
    assert_unauthorized(err, "DEVELOPER_ROLE", world[caller])
    assert not any(driver.view("reputation", "modelExists", m)[0] for m in models)


def test_add_model_and_add_model_batch_succeed_for_a_developer(fresh_chain, world):
    dev = world["developer"]
    fresh_chain.transact(dev, "reputation", "addModel", b"\xa7" * 32, "x")
    fresh_chain.transact(dev, "reputation", "addModelBatch", [b"\xa8" * 32, b"\xa9" * 32], ["x", "y"])
    for m in (b"\xa7" * 32, b"\xa8" * 32, b"\xa9" * 32):
        assert fresh_chain.view("reputation", "modelOwner", m)[0] == dev.address


# ----------------------------------------------------------------------------------------------
# Reputation.updateModelMetadata: only the model's owner (no role needed)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("caller", wrong("developer"))
def test_update_model_metadata_reverts_for_anyone_but_the_models_owner(driver, world, caller):
    err = expect_revert(lambda: driver.transact(world[caller], "reputation", "updateModelMetadata", M1, "bafy2"),
                        "NotModelOwner")
    assert err.args_[0] == M1 and err.args_[1].lower() == world[caller].address.lower()


def test_update_model_metadata_succeeds_for_the_models_owner(fresh_chain, world):
    receipt = fresh_chain.transact(world["developer"], "reputation", "updateModelMetadata", M1, "bafy2")
    assert receipt.status == 1 and len(receipt.raw["logs"]) == 1
    assert fresh_chain.view("reputation", "modelOwner", M1)[0] == world["developer"].address


# ----------------------------------------------------------------------------------------------
# Reputation.autoEval / autoEvalBatch: ORACLE only
# ----------------------------------------------------------------------------------------------
def auto_eval_args(world, iid=b"\x22" * 32):
    return (iid, M1, C1, world["user"].address, True, 5 * 10**17, 5 * 10**17, "ipfs://e")


@pytest.mark.parametrize("caller", wrong("oracle"))
def test_auto_eval_reverts_for_a_non_oracle(driver, world, caller):
    args = auto_eval_args(world)
    err = expect_revert(lambda: driver.transact(world[caller], "reputation", "autoEval", *args), "Unauthorized")
    assert_unauthorized(err, "ORACLE_ROLE", world[caller])
    assert driver.view("reputation", "interactionExists", args[0])[0] is False


@pytest.mark.parametrize("caller", wrong("oracle"))
def test_auto_eval_batch_reverts_for_a_non_oracle(driver, world, caller):
    rows = [auto_eval_args(world, b"\x22" * 32), auto_eval_args(world, b"\x23" * 32)]
    columns = [list(col) for col in zip(*rows)]
    err = expect_revert(lambda: driver.transact(world[caller], "reputation", "autoEvalBatch", *columns),
                        "Unauthorized")
    assert_unauthorized(err, "ORACLE_ROLE", world[caller])
    assert not any(driver.view("reputation", "interactionExists", r[0])[0] for r in rows)


def test_auto_eval_and_auto_eval_batch_succeed_for_the_oracle(fresh_chain, world):
    fresh_chain.transact(world["oracle"], "reputation", "autoEval", *auto_eval_args(world))
    rows = [auto_eval_args(world, b"\x23" * 32), auto_eval_args(world, b"\x24" * 32)]
    fresh_chain.transact(world["oracle"], "reputation", "autoEvalBatch", *[list(c) for c in zip(*rows)])
    for iid in (b"\x22" * 32, b"\x23" * 32, b"\x24" * 32):
        assert fresh_chain.view("reputation", "interactionExists", iid)[0] is True


def test_the_admin_is_no_oracle_until_granted_and_a_granted_oracle_can_evaluate(fresh_chain, world):
    driver, admin = fresh_chain, world["admin"]
    expect_revert(lambda: driver.transact(admin, "reputation", "autoEval", *auto_eval_args(world)), "Unauthorized")
    driver.transact(admin, "access", "grantRole", ROLE["ORACLE_ROLE"], admin.address)
    driver.transact(admin, "reputation", "autoEval", *auto_eval_args(world))
    assert driver.view("reputation", "interactionExists", b"\x22" * 32)[0] is True


def test_a_revoked_oracle_can_no_longer_evaluate(fresh_chain, world):
    driver, oracle = fresh_chain, world["oracle"]
    driver.transact(world["admin"], "access", "revokeRole", ROLE["ORACLE_ROLE"], oracle.address)
    expect_revert(lambda: driver.transact(oracle, "reputation", "autoEval", *auto_eval_args(world)), "Unauthorized")


# ----------------------------------------------------------------------------------------------
# Reputation.humEval: only the interaction's user
# ----------------------------------------------------------------------------------------------
ANSWERS = (4, 5, 3, 4, 4, 2)


@pytest.mark.parametrize("caller", wrong("user"))
def test_hum_eval_reverts_for_anyone_but_the_interactions_user(driver, world, caller):
    expect_revert(lambda: driver.transact(world[caller], "reputation", "humEval", I1, *ANSWERS), "NotInteractionUser")
    assert driver.view("reputation", "interaction", I1)[8] is False  # humanDone


def test_a_suspended_user_is_named_in_no_new_auto_eval_and_rates_nothing(fresh_chain, world):
    """The admin revokes USER_ROLE of a suspended account; autoEval naming it and its own
    humEval are then refused, and nothing changes; granted back, both work again."""
    driver, user = fresh_chain, world["user"]
    driver.transact(world["admin"], "access", "revokeRole", ROLE["USER_ROLE"], user.address)
    new_id = b"\x33" * 32
    err = expect_revert(lambda: driver.transact(world["oracle"], "reputation", "autoEval", new_id, M1, C1,
                                                user.address, True, 5 * 10**17, 5 * 10**17, "ipfs://e"), "NotAUser")
    assert err.args_[0].lower() == user.address.lower()
    assert driver.view("reputation", "interactionExists", new_id)[0] is False
    expect_revert(lambda: driver.transact(user, "reputation", "humEval", I1, *ANSWERS), "NotAUser")
    assert driver.view("reputation", "interaction", I1)[8] is False
    driver.transact(world["admin"], "access", "grantRole", ROLE["USER_ROLE"], user.address)
    driver.transact(user, "reputation", "humEval", I1, *ANSWERS)
    assert driver.view("reputation", "interaction", I1)[8] is True


def test_hum_eval_succeeds_for_the_interactions_user(fresh_chain, world):
    fresh_chain.transact(world["user"], "reputation", "humEval", I1, *ANSWERS)
    assert fresh_chain.view("reputation", "interaction", I1)[8] is True


@pytest.mark.parametrize("caller", ["stranger", "admin", "other_user"])
def test_update_reputation_is_open_to_anyone_once_the_human_part_is_in(fresh_chain, world, caller):
    fresh_chain.transact(world["user"], "reputation", "humEval", I1, *ANSWERS)
    fresh_chain.transact(world[caller], "reputation", "updateReputation", I1)
    assert fresh_chain.view("reputation", "interaction", I1)[9] is True


# ----------------------------------------------------------------------------------------------
# LLMChainAccess.setIdentity / grantRole / revokeRole: admin only; grantRoleFromIdentity: Identity only
# ----------------------------------------------------------------------------------------------
def assert_access_denied(err: Reverted, caller, role="DEFAULT_ADMIN_ROLE") -> None:
    assert err.args_[0].lower() == caller.address.lower()
    assert err.args_[1] == ROLE[role]


@pytest.mark.parametrize("caller", wrong("admin"))
def test_set_identity_reverts_for_a_non_admin(driver, world, caller):
    before = driver.view("access", "identity")[0]
    err = expect_revert(lambda: driver.transact(world[caller], "access", "setIdentity", world[caller].address),
                        "AccessControlUnauthorizedAccount")
    assert_access_denied(err, world[caller])
    assert driver.view("access", "identity")[0] == before == driver.deployment.identity


def test_set_identity_succeeds_for_the_admin_once(fresh_chain, world):
    driver, admin = fresh_chain, world["admin"]
    # the deployed ACSC is already wired: the admin passes the role check and hits "once"
    expect_revert(lambda: driver.transact(admin, "access", "setIdentity", admin.address), "IdentityAlreadySet")
    address, _ = _create(driver.client, admin, "LLMChainAccess", ["address"], [admin.address],
                         driver.client.nonce(admin.address, "pending"))
    other = Driver(driver.client, dataclasses.replace(driver.deployment, access=address))
    stranger = world["stranger"]
    expect_revert(lambda: other.transact(stranger, "access", "setIdentity", stranger.address),
                  "AccessControlUnauthorizedAccount")
    other.transact(admin, "access", "setIdentity", driver.deployment.identity)
    assert other.view("access", "identity")[0] == driver.deployment.identity


@pytest.mark.parametrize("role", ["ORACLE_ROLE", "DEVELOPER_ROLE", "REGISTRAR_ROLE", "DEFAULT_ADMIN_ROLE"])
@pytest.mark.parametrize("caller", wrong("admin"))
def test_grant_role_reverts_for_a_non_admin(driver, world, caller, role):
    target = world["stranger"] if caller != "stranger" else world["user"]
    err = expect_revert(lambda: driver.transact(world[caller], "access", "grantRole", ROLE[role], target.address),
                        "AccessControlUnauthorizedAccount")
    assert_access_denied(err, world[caller])
    assert not has_role(driver, role, target)


@pytest.mark.parametrize("caller", wrong("admin"))
def test_revoke_role_reverts_for_a_non_admin(driver, world, caller):
    err = expect_revert(lambda: driver.transact(world[caller], "access", "revokeRole", ROLE["ORACLE_ROLE"],
                                                world["oracle"].address), "AccessControlUnauthorizedAccount")
    assert_access_denied(err, world[caller])
    assert has_role(driver, "ORACLE_ROLE", world["oracle"])


@pytest.mark.parametrize("role", ["ORACLE_ROLE", "DEVELOPER_ROLE", "EXPERT_ROLE", "USER_ROLE", "REGISTRAR_ROLE"])
def test_grant_role_succeeds_for_the_admin(fresh_chain, world, role):
    target = world["stranger"]
    fresh_chain.transact(world["admin"], "access", "grantRole", ROLE[role], target.address)
    assert has_role(fresh_chain, role, target)


@pytest.mark.parametrize("caller", CALLERS)
def test_only_the_identity_contract_may_grant_roles_by_code(driver, world, caller):
    target = new_account()
    err = expect_revert(lambda: driver.transact(world[caller], "access", "grantRoleFromIdentity", target.address, 3),
                        "NotIdentity")
    assert err.args_[0].lower() == world[caller].address.lower()
    assert not has_role(driver, "ORACLE_ROLE", target)
