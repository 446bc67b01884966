"""A board's signals weighed by how well each agrees with people in its context, and the figures behind
the weights.

The site measures the automatic score against the human signal it has in a context: the arena's counted
votes between two answers to one prompt (A or B better). On each vote where both answers have an
automatic score and a length, the score agrees when the voted answer has the higher score, and "the
longer answer wins" when it is the longer one. The figures and the weight are those of a qualification
record listing the votes (lib.weighting.count_figures: the paired bootstrap of lib.metaeval, seeded, over
lib.metaeval.bootstrap_rounds(n) rounds), with the votes in OUTCOME_ORDER: then only the four counts of
(score right, length rule right) matter, and the weight a board shows is the factor the oracle pins for
the same votes of a context (apps/annotate/vote_qualification.py), which `chain audit` rebuilds from the
record. The rounds fall from 2,000 above 10,000 votes, so that a computation draws at most 20 million
pairs until the floor of 200 rounds (100,000 votes), and each distinct four counts are bootstrapped once
per process.

People's ratings are the other human signal: over the answers that have both a rating (Sh) and an
automatic score (Sa), Spearman's rank correlation of Sa with Sh, with a seeded bootstrap interval, next
to that of the answer's length (`rating_validity`). Each resample is drawn as how many times each
answer is drawn, and the ranks of the drawn answers follow from those counts in one pass over the
answers sorted once, so a resample costs a few vector operations instead of a sort.

The weighted score of a model (this project's definition):

- People's ratings (Rh) and people's votes (the arena) are the reference: weight 1 each.
- The automatic score's part (Ra) weighs what it has shown here: `lib.metaeval.validity_factor_wad` of
  its margin over the length rule on the board's votes (0 while the lower end of that paired 95% margin
  is not above 0, then the share of the rule's errors it is shown to fix), and 0 below MIN_HUMAN votes.
- Each signal on one scale, [0, 1]: Rh and Ra as they are; the arena Elo as the chance to win a vote
  against a model of average strength on the board (1000): 1 / (1 + 10^((1000 - Elo) / 400)).
- score = sum(weight * value) / sum(weight) over the signals the model has; a model needs at least one
  signal from people (rated answers enough for an R band, or a counted vote): without one it has no
  weighted score, whatever its automatic score.
- Its band: the same weighted mean of each signal's interval ends: the arena's 95% interval, and for Rh
  the band of R (R moves with the same ratings) moved to Rh; Ra is a point.
- Rank: 1 + the models whose whole band lies above its own, as the board ranks R.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .metaeval import BOOTSTRAP_SEED, bootstrap_rounds, percentile_bounds
from .weighting import OUTCOME_ORDER, count_figures

WAD = 10**18
MIN_HUMAN = 30  # votes a board needs before the automatic score's agreement with them is said
ARENA_CENTRE = 1000.0  # the arena's Elo scale: the models linked by battles average 1000
HUMAN_WEIGHT = 1.0


@dataclass(frozen=True)
class VoteCounts:
    """The decided votes of a board, by (automatic score right, longer answer right)."""

    both: int = 0  # both right
    score_only: int = 0
    length_only: int = 0
    neither: int = 0
    votes: int = 0  # every counted vote that preferred one answer
    unscored: int = 0  # of them, votes with an answer lacking an automatic score or a known length

    @property
    def n(self) -> int:
        return self.both + self.score_only + self.length_only + self.neither

    @classmethod
    def of(cls, outcomes: Iterable[tuple[int, int]], votes: int, unscored: int) -> "VoteCounts":
        counts = {(1, 1): 0, (1, 0): 0, (0, 1): 0, (0, 0): 0}
        for outcome in outcomes:
            counts[outcome] += 1
        return cls(counts[(1, 1)], counts[(1, 0)], counts[(0, 1)], counts[(0, 0)], votes, unscored)

    def grouped(self) -> tuple[int, int, int, int]:
        """How many decided votes of each outcome, in OUTCOME_ORDER."""
        return self.both, self.score_only, self.length_only, self.neither


def ordered_votes(rows: Iterable[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """(battle id, score right, length rule right) rows in OUTCOME_ORDER, each group by battle id."""
    return sorted(rows, key=lambda r: (OUTCOME_ORDER.index((r[1], r[2])), r[0]))


def prefer(x, y) -> int:
    """1: the first is preferred, 2: the second, 0: neither."""
    return 1 if x > y else 2 if y > x else 0


def vote_outcome(outcome: int, score_a, score_b, length_a: int, length_b: int) -> tuple[int, int]:
    """(score right, length rule right) on one vote (outcome 1: A better, 2: B better); a tie is wrong."""
    return int(prefer(score_a, score_b) == outcome), int(prefer(length_a, length_b) == outcome)


def _share(count, n: int):
    return None if count is None or not n else round(count / n, 4)


def vote_validity(counts: VoteCounts, *, seed: int = BOOTSTRAP_SEED) -> dict:
    """The automatic score against the votes, next to the length rule on the same votes: accuracy with its
    95% interval, the rule's accuracy, the paired margin with its interval, and the weight earned. Below
    MIN_HUMAN votes `enough` is false and every figure but the counts is None: there is not enough human
    signal to say anything, and nothing is said in its place. The interval's rounds are those of the
    votes' qualification record, lib.metaeval.bootstrap_rounds of the decided votes, and no other: the
    board's weight is the record's factor only with the same rounds."""
    n = counts.n
    right = counts.both + counts.score_only
    base = counts.both + counts.length_only
    out = {"votes": counts.votes, "votes_without_scores": counts.unscored, "pairs_non_tie": n,
           "enough": n >= MIN_HUMAN, "accuracy_non_tie": None, "accuracy_ci_low": None, "accuracy_ci_high": None,
           "length_accuracy_non_tie": None, "margin_over_length": None, "margin_over_length_ci_low": None,
           "margin_over_length_ci_high": None, "weight": 0.0, "weight_wad": "0"}
    if n < MIN_HUMAN:
        return out
    f = count_figures(counts.grouped(), bootstrap_rounds(n), seed)
    factor = int(f["factor"])
    out.update(accuracy_non_tie=_share(right, n), accuracy_ci_low=_share(f["right_low"], n),
               accuracy_ci_high=_share(f["right_high"], n), length_accuracy_non_tie=_share(base, n),
               margin_over_length=_share(right - base, n), margin_over_length_ci_low=_share(f["margin_low"], n),
               margin_over_length_ci_high=_share(f["margin_high"], n), weight=round(factor / WAD, 6),
               weight_wad=str(factor))
    return out


# --- people's ratings against the automatic score ---------------------------------------------------

RATING_ROUNDS = 500
RATING_SEED = 0
RATING_CHUNK = 2_000_000  # resampled items held at once (rounds x n) while bootstrapping
MIN_RANKED = 3  # a rank correlation needs at least this many items, with two distinct values on each side


def _rank_groups(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(each item's group of equal values, numbered in increasing order of value; the number of groups)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.ones(len(values), dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    group = np.empty(len(values), dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    return group, int(new.sum())


def _mid_ranks(weights: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Per round (row of `weights`, each item drawn that many times), every item's mid-rank among the
    drawn items: the items below its group, plus the middle of its group's ranks (ties share one)."""
    rounds = weights.shape[0]
    cells = (np.arange(rounds)[:, None] * groups + group[None, :]).ravel()
    counts = np.bincount(cells, weights=weights.ravel(), minlength=rounds * groups).reshape(rounds, groups)
    below = np.cumsum(counts, axis=1) - counts
    return (below + (counts + 1) / 2)[:, group]


def _weighted_pearson(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row, Pearson's correlation of x and y with each item counted `weights` times (NaN where one
    side is constant)."""
    total = weights.sum(axis=1, keepdims=True)
    dx = x - (weights * x).sum(axis=1, keepdims=True) / total
    dy = y - (weights * y).sum(axis=1, keepdims=True) / total
    cov, vx, vy = ((weights * a * b).sum(axis=1) for a, b in ((dx, dy), (dx, dx), (dy, dy)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((vx > 0) & (vy > 0), cov / np.sqrt(vx * vy), np.nan)


def _spearman(weights: np.ndarray, xs: tuple, ys: tuple) -> np.ndarray:
    return _weighted_pearson(weights, _mid_ranks(weights, *xs), _mid_ranks(weights, *ys))


def _rho(x) -> float | None:
    return None if x is None or np.isnan(x) else round(float(x), 4)


def rating_validity(rows: Iterable[tuple[str, int, int, int]], *, rounds: int = RATING_ROUNDS,
                    seed: int = RATING_SEED) -> dict:
    """People's ratings against the automatic score on the same answers: over (interaction id, Sa, Sh,
    the answer's length in characters) of the answers that have both, Spearman's rank correlation of Sa
    with Sh, with a 95% bootstrap interval (`rounds` resamples of the answers, seeded), next to that of
    the length with Sh. The rows are taken in interaction id order, so anyone holding the same answers
    gets the same figures. A resample where one side is constant is left out; with fewer than
    MIN_RANKED answers, or one side constant, a figure is None. `enough` says whether there are
    MIN_HUMAN of them, the least the site speaks from."""
    ordered = sorted(rows)
    n = len(ordered)
    out = {"n": n, "enough": n >= MIN_HUMAN, "spearman": None, "spearman_ci_low": None, "spearman_ci_high": None,
           "length_spearman": None}
    if n < MIN_RANKED:
        return out
    sa, sh, length = (np.array([r[k] for r in ordered], dtype=np.int64) for k in (1, 2, 3))
    score, rating, size = _rank_groups(sa), _rank_groups(sh), _rank_groups(length)
    ones = np.ones((1, n))
    out.update(spearman=_rho(_spearman(ones, score, rating)[0]), length_spearman=_rho(_spearman(ones, size, rating)[0]))
    if out["spearman"] is None:
        return out
    rng = np.random.default_rng(seed)
    draws = []
    step = max(1, RATING_CHUNK // n)
    for start in range(0, rounds, step):
        block = min(step, rounds - start)
        picks = rng.integers(0, n, size=(block, n))
        cells = (np.arange(block)[:, None] * n + picks).ravel()
        weights = np.bincount(cells, minlength=block * n).reshape(block, n).astype(np.float64)
        found = _spearman(weights, score, rating)
        draws += found[~np.isnan(found)].tolist()
    if draws:
        low, high = percentile_bounds(draws)
        out.update(spearman_ci_low=_rho(low), spearman_ci_high=_rho(high))
    return out


# --- the weighted score ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Signal:
    value: float
    low: float
    high: float
    weight: float


@dataclass(frozen=True)
class Weighted:
    score: float | None = None  # None: no signal from people
    low: float | None = None
    high: float | None = None
    rank: int | None = None
    tied: bool = False


def arena_share(elo: float) -> float:
    """The chance to win a vote against a model of average strength on the board (Elo 1000)."""
    return 1.0 / (1.0 + 10.0 ** ((ARENA_CENTRE - elo) / 400.0))


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def signals(*, ra: int, rh: int, r: int, band_lo: float | None, band_hi: float | None, arena_elo: float | None,
            arena_ci_low: float | None, arena_ci_high: float | None, ra_weight: float) -> list[Signal]:
    """A model's signals on [0, 1], each with its interval and weight: Rh with an R band (rated answers),
    the arena with a counted vote, and Ra (its earned weight) only beside one of them."""
    out = []
    if band_lo is not None and band_hi is not None:
        x, shift = rh / WAD, rh / WAD - r / WAD
        out.append(Signal(x, _clip(band_lo + shift), _clip(band_hi + shift), HUMAN_WEIGHT))
    if arena_elo is not None:
        low = arena_ci_low if arena_ci_low is not None else arena_elo
        high = arena_ci_high if arena_ci_high is not None else arena_elo
        out.append(Signal(arena_share(arena_elo), arena_share(low), arena_share(high), HUMAN_WEIGHT))
    if out and ra_weight > 0:
        out.append(Signal(ra / WAD, ra / WAD, ra / WAD, ra_weight))
    return out


def combine(found: Sequence[Signal]) -> tuple[float, float, float] | None:
    """(score, low, high): the weighted means of the signals' values and interval ends; None without weight."""
    total = sum(s.weight for s in found)
    if total <= 0:
        return None

    def mean(part):
        return round(sum(s.weight * part(s) for s in found) / total, 6)

    return mean(lambda s: s.value), mean(lambda s: s.low), mean(lambda s: s.high)


def ranks(bands: Sequence[tuple[float, float] | None]) -> list[tuple[int | None, bool]]:
    """(rank, tied) per band: 1 + the bands wholly above it; (None, False) without one."""
    known = [b for b in bands if b is not None]
    found = [None if b is None else 1 + sum(1 for other in known if other[0] > b[1]) for b in bands]
    counts = {k: found.count(k) for k in found if k is not None}
    return [(k, k is not None and counts[k] > 1) for k in found]


def weigh(rows: Sequence[dict], ra_weight: float) -> list[Weighted]:
    """The weighted score, band and rank of each row ({ra, rh, r, band_lo, band_hi, arena_elo,
    arena_ci_low, arena_ci_high}) of one board."""
    combined = [combine(signals(**row, ra_weight=ra_weight)) for row in rows]
    ranked = ranks([None if c is None else (c[1], c[2]) for c in combined])
    return [Weighted() if c is None else Weighted(c[0], c[1], c[2], rank, tied)
            for c, (rank, tied) in zip(combined, ranked)]
