"""What a debate says about the two models it compared, and the per-context rating built from that.

A debate held here over two registered models' answers ends in an outcome once it is settled:
the agents' consensus when they agreed, otherwise the majority of the experts' verdicts once its
queue item is resolved. Outcomes are in the debate's numbering (1: model_1's answer is better,
2: model_2's, 0: neither, a tie). The boards fit Bradley–Terry ratings (lib.pairwise) to the
settled outcomes of each context. These ratings are the site's own, from debates held here and
experts' verdicts; nothing of them is on-chain, so /verify does not check them.
"""

from __future__ import annotations

from collections import defaultdict

from django.db.models import F

from apps.chain.signals import boards_changed
from lib.metaeval import FIRST, NEITHER, SECOND, majority
from lib.pairwise import Outcome, bradley_terry, records
from lib.reputation import GLOBAL_CONTEXT_ID

from .models import Debate, ExpertVerdict, QueueItem

SCORE_OF_A = {FIRST: 1.0, SECOND: 0.0, NEITHER: 0.5}  # model_1's score, by verdict


def outcome(debate: Debate) -> int | None:
    """The settled verdict of a debate: its consensus, else the experts' majority once its queue item
    is resolved; None while unsettled or when the experts split evenly."""
    if debate.consensus is not None:
        return debate.consensus
    item = QueueItem.objects.filter(debate=debate, status=QueueItem.Status.RESOLVED).first()
    if item is None:
        return None
    return majority(list(item.verdicts.values_list("verdict", flat=True)))


def context_outcomes(context_id: str) -> list[Outcome]:
    """The settled outcomes of the debates held in a context between two different registered models
    (a = model_1, b = model_2), in debate order. The global context takes the debates of every
    context, as its R takes every context's evaluations. Two queries, whatever the number of debates."""
    debates = Debate.objects.exclude(model_1="").exclude(model_2="").exclude(model_1=F("model_2"))
    if context_id == GLOBAL_CONTEXT_ID:
        debates = debates.exclude(context_id="")
    else:
        debates = debates.filter(context_id=context_id)
    rows = list(debates.order_by("id").values_list("id", "model_1", "model_2", "consensus", "queue_item__status"))
    to_resolve = [pk for pk, _, _, consensus, status in rows
                  if consensus is None and status == QueueItem.Status.RESOLVED]
    verdicts: dict[int, list[int]] = defaultdict(list)
    if to_resolve:
        for debate_id, verdict in ExpertVerdict.objects.filter(item__debate_id__in=to_resolve).values_list(
                "item__debate_id", "verdict"):
            verdicts[debate_id].append(verdict)
    out = []
    for pk, model_1, model_2, consensus, _ in rows:
        settled = consensus if consensus is not None else (majority(verdicts[pk]) if pk in verdicts else None)
        if settled is not None:
            out.append(Outcome(model_1, model_2, SCORE_OF_A[settled]))
    return out


def debate_ratings(context_id: str) -> dict[str, tuple[float, int]]:
    """model id -> (Bradley–Terry rating on the Elo scale, settled debates it took part in), for the
    models with at least one settled debate in the context."""
    outcomes = context_outcomes(context_id)
    ratings = bradley_terry(outcomes)
    return {model: (ratings[model], record.games) for model, record in records(outcomes).items()}


def outcome_settled(context_id: str) -> None:
    """Call when a debate in `context_id` gets its outcome (consensus saved, or its queue item resolved):
    once the transaction commits, the boards it changes (its context's and the global one) get new
    versions, so their caches re-render."""
    if context_id:
        boards_changed.send(sender=outcome_settled, contexts={context_id, GLOBAL_CONTEXT_ID})
