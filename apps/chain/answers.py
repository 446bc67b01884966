"""The length of each indexed interaction's answer (LedgerInteraction.answer_chars), from the evidence
record its AutoEvaluated event names: the record `verify` reads, so that the boards' validity figures rest
on the chain and its evidence alone. A conversation deleted, or a database emptied under a chain that
keeps its records, changes nothing in them.

The indexer reads this site's own copy of the records as it folds the events (`indexer.add_answer_chars`:
files checked against their CIDs, no network). A record not there (pinned by another site, or the copy
lost) is read from the IPFS node by `AnswerFill`, which the chain worker runs between its passes: each
record with a short timeout, a bounded time per pass, and not again for a while once the node does not
answer. Until then the answer has no length: the figures leave it out and count it, as verify does with
a record it cannot read.

Not the chat's answer, although the record was made from it: the chat's row can be gone, and it is not
what verify reads; the record under the CID is the answer the chain vouches for (and the chain app does
not import the chat's).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import transaction
from django.db.models import Q

from lib.reputation import GLOBAL_CONTEXT_ID

from . import indexer
from .evidence import default_store, read_answer
from .ipfs import IpfsError, IpfsUnavailable
from .models import ArenaBattle, LedgerInteraction
from .signals import boards_changed

log = logging.getLogger(__name__)
ROWS = 500  # rows without a length read per pass
BUDGET_S = 2.0  # a pass reads no new record after this long
READ_TIMEOUT_S = 2.0  # one record from the node
EVERY_S = 10.0  # between passes that found nothing to fill, doubling while they go on finding nothing...
EVERY_MAX_S = 300.0  # ...up to this


class AnswerFill:
    """Reads, pass by pass, the answers whose length the indexer could not take from the local records.

    Each pass takes the next rows without a length in id order (from where the last pass stopped; back to
    the first once past the last) and reads their records through `store` (by default this site's: the
    local copy, then the IPFS node). When a pass fills nothing, the next comes EVERY_S later, and twice as
    late after each such pass; one that fills some lets the next come at once. A node that does not answer
    ends the pass."""

    def __init__(self, store=None, *, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.clock = clock
        self.after = 0  # the last row id tried
        self.due = 0.0  # no pass before this
        self.wait = EVERY_S

    def run(self) -> int:
        """One pass, if it is due; returns how many answers were given a length."""
        now = self.clock()
        if now < self.due:
            return 0
        rows = list(LedgerInteraction.objects.filter(answer_chars__isnull=True, id__gt=self.after).order_by("id")
                    .values_list("id", "interaction_id", "evidence_cid")[:ROWS])
        found: dict[int, tuple[str, int]] = {}
        away = False
        store = (self.store or default_store()) if rows else None
        for pk, iid, cid in rows:
            if self.clock() - now > BUDGET_S:
                break
            try:
                text = read_answer(cid, iid, store, timeout=READ_TIMEOUT_S)
            except IpfsUnavailable as exc:
                log.warning("answers' lengths: the IPFS node is not answering (%s); trying again later", exc)
                away = True
                break
            except IpfsError as exc:  # the node could not find it in time: tried again on a later round
                log.info("evidence %s of %s unreadable for now: %s", cid, iid, exc)
                text = None
            self.after = pk
            if text is not None:
                found[pk] = (cid, len(text))
        if len(rows) < ROWS and not away and (not rows or self.after == rows[-1][0]):
            self.after = 0  # past the last row: from the first again
        filled = save(found) if found else 0
        if filled and not away:
            self.wait, self.due = EVERY_S, now
        else:
            self.due = now + self.wait
            self.wait = min(EVERY_MAX_S, 2 * self.wait)
        return filled


def save(found: dict[int, tuple[str, int]]) -> int:
    """Write the lengths read ({row id: (its evidence CID, length)}) and move the boards whose figures
    they change; returns the rows written (a row the indexer rolled back meanwhile is not)."""
    filled = []
    with transaction.atomic():
        for pk, (cid, chars) in found.items():
            if LedgerInteraction.objects.filter(pk=pk, evidence_cid=cid, answer_chars__isnull=True).update(
                    answer_chars=chars):
                filled.append(pk)
        if not filled:
            return 0
        rows = LedgerInteraction.objects.filter(pk__in=filled)
        iids = list(rows.values_list("interaction_id", flat=True))
        rated = set(rows.filter(has_reference=True, sh__isnull=False).values_list("context_id", flat=True))
        voted = set(ArenaBattle.objects.filter(Q(interaction_a__in=iids) | Q(interaction_b__in=iids), counted=True,
                                               outcome__isnull=False).values_list("context_id", flat=True))
        # The vote figures are kept per arena generation, the rating figures per ratings generation: move both.
        if voted:
            indexer.folded.send(sender=AnswerFill, pairs=set(), models=set(), contexts=set(), arena=voted)
        if rated | voted:
            boards_changed.send(sender=AnswerFill, contexts=rated | voted | {GLOBAL_CONTEXT_ID}, rated=rated)
    return len(filled)
