"""The oracle metric qualified on a context's own people: its arena votes between two scored answers.

The labelled sets (apps/annotate/qualify.py) say how an evaluator does on other people's pairs; once a
context has MIN_HUMAN counted votes that preferred one of two answers both scored (Sa against
references, and a known length), those votes say how the scores on-chain do with this context's
people, and the oracle weighs the context's new scores by them instead (apps/oracle/weights.py).

They are kept as a qualification record of the same schema as the labelled sets' (lib/weighting.py),
so `chain audit` and `leaderboard verify` rebuild the factor from it as from any other: one outcome row
per vote (the battle id, Sa right, the longer answer right), in lib.weighted.OUTCOME_ORDER so that the
factor depends on the four counts alone and the board, which counts the same votes, shows the same
weight; one set naming the context's votes, with the sha256 of the canonical outcomes; the bootstrap's
rounds those of lib.metaeval.bootstrap_rounds for that many votes, as on the board. The record is
pinned and kept (`VoteQualification`) once per distinct set of votes: a batch of evaluations in a
context whose votes have not changed reads the votes once and bootstraps nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from apps.chain.evidence import default_store
from apps.chain.models import Context
from lib import records
from lib.metaeval import bootstrap_rounds
from lib.weighted import MIN_HUMAN
from lib.weighting import qualification_record

from .models import VoteQualification
from .site_validity import vote_outcomes

SIGNAL = "arena votes between two scored answers"


@dataclass(frozen=True)
class OwnVotes:
    """What a context's own votes say about an evaluator: `qualification` is None below MIN_HUMAN."""

    judged: int  # counted votes that preferred one of two scored answers
    votes: int  # counted votes that preferred one answer, scored or not
    qualification: VoteQualification | None = None

    @property
    def enough(self) -> bool:
        return self.qualification is not None


def set_name(context_id: str) -> str:
    name = Context.objects.filter(context_id=context_id).values_list("name", flat=True).first()
    return f"site votes: {name or context_id}"


def own_votes(evaluator: str, context_id: str) -> OwnVotes:
    """The evaluator's qualification on the context's own votes, pinned and kept the first time these
    votes are seen; below MIN_HUMAN of them, only their counts."""
    outcomes, votes = vote_outcomes(context_id)
    if len(outcomes) < MIN_HUMAN:
        return OwnVotes(judged=len(outcomes), votes=votes)
    digest = hashlib.sha256(records.canonical([list(row) for row in outcomes])).hexdigest()
    kept = VoteQualification.objects.filter(evaluator=evaluator, context_id=context_id, outcomes_sha256=digest).first()
    if kept is None:
        record = qualification_record(
            evaluator=evaluator, params={"context": context_id, "signal": SIGNAL}, outcomes=outcomes,
            sets=[{"name": set_name(context_id), "sha256": digest, "pairs": votes, "judged": len(outcomes)}],
            rounds=bootstrap_rounds(len(outcomes)))  # the board's rounds for the same votes
        cid = default_store().put(records.canonical(record))
        kept = _keep(evaluator=evaluator, context_id=context_id, outcomes_sha256=digest, judged=len(outcomes),
                     cid=cid, factor=record["figures"]["factor"], figures=record["figures"])
    return OwnVotes(judged=len(outcomes), votes=votes, qualification=kept)


def _keep(**fields) -> VoteQualification:
    """The row, created once: a second worker that pinned the same record at the same time reads the first's
    (the same votes give the same record, and so the same CID)."""
    try:
        with transaction.atomic():
            return VoteQualification.objects.create(**fields)
    except IntegrityError:
        return VoteQualification.objects.get(evaluator=fields["evaluator"], context_id=fields["context_id"],
                                             outcomes_sha256=fields["outcomes_sha256"])


def reason(evaluator: str, own: OwnVotes) -> str:
    """Why the evaluator weighs what it weighs in a context with enough votes of its own, in words."""
    f = own.qualification.figures
    n = f["n"]

    def pct(count) -> str:
        return f"{100 * count / n:.1f}%"

    said = (f"on this context's own {n} {SIGNAL} it picked the voted answer {pct(f['right'])} of the time, "
            f"the longer answer {pct(f['length_right'])}")
    if own.qualification.factor == "0":
        return (f"{evaluator} has not shown it beats preferring the longer answer with this context's people: "
                f"{said}; the lower end of its margin is {pct(f['margin_low'])}")
    return (f"{evaluator} is weighed by this context's people: {said} (margin {pct(f['right'] - f['length_right'])}, "
            f"lower end {pct(f['margin_low'])})")


def not_enough(own: OwnVotes) -> str:
    """What a context with too few votes of its own adds to the labelled sets' reason."""
    return (f"this context has not enough votes of its own yet ({own.judged} {SIGNAL}, {MIN_HUMAN} needed), "
            f"so the weight comes from the human-labelled sets")
