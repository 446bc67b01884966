import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.chain import indexer
from apps.chain.audit import run_audit
from apps.chain.client import account_from_key
from apps.chain.deploy import grant_role
from apps.chain.keys import new_key, store_key
from apps.chain.models import ChainTransaction, LedgerInteraction, OutboxItem, Reputation, ReputationChange
from apps.chain.node import DEV_KEYS, AnvilNode
from apps.chain.submitter import Submitter
from lib.ids import b32
from lib.reputation import GLOBAL_CONTEXT

from tests.support import deploy_on_interval_node

from .conftest import database_url, drain, rand_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]


def onchain_counts(world) -> tuple[int, int]:
    rep = world.ledger.reputation(b32(world.model), b32(world.context))
    return rep[3], rep[4]


def test_queued_evaluations_land_once_and_the_audit_agrees(world):
    for user in world.users:
        world.evaluation(user)
    drain(Submitter(world.ledger))
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert onchain_counts(world) == (3, 3)
    indexer.index_until_head(world.ledger)
    rows = {r.context_id: r for r in Reputation.objects.filter(model_id=world.model)}
    assert rows[world.context].n_auto == 3 and rows[world.context].n_human == 3
    assert rows["0x" + GLOBAL_CONTEXT.hex()].n_human == 3
    report = run_audit(world.ledger)
    assert report.ok, report.summary()


def test_the_default_chain_is_free_and_transactions_are_signed_locally(world):
    world.evaluation(world.users[0])
    drain(Submitter(world.ledger))
    for tx in ChainTransaction.objects.all():
        raw = bytes(tx.raw)
        assert raw[0] >= 0xC0, "a free-gas chain gets legacy transactions with gas price 0"
        onchain = world.ledger.client.request("eth_getTransactionByHash", [tx.tx_hash])
        assert int(onchain["gasPrice"], 16) == 0


def test_the_submitter_resends_what_a_restarted_node_lost(world, ledger_node):
    client = world.ledger.client
    client.request("evm_setIntervalMining", [0])  # hold blocks so the pool is certain to be lost
    iids = [world.evaluation(u) for u in world.users * 2]
    submitter = Submitter(world.ledger)
    submitter.run_once()
    assert OutboxItem.objects.filter(function="autoEval", status="signed").count() == len(iids)
    ledger_node.restart()  # graceful stop: the state is on disk, the transaction pool is not
    assert onchain_counts(world) == (0, 0)
    drain(submitter)
    assert submitter.stats["resent"] >= 1
    assert onchain_counts(world) == (len(iids), len(iids))
    indexer.index_until_head(world.ledger)
    assert LedgerInteraction.objects.filter(interaction_id__in=iids).count() == len(iids)
    assert run_audit(world.ledger).ok


def test_a_killed_worker_loses_nothing_and_applies_nothing_twice(world, ledger_node):
    n = 24
    iids = [world.evaluation(world.users[i % 3], sa=random.randrange(10**18)) for i in range(n)]
    env = {**os.environ, "DATABASE_URL": database_url(), "LLMCHAIN_RPC_URL": ledger_node.url,
           "LLMCHAIN_DEPLOYMENT": str(ledger_node.deployment_file), "LLMCHAIN_ORACLE_KEY": DEV_KEYS[1],
           "LLMCHAIN_LEASE_S": "2", "LLMCHAIN_RESEND_AFTER_S": "3", "LLMCHAIN_TX_BATCH": "8"}
    rng = random.Random(7)
    kills = 0
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "manage.py", "chain", "submit"], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.8, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    time.sleep(2.1)  # the dead worker's lease runs out
    drain(Submitter(world.ledger, owner="survivor"))
    assert kills == 5
    assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
    assert onchain_counts(world) == (n, n)
    indexer.index_until_head(world.ledger)
    assert LedgerInteraction.objects.filter(interaction_id__in=iids, human_tx__gt="", reputation_tx__gt="").count() == n
    # Each evaluation moved the scores once: 2 contexts x (auto, human, combined) per interaction.
    assert ReputationChange.objects.filter(interaction_id__in=iids).count() == n * 2 * 3
    assert run_audit(world.ledger).ok


def test_a_duplicate_counts_as_done_only_when_the_chain_record_matches(world, admin):
    other_oracle = account_from_key(DEV_KEYS[2])
    grant_role(world.ledger.client, world.ledger.deployment, admin, "ORACLE_ROLE", other_oracle.address)
    same, different = rand_id(), rand_id()
    payload = {"modelId": world.model, "contextId": world.context, "user": world.users[0],
               "hasReference": True, "sA": str(7 * 10**17), "wA": str(4 * 10**17), "evidenceCid": "bafyevidence"}
    client = world.ledger.client
    for iid in (same, different):  # another oracle records both interactions first
        to, data, gas = world.ledger.calldata("autoEval", [{**payload, "interactionId": iid}])
        signed = client.sign(other_oracle, to, data, client.nonce(other_oracle.address), gas)
        assert client.send_raw([signed.raw]) == [None]
        assert int(client.wait_receipt(signed.hash)["status"], 16) == 1
    from apps.chain import outbox

    dup = outbox.enqueue("autoEval", world.oracle, {**payload, "interactionId": same})
    clash = outbox.enqueue("autoEval", world.oracle, {**payload, "interactionId": different, "sA": "1"})
    drain(Submitter(world.ledger))
    dup.refresh_from_db()
    clash.refresh_from_db()
    assert (dup.status, dup.duplicate) == ("confirmed", True)
    assert clash.status == "failed" and "InteractionExists" in clash.last_error
    assert onchain_counts(world)[0] == 2


def test_the_indexer_rebuilds_the_same_tables_from_scratch(world, settings, tmp_path):
    from apps.chain.evidence import LocalBlobStore
    from lib import records

    settings.LLMCHAIN_IPFS_DIR = tmp_path
    for k, user in enumerate(world.users):  # the first two answers' records are here: their lengths too
        iid = rand_id()
        record = records.interaction_evidence(
            interaction_id=iid, context_id=world.context, context_name="reasoning", prompt="Q?", model_id=world.model,
            answer="forty-two " * (k + 1), references=[], metric={"name": "test"}, sa=0, wa=0)
        world.evaluation(user, reference=user != world.users[1], iid=iid,
                         evidence_cid=LocalBlobStore(tmp_path).put(records.canonical(record)) if k < 2 else None)
    drain(Submitter(world.ledger))
    # No block is mined between the two readings: both index the same blocks.
    world.ledger.client.request("evm_setIntervalMining", [0])
    try:
        indexer.index_until_head(world.ledger)
        rebuilt, before = rebuild_and_dump(world.ledger)
    finally:
        world.ledger.client.request("evm_setIntervalMining", [1])
    assert rebuilt == before
    chars = sorted(LedgerInteraction.objects.exclude(answer_chars=None).values_list("answer_chars", flat=True))
    assert chars == [10, 20]


def rebuild_and_dump(ledger):
    """The indexed tables rebuilt from scratch, and as they were before."""

    def dump():
        tables = {}
        for model in indexer.INDEXED_TABLES:
            fields = [f.name for f in model._meta.fields if f.name not in ("id", "updated_at")]
            tables[model.__name__] = sorted(model.objects.values_list(*fields))
        return tables

    before = dump()
    assert before["ReputationChange"] and before["LedgerInteraction"]
    indexer.reset()
    assert not Reputation.objects.exists()
    indexer.index_until_head(ledger)
    return dump(), before


def test_the_audit_command_fails_when_a_database_row_is_tampered(world, ledger_node, settings, capsys):
    world.evaluation(world.users[0])
    drain(Submitter(world.ledger))
    indexer.index_until_head(world.ledger)
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    call_command("chain", "audit")
    assert '"ok": true' in capsys.readouterr().out
    row = Reputation.objects.get(model_id=world.model, context_id=world.context)
    Reputation.objects.filter(pk=row.pk).update(r=row.r + 1)
    with pytest.raises(SystemExit) as exit_info:
        call_command("chain", "audit")
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "DATABASE != CHAIN" in out and '"db_mismatches": 1' in out


def test_a_priced_chain_gets_fee_paying_transactions(tmp_path, admin, oracle, settings):
    settings.LLMCHAIN_ORACLE_KEY = DEV_KEYS[1]
    node = AnvilNode(block_time=1, base_fee=10**9, log_file=tmp_path / "anvil.log").start()
    try:
        ledger = deploy_on_interval_node(node, tmp_path / "deployment.json")
        client = ledger.client
        user = new_key("paying user").address
        client.request("anvil_setBalance", [user, hex(10**19)])  # users pay for humEval on a priced chain
        from apps.chain import outbox

        developer = store_key(DEV_KEYS[3], "developer").address
        outbox.enqueue("register", admin.address, {"account": user, "role": "user"})
        outbox.enqueue("register", admin.address, {"account": developer, "role": "developer"})
        drain(Submitter(ledger))
        ctx, model, iid = rand_id(), rand_id(), rand_id()
        outbox.enqueue("addContext", admin.address, {"contextId": ctx, "name": "coding"})
        outbox.enqueue("addModel", developer, {"modelId": model, "metadataCid": "bafym"})
        drain(Submitter(ledger))
        auto = outbox.enqueue("autoEval", oracle.address, {
            "interactionId": iid, "modelId": model, "contextId": ctx, "user": user, "hasReference": False,
            "sA": "0", "wA": "0", "evidenceCid": "bafye"})
        outbox.enqueue("humEval", user, {"interactionId": iid, "reliability": 5, "completeness": 5, "utility": 5,
                                         "familiarity": 5, "trust": 5, "uncertainty": 1}, depends_on=auto)
        drain(Submitter(ledger))
        assert set(OutboxItem.objects.values_list("status", flat=True)) == {"confirmed"}
        hum = ChainTransaction.objects.get(function="humEval")
        assert bytes(hum.raw)[0] == 2, "EIP-1559 transaction"
        onchain = client.request("eth_getTransactionByHash", [hum.tx_hash])
        assert int(onchain["maxFeePerGas"], 16) > 0 and onchain["from"].lower() == user.lower()
        assert ledger.reputation(b32(model), b32(ctx))[4] == 1
    finally:
        node.stop()
