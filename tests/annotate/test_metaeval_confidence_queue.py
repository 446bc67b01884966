"""The expert queue shows each agent's confidence (its verdict probability from a structured reply)
and a structured reply's reasoning in words, escaped."""

from __future__ import annotations

import json

import pytest

from apps.annotate.models import DebateTurn
from tests.annotate.queue_factories import disagreement
from tests.personas import PASSWORD, expert

pytestmark = pytest.mark.django_db


def test_the_queue_shows_each_agents_confidence_and_the_structured_reasoning(client):
    expert("erin")
    client.login(username="erin", password=PASSWORD)
    item = disagreement(1)
    DebateTurn.objects.filter(debate=item.debate, round=1, speaker=2).update(
        reasoning=json.dumps({"reasoning": "B is <b>clearer</b>.", "verdict": 2}),
        verdict_probabilities={"1": 0.2, "2": 0.7, "0": 0.1}, verdict_mass=0.4)
    page = client.get("/annotate/").content.decode()
    assert "(confidence 70%)" in page
    assert page.count("(confidence") == 1  # the turns without probabilities say nothing about it
    assert "B is &lt;b&gt;clearer&lt;/b&gt;." in page and '"verdict": 2' not in page
