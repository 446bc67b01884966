"""A judge is qualified in each role it plays (apps/annotate/qualify.py ROLES) and used only in the roles
where it beat preferring the longer answer (apps/annotate/judge_status.py): as a pairwise judge, through
the weight a metric naming it earns (apps/oracle/weights.py), and in debates, which seat only judges
qualified there (apps/oracle/debates.py). The judges are fakes at the evaluator registry, as in
test_qualification.py, agreeing with people 85% of the time or always preferring the longer answer;
the one debate held talks to a scripted endpoint at the gateway's transport. A judge's debate-role
qualification runs only after its pairwise one has qualified it (a debate opens with the pairwise
question), and the site's worker runs qualifications while no one is waiting for the judge's answer."""

from __future__ import annotations

import io
import json
import logging
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.annotate.judge_status import NOT_TRIED, status
from apps.annotate.models import Qualification
from apps.annotate.qualify import NOT_TRIED_REFUSED, SETS, enqueue_judges, qualify, role_evaluator, run_pending
from apps.chat.models import Conversation, Interaction, RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.oracle import debates, weights
from apps.oracle.models import DebateJob
from lib import debate as protocol
from lib.evaluators import register_evaluator
from lib.evaluators import EvaluatorError
from lib.metaeval import position_bias
from tests.chat.factories import make_contexts
from tests.evaluator_registry import isolated_evaluator_registry  # noqa: F401  (autouse fixture)
from tests.oracle.test_debates import BAD, GOOD, QUESTION, ScriptedJudges, prefers_paris
from tests.personas import developer

from .test_qualification import AgreesMostly, JudgeMetric, PrefersLonger, data_dir  # noqa: F401

pytestmark = pytest.mark.django_db


def judge_model(name: str) -> RegisteredModel:
    """A registered model, running, made a judge (setting `is_judge` registers it in every role)."""
    m = register_model(developer(f"owner-{name}"), ModelFields(name=name, provider="test",
                                                               endpoint_url="http://judge.test/v1", endpoint_model=name))
    RegisteredModel.objects.filter(pk=m.pk).update(is_judge=True)
    m.refresh_from_db()
    return m


SIDE = {"a": protocol.FIRST, "b": protocol.SECOND, "tie": protocol.NEITHER}


class AskedBothOrders:
    """What a judge asked each pair in both orders reports: it names the same answer both times."""

    def pair_details(self):
        return {"position": position_bias([(SIDE[v], protocol.to_shown(SIDE[v], True)) for v in self.last])}

    def compare(self, items):
        self.last = super().compare(items)
        return self.last


class FairJudge(AskedBothOrders, AgreesMostly):
    def __init__(self, judge_name: str = ""):
        self.judge_name = judge_name


class LongJudge(AskedBothOrders, PrefersLonger):
    def __init__(self, judge_name: str = ""):
        self.judge_name = judge_name


FAKES = {"fair-judge": FairJudge, "long-judge": LongJudge}


def fake(judge_name: str):
    return FAKES[judge_name](judge_name)


@pytest.fixture
def two_judges(data_dir):  # noqa: F811
    """Two running judge models; each role's evaluator of either is its fake."""
    for role in ("pairwise", "debate"):
        register_evaluator(role, fake, takes_argument=True)
    return judge_model("fair-judge"), judge_model("long-judge")


def test_a_pairwise_judge_agreeing_85_percent_qualifies_with_a_weight_above_zero_and_is_used(two_judges, settings):
    fair, _ = two_judges
    q = qualify(role_evaluator(fair.name, "pairwise"))
    pooled = q.figures["pooled"]
    assert q.evaluator == "pairwise:fair-judge" and q.qualified and int(q.factor) > 0
    assert 0.8 < pooled["accuracy_non_tie"] < 0.9 and pooled["margin_over_length_ci_low"] > 0
    for key in ("accuracy_ci_low", "accuracy_ci_high", "length_accuracy_non_tie", "margin_over_length",
                "margin_over_length_ci_high", "pairs_non_tie", "weight"):
        assert pooled[key] is not None
    # asked in both orders: its position consistency, per set and pooled
    assert pooled["position"]["consistency"] == 1.0 and pooled["position"]["both_readable"] == pooled["position"]["pairs"]
    assert all(f["position"]["consistency"] == 1.0 for f in q.figures["per_set"].values())
    assert set(q.figures["per_set"]) == {s.name for s in SETS}
    assert status(fair, "pairwise").usable and status(fair, "pairwise").reason == ""
    settings.LLMCHAIN_AUTO_WEIGHT = "validated"  # a metric judged by it counts, with the weight it earned
    assert weights.earned(JudgeMetric("pairwise:fair-judge"))[:2] == (int(q.factor), q.cid)


def test_a_pairwise_judge_that_always_prefers_the_longer_answer_is_refused_and_told_why(two_judges, settings):
    _, long = two_judges
    q = qualify(role_evaluator(long.name, "pairwise"))
    assert not q.qualified and q.factor == "0"
    why = status(long, "pairwise").reason
    assert why.startswith("long-judge is not used as a pairwise judge: on ")
    assert f"on {q.figures['pooled']['pairs_non_tie']} pairs of answers people had compared" in why
    assert "preferring the longer answer agreed" in why and "not above 0" in why
    settings.LLMCHAIN_AUTO_WEIGHT = "validated"
    factor, cid, reason = weights.earned(JudgeMetric("pairwise:long-judge"))
    assert (factor, cid) == (0, q.cid) and "longer answer" in reason


def test_a_debate_seats_the_judge_qualified_in_debates_and_leaves_out_the_refused_one_saying_why(two_judges, caplog):
    fair, long = two_judges
    good, bad = qualify(role_evaluator(fair.name, "debate")), qualify(role_evaluator(long.name, "debate"))
    assert good.qualified and int(good.factor) > 0 and good.figures["pooled"]["position"]["consistency"] == 1.0
    assert not bad.qualified
    with caplog.at_level(logging.WARNING, logger="apps.oracle.debates"):
        sitting = debates.judge_models()
    assert sitting == [fair, fair]  # the lone qualified judge sits twice
    assert any("long-judge is not used as a judge in debates: on " in r.getMessage() for r in caplog.records)
    with pytest.raises(debates.DebateRequestError, match="long-judge is not used as a judge in debates: on .*not above 0"):
        debates.judge_models([fair.name, long.name])

    pair = debates.Pair(key="test:fair", question=QUESTION, submission_1=GOOD, submission_2=BAD, system_1="x",
                        system_2="y", model_1="", model_2="", context_id="", scenario="test")
    job, _ = debates.request(pair, seed=3, rounds=1)
    script = ScriptedJudges(prefers_paris)
    debate = debates.hold(job, script.gateway())
    assert job.judges == [fair.pk, fair.pk] and debate.consensus == 1
    assert {model for model, _, _ in script.calls} == {fair.endpoint_model}

    # a debate asked for with the refused judge is not held, and says why
    forced, _ = debates.request(debates.Pair(**{**pair.__dict__, "key": "test:long"}), judges=[fair, long], rounds=1)
    script = ScriptedJudges(prefers_paris)
    assert debates.hold(forced, script.gateway()) is None and script.calls == []
    forced.refresh_from_db()
    assert forced.status == DebateJob.Status.FAILED and forced.debate is None
    assert "a judge is refused: long-judge is not used as a judge in debates" in forced.last_error


def test_while_a_judges_qualification_is_pending_a_debate_does_not_use_it_and_waits(two_judges):
    fair, _ = two_judges
    RegisteredModel.objects.filter(pk=two_judges[1].pk).update(is_judge=False)
    Qualification.objects.create(evaluator=role_evaluator(fair.name, "debate"), per_set=4,
                                 created_at=datetime(2026, 11, 28, 13, 47, tzinfo=dt_timezone.utc))
    assert "its qualification in this role is queued (since 2026-11-28 13:47 UTC)" in status(fair, "debate").reason
    with pytest.raises(debates.DebateRequestError, match="no running judge is qualified to debate. fair-judge is "
                                                         "not used as a judge in debates yet: .* is queued"):
        debates.judge_models()
    pair = debates.Pair(key="test:wait", question=QUESTION, submission_1=GOOD, submission_2=BAD, system_1="x",
                        system_2="y", model_1="", model_2="", context_id="", scenario="test")
    job, _ = debates.request(pair, judges=[fair, fair], rounds=1)
    script = ScriptedJudges(prefers_paris)
    assert debates.hold(job, script.gateway()) is None and script.calls == []
    job.refresh_from_db()
    assert job.status == DebateJob.Status.QUEUED and job.attempts == 0 and job.next_attempt_at > job.updated_at
    assert job.last_error.startswith("waiting for its judges' qualification: fair-judge is not used")


def test_the_model_page_shows_each_roles_figures_plainly(two_judges, client):
    fair, long = two_judges
    page = client.get(f"/models/{fair.pk}/judging/roles").content.decode()
    assert "As a pairwise judge" in page and "As a judge in debates" in page
    assert page.count("it has not been qualified in this role") == 2
    qualify(role_evaluator(fair.name, "pairwise"))
    qualify(role_evaluator(fair.name, "debate"), per_set=10)
    Qualification.objects.create(evaluator=role_evaluator(fair.name, "debate"), per_set=4)  # a newer one, queued
    page = client.get(f"/models/{fair.pk}/judging/roles").content.decode()
    assert "Qualified as a pairwise judge: on 230 pairs" in page and "Qualified as a judge in debates" in page
    assert "Shown each pair in both orders, it gave the same answer for 230 of 230 pairs (100%)" in page
    assert "Asked its first question of each debate again with the two answers swapped, it gave the same answer " \
           "for 60 of 60 pairs (100%)" in page
    assert "LLMBar Neighbor" in page and "All sets" in page and "A sample of 10 pairs from each set" in page
    assert "A newer qualification in this role is queued; these figures stand" in page
    assert "pairwise:" not in page and "debate:" not in page  # the role in words, not the evaluator's name

    qualify(role_evaluator(long.name, "debate"))
    page = client.get(f"/models/{long.pk}/judging/roles").content.decode()
    assert "long-judge is not used as a judge in debates: on 230 pairs" in page
    assert "long-judge is not used as a pairwise judge yet" in page
    not_a_judge = judge_model("plain-7b")
    RegisteredModel.objects.filter(pk=not_a_judge.pk).update(is_judge=False)
    assert "judging-roles" not in client.get(f"/models/{not_a_judge.pk}/judging/roles").content.decode()
    model_page = client.get(f"/models/{fair.pk}/").content.decode()
    assert f"/models/{fair.pk}/judging/roles" in model_page


def test_the_command_qualifies_a_role_and_prints_its_position_consistency(two_judges):
    out = io.StringIO()
    call_command("metaeval", "qualify", "--evaluator", "pairwise:fair-judge", "--sample", "5", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert "position consistency: 1.000 (30/30 pairs read in both orders gave the same answer)" in out.getvalue()
    assert "pairwise:fair-judge qualified" in lines[-2]
    data = json.loads(lines[-1])
    assert data["qualified"] and data["position"]["consistency"] == 1.0 and data["pairs_non_tie"] == 30


def queue(model: RegisteredModel, *roles: str) -> None:
    """Pending sample qualifications of the model in these roles, as the worker queues them."""
    for role in roles:
        Qualification.objects.create(evaluator=role_evaluator(model.name, role), per_set=10)


def row(model: RegisteredModel, role: str) -> Qualification:
    return Qualification.objects.filter(evaluator=role_evaluator(model.name, role)).first()  # the newest


def test_a_judge_refused_as_a_pairwise_judge_is_not_tried_in_debates_and_its_page_says_so(two_judges, client):
    fair, long = two_judges
    RegisteredModel.objects.filter(pk=fair.pk).update(is_judge=False)
    built = []
    register_evaluator("debate", lambda name: built.append(name) or fake(name), takes_argument=True)
    register_evaluator("geval", fake, takes_argument=True)
    assert enqueue_judges() == 3
    assert run_pending() == 1 and run_pending() == 1 and row(long, "pairwise").status == Qualification.Status.DONE
    assert row(long, "debate").status == Qualification.Status.PENDING
    assert run_pending() == 1 and run_pending() == 0
    skipped = row(long, "debate")
    assert built == []  # the judge was never asked a debate question
    assert skipped.status == Qualification.Status.SKIPPED and skipped.error == NOT_TRIED_REFUSED
    assert (skipped.figures, skipped.factor, skipped.cid, skipped.started_at) == ({}, "", "", None)
    assert not skipped.qualified and skipped.finished_at is not None

    s = status(long, "debate")
    assert s.state == NOT_TRIED and not s.usable and s.done is None
    assert s.reason == ("long-judge is not used as a judge in debates. Not tried in debates: as a pairwise judge it "
                        "did not beat preferring the longer answer, and a debate opens with that question.")
    with pytest.raises(debates.DebateRequestError, match="Not tried in debates: as a pairwise judge"):
        debates.judge_models([long.name])
    pair = debates.Pair(key="test:not-tried", question=QUESTION, submission_1=GOOD, submission_2=BAD, system_1="x",
                        system_2="y", model_1="", model_2="", context_id="", scenario="test")
    job, _ = debates.request(pair, judges=[long, long], rounds=1)
    assert debates.hold(job, ScriptedJudges(prefers_paris).gateway()) is None
    job.refresh_from_db()
    assert job.status == DebateJob.Status.FAILED and "Not tried in debates" in job.last_error  # it does not wait

    page = client.get(f"/models/{long.pk}/judging/roles").content.decode()
    debate_part = page.split('data-role="debate"')[1]
    assert "long-judge is not used as a judge in debates. Not tried in debates: as a pairwise judge it did not beat " \
           "preferring the longer answer, and a debate opens with that question." in debate_part
    assert "<table" not in debate_part and "%" not in debate_part and "weight" not in debate_part  # nothing measured
    assert "long-judge is not used as a pairwise judge: on 24 pairs" in page  # the figures it was refused on

    # A newer pairwise qualification that qualifies it: its debate one is queued again, and runs.
    register_evaluator("pairwise", lambda name: FairJudge(name), takes_argument=True)
    assert qualify(role_evaluator(long.name, "pairwise")).qualified
    assert enqueue_judges() == 1 and enqueue_judges() == 0
    assert run_pending() == 1 and built == [long.name]
    measured = row(long, "debate")
    assert measured.status == Qualification.Status.DONE and measured.figures["pooled"]["pairs_non_tie"] == 24
    assert status(long, "debate").state == "refused"  # measured now, and refused on its own figures


def test_a_judge_whose_pairwise_qualification_failed_is_not_tried_in_debates_with_that_reason(two_judges):
    fair, long = two_judges
    RegisteredModel.objects.filter(pk__in=[fair.pk, long.pk]).update(is_judge=False)

    class Offline(FairJudge):
        def compare(self, items):
            raise EvaluatorError("the judge's endpoint did not answer")

    register_evaluator("pairwise", Offline, takes_argument=True)
    queue(fair, "pairwise", "debate")
    assert run_pending() == 1 and row(fair, "pairwise").status == Qualification.Status.FAILED
    assert run_pending() == 1 and run_pending() == 0
    skipped = row(fair, "debate")
    assert skipped.status == Qualification.Status.SKIPPED and skipped.figures == {}
    assert skipped.error == ("Not tried in debates: its qualification as a pairwise judge could not be finished "
                             "(pairwise:fair-judge on PandaLM: the judge's endpoint did not answer), and a debate "
                             "opens with that question.")
    assert status(fair, "debate").state == NOT_TRIED


def test_qualifying_takes_g_eval_and_pairwise_first_and_a_pairwise_qualified_judge_is_then_tried_in_debates(two_judges):
    fair, long = two_judges
    RegisteredModel.objects.filter(pk=long.pk).update(is_judge=False)
    register_evaluator("geval", fake, takes_argument=True)
    earlier = datetime(2026, 11, 28, 13, 47, tzinfo=dt_timezone.utc)
    queue(fair, "debate")  # queued before the others, taken after them
    Qualification.objects.filter(evaluator=role_evaluator(fair.name, "debate")).update(created_at=earlier)
    assert enqueue_judges() == 2  # G-Eval and pairwise
    assert "It runs after its qualification as a pairwise judge, and only if that one qualifies it" in \
        status(fair, "debate").reason
    ran = []
    for _ in range(3):
        assert run_pending() == 1
        ran.append([r for r in ("geval", "pairwise", "debate") if row(fair, r).status == Qualification.Status.DONE])
    assert ran == [["geval"], ["geval", "pairwise"], ["geval", "pairwise", "debate"]] and run_pending() == 0
    assert row(fair, "pairwise").qualified and row(fair, "debate").qualified and status(fair, "debate").usable

    # While a newer pairwise qualification runs, a debate one waits for its outcome.
    queue(fair, "debate")
    Qualification.objects.create(evaluator=role_evaluator(fair.name, "pairwise"), per_set=10,
                                 status=Qualification.Status.RUNNING)
    assert run_pending() == 0 and row(fair, "debate").status == Qualification.Status.PENDING


def test_a_qualification_waits_while_its_judge_is_answering_a_person(two_judges, settings):
    fair, long = two_judges
    RegisteredModel.objects.filter(pk=long.pk).update(is_judge=False)
    RegisteredModel.objects.filter(pk=fair.pk).update(is_judge=False)
    queue(fair, "pairwise")
    context, = make_contexts("chat")

    def streaming(model, n: int) -> Interaction:  # a person's answer on its way (its owner's, here)
        conversation = Conversation.objects.create(user=model.owner, model=model, context=context, title="hi")
        return Interaction.objects.create(conversation=conversation, interaction_id=f"0x{n:064x}", prompt="Hello?")

    answer = streaming(fair, 1)
    streaming(long, 2)  # another endpoint answering someone holds nothing back
    assert run_pending() == 0 and row(fair, "pairwise").status == Qualification.Status.PENDING
    # a row left streaming by a process that stopped, long after any answer is cut, holds nothing back
    left = timezone.now() - timedelta(seconds=settings.LLMCHAIN_ANSWER_MAX_S + 120)
    Interaction.objects.filter(pk=answer.pk).update(created_at=left)
    assert run_pending() == 1 and row(fair, "pairwise").status == Qualification.Status.DONE

    queue(fair, "pairwise")
    Interaction.objects.filter(pk=answer.pk).update(created_at=timezone.now())
    assert run_pending() == 0
    Interaction.objects.filter(pk=answer.pk).update(status=Interaction.Status.DONE, finished_at=timezone.now())
    assert run_pending() == 1 and row(fair, "pairwise").status == Qualification.Status.DONE
