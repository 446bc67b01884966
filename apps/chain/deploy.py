"""Deploy and wire the contracts (access, identity, the forwarder, reputation), with locally signed
transactions only."""

from __future__ import annotations

from collections.abc import Iterable

from eth_abi import encode
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address

from lib.reputation import lambda_ok, lambda_wad_from

from .abi import ContractAbi
from .client import ChainClient, ChainError, from_hex
from .ledger import Deployment


class DeployError(ChainError):
    pass


def _send(client: ChainClient, account: LocalAccount, to: str | None, data: bytes, nonce: int) -> dict:
    try:
        gas = int(client.estimate_gas(account.address, to, data) * 1.2) + 10_000
    except ChainError as exc:
        raise DeployError(f"the node refuses the deployment step: {exc}") from exc
    signed = client.sign(account, to, data, nonce, gas)
    errors = client.send_raw([signed.raw])
    if errors[0] is not None:
        raise DeployError(f"the node refused the transaction: {errors[0]}")
    receipt = client.wait_receipt(signed.hash)
    if int(receipt["status"], 16) != 1:
        raise DeployError(f"transaction {receipt['transactionHash']} reverted")
    return receipt


def _create(client: ChainClient, account: LocalAccount, name: str, types: list[str], args: list, nonce: int) -> tuple[str, int]:
    abi = ContractAbi.load(name)
    data = from_hex(abi.bytecode) + encode(types, args)
    receipt = _send(client, account, None, data, nonce)
    return to_checksum_address(receipt["contractAddress"]), int(receipt["blockNumber"], 16)


def deploy(client: ChainClient, admin: LocalAccount, lambda_wad: int | None = None) -> Deployment:
    """LLMChainAccess(admin), Identity(access), Forwarder(), Reputation(access, identity,
    forwarder, lambda), then let the Identity contract grant roles at registration
    (access.setIdentity). lambda (1e18 per minute) is LLMCHAIN_DECAY_LAMBDA unless given."""
    if lambda_wad is None:
        from django.conf import settings

        lambda_wad = lambda_wad_from(settings.LLMCHAIN_DECAY_LAMBDA)
    if not lambda_ok(lambda_wad):
        raise DeployError(f"lambda {lambda_wad} (1e18 per minute) is outside [1e12, 3e16]")
    nonce = client.nonce(admin.address, "pending")
    access, first_block = _create(client, admin, "LLMChainAccess", ["address"], [admin.address], nonce)
    identity, _ = _create(client, admin, "Identity", ["address"], [access], nonce + 1)
    forwarder, _ = _create(client, admin, "Forwarder", [], [], nonce + 2)
    reputation, _ = _create(client, admin, "Reputation", ["address", "address", "address", "uint256"],
                            [access, identity, forwarder, lambda_wad], nonce + 3)
    set_identity = ContractAbi.load("LLMChainAccess").fn("setIdentity").encode(identity)
    _send(client, admin, access, set_identity, nonce + 4)
    return Deployment(chainId=client.chain_id, identity=identity, access=access, reputation=reputation,
                      deployBlock=first_block, forwarder=forwarder)


def grant_oracle_roles(client: ChainClient, deployment: Deployment, admin: LocalAccount,
                       oracles: Iterable[str]) -> list[str]:
    """ORACLE_ROLE to each oracle address that does not hold it yet; returns those granted."""
    granted = []
    for oracle in dict.fromkeys(oracles):
        if not has_role(client, deployment, "ORACLE_ROLE", oracle):
            grant_role(client, deployment, admin, "ORACLE_ROLE", oracle)
            granted.append(oracle)
    return granted


def grant_role(client: ChainClient, deployment: Deployment, admin: LocalAccount, role_name: str, account: str) -> None:
    """Grant an ACSC role directly (admin): e.g. ORACLE_ROLE to the oracle's key."""
    abi = ContractAbi.load("LLMChainAccess")
    _send(client, admin, deployment.access, abi.fn("grantRole").encode(role_id(role_name), account),
          client.nonce(admin.address, "pending"))


def role_id(role_name: str) -> bytes:
    from eth_utils import keccak

    return b"\x00" * 32 if role_name == "DEFAULT_ADMIN_ROLE" else keccak(text=role_name)


def has_role(client: ChainClient, deployment: Deployment, role_name: str, account: str) -> bool:
    data = ContractAbi.load("LLMChainAccess").fn("hasRole").encode(role_id(role_name), account)
    return bool(int.from_bytes(client.call(deployment.access, data), "big"))
