"""The weight the oracle's metric has earned (LLMCHAIN_AUTO_WEIGHT, lib/weighting.py).

Under `validated` the metric's evaluator counts only through a qualification that beat the length
rule: in a context with MIN_HUMAN arena votes of its own between two scored answers, the one on those
votes (apps/annotate/vote_qualification.py: the scores on-chain are this metric's, and the votes are
the context's people on them); elsewhere, and on the global board, the one on the human-labelled sets
(apps/annotate/qualify.py). Otherwise its factor is 0, and the reason goes into every evidence record,
so a reader sees why the automatic score moved nothing.
"""

from __future__ import annotations

import logging

from django.conf import settings

from apps.annotate import vote_qualification
from apps.annotate.qualify import latest, refusal
from lib.reputation import GLOBAL_CONTEXT_ID

log = logging.getLogger(__name__)

# The oracle metric's name -> the metaeval evaluator that judges answers the same way.
EVALUATORS = {"bertscore": "bertscore-ref"}


def evaluator_of(metric) -> str:
    """The evaluator whose qualification speaks for `metric`: a judge metric's own (`geval:<judge>`),
    else the evaluator of the same name (BERTScore against references: `bertscore-ref`)."""
    own = getattr(metric, "evaluator_name", None)
    return own or EVALUATORS.get(metric.name, metric.name)


def earned(metric, context_id: str | None = None) -> tuple[int, str | None, str]:
    """(factor as 1e18 fixed point, the qualification's CID or None, why) for the metric now, in a
    context (None: before any, as a worker starts)."""
    evaluator = evaluator_of(metric)
    if settings.LLMCHAIN_AUTO_WEIGHT == "paper":
        return 10 ** 18, None, "LLMCHAIN_AUTO_WEIGHT=paper: the paper's weight, the mean R of the references"
    if context_id is not None and context_id != GLOBAL_CONTEXT_ID:
        own = vote_qualification.own_votes(evaluator, context_id)
        if own.enough:
            q = own.qualification
            return int(q.factor), q.cid, vote_qualification.reason(evaluator, own)
        factor, cid, why = labelled(evaluator)
        return factor, cid, f"{why}; {vote_qualification.not_enough(own)}"
    return labelled(evaluator)


def labelled(evaluator: str) -> tuple[int, str | None, str]:
    """(factor, CID, why) of the evaluator's latest qualification on the human-labelled sets."""
    q = latest(evaluator)
    why = refusal(evaluator, q)
    if q is None or why:
        return 0, q.cid if q else None, why
    pooled = q.figures.get("pooled", {})
    return int(q.factor), q.cid, (f"{evaluator} beat preferring the longer answer on "
                                  f"{pooled.get('pairs_non_tie')} human-labelled pairs (margin "
                                  f"{pooled.get('margin_over_length')}, lower end "
                                  f"{pooled.get('margin_over_length_ci_low')})")


def say_refusal(metric) -> None:
    """Log, once at a worker's start, when the metric's scores will carry no weight and why."""
    factor, _, why = earned(metric)
    if not factor:
        log.warning("the automatic scores will carry no weight (wA = 0) except in contexts whose own votes "
                    "show the metric beats the length rule: %s", why)
