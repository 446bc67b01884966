"""Validity against the length rule (lib/metaeval.py): accuracy with a bootstrap interval, the length
rule on the same decided pairs, the paired margin, and the weight it earns (lib/weighting.py)."""

from __future__ import annotations

import math
import random

import pytest

from lib.evaluators import Length, get_evaluator, log_length_ratio
from lib import metaeval
from lib.metaeval import bootstrap_counts, percentile_bounds, prefers_longer, validity, validity_factor_wad
from lib.records import WAD, RecordError, canonical, interaction_evidence
from lib.weighting import WeightingError, expected_wa, parse_qualification, qualification_record, weighted_wa, weighting

SHORT, LONG = "fine answer", "a much longer and more polished answer that says a great deal more"


def pairs_where(n: int, longer_wins: float, seed: int = 1) -> list[dict]:
    """n decided pairs; in a share `longer_wins` of them people preferred the longer answer."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        long_first = rng.random() < 0.5
        a, b = (LONG, SHORT) if long_first else (SHORT, LONG)
        longer = "a" if long_first else "b"
        human = longer if i < round(n * longer_wins) else ("b" if longer == "a" else "a")
        out.append({"id": f"p{i}", "question": "Q?", "category": "c", "answer_a": a, "answer_b": b, "human": human})
    return out


def agreeing(pairs: list[dict], share: float, seed: int = 2) -> list[str]:
    """Verdicts that agree with the humans on a share of the pairs (the rest the other answer)."""
    rng = random.Random(seed)
    wrong = set(rng.sample(range(len(pairs)), round(len(pairs) * (1 - share))))
    return [("b" if p["human"] == "a" else "a") if i in wrong else p["human"] for i, p in enumerate(pairs)]


def test_the_length_rule_measured_against_itself_has_no_margin_and_earns_nothing():
    pairs = pairs_where(200, 0.7)
    verdicts = Length().compare(pairs)
    v = validity(pairs, verdicts, verdicts)
    assert v["accuracy_non_tie"] == v["length_accuracy_non_tie"] == 0.7
    assert (v["margin_over_length"], v["margin_over_length_ci_low"], v["margin_over_length_ci_high"]) == (0, 0, 0)
    assert v["weight"] == 0 and v["pairs_non_tie"] == 200
    assert v["prefers_longer"]["rate"] == 1.0


def test_an_evaluator_right_85_percent_of_the_time_beats_a_70_percent_length_rule_with_an_interval():
    pairs = pairs_where(300, 0.7)
    v = validity(pairs, agreeing(pairs, 0.85), Length().compare(pairs))
    assert v["accuracy_non_tie"] == 0.85 and v["length_accuracy_non_tie"] == 0.7
    assert v["accuracy_ci_low"] < 0.85 < v["accuracy_ci_high"]
    assert v["margin_over_length"] == 0.15
    assert 0 < v["margin_over_length_ci_low"] < 0.15 < v["margin_over_length_ci_high"]
    assert 0 < v["weight"] < 1


def test_human_ties_are_left_out_of_the_decided_pairs_and_an_evaluator_tie_counts_wrong():
    pairs = pairs_where(10, 1.0)
    pairs[0]["human"] = "tie"
    verdicts = [p["human"] for p in pairs]
    verdicts[1] = "tie"
    v = validity(pairs, verdicts, Length().compare(pairs))
    assert v["pairs_non_tie"] == 9 and v["accuracy_non_tie"] == round(8 / 9, 4)


def test_the_bootstrap_is_the_same_for_anyone_holding_the_outcomes():
    outcomes = [(random.Random(i).randint(0, 1), random.Random(-i).randint(0, 1)) for i in range(150)]
    assert bootstrap_counts(outcomes, 500, 7) == bootstrap_counts(list(outcomes), 500, 7)
    assert bootstrap_counts(outcomes, 500, 7) != bootstrap_counts(outcomes, 500, 8)
    with pytest.raises(ValueError, match="40 bootstrap rounds"):
        bootstrap_counts(outcomes, 10)


def test_the_factor_is_zero_until_the_lower_bound_is_above_zero_then_grows_with_it_up_to_one():
    assert validity_factor_wad(None, 100, 60) == 0
    assert validity_factor_wad(0, 100, 60) == 0
    assert validity_factor_wad(-5, 100, 60) == 0
    assert validity_factor_wad(10, 100, 60) == WAD // 4  # fixes a quarter of the rule's 40 errors
    assert validity_factor_wad(20, 100, 60) == WAD // 2
    assert validity_factor_wad(40, 100, 60) == WAD
    assert validity_factor_wad(10, 100, 100) == 0  # a rule with no error leaves nothing to fix
    assert [validity_factor_wad(k, 100, 60) for k in range(1, 41)] == sorted(
        validity_factor_wad(k, 100, 60) for k in range(1, 41))


def test_prefers_longer_counts_only_decided_verdicts_on_pairs_of_unequal_length():
    pairs = pairs_where(4, 1.0) + [{"id": "eq", "question": "Q", "category": "c", "answer_a": "x y",
                                    "answer_b": "y x", "human": "a"}]
    verdicts = [p["human"] for p in pairs[:4]] + ["a"]
    verdicts[0] = "tie"
    assert prefers_longer(pairs, verdicts) == {"decided": 3, "longer": 3, "rate": 1.0}


class LengthyMetric:
    """A metric that falls for length: F1 grows with the log of the candidate's length, plus a little
    for the word "good" (the answer's real quality)."""

    def raw_scores(self, pairs):
        import math

        return [(f, f, f) for f in (0.1 * math.log(len(c.split())) + 0.03 * ("good" in c.split()) for c, _ in pairs)]


def test_the_length_controlled_bertscore_takes_out_what_the_length_ratio_predicts():
    from lib.evaluators import BERTScoreLengthControlled, BERTScoreRef

    rng = random.Random(3)
    items, better = [], []
    for i in range(200):
        a_len, b_len = rng.randint(3, 60), rng.randint(3, 60)
        good = rng.choice("ab")
        a = " ".join(["good" if good == "a" else "word"] + ["word"] * (a_len - 1))
        b = " ".join(["good" if good == "b" else "word"] + ["word"] * (b_len - 1))
        items.append({"id": str(i), "question": "Q", "answer_a": a, "answer_b": b, "reference": "ref"})
        better.append(good)
    raw = BERTScoreRef(metric=LengthyMetric()).compare(items)
    controlled = BERTScoreLengthControlled(metric=LengthyMetric())
    lc = controlled.compare(items)
    assert sum(v == g for v, g in zip(lc, better)) > sum(v == g for v, g in zip(raw, better)) + 40
    assert controlled.pair_details()["length_slope"] == pytest.approx(0.1, abs=0.01)
    pairs = [{**item, "human": g, "category": "c"} for item, g in zip(items, better)]
    assert prefers_longer(pairs, raw)["rate"] > 0.8 and 0.3 < prefers_longer(pairs, lc)["rate"] < 0.7
    assert log_length_ratio("a b", "a b") == 0 and log_length_ratio("a", "a b c") == -log_length_ratio("a b c", "a")
    assert get_evaluator("bertscore-lc").name == "bertscore-lc"


def test_items_with_references_lists_are_scored_against_their_mean_and_items_without_any_get_no_verdict():
    from lib.evaluators import BERTScoreRef

    class Overlap:
        def raw_scores(self, pairs):
            return [(f, f, f) for f in (len(set(c.split()) & set(r.split())) / len(set(r.split())) for c, r in pairs)]

    items = [{"id": "1", "answer_a": "red apple", "answer_b": "blue sky", "references": ["red apple", "red sky"]},
             {"id": "2", "answer_a": "x", "answer_b": "y"}]
    assert BERTScoreRef(metric=Overlap()).compare(items) == ["a", None]


# --- the qualification record and the weighting in the evidence ------------------------------------

def record(share: float = 0.85, n: int = 120):
    pairs = pairs_where(n, 0.6)
    verdicts, length = agreeing(pairs, share), Length().compare(pairs)
    outcomes = [(p["id"], int(v == p["human"]), int(b == p["human"])) for p, v, b in zip(pairs, verdicts, length)]
    return qualification_record(evaluator="judge", params={"k": "v"},
                                sets=[{"name": "s", "sha256": "0" * 64, "pairs": n, "judged": n}], outcomes=outcomes,
                                rounds=400)


def test_a_qualification_record_rebuilds_its_factor_from_its_outcomes_and_refuses_tampering():
    q = record()
    again = parse_qualification(canonical(q))
    assert again == q and int(q["figures"]["factor"]) > 0
    tampered = {**q, "figures": {**q["figures"], "factor": str(WAD)}}
    with pytest.raises(WeightingError, match="not what its outcomes give"):
        parse_qualification(canonical(tampered))
    flipped = {**q, "outcomes": [[i, 1, b] for i, _, b in q["outcomes"]]}
    with pytest.raises(WeightingError, match="not what its outcomes give"):
        parse_qualification(canonical(flipped))


def test_wa_is_the_mean_r_times_the_earned_factor_under_validated_and_the_mean_r_under_paper():
    q = record()
    factor = int(q["figures"]["factor"])
    rs = [WAD // 2, WAD // 4, 3 * WAD // 4]
    validated = weighting(rule="validated", evaluator="judge", reference_r=rs, factor=factor, qualification="bafyq",
                          reason="qualified")
    assert weighted_wa(validated) == (WAD // 2) * factor // WAD
    assert expected_wa(validated, q) == (weighted_wa(validated), [])
    paper = weighting(rule="paper", evaluator="judge", reference_r=rs, factor=0, qualification=None, reason="paper")
    assert weighted_wa(paper) == WAD // 2 and expected_wa(paper, None) == (WAD // 2, [])
    unqualified = weighting(rule="validated", evaluator="judge", reference_r=rs, factor=0, qualification=None,
                            reason="not qualified")
    assert weighted_wa(unqualified) == 0 and expected_wa(unqualified, None) == (0, [])
    claimed = {**unqualified, "factor": str(WAD)}
    assert expected_wa(claimed, None)[1] == [f"factor {WAD} is not the 0 its rule and qualification give"]
    with pytest.raises(WeightingError, match="validated, paper"):
        weighting(rule="other", evaluator="j", reference_r=rs, factor=0, qualification=None, reason="")


def test_the_evidence_record_carries_the_weighting_checked_against_its_references():
    refs = [{"model": "0x" + "11" * 32, "text": "r", "score": "5"}]
    w = weighting(rule="validated", evaluator="bertscore-ref", reference_r=[WAD // 2], factor=0, qualification=None,
                  reason="not qualified")
    args = {"interaction_id": "0x" + "01" * 32, "context_id": "0x" + "02" * 32, "context_name": "c", "prompt": "p",
            "model_id": "0x" + "03" * 32, "answer": "a", "references": refs, "sa": 5, "wa": 0,
            "metric": {"name": "bertscore", "params": {}}}
    assert interaction_evidence(**args, weighting=w)["weighting"] == w
    with pytest.raises(RecordError, match="one R per reference"):
        interaction_evidence(**args, weighting={**w, "referenceR": []})


def python_bootstrap(outcomes, rounds, seed):
    """The bootstrap as its definition states it: `random.Random(seed).choices` of the pairs, round after round."""
    rng, n = random.Random(seed), len(outcomes)
    right_sums, diff_sums = [], []
    for _ in range(rounds):
        drawn = rng.choices(range(n), k=n)
        right_sums.append(sum(outcomes[i][0] for i in drawn))
        diff_sums.append(sum(outcomes[i][0] - outcomes[i][1] for i in drawn))
    return {"n": n, "right": percentile_bounds(right_sums), "margin": percentile_bounds(diff_sums)}


@pytest.mark.parametrize("n, rounds, seed", [(1, 40, 0), (7, 41, 3), (150, 500, 0), (999, 2000, 0), (1234, 900, 12345),
                                             (20_001, 45, 2 ** 40)])
def test_the_bootstrap_draws_the_very_pairs_python_s_random_choices_draws(n, rounds, seed, monkeypatch):
    outcomes = [(random.Random(i).randint(0, 1), random.Random(-i - 1).randint(0, 1)) for i in range(n)]
    # Small chunks too, so that rounds split across chunks draw on from where the last chunk stopped.
    for chunk in (metaeval.BOOTSTRAP_CHUNK, max(1, n * 3 - 1)):
        monkeypatch.setattr(metaeval, "BOOTSTRAP_CHUNK", chunk)
        assert bootstrap_counts(outcomes, rounds, seed) == python_bootstrap(outcomes, rounds, seed)


@pytest.mark.parametrize("runs", [[(1, 1)] * 50 + [(1, 0)] * 30 + [(0, 1)] * 12 + [(0, 0)] * 8,
                                  [(0, 0)] * 3 + [(1, 0)] * 40, [(1, 1)] * 33, [(0, 1)] * 1 + [(1, 0)] * 1])
def test_outcomes_grouped_in_runs_bootstrap_as_python_s_random_choices_does(runs, monkeypatch):
    # A chunk smaller than a round too: the round is then drawn in pieces, in order.
    for chunk in (metaeval.BOOTSTRAP_CHUNK, len(runs) * 2, 7):
        monkeypatch.setattr(metaeval, "BOOTSTRAP_CHUNK", chunk)
        assert bootstrap_counts(runs, 300, 0) == python_bootstrap(runs, 300, 0)


def test_a_round_of_more_votes_than_a_chunk_draws_python_s_pairs_too():
    runs = [(1, 1)] * 30_001 + [(1, 0)] * 17_003 + [(0, 1)] * 9_999 + [(0, 0)] * 9_001  # 66,004: over a chunk
    assert len(runs) > metaeval.BOOTSTRAP_CHUNK
    assert bootstrap_counts(runs, 41, 5) == python_bootstrap(runs, 41, 5)


def test_a_draw_falls_below_a_run_s_start_exactly_when_its_position_does():
    step = 2.0 ** -53
    rng = random.Random(9)
    cases = [(1, 2), (1, 3), (2, 3), (5, 7), (1, 10**6), (999_999, 10**6), (123_457, 10**6 + 3)]
    cases += [(rng.randrange(1, n), n) for n in (rng.randrange(2, 2 ** rng.randint(2, 45)) for _ in range(2000))]
    for s, n in cases:
        t = metaeval.position_threshold(s, n)
        k = round(t / step)
        assert k * step == t  # a double random() can return
        assert math.floor(t * float(n)) >= s > math.floor((t - step) * float(n))


def test_the_rounds_fall_with_the_votes_so_a_computation_draws_a_bounded_number_of_pairs_above_a_floor():
    assert [metaeval.bootstrap_rounds(n) for n in (0, 30, 1_000, 10_000, 10_001, 20_000, 100_000, 100_001, 10**6,
                                                   10**9)] == [2000, 2000, 2000, 2000, 1999, 1000, 200, 200, 200, 200]
    ns = range(1, 300_000, 997)
    assert all(metaeval.bootstrap_rounds(a) >= metaeval.bootstrap_rounds(b) for a, b in zip(ns, ns[1:]))
    assert all(metaeval.bootstrap_rounds(n) * n <= metaeval.BOOTSTRAP_DRAWS for n in range(10_000, 100_001, 9_001))


def test_the_figures_of_votes_in_outcome_order_are_bootstrapped_once_per_counts_in_a_process(monkeypatch):
    from lib import weighting as w

    w._count_figures.cache_clear()
    calls = []
    for name in ("bootstrap_counts", "bootstrap_runs"):  # listed or counted, a bootstrap is a call
        monkeypatch.setattr(w, name, lambda *a, real=getattr(w, name): calls.append(a[1:]) or real(*a))
    counts = (50, 30, 12, 8)
    listed = [o for o, c in zip(w.OUTCOME_ORDER, counts) for _ in range(c)]
    rows = [(f"b{i:03}", e, b) for i, (e, b) in enumerate(listed)]
    record = qualification_record(evaluator="judge", params={}, outcomes=rows, rounds=300,
                                  sets=[{"name": "votes", "sha256": "0" * 64, "pairs": 100, "judged": 100}])
    parse_qualification(canonical(record))  # checked again as audit reads it: the same figures, not drawn again
    figures = w.count_figures(counts, 300, 0)
    assert figures == record["figures"] and calls == [(300, 0)]
    figures["factor"] = "tampered"  # a caller's copy: the next caller gets the figures
    assert w.count_figures(counts, 300, 0) == record["figures"]
    w.count_figures(counts, 301, 0)
    assert calls == [(300, 0), (301, 0)]  # other rounds: drawn again
    assert w._figures(listed, 300, 0) == record["figures"]  # what the rows' own bootstrap gives
    # Rows out of that order are bootstrapped as they are listed, each time.
    assert w.grouped_counts(listed[::-1]) is None and w.grouped_counts(listed) == counts
    w.outcome_figures(listed[::-1], 300, 0)
    w.outcome_figures(listed[::-1], 300, 0)
    assert len(calls) == 5
