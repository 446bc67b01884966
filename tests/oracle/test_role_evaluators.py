"""One judge model in the pairwise and debate roles as evaluators of labelled pairs
(apps/oracle/role_evaluators.py): `pairwise:<judge>` asks each pair in both orders and applies the swap
rule; `debate:<judge>` seats the judge alone as two agents. The judge is a scripted endpoint at the
gateway's transport."""

from __future__ import annotations

import pytest

from apps.chat.models import RegisteredModel
from apps.chat.registry import ModelFields, register_model
from apps.oracle import debates, role_evaluators
from apps.oracle.debates import DebateEvaluator
from apps.oracle.role_evaluators import DebateRole, PairwiseJudge
from lib.evaluators import EvaluatorError, get_evaluator
from tests.personas import developer

from .test_debates import BAD, GOOD, QUESTION, ScriptedJudges, prefers_paris

pytestmark = pytest.mark.django_db

PAIRS = [{"id": "p1", "question": QUESTION, "category": "geo", "answer_a": GOOD, "answer_b": BAD, "human": "a"},
         {"id": "p2", "question": QUESTION, "category": "geo", "answer_a": BAD, "answer_b": GOOD, "human": "b"}]


@pytest.fixture
def judge(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    m = register_model(developer(), ModelFields(name="judge-7b", provider="test", endpoint_url="http://judges.test/v1",
                                                endpoint_model="judge-7b"))
    # probed already (plain text): the judge is asked from worker threads, which must not write to the test's database
    RegisteredModel.objects.filter(pk=m.pk).update(is_judge=True, structured_output=False)
    m.refresh_from_db()
    return m


def test_a_pairwise_judge_that_follows_the_better_answer_is_consistent_in_both_orders(judge):
    script = ScriptedJudges(prefers_paris)
    evaluator = PairwiseJudge(judge.name, gateway=script.gateway())
    assert evaluator.compare(PAIRS) == ["a", "b"]
    details = evaluator.pair_details()
    assert len(script.calls) == 4 and details["replies"] == 4 and details["replies_without_verdict"] == 0
    assert details["position"]["consistency"] == 1.0 and details["position"]["first_position_win_rate"] == 0.5
    assert details["per_judge"]["judge-7b"]["swap_rule"]["accuracy_non_tie"] == 1.0
    # the prompt is the debate's round 0, each pair in its order and swapped: the better answer shown first
    # in two of the four asks (the asks run in worker threads, in any order)
    first_shown = [p.split("[Submission 1]")[1].split("[end of Submission 1]")[0] for _, p, _ in script.calls]
    assert sorted(GOOD in shown for shown in first_shown) == [False, False, True, True]


def test_a_pairwise_judge_that_always_picks_the_first_shown_ties_every_pair(judge):
    evaluator = PairwiseJudge(judge.name, gateway=ScriptedJudges(lambda j, p: "Verdict: 1").gateway())
    assert evaluator.compare(PAIRS) == ["tie", "tie"]  # its verdict flips with the order
    position = evaluator.pair_details()["position"]
    assert (position["consistency"], position["first_position_win_rate"]) == (0.0, 1.0)


def test_a_pairwise_judge_that_fails_leaves_the_pair_undecided_and_says_so(judge):
    evaluator = PairwiseJudge(judge.name, gateway=ScriptedJudges(prefers_paris, fail_after=1).gateway())
    assert evaluator.compare(PAIRS[:1]) == [None]
    assert evaluator.pair_details()["pairs_failed"] == 1


def test_the_roles_are_named_evaluators_and_a_debate_role_seats_the_judge_alone(judge, monkeypatch):
    script = ScriptedJudges(prefers_paris)
    monkeypatch.setattr(debates, "Gateway", script.gateway)
    monkeypatch.setattr(role_evaluators, "Gateway", script.gateway)
    assert isinstance(get_evaluator("pairwise:judge-7b"), PairwiseJudge)
    alone = get_evaluator("debate:judge-7b")
    assert isinstance(alone, DebateRole) and [m.name for m in alone.judges] == ["judge-7b", "judge-7b"]
    assert alone.compare(PAIRS) == ["a", "b"]
    assert alone.pair_details()["position"]["consistency"] == 1.0
    # every running judge together, qualified or not: measuring them is how they qualify
    together = get_evaluator("debate")
    assert type(together) is DebateEvaluator and [m.name for m in together.judges] == ["judge-7b", "judge-7b"]
    with pytest.raises(EvaluatorError, match="no registered model named 'nobody'"):
        get_evaluator("pairwise:nobody")
