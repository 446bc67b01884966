"""Peer self-evaluation (Hai Ye's method): a third model's answer decides each pair, Elo ranks the models.

Most tests use a word-overlap scorer with BERTScore's encode/greedy-match interface, so that every
win, tie and loss can be worked out by hand; one runs the real BERTScore on a tiny folder.
"""

from __future__ import annotations

from collections import Counter
from math import comb

import pytest

from lib.pairwise import Outcome, Record, elo
from lib.selfeval import (
    ELO_K,
    SelfEvalError,
    compare,
    overlap_scores,
    rate,
    read_responses,
    self_evaluate,
)


class WordOverlap:
    """BERTScore's interface with words for tokens and exact matches for similarity: P is the share
    of the candidate's words found in the reference, R the share of the reference's words found in
    the candidate. Counts what goes through the encoder."""

    def __init__(self):
        self.encode_calls = 0
        self.encoded = Counter()

    @staticmethod
    def text_key(text):
        return text.strip()

    def encode(self, texts):
        self.encode_calls += 1
        out = {}
        for text in texts:
            if self.text_key(text) not in out:
                self.encoded[self.text_key(text)] += 1
                out[self.text_key(text)] = text.split()
        return out

    @staticmethod
    def greedy_match(cand, ref):
        if not cand or not ref:
            return 0.0, 0.0, 0.0
        p = sum(w in ref for w in cand) / len(cand)
        r = sum(w in cand for w in ref) / len(ref)
        return p, r, 2 * p * r / (p + r) if p + r else 0.0


# --- who wins a comparison -------------------------------------------------------------------------

def test_the_judge_prefers_the_answer_that_covers_more_of_its_own():
    answers = {"judge": ["a b c d"], "close": ["a b c x"], "far": ["a y z w"]}
    outcomes = compare(overlap_scores(answers, WordOverlap())[0], sorted(answers), 1)
    assert Outcome("close", "far", 1.0) in outcomes


def test_coverage_of_the_judge_counts_not_the_contestants_length():
    # F1 would prefer the short, precise answer; the seed's recall (judge as reference) prefers
    # the long one that contains every word of the judge's answer.
    answers = {"judge": ["a b c"], "long": ["a b c q r s t u v w"], "short": ["a b"]}
    outcomes = compare(overlap_scores(answers, WordOverlap())[0], sorted(answers), 1)
    assert Outcome("long", "short", 1.0) in outcomes


def test_recall_with_the_judge_as_reference_is_precision_with_the_judge_as_hypothesis():
    scorer = WordOverlap()
    answers = {"i": ["a b c q"], "k": ["a b x"], "j": ["z"]}
    scores, _ = overlap_scores(answers, scorer)
    enc = scorer.encode(["a b c q", "a b x"])
    recall_k_reference = scorer.greedy_match(enc["a b c q"], enc["a b x"])[1]
    precision_k_hypothesis = scorer.greedy_match(enc["a b x"], enc["a b c q"])[0]
    assert scores[0, "i", "k"] == recall_k_reference == precision_k_hypothesis == pytest.approx(2 / 3)


def test_equal_scores_are_a_tie_and_so_are_identical_answers():
    answers = {"judge": ["a b c d"], "x": ["a b"], "y": ["c d"], "twin": ["a b"]}
    scores, _ = overlap_scores(answers, WordOverlap())
    outcomes = compare(scores, sorted(answers), 1)
    judged_by_the_judge = [o for o in outcomes if "judge" not in (o.a, o.b)]
    # each of the three pairs among twin, x, y is judged by the judge (a tie: 2 of 4 words each)
    # and by the third contestant
    assert Outcome("twin", "x", 0.5) in judged_by_the_judge
    assert Outcome("x", "y", 0.5) in judged_by_the_judge
    assert judged_by_the_judge.count(Outcome("twin", "x", 0.5)) == 2  # y judges them alike too


def test_a_tolerance_turns_near_equal_scores_into_ties():
    scores = {(0, "a", "k"): 0.5, (0, "b", "k"): 0.5 + 1e-12, (0, "a", "b"): 0.1, (0, "b", "a"): 0.1,
              (0, "k", "a"): 0.1, (0, "k", "b"): 0.2}
    assert Outcome("a", "b", 0.0) in compare(scores, ["a", "b", "k"], 1)
    assert Outcome("a", "b", 0.5) in compare(scores, ["a", "b", "k"], 1, tie=1e-9)


def test_every_prompt_pair_and_third_model_gives_one_comparison():
    models = [f"m{n}" for n in range(5)]
    answers = {m: [f"{m} answer {t} shared words {n}" for t in range(4)] for n, m in enumerate(models)}
    outcomes = compare(overlap_scores(answers, WordOverlap())[0], models, 4)
    assert len(outcomes) == 4 * comb(5, 2) * 3  # M * C(N, 2) * (N - 2), as the seed counts them


def test_a_missing_answer_leaves_out_every_comparison_it_would_take_part_in():
    answers = {"a": ["x y", "x y"], "b": ["x", "x"], "c": ["y", None], "d": ["x y z", "x y z"]}
    outcomes = compare(overlap_scores(answers, WordOverlap())[0], sorted(answers), 2)
    # prompt 0: 6 pairs x 2 judges; prompt 1: only a, b, d answered: 3 pairs x 1 judge
    assert len(outcomes) == 12 + 3


def test_each_distinct_answer_is_encoded_once_in_one_call():
    scorer = WordOverlap()
    models = [f"m{n}" for n in range(6)]
    answers = {m: [f"{m} says {t}" for t in range(10)] for m in models}
    answers["m5"] = list(answers["m4"])  # a model that repeats another's answers word for word
    result = self_evaluate(answers, scorer, rounds=2, top=4)
    assert scorer.encode_calls == 1
    assert set(scorer.encoded.values()) == {1} and len(scorer.encoded) == 50
    assert result.encoded_texts == 50


# --- ratings -------------------------------------------------------------------------------------

def ladder(prompts=6):
    """Four models, the better ones covering more of everyone's words: 'best' contains them all."""
    return {
        "best": ["alpha beta gamma delta epsilon"] * prompts,
        "good": ["alpha beta gamma delta"] * prompts,
        "fair": ["alpha beta gamma"] * prompts,
        "poor": ["alpha epsilon"] * prompts,
    }


def test_the_records_and_elo_rank_the_models_by_how_much_of_the_others_they_cover():
    result = self_evaluate(ladder(), WordOverlap())
    assert result.ranking == ["best", "good", "fair", "poor"]
    # per prompt, best beats fair and poor under both judges, and good under poor's judgement
    # ("alpha epsilon": good lacks epsilon); fair's answer is covered by both alike: a tie
    assert result.final.records["best"] == Record(wins=6 * 5, ties=6 * 1, losses=0)
    assert result.final.records["poor"].wins == 0
    assert len(result.final.outcomes) == 6 * comb(4, 2) * 2
    assert sum(result.final.ratings.values()) == pytest.approx(4 * 1000)


def test_elo_runs_over_the_comparisons_in_a_seeded_shuffle_with_the_seeds_constants():
    import random

    scores, _ = overlap_scores(ladder(), WordOverlap())
    outcomes = compare(scores, sorted(ladder()), 6)
    shuffled = list(outcomes)
    random.Random(7).shuffle(shuffled)
    expected = elo(shuffled, k=ELO_K, initial=1000, scale=400, players=sorted(ladder()))
    assert ELO_K == 4
    assert rate(outcomes, sorted(ladder()), seed=7) == expected
    assert self_evaluate(ladder(), WordOverlap(), seed=7).final.ratings == expected


def test_the_bootstrap_median_keeps_the_order_and_is_reproducible():
    first = self_evaluate(ladder(), WordOverlap(), bootstrap=20)
    again = self_evaluate(ladder(), WordOverlap(), bootstrap=20)
    assert first.final.ratings == again.final.ratings
    assert first.ranking == ["best", "good", "fair", "poor"]


def test_the_second_round_re_runs_among_the_top_models_only():
    answers = {**ladder(), "weak": ["omega"] * 6}
    result = self_evaluate(answers, WordOverlap(), rounds=2, top=3)
    first, second = result.rounds
    assert set(first.models) == set(answers)
    assert set(second.models) == {"best", "good", "fair"}
    # with three models each pair has one judge: the third of the top models
    assert all({o.a, o.b} <= set(second.models) for o in second.outcomes)
    assert len(second.outcomes) == 6 * 3 * 1
    assert result.ranking == ["best", "good", "fair", "poor", "weak"]
    data = result.as_dict()
    assert data["rounds"] == 2 and set(data["ratings"]) == {"best", "good", "fair"}
    assert set(data["first_round"]["ratings"]) == set(answers)


def test_the_evaluation_needs_three_models_and_answer_lists_of_one_length():
    with pytest.raises(SelfEvalError, match="at least 3 models"):
        self_evaluate({"a": ["x"], "b": ["y"]}, WordOverlap())
    with pytest.raises(SelfEvalError, match="b has 1"):
        self_evaluate({"a": ["x", "y"], "b": ["y"], "c": ["z", "z"]}, WordOverlap())
    with pytest.raises(SelfEvalError, match="between 3 and 4"):
        self_evaluate(ladder(), WordOverlap(), rounds=2, top=2)


# --- the seed's folder ---------------------------------------------------------------------------

def test_a_folder_holds_one_file_per_model_and_one_response_per_line(tmp_path):
    (tmp_path / "ChatGPT").write_text("First answer.\\n\\nSecond paragraph.\nAnother answer.\n")
    (tmp_path / "gpt-3.5-turbo.txt").write_text("One.\nTwo.")
    (tmp_path / "vicuna.jsonl").write_text('{"response": "Yes."}\n{"text": null}\n')
    (tmp_path / ".DS_Store").write_bytes(b"\0\1")
    (tmp_path / "older").mkdir()
    assert read_responses(tmp_path) == {
        "ChatGPT": ["First answer.\n\nSecond paragraph.", "Another answer."],
        "gpt-3.5-turbo": ["One.", "Two."],
        "vicuna": ["Yes.", None],
    }


def test_files_of_different_lengths_are_refused_naming_them(tmp_path):
    (tmp_path / "a.txt").write_text("1\n2\n3\n")
    (tmp_path / "b.txt").write_text("1\n2\n")
    with pytest.raises(SelfEvalError, match=r"a\.txt has 3, b\.txt has 2"):
        read_responses(tmp_path)


def test_a_jsonl_line_without_a_response_is_refused(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"answer": "no"}\n')
    with pytest.raises(SelfEvalError, match=r'a\.jsonl, line 1: expected an object with a "response"'):
        read_responses(tmp_path)


# --- the real BERTScore ---------------------------------------------------------------------------

@pytest.mark.slow
def test_the_real_bertscore_encodes_each_answer_once_and_ranks_the_outlier_last(tmp_path):
    pytest.importorskip("torch")
    from lib.metrics.bertscore import BERTScore

    rows = {
        "sea": ["The sea is wide and blue, it sings to me and you.",
                "Paris is the capital of France and its largest city."],
        "waves": ["Waves roll on the blue sea, singing to the shore.",
                  "The capital of France is Paris, its largest city."],
        "tide": ["The blue sea rises with the tide and sings.",
                 "France has Paris as its capital."],
        "off": ["Quarterly revenue grew by four percent.",
                "Quarterly revenue grew by four percent."],
    }
    for model, lines in rows.items():
        (tmp_path / f"{model}.txt").write_text("\n".join(lines) + "\n")
    scorer = BERTScore(cache_size=0)
    result = self_evaluate(read_responses(tmp_path), scorer)
    assert scorer.stats["texts_encoded"] == 7  # 'off' gave the same answer twice: one encoding
    assert result.encoded_texts == 7
    assert len(result.final.outcomes) == 2 * comb(4, 2) * 2
    assert result.ranking[-1] == "off"
    assert result.final.records["off"].wins == 0
    enc = scorer.encode([rows["sea"][0], rows["waves"][0]])
    p_k_hypothesis = scorer.greedy_match(enc[scorer.text_key(rows["waves"][0])],
                                         enc[scorer.text_key(rows["sea"][0])])[0]
    r_k_reference = scorer.greedy_match(enc[scorer.text_key(rows["sea"][0])],
                                        enc[scorer.text_key(rows["waves"][0])])[1]
    assert p_k_hypothesis == pytest.approx(r_k_reference, abs=1e-6)
    scores, _ = overlap_scores(read_responses(tmp_path), scorer)
    assert scores[0, "sea", "waves"] == pytest.approx(r_k_reference)  # s(o_sea, o_waves): waves judging



# --- as an evaluator of labelled pairs (metaeval pairs --evaluator selfeval) ----------------------

def pair(i, question, a, b, model_a=None, model_b=None):
    item = {"id": str(i), "question": question, "category": "c", "answer_a": a, "answer_b": b, "human": "a"}
    if model_a:
        item.update(model_a=model_a, model_b=model_b)
    return item


def test_as_a_pair_evaluator_the_other_answers_to_the_question_vote():
    from lib.selfeval import PeerJudge

    scorer = WordOverlap()
    items = [
        # q1 holds three answers: each pair is judged by the third ("red blue" covered by a only;
        # "yellow" covered by neither; "red blue green" covered more by b)
        pair(1, "q1", "red blue green", "yellow"), pair(2, "q1", "red blue", "red blue green"),
        pair(3, "q1", "yellow", "red blue"),
        # q2: "cat dog" covers both "cat" and "dog" alike (a tie); "dog" judges the last pair
        pair(4, "q2", "cat", "dog"), pair(5, "q2", "cat", "dog"), pair(6, "q2", "cat dog", "cat"),
        pair(7, "q3", "alone", "together"),  # no third answer: undecided
    ]
    verdicts = PeerJudge(scorer).compare(items)
    assert verdicts == ["a", "tie", "b", "tie", "tie", "a", None]
    assert scorer.encode_calls == 1 and max(scorer.encoded.values()) == 1


def test_as_a_pair_evaluator_a_model_never_judges_its_own_pair():
    from lib.selfeval import PeerJudge

    items = [pair(1, "q", "x y", "z", "m1", "m2"), pair(2, "q", "x y", "w", "m1", "m3")]
    # for pair 1 the only third model is m3 ("w"), which covers neither side
    assert PeerJudge(WordOverlap()).compare(items) == ["tie", "tie"]


def test_as_a_pair_evaluator_a_model_answering_one_question_differently_in_two_pairs_is_judged_on_each_text():
    from lib.selfeval import PeerJudge

    items = [pair(1, "q", "x y", "z", "m1", "m2"), pair(2, "q", "x y w", "z", "m1", "m2"),
             pair(3, "q", "x", "y", "m3", "m4")]
    # m1's two texts differ; the third and fourth models' answers judge both pairs
    assert PeerJudge(WordOverlap()).compare(items) == ["a", "a", "tie"]
