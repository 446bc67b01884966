"""The one adapter to an EVM node over JSON-RPC (anvil locally, Hyperledger Besu in production).

Transactions are always signed here and sent with eth_sendRawTransaction: Besu manages no
accounts. Errors are typed and say whether trying again can help.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import requests
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address
from hexbytes import HexBytes

from lib.errors import ServiceError


class ChainError(ServiceError):
    """Base of every chain failure. `permanent` says whether the same call can never succeed."""

    permanent = True


class ChainUnavailable(ChainError):
    """The node could not be reached or answered with a server error."""

    permanent = False


class RpcError(ChainError):
    """The node answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(f"JSON-RPC error {code}: {message}")
        self.code, self.message, self.data = code, message, data

    # Messages from geth, Besu and anvil for conditions that pass by themselves.
    # An unfunded sender waits for its funds rather than failing its calls.
    TRANSIENT = ("busy", "timeout", "temporarily", "try again", "too many requests", "rate limit",
                 "insufficient funds")

    @property
    def permanent(self) -> bool:  # type: ignore[override]
        text = self.message.lower()
        return not any(t in text for t in self.TRANSIENT)

    @property
    def already_known(self) -> bool:
        text = self.message.lower()
        return "already known" in text or "known transaction" in text or "already imported" in text

    @property
    def nonce_too_low(self) -> bool:
        text = self.message.lower()
        return "nonce too low" in text or "nonce is too low" in text or "lower than" in text and "nonce" in text

    @property
    def revert_data(self) -> bytes | None:
        data = self.data
        if isinstance(data, dict):
            data = data.get("data")
        if isinstance(data, str) and data.startswith("0x"):
            return bytes.fromhex(data[2:])
        return None


class Reverted(ChainError):
    """A call or transaction was reverted by the contract."""

    def __init__(self, name: str, args: tuple = (), data: bytes = b""):
        super().__init__(f"reverted: {name}{args if args else ''}")
        self.name, self.args_, self.data = name, args, data


@dataclass(frozen=True)
class SignedTx:
    raw: bytes
    hash: bytes
    nonce: int
    sender: str


def to_hex(b: bytes) -> str:
    return "0x" + bytes(b).hex()


def from_hex(s: str | None) -> bytes:
    return bytes.fromhex(s[2:]) if s else b""


def chain_time(offset: int | None) -> int:
    """The chain's clock (unix seconds), which a relayed request's deadline is checked against: this
    machine's clock plus `offset`, how far the chain's latest block was ahead of it when last read
    (ChainClient.clock_offset). Never behind this machine's clock (the latest block's time lags the
    chain's by up to a block interval), and this machine's clock when the offset is unknown (None).
    Every reader of the chain's clock comes here; they differ only in where the offset comes from."""
    return int(time.time()) + max(0, offset or 0)


class ChainClient:
    def __init__(self, url: str, *, poa: bool = False, gas_price: str = "auto",
                 timeout: float = 30, retries: int = 3):
        self.url = url
        self.poa = poa
        self.gas_price = gas_price
        self.timeout = timeout
        self.retries = retries
        self.session = requests.Session()
        self._ids = itertools.count(1)
        self._fees: tuple[float, dict] | None = None

    # -- transport ---------------------------------------------------------------------------
    def _post(self, body: Any) -> Any:
        delay = 0.2
        for attempt in range(self.retries + 1):
            try:
                resp = self.session.post(self.url, json=body, timeout=(min(3, self.timeout), self.timeout))
                if resp.status_code >= 500 or resp.status_code == 429:
                    raise ChainUnavailable(f"node answered HTTP {resp.status_code}")
                resp.raise_for_status()
                return resp.json()
            except (requests.ConnectionError, requests.Timeout, ChainUnavailable) as exc:
                if attempt == self.retries:
                    raise exc if isinstance(exc, ChainUnavailable) else ChainUnavailable(
                        f"cannot reach the node at {self.url}: {exc.__class__.__name__}") from exc
                time.sleep(delay)
                delay *= 2
            except requests.RequestException as exc:
                raise ChainError(f"bad answer from the node at {self.url}: {exc}") from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _result(reply: dict) -> Any:
        if "error" in reply:
            err = reply["error"]
            raise RpcError(err.get("code", 0), err.get("message", ""), err.get("data"))
        return reply.get("result")

    def request(self, method: str, params: list | None = None) -> Any:
        return self._result(self._post({"jsonrpc": "2.0", "id": next(self._ids), "method": method,
                                        "params": params or []}))

    def batch(self, calls: list[tuple[str, list]], chunk: int = 500) -> list[Any]:
        """Several calls in JSON-RPC batches; each slot holds a result or an RpcError."""
        out: list[Any] = []
        for start in range(0, len(calls), chunk):
            part = calls[start:start + chunk]
            ids = [next(self._ids) for _ in part]
            replies = self._post([{"jsonrpc": "2.0", "id": i, "method": m, "params": p}
                                  for i, (m, p) in zip(ids, part)])
            if isinstance(replies, dict):  # a node that refuses batches answers one error
                raise RpcError(replies.get("error", {}).get("code", 0),
                               replies.get("error", {}).get("message", "batch refused"))
            by_id = {r.get("id"): r for r in replies}
            for i in ids:
                reply = by_id.get(i, {"error": {"code": -32603, "message": "no reply in batch"}})
                try:
                    out.append(self._result(reply))
                except RpcError as exc:
                    out.append(exc)
        return out

    # -- reads -------------------------------------------------------------------------------
    @cached_property
    def chain_id(self) -> int:
        return int(self.request("eth_chainId"), 16)

    def block_number(self) -> int:
        return int(self.request("eth_blockNumber"), 16)

    def get_block(self, tag: str | int = "latest") -> dict:
        ref = hex(tag) if isinstance(tag, int) else tag
        return self.request("eth_getBlockByNumber", [ref, False])

    def clock_offset(self) -> int:
        """How far the chain's clock runs ahead of this machine's, in seconds: its latest block's
        timestamp minus now (a development node may be told to skip days; negative when the latest
        block is older than now)."""
        return int(self.get_block("latest")["timestamp"], 16) - int(time.time())

    def nonce(self, address: str, tag: str = "pending") -> int:
        return int(self.request("eth_getTransactionCount", [address, tag]), 16)

    def call(self, to: str, data: bytes, block: str | int = "latest", sender: str | None = None) -> bytes:
        """eth_call; a revert raises Reverted with the raw revert data (decode it with the ABI)."""
        tx = {"to": to, "data": to_hex(data)}
        if sender:
            tx["from"] = sender
        ref = hex(block) if isinstance(block, int) else block
        try:
            return from_hex(self.request("eth_call", [tx, ref]))
        except RpcError as exc:
            if exc.revert_data is not None or "revert" in exc.message.lower():
                raise Reverted("Reverted", (), exc.revert_data or b"") from exc
            raise

    def receipts(self, hashes: list[bytes]) -> list[dict | None]:
        replies = self.batch([("eth_getTransactionReceipt", [to_hex(h)]) for h in hashes])
        for r in replies:
            if isinstance(r, RpcError):
                raise r
        return replies

    def logs(self, addresses: list[str], from_block: int, to_block: int,
             topics: list | None = None) -> list[dict]:
        query = {"address": addresses, "fromBlock": hex(from_block), "toBlock": hex(to_block)}
        if topics:
            query["topics"] = topics
        return self.request("eth_getLogs", [query])

    def head_and_final(self, rule: int | str) -> tuple[int, int]:
        """The head's number and the last final block's under `rule`: a depth under the head (0:
        every block is final, as on QBFT/IBFT2) or a block tag ("finalized", "safe"). -1 when no
        block is final yet."""
        if isinstance(rule, str):
            head, tagged = self.batch([("eth_blockNumber", []), ("eth_getBlockByNumber", [rule, False])])
            for reply in (head, tagged):
                if isinstance(reply, RpcError):
                    raise reply
            return int(head, 16), int(tagged["number"], 16) if tagged else -1
        head = self.block_number()
        return head, head - rule

    def block_hashes(self, numbers: list[int]) -> dict[int, dict | None]:
        """Headers by number (None where the node has no such block): hash and parentHash."""
        replies = self.batch([("eth_getBlockByNumber", [hex(n), False]) for n in numbers])
        out = {}
        for n, reply in zip(numbers, replies):
            if isinstance(reply, RpcError):
                raise reply
            out[n] = {"hash": reply["hash"], "parentHash": reply["parentHash"]} if reply else None
        return out

    # -- writes ------------------------------------------------------------------------------
    def fee_fields(self, max_age: float = 5.0) -> dict:
        """Gas price fields for a new transaction: free (0) or priced, legacy or EIP-1559."""
        now = time.monotonic()
        if self._fees and now - self._fees[0] < max_age:
            return self._fees[1]
        if self.gas_price != "auto":
            fees: dict = {"gasPrice": int(self.gas_price)}
        else:
            base = int(self.get_block("latest").get("baseFeePerGas") or "0x0", 16)
            if base == 0:
                price = int(self.request("eth_gasPrice"), 16)
                fees = {"gasPrice": price}
            else:
                try:
                    tip = int(self.request("eth_maxPriorityFeePerGas"), 16)
                except RpcError:
                    tip = 10**9
                fees = {"type": 2, "maxPriorityFeePerGas": tip, "maxFeePerGas": 2 * base + tip}
        self._fees = (now, fees)
        return fees

    def forget_fees(self) -> None:
        """Read the fees afresh for the next transaction (one was refused for its price)."""
        self._fees = None

    def sign(self, account: LocalAccount, to: str | None, data: bytes, nonce: int, gas: int,
             fees: dict | None = None) -> SignedTx:
        tx = {"nonce": nonce, "gas": gas, "value": 0, "data": data, "chainId": self.chain_id,
              **(fees if fees is not None else self.fee_fields())}
        if to:
            tx["to"] = to_checksum_address(to)
        signed = account.sign_transaction(tx)
        return SignedTx(bytes(signed.raw_transaction), bytes(signed.hash), nonce, account.address)

    def send_raw(self, raws: list[bytes]) -> list[Exception | None]:
        """Broadcast raw transactions; per transaction None (accepted) or the node's error.

        A node that already holds the transaction counts as accepted: re-sending the same bytes
        is how the submitter recovers from a restarted node.
        """
        replies = self.batch([("eth_sendRawTransaction", [to_hex(r)]) for r in raws])
        out: list[Exception | None] = []
        for r in replies:
            if isinstance(r, RpcError) and not r.already_known:
                out.append(r)
            else:
                out.append(None)
        return out

    def estimate_gas(self, sender: str, to: str | None, data: bytes) -> int:
        tx = {"from": sender, "data": to_hex(data)}
        if to:
            tx["to"] = to
        return int(self.request("eth_estimateGas", [tx]), 16)

    def wait_receipt(self, tx_hash: bytes, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            receipt = self.request("eth_getTransactionReceipt", [to_hex(tx_hash)])
            if receipt:
                return receipt
            time.sleep(0.1)
        raise ChainUnavailable(f"no receipt for {to_hex(tx_hash)} within {timeout} s")


def account_from_key(key: str) -> LocalAccount:
    return Account.from_key(HexBytes(key))
