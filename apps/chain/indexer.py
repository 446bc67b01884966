"""The indexer: folds contract events into the tables the site reads, resumably, following the
chain it reads.

Each chunk of blocks is folded in one database transaction together with the cursor, so a
crash replays a chunk whole or not at all; rows are keyed by (block, log index) or by chain
ids, so folding the same logs twice changes nothing.

Only final blocks are folded (LLMCHAIN_FINALITY: a depth under the head, or the node's
`finalized`/`safe` tag). The cursor keeps the hash of the last folded block and the hashes of
the last LLMCHAIN_REORG_WINDOW folded blocks: when the chain no longer holds the block the
cursor names (a node that lost its last blocks and mined others at the same heights, or a
reorganisation deeper than the finality rule allowed for), the indexer finds the common
ancestor, rolls every indexed table back to it and folds the new branch, in one transaction,
as blockchain indexers do. A reorg deeper than the window rebuilds the tables from the
deployment block.

Each interaction's row also takes the length of its answer from the evidence record its AutoEvaluated
event names, read from this site's own copy of the records as the chunk is read (`add_answer_chars`: a
file, never the network, so a fold never waits on IPFS); a record not there is read from the IPFS node
later by the chain worker (apps/chain/answers.py).

Tables derived from these (the boards' BoardEntry, apps/leaderboard/entries.py) follow through the
`folded` and `cleared` signals, sent inside the same transactions, so the chain app does not import
the apps built on it.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal

from lib.ids import hex32

from .client import from_hex, to_hex
from .evidence import evidence_answer, local_store
from .ledger import Ledger
from .models import (ArenaBattle, Context, IndexedBlock, IndexerCursor, LedgerInteraction, LedgerModel, Registration,
                     Reputation, ReputationChange)

log = logging.getLogger(__name__)
CURSOR_PREFIX = "ledger:"
INDEXED_TABLES = (ReputationChange, Reputation, LedgerInteraction, LedgerModel, Context, Registration, ArenaBattle,
                  IndexedBlock)

# Sent inside the transaction that folds a chunk (or rolls the tables back after a reorg, or gives
# answers their lengths late: apps/chain/answers.py, with arena only): pairs =
# {(model_id, context_id)} whose REP moved (a pair with no change left has no entry), models =
# {model_id} whose metadata CID changed, contexts = {context_id} added or removed, rated = {context_id}
# where a rating of an answer with a reference was folded or rolled back. Receivers keep
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
                    "block_hash": raw["blockHash"], "log_index": int(raw["logIndex"], 16),
                    "tx": raw["transactionHash"]})
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


def add_answer_chars(events: list[dict]) -> None:
    """Give each AutoEvaluated event the length in characters of the answer its evidence record holds
    (`answer_chars`), from the local copy of the records alone; None when that copy cannot give it."""
    store = None
    for e in events:
        if e["event"] == "AutoEvaluated":
            store = store or local_store()
            text = evidence_answer(e["args"]["evidenceCid"], hex32(e["args"]["interactionId"]), store)
            e["answer_chars"] = None if text is None else len(text)


def fold(events: list[dict]) -> None:
    """Apply events to the tables (call inside a transaction)."""
    changes, reps = [], {}
    autos = []
    humans: dict[str, dict] = {}
    combined: dict[str, tuple[str, int]] = {}  # interaction id -> (tx, block) of its updateReputation
    metadata: dict[str, tuple[str, int]] = {}  # model id -> its latest (CID, block) in these events
    new_contexts: set[str] = set()
    battles: list[ArenaBattle] = []
    votes: dict[str, dict] = {}
    touched_by_tx: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in events:
        a, name = e["args"], e["event"]
        if "interactionId" in a:
            touched_by_tx[(e["tx"], hex32(a["interactionId"]))].add(name)
    for e in events:
        a, name = e["args"], e["event"]
        if name == "Registered":
            Registration.objects.update_or_create(address=a["account"], defaults={
                "role": a["role"], "profile_cid": a["profileCid"], "registered_at": a["at"],
                "block_number": e["block"]})
        elif name == "ContextAdded":
            Context.objects.get_or_create(context_id=hex32(a["contextId"]),
                                          defaults={"name": a["name"], "block_number": e["block"]})
            new_contexts.add(hex32(a["contextId"]))
        elif name == "ModelAdded":
            LedgerModel.objects.get_or_create(model_id=hex32(a["modelId"]), defaults={
                "owner": a["owner"], "metadata_cid": a["metadataCid"], "block_number": e["block"],
                "metadata_block": e["block"]})
        elif name == "ModelMetadataUpdated":
            metadata[hex32(a["modelId"])] = (a["metadataCid"], e["block"])
        elif name == "AutoEvaluated":
            autos.append(LedgerInteraction(
                interaction_id=hex32(a["interactionId"]), model_id=hex32(a["modelId"]), context_id=hex32(a["contextId"]),
                user=a["user"], has_reference=a["hasReference"], sa=a["sA"], wa=a["wA"],
                evidence_cid=a["evidenceCid"], auto_tx=e["tx"], auto_block=e["block"],
                answer_chars=e.get("answer_chars")))
        elif name == "HumanEvaluated":
            humans[hex32(a["interactionId"])] = {"sh": a["sH"], "wh": a["wH"], "d_minutes": a["dMinutes"],
                                                 "human_tx": e["tx"], "human_block": e["block"]}
        elif name == "BattleOpened":
            battles.append(ArenaBattle(
                battle_id=hex32(a["battleId"]), context_id=hex32(a["contextId"]), model_a=hex32(a["modelA"]),
                model_b=hex32(a["modelB"]), interaction_a=hex32(a["interactionA"]),
                interaction_b=hex32(a["interactionB"]), user=a["user"], voided=a["voided"], block_number=e["block"],
                tx=e["tx"]))
        elif name == "Voted":
            votes[hex32(a["battleId"])] = {"outcome": a["outcome"], "counted": a["counted"], "vote_block": e["block"],
                                           "vote_tx": e["tx"]}
        elif name == "ReputationUpdated":
            iid = hex32(a["interactionId"])
            row = dict(model_id=hex32(a["modelId"]), context_id=hex32(a["contextId"]), ra=a["rA"], rh=a["rH"], r=a["r"],
                       n_auto=a["nAuto"], n_human=a["nHuman"])
            changes.append(ReputationChange(block_number=e["block"], log_index=e["log_index"], tx_hash=e["tx"],
                                            interaction_id=iid, timestamp=e.get("timestamp"), **row))
            reps[(row["model_id"], row["context_id"])] = {**row, "block_number": e["block"]}
            if not touched_by_tx[(e["tx"], iid)] & {"AutoEvaluated", "HumanEvaluated"}:
                combined[iid] = (e["tx"], e["block"])
    # After the ModelAdded rows above (an update always follows its model's ModelAdded on-chain);
    # block_number stays the block that added the model.
    for model_id, (cid, block) in metadata.items():
        LedgerModel.objects.filter(model_id=model_id).update(metadata_cid=cid, metadata_block=block)
    LedgerInteraction.objects.bulk_create(autos, ignore_conflicts=True, batch_size=500)
    for iid, fields in humans.items():
        LedgerInteraction.objects.filter(interaction_id=iid).update(**fields)
    # The boards whose figures of people's ratings these ratings change (they count answers with a reference).
    rated = set(LedgerInteraction.objects.filter(interaction_id__in=list(humans), has_reference=True)
                .values_list("context_id", flat=True)) if humans else set()
    by_tx: dict[tuple[str, int], list[str]] = defaultdict(list)
    for iid, tx in combined.items():
        by_tx[tx].append(iid)
    for (tx, block), iids in by_tx.items():
        LedgerInteraction.objects.filter(interaction_id__in=iids).update(reputation_tx=tx, reputation_block=block)
    ReputationChange.objects.bulk_create(changes, ignore_conflicts=True, batch_size=500)
    _upsert_reputations(reps)
    ArenaBattle.objects.bulk_create(battles, ignore_conflicts=True, batch_size=500)
    for battle_id, fields in votes.items():  # a vote always follows its battle on-chain
        ArenaBattle.objects.filter(battle_id=battle_id).update(**fields)
    arena = {b.context_id for b in battles} | set(ArenaBattle.objects.filter(battle_id__in=list(votes))
                                                  .values_list("context_id", flat=True)) if votes or battles else set()
    if reps or metadata or new_contexts or arena or rated:
        # Within the chunk's transaction: tables derived from these rows (the boards) follow.
        folded.send(sender=fold, pairs=set(reps), models=set(metadata), contexts=new_contexts, arena=arena,
                    rated=rated)


def _upsert_reputations(reps: dict[tuple[str, str], dict]) -> None:
    if not reps:
        return
    fields = ["ra", "rh", "r", "n_auto", "n_human", "block_number"]
    Reputation.objects.bulk_create([Reputation(**row) for row in reps.values()], batch_size=500,
                                   update_conflicts=True, unique_fields=["model_id", "context_id"],
                                   update_fields=fields)


class ChainMoved(Exception):
    """The node's blocks changed while a chunk was being read: read it again on the next pass."""


def index_once(ledger: Ledger, max_blocks: int = 5000) -> int:
    """Fold the next chunk of final blocks; returns how many blocks were folded (0: up to date).

    When the chain no longer holds the last folded block, roll back to the common ancestor first
    (and fold what follows it), in the same transaction."""
    name = cursor_name(ledger)
    cursor = IndexerCursor.objects.filter(name=name).first()
    _, final = ledger.head_and_final()
    if cursor and cursor.last_hash:
        tip = ledger.client.block_hashes([cursor.last_block])[cursor.last_block]
        if tip is None or tip["hash"] != cursor.last_hash:
            return _reorganise(ledger, name, cursor, final, max_blocks)
    start = (cursor.last_block + 1) if cursor else ledger.deployment.deployBlock
    if start > final:
        return 0
    end = min(final, start + max_blocks - 1)
    try:
        return _fold_range(ledger, name, start, end, parent=cursor.last_hash if cursor else "",
                           expected=(cursor.last_block, cursor.last_hash) if cursor else None)
    except ChainMoved as exc:
        log.info("blocks %d..%d changed while they were read (%s); reading them again", start, end, exc)
        return 0


def _fold_range(ledger: Ledger, name: str, start: int, end: int, *, parent: str,
                expected: tuple[int, str] | None, rollback_to: int | None = None) -> int:
    """Fold blocks start..end, which must descend from `parent` (the hash of block start - 1; "" when
    unknown), into the tables; with `rollback_to`, roll the tables back to that block first, in the
    same transaction. `expected` is the cursor this pass read: another indexer that moved it since
    wins, and this pass folds nothing. Everything is read from the node before the transaction opens."""
    window = settings.LLMCHAIN_REORG_WINDOW
    kept_from = max(start, end - window + 1)
    headers = ledger.client.block_hashes(sorted({start} | set(range(kept_from, end + 1))))
    if any(h is None for h in headers.values()):
        raise ChainMoved("a block below the final one is missing")
    if parent and headers[start]["parentHash"] != parent:
        raise ChainMoved(f"block {start} no longer descends from block {start - 1}")
    for n in range(kept_from + 1, end + 1):
        if headers[n]["parentHash"] != headers[n - 1]["hash"]:
            raise ChainMoved(f"blocks {n - 1} and {n} do not link")
    events = fetch_events(ledger, start, end)
    for e in events:
        if e["block"] in headers and e["block_hash"] != headers[e["block"]]["hash"]:
            raise ChainMoved(f"a log of block {e['block']} is from another branch")
    add_answer_chars(events)
    metadata = _metadata_at(ledger, rollback_to) if rollback_to is not None else {}
    with transaction.atomic():
        current = IndexerCursor.objects.select_for_update().filter(name=name).first()
        if ((current.last_block, current.last_hash) if current else None) != expected:
            return 0  # another indexer folded (or rolled back) meanwhile
        if rollback_to is not None:
            rollback(name, rollback_to, metadata)
        fold(events)
        IndexedBlock.objects.bulk_create([IndexedBlock(cursor=name, number=n, hash=headers[n]["hash"])
                                          for n in range(kept_from, end + 1)],
                                         update_conflicts=True, unique_fields=["cursor", "number"],
                                         update_fields=["hash"], batch_size=500)
        IndexedBlock.objects.filter(cursor=name, number__lte=end - window).delete()
        IndexerCursor.objects.update_or_create(name=name, defaults={"last_block": end,
                                                                    "last_hash": headers[end]["hash"]})
    return end - start + 1


def _reorganise(ledger: Ledger, name: str, cursor: IndexerCursor, final: int, max_blocks: int) -> int:
    """The chain lost the last folded block: roll back to the newest folded block it still holds and
    fold the new branch from there (or rebuild everything when none of the kept hashes is there)."""
    known = list(IndexedBlock.objects.filter(cursor=name, number__lte=cursor.last_block)
                 .order_by("-number").values_list("number", "hash"))
    on_chain = ledger.client.block_hashes([n for n, _ in known]) if known else {}
    ancestor = next(((n, h) for n, h in known if on_chain[n] and on_chain[n]["hash"] == h), None)
    if ancestor is None:
        log.warning("the chain lost block %d and none of the %d folded blocks kept: rebuilding the indexed "
                    "tables from the deployment block", cursor.last_block, len(known))
        reset()
        return 1
    number, block_hash = ancestor
    log.warning("the chain no longer holds folded blocks %d..%d (a reorganisation, or a node that lost its "
                "last blocks): rolling the indexed tables back to block %d and folding the new branch",
                number + 1, cursor.last_block, number)
    expected = (cursor.last_block, cursor.last_hash)
    end = min(final, number + max_blocks)
    try:
        if end > number:
            return _fold_range(ledger, name, number + 1, end, parent=block_hash, expected=expected,
                               rollback_to=number)
    except ChainMoved as exc:
        log.info("the new branch moved while it was read (%s); rolling back only", exc)
    metadata = _metadata_at(ledger, number)
    with transaction.atomic():
        current = IndexerCursor.objects.select_for_update().filter(name=name).first()
        if current is None or (current.last_block, current.last_hash) != expected:
            return 0
        rollback(name, number, metadata)
    return 1


def rollback(name: str, ancestor: int, metadata: dict[str, tuple[str, int]]) -> None:
    """Forget everything the indexed tables took from blocks after `ancestor` (call inside a
    transaction): rows created there go, values set there return to what they were at `ancestor`
    (`metadata`: `_metadata_at(ledger, ancestor)`, read before the transaction), and the derived
    tables follow through `folded`."""
    pairs = set(ReputationChange.objects.filter(block_number__gt=ancestor)
                .values_list("model_id", "context_id").distinct())
    ReputationChange.objects.filter(block_number__gt=ancestor).delete()
    for model_id, context_id in pairs:
        last = (ReputationChange.objects.filter(model_id=model_id, context_id=context_id)
                .order_by("-block_number", "-log_index").first())
        if last is None:
            Reputation.objects.filter(model_id=model_id, context_id=context_id).delete()
        else:
            Reputation.objects.filter(model_id=model_id, context_id=context_id).update(
                ra=last.ra, rh=last.rh, r=last.r, n_auto=last.n_auto, n_human=last.n_human,
                block_number=last.block_number)
    rated = set(LedgerInteraction.objects.filter(human_block__gt=ancestor, has_reference=True)
                .values_list("context_id", flat=True))
    LedgerInteraction.objects.filter(auto_block__gt=ancestor).delete()
    LedgerInteraction.objects.filter(human_block__gt=ancestor).update(sh=None, wh=None, d_minutes=None, human_tx="",
                                                                human_block=None)
    LedgerInteraction.objects.filter(reputation_block__gt=ancestor).update(reputation_tx="", reputation_block=None)
    models = set(LedgerModel.objects.filter(metadata_block__gt=ancestor).values_list("model_id", flat=True))
    LedgerModel.objects.filter(block_number__gt=ancestor).delete()
    for model_id, (cid, block) in metadata.items():
        LedgerModel.objects.filter(model_id=model_id).update(metadata_cid=cid, metadata_block=block)
    contexts = set(Context.objects.filter(block_number__gt=ancestor).values_list("context_id", flat=True))
    Context.objects.filter(block_number__gt=ancestor).delete()
    Registration.objects.filter(block_number__gt=ancestor).delete()
    arena = set(ArenaBattle.objects.filter(Q(block_number__gt=ancestor) | Q(vote_block__gt=ancestor))
                .values_list("context_id", flat=True))
    ArenaBattle.objects.filter(block_number__gt=ancestor).delete()
    ArenaBattle.objects.filter(vote_block__gt=ancestor).update(outcome=None, counted=None, vote_block=None, vote_tx="")
    IndexedBlock.objects.filter(cursor=name, number__gt=ancestor).delete()
    ancestor_hash = IndexedBlock.objects.filter(cursor=name, number=ancestor).values_list("hash", flat=True).first()
    IndexerCursor.objects.filter(name=name).update(last_block=ancestor, last_hash=ancestor_hash or "")
    if pairs or models or contexts or arena or rated:
        folded.send(sender=rollback, pairs=pairs, models=models, contexts=contexts, arena=arena, rated=rated)


def _metadata_at(ledger: Ledger, block: int) -> dict[str, tuple[str, int]]:
    """The metadata CID as of `block` (the last ModelAdded or ModelMetadataUpdated event up to there) of
    each model whose CID was set after it, among those that existed then; read from the node."""
    model_ids = set(LedgerModel.objects.filter(metadata_block__gt=block).values_list("model_id", flat=True))
    if not model_ids:
        return {}
    abi = ledger.abis["reputation"]
    topics = [[to_hex(abi.event_topic("ModelAdded")), to_hex(abi.event_topic("ModelMetadataUpdated"))],
              sorted(model_ids)]
    out = {}
    for raw in ledger.client.logs([ledger.deployment.reputation], ledger.deployment.deployBlock, block, topics):
        name, args = abi.decode_log([from_hex(t) for t in raw["topics"]], from_hex(raw["data"]))
        out[hex32(args["modelId"])] = (args["metadataCid"], int(raw["blockNumber"], 16))
    return out


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
