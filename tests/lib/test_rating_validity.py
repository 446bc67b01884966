"""People's ratings against the automatic score (lib/weighted.py `rating_validity`): Spearman's rank
correlation of Sa with Sh over the answers that have both, a seeded bootstrap interval and the answer's
length on the same answers. The ranks of each resample come from how many times each answer was drawn;
they must be those of the resampled answers themselves, ties included."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

from lib import weighted
from lib.weighted import MIN_HUMAN, rating_validity


def answers(n: int, seed: int = 1, noise: float = 0.3) -> list[tuple[str, int, int, int]]:
    """n rated answers: Sh follows Sa with noise, on the questionnaire's coarse scale (many ties), and
    the longer answers are rated a little lower."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        sa = rng.random()
        sh = round(4 * min(1.0, max(0.0, sa + rng.gauss(0, noise)))) / 4
        out.append((f"0x{k:064x}", int(sa * 10**18), int(sh * 10**18), int(200 * (1.2 - sh) + rng.randrange(50))))
    return out


def test_each_resample_gets_the_rank_correlation_of_the_resampled_answers_themselves():
    rows = sorted(answers(60))
    sa = np.array([r[1] for r in rows], dtype=np.int64)
    sh = np.array([r[2] for r in rows], dtype=np.int64)
    rng = np.random.default_rng(3)
    weights = np.array([np.bincount(rng.integers(0, 60, 60), minlength=60) for _ in range(5)], dtype=float)
    found = weighted._spearman(weights, weighted._rank_groups(sa), weighted._rank_groups(sh))
    for w, rho in zip(weights, found):
        counts = w.astype(int)
        assert rho == pytest.approx(stats.spearmanr(np.repeat(sa, counts), np.repeat(sh, counts))[0], abs=1e-12)


def test_the_figures_are_spearman_with_an_interval_and_the_length_beside_it_whatever_the_order():
    rows = answers(80)
    r = rating_validity(rows)
    ordered = sorted(rows)
    assert r["n"] == 80 and r["enough"]
    assert r["spearman"] == round(stats.spearmanr([x[1] for x in ordered], [x[2] for x in ordered])[0], 4)
    assert r["length_spearman"] == round(stats.spearmanr([x[3] for x in ordered], [x[2] for x in ordered])[0], 4)
    assert r["spearman"] > 0.6 and r["length_spearman"] < -0.6
    assert r["spearman_ci_low"] < r["spearman"] < r["spearman_ci_high"] <= 1
    assert rating_validity(list(reversed(rows))) == r  # taken in interaction id order: the same figures
    assert rating_validity(rows, seed=1) != r  # the interval is the seed's


def test_too_few_answers_or_a_constant_side_give_no_figure_and_enough_waits_for_min_human():
    assert rating_validity([]) == {"n": 0, "enough": False, "spearman": None, "spearman_ci_low": None,
                                   "spearman_ci_high": None, "length_spearman": None}
    assert rating_validity(answers(2))["spearman"] is None
    few = rating_validity(answers(MIN_HUMAN - 1))
    assert not few["enough"] and few["spearman"] is not None  # measured, but too little to speak from
    same = [(iid, sa, 5 * 10**17, length) for iid, sa, _, length in answers(40)]
    assert rating_validity(same)["spearman"] is None and rating_validity(same)["spearman_ci_low"] is None


def test_the_resamples_drawn_in_chunks_give_the_figures_of_one_draw(monkeypatch):
    rows = answers(500)
    monkeypatch.setattr(weighted, "RATING_CHUNK", 500 * weighted.RATING_ROUNDS)
    whole = rating_validity(rows)
    monkeypatch.setattr(weighted, "RATING_CHUNK", 500 * 7)  # 7 rounds at a time, the last chunk shorter
    assert rating_validity(rows) == whole
