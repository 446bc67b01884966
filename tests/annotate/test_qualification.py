"""Judges are qualified before they judge (apps/annotate/qualify.py): an evaluator runs on
human-labelled sets in PandaLM's and LLMBar's own formats against "the longer answer wins"; one that
beats it earns a weight above 0, one that does not is refused with the reason, and the oracle's
weighting follows (apps/oracle/weights.py). The judges are fakes at their single adapter, the
evaluator registry; the sets are small files in the published formats."""

from __future__ import annotations

import io
import json
import random
import zlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.annotate.models import Qualification
from apps.annotate.qualify import (ROLES, SETS, enqueue_judges, judge_evaluator, latest, qualify, refusal,
                                   role_evaluator, run_pending)
from apps.chain.evidence import default_store
from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.oracle import weights
from lib.evaluators import Evaluator, register_evaluator, words
from lib.weighting import parse_qualification
from tests.evaluator_registry import isolated_evaluator_registry  # noqa: F401  (autouse fixture)
from tests.personas import developer

pytestmark = pytest.mark.django_db

SHORT = "Paris."
LONG = "The capital of France, a country in Western Europe, is the city of Paris, on the Seine."


@pytest.fixture
def data_dir(tmp_path, settings):
    """Labelled sets in the published formats: a PandaLM test set where people preferred the longer
    answer in 60% of the pairs, and LLMBar sets where the right output is the shorter one in 70%."""
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    rng = random.Random(5)
    models = ["bloom-7b", "llama-7b", "opt-7b"]
    panda = []
    for i in range(80):
        long_first = rng.random() < 0.5
        r1, r2 = (LONG, SHORT) if long_first else (SHORT, LONG)
        longer = 1 if long_first else 2
        label = longer if i % 10 < 6 else 3 - longer
        m1, m2 = rng.sample(models, 2)
        panda.append({"idx": i, "motivation_app": "x", "cmp_key": f"{m1}_{m2}", "instruction": f"Question {i // 3}?",
                      "input": "", "response1": r1 + f" ({m1})", "response2": r2 + f" ({m2})",
                      "annotator1": label, "annotator2": label, "annotator3": 0})
    (tmp_path / "pandalm").mkdir()
    (tmp_path / "pandalm" / "testset-v1.json").write_text(json.dumps(panda))
    for s in SETS[1:]:
        rows = []
        for i in range(30):
            long_first = rng.random() < 0.5
            o1, o2 = (LONG, SHORT) if long_first else (SHORT, LONG)
            shorter = 2 if long_first else 1
            rows.append({"input": f"Name the capital {i}.", "output_1": o1, "output_2": o2,
                         "label": shorter if i % 10 < 7 else 3 - shorter})
        path = s.path(tmp_path)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rows))
    settings.LLMCHAIN_DATA_DIR = tmp_path
    return tmp_path


def judge_model(name: str) -> RegisteredModel:
    """A registered model made a judge (setting `is_judge` is how a model is registered as one)."""
    m = register_model(developer(), ModelFields(name=name, provider="test", endpoint_url="http://judge.test/v1",
                                                endpoint_model=name))
    RegisteredModel.objects.filter(pk=m.pk).update(is_judge=True)
    m.refresh_from_db()
    return m


class AgreesMostly(Evaluator):
    """A judge that gives the people's verdict on 85% of the pairs (which ones is fixed by the pair's id)."""

    name = "agrees"

    def compare(self, items):
        out = []
        for item in items:
            flip = zlib.crc32(item["id"].encode()) % 100 < 15
            out.append(("b" if item["human"] == "a" else "a") if flip else item["human"])
        return out


class PrefersLonger(Evaluator):
    """A judge that always prefers the longer answer."""

    name = "longer"

    def compare(self, items):
        return ["a" if words(i["answer_a"]) >= words(i["answer_b"]) else "b" for i in items]


def test_a_judge_agreeing_85_percent_of_the_time_is_qualified_with_a_weight_above_zero(data_dir):
    register_evaluator("agrees", AgreesMostly)
    q = qualify("agrees")
    pooled = q.figures["pooled"]
    assert q.status == Qualification.Status.DONE and q.qualified and int(q.factor) > 0
    assert 0.8 < pooled["accuracy_non_tie"] < 0.9 and pooled["margin_over_length_ci_low"] > 0
    assert pooled["weight"] == pytest.approx(int(q.factor) / 10**18, abs=1e-4)
    assert set(q.figures["per_set"]) == {s.name for s in SETS}
    record = parse_qualification(default_store().get(q.cid))  # the outcomes rebuild the same factor
    assert record["figures"]["factor"] == q.factor and record["evaluator"] == "agrees"
    assert refusal("agrees") == ""


def test_a_judge_that_always_prefers_the_longer_answer_is_refused_and_told_why(data_dir):
    register_evaluator("longer", PrefersLonger)
    q = qualify("longer")
    assert q.status == Qualification.Status.DONE and not q.qualified and q.factor == "0"
    assert q.figures["pooled"]["margin_over_length"] == 0
    why = refusal("longer")
    assert "has not shown it beats preferring the longer answer" in why
    assert f"on {q.figures['pooled']['pairs_non_tie']} human-labelled pairs" in why


class JudgeMetric:
    """An oracle metric whose evaluator is a named judge, as G-Eval's is."""

    name = "geval"

    def __init__(self, evaluator_name):
        self.evaluator_name = evaluator_name


def test_the_oracle_weighs_only_a_qualified_judge_and_says_why_it_refuses_another(data_dir, settings):
    register_evaluator("agrees", AgreesMostly)
    register_evaluator("longer", PrefersLonger)
    settings.LLMCHAIN_AUTO_WEIGHT = "validated"
    assert weights.earned(JudgeMetric("agrees"))[0] == 0  # not qualified yet
    assert "has not been qualified" in weights.earned(JudgeMetric("agrees"))[2]
    good, bad = qualify("agrees"), qualify("longer")
    assert weights.earned(JudgeMetric("agrees"))[:2] == (int(good.factor), good.cid)
    with CaptureQueriesContext(connection) as read:
        factor, cid, why = weights.earned(JudgeMetric("longer"))
    assert (factor, cid) == (0, bad.cid) and "longer answer" in why
    assert len(read.captured_queries) == 1  # the latest qualification is read once, not again for the reason
    settings.LLMCHAIN_AUTO_WEIGHT = "paper"
    assert weights.earned(JudgeMetric("longer"))[0] == 10**18


def test_the_command_prints_the_table_and_a_last_json_line_with_the_figures(data_dir):
    register_evaluator("agrees", AgreesMostly)
    out = io.StringIO()
    call_command("metaeval", "qualify", "--evaluator", "agrees", "--sample", "20", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert lines[0].split()[:2] == ["set", "decided"] and "agrees qualified" in lines[-2]
    data = json.loads(lines[-1])
    for key in ("accuracy_non_tie", "accuracy_ci_low", "accuracy_ci_high", "length_accuracy_non_tie",
                "margin_over_length", "margin_over_length_ci_low", "margin_over_length_ci_high", "pairs_non_tie",
                "weight"):
        assert key in data
    assert data["qualified"] and data["per_set"] == 20 and all(s["judged"] == 20 for s in data["sets"])
    with pytest.raises(CommandError, match="--sample must be at least 1"):
        call_command("metaeval", "qualify", "--evaluator", "agrees", "--sample", "0", stdout=io.StringIO())


def test_an_unreadable_set_fails_the_qualification_and_keeps_the_reason(data_dir):
    register_evaluator("agrees", AgreesMostly)
    (data_dir / "pandalm" / "testset-v1.json").write_text("[{}]")
    with pytest.raises(CommandError, match="PandaLM: .*not a PandaLM pair"):
        call_command("metaeval", "qualify", "--evaluator", "agrees", stdout=io.StringIO())
    failed = Qualification.objects.get(evaluator="agrees")
    assert failed.status == Qualification.Status.FAILED and "not a PandaLM pair" in failed.error
    assert latest("agrees") is None


def test_registering_a_model_as_a_judge_queues_its_sample_qualification_which_a_worker_runs_once(data_dir, settings):
    settings.LLMCHAIN_QUALIFY_SAMPLE = 10
    judge = judge_model("fair-judge")
    for role in ROLES:  # one qualification in each role it is registered for
        register_evaluator(role, lambda name: AgreesMostly(), takes_argument=True)
    assert enqueue_judges() == len(ROLES) and enqueue_judges() == 0
    assert [run_pending() for _ in ROLES] == [1] * len(ROLES) and run_pending() == 0
    for role in ROLES:
        q = latest(role_evaluator(judge.name, role))
        assert q.qualified and q.per_set == 10 and not q.full
    assert latest(judge_evaluator(judge.name)).evaluator == f"geval:{judge.name}"


def test_the_model_page_part_on_judging_says_plainly_whether_the_model_qualified(data_dir, client):
    judge = judge_model("long-judge")
    page = client.get(f"/models/{judge.pk}/judging").content.decode()
    assert "not registered as a judge" not in page and "Qualified" not in page
    register_evaluator("geval", lambda name: PrefersLonger(), takes_argument=True)
    qualify(judge_evaluator(judge.name), per_set=10)
    page = client.get(f"/models/{judge.pk}/judging").content.decode()
    assert "Not qualified to judge" in page and "does not use its judgements" in page
    assert "LLMBar Neighbor" in page and "geval" not in page


class AgreesAgainstReferences(AgreesMostly):
    """The same judge, scoring answers against other models' answers as the oracle's BERTScore does."""

    name = "agrees-refs"
    needs_reference_answers = True


def test_an_evaluator_of_answers_against_other_answers_is_qualified_only_on_sets_that_have_them(data_dir):
    register_evaluator("agrees-refs", AgreesAgainstReferences)
    q = qualify("agrees-refs")
    assert list(q.figures["per_set"]) == ["PandaLM"] and [s["name"] for s in q.figures["sets"]] == ["PandaLM"]
    assert set(q.figures["skipped"]) == {s.name for s in SETS[1:]}
    assert "other models' answers" in q.figures["skipped"]["LLMBar Natural"]


def test_a_qualification_run_from_the_command_is_kept_as_running_so_no_worker_runs_it_too(data_dir):
    seen = []

    class Watching(AgreesMostly):
        name = "watching"

        def compare(self, items):
            row = Qualification.objects.get(evaluator="watching")
            seen.append((row.status, row.started_at is not None, run_pending()))
            return super().compare(items)

    register_evaluator("watching", Watching)
    q = qualify("watching", per_set=5)
    assert q.status == Qualification.Status.DONE and q.started_at is not None
    assert seen and all(s == (Qualification.Status.RUNNING, True, 0) for s in seen)


def test_a_qualification_whose_worker_died_is_taken_again_once_its_lease_runs_out(data_dir):
    from datetime import timedelta

    from django.utils import timezone

    from apps.annotate import qualify as qualify_module

    register_evaluator("agrees", AgreesMostly)
    now = timezone.now()
    lease = timedelta(seconds=qualify_module.LEASE_S)
    # A worker took each and died: one last marked just inside the lease, one past it, and one from
    # before rows were marked at all, started long ago.
    alive = Qualification.objects.create(evaluator="agrees", per_set=5, status=Qualification.Status.RUNNING,
                                         started_at=now - 2 * lease, beat_at=now - lease + timedelta(seconds=30))
    dead = Qualification.objects.create(evaluator="agrees", per_set=5, status=Qualification.Status.RUNNING,
                                        started_at=now - 2 * lease, beat_at=now - lease - timedelta(seconds=1))
    unmarked = Qualification.objects.create(evaluator="agrees", per_set=5, status=Qualification.Status.RUNNING,
                                            started_at=now - 2 * lease)
    assert run_pending() == 1 and run_pending() == 1 and run_pending() == 0
    for row in (alive, dead, unmarked):
        row.refresh_from_db()
    assert alive.status == Qualification.Status.RUNNING  # its process still marks it: left to it
    assert dead.status == unmarked.status == Qualification.Status.DONE and dead.qualified
    assert dead.started_at > now and dead.beat_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_running_qualification_is_marked_while_it_runs_and_not_after(data_dir, monkeypatch):
    import time

    from apps.annotate import qualify as qualify_module

    monkeypatch.setattr(qualify_module, "BEAT_S", 0.05)
    beats = []

    class Slow(AgreesMostly):
        name = "slow"

        def compare(self, items):
            row = Qualification.objects.get(evaluator="slow")
            deadline = time.monotonic() + 10
            while Qualification.objects.get(pk=row.pk).beat_at == row.beat_at:
                assert time.monotonic() < deadline, "the running qualification was never marked"
                time.sleep(0.02)
            beats.append(Qualification.objects.get(pk=row.pk).beat_at)
            return super().compare(items)

    register_evaluator("slow", Slow)
    q = qualify("slow", per_set=5)
    assert q.status == Qualification.Status.DONE and beats
    last = Qualification.objects.get(pk=q.pk).beat_at
    time.sleep(0.2)
    assert Qualification.objects.get(pk=q.pk).beat_at == last  # no mark once it is done
