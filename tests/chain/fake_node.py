"""A node faked at the client's transport, for the submitter's unit tests: ChainClient itself runs
(batches, receipts, signing), only its JSON-RPC `_post` is answered from memory. The fake holds a
pool and a chain of blocks; a test mines, restarts (the pool is lost), drops blocks or refuses
transactions to put the submitter in the situation it tests. Integration tests use anvil."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

import rlp
from eth_account import Account
from eth_utils import keccak

from apps.chain.client import ChainClient, RpcError, from_hex, to_hex
from apps.chain.ledger import Deployment, Ledger
from apps.chain.node import DEV_KEYS

CHAIN_ID = 31337
ORACLE = Account.from_key(DEV_KEYS[1]).address
RELAYER = Account.from_key(DEV_KEYS[2]).address
DEPLOYMENT = Deployment(chainId=CHAIN_ID, identity="0x" + "11" * 20, access="0x" + "22" * 20,
                        reputation="0x" + "33" * 20, deployBlock=0, forwarder="0x" + "44" * 20)


class FakeNode(ChainClient):
    def __init__(self) -> None:
        super().__init__("http://fake-node.invalid", gas_price="0", retries=0)
        self.head = 10
        self.clock_ahead = 0  # how far the chain's clock runs ahead of this machine's
        self.fork = 0  # a reorganisation changes the hash of every block from then on
        self.pool: dict[str, bytes] = {}  # tx hash -> signed bytes, not mined yet
        self.receipts_by_hash: dict[str, dict] = {}
        self.mined_in: dict[int, list[tuple[str, bytes]]] = {}  # block -> its transactions
        self.count: Counter = Counter()  # address -> transactions in its chain ("latest" nonce)
        self.refuse: Callable[[bytes], str | None] = lambda raw: None  # an error message, or None
        self.forwarder_nonces: Counter = Counter()  # signer (lower case) -> its next forwarder nonce
        self.reverts: Callable[[bytes], bool] = lambda raw: False  # mined with status 0
        self.sent: list[list[bytes]] = []  # each JSON-RPC batch of eth_sendRawTransaction
        self.methods: Counter = Counter()

    # -- what a test does to the node ----------------------------------------------------------
    def mine(self) -> int:
        """One block with every pooled transaction whose nonce is its sender's next."""
        self.head += 1
        block: list[tuple[str, bytes]] = []
        progress = True
        while progress:
            progress = False
            for tx_hash, raw in sorted(self.pool.items(), key=lambda kv: nonce_of(kv[1])):
                sender = sender_of(raw)
                if nonce_of(raw) == self.count[sender]:
                    self.count[sender] += 1
                    del self.pool[tx_hash]
                    block.append((tx_hash, raw))
                    self.receipts_by_hash[tx_hash] = {
                        "blockNumber": hex(self.head), "blockHash": self.block_hash(self.head),
                        "status": "0x0" if self.reverts(raw) else "0x1",
                        "gasUsed": hex(21_000), "logs": []}
                    progress = True
        self.mined_in[self.head] = block
        return self.head

    def lose_blocks(self, n: int) -> None:
        """The node comes back without its last `n` blocks and with an empty pool."""
        for number in range(self.head - n + 1, self.head + 1):
            for tx_hash, raw in self.mined_in.pop(number, []):
                self.receipts_by_hash.pop(tx_hash, None)
                self.count[sender_of(raw)] -= 1
        self.head -= n
        self.pool.clear()

    def restart(self) -> None:
        """A restart without a saved pool: its pending transactions are gone."""
        self.pool.clear()

    def block_hash(self, number: int) -> str:
        return to_hex(keccak(text=f"{self.fork}:{number}"))

    # -- the JSON-RPC it answers ---------------------------------------------------------------
    def _post(self, body: Any) -> Any:
        if isinstance(body, list):
            raws = [from_hex(call["params"][0]) for call in body if call["method"] == "eth_sendRawTransaction"]
            if raws:
                self.sent.append(raws)
            return [self._answer(call) for call in body]
        return self._answer(body)

    def _answer(self, call: dict) -> dict:
        self.methods[call["method"]] += 1
        try:
            result = getattr(self, call["method"])(*call["params"])
        except RpcError as exc:
            return {"jsonrpc": "2.0", "id": call["id"], "error": {"code": exc.code, "message": exc.message}}
        return {"jsonrpc": "2.0", "id": call["id"], "result": result}

    def eth_chainId(self) -> str:
        return hex(CHAIN_ID)

    def eth_blockNumber(self) -> str:
        return hex(self.head)

    def eth_getBlockByNumber(self, ref: str, _full: bool) -> dict | None:
        number = self.head if ref == "latest" else int(ref, 16)
        if number > self.head:
            return None
        return {"number": hex(number), "hash": self.block_hash(number), "parentHash": self.block_hash(number - 1),
                "timestamp": hex(int(time.time()) + self.clock_ahead), "baseFeePerGas": "0x0"}

    def eth_getTransactionCount(self, address: str, tag: str) -> str:
        count = self.count[address]
        if tag == "pending":
            held = {nonce_of(raw) for raw in self.pool.values() if sender_of(raw) == address}
            while count in held:
                count += 1
        return hex(count)

    def eth_sendRawTransaction(self, data: str) -> str:
        raw = from_hex(data)
        tx_hash = to_hex(keccak(raw))
        if tx_hash in self.pool or tx_hash in self.receipts_by_hash:
            raise RpcError(-32000, "already known")
        if nonce_of(raw) < self.count[sender_of(raw)]:
            raise RpcError(-32000, "nonce too low")
        error = self.refuse(raw)
        if error:
            raise RpcError(-32000, error)
        self.pool[tx_hash] = raw
        return tx_hash

    def eth_call(self, tx: dict, _block: str) -> str:
        """Only the forwarder's nonces(address): the next nonce of each signer."""
        data = from_hex(tx["data"])
        if tx["to"].lower() != DEPLOYMENT.forwarder.lower() or len(data) != 36:
            raise RpcError(-32000, "the fake node only answers the forwarder's nonces")
        signer = "0x" + data[-20:].hex()
        return to_hex(self.forwarder_nonces[signer].to_bytes(32, "big"))

    def eth_getTransactionReceipt(self, tx_hash: str) -> dict | None:
        return self.receipts_by_hash.get(tx_hash)

    def eth_getTransactionByHash(self, tx_hash: str) -> dict | None:
        return {"hash": tx_hash} if tx_hash in self.pool or tx_hash in self.receipts_by_hash else None


def nonce_of(raw: bytes) -> int:
    return int.from_bytes(rlp.decode(raw)[0], "big")


def data_of(raw: bytes) -> bytes:
    """The call data of a legacy transaction (the fake's gas price is fixed, so every one is legacy)."""
    return rlp.decode(raw)[5]


def sender_of(raw: bytes) -> str:
    return Account.recover_transaction(raw)


def fake_ledger(settings) -> Ledger:
    """A Ledger over a FakeNode, with the oracle and relayer keys configured and finality 2 blocks."""
    settings.LLMCHAIN_ORACLE_KEY = DEV_KEYS[1]
    settings.LLMCHAIN_RELAYER_KEY = DEV_KEYS[2]
    settings.LLMCHAIN_FINALITY = "2"
    settings.LLMCHAIN_POA = False
    return Ledger(FakeNode(), DEPLOYMENT)


def queue(n: int, *, function: str = "updateReputation", sender: str = ORACLE, start: int = 0, **fields):
    """`n` calls queued for `sender` (interaction ids start+1..start+n)."""
    from apps.chain.models import OutboxItem

    return [OutboxItem.objects.create(function=function, sender_address=sender, key=f"{function}:{start + i}",
                                      payload={"interactionId": "0x" + f"{start + i:064x}"}, **fields)
            for i in range(1, n + 1)]


def queue_signed(wallet, nonces: list[int], *, deadline: int | None = None, start: int = 0, **changes):
    """humEval requests signed by `wallet` (an eth_account LocalAccount) with these forwarder nonces,
    queued on the relayer's lane in the order given; `changes` alter the request before signing."""
    from dataclasses import replace

    from apps.chain.ledger import RELAYABLE
    from apps.chain.metatx import ForwardRequest, sign_request, to_json
    from apps.chain.models import OutboxItem

    ledger = Ledger(None, DEPLOYMENT)
    out = []
    for i, nonce in enumerate(nonces, start=start + 1):
        payload = {"interactionId": "0x" + f"{i:064x}", "reliability": 4, "completeness": 4, "utility": 4,
                   "familiarity": 3, "trust": 4, "uncertainty": 2}
        to, data = ledger.request_calldata("humEval", payload)
        request = ForwardRequest(sender=wallet.address, to=to, gas=RELAYABLE["humEval"], nonce=nonce,
                                 deadline=deadline or int(time.time()) + 3600, data=data)
        request = sign_request(replace(request, **changes), wallet.key, CHAIN_ID, DEPLOYMENT.forwarder)
        out.append(OutboxItem.objects.create(function="humEval", sender_address=RELAYER, key=f"humEval:{i}",
                                             payload=payload, signer=wallet.address, request=to_json(request),
                                             relay_nonce=nonce))
    return out
