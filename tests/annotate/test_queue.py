"""The expert queue hands each disagreement to one expert at a time and records their verdicts."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from apps.annotate import queue
from apps.annotate.models import ExpertVerdict, QueueItem
from tests.annotate.queue_factories import disagreement
from tests.personas import expert, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def erin():
    return expert("erin")


@pytest.fixture
def frank():
    return expert("frank")


def expire(item: QueueItem) -> None:
    QueueItem.objects.filter(pk=item.pk).update(claim_expires_at=timezone.now() - timedelta(seconds=1))


def test_an_expert_gets_the_oldest_open_item_claimed_for_the_configured_minutes(erin):
    first, _ = disagreement(1), disagreement(2)
    with override_settings(LLMCHAIN_CLAIM_MINUTES=5):
        item = queue.next_item(erin)
    assert item.pk == first.pk
    assert item.status == "claimed" and item.claimed_by == erin
    assert timedelta(minutes=4) < item.claim_expires_at - timezone.now() <= timedelta(minutes=5)


def test_asking_again_gives_back_the_same_claimed_item(erin):
    disagreement(1), disagreement(2)
    assert queue.next_item(erin).pk == queue.next_item(erin).pk


def test_two_experts_never_get_the_same_item(erin, frank):
    first, second = disagreement(1), disagreement(2)
    assert queue.next_item(erin).pk == first.pk
    assert queue.next_item(frank).pk == second.pk
    assert queue.next_item(expert("gina")) is None


def test_peeking_holds_nothing_and_two_experts_may_see_one_item_until_one_holds_it(erin, frank):
    first, second = disagreement(1), disagreement(2)
    assert queue.peek_item(erin).pk == queue.peek_item(frank).pk == first.pk
    assert set(QueueItem.objects.values_list("status", flat=True)) == {"open"}
    assert queue.hold(erin, first.pk).claimed_by == erin
    with pytest.raises(queue.NotYourClaim, match="Another expert has just taken"):
        queue.hold(frank, first.pk)
    assert queue.peek_item(frank).pk == second.pk
    assert queue.peek_item(erin).pk == first.pk  # her hold is handed back to her


def test_holding_an_item_gives_back_the_others_and_a_refused_hold_keeps_them(erin, frank):
    first, second, third = disagreement(1), disagreement(2), disagreement(3)
    queue.hold(erin, first.pk)
    queue.hold(frank, third.pk)
    queue.hold(erin, second.pk)
    assert dict(QueueItem.objects.filter(status="claimed").values_list("pk", "claimed_by__username")) == {
        second.pk: "erin", third.pk: "frank"}
    with pytest.raises(queue.NotYourClaim):
        queue.hold(erin, third.pk)
    assert QueueItem.objects.get(pk=second.pk).claimed_by == erin
    assert queue.hold(erin, second.pk).claim_expires_at == QueueItem.objects.get(pk=second.pk).claim_expires_at


def test_a_hold_is_refused_on_an_item_answered_resolved_or_unknown(erin, frank):
    item = disagreement(1, required=2)
    queue.submit(erin, item.pk, 1)
    with pytest.raises(queue.AlreadySubmitted):
        queue.hold(erin, item.pk)
    queue.submit(frank, item.pk, 1)
    with pytest.raises(queue.NotYourClaim):
        queue.hold(expert("gina"), item.pk)
    with pytest.raises(queue.UnknownItem):
        queue.hold(erin, 999)


def test_a_verdict_on_an_item_nobody_holds_takes_it_as_it_is_recorded(erin, frank):
    item = disagreement(1)
    assert queue.peek_item(erin).pk == item.pk
    queue.submit(erin, item.pk, 2)
    item.refresh_from_db()
    assert item.status == "resolved" and ExpertVerdict.objects.get().expert == erin
    assert queue.peek_item(frank) is None


def test_an_expired_claim_can_be_taken_by_another_expert(erin, frank):
    item = disagreement(1)
    queue.next_item(erin)
    assert queue.next_item(frank) is None
    expire(item)
    assert queue.next_item(frank).pk == item.pk
    with pytest.raises(queue.NotYourClaim):
        queue.submit(erin, item.pk, 1)


def test_a_verdict_after_the_claim_expired_is_refused(erin):
    item = disagreement(1)
    queue.next_item(erin)
    expire(item)
    with pytest.raises(queue.ClaimExpired, match="expired"):
        queue.submit(erin, item.pk, 1)
    assert not ExpertVerdict.objects.exists()
    item.refresh_from_db()
    assert item.status == "open" and item.claimed_by is None  # given back: free for anyone, her too
    queue.submit(erin, item.pk, 1)
    assert ExpertVerdict.objects.get().expert == erin


def test_a_verdict_resolves_an_item_that_asks_one_expert(erin):
    item = disagreement(1)
    queue.next_item(erin)
    queue.submit(erin, item.pk, "2", "  B is right.  ")
    item.refresh_from_db()
    assert item.status == "resolved" and item.resolved_at and item.claimed_by is None
    assert ExpertVerdict.objects.get().note == "B is right."


def test_a_second_submission_is_refused(erin):
    item = disagreement(1)
    queue.next_item(erin)
    queue.submit(erin, item.pk, 1)
    with pytest.raises(queue.AlreadySubmitted, match="already"):
        queue.submit(erin, item.pk, 2)
    assert ExpertVerdict.objects.count() == 1


def test_an_expert_cannot_answer_an_item_held_by_another(erin, frank):
    item = disagreement(1)
    queue.next_item(erin)
    with pytest.raises(queue.NotYourClaim):
        queue.submit(frank, item.pk, 1)
    with pytest.raises(queue.NotYourClaim):
        queue.skip(frank, item.pk)


def test_accounts_without_the_expert_role_are_refused_everything():
    alice, item = user("alice"), disagreement(1)
    for call in (lambda: queue.next_item(alice), lambda: queue.peek_item(alice), lambda: queue.hold(alice, item.pk),
                 lambda: queue.submit(alice, item.pk, 1), lambda: queue.skip(alice, item.pk)):
        with pytest.raises(queue.NotAnExpert, match="expert role"):
            call()
    item.refresh_from_db()
    assert item.status == "open"


@pytest.mark.parametrize("verdict", [3, -1, "", None, "one", "1.5"])
def test_a_verdict_is_1_2_or_0(erin, verdict):
    item = disagreement(1)
    queue.next_item(erin)
    with pytest.raises(queue.InvalidVerdict):
        queue.submit(erin, item.pk, verdict)


def test_a_note_has_a_length_limit(erin):
    item = disagreement(1)
    queue.next_item(erin)
    with pytest.raises(queue.NoteTooLong):
        queue.submit(erin, item.pk, 1, "x" * (queue.NOTE_MAX_CHARS + 1))
    queue.submit(erin, item.pk, 1, "x" * queue.NOTE_MAX_CHARS)


def test_an_unknown_item_is_refused(erin):
    with pytest.raises(queue.UnknownItem):
        queue.submit(erin, 999, 1)


def test_an_item_asking_two_experts_stays_open_until_the_second_answers(erin, frank):
    item = disagreement(1, required=2)
    assert queue.next_item(erin).pk == item.pk
    queue.submit(erin, item.pk, 1)
    item.refresh_from_db()
    assert item.status == "open" and item.claimed_by is None
    assert queue.next_item(erin) is None  # never the same expert twice
    assert queue.next_item(frank).pk == item.pk
    queue.submit(frank, item.pk, 1)
    item.refresh_from_db()
    assert item.status == "resolved"


def test_a_skipped_item_is_released_and_not_offered_again(erin, frank):
    first, second = disagreement(1), disagreement(2)
    queue.next_item(erin)
    queue.skip(erin, first.pk)
    assert queue.next_item(erin, skipped=[first.pk]).pk == second.pk
    assert queue.next_item(frank).pk == first.pk


def test_changing_filters_releases_the_held_claim(erin, frank):
    coding, writing = disagreement(1, scenario="coding"), disagreement(2, scenario="writing")
    assert queue.next_item(erin, scenario="coding").pk == coding.pk
    assert queue.next_item(erin, scenario="writing").pk == writing.pk
    assert queue.next_item(frank).pk == coding.pk


def test_filters_by_scenario_and_criterion(erin):
    disagreement(1, scenario="coding", criterion="helpfulness")
    wanted = disagreement(2, scenario="coding", criterion="harmlessness")
    disagreement(3, scenario="writing", criterion="harmlessness")
    assert queue.next_item(erin, scenario="coding", criterion="harmlessness").pk == wanted.pk
    assert queue.filter_choices() == (["coding", "writing"], ["harmlessness", "helpfulness"])


def test_progress_counts_done_remaining_and_total(erin, frank):
    for n in range(1, 5):
        disagreement(n, required=2 if n == 1 else 1)
    disagreement(9, scenario="writing")
    for _ in range(2):
        item = queue.next_item(erin, scenario="coding")
        queue.submit(erin, item.pk, 1)
    assert queue.progress(erin, scenario="coding") == queue.Progress(done=2, remaining=2, total=4)
    # Item 1 still needs a second expert: frank can answer it and the two others.
    assert queue.progress(frank, scenario="coding") == queue.Progress(done=0, remaining=3, total=4)
    assert queue.progress(erin) == queue.Progress(done=2, remaining=3, total=5)


def test_agreement_is_fleiss_kappa_per_scenario_over_items_with_two_verdicts(erin, frank):
    gina = expert("gina")
    for n, verdicts in enumerate([(1, 1), (2, 2), (1, 2), (0,)], start=1):
        item = disagreement(n, scenario="coding", required=len(verdicts))
        for who, verdict in zip((erin, frank), verdicts):
            ExpertVerdict.objects.create(item=item, expert=who, verdict=verdict)
    same = disagreement(5, scenario="writing", required=2)
    ExpertVerdict.objects.create(item=same, expert=erin, verdict=1)
    ExpertVerdict.objects.create(item=same, expert=gina, verdict=1)
    coding, writing = queue.agreement_by_scenario()
    assert (coding.scenario, coding.items, coding.verdicts) == ("coding", 3, 6)
    # P_bar = 2/3; shares 1: 3/6, 2: 3/6 -> P_e = 1/2; kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert coding.kappa == pytest.approx(1 / 3)
    assert (writing.scenario, writing.items, writing.kappa) == ("writing", 1, None)  # all one verdict: undefined


@pytest.mark.django_db(transaction=True)
def test_experts_claiming_at_the_same_moment_never_share_an_item():
    items = [disagreement(n) for n in range(1, 4)]
    experts = [expert(f"expert{n}") for n in range(8)]
    start, got, errors = threading.Barrier(len(experts)), {}, []

    def claim(who):
        try:
            start.wait()
            item = queue.next_item(who)
            got[who.username] = item.pk if item else None
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(e,)) for e in experts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    claimed = [pk for pk in got.values() if pk is not None]
    assert sorted(claimed) == sorted(i.pk for i in items)  # each item once, every item taken
    holders = dict(QueueItem.objects.values_list("pk", "claimed_by__username"))
    assert all(holders[pk] == name for name, pk in got.items() if pk is not None)
