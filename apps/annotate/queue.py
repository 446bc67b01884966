"""The expert queue: debates whose agents still disagreed, answered one at a time by experts.

`peek_item` says which item an expert would answer now, reading only (a page shows it on a GET).
`hold` holds that item for them for LLMCHAIN_CLAIM_MINUTES (15 by default) with the job machine's
conditional UPDATE (apps/chain/work.py `take`), so two experts are never handed the same item at
the same moment; an expired hold is as good as none. The page asks for the hold as soon as it
shows the item (an htmx POST); `next_item` peeks and holds in one call, for callers without a page.
A hold is not a work row (`work.claim`): an item is held for one named expert, among the items that
expert has not answered or skipped, is handed back to them as it is while the hold lasts, and has
no attempts and no backoff. `submit` records the expert's verdict and gives the hold back; it takes
an item that nobody holds as it records the verdict (a page whose hold was not asked for), and
refuses one another expert holds or whose hold on it ran out. The item is resolved once it has
`required_verdicts` verdicts, and until then other experts (never the same one twice) get it.
`skip` gives the hold back; the caller remembers what was skipped and passes it to `peek_item` so
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


def _held_by(expert, now, scenario: str | None = None, criterion: str | None = None):
    return _scope(scenario, criterion).filter(status=QueueItem.Status.CLAIMED, claimed_by=expert,
                                              claim_expires_at__gt=now)


def _holds(item: QueueItem, expert, now) -> bool:
    return (item.status == QueueItem.Status.CLAIMED and item.claimed_by_id == expert.pk
            and item.claim_expires_at > now)


def _free(item: QueueItem, now) -> bool:
    """`_claimable`, of an item as read."""
    return item.status == QueueItem.Status.OPEN or (item.status == QueueItem.Status.CLAIMED
                                                    and item.claim_expires_at <= now)


def peek_item(expert, scenario: str | None = None, criterion: str | None = None,
              skipped: Collection[int] = ()) -> QueueItem | None:
    """The item this expert would be handed now, read without holding it; None when nothing is left.

    The item they hold (matching the filters) if any; otherwise the oldest item nobody holds that
    they have not answered or skipped. `hold` holds it."""
    check_expert(expert)
    now = timezone.now()
    mine = _held_by(expert, now, scenario, criterion).exclude(pk__in=skipped).select_related("debate").first()
    if mine is not None:
        return mine
    return (_scope(scenario, criterion).filter(_claimable(now)).exclude(verdicts__expert=expert)
            .exclude(pk__in=skipped).select_related("debate").order_by("id").first())


def held_for(item: QueueItem, expert) -> bool:
    """Whether the item (as read) is held for this expert now."""
    return _holds(item, expert, timezone.now())


def hold(expert, item_id: int) -> QueueItem:
    """Hold the item for this expert for `claim_minutes`, giving back their hold on any other item;
    an item they already hold is handed back as it is. Refused when another expert holds it, when
    it is resolved, or when they have answered it."""
    check_expert(expert)
    now = timezone.now()
    item = QueueItem.objects.select_related("debate").filter(pk=item_id).first()
    if item is None:
        raise UnknownItem("There is no such item in the queue.")
    if _holds(item, expert, now):
        return item
    if item.verdicts.filter(expert=expert).exists():
        raise AlreadySubmitted("You have already given your verdict on this item.")
    # The condition is checked again by the UPDATE itself: of two experts racing for one row, only
    # one sees it free and changes it.
    if not take(QueueItem.objects, [item_id], _claimable(now), status=QueueItem.Status.CLAIMED, claimed_by=expert,
                claim_expires_at=now + timedelta(minutes=claim_minutes())):
        raise NotYourClaim("Another expert has just taken this item (or it is done).")
    release_claims(expert, keep=item_id)
    return QueueItem.objects.select_related("debate").get(pk=item_id)


def next_item(expert, scenario: str | None = None, criterion: str | None = None,
              skipped: Collection[int] = ()) -> QueueItem | None:
    """The item this expert should answer now (`peek_item`), held for them (`hold`); None when
    nothing is left, and then their hold on anything else is given back."""
    for _ in range(_CLAIM_ATTEMPTS):
        item = peek_item(expert, scenario, criterion, skipped)
        if item is None:
            release_claims(expert)
            return None
        try:
            return hold(expert, item.pk)
        except NotYourClaim:  # another expert took it between the two: the next one
            continue
    return None


def release_claims(expert, keep: int | None = None) -> int:
    """Give back every hold the expert has (they moved on), but the one on `keep`."""
    return QueueItem.objects.filter(status=QueueItem.Status.CLAIMED, claimed_by=expert).exclude(pk=keep).update(
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
    """Record the expert's verdict on the item they hold, or on one nobody holds (taking it as the
    verdict is recorded), give the hold back, and resolve the item when it has all the verdicts it
    asks for. An item whose hold ran out is given back instead: the expert sees it again as free."""
    check_expert(expert)
    verdict = parse_verdict(verdict)
    note = (note or "").strip()
    if len(note) > NOTE_MAX_CHARS:
        raise NoteTooLong(f"Keep the note under {NOTE_MAX_CHARS} characters (it has {len(note)}).")
    now = timezone.now()
    expired = Q(status=QueueItem.Status.CLAIMED, claimed_by=expert, claim_expires_at__lte=now)
    with transaction.atomic():
        item = QueueItem.objects.select_for_update().filter(pk=item_id).first()
        if item is None:
            raise UnknownItem("There is no such item in the queue.")
        if item.verdicts.filter(expert=expert).exists():
            raise AlreadySubmitted("You have already given your verdict on this item.")
        ran_out = (item.status == QueueItem.Status.CLAIMED and item.claimed_by_id == expert.pk
                   and item.claim_expires_at <= now)
        if ran_out:
            # Given back, so that the page shown next offers it as free and a verdict sent again counts.
            QueueItem.objects.filter(expired, pk=item.pk).update(status=QueueItem.Status.OPEN, claimed_by=None,
                                                                  claim_expires_at=None)
        elif _holds(item, expert, now) or _free(item, now):
            answer = _record(item, expert, verdict, note, now)
        else:
            raise NotYourClaim("This item is not held for you (another expert has it, or it is done); "
                               "take the next item.")
    if ran_out:
        raise ClaimExpired(f"Your hold on this item expired after {claim_minutes():g} minutes; take the next item.")
    return answer


def _record(item: QueueItem, expert, verdict: int, note: str, now) -> ExpertVerdict:
    """Save the verdict and give the item back (open, or resolved), inside `submit`'s transaction."""
    try:
        with transaction.atomic():
            answer = ExpertVerdict.objects.create(item=item, expert=expert, verdict=verdict, note=note, created_at=now)
    except IntegrityError:
        raise AlreadySubmitted("You have already given your verdict on this item.") from None
    resolved = item.verdicts.count() >= item.required_verdicts
    free = Q(status=QueueItem.Status.CLAIMED, claimed_by=expert, claim_expires_at__gt=now) | _claimable(now)
    changed = QueueItem.objects.filter(free, pk=item.pk).update(
        status=QueueItem.Status.RESOLVED if resolved else QueueItem.Status.OPEN,
        claimed_by=None, claim_expires_at=None, resolved_at=now if resolved else None)
    if not changed:  # another expert took it (or the hold ran out and was taken) between the checks and here
        raise NotYourClaim("Another expert has just taken this item; take the next item.")
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
