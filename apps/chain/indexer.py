"""The indexer: folds contract events into the tables the site reads, resumably.

Each chunk of blocks is folded in one database transaction together with the cursor, so a
crash replays a chunk whole or not at all; rows are keyed by (block, log index) or by chain
ids, so folding the same logs twice changes nothing.

Tables derived from these (the boards' BoardEntry, apps/leaderboard/entries.py) follow through the
`folded` and `cleared` signals, sent inside the same transactions, so the chain app does not import
the apps built on it.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal

from .client import from_hex
from .ledger import Ledger, hex32
from .models import (Context, IndexerCursor, Interaction, LedgerModel, Registration, Reputation,
                     ReputationChange)

log = logging.getLogger(__name__)
CURSOR_PREFIX = "ledger:"
INDEXED_TABLES = (ReputationChange, Reputation, Interaction, LedgerModel, Context, Registration)

# Sent inside the transaction that folds a chunk: pairs = {(model_id, context_id)} whose REP moved,
# models = {model_id} whose metadata CID changed, contexts = {context_id} added. Receivers keep
# derived tables in step.
folded = Signal()
cleared = Signal()  # sent inside reset(): derived tables forget their rows too


def fetch_events(ledger: Ledger, from_block: int, to_block: int) -> list[dict]:
    """Decoded events of the Identity and Reputation contracts, in chain order."""
    addresses = {ledger.deployment.identity.lower(): "identity", ledger.deployment.reputation.lower(): "reputation"}
    out = []
    for raw in ledger.client.logs(list(addresses), from_block, to_block):
        contract = addresses.get(raw["address"].lower())
        decoded = ledger.abis[contract].decode_log([from_hex(t) for t in raw["topics"]], from_hex(raw["data"]))
        if decoded is None:
            continue
        name, args = decoded
        out.append({"event": name, "args": args, "block": int(raw["blockNumber"], 16),
                    "log_index": int(raw["logIndex"], 16), "tx": raw["transactionHash"]})
    out.sort(key=lambda e: (e["block"], e["log_index"]))
    add_timestamps(ledger, out)
    return out


def fetch_all(ledger: Ledger, from_block: int, to_block: int, chunk: int = 10_000) -> list[dict]:
    """`fetch_events` over any range, `chunk` blocks per eth_getLogs."""
    events: list[dict] = []
    for start in range(from_block, to_block + 1, chunk):
        events += fetch_events(ledger, start, min(to_block, start + chunk - 1))
    return events


def add_timestamps(ledger: Ledger, events: list[dict]) -> None:
    """Give each ReputationUpdated event its block's timestamp (the boards' "last change")."""
    blocks = sorted({e["block"] for e in events if e["event"] == "ReputationUpdated"})
    if not blocks:
        return
    replies = ledger.client.batch([("eth_getBlockByNumber", [hex(b), False]) for b in blocks])
    stamps = {b: int(reply["timestamp"], 16) for b, reply in zip(blocks, replies)}
    for e in events:
        if e["event"] == "ReputationUpdated":
            e["timestamp"] = stamps[e["block"]]


def fold(events: list[dict]) -> None:
    """Apply events to the tables (call inside a transaction)."""
    changes, reps = [], {}
    autos = []
    humans: dict[str, dict] = {}
    combined: dict[str, str] = {}
    metadata: dict[str, str] = {}  # model id -> its latest CID in these events (chain order)
    new_contexts: set[str] = set()
    touched_by_tx: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in events:
        a, name = e["args"], e["event"]
        if "interactionId" in a:
            touched_by_tx[(e["tx"], hex32(a["interactionId"]))].add(name)
    for e in events:
        a, name = e["args"], e["event"]
        if name == "Registered":
            Registration.objects.update_or_create(address=a["account"], defaults={
                "role": a["role"], "profile_cid": a["profileCid"], "registered_at": a["at"]})
        elif name == "ContextAdded":
            Context.objects.get_or_create(context_id=hex32(a["contextId"]),
                                          defaults={"name": a["name"], "block_number": e["block"]})
            new_contexts.add(hex32(a["contextId"]))
        elif name == "ModelAdded":
            LedgerModel.objects.get_or_create(model_id=hex32(a["modelId"]), defaults={
                "owner": a["owner"], "metadata_cid": a["metadataCid"], "block_number": e["block"]})
        elif name == "ModelMetadataUpdated":
            metadata[hex32(a["modelId"])] = a["metadataCid"]
        elif name == "AutoEvaluated":
            autos.append(Interaction(
                interaction_id=hex32(a["interactionId"]), model_id=hex32(a["modelId"]), context_id=hex32(a["contextId"]),
                user=a["user"], has_reference=a["hasReference"], sa=a["sA"], wa=a["wA"],
                evidence_cid=a["evidenceCid"], auto_tx=e["tx"], auto_block=e["block"]))
        elif name == "HumanEvaluated":
            humans[hex32(a["interactionId"])] = {"sh": a["sH"], "wh": a["wH"], "d_minutes": a["dMinutes"],
                                             "human_tx": e["tx"]}
        elif name == "ReputationUpdated":
            iid = hex32(a["interactionId"])
            row = dict(model_id=hex32(a["modelId"]), context_id=hex32(a["contextId"]), ra=a["rA"], rh=a["rH"], r=a["r"],
                       n_auto=a["nAuto"], n_human=a["nHuman"])
            changes.append(ReputationChange(block_number=e["block"], log_index=e["log_index"], tx_hash=e["tx"],
                                            interaction_id=iid, timestamp=e.get("timestamp"), **row))
            reps[(row["model_id"], row["context_id"])] = {**row, "block_number": e["block"]}
            if not touched_by_tx[(e["tx"], iid)] & {"AutoEvaluated", "HumanEvaluated"}:
                combined[iid] = e["tx"]
    # After the ModelAdded rows above (an update always follows its model's ModelAdded on-chain);
    # block_number stays the block that added the model.
    for model_id, cid in metadata.items():
        LedgerModel.objects.filter(model_id=model_id).update(metadata_cid=cid)
    Interaction.objects.bulk_create(autos, ignore_conflicts=True, batch_size=500)
    for iid, fields in humans.items():
        Interaction.objects.filter(interaction_id=iid).update(**fields)
    by_tx: dict[str, list[str]] = defaultdict(list)
    for iid, tx in combined.items():
        by_tx[tx].append(iid)
    for tx, iids in by_tx.items():
        Interaction.objects.filter(interaction_id__in=iids).update(reputation_tx=tx)
    ReputationChange.objects.bulk_create(changes, ignore_conflicts=True, batch_size=500)
    _upsert_reputations(reps)
    if reps or metadata or new_contexts:
        # Within the chunk's transaction: tables derived from these rows (the boards) follow.
        folded.send(sender=fold, pairs=set(reps), models=set(metadata), contexts=new_contexts)


def _upsert_reputations(reps: dict[tuple[str, str], dict]) -> None:
    if not reps:
        return
    fields = ["ra", "rh", "r", "n_auto", "n_human", "block_number"]
    Reputation.objects.bulk_create([Reputation(**row) for row in reps.values()], batch_size=500,
                                   update_conflicts=True, unique_fields=["model_id", "context_id"],
                                   update_fields=fields)


def index_once(ledger: Ledger, max_blocks: int = 5000, confirmations: int | None = None) -> int:
    """Fold the next chunk of blocks; returns how many blocks were folded (0: up to date)."""
    confirmations = settings.LLMCHAIN_CONFIRMATIONS if confirmations is None else confirmations
    head = ledger.client.block_number() - confirmations
    name = cursor_name(ledger)
    cursor = IndexerCursor.objects.filter(name=name).first()
    start = (cursor.last_block + 1) if cursor else ledger.deployment.deployBlock
    if start > head:
        return 0
    end = min(head, start + max_blocks - 1)
    events = fetch_events(ledger, start, end)
    with transaction.atomic():
        current = IndexerCursor.objects.select_for_update().filter(name=name).first()
        if (current.last_block + 1 if current else ledger.deployment.deployBlock) != start:
            return 0  # another indexer folded this chunk meanwhile
        fold(events)
        IndexerCursor.objects.update_or_create(name=name, defaults={"last_block": end})
    return end - start + 1


def index_until_head(ledger: Ledger) -> int:
    total = 0
    while True:
        n = index_once(ledger)
        if not n:
            return total
        total += n


def cursor_name(ledger: Ledger) -> str:
    return CURSOR_PREFIX + ledger.deployment.reputation.lower()


def reset() -> None:
    """Forget every indexed row; the next run rebuilds them from the deployment block."""
    with transaction.atomic():
        for model in INDEXED_TABLES:
            model.objects.all().delete()
        IndexerCursor.objects.filter(name__startswith=CURSOR_PREFIX).delete()
        cleared.send(sender=reset)
