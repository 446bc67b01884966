"""The embedded anvil's state file: what a killed node restarts from is a state its own blocks
explain, as a real node's would be (the fault test's seed 1603 once restarted from one that did not).

anvil's own periodic dump (`--state-interval`) reads the blocks, then waits for the state database
that the block being mined holds: with transfers flooding in, 1 of 52 dumps held a sender's nonce at
1,492 over 852 transactions in its blocks (measured on this machine). A node restarted from
such a file has nonces and storage no block explains; the submitter re-signed calls the contract
then refused as already recorded, with no event for anyone to replay.
"""

from __future__ import annotations

import gzip
import json
import random
import threading
import time
import urllib.request

import pytest

from apps.chain.client import ChainError
from apps.chain.node import AnvilNode, StateKeeper, dump_best_block, local_client

pytestmark = [pytest.mark.chain, pytest.mark.slow]

def rpc(url: str, method: str, params: list):
    return local_client(url).request(method, params)


SENDERS = ["0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266", "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"]


class Flood(threading.Thread):
    """Value transfers from two dev accounts, in JSON-RPC batches of 100, until stopped."""

    def __init__(self, node: AnvilNode):
        super().__init__(daemon=True)
        self.node, self.stopping, self.paused, self.accepted = node, threading.Event(), threading.Event(), 0

    def run(self) -> None:
        nonces: dict[str, int] = {}
        while not self.stopping.is_set():
            if self.paused.is_set():  # while the test reads the restarted node
                nonces = {}
                time.sleep(0.05)
                continue
            try:
                if not nonces:  # at the start, and after each restart: where the node is
                    nonces = {s: int(rpc(self.node.url, "eth_getTransactionCount", [s, "pending"]), 16) for s in SENDERS}
                calls = []
                for i in range(100):
                    sender = SENDERS[i % 2]
                    calls.append({"jsonrpc": "2.0", "id": i, "method": "eth_sendTransaction", "params": [
                        {"from": sender, "to": "0x000000000000000000000000000000000000dEaD", "value": "0x1",
                         "gasPrice": "0x0", "nonce": hex(nonces[sender])}]})
                    nonces[sender] += 1
                req = urllib.request.Request(self.node.url, json.dumps(calls).encode(), {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as resp:
                    self.accepted += sum(1 for r in json.loads(resp.read()) if "result" in r)
                time.sleep(0.1)  # at most ~1,000 a second: blocks of hundreds, a state file of a few MB
            except (OSError, ChainError):
                nonces = {}
                time.sleep(0.1)  # killed: it comes back


def explained(node: AnvilNode) -> tuple[int, dict[str, tuple[int, int]]]:
    """The head, and per sender (its nonce, its transactions in the node's blocks); read while no
    transaction is sent, so that no block is added meanwhile."""
    head = int(rpc(node.url, "eth_blockNumber", []), 16)
    sent = {s: 0 for s in SENDERS}
    for n in range(head + 1):
        for tx in rpc(node.url, "eth_getBlockByNumber", [hex(n), True])["transactions"]:
            if tx["from"].lower() in sent:
                sent[tx["from"].lower()] += 1
    return head, {s: (int(rpc(node.url, "eth_getTransactionCount", [s, "latest"]), 16), sent[s]) for s in SENDERS}


def test_a_node_killed_under_load_restarts_from_a_state_its_blocks_explain(tmp_path):
    node = AnvilNode(block_time=1, base_fee=0, state_file=tmp_path / "state.json", state_interval=0.3,
                     log_file=tmp_path / "anvil.log").start()
    flood = Flood(node)
    flood.start()
    rng = random.Random(31)
    try:
        restarts = []
        for _ in range(4):
            time.sleep(rng.uniform(2.5, 4.5))
            before = int(rpc(node.url, "eth_blockNumber", []), 16)
            kept = node.keeper.kept
            flood.paused.set()
            node.kill()
            node.start()
            head, nonces = explained(node)
            flood.paused.clear()
            restarts.append((before, head, nonces))
            assert kept > 0, "no state was written while the node ran"
            # It lost at most the blocks since the last write, state and blocks alike.
            assert before - 3 <= head <= before, restarts
            assert all(nonce == in_blocks for nonce, in_blocks in nonces.values()), restarts
        assert restarts[-1][2][SENDERS[0]][0] > 1000, f"the flood did not load the node: {restarts}"
        # Stopped gracefully, it keeps every block it mined (empty ones may follow the last read).
        flood.stopping.set()
        flood.join(30)
        time.sleep(1.5)
        head, nonces = explained(node)
        node.stop()
        node.start()
        head_after, nonces_after = explained(node)
        assert head_after >= head and nonces_after == nonces and all(n == b for n, b in nonces.values())
    finally:
        flood.stopping.set()
        node.stop()


def test_a_dump_is_kept_only_if_no_block_was_added_while_it_was_taken(tmp_path):
    """The keeper's rule on its own: a dump recording head 7 is written only if the node's head,
    read after it, is still 7; else it is taken again, and the file keeps the last good one."""
    dumps = {"head": 8, "state": b'{"block":{},"accounts":{},"best_block_number":7,"blocks":[]}'}

    class Node:  # the keeper's one adapter, its JSON-RPC client
        def request(self, method, params=None):
            if method == "anvil_dumpState":
                return "0x" + gzip.compress(dumps["state"]).hex()
            return hex(dumps["head"])

    path = tmp_path / "state.json"
    path.write_text("the last good state")
    keeper = StateKeeper("http://node", path, interval=1, attempts=3)
    keeper.client = Node()
    assert keeper.snapshot() is False and keeper.discarded == 3
    assert path.read_text() == "the last good state"
    dumps["head"] = 7
    assert keeper.snapshot() is True and keeper.kept == 1
    assert path.read_bytes() == dumps["state"] and not path.with_name("state.json.tmp").exists()
    assert dump_best_block(b'{"best_block_number":"0x1a","blocks":[]}') == 26
    assert dump_best_block(b'{"blocks":[]}') is None
