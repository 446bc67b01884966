"""Ratings from pairwise outcomes: Elo and Bradley–Terry (pure functions, no Django).

An outcome is one comparison of two players (models) `a` and `b` with the score of `a`:
1 a won, 0 a lost, 0.5 a tie. Hai Ye's self-evaluation ranks models by Elo over such win/tie/loss records
(its outputs are centred near 1000) without stating the update constants, so `elo` uses the
usual K = 32, initial rating 1000 and a 400-point logistic scale.

- `elo` is sequential: each outcome moves both ratings, so the result depends on the order of
  the outcomes (the same games in another order give other ratings).
- `bradley_terry` fits one strength per player to all outcomes at once, so it ignores their
  order; it is what the boards show, since debates are resolved in no meaningful order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

WIN, TIE, LOSS = 1.0, 0.5, 0.0
_SCORES = (WIN, TIE, LOSS)


@dataclass(frozen=True)
class Outcome:
    """One comparison: `score` is a's result against b (1 win, 0.5 tie, 0 loss)."""

    a: str
    b: str
    score: float

    def __post_init__(self):
        if self.a == self.b:
            raise ValueError(f"an outcome needs two different players, got {self.a!r} twice")
        if isinstance(self.score, bool) or self.score not in _SCORES:
            raise ValueError(f"score must be 1 (a won), 0.5 (tie) or 0 (a lost), got {self.score!r}")


@dataclass
class Record:
    wins: int = 0
    ties: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.ties + self.losses


def records(outcomes: Iterable[Outcome]) -> dict[str, Record]:
    """Each player's wins, ties and losses, in order of first appearance."""
    table: dict[str, Record] = {}
    for o in outcomes:
        ra, rb = table.setdefault(o.a, Record()), table.setdefault(o.b, Record())
        if o.score == WIN:
            ra.wins += 1
            rb.losses += 1
        elif o.score == LOSS:
            ra.losses += 1
            rb.wins += 1
        else:
            ra.ties += 1
            rb.ties += 1
    return table


def _players(outcomes: list[Outcome], players: Iterable[str]) -> list[str]:
    seen = dict.fromkeys(players)
    for o in outcomes:
        seen.setdefault(o.a)
        seen.setdefault(o.b)
    return list(seen)


def expected_score(rating_a: float, rating_b: float, scale: float = 400.0) -> float:
    """Elo's expected score of a against b: 1 / (1 + 10^((R_b - R_a) / scale))."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / scale))


def elo(
    outcomes: Iterable[Outcome], *, k: float = 32.0, initial: float = 1000.0, scale: float = 400.0,
    players: Iterable[str] = (),
) -> dict[str, float]:
    """Sequential Elo ratings: every player starts at `initial`, and each outcome, in the order
    given, moves a by k * (score - E_a) and b by the opposite amount, with E_a from
    `expected_score`. The order matters: the same outcomes in another order give other ratings.
    Players named in `players` but in no outcome keep `initial`."""
    outcomes = list(outcomes)
    ratings = dict.fromkeys(_players(outcomes, players), float(initial))
    for o in outcomes:
        delta = k * (o.score - expected_score(ratings[o.a], ratings[o.b], scale))
        ratings[o.a] += delta
        ratings[o.b] -= delta
    return ratings


def bradley_terry(
    outcomes: Iterable[Outcome], *, players: Iterable[str] = (), prior_games: float = 1.0,
    scale: float = 400.0, anchor: float = 1000.0, tol: float = 1e-10, max_iter: int = 10_000,
) -> dict[str, float]:
    """Maximum a-posteriori Bradley–Terry ratings on the Elo scale; independent of the order of
    the outcomes.

    Model: player i has strength p_i > 0 and beats j with probability p_i / (p_i + p_j). A tie
    counts as half a win for each side. Let w_i be i's wins (ties halved) and n_ij the games
    between i and j. Every player also plays `prior_games` = c virtual games against a virtual
    opponent of fixed strength 1, winning half and losing half; this is the prior. The
    estimate maximises

        sum_i [ w_i log p_i - sum_{j>i} n_ij log(p_i + p_j) ]
          + sum_i [ (c/2) log p_i - c log(p_i + 1) ],

    found by Hunter's (2004) MM iteration

        p_i <- (w_i + c/2) / ( sum_j n_ij / (p_i + p_j) + c / (p_i + 1) ),

    from p = 1 until no p_i moves by a relative `tol` (or `max_iter` sweeps). The prior keeps
    every estimate finite (an undefeated player is not infinitely strong) and fixes the scale,
    since the virtual opponent's strength is 1.

    Reported rating: anchor + scale * log10(p_i), i.e. relative to the virtual opponent, which
    stands at the anchor. So a player with no games (named only in `players`) sits exactly at
    the anchor, a player's rating does not move when unconnected players are added, and a
    difference of `scale` points means 10:1 odds, as in Elo. (For two players with mirror-image
    records this is also anchor + scale * log10(p_i / geometric mean).)
    """
    if prior_games <= 0:
        raise ValueError("prior_games must be positive, or undefeated players have no finite rating")
    outcomes = list(outcomes)
    names = _players(outcomes, players)
    index = {name: i for i, name in enumerate(names)}
    wins = [prior_games / 2.0] * len(names)
    games: list[dict[int, float]] = [{} for _ in names]
    for o in outcomes:
        i, j = index[o.a], index[o.b]
        wins[i] += o.score
        wins[j] += 1.0 - o.score
        games[i][j] = games[i].get(j, 0.0) + 1.0
        games[j][i] = games[j].get(i, 0.0) + 1.0

    p = [1.0] * len(names)
    for _ in range(max_iter):
        new = [
            wins[i] / (sum(n / (p[i] + p[j]) for j, n in games[i].items()) + prior_games / (p[i] + 1.0))
            for i in range(len(names))
        ]
        moved = max((abs(a / b - 1.0) for a, b in zip(new, p)), default=0.0)
        p = new
        if moved < tol:
            break
    return {name: anchor + scale * math.log10(p[i]) for name, i in index.items()}
