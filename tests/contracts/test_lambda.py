"""λ chosen by the deployment: the Reputation contract takes the time constant of
F_D at deployment, keeps it (lambdaWad), refuses one outside [1e-6, 0.03] per minute, and weighs
ratings by it exactly as the mirror does with the same λ."""

from __future__ import annotations

import pytest

from apps.chain.abi import ContractAbi
from apps.chain.deploy import DeployError, _create, deploy
from lib.reputation import MAX_LAMBDA_WAD, MIN_LAMBDA_WAD, WAD, decay_factor, human_weight
from tests.support import Driver

pytestmark = pytest.mark.chain

TYPES = ["address", "address", "address", "uint256"]


def _reputation(driver, admin, lam: int) -> Driver:
    d = driver.deployment
    address, _ = _create(driver.client, admin, "Reputation", TYPES, [d.access, d.identity, d.forwarder, lam],
                         driver.client.nonce(admin.address, "pending"))
    from dataclasses import replace
    return Driver(driver.client, replace(d, reputation=address))


def test_the_deployed_lambda_is_the_setting_and_readable_on_chain(driver, settings):
    assert settings.LLMCHAIN_DECAY_LAMBDA == "0.001"
    assert driver.view("reputation", "lambdaWad") == (10**15,)
    assert driver.ledger.lambda_wad == 10**15


@pytest.mark.parametrize("lam", [10**16, MIN_LAMBDA_WAD, MAX_LAMBDA_WAD])
def test_the_contract_weighs_by_its_lambda_as_the_mirror_does(fresh_chain, admin, lam):
    other = _reputation(fresh_chain, admin, lam)
    assert other.view("reputation", "lambdaWad") == (lam,)
    for minutes in (0, 1, 7, 60, 600, 1440):
        d = minutes * WAD
        assert other.view("reputation", "decayFactor", d) == (decay_factor(d, lam),)
        assert other.view("reputation", "humanWeight", WAD // 3, d) == (human_weight(WAD // 3, d, lam),)


@pytest.mark.parametrize("lam", [0, MIN_LAMBDA_WAD - 1, MAX_LAMBDA_WAD + 1, 10**18])
def test_a_lambda_out_of_range_is_refused_at_deployment(fresh_chain, admin, lam):
    with pytest.raises(DeployError):
        deploy(fresh_chain.client, admin, lambda_wad=lam)  # refused before anything is sent
    nonce = fresh_chain.client.nonce(admin.address, "pending")
    d = fresh_chain.deployment
    with pytest.raises(DeployError) as info:  # the contract itself refuses it too
        _create(fresh_chain.client, admin, "Reputation", TYPES, [d.access, d.identity, d.forwarder, lam], nonce)
    bad_lambda = next(e for e in ContractAbi.load("Reputation").errors.values() if e.name == "BadLambda")
    assert f"custom error 0x{bad_lambda.selector.hex()}" in str(info.value)  # BadLambda(lam)
    assert fresh_chain.client.nonce(admin.address, "pending") == nonce  # nothing was mined


def test_a_deployment_with_the_setting_changed_takes_it(fresh_chain, admin, settings):
    settings.LLMCHAIN_DECAY_LAMBDA = "0.01"
    other = Driver(fresh_chain.client, deploy(fresh_chain.client, admin))
    assert other.view("reputation", "lambdaWad") == (10**16,)
    assert other.ledger.lambda_wad == 10**16
