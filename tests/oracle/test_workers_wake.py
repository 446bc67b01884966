"""A saved answer wakes the oracle (`runworker oracle-jobs`) and a requested debate wakes the debate
worker (`runworker debate-jobs`) once committed, through the Redis channel layer; each background
consumer then does the job the row describes."""

from __future__ import annotations

import pytest
from django.db import transaction

from apps.chain.work import WAKE
from apps.oracle import debates, jobs
from apps.oracle.consumers import DebateWakeConsumer, OracleWakeConsumer
from apps.oracle.models import DebateJob, EvaluationJob
from apps.oracle.worker import load_metric
from tests.wake import deliver, next_message, redis_layer  # noqa: F401  (fixture)

from .conftest import QUESTIONS, chat
from .test_debates import BAD, ScriptedJudges, judges, prefers_paris, world  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_requested_debate_wakes_the_debate_worker_on_commit_and_it_holds_the_debate(world, redis_layer,
                                                                                       monkeypatch):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    with transaction.atomic():
        job, _ = debates.request(debates.from_same_prompt(a, b), seed=3)
        assert next_message(redis_layer, debates.CHANNEL, timeout=0.5) is None  # not before the commit
    message = next_message(redis_layer, debates.CHANNEL)
    assert message == WAKE
    monkeypatch.setattr(debates, "Gateway", ScriptedJudges(prefers_paris).gateway)
    deliver(DebateWakeConsumer, message, lambda: DebateJob.objects.get(pk=job.pk).status == "done")
    job.refresh_from_db()
    good_side = 1 if job.model_1 == world["good"].model_id else 2
    assert job.debate.consensus == good_side and job.attempts == 1


def test_asking_again_for_a_debate_already_queued_wakes_nobody(world, redis_layer):
    judges(world, "judge-a", "judge-b")
    a, b = world["ask"](world["good"]), world["ask"](world["bad"], answer=BAD)
    pair = debates.from_same_prompt(a, b)
    debates.request(pair)
    assert next_message(redis_layer, debates.CHANNEL) == WAKE
    assert debates.request(pair)[1] is False
    assert next_message(redis_layer, debates.CHANNEL, timeout=0.5) is None


@pytest.mark.chain
@pytest.mark.slow
def test_a_saved_answer_wakes_the_oracle_on_commit_and_it_scores_the_answer(replay_world, redis_layer, monkeypatch):
    monkeypatch.setattr(OracleWakeConsumer, "metric", load_metric())
    with transaction.atomic():
        interaction, = chat(replay_world, "alpha-7b", [QUESTIONS[0][1]])
        assert next_message(redis_layer, jobs.CHANNEL, timeout=0.5) is None  # not before the commit
    message = next_message(redis_layer, jobs.CHANNEL)
    assert message == WAKE
    job = EvaluationJob.objects.get(interaction=interaction)
    deliver(OracleWakeConsumer, message, lambda: EvaluationJob.objects.get(pk=job.pk).status == "submitted")
    job.refresh_from_db()
    assert len(job.references) == 3 and job.evidence_cid and job.outbox_item.function == "autoEval"
