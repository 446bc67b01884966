import math
import random

import pytest

from lib.pairwise import Outcome, Record, bradley_terry, elo, expected_score, records


def beats(a, b):
    return Outcome(a, b, 1)


def tie(a, b):
    return Outcome(a, b, 0.5)


def test_an_outcome_needs_two_different_players():
    with pytest.raises(ValueError, match="two different players"):
        Outcome("gpt", "gpt", 1)


@pytest.mark.parametrize("score", [2, -1, 0.25, True, None])
def test_an_outcome_score_is_win_tie_or_loss(score):
    with pytest.raises(ValueError, match="score must be"):
        Outcome("a", "b", score)


def test_records_count_wins_ties_and_losses_from_both_sides():
    table = records([beats("a", "b"), tie("b", "a"), Outcome("c", "a", 0)])
    assert table == {"a": Record(wins=2, ties=1), "b": Record(ties=1, losses=1), "c": Record(losses=1)}
    assert table["a"].games == 3


def test_elo_single_game_between_equals_moves_k_over_two():
    assert elo([beats("a", "b")]) == {"a": 1016.0, "b": 984.0}
    assert elo([tie("a", "b")]) == {"a": 1000.0, "b": 1000.0}


def test_elo_expected_score_is_ten_to_one_at_400_points():
    assert expected_score(1400, 1000) == pytest.approx(10 / 11)


def test_elo_depends_on_the_order_of_outcomes():
    games = [beats("a", "b"), beats("b", "c"), beats("c", "a"), beats("a", "b")]
    assert elo(games) != pytest.approx(elo(list(reversed(games))))


def test_elo_keeps_named_players_without_games_at_the_initial_rating():
    assert elo([beats("a", "b")], players=["z"], initial=1500)["z"] == 1500


def test_bradley_terry_two_players_match_the_closed_form_of_the_map_estimate():
    # A wins all n = 5 games, prior c = 6. Stationarity for A, with p_B = 1/p_A = 1/x by symmetry:
    # 5 + c/2 = n x^2 / (1 + x^2) + c x / (1 + x), solved by x = 2 (4 + 4 = 8).
    ratings = bradley_terry([beats("a", "b")] * 5, prior_games=6)
    assert ratings["a"] == pytest.approx(1000 + 400 * math.log10(2), abs=1e-6)
    assert ratings["b"] == pytest.approx(1000 - 400 * math.log10(2), abs=1e-6)


def test_bradley_terry_satisfies_the_map_stationarity_equations():
    games = [beats("a", "b"), beats("a", "b"), tie("b", "c"), beats("c", "a"), beats("d", "c")]
    c = 1.0
    ratings = bradley_terry(games, prior_games=c)
    p = {name: 10 ** ((r - 1000) / 400) for name, r in ratings.items()}
    for name, rec in records(games).items():
        expected = sum(
            (p[name] / (p[g.a] + p[g.b])) for g in games if name in (g.a, g.b)
        ) + c * p[name] / (p[name] + 1)
        assert rec.wins + rec.ties / 2 + c / 2 == pytest.approx(expected, abs=1e-6)


def test_bradley_terry_ignores_the_order_of_outcomes():
    games = [beats("a", "b"), beats("b", "c"), beats("c", "a"), beats("a", "b"), tie("c", "b")]
    forward = bradley_terry(games)
    assert bradley_terry(list(reversed(games))) == pytest.approx(forward)
    assert bradley_terry(games[2:] + games[:2]) == pytest.approx(forward)


def test_bradley_terry_counts_a_tie_as_half_a_win_each():
    assert bradley_terry([tie("a", "b"), tie("a", "b")]) == pytest.approx(
        bradley_terry([beats("a", "b"), beats("b", "a")])
    )
    assert bradley_terry([tie("a", "b")]) == pytest.approx({"a": 1000, "b": 1000})


def test_bradley_terry_keeps_an_undefeated_player_finite():
    ratings = bradley_terry([beats("a", "b")] * 50)
    assert math.isfinite(ratings["a"]) and ratings["a"] > ratings["b"]


def test_bradley_terry_puts_unconnected_players_at_the_anchor_without_moving_others():
    games = [beats("a", "b"), beats("a", "c")]
    alone = bradley_terry(games)
    with_z = bradley_terry(games, players=["z"], anchor=1000)
    assert with_z["z"] == pytest.approx(1000)
    assert {k: v for k, v in with_z.items() if k != "z"} == pytest.approx(alone)


def test_bradley_terry_needs_a_positive_prior():
    with pytest.raises(ValueError, match="prior_games"):
        bradley_terry([beats("a", "b")], prior_games=0)


def test_stronger_players_rank_higher_in_a_simulated_round_robin():
    rng = random.Random(2024)
    strength = {"weak": -1.0, "middle": 0.0, "strong": 1.0}  # natural-log odds
    games = []
    for _ in range(60):
        for a in strength:
            for b in strength:
                if a < b:
                    p_a = 1 / (1 + math.exp(strength[b] - strength[a]))
                    games.append(Outcome(a, b, 1 if rng.random() < p_a else 0))
    for ratings in (bradley_terry(games), elo(games, k=16)):
        assert ratings["strong"] > ratings["middle"] > ratings["weak"]
