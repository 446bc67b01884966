"""Structured verdicts, verdict probabilities and debates that fit (lib/debate.py)."""

from __future__ import annotations

import json
import math
import random

import pytest

from lib import debate as d

CASE = d.Debate(criterion="helpfulness", criterion_description="", scenario="", question="What is 2+2?",
                submission_1="4", submission_2="five", agents=("a", "b"))


def structured(reasoning: str, verdict) -> str:
    return json.dumps({"reasoning": reasoning, "verdict": verdict})


@pytest.mark.parametrize("reply, verdict", [
    (structured("Submission 2 is wrong. Verdict: 2", 1), 1),  # the structured verdict, not words in it
    (structured("x", 0), 0),
    (structured("x", "2"), 2),
    (structured("x", 3), None),
    (structured("x", True), None),
    ('{"reasoning": "x"}\nVerdict: 1', 1),  # not one JSON object: the strict parser reads it
])
def test_a_structured_reply_is_read_by_its_verdict_only(reply, verdict):
    assert d.parse_verdict(reply).verdict == verdict


def test_probabilities_are_read_at_the_verdict_position_and_mapped_back():
    top = [{"token": "1", "logprob": math.log(0.2)}, {"token": "2", "logprob": math.log(0.05)},
           {"token": "0", "logprob": math.log(0.05)}]
    content = [{"token": t, "logprob": -1.0, "top_logprobs": []} for t in ['{"', 'reasoning', '":', ' "', '1', ' or',
                                                                            ' 2', '",', ' "', 'verdict', '":', ' ']]
    content.append({"token": "1", "logprob": math.log(0.2), "top_logprobs": top})
    probs, mass = d.verdict_probabilities(content)
    assert mass == pytest.approx(0.3)
    assert probs == pytest.approx({1: 2 / 3, 2: 1 / 6, 0: 1 / 6})

    def ask(agent, prompt):  # agent a says "1" in its own numbering
        return d.Reply(structured("ok", 1), {1: 0.7, 2: 0.2, 0: 0.1}, 0.3)

    result = d.run_debate(CASE, ask, rounds=1, rng=random.Random(4))
    for turn in result.turns:
        shown_first = 2 if turn.swapped else 1
        assert turn.verdict == shown_first
        assert turn.probabilities[shown_first] == 0.7 and turn.probabilities[0] == 0.1 and turn.mass == 0.3


def test_earlier_reasoning_is_cut_until_a_round_fits():
    long = " ".join(["word"] * 400)
    limit = len(d.initial_prompt(CASE, swapped=False)) + 1500  # characters stand for tokens here

    def ask(agent, prompt):  # round 0 disagrees (a tie against a winner), at length
        return structured(long, 0 if agent == "a" else 1)

    result = d.run_debate(CASE, ask, rounds=2, rng=random.Random(1), fits=lambda prompt: len(prompt) <= limit)
    later = result.round(1)
    assert all(len(t.prompt) <= limit for t in result.turns)
    assert all(t.trimmed_to in d.TRIM_WORDS[1:] for t in later)
    assert "cut to" in later[0].prompt and "word " * 401 not in later[0].prompt


def test_a_pair_that_cannot_fit_is_refused_before_any_judge_is_asked():
    asked = []
    with pytest.raises(d.DoesNotFit):
        d.run_debate(CASE, lambda agent, prompt: asked.append(prompt) or "Verdict: 1", rounds=3,
                     fits=lambda prompt: len(prompt) < len(d.initial_prompt(CASE, swapped=False)) + 50)
    assert asked == []
