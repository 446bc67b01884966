"""Drive the deployed contracts directly from tests: sign, send, wait, decode reverts."""

from __future__ import annotations

from dataclasses import dataclass

from eth_account import Account
from eth_account.signers.local import LocalAccount

from apps.chain.client import ChainClient, Reverted, RpcError, from_hex
from apps.chain.ledger import Deployment, Ledger


@dataclass
class Receipt:
    status: int
    block: int
    gas_used: int
    timestamp: int
    raw: dict


class Driver:
    """A thin test helper over one node and one deployment (automine node)."""

    def __init__(self, client: ChainClient, deployment: Deployment):
        self.client = client
        self.ledger = Ledger(client, deployment)
        self.deployment = deployment

    def transact(self, account: LocalAccount, contract: str, function: str, *args, gas: int = 3_000_000) -> Receipt:
        """Send a call and wait for it; a revert raises Reverted with the contract's error name."""
        abi = self.ledger.abis[contract]
        to = self.ledger.address(contract)
        data = abi.fn(function).encode(*args)
        try:
            self.client.call(to, data, "latest", sender=account.address)
        except Reverted as exc:
            name, err_args = abi.decode_revert(exc.data)
            raise Reverted(name, err_args, exc.data) from None
        nonce = self.client.nonce(account.address, "pending")
        signed = self.client.sign(account, to, data, nonce, gas)
        err = self.client.send_raw([signed.raw])[0]
        if err is not None:
            raise err
        r = self.client.wait_receipt(signed.hash)
        block = self.client.get_block(int(r["blockNumber"], 16))
        return Receipt(int(r["status"], 16), int(r["blockNumber"], 16), int(r["gasUsed"], 16),
                       int(block["timestamp"], 16), r)

    def view(self, contract: str, function: str, *args):
        return self.ledger.view(contract, function, *args)

    def set_next_timestamp(self, ts: int) -> None:
        self.client.request("evm_setNextBlockTimestamp", [ts])

    def latest_timestamp(self) -> int:
        return int(self.client.get_block("latest")["timestamp"], 16)

    def snapshot(self) -> str:
        return self.client.request("evm_snapshot")

    def revert_to(self, snap: str) -> None:
        assert self.client.request("evm_revert", [snap]) is True

    def fund(self, address: str, wei: int = 10**20) -> None:
        self.client.request("anvil_setBalance", [address, hex(wei)])


def new_account() -> LocalAccount:
    return Account.create()


__all__ = ["Driver", "Receipt", "Reverted", "RpcError", "new_account", "from_hex"]


def deploy_on_interval_node(node, deployment_file) -> Ledger:
    """Deploy the contracts on a started interval-mining `node` at once (automine for the deployment,
    not a transaction a second), grant the oracle its role, mine every `node.block_time` seconds
    again, and save the deployment to `deployment_file`."""
    from apps.chain.client import account_from_key
    from apps.chain.deploy import deploy, grant_role
    from apps.chain.node import DEV_KEYS

    client = ChainClient(node.url)
    admin = account_from_key(DEV_KEYS[0])
    client.request("evm_setIntervalMining", [0])
    client.request("evm_setAutomine", [True])
    deployment = deploy(client, admin)
    grant_role(client, deployment, admin, "ORACLE_ROLE", account_from_key(DEV_KEYS[1]).address)
    client.request("evm_setAutomine", [False])
    client.request("evm_setIntervalMining", [node.block_time])
    deployment.save(deployment_file)
    return Ledger(client, deployment)
