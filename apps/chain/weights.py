"""Rebuild every recorded wA from the chain and IPFS alone (lib/weighting.py).

For each AutoEvaluated event with references, the evidence record (by its CID, checked) gives the
weighting: the rule, the R of each reference as the oracle used it, and under `validated` the CID of
the evaluator's qualification record, whose outcomes give the factor again. The wA the event carries
must be what they give. Each reference's R must be a value the chain emitted for that model in that
context before the evaluation (a ReputationUpdated event); a model without a REP there in the
oracle's indexed tables was given the context's mean of the time (0.5 with no REP in the context at
all), which must be the mean of the last R of every model of the context after some earlier event
(the index follows the chain a few blocks behind, so the model may have had one on-chain already);
those are counted (`fallback`). Records from before weightings
were written are counted as `unweighted`; evidence or a qualification that cannot be read (IPFS away,
a CID nobody pinned) as `unreadable`: neither proves the wA wrong, and the report says how many.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from lib import records
from lib.cid import CidError
from lib.ids import hex32
from lib.weighting import INITIAL_R, WeightingError, expected_wa, parse_qualification

from .evidence import EvidenceCorrupt, EvidenceMissing
from .ipfs import IpfsError

log = logging.getLogger(__name__)
READ_TIMEOUT_S = 5


@dataclass
class WeightCheck:
    checked: int = 0  # wA rebuilt and compared
    unweighted: int = 0  # evidence without a weighting (written before it existed)
    fallback: int = 0  # reference R values given as the context's mean of the time (no REP of that model indexed)
    unreadable: int = 0  # evidence or qualification records that could not be read
    issues: list[dict] = field(default_factory=list)  # {"interaction", "model", "context", "text"}

    def summary(self) -> dict:
        return {"checked": self.checked, "unweighted": self.unweighted, "fallback": self.fallback,
                "unreadable": self.unreadable, "mismatches": len(self.issues)}


def _read(store, cid: str, parse):
    try:
        return parse(store.get(cid, timeout=READ_TIMEOUT_S)), ""
    except (EvidenceMissing, EvidenceCorrupt, CidError, records.RecordError, WeightingError, OSError,
            IpfsError) as exc:
        return None, f"{cid} cannot be read: {exc}"


def check_weights(events: list[dict], store) -> WeightCheck:
    """Every AutoEvaluated event's wA against what its evidence and qualification give (see module)."""
    report = WeightCheck()
    held: dict[tuple[str, str], set[int]] = defaultdict(set)  # pair -> every R emitted so far
    last: dict[str, dict[str, int]] = defaultdict(dict)  # context -> model -> its R as last emitted
    total: dict[str, int] = defaultdict(int)  # context -> the sum of `last`, kept as it moves
    means: dict[str, set[int]] = defaultdict(lambda: {INITIAL_R})  # context -> every mean of `last` so far
    qualifications: dict[str, tuple[dict | None, str]] = {}
    for e in events:
        a, name = e["args"], e["event"]
        if name == "ReputationUpdated":
            model, context, r = hex32(a["modelId"]), hex32(a["contextId"]), int(a["r"])
            held[(model, context)].add(r)
            total[context] += r - last[context].get(model, 0)
            last[context][model] = r
            means[context].add(total[context] // len(last[context]))  # mean_r of `last`, without summing it again
            continue
        if name != "AutoEvaluated" or not a["hasReference"]:
            continue
        iid, model, context = hex32(a["interactionId"]), hex32(a["modelId"]), hex32(a["contextId"])

        def issue(text: str, iid=iid, model=model, context=context) -> None:
            report.issues.append({"interaction": iid, "model": model, "context": context, "text": text})

        evidence, why = _read(store, a["evidenceCid"], records.parse)
        if evidence is None:
            log.info("wA of %s not rebuilt: the evidence %s", iid, why)
            report.unreadable += 1
            continue
        if evidence["schema"] != records.EVIDENCE_SCHEMA or evidence["interaction"].lower() != iid:
            issue("the evidence CID on-chain holds the record of another interaction")
            continue
        w = evidence.get("weighting")
        if w is None:
            report.unweighted += 1
            continue
        q = None
        if w["rule"] == "validated" and w["qualification"]:
            if w["qualification"] not in qualifications:
                qualifications[w["qualification"]] = _read(store, w["qualification"], parse_qualification)
            q, why = qualifications[w["qualification"]]
            if q is None:
                log.info("wA of %s not rebuilt: the qualification %s", iid, why)
                report.unreadable += 1
                continue
        wa, problems = expected_wa(w, q)
        for text in problems:
            issue(text)
        if wa != int(a["wA"]):
            issue(f"wA on-chain is {a['wA']}, its evidence and qualification give {wa}")
        for ref, r in zip(evidence["references"], w["referenceR"]):
            if int(r) in held.get((ref["model"].lower(), context), ()):
                continue
            if int(r) in means[context]:
                report.fallback += 1
            else:
                issue(f"the R {r} given for reference model {ref['model']} is neither a value the chain held for "
                      "it here nor the mean of the context at any time before")
        report.checked += 1
    return report
