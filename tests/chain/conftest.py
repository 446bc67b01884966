"""A ledger on an interval-mining anvil (block time 1 s, as in `make run`), driven through the
outbox and the submitter exactly as the site drives it."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import pytest
from django.db import connection

from apps.chain import indexer, outbox
from apps.chain.client import ChainClient
from apps.chain.keys import new_key, relayer_address
from apps.chain.ledger import Ledger
from apps.chain.models import ChainTransaction, OutboxItem, Sender
from apps.chain.node import DEV_KEYS, AnvilNode
from apps.chain.submitter import Submitter
from tests.support import deploy_on_interval_node


def rand_id() -> str:
    return "0x" + secrets.token_hex(32)


@pytest.fixture(scope="module")
def ledger_node(tmp_path_factory, admin, oracle):
    path = tmp_path_factory.mktemp("ledger")
    node = AnvilNode(block_time=1, base_fee=0, state_file=path / "state.json", log_file=path / "anvil.log")
    node.start()
    deployment_file = path / "deployment.json"
    deployment = deploy_on_interval_node(node, deployment_file).deployment
    node.deployment = deployment
    node.deployment_file = deployment_file
    yield node
    node.stop()


@pytest.fixture
def ledger(ledger_node, settings, oracle) -> Ledger:
    settings.LLMCHAIN_ORACLE_KEY = DEV_KEYS[1]
    settings.LLMCHAIN_RELAYER_KEY = DEV_KEYS[2]  # funded, with no role: it only pays for relayed requests
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_RESEND_AFTER_S = 5
    settings.LLMCHAIN_RELAY_MIN_DEADLINE_S = 1  # the expiry tests sign requests that expire in seconds
    return Ledger(ChainClient(ledger_node.url), ledger_node.deployment)


def drain(submitter: Submitter, timeout: float = 90, *, until=None, what: str = "finished") -> None:
    """Run the submitter until `until()` is true (by default: until nothing is left to sign, send or
    confirm), then release its lanes' leases, so that the next submitter a test runs, whatever its
    owner, takes them at once instead of waiting the lease out (LLMCHAIN_LEASE_S)."""
    done = until or (lambda: not submitter.has_work())
    deadline = time.monotonic() + timeout
    try:
        while not done():
            if time.monotonic() > deadline:
                left = list(OutboxItem.objects.exclude(status="confirmed").values_list("key", "status", "last_error"))
                txs = list(ChainTransaction.objects.values_list("nonce", "status", "block_number"))
                raise AssertionError(f"submitter not {what} within {timeout} s: {left[:5]}; transactions {txs[-10:]}")
            if not submitter.run_once():
                time.sleep(0.2)
    finally:
        submitter.release()


def drain_sharded(ledger: Ledger, lanes: list[str], shards: int = 2, timeout: float = 120) -> list[Submitter]:
    """Run `shards` submitters side by side (`--shard i/N`, owners shard-i) until every outbox row is
    confirmed, checking after each round that each lane of `lanes` is only ever held by the submitter of its
    shard; returns them, their leases released."""
    submitters = [Submitter(ledger, shard=(i, shards), owner=f"shard-{i}") for i in range(shards)]
    deadline = time.monotonic() + timeout
    try:
        while OutboxItem.objects.exclude(status="confirmed").exists():
            assert time.monotonic() < deadline, list(OutboxItem.objects.exclude(status="confirmed")
                                                     .values_list("key", "status", "last_error"))
            for s in submitters:
                s.run_once()
            for address, owner in Sender.objects.filter(address__in=lanes).values_list("address", "lease_owner"):
                assert owner in ("", f"shard-{int(address, 16) % shards}"), (address, owner)
            time.sleep(0.2)
    finally:
        for s in submitters:
            s.release()
    return submitters


@dataclass
class World:
    """Accounts, a context and a model on-chain, ready for evaluations."""

    ledger: Ledger
    admin: str
    oracle: str
    developer: str
    users: list[str]
    context: str
    model: str
    calls: list[OutboxItem] = field(default_factory=list)

    def evaluation(self, user: str, *, sa=6 * 10**17, wa=5 * 10**17, reference=True,
                   answers=(4, 5, 3, 4, 3, 2), relayed: bool = False, iid: str | None = None,
                   evidence_cid: str | None = None) -> str:
        """Queue autoEval, humEval and updateReputation of one new interaction (`iid`, by default a new
        one); returns its id. `relayed`: the rating is a request signed with the user's stored key, relayed
        by the relayer. `evidence_cid`: its evidence record's (by default a CID of nothing anyone holds)."""
        iid = iid or rand_id()
        auto = outbox.enqueue("autoEval", self.oracle, {
            "interactionId": iid, "modelId": self.model, "contextId": self.context, "user": user,
            "hasReference": reference, "sA": str(sa), "wA": str(wa),
            "evidenceCid": evidence_cid or f"bafy{iid[2:14]}"})
        names = ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")
        rating = {"interactionId": iid, **dict(zip(names, answers))}
        if relayed:
            hum = outbox.enqueue_signed("humEval", user, rating, depends_on=auto)
        else:
            hum = outbox.enqueue("humEval", user, rating, depends_on=auto)
        upd = outbox.enqueue("updateReputation", relayer_address(user) if relayed else self.oracle,
                             {"interactionId": iid}, depends_on=hum)
        self.calls += [auto, hum, upd]
        return iid


@pytest.fixture
def world(ledger, admin, oracle) -> World:
    developer = new_key("developer").address
    users = [new_key(f"user{i}").address for i in range(3)]
    outbox.enqueue("register", admin.address, {"account": developer, "role": "developer"})
    for u in users:
        outbox.enqueue("register", admin.address, {"account": u, "role": "user"})
    context, model = rand_id(), rand_id()
    outbox.enqueue("addContext", admin.address, {"contextId": context, "name": "reasoning"})
    dev_reg = OutboxItem.objects.get(key=f"register:{developer}")
    outbox.enqueue("addModel", developer, {"modelId": model, "metadataCid": "bafymodel"}, depends_on=dev_reg)
    drain(Submitter(ledger, owner="setup"))
    return World(ledger, admin.address, oracle.address, developer, users, context, model)


def database_url() -> str:
    """The test database as a DATABASE_URL, for worker processes started by a test."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def reindex(ledger: Ledger) -> None:
    indexer.index_until_head(ledger)
