"""Disagreements for the expert-queue tests (the experts are tests.personas.expert: erin, frank)."""

from __future__ import annotations

from apps.annotate.models import Debate, DebateTurn, QueueItem


def disagreement(n: int = 1, *, scenario: str = "coding", criterion: str = "helpfulness", required: int = 1,
                 reasoning: str = "Submission 1 handles the edge case.") -> QueueItem:
    debate = Debate.objects.create(
        source="live", key=f"live:test/{scenario}/{criterion}/{n}", scenario=scenario, criterion=criterion,
        criterion_description="Does the answer help the user?", question=f"Question {n}?",
        submission_1=f"Answer A{n}", submission_2=f"Answer B{n}", consensus=None, rounds=2)
    DebateTurn.objects.create(debate=debate, round=0, speaker=1, agent="gpt-4", reasoning=reasoning, verdict=1)
    DebateTurn.objects.create(debate=debate, round=0, speaker=2, agent="claude", reasoning="Hard to say.",
                              verdict=None, unparseable="no verdict marker")
    DebateTurn.objects.create(debate=debate, round=1, speaker=1, agent="gpt-4", reasoning="I keep 1.", verdict=1)
    DebateTurn.objects.create(debate=debate, round=1, speaker=2, agent="claude", reasoning="Now 2.", verdict=2)
    return QueueItem.objects.create(debate=debate, required_verdicts=required)
