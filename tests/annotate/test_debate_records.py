"""The debate and queue tables refuse records that would mislead the expert queue built on them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.annotate.models import Debate, DebateTurn, ExpertVerdict, QueueItem
from tests.personas import user

pytestmark = pytest.mark.django_db


@pytest.fixture
def disagreement() -> QueueItem:
    debate = Debate.objects.create(source="live", key="live:test/1", criterion="helpfulness", question="Q?",
                                   submission_1="A", submission_2="B", consensus=None, rounds=3)
    return QueueItem.objects.create(debate=debate)


@pytest.fixture
def alice():
    return user("alice")


@pytest.fixture
def bob():
    return user("bob")


def test_each_expert_gives_one_verdict_per_item_and_several_experts_may_answer(disagreement, alice, bob):
    disagreement.required_verdicts = 2
    disagreement.save()
    ExpertVerdict.objects.create(item=disagreement, expert=alice, verdict=1, note="Submission 1 is correct.")
    ExpertVerdict.objects.create(item=disagreement, expert=bob, verdict=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        ExpertVerdict.objects.create(item=disagreement, expert=alice, verdict=2)
    assert sorted(disagreement.verdicts.values_list("verdict", flat=True)) == [0, 1]


def test_a_verdict_is_1_2_or_0(disagreement, alice):
    with pytest.raises(IntegrityError), transaction.atomic():
        ExpertVerdict.objects.create(item=disagreement, expert=alice, verdict=3)


def test_a_claim_names_its_expert_and_its_expiry(disagreement, alice):
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=disagreement.pk).update(status="claimed", claimed_by=alice)
    QueueItem.objects.filter(pk=disagreement.pk).update(
        status="claimed", claimed_by=alice, claim_expires_at=timezone.now() + timedelta(minutes=30))
    disagreement.refresh_from_db()
    assert disagreement.claimed_by == alice and disagreement.status == "claimed"


def test_an_item_needs_at_least_one_verdict_and_a_resolution_needs_its_time(disagreement):
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=disagreement.pk).update(required_verdicts=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.filter(pk=disagreement.pk).update(status="resolved")


def test_a_debate_is_queued_once(disagreement):
    with pytest.raises(IntegrityError), transaction.atomic():
        QueueItem.objects.create(debate=disagreement.debate)


def test_a_turn_has_a_verdict_or_the_reason_it_has_none_never_both(disagreement):
    debate = disagreement.debate
    DebateTurn.objects.create(debate=debate, round=0, speaker=1, reasoning="Verdict: 1", verdict=1)
    DebateTurn.objects.create(debate=debate, round=0, speaker=2, reasoning="hmm", unparseable="no verdict marker")
    for fields in (dict(speaker=3, verdict=None, unparseable=""), dict(speaker=3, verdict=2, unparseable="why"),
                   dict(speaker=3, verdict=5), dict(speaker=1, verdict=1), dict(speaker=0, verdict=1)):
        with pytest.raises(IntegrityError), transaction.atomic():
            DebateTurn.objects.create(debate=debate, round=0, reasoning="x", **fields)
    assert debate.turns.count() == 2


def test_a_consensus_is_a_verdict_and_a_debate_held_at_least_one_round():
    common = dict(source="live", criterion="helpfulness", question="Q?", submission_1="A", submission_2="B")
    with pytest.raises(IntegrityError), transaction.atomic():
        Debate.objects.create(key="live:x/1", consensus=4, rounds=1, **common)
    with pytest.raises(IntegrityError), transaction.atomic():
        Debate.objects.create(key="live:x/2", consensus=1, rounds=0, **common)
    assert not Debate.objects.filter(key__startswith="live:x/").exists()
