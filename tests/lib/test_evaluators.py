"""Named evaluators (lib/evaluators.py): the length baseline, BERTScore against a reference, and
the registry others plug selfeval, geval:<judge> and debate into."""

from __future__ import annotations

import pytest

from lib import evaluators
from lib.evaluators import Evaluator, EvaluatorError, available_evaluators, get_evaluator, register_evaluator
from tests.evaluator_registry import isolated_evaluator_registry  # noqa: F401  (autouse fixture)


def pair(a: str, b: str, **extra) -> dict:
    return {"id": extra.pop("id", "p1"), "question": "Q?", "answer_a": a, "answer_b": b, **extra}


class OverlapMetric:
    """Stands in for BERTScore: F1 is the share of the reference's words the candidate uses."""

    def __init__(self):
        self.calls = []

    def raw_scores(self, pairs):
        self.calls.append(list(pairs))
        out = []
        for cand, ref in pairs:
            ref_words = set(ref.split())
            f = len(set(cand.split()) & ref_words) / len(ref_words)
            out.append((f, f, f))
        return out


def test_the_longer_answer_wins_by_words_not_characters():
    verdicts = get_evaluator("length").compare([
        pair("one two three", "one"),
        pair("short", "a b"),
        pair("extraordinarily", "a b"),  # more characters, fewer words
        pair("same length", "equal words"),
    ])
    assert verdicts == ["a", "b", "b", "tie"]


def test_length_scores_a_response_by_its_words_whatever_the_criterion():
    items = [{"response": "I like  jazz\nvery much"}, {"response": ""}]
    assert get_evaluator("length").score(items, "overall") == [5.0, 0.0]
    assert get_evaluator("length").score(items, "groundedness") == [5.0, 0.0]


def test_bertscore_ref_prefers_the_answer_closer_to_the_reference():
    metric = OverlapMetric()
    judge = evaluators.BERTScoreRef(metric=metric)
    verdicts = judge.compare([
        pair("the cat sat", "a dog ran", reference="the cat sat on the mat"),
        pair("nothing here", "on the mat", reference="the cat sat on the mat"),
        pair("cat", "mat", id="p3", reference="cat mat"),
    ])
    assert verdicts == ["a", "b", "tie"]
    assert len(metric.calls) == 1  # one batch for every answer of every pair


def test_bertscore_ref_scores_a_response_against_its_reference():
    judge = evaluators.BERTScoreRef(metric=OverlapMetric())
    assert judge.score([{"response": "a b", "reference": "a b c d"}], "overall") == [0.5]


def test_bertscore_ref_leaves_items_without_a_reference_undecided_and_refuses_a_file_with_none():
    judge = evaluators.BERTScoreRef(metric=OverlapMetric())
    assert judge.compare([pair("a", "b", id="q1", reference="a"), pair("a", "b", id="q2"),
                          pair("a", "b", id="q3", reference="  ")]) == ["a", None, None]
    with pytest.raises(EvaluatorError, match=r"`reference`.*q2, q3"):
        judge.compare([pair("a", "b", id="q2"), pair("a", "b", id="q3", reference="  ")])


def test_bertscore_ref_with_the_real_encoder_prefers_the_paraphrase():
    pytest.importorskip("torch")
    verdicts = get_evaluator("bertscore-ref").compare([
        pair("Quarterly revenue grew by twelve percent.", "The capital city of France is Paris.",
             reference="Paris is the capital of France."),
    ])
    assert verdicts == ["b"]


def test_an_unknown_evaluator_is_an_error_listing_the_available_ones():
    with pytest.raises(EvaluatorError, match=r"unknown evaluator 'lenght'; available: bertscore-lc, bertscore-ref, (.*, )?length\b"):
        get_evaluator("lenght")


class Judge(Evaluator):
    def __init__(self, model: str):
        self.name = f"geval:{model}"
        self.model = model

    def score(self, items, criterion):
        return [None for _ in items]


def test_an_evaluator_registered_with_an_argument_is_asked_for_by_prefix():
    register_evaluator("geval", Judge, takes_argument=True)
    judge = get_evaluator("geval:llama-3-8b")
    assert judge.model == "llama-3-8b"
    assert "geval:<argument>" in available_evaluators()
    with pytest.raises(EvaluatorError, match=r"needs an argument: geval:<argument>"):
        get_evaluator("geval")


def test_an_evaluator_whose_argument_is_optional_is_asked_for_with_or_without_it():
    register_evaluator("panel", lambda judge="": Judge(judge or "everyone"), argument_optional=True)
    assert get_evaluator("panel").model == "everyone" and get_evaluator("panel:llama-3-8b").model == "llama-3-8b"
    assert "panel[:<argument>]" in available_evaluators()


def test_an_evaluator_without_arguments_refuses_one():
    with pytest.raises(EvaluatorError, match="takes no argument"):
        get_evaluator("length:words")


def test_an_evaluator_can_be_registered_lazily_by_module_path():
    register_evaluator("lazy-length", "lib.evaluators:Length")
    assert get_evaluator("lazy-length").compare([pair("a b", "a")]) == ["a"]


def test_asking_for_a_capability_an_evaluator_lacks_is_an_error():
    register_evaluator("geval", Judge, takes_argument=True)
    with pytest.raises(EvaluatorError, match="cannot compare pairs"):
        get_evaluator("geval:gpt-4").compare([pair("a", "b")])


def test_names_with_a_colon_cannot_be_registered():
    with pytest.raises(EvaluatorError):
        register_evaluator("geval:gpt-4", Judge)
