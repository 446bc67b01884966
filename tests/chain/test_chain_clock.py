"""The chain's clock (apps/chain/client.chain_time), which every reader of it goes through: the
submitter (read from the node at once: tests/chain/test_submitter_relaying.py), the relay's signing
(read once a minute, cached) and pages (from the last health probe, never waiting). The node is faked
at the client's transport."""

from __future__ import annotations

import time

from apps.chain import health, relay
from apps.chain.client import ChainError, chain_time

from .fake_node import FakeNode

DAY = 86_400


def near(value: int, expected: float) -> bool:
    return abs(value - expected) <= 2


def test_the_chains_clock_is_this_machines_plus_how_far_the_chain_runs_ahead():
    assert near(chain_time(DAY), time.time() + DAY)
    assert near(chain_time(None), time.time()), "unknown: this machine's clock"
    assert near(chain_time(-30), time.time()), "a latest block older than now lags the chain: never behind"


def test_the_client_reads_how_far_the_chain_runs_ahead_from_its_latest_block():
    node = FakeNode()
    node.clock_ahead = DAY
    assert abs(node.clock_offset() - DAY) <= 1
    node.clock_ahead = -40
    assert abs(node.clock_offset() + 40) <= 1


def test_pages_read_the_clock_from_the_last_probe_without_asking_the_node(monkeypatch):
    monkeypatch.setattr(health, "_last", lambda: {"reachable": True, "clock_offset": DAY})
    assert near(health.chain_now(), time.time() + DAY)
    monkeypatch.setattr(health, "_last", lambda: {"reachable": None})
    assert near(health.chain_now(), time.time())


def test_the_relay_reads_the_node_once_and_keeps_the_offset(monkeypatch, settings, tmp_path):
    settings.LLMCHAIN_DEPLOYMENT = tmp_path / "none.json"
    node = FakeNode()
    node.clock_ahead = DAY
    monkeypatch.setattr(relay, "default_client", lambda: node)
    assert near(relay.chain_now(), time.time() + DAY)
    node.clock_ahead = 0
    assert near(relay.chain_now(), time.time() + DAY), "kept for CLOCK_TTL_S"
    assert node.methods["eth_getBlockByNumber"] == 1


def test_the_relay_falls_back_to_this_machines_clock_while_the_node_cannot_be_read(monkeypatch, settings, tmp_path):
    settings.LLMCHAIN_DEPLOYMENT = tmp_path / "none.json"

    def down():
        raise ChainError("the node does not answer")

    monkeypatch.setattr(relay, "default_client", down)
    assert near(relay.chain_now(), time.time())
