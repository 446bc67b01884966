"""The expert queue: debates whose agents still disagreed, answered one at a time by experts.

An expert takes the next item with `next_item`, which claims it for LLMCHAIN_CLAIM_MINUTES
(15 by default) with the job machine's conditional UPDATE (apps/chain/work.py `take`), so two
experts never hold the same item; an expired claim is as good as none. It is not a work row
(`work.claim`): an item is held for one named expert, among the items that expert has not answered
or skipped, is handed back to them as it is while the claim lasts, and has no attempts and no
backoff. `submit` records the expert's verdict and releases the claim; the item is resolved once
it has `required_verdicts` verdicts, and until then other experts (never the same one twice) get it.
`skip` gives the claim back; the caller remembers what was skipped and passes it to `next_item` so
that the expert is not handed the same item again.

The page, any API and any command call these functions; none of them knows about HTTP.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.chain.work import take
from apps.chat.accounts import profile_of
from lib.metaeval import category_counts, fleiss_kappa

from .models import ExpertVerdict, QueueItem, Verdict
from .outcomes import outcome_settled

NOTE_MAX_CHARS = ExpertVerdict._meta.get_field("note").max_length
_CLAIM_ATTEMPTS = 50  # each failed attempt means another expert took that item just now


class QueueError(Exception):
    """The expert's request cannot be carried out; the message says why, in the expert's words."""


class NotAnExpert(QueueError, PermissionError):
    pass


class UnknownItem(QueueError):
    pass


class NotYourClaim(QueueError):
    pass


class ClaimExpired(QueueError):
    pass


class AlreadySubmitted(QueueError):
    pass


class InvalidVerdict(QueueError, ValueError):
    pass


class NoteTooLong(QueueError, ValueError):
    pass


def claim_minutes() -> float:
    return settings.LLMCHAIN_CLAIM_MINUTES


def is_expert(user) -> bool:
    profile = profile_of(user)
    return bool(profile and profile.is_expert)


def check_expert(user) -> None:
    if not is_expert(user):
        raise NotAnExpert("Only accounts with the expert role can answer the expert queue.")


def _scope(scenario: str | None = None, criterion: str | None = None):
    items = QueueItem.objects.all()
    if scenario is not None:
        items = items.filter(debate__scenario=scenario)
    if criterion is not None:
        items = items.filter(debate__criterion=criterion)
    return items


def _claimable(now) -> Q:
    return Q(status=QueueItem.Status.OPEN) | Q(status=QueueItem.Status.CLAIMED, claim_expires_at__lte=now)


def next_item(expert, scenario: str | None = None, criterion: str | None = None,
              skipped: Collection[int] = ()) -> QueueItem | None:
    """The item this expert should answer now, claimed for them; None when nothing is left.

    An expert's live claim (matching the filters) is handed back as it is; otherwise the claim
    is given up and the oldest claimable item they have not answered or skipped is claimed.
    """
    check_expert(expert)
    now = timezone.now()
    mine = _scope(scenario, criterion).filter(
        status=QueueItem.Status.CLAIMED, claimed_by=expert, claim_expires_at__gt=now).exclude(pk__in=skipped).first()
    if mine is not None:
        return mine
    release_claims(expert)
    candidates = (_scope(scenario, criterion).filter(_claimable(now))
                  .exclude(verdicts__expert=expert).exclude(pk__in=skipped).order_by("id"))
    expires = now + timedelta(minutes=claim_minutes())
    for _ in range(_CLAIM_ATTEMPTS):
        pk = candidates.values_list("pk", flat=True).first()
        if pk is None:
            return None
        # The condition is checked again by the UPDATE itself: of two experts racing for one row,
        # only one sees it claimable and changes it.
        if take(QueueItem.objects, [pk], _claimable(now), status=QueueItem.Status.CLAIMED, claimed_by=expert,
                claim_expires_at=expires):
            return QueueItem.objects.select_related("debate").get(pk=pk)
    return None


def release_claims(expert) -> int:
    """Give back every claim the expert holds (they moved on to other filters)."""
    return QueueItem.objects.filter(status=QueueItem.Status.CLAIMED, claimed_by=expert).update(
        status=QueueItem.Status.OPEN, claimed_by=None, claim_expires_at=None)


def parse_verdict(value) -> int:
    try:
        verdict = int(str(value).strip())
    except (TypeError, ValueError):
        verdict = None
    if verdict not in Verdict.values:
        raise InvalidVerdict("Choose 1 (submission 1 is better), 2 (submission 2 is better) or 0 (neither).")
    return verdict


def submit(expert, item_id: int, verdict, note: str = "") -> ExpertVerdict:
    """Record the expert's verdict on the item they hold, release it, and resolve it when it has
    all the verdicts it asks for."""
    check_expert(expert)
    verdict = parse_verdict(verdict)
    note = (note or "").strip()
    if len(note) > NOTE_MAX_CHARS:
        raise NoteTooLong(f"Keep the note under {NOTE_MAX_CHARS} characters (it has {len(note)}).")
    now = timezone.now()
    with transaction.atomic():
        item = QueueItem.objects.select_for_update().filter(pk=item_id).first()
        if item is None:
            raise UnknownItem("There is no such item in the queue.")
        if item.verdicts.filter(expert=expert).exists():
            raise AlreadySubmitted("You have already given your verdict on this item.")
        if item.status != QueueItem.Status.CLAIMED or item.claimed_by_id != expert.pk:
            raise NotYourClaim("This item is not held for you (another expert has it, or it is done); "
                               "take the next item.")
        if item.claim_expires_at <= now:
            raise ClaimExpired(f"Your hold on this item expired after {claim_minutes():g} minutes; "
                               "take the next item.")
        try:
            with transaction.atomic():
                answer = ExpertVerdict.objects.create(item=item, expert=expert, verdict=verdict, note=note,
                                                      created_at=now)
        except IntegrityError:
            raise AlreadySubmitted("You have already given your verdict on this item.") from None
        resolved = item.verdicts.count() >= item.required_verdicts
        changed = QueueItem.objects.filter(
            pk=item.pk, status=QueueItem.Status.CLAIMED, claimed_by=expert, claim_expires_at__gt=now,
        ).update(status=QueueItem.Status.RESOLVED if resolved else QueueItem.Status.OPEN,
                 claimed_by=None, claim_expires_at=None, resolved_at=now if resolved else None)
        if not changed:  # the claim ran out (and was taken) between the checks and here
            raise ClaimExpired("Your hold on this item expired; take the next item.")
        if resolved:  # the debate now has an outcome: its context's debate ratings move
            outcome_settled(item.debate.context_id)
    return answer


def skip(expert, item_id: int) -> None:
    """Give the item back without a verdict."""
    check_expert(expert)
    item = QueueItem.objects.filter(pk=item_id).first()
    if item is None:
        raise UnknownItem("There is no such item in the queue.")
    released = QueueItem.objects.filter(pk=item_id, status=QueueItem.Status.CLAIMED, claimed_by=expert).update(
        status=QueueItem.Status.OPEN, claimed_by=None, claim_expires_at=None)
    if not released and item.status == QueueItem.Status.CLAIMED and item.claimed_by_id != expert.pk \
            and item.claim_expires_at > timezone.now():
        raise NotYourClaim("This item is held by another expert.")


@dataclass(frozen=True)
class Progress:
    done: int  # items this expert has answered
    remaining: int  # unresolved items this expert could still answer
    total: int  # items in the queue (under the filters)


def progress(expert, scenario: str | None = None, criterion: str | None = None) -> Progress:
    items = _scope(scenario, criterion)
    mine = items.filter(verdicts__expert=expert)
    return Progress(done=mine.count(),
                    remaining=items.exclude(status=QueueItem.Status.RESOLVED).exclude(pk__in=mine.values("pk")).count(),
                    total=items.count())


@dataclass(frozen=True)
class Agreement:
    scenario: str
    items: int  # items with at least two expert verdicts
    verdicts: int
    kappa: float | None  # Fleiss' kappa; None when undefined (e.g. every verdict the same)


def agreement_by_scenario() -> list[Agreement]:
    """How far the experts agree, per scenario, over items that two or more experts answered."""
    by_item: dict[int, list[int]] = defaultdict(list)
    scenario_of: dict[int, str] = {}
    for item_id, scenario, verdict in ExpertVerdict.objects.values_list("item_id", "item__debate__scenario", "verdict"):
        by_item[item_id].append(verdict)
        scenario_of[item_id] = scenario
    rows: dict[str, list[list[int]]] = defaultdict(list)
    for item_id, verdicts in by_item.items():
        if len(verdicts) >= 2:
            rows[scenario_of[item_id]].append(category_counts(verdicts))
    return [Agreement(scenario=s, items=len(counts), verdicts=sum(map(sum, counts)), kappa=fleiss_kappa(counts))
            for s, counts in sorted(rows.items())]


def filter_choices() -> tuple[list[str], list[str]]:
    """The scenarios and criteria that have queued items, for the page's filters."""
    values = QueueItem.objects.values_list("debate__scenario", "debate__criterion").distinct()
    scenarios = sorted({s for s, _ in values})
    criteria = sorted({c for _, c in values})
    return scenarios, criteria
