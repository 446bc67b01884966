"""The weight of the automatic score, earned on human labels, and the records that let anyone check it.

`LLMCHAIN_AUTO_WEIGHT`:
- ``paper``: wA = the mean R of the reference models in the context (REPUTATION.md, the paper);
- ``validated`` (the default): wA = that mean times the evaluator's validity factor
  (`lib.metaeval.validity_factor_wad`): 0 until the evaluator has beaten "the longer answer wins"
  on human-labelled pairs, or on the context's own arena votes once it has enough (the lower end of
  its paired 95% margin above 0), then growing with the margin.

A qualification record (IPFS) holds what the factor comes from: per decided labelled pair (or vote)
whether the evaluator and the length rule were right, the sets and their hashes, and the bootstrap's
rounds and seed; `check_qualification` rebuilds the factor from the outcomes alone. Each interaction's
evidence record carries a `weighting` object (the rule, the R of every reference as used, their mean,
the factor and the qualification's CID); `expected_wa` rebuilds wA from it and the qualification.
Everything is integer (18-decimal fixed point), so every verifier gets the same number.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .metaeval import BOOTSTRAP_ROUNDS, BOOTSTRAP_SEED, bootstrap_counts, bootstrap_runs, validity_factor_wad
from .records import WAD, RecordError, canonical

QUALIFICATION_SCHEMA = "llmchain/evaluator-qualification"
QUALIFICATION_VERSION = 1
RULES = ("validated", "paper")
DEFAULT_RULE = "validated"
# The R of a reference model in a context where no model has a REP yet (REPUTATION.md: 0.5 when first);
# a model without one among others is given the mean of theirs.
INITIAL_R = WAD // 2
# The order a record of a board's votes lists them in: by (score right, longer answer right), each group in
# battle-id order. The bootstrap resamples positions, so in this order its figures depend on the four
# counts alone, and whoever counts the votes gets the factor of whoever lists them.
OUTCOME_ORDER = ((1, 1), (1, 0), (0, 1), (0, 0))


class WeightingError(ValueError):
    """A weighting or qualification record that does not add up; the message says what."""


# --- qualification -------------------------------------------------------------------------------

def qualification_record(*, evaluator: str, params: dict[str, str], sets: Sequence[dict],
                         outcomes: Sequence[tuple[str, int, int]], rounds: int = BOOTSTRAP_ROUNDS,
                         seed: int = BOOTSTRAP_SEED) -> dict:
    """The record of an evaluator's qualification: `sets` = [{"name", "sha256", "pairs", "judged"}],
    `outcomes` = (pair id, evaluator right 0/1, length rule right 0/1) for each decided pair judged."""
    record = {"schema": QUALIFICATION_SCHEMA, "version": QUALIFICATION_VERSION, "evaluator": evaluator,
              "params": {str(k): str(v) for k, v in params.items()},
              "sets": [{"name": s["name"], "sha256": s["sha256"], "pairs": int(s["pairs"]), "judged": int(s["judged"])}
                       for s in sets],
              "bootstrap": {"rounds": rounds, "seed": seed},
              "outcomes": [[str(i), int(e), int(b)] for i, e, b in outcomes]}
    record["figures"] = qualification_figures(record)
    return check_qualification(record)


def qualification_figures(record: dict) -> dict:
    """What the outcomes say, recomputed: n, rights, the margin's bounds (counts) and the factor."""
    return outcome_figures([(e, b) for _, e, b in record["outcomes"]], record["bootstrap"]["rounds"],
                           record["bootstrap"]["seed"])


def outcome_figures(outcomes: Sequence[tuple[int, int]], rounds: int = BOOTSTRAP_ROUNDS,
                    seed: int = BOOTSTRAP_SEED) -> dict:
    """A qualification's figures from its (evaluator right, length rule right) rows in their order: the
    one computation of the factor, for a record and for a board's votes alike (lib.weighted.vote_validity).
    Rows in OUTCOME_ORDER (a record of votes) are counted and go through `count_figures`, so a record
    pinned, checked and audited in one process, and the board of the same votes, bootstrap once."""
    counts = grouped_counts(outcomes)
    if counts is not None:
        return count_figures(counts, rounds, seed)
    return _figures(outcomes, rounds, seed)


def count_figures(counts: tuple[int, int, int, int], rounds: int, seed: int) -> dict:
    """`outcome_figures` of outcomes listed in OUTCOME_ORDER, `counts` of each in that order. They depend
    on nothing else, so each distinct (counts, rounds, seed) is bootstrapped once per process."""
    return dict(_count_figures(tuple(int(c) for c in counts), rounds, seed))


@lru_cache(maxsize=256)
def _count_figures(counts: tuple[int, ...], rounds: int, seed: int) -> dict:
    boot = bootstrap_runs(list(zip(OUTCOME_ORDER, counts)), rounds, seed)
    right = sum(c for (e, _), c in zip(OUTCOME_ORDER, counts) if e)
    base = sum(c for (_, b), c in zip(OUTCOME_ORDER, counts) if b)
    return _figures_of(sum(counts), right, base, boot)


def grouped_counts(outcomes: Sequence[tuple[int, int]]) -> tuple[int, int, int, int] | None:
    """How many of each outcome, in OUTCOME_ORDER, when the rows are listed in that order; else None."""
    counts, last = [0, 0, 0, 0], 0
    for e, b in outcomes:
        at = _PLACE.get((e, b), -1)
        if at < last:
            return None
        counts[at] += 1
        last = at
    return counts[0], counts[1], counts[2], counts[3]


_PLACE = {outcome: at for at, outcome in enumerate(OUTCOME_ORDER)}


def _figures(outcomes: Sequence[tuple[int, int]], rounds: int, seed: int) -> dict:
    boot = bootstrap_counts(outcomes, rounds, seed)
    return _figures_of(len(outcomes), sum(e for e, _ in outcomes), sum(b for _, b in outcomes), boot)


def _figures_of(n: int, right: int, base: int, boot: dict) -> dict:
    low, high = boot["margin"]
    return {"n": n, "right": right, "length_right": base, "margin_low": low, "margin_high": high,
            "right_low": boot["right"][0], "right_high": boot["right"][1],
            "factor": str(validity_factor_wad(low, n, base))}


def check_qualification(d: Any) -> dict:
    """A qualification record as read: its fields well-formed and its figures what its outcomes give."""
    if not isinstance(d, dict) or d.get("schema") != QUALIFICATION_SCHEMA or d.get("version") != QUALIFICATION_VERSION:
        raise WeightingError("not an evaluator qualification record of a known version")
    if set(d) != {"schema", "version", "evaluator", "params", "sets", "bootstrap", "outcomes", "figures"}:
        raise WeightingError("a qualification record has exactly its eight fields")
    if not isinstance(d["evaluator"], str) or not d["evaluator"]:
        raise WeightingError("a qualification names its evaluator")
    boot = d["bootstrap"]
    if not isinstance(boot, dict) or not all(isinstance(boot.get(k), int) for k in ("rounds", "seed")):
        raise WeightingError("bootstrap must give integer rounds and seed")
    rows = d["outcomes"]
    if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], str) and r[1] in (0, 1) and r[2] in (0, 1)
            for r in rows):
        raise WeightingError("outcomes must be [pair id, evaluator right 0/1, length rule right 0/1] rows")
    if len({r[0] for r in rows}) != len(rows):
        raise WeightingError("a pair appears twice in the outcomes")
    try:
        figures = qualification_figures(d)
    except ValueError as exc:
        raise WeightingError(str(exc)) from None
    if d["figures"] != figures:
        raise WeightingError("the qualification's figures are not what its outcomes give")
    return d


def parse_qualification(data: bytes) -> dict:
    """A qualification record's bytes (canonical JSON), checked."""
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WeightingError(f"not a JSON record: {exc}") from None
    check_qualification(d)
    if canonical(d) != bytes(data):
        raise WeightingError("the qualification record is not in canonical form")
    return d


def qualification_factor(record: dict) -> int:
    return int(record["figures"]["factor"])


# --- the weighting of one interaction --------------------------------------------------------------

def mean_r(reference_r: Sequence[int]) -> int:
    return sum(reference_r) // len(reference_r) if reference_r else 0


def weighting(*, rule: str, evaluator: str, reference_r: Sequence[int], factor: int, qualification: str | None,
              reason: str) -> dict:
    """The evidence's `weighting` object, and through `weighted_wa` the wA it gives."""
    if rule not in RULES:
        raise WeightingError(f"LLMCHAIN_AUTO_WEIGHT must be one of {', '.join(RULES)}, not {rule!r}")
    if not 0 <= factor <= WAD:
        raise WeightingError("the factor is a share of 1")
    return {"rule": rule, "evaluator": evaluator, "referenceR": [str(r) for r in reference_r],
            "meanR": str(mean_r(reference_r)), "factor": str(factor if rule == "validated" else WAD),
            "qualification": qualification if rule == "validated" else None, "reason": reason}


def weighted_wa(w: dict) -> int:
    return int(w["meanR"]) * int(w["factor"]) // WAD


def check_weighting(w: Any, references: int) -> dict:
    """The `weighting` object of an evidence record, well-formed (`references`: how many it has)."""
    if not isinstance(w, dict) or set(w) != {"rule", "evaluator", "referenceR", "meanR", "factor", "qualification",
                                             "reason"}:
        raise RecordError("weighting must be an object of rule, evaluator, referenceR, meanR, factor, "
                          "qualification and reason")
    if w["rule"] not in RULES:
        raise RecordError(f"weighting.rule must be one of {', '.join(RULES)}")
    if not isinstance(w["evaluator"], str) or not isinstance(w["reason"], str):
        raise RecordError("weighting.evaluator and weighting.reason are text")
    rs = w["referenceR"]
    if not isinstance(rs, list) or len(rs) != references or not all(_is_wad(r) for r in rs):
        raise RecordError("weighting.referenceR gives one R per reference, each a fixed-point share of 1")
    if not (_is_wad(w["meanR"]) and _is_wad(w["factor"])):
        raise RecordError("weighting.meanR and weighting.factor are fixed-point shares of 1")
    if w["qualification"] is not None and not (isinstance(w["qualification"], str) and w["qualification"]):
        raise RecordError("weighting.qualification is a CID or null")
    return w


def _is_wad(x: Any) -> bool:
    return isinstance(x, str) and x.isdigit() and (x == "0" or not x.startswith("0")) and int(x) <= WAD


def expected_wa(w: dict, qualification: dict | None) -> tuple[int, list[str]]:
    """(the wA the weighting gives, what does not add up in it): the mean of the references' R, and
    under `validated` the factor the qualification's outcomes give (0 without a qualification)."""
    problems = []
    rs = [int(r) for r in w["referenceR"]]
    if int(w["meanR"]) != mean_r(rs):
        problems.append(f"meanR {w['meanR']} is not the mean of the references' R ({mean_r(rs)})")
    if w["rule"] == "paper":
        factor = WAD
    elif w["qualification"] is None:
        factor = 0
    elif qualification is None:
        problems.append(f"the qualification {w['qualification']} cannot be read")
        factor = int(w["factor"])
    else:
        factor = qualification_factor(qualification)
        if qualification["evaluator"] != w["evaluator"]:
            problems.append(f"the qualification is of {qualification['evaluator']}, not {w['evaluator']}")
    if int(w["factor"]) != factor:
        problems.append(f"factor {w['factor']} is not the {factor} its rule and qualification give")
    return mean_r(rs) * factor // WAD, problems
