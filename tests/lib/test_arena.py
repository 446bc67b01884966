"""The arena's statistics (lib/arena.py) against independent computations on the votes themselves:
scikit-learn's logistic regression on one row per vote, written the way LMSYS writes it."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from lib.arena import (
    ANCHOR, NoFiniteScores, Vote, Votes, arena_bench, board, bt_bootstrap, bt_scores, markdown_density,
    style_board, style_scores, tally,
)

LN10 = math.log(10)


def synthetic(n_models=5, n_votes=2000, seed=1, length_effect=0.0, strength_sd=0.6, model_lengths=None):
    """Votes from known strengths (natural log-odds), 15% ties and 5% both bad, answer lengths
    around each model's own mean (`model_lengths`) and Markdown densities at random."""
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, strength_sd, n_models)
    a = rng.integers(0, n_models, n_votes)
    b = (a + rng.integers(1, n_models, n_votes)) % n_models
    means = np.full(n_models, 400.0) if model_lengths is None else np.asarray(model_lengths, dtype=float)
    len_a, len_b = means[a] * rng.lognormal(0, 0.5, n_votes), means[b] * rng.lognormal(0, 0.5, n_votes)
    md_a, md_b = rng.gamma(2, 3, n_votes), rng.gamma(2, 3, n_votes)
    z = (len_a - len_b) / (len_a + len_b)
    p = 1 / (1 + np.exp(-(strength[a] - strength[b] + length_effect * z / np.sqrt((z**2).mean()))))
    u = rng.random(n_votes)
    outcome = np.where(u < 0.15, "tie", np.where(u < 0.2, "bad", np.where(rng.random(n_votes) < p, "a", "b")))
    names = [f"m{k}" for k in range(n_models)]
    return Votes.from_columns([names[k] for k in a], [names[k] for k in b], outcome, len_a, len_b, md_a, md_b)


def lmsys_rows(votes: Votes, style=None, prior_games=0.0):
    """One row per vote as LMSYS writes it (+ln 10 for A, -ln 10 for B; a win weighs 2, a tie is two
    rows of weight 1, one won by each side), the first model's column left out (its strength is the
    reference), plus `style` columns and, with a prior, each model's virtual games against strength 0."""
    n = len(votes.models)
    x = np.zeros((len(votes), n))
    x[np.arange(len(votes)), votes.a] = LN10
    x[np.arange(len(votes)), votes.b] = -LN10
    if style is not None:
        x = np.hstack([x, style])
    decided = votes.outcome <= 1
    rows = [x[decided], x[~decided], x[~decided]]
    ys = [(votes.outcome[decided] == 0).astype(float), np.ones((~decided).sum()), np.zeros((~decided).sum())]
    weights = [np.full(decided.sum(), 2.0), np.ones((~decided).sum()), np.ones((~decided).sum())]
    if prior_games:
        virtual = np.hstack([LN10 * np.eye(n), np.zeros((n, x.shape[1] - n))])
        rows += [virtual, virtual]
        ys += [np.ones(n), np.zeros(n)]
        weights += [np.full(n, prior_games), np.full(n, prior_games)]
    x, y, w = np.vstack(rows), np.concatenate(ys), np.concatenate(weights)
    return (x if prior_games else x[:, 1:]), y, w


def sklearn_fit(votes, style=None, prior_games=0.0):
    """(Elo scores with mean ANCHOR, style coefficients in natural log-odds) from scikit-learn."""
    x, y, w = lmsys_rows(votes, style, prior_games)
    fit = LogisticRegression(fit_intercept=False, C=np.inf, solver="newton-cholesky", tol=1e-14, max_iter=1000)
    coef = fit.fit(x, y, sample_weight=w).coef_[0]
    n = len(votes.models)
    log10_strength = coef[:n] if prior_games else np.concatenate([[0.0], coef[: n - 1]])
    elo = 400 * log10_strength
    return ANCHOR + elo - elo.mean(), coef[n if prior_games else n - 1:]


def votes_of_tally(t) -> Votes:
    """The votes a tally counts, one row each (A the lower index)."""
    a, b, outcome = [], [], []
    for i, j, counts in zip(t.i, t.j, t.counts):
        for code, count in enumerate(counts):
            a += [i] * count
            b += [j] * count
            outcome += [code] * count
    return Votes(t.models, np.array(a), np.array(b), np.array(outcome), np.zeros((len(a), 2)))


def test_bradley_terry_scores_equal_a_logistic_regression_on_the_votes_to_1e_6():
    votes = synthetic()
    ours = bt_scores(tally(votes), prior_games=0)
    reference, _ = sklearn_fit(votes)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6)
    assert ours.mean() == pytest.approx(ANCHOR)
    assert np.ptp(ours) > 100  # the models do differ


def test_the_prior_is_each_model_playing_virtual_games_at_strength_zero():
    votes = synthetic(n_models=6, n_votes=40, seed=3)
    ours = bt_scores(tally(votes), prior_games=3)
    reference, _ = sklearn_fit(votes, prior_games=3)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6)
    assert not np.allclose(ours, bt_scores(tally(votes), prior_games=0), atol=1)  # with 40 votes it matters


def test_on_a_million_votes_one_virtual_game_moves_no_score_visibly():
    votes = synthetic(n_models=20, n_votes=200_000, seed=4)
    t = tally(votes)
    assert np.abs(bt_scores(t, prior_games=1) - bt_scores(t, prior_games=0)).max() < 0.05


def test_each_bootstrap_refit_equals_a_logistic_regression_on_its_resampled_votes():
    votes = synthetic(n_models=4, n_votes=600, seed=5)
    t = tally(votes)
    samples = bt_bootstrap(t, 4, seed=11, prior_games=0)
    rng = np.random.default_rng(11)
    for round_ in samples:
        resample = t.resample(rng)
        assert resample.counts.sum() == len(votes)
        assert not resample.counts[t.counts == 0].any()  # only votes that were cast are drawn
        np.testing.assert_allclose(round_, sklearn_fit(votes_of_tally(resample))[0], rtol=0, atol=1e-6)
    assert len({tuple(r) for r in samples.round(6)}) == 4  # the rounds do differ


def test_intervals_hold_the_score_narrow_with_more_votes_and_repeat_under_a_seed():
    small, large = board(synthetic(n_votes=2000), seed=7), board(synthetic(n_votes=8000), seed=7)
    for line in small.standings + large.standings:
        assert line.ci_low < line.elo < line.ci_high
    width = {b: np.mean([s.ci_high - s.ci_low for s in b.standings]) for b in (small, large)}
    assert width[large] < 0.7 * width[small]  # about half: 1 / sqrt(4)
    assert board(synthetic(n_votes=2000), seed=7) == small
    assert board(synthetic(n_votes=2000), seed=8) != small


def hand_made():
    """x beats y 40 to 10 and z 40 to 10; y and z draw 20 to 20 with 8 ties and 2 both bad; w met only z."""
    return ([Vote("x", "y", "a")] * 40 + [Vote("y", "x", "a")] * 10 + [Vote("z", "x", "b")] * 40
            + [Vote("x", "z", "b")] * 10 + [Vote("y", "z", "a")] * 20 + [Vote("z", "y", "a")] * 20
            + [Vote("y", "z", "tie")] * 8 + [Vote("z", "y", "bad")] * 2 + [Vote("w", "z", "b")] * 5)


def test_a_board_counts_battles_wins_ties_and_losses_of_a_hand_made_example():
    result = board(hand_made(), seed=1)
    assert [s.model for s in result.standings][0] == "x"
    x, y, z, w = (result.standing(m) for m in "xyzw")
    assert (x.battles, x.wins, x.ties, x.losses, x.win_rate) == (100, 80, 0, 20, 0.8)
    assert (y.battles, y.wins, y.ties, y.losses, y.win_rate) == (100, 30, 10, 60, 0.35)
    assert (z.battles, z.wins, z.ties, z.losses) == (105, 35, 10, 60)
    assert z.win_rate == pytest.approx(40 / 105)
    assert (w.battles, w.wins, w.ties, w.losses, w.win_rate) == (5, 0, 0, 5, 0.0)


def test_the_win_rate_matrix_reads_row_against_column_and_is_empty_where_they_never_met():
    result = board(hand_made(), bootstrap=0)
    order = [s.model for s in result.standings]
    rate = {(r, c): result.win_rates[i][k] for i, r in enumerate(order) for k, c in enumerate(order)}
    assert rate["x", "y"] == 0.8 and rate["y", "x"] == pytest.approx(0.2)
    assert rate["y", "z"] == rate["z", "y"] == 0.5  # 20 wins each, 10 ties halved
    assert rate["z", "w"] == 1.0
    assert rate["x", "w"] is None and rate["w", "y"] is None and rate["x", "x"] is None


def test_a_model_is_outranked_only_by_models_better_beyond_both_intervals():
    result = board(hand_made(), bootstrap=200, seed=2)
    x, y, z, w = (result.standing(m) for m in "xyzw")
    assert x.ci_low > max(y.ci_high, z.ci_high)
    assert y.ci_low < z.ci_high and z.ci_low < y.ci_high  # y and z overlap
    assert (x.rank, y.rank, z.rank) == (1, 2, 2)
    assert w.rank == 1 + sum(other.ci_low > w.ci_high for other in (x, y, z))


def test_without_a_bootstrap_there_are_no_intervals_and_the_rank_follows_the_scores():
    result = board(hand_made(), bootstrap=0)
    assert all(s.ci_low is None and s.ci_high is None for s in result.standings)
    assert [s.rank for s in result.standings] == [1, 2, 3, 4]


def test_a_model_without_battles_is_not_on_the_board():
    votes = Votes(("a", "b", "ghost"), np.array([0, 1]), np.array([1, 0]), np.array([0, 2]), np.zeros((2, 2)))
    result = board(votes)
    assert [s.model for s in result.standings] == ["a", "b"]
    assert len(result.win_rates) == 2 and result.groups == (("a", "b"),)


def finite(result):
    return all(math.isfinite(v) for s in result.standings
               for v in (s.elo, s.ci_low, s.ci_high, s.win_rate) if v is not None)


def test_models_that_never_met_form_groups_each_centred_on_the_anchor():
    votes = [Vote("a", "b", "a"), Vote("a", "b", "b"), Vote("a", "b", "a"), Vote("c", "d", "b"), Vote("d", "c", "tie")]
    for prior, rounds in ((1.0, 20), (0.0, 0)):  # without a prior, a resample may lose a's loss
        result = board(votes, bootstrap=rounds, prior_games=prior)
        assert sorted(result.groups) == [("a", "b"), ("d", "c")]
        a, b, c, d = (result.standing(m).elo for m in "abcd")
        assert (a + b) / 2 == pytest.approx(ANCHOR) and (c + d) / 2 == pytest.approx(ANCHOR)
        assert a > b and d > c and finite(result)


def test_all_ties_put_every_model_at_the_anchor():
    votes = [Vote("a", "b", "tie"), Vote("b", "c", "bad"), Vote("c", "a", "tie")] * 3
    for prior in (1.0, 0.0):
        result = board(votes, bootstrap=10, prior_games=prior)
        assert all(s.elo == pytest.approx(ANCHOR) and s.ci_low == pytest.approx(ANCHOR) for s in result.standings)
        assert {s.rank for s in result.standings} == {1} and {s.win_rate for s in result.standings} == {0.5}


def test_one_vote_gives_finite_scores_with_the_prior_and_a_clear_refusal_without():
    result = board([Vote("a", "b", "a")], bootstrap=10)
    assert result.standing("a").elo > ANCHOR > result.standing("b").elo and finite(result)
    with pytest.raises(NoFiniteScores, match="never lost, or never won"):
        board([Vote("a", "b", "a")], prior_games=0)


def test_no_votes_make_an_empty_board():
    assert board([]).standings == () and style_board([]).standings == ()


def test_a_vote_needs_two_models_and_a_known_outcome():
    with pytest.raises(ValueError, match="two different models"):
        Votes.of([Vote("a", "a", "a")])
    with pytest.raises(ValueError, match="an outcome is one of"):
        Votes.of([Vote("a", "b", "draw")])
    with pytest.raises(ValueError, match="negative"):
        Votes.of([Vote("a", "b", "a", len_a=-1)])


def test_style_control_sees_through_models_that_win_by_writing_more():
    # Equal models; who wins depends on the answers' lengths only, and m3 writes 4 times as much as m0.
    votes = synthetic(n_models=4, n_votes=6000, seed=9, strength_sd=0.0, length_effect=1.0,
                      model_lengths=[100, 200, 300, 400])
    plain = board(votes, bootstrap=0)
    styled = style_board(votes, bootstrap=20, seed=3)
    assert np.ptp([s.elo for s in plain.standings]) > 60
    assert np.ptp([s.elo for s in styled.standings]) < 20
    length, markdown = styled.coefficients
    assert length.feature == "length" and length.value > 0.7 and length.ci_low > 0.5
    assert markdown.ci_low < 0 < markdown.ci_high  # Markdown was drawn at random


def test_the_style_fit_equals_a_logistic_regression_on_the_same_design_to_1e_6():
    votes = synthetic(n_votes=3000, seed=10, length_effect=0.5)
    elo, beta = style_scores(votes, prior_games=0)
    z = votes.style / np.sqrt((votes.style**2).mean(0))
    reference_elo, reference_beta = sklearn_fit(votes, style=z)
    np.testing.assert_allclose(elo, reference_elo, rtol=0, atol=1e-6)
    np.testing.assert_allclose(beta, reference_beta, rtol=0, atol=1e-8)


def test_the_style_fit_with_a_prior_and_resampled_weights_equals_sklearn_on_the_repeated_votes():
    votes = synthetic(n_votes=500, seed=12, length_effect=0.5)
    weights = np.random.default_rng(0).multinomial(len(votes), np.full(len(votes), 1 / len(votes)))
    elo, beta = style_scores(votes, weights=weights, prior_games=2)
    keep = np.repeat(np.arange(len(votes)), weights)
    z = votes.style / np.sqrt((votes.style**2).mean(0))  # scaled on the votes given, as in the bootstrap
    repeated = Votes(votes.models, votes.a[keep], votes.b[keep], votes.outcome[keep], votes.style[keep])
    reference_elo, reference_beta = sklearn_fit(repeated, style=z[keep], prior_games=2)
    np.testing.assert_allclose(elo, reference_elo, rtol=0, atol=1e-6)
    np.testing.assert_allclose(beta, reference_beta, rtol=0, atol=1e-8)


def test_without_style_data_there_are_no_coefficients_and_the_scores_are_plain_bradley_terry():
    votes = [Vote("a", "b", "a"), Vote("b", "c", "b"), Vote("c", "a", "tie"), Vote("a", "c", "b")] * 5
    styled, plain = style_board(votes, bootstrap=5), board(votes, bootstrap=0)
    assert [(c.feature, c.value) for c in styled.coefficients] == [("length", None), ("markdown", None)]
    for s in styled.standings:
        assert s.elo == pytest.approx(plain.standing(s.model).elo, abs=1e-6)


vote_lists = st.lists(
    st.tuples(st.sampled_from("pqrs"), st.sampled_from("pqrs"), st.sampled_from(["a", "b", "tie", "bad"]),
              st.integers(1, 500), st.integers(1, 500), st.booleans()).filter(lambda v: v[0] != v[1]),
    min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(vote_lists)
def test_swapping_a_and_b_with_the_outcome_flipped_changes_no_score(rows):
    flip = {"a": "b", "b": "a", "tie": "tie", "bad": "bad"}
    as_cast = [Vote(a, b, o, len_a=la, len_b=lb) for a, b, o, la, lb, _ in rows]
    swapped = [Vote(b, a, flip[o], len_a=lb, len_b=la) if s else Vote(a, b, o, len_a=la, len_b=lb)
               for a, b, o, la, lb, s in rows]
    one, other = Votes.of(as_cast), Votes.of(swapped)
    np.testing.assert_allclose(bt_scores(tally(one)), bt_scores(tally(other)), rtol=0, atol=1e-9)
    try:
        expected = style_scores(one)
    except NoFiniteScores:  # the lengths separate the winners perfectly: so they do once swapped
        with pytest.raises(NoFiniteScores):
            style_scores(other)
        return
    for ours, theirs in zip(style_scores(other), expected):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-7)


def test_markdown_density_counts_headers_list_items_bold_and_code_blocks_per_1000_characters():
    text = ("# Title\n\nSome **bold** words.\n\n- one\n- two\n1. three\n\n"
            "```python\n# a comment, not a header\n- nor an item\n```\n")
    assert markdown_density(text) == pytest.approx(1000 * 6 / len(text))  # 1 header, 1 bold, 3 items, 1 block
    assert markdown_density("Plain prose, no * list here and #hashtag.") == 0.0
    assert markdown_density("") == 0.0


def test_the_bench_reports_the_time_of_each_stage():
    timings = arena_bench(n_models=6, n_votes=3000, bootstrap=3, style_bootstrap_rounds=2)
    assert {"tally_s", "fit_s", "bootstrap_3_s", "style_fit_s", "style_bootstrap_2_s"} <= timings.keys()
    assert all(v >= 0 for k, v in timings.items() if k.endswith("_s"))
