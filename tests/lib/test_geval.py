"""G-Eval's scoring (lib/geval.py) against a scripted judge endpoint."""

from __future__ import annotations

import math

import pytest

from lib import geval
from lib.geval import CRITERIA, GEvalJudge, MIN_DIGIT_MASS, score_from_logprobs, score_from_samples

ITEM = {"question": "have you seen the new ghibli film ?\nno , is it good ?", "response": "yes , it is lovely !",
        "reference": "studio ghibli released the tale of princess kaguya in 2013 ."}


def top(**probs: float) -> list[dict]:
    """top_logprobs from {token: probability}; `_3` stands for the token " 3"."""
    return [{"token": t.replace("_", " "), "logprob": math.log(p)} for t, p in probs.items()]


def entry(token: str, **probs: float) -> dict:
    return {"token": token, "logprob": -0.1, "top_logprobs": top(**probs)}


def completion(*texts: str, logprobs: list[dict] | None = None) -> dict:
    return {"choices": [{"index": i, "message": {"role": "assistant", "content": t},
                         "logprobs": {"content": logprobs} if logprobs is not None else None}
                        for i, t in enumerate(texts)]}


class ScriptedJudge:
    """A transport that answers by a rule and records every request."""

    def __init__(self, rule):
        self.rule, self.requests = rule, []

    def complete(self, messages, **params):
        self.requests.append({"messages": messages, **params})
        return self.rule(messages[-1]["content"], params)


def test_the_score_is_the_probability_weighted_mean_of_the_digits():
    j = score_from_logprobs([entry("4", **{"4": 0.6, "5": 0.2, "3": 0.1, "the": 0.1})])
    assert j.digit_mass == pytest.approx(0.9)
    assert j.probabilities[4] == pytest.approx(0.6 / 0.9)
    assert j.score == pytest.approx((4 * 0.6 + 5 * 0.2 + 3 * 0.1) / 0.9)


def test_spaced_digit_tokens_count_as_the_same_score():
    j = score_from_logprobs([entry(" 3", _3=0.5, **{"3": 0.3, "2": 0.2})])
    assert j.probabilities[3] == pytest.approx(0.8) and j.score == pytest.approx(2.8)


def test_the_score_position_is_the_first_generated_digit_not_the_first_mention():
    content = [entry("Overall", Overall=0.9, **{"1": 0.05}), entry(":", **{":": 0.99}),
               entry(" 5", _5=0.7, _4=0.3)]
    j = score_from_logprobs(content)
    assert j.score == pytest.approx(4.7) and j.digit_mass == pytest.approx(1.0)


def test_an_echoed_scale_is_not_the_score():
    content = [entry("Overall", Overall=0.9), entry(" (", **{" (": 0.9}), entry("1", **{"1": 0.97}),
               entry("-", **{"-": 0.99}), entry("5", **{"5": 0.99}), entry("):", **{"):": 0.9}),
               entry(" 3", _3=0.6, _2=0.4)]
    assert score_from_logprobs(content).score == pytest.approx(2.6)


def test_a_judge_that_hardly_considers_a_digit_is_unusable_not_scored():
    j = score_from_logprobs([entry("The", The=0.9, **{"5": 0.05})])
    assert j.score is None and not j.usable
    assert j.digit_mass == pytest.approx(0.05) and j.digit_mass < MIN_DIGIT_MASS
    assert score_from_logprobs([entry("Sorry", Sorry=1.0)]).digit_mass == 0.0


def test_samples_weigh_each_readable_score_by_its_frequency():
    j = score_from_samples(["4", "Overall Quality (1-5): 5", " 4.", "I cannot rate this"])
    assert j.method == "samples" and j.digit_mass == pytest.approx(0.75)
    assert j.score == pytest.approx((4 + 5 + 4) / 3)
    assert score_from_samples(["no", "none", "4"]).score is None  # one readable in three


def test_the_judge_uses_logprobs_greedily_when_the_endpoint_gives_them():
    transport = ScriptedJudge(lambda prompt, p: completion("2", logprobs=[entry("2", **{"2": 0.5, "3": 0.5})]))
    j = GEvalJudge(transport).judge(CRITERIA["overall"], "1. Read it.", ITEM)
    assert j.score == pytest.approx(2.5) and j.method == "logprobs"
    request = transport.requests[0]
    assert request["logprobs"] is True and request["top_logprobs"] == 20 and request["temperature"] == 0
    assert "n" not in request


def test_without_logprobs_the_judge_falls_back_to_twenty_samples_in_batches_the_endpoint_accepts():
    def rule(prompt, params):
        if params.get("logprobs"):
            return completion("3")  # this endpoint ignores logprobs
        if params["n"] > 8:
            raise geval.RequestRefused("'n' must be <= 8")
        return completion(*(["4", "5"] * params["n"])[:params["n"]])

    transport = ScriptedJudge(rule)
    judge = GEvalJudge(transport)
    j = judge.judge(CRITERIA["overall"], "1. Read it.", ITEM)
    asked = [r["n"] for r in transport.requests if "n" in r]
    assert asked[0] == 20 and sum(n for n in asked if n <= 8) == 20  # refused 20, then batches summing to 20
    assert j.method == "samples" and j.digit_mass == 1.0 and 4 <= j.score <= 5
    assert all(r["temperature"] == 1 for r in transport.requests if "n" in r)
    judge.judge(CRITERIA["overall"], "1. Read it.", ITEM)  # the method is settled: logprobs are not asked again
    assert sum(1 for r in transport.requests if r.get("logprobs")) == 1


def test_an_endpoint_that_refuses_logprobs_is_sampled_instead():
    def rule(prompt, params):
        if params.get("logprobs"):
            raise geval.RequestRefused("logprobs are not supported")
        return completion(*["3"] * params["n"])

    j = GEvalJudge(ScriptedJudge(rule)).judge(CRITERIA["coherence"], "1. Read it.", ITEM)
    assert (j.method, j.score, j.digit_mass) == ("samples", 3, 1.0)
    with pytest.raises(geval.RequestRefused):
        GEvalJudge(ScriptedJudge(rule), method="logprobs").judge(CRITERIA["coherence"], "1. Read it.", ITEM)


def test_the_steps_are_written_from_the_criterion_and_go_into_every_form():
    def rule(prompt, params):
        if prompt.rstrip().endswith("Steps:"):
            return completion("Read the fact.\nCheck the response uses it.")
        return completion("5", logprobs=[entry("5", **{"5": 1.0})])

    transport = ScriptedJudge(rule)
    judge = GEvalJudge(transport)
    steps = judge.write_steps(CRITERIA["groundedness"])
    assert steps == "Read the fact.\nCheck the response uses it."
    steps_request = transport.requests[0]["messages"][0]["content"]
    assert steps_request == geval.steps_prompt(CRITERIA["groundedness"]) and "Groundedness (1-5)" in steps_request
    assert judge.judge(CRITERIA["groundedness"], steps, ITEM).score == 5
    form = transport.requests[1]["messages"][0]["content"]
    assert "Check the response uses it." in form and ITEM["reference"] in form and ITEM["response"] in form
    assert form.endswith("Groundedness (1-5):")
    assert "A: have you seen the new ghibli film ?\nB: no , is it good ?" in form


def test_only_the_four_steps_asked_for_are_kept_of_a_rambling_judge():
    rambling = "1. Read it.\n\n2. Check the topic.\n3. Check the tone.\n4. Score it.\n5. Write a paragraph.\n- More"
    judge = GEvalJudge(ScriptedJudge(lambda prompt, params: completion(rambling)))
    kept = judge.write_steps(CRITERIA["overall"])
    assert kept == "1. Read it.\n2. Check the topic.\n3. Check the tone.\n4. Score it."


def test_each_criterion_shows_the_judge_only_its_inputs():
    overall = geval.form_prompt(CRITERIA["overall"], "steps", ITEM)
    assert ITEM["reference"] not in overall
    helpful = geval.form_prompt(CRITERIA["helpfulness"], "steps", {"question": "Why is the sky blue?",
                                                                   "response": "Rayleigh scattering."})
    assert "Question:\nWhy is the sky blue?" in helpful and "Answer:\nRayleigh scattering." in helpful
    with pytest.raises(ValueError, match="knowledge fact"):
        geval.form_prompt(CRITERIA["groundedness"], "steps", {"question": "hi", "response": "hello"})


def test_the_shipped_criteria_are_seed_004s_and_seed_003s():
    assert set(CRITERIA) == {"understandability", "naturalness", "coherence", "engagingness", "groundedness",
                             "overall", "helpfulness", "interpretability", "reasoning", "creativity"}
    assert {c.inputs for n, c in CRITERIA.items() if n in ("helpfulness", "reasoning")} == {"qa"}


def test_many_items_keep_their_order_and_the_summary_counts_the_unusable():
    def rule(prompt, params):
        good = "lovely" in prompt
        return completion("x", logprobs=[entry("4", **{"4": 0.9}) if good else entry("No", No=0.95, **{"4": 0.05})])

    items = [dict(ITEM, response=r) for r in ("lovely", "meh", "lovely indeed", "meh again")]
    found = GEvalJudge(ScriptedJudge(rule), workers=3).judge_all(CRITERIA["overall"], "s", items)
    assert [j.score for j in found] == [4, None, 4, None]
    summary = geval.summary(found)
    assert summary["scored"] == 2 and summary["unusable"] == 2
    assert summary["mean_digit_mass"] == pytest.approx(0.475)


def test_an_item_repeated_is_judged_once_and_keeps_each_of_its_places():
    def rule(prompt, params):
        score = 5 if "another question" in prompt else 4 if "lovely" in prompt else 2
        return completion("x", logprobs=[entry(str(score), **{str(score): 1.0})])

    judge = ScriptedJudge(rule)
    items = [dict(ITEM, response=r) for r in ("lovely", "meh", "lovely", "meh", "lovely")]
    items.append(dict(ITEM, question="another question", response="lovely"))  # another prompt: judged apart
    found = GEvalJudge(judge, workers=2).judge_all(CRITERIA["overall"], "s", items)
    assert [j.score for j in found] == [4, 2, 4, 2, 4, 5]
    assert len(judge.requests) == 3
