"""The audit: recompute every score from the chain alone and compare it with the database.

It replays the contract events (and the humEval call data, with block timestamps) through
the Python mirror of the reputation model, checks that the contract's stored state equals
the mirror's, that the indexed tables equal the contract's state, and that every recorded wA is
what its evidence and qualification records on IPFS give (weights.check_weights).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from eth_abi import decode
from eth_utils import to_checksum_address

from lib.ids import hex32
from lib.reputation import GLOBAL_CONTEXT, ReputationError, ReputationModel

from .client import from_hex, to_hex
from .evidence import default_store
from .indexer import fetch_all
from .ledger import Ledger
from .models import Reputation
from .weights import WeightCheck, check_weights


@dataclass
class AuditReport:
    events: int = 0
    pairs: int = 0
    interactions: int = 0
    contract_mismatches: list[dict] = field(default_factory=list)  # chain state vs recomputation
    db_mismatches: list[dict] = field(default_factory=list)  # database vs chain state
    weights: WeightCheck = field(default_factory=WeightCheck)  # recorded wA vs evidence and qualification

    @property
    def ok(self) -> bool:
        return not self.contract_mismatches and not self.db_mismatches and not self.weights.issues

    def summary(self) -> dict:
        return {"ok": self.ok, "events": self.events, "pairs": self.pairs, "interactions": self.interactions,
                "contract_mismatches": len(self.contract_mismatches), "db_mismatches": len(self.db_mismatches),
                "weights": self.weights.summary()}


def all_events(ledger: Ledger, chunk: int = 10_000) -> list[dict]:
    return fetch_all(ledger, ledger.deployment.deployBlock, ledger.client.block_number(), chunk)


def hum_eval_calls(ledger: Ledger, tx: dict) -> list[tuple[str, tuple]]:
    """The humEval calls a transaction made, as (sender, decoded arguments): a direct call from its
    sender, or the requests the trusted forwarder relayed (execute / executeBatch), each from the
    signer it names. Which of those took effect is for the events to say."""
    fn = ledger.abis["reputation"].fn("humEval")
    data = from_hex(tx["input"])
    if data[:4] == fn.selector:
        return [(tx["from"], decode(fn.inputs, data[4:]))]
    forwarder = ledger.deployment.forwarder
    if not forwarder or (tx.get("to") or "").lower() != forwarder.lower():
        raise ValueError(f"{tx['hash']} is neither a humEval call nor one relayed by the forwarder")
    abi = ledger.abis["forwarder"]
    single, batch = abi.fn("execute"), abi.fn("executeBatch")
    if data[:4] == single.selector:
        requests = [decode(single.inputs, data[4:])[0]]
    elif data[:4] == batch.selector:
        requests = decode(batch.inputs, data[4:])[0]
    else:
        raise ValueError(f"{tx['hash']} calls the forwarder with neither execute nor executeBatch")
    reputation = ledger.deployment.reputation.lower()
    return [(sender, decode(fn.inputs, body[4:])) for sender, to, _value, _gas, _deadline, body, _sig in requests
            if to.lower() == reputation and body[:4] == fn.selector]


def replay(ledger: Ledger, events: list[dict]) -> ReputationModel:
    """The mirror's state after every call the events record, in chain order.

    Events that move no score (ModelMetadataUpdated: a model's new metadata CID) are skipped; the
    audit compares scores only, not the LedgerModel rows. Battles and votes are replayed for the rules
    they must keep (a model's owner votes on no battle of it), which a replay error reports."""
    mirror = ReputationModel(lambda_wad=ledger.lambda_wad)
    touched: dict[tuple[str, bytes], set[str]] = defaultdict(set)
    for e in events:
        if "interactionId" in e["args"]:
            touched[(e["tx"], e["args"]["interactionId"])].add(e["event"])
    hum_txs = [e["tx"] for e in events if e["event"] == "HumanEvaluated"]
    calls = {}
    if hum_txs:
        txs = ledger.client.batch([("eth_getTransactionByHash", [h]) for h in hum_txs])
        blocks = ledger.client.batch([("eth_getBlockByNumber", [tx["blockNumber"], False]) for tx in txs])
        for h, tx, block in zip(hum_txs, txs, blocks):
            for sender, args in hum_eval_calls(ledger, tx):
                calls[(h, args[0])] = (sender, int(block["timestamp"], 16), args)
    done_updates = set()
    for e in events:
        a, name = e["args"], e["event"]
        if name == "Registered":
            mirror.register(a["account"], a["at"])
        elif name == "ContextAdded" and a["contextId"] != GLOBAL_CONTEXT:
            mirror.add_context(a["contextId"])
        elif name == "ModelAdded":
            mirror.add_model(a["modelId"], to_checksum_address(a["owner"]))
        elif name == "AutoEvaluated":
            mirror.auto_eval(a["interactionId"], a["modelId"], a["contextId"], a["user"], a["hasReference"],
                             a["sA"], a["wA"])
        elif name == "HumanEvaluated":
            sender, timestamp, args = calls[(e["tx"], a["interactionId"])]
            mirror.hum_eval(args[0], to_checksum_address(sender), timestamp, *args[1:])
        elif name == "BattleOpened":
            mirror.open_battle(a["battleId"], a["interactionA"], a["interactionB"])
        elif name == "Voted":
            mirror.vote(a["battleId"], to_checksum_address(a["user"]), a["outcome"])
        elif name == "ReputationUpdated":
            key = (e["tx"], a["interactionId"])
            if not touched[key] & {"AutoEvaluated", "HumanEvaluated"} and key not in done_updates:
                done_updates.add(key)
                mirror.update_reputation(a["interactionId"])
    return mirror


def run_audit(ledger: Ledger, store=None) -> AuditReport:
    events = all_events(ledger)
    report = AuditReport(events=len(events), weights=check_weights(events, store or default_store()))
    try:
        mirror = replay(ledger, events)
    except ReputationError as exc:
        report.contract_mismatches.append({"replay": f"the events cannot be replayed: {exc}"})
        return report
    report.interactions = len(mirror.interactions)
    pairs = sorted(mirror.reps)
    report.pairs = len(pairs)
    fn = ledger.abis["reputation"].fn("reputation")
    to = ledger.deployment.reputation
    replies = ledger.client.batch([("eth_call", [{"to": to, "data": to_hex(fn.encode(m, c))}, "latest"])
                                   for m, c in pairs])
    chain = {}
    for (m, c), reply in zip(pairs, replies):
        on_chain = fn.decode_output(from_hex(reply)) if isinstance(reply, str) else None
        chain[(hex32(m), hex32(c))] = on_chain
        expected = mirror.reputation(m, c)
        if on_chain is None or tuple(on_chain) != expected:
            report.contract_mismatches.append({"model": hex32(m), "context": hex32(c), "chain": on_chain,
                                               "recomputed": expected})
    db = {(r.model_id, r.context_id): (r.ra, r.rh, r.r, r.n_auto, r.n_human) for r in Reputation.objects.all()}
    for key, on_chain in chain.items():
        if db.get(key) != (tuple(on_chain) if on_chain else None):
            report.db_mismatches.append({"model": key[0], "context": key[1], "chain": on_chain,
                                         "database": db.get(key)})
    for key in set(db) - set(chain):
        report.db_mismatches.append({"model": key[0], "context": key[1], "chain": None, "database": db[key]})
    return report
