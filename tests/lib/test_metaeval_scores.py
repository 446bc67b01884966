"""Correlation of absolute scores with human scores (lib/metaeval.py, G-Eval-Dialogue): Pearson,
Spearman and Kendall tau-b, pooled and averaged per dialogue context. Expected values are worked
out by hand in the comments."""

from __future__ import annotations

import pytest

from lib.metaeval import correlations, score_correlations

pytest.importorskip("scipy")


def test_correlations_without_ties():
    # deviations (-2,-1,0,1,2) and (-1,-2,1,0,2): sum of products 8 over sqrt(10 * 10): r = rho = 0.8;
    # of the 10 pairs only (1st, 2nd) and (3rd, 4th) are discordant: tau = (8 - 2) / 10
    got = correlations([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    assert got == pytest.approx({"pearson": 0.8, "spearman": 0.8, "kendall": 0.6})


def test_correlations_with_ties_use_average_ranks_and_tau_b():
    # ranks (1, 2.5, 2.5, 4) and (1, 4, 2.5, 2.5): rho = 2.25 / 4.5 = 0.5; raw deviations give r = 1 / 2;
    # 3 concordant, 1 discordant, one pair tied in x only, one in y only: tau_b = 2 / sqrt(5 * 5)
    got = correlations([1, 2, 2, 3], [1, 3, 2, 2])
    assert got == pytest.approx({"pearson": 0.5, "spearman": 0.5, "kendall": 0.4})


def test_a_constant_side_has_no_correlation():
    assert correlations([3, 3, 3], [1, 2, 3]) == {"pearson": None, "spearman": None, "kendall": None}
    assert correlations([1], [1]) == {"pearson": None, "spearman": None, "kendall": None}


def test_two_points_give_no_correlation_since_they_always_give_plus_or_minus_one():
    assert correlations([1, 2], [3, 5]) == {"pearson": None, "spearman": None, "kendall": None}
    assert correlations([1, 2, 3], [3, 5, 4]) == pytest.approx({"pearson": 0.5, "spearman": 0.5,
                                                                "kendall": 1 / 3})
    # a dialogue where the judge scored only two responses no longer counts as a perfect +1
    got = score_correlations([1, 2, 3, 4, 5, 1, 2, 3], [1, 2, None, None, None, 5, 4, 3], groups=list("xxxxxyyy"))
    assert got["n"] == 5 and got["per_context"]["undefined"] == {"pearson": 1, "spearman": 1, "kendall": 1}
    assert got["per_context"]["spearman"] == -1.0


def test_per_context_correlations_are_averaged_over_the_contexts_where_they_are_defined():
    human = [1, 2, 3, 3, 2, 1, 5, 5, 5]
    scores = [1, 2, 3, 1, 2, 3, 1, 2, 3]  # context x agrees, y disagrees, z has constant human scores
    got = score_correlations(human, scores, groups=list("xxxyyyzzz"))
    assert got["n"] == 9 and got["unscored"] == 0
    assert got["per_context"]["pearson"] == 0.0 and got["per_context"]["kendall"] == 0.0
    assert got["per_context"]["contexts"] == 3
    assert got["per_context"]["undefined"] == {"pearson": 1, "spearman": 1, "kendall": 1}


def test_items_an_evaluator_could_not_score_are_left_out_and_counted():
    got = score_correlations([1, 2, 3, 4, 5, 9], [2, 1, 4, 3, 5, None])
    assert got["unscored"] == 1 and got["n"] == 5
    assert got["pooled"] == {"pearson": 0.8, "spearman": 0.8, "kendall": 0.6}
    assert "per_context" not in got
