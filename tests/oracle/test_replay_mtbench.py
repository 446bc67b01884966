"""`manage.py replay mtbench` fills contextual scores for every imported model, and resumes."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from apps.chain.models import Reputation
from apps.oracle.models import EvaluationJob

from .conftest import MODELS, QUESTIONS, ledger_node  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain, pytest.mark.slow]


def test_the_replay_fills_every_models_contextual_scores_and_a_rerun_adds_nothing(replay_world, ledger_node,
                                                                                  settings):
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    out = io.StringIO()
    call_command("replay", "mtbench", str(replay_world["root"]), "--work", "--timeout", "300", stdout=out)
    expected = len(MODELS) * len(QUESTIONS) * 2  # two turns each
    assert f"{expected} interactions ({expected} new)" in out.getvalue()
    counts = json.loads(out.getvalue().strip().splitlines()[-1])
    assert counts["onchain"] == expected and counts["failed"] == 0
    writing = replay_world["writing"].context_id
    reps = {r.model_id: r for r in Reputation.objects.filter(context_id=writing)}
    for model in replay_world["models"].values():
        assert model.model_id in reps and reps[model.model_id].n_auto > 0
    # The references of a replay come from the replay models only.
    assert EvaluationJob.objects.filter(reference_pool="replay").count() == expected
    again = io.StringIO()
    call_command("replay", "mtbench", str(replay_world["root"]), "--work", stdout=again)
    assert f"{expected} interactions (0 new)" in again.getvalue()
    assert EvaluationJob.objects.count() == expected
