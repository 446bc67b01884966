"""The arena's statistics: two anonymous models answer one prompt, a user votes A better, B better,
tie or both bad, and the board ranks models as Chatbot Arena (LMSYS) does. Pure numpy, no Django.

Bradley–Terry on the Elo scale. Model i has strength theta_i (natural-log odds) and beats j with
probability 1 / (1 + e^-(theta_i - theta_j)), shown as elo_i = ANCHOR + 400 / ln 10 * theta_i, so
P(A beats B) = 1 / (1 + 10^((R_B - R_A) / 400)). The fit is maximum likelihood, i.e. a logistic
regression without intercept on rows (+1 for A, -1 for B). A tie counts as half a win to each side
(LMSYS writes each tie as two rows, one win each way, next to doubled win rows: the same
likelihood), and "both bad" is a tie too: neither answer was better. A vote's side (A or B) carries
no information here, so swapping A and B and flipping the outcome changes nothing.

The likelihood depends only on each pair's counts of outcomes, so votes are tallied per pair first
(`tally`) and the fit is Newton's method on the tallied pairs: its cost does not grow with the votes.

Anchor and groups. Only differences of strength are determined, and only between models linked by
battles. The models linked (directly or through others) form a group; every group is shifted to mean
ANCHOR, so scores compare only within a group (`Board.groups`; one group on any board worth reading).

Prior (`prior_games`, default 1, as in lib.pairwise.bradley_terry). Each model also plays c virtual
games against a virtual opponent of strength 0, winning half. It keeps every score finite: a model
that never lost has no finite maximum-likelihood strength. c = 0 is LMSYS's plain maximum likelihood,
which exists when, within every group, each model has beaten or tied somebody and has lost to or tied
somebody else in a cycle through the group (the beat graph is strongly connected; Zermelo 1929,
Ford 1957); otherwise `NoFiniteScores` says so. With a million votes one virtual game is invisible.

Intervals. A bootstrap resamples the whole vote set: N votes drawn with replacement from the N given,
which is one multinomial draw over the (pair, outcome) cells of the tally with the observed
frequencies; each resample is refitted and the 2.5th and 97.5th percentiles of the refits make the
95% interval. Round r uses the r-th draws of numpy's default_rng(seed), so it is reproducible.
Rank = 1 + the number of models whose lower bound is above this model's upper bound (LMSYS's rule: a
model is outranked only by models that are better beyond the intervals).

Style control (LMSYS, "Does style influence Chatbot Arena?", 2024). The same regression plus, per
vote, covariates that say how A's answer differs from B's in style: the normalized differences
(a - b) / (a + b) (0 when both are 0) of length (tokens or characters, the caller's unit) and of
Markdown density (`markdown_density`). Each is divided by its root mean square over the votes given
(not centred: a difference of identical answers must stay 0, and swapping A and B must flip its
sign). Then the model strengths are what is left once style explains what it can; the coefficients
are log-odds per root mean square of the feature. Style varies per vote, so this fit runs on the
votes themselves (a vectorized Newton; see `arena_bench` for its cost).

Validity of a vote (a model revealing its name, a user voting twice) is the caller's concern: this
module counts exactly the votes it is given. A model with no votes is not on the board.

Speed (`arena_bench`: 100 models, 1,000,000 votes, on the project's shared 2-core machine, one BLAS
thread): tally 0.08-0.14 s, fit 0.003 s, 100-round bootstrap 0.45 s; style fit 0.45 s, and 0.26 s per
style bootstrap round (100 rounds: 26 s), since each round refits on the votes. Run it with one BLAS
thread (OPENBLAS_NUM_THREADS=1, or threadpoolctl's threadpool_limits(1) around the call): OpenBLAS
threads its 100 x 100 solves, and on a busy 2-core machine that made the bootstrap 15 times slower.
Without a prior, a bootstrap resample can lose a model's only win or loss and raise `NoFiniteScores`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

OUTCOMES = ("a", "b", "tie", "bad")  # A better, B better, tie, both bad
A_WON, B_WON, TIE, BOTH_BAD = range(4)
STYLE_FEATURES = ("length", "markdown")
ANCHOR = 1000.0
ELO_PER_LOGIT = 400.0 / math.log(10.0)
LEVEL = 95.0  # percent of the bootstrap refits inside an interval
_FLIPPED = np.array([B_WON, A_WON, TIE, BOTH_BAD])


class NoFiniteScores(ValueError):
    """Maximum likelihood (prior_games=0) has no finite scores for these votes, or the fit diverged."""


@dataclass(frozen=True)
class Vote:
    """One vote. `outcome` is one of OUTCOMES; lengths and Markdown densities are only for style control."""

    model_a: str
    model_b: str
    outcome: str
    len_a: float = 0.0
    len_b: float = 0.0
    md_a: float = 0.0
    md_b: float = 0.0


def normalized_difference(x, y) -> np.ndarray:
    """(x - y) / (x + y) elementwise, 0 where both are 0; x and y must not be negative."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if (x < 0).any() or (y < 0).any():
        raise ValueError("lengths and Markdown densities cannot be negative")
    total = x + y
    return np.divide(x - y, total, out=np.zeros_like(total), where=total > 0)


@dataclass(frozen=True, eq=False)
class Votes:
    """Votes as columns: `a` and `b` index `models`, `outcome` indexes OUTCOMES, and `style` holds one
    row per vote of normalized differences A vs B in STYLE_FEATURES order."""

    models: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    outcome: np.ndarray
    style: np.ndarray

    def __post_init__(self):
        n = len(self.a)
        if not (len(self.b) == len(self.outcome) == len(self.style) == n) or self.style.shape[1:] != (2,):
            raise ValueError("votes need a, b, outcome and a two-column style, all of one length")
        if n and (min(self.a.min(), self.b.min()) < 0 or max(self.a.max(), self.b.max()) >= len(self.models)):
            raise ValueError("a vote names a model index outside `models`")
        if (self.a == self.b).any():
            raise ValueError("a vote needs two different models")
        if n and (self.outcome.min() < 0 or self.outcome.max() >= len(OUTCOMES)):
            raise ValueError(f"an outcome is one of {OUTCOMES}")
        if not np.isfinite(self.style).all():
            raise ValueError("style differences must be finite")

    def __len__(self) -> int:
        return len(self.a)

    @classmethod
    def from_columns(cls, model_a: Sequence[str], model_b: Sequence[str], outcome: Sequence[str],
                     len_a=None, len_b=None, md_a=None, md_b=None) -> Votes:
        """Votes from columns of names and outcome words (as a database query returns them);
        missing style columns count as 0 for every vote. Models are listed in sorted order."""
        n = len(model_a)
        names = np.asarray(list(model_a) + list(model_b), dtype=str)
        models, index = np.unique(names, return_inverse=True)
        words = np.asarray(outcome, dtype=str).reshape(n)
        codes = np.full(n, -1, dtype=np.int8)
        for code, word in enumerate(OUTCOMES):
            codes[words == word] = code
        if (codes < 0).any():
            raise ValueError(f"an outcome is one of {OUTCOMES}, got {words[codes < 0][0]!r}")
        zero = np.zeros(n)
        style = np.column_stack([
            normalized_difference(zero if len_a is None else len_a, zero if len_b is None else len_b),
            normalized_difference(zero if md_a is None else md_a, zero if md_b is None else md_b),
        ]).reshape(n, 2)
        return cls(tuple(models.tolist()), index[:n], index[n:], codes, style)

    @classmethod
    def of(cls, votes: Iterable[Vote]) -> Votes:
        votes = list(votes)
        fields = ("model_a", "model_b", "outcome", "len_a", "len_b", "md_a", "md_b")
        return cls.from_columns(*([getattr(v, name) for v in votes] for name in fields))


def _as_votes(votes: Votes | Iterable[Vote]) -> Votes:
    return votes if isinstance(votes, Votes) else Votes.of(votes)


@dataclass(frozen=True, eq=False)
class Tally:
    """Votes counted per pair of models i < j: `counts[k]` holds pair k's votes that i won, that j
    won, ties and both bad. All that the plain Bradley–Terry fit needs."""

    models: tuple[str, ...]
    i: np.ndarray
    j: np.ndarray
    counts: np.ndarray

    def resample(self, rng: np.random.Generator) -> Tally:
        """As many votes drawn with replacement from these: one multinomial draw over the cells."""
        flat = self.counts.ravel()
        total = int(flat.sum())
        drawn = rng.multinomial(total, flat / total) if total else flat
        return Tally(self.models, self.i, self.j, drawn.reshape(self.counts.shape))


def tally(votes: Votes) -> Tally:
    """Count the votes per unordered pair, A/B put in index order (the outcome flipped with them)."""
    n = len(votes.models)
    swap = votes.a > votes.b
    lo, hi = np.where(swap, votes.b, votes.a).astype(np.int64), np.where(swap, votes.a, votes.b)
    outcome = np.where(swap, _FLIPPED[votes.outcome], votes.outcome)
    pairs, inverse = np.unique(lo * n + hi, return_inverse=True)
    counts = np.bincount(inverse * 4 + outcome, minlength=4 * len(pairs)).reshape(-1, 4)
    return Tally(votes.models, pairs // n, pairs % n, counts)


def _reach(adjacent: np.ndarray) -> np.ndarray:
    """Who reaches whom along the edges of a boolean adjacency matrix (transitive, reflexive)."""
    reach = (adjacent | np.eye(len(adjacent), dtype=bool)).astype(float)
    while True:
        wider = (reach @ reach > 0).astype(float)
        if (wider == reach).all():
            return reach > 0
        reach = wider


def _groups(battled: np.ndarray, scored: np.ndarray, prior_games: float) -> np.ndarray:
    """Each model's group (the lowest index in it) from who battled whom; with no prior, first check
    that the maximum-likelihood scores are finite (`scored[i, j]`: i won or tied against j)."""
    if prior_games < 0:
        raise ValueError("prior_games cannot be negative")
    reach = _reach(battled | battled.T)
    group = reach.argmax(axis=1)
    if prior_games == 0 and not (_reach(scored) | ~reach).all():
        raise NoFiniteScores(
            "no finite maximum-likelihood scores: some models never lost, or never won, against the rest "
            "of the models they met (pass prior_games > 0, or wait for more votes)")
    return group


def _centre(theta: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Elo scores, each group shifted to mean ANCHOR."""
    mean = np.bincount(group, theta, len(theta)) / np.maximum(np.bincount(group, minlength=len(theta)), 1)
    return ANCHOR + ELO_PER_LOGIT * (theta - mean[group])


def _laplacian(weights: np.ndarray) -> np.ndarray:
    """sum over battles of w x x^T for rows x = e_i - e_j, from the n x n matrix of w per (i, j)."""
    return np.diag(weights.sum(0) + weights.sum(1)) - weights - weights.T


def _prior(theta: np.ndarray, c: float):
    """c virtual games of each model against strength 0, half won: (loss, gradient, Hessian diagonal)."""
    if c == 0:
        return 0.0, 0.0, 0.0
    soft = np.logaddexp(0.0, theta)
    p = np.exp(theta - soft)
    return float((c * soft - c / 2 * theta).sum()), c * p - c / 2, c * p * (1 - p)


def _newton(objective, x: np.ndarray, group: np.ndarray | None, tol: float = 1e-6, max_iter: int = 100) -> np.ndarray:
    """Minimize a convex loss by Newton's method with step halving; `objective(x)` returns (loss,
    gradient, Hessian). Without a prior the first len(group) parameters, the model strengths, are free
    to shift within a group: the Hessian is singular there, so the step is solved with the projector
    onto those shifts added (the gradient is orthogonal to them: the step is the minimum-norm one)."""
    gauge = np.zeros((len(x), len(x)))
    if group is not None:
        n = len(group)
        members = group[:, None] == group[None, :]
        gauge[:n, :n] = members / members.sum(1, keepdims=True)
    diverged = NoFiniteScores("the fit does not converge: the votes separate the models or the style perfectly "
                              "(some strength or coefficient runs to infinity)")
    loss, grad, hess = objective(x)
    for _ in range(max_iter):
        try:
            step = -np.linalg.solve(hess + gauge, grad)
        except np.linalg.LinAlgError:  # the curvature vanished: probabilities of exactly 0 or 1
            raise diverged from None
        t = 1.0
        while True:
            new = objective(x + t * step)
            if new[0] <= loss + 1e-12 * abs(loss) or t < 1e-9:
                break
            t /= 2
        x = x + t * step
        loss, grad, hess = new
        if np.abs(t * step).max(initial=0.0) < tol:
            return x
    raise diverged


def bt_scores(t: Tally, *, prior_games: float = 1.0, start: np.ndarray | None = None) -> np.ndarray:
    """Bradley–Terry Elo scores of t.models (see the module docstring), fitted on the tallied pairs."""
    n = len(t.models)
    battles = t.counts.sum(1).astype(float)
    score = t.counts[:, A_WON] + 0.5 * (t.counts[:, TIE] + t.counts[:, BOTH_BAD])  # i's half-wins
    battled, scored = np.zeros((n, n), bool), np.zeros((n, n), bool)
    battled[t.i, t.j] = battles > 0
    scored[t.i, t.j], scored[t.j, t.i] = score > 0, battles - score > 0
    group = _groups(battled, scored, prior_games)

    def objective(theta):
        d = theta[t.i] - theta[t.j]
        soft = np.logaddexp(0.0, d)
        p = np.exp(d - soft)
        r, w = battles * p - score, battles * p * (1 - p)
        weights = np.zeros((n, n))
        weights[t.i, t.j] = w
        prior_loss, prior_grad, prior_hess = _prior(theta, prior_games)
        grad = np.bincount(t.i, r, n) - np.bincount(t.j, r, n) + prior_grad
        return float((battles * soft - score * d).sum()) + prior_loss, grad, _laplacian(weights) + np.diag(
            np.broadcast_to(prior_hess, n))

    theta = _newton(objective, np.zeros(n) if start is None else (start - ANCHOR) / ELO_PER_LOGIT,
                    None if prior_games else group)
    return _centre(theta, group)


def bt_bootstrap(t: Tally, rounds: int, *, seed: int = 0, prior_games: float = 1.0,
                 start: np.ndarray | None = None) -> np.ndarray:
    """Elo scores (one row per round) refitted on `rounds` resamples of the votes, round r on the
    r-th `t.resample` of default_rng(seed); `start` (the point estimate) only speeds the refits up."""
    rng = np.random.default_rng(seed)
    return np.array([bt_scores(t.resample(rng), prior_games=prior_games, start=start)
                     for _ in range(rounds)]).reshape(rounds, len(t.models))


def style_design(votes: Votes) -> tuple[np.ndarray, np.ndarray]:
    """(the style columns, each divided by its root mean square, and which of STYLE_FEATURES they
    are): a feature that is 0 on every vote says nothing and has no column."""
    rms = np.sqrt((votes.style**2).mean(0)) if len(votes) else np.zeros(2)
    kept = np.flatnonzero(rms > 0)
    return votes.style[:, kept] / rms[kept], kept


def style_scores(votes: Votes, *, weights: np.ndarray | None = None, prior_games: float = 1.0,
                 start: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(style-controlled Elo scores of votes.models, the coefficients of `style_design`'s columns), each
    vote counted `weights` times (once by default). `start`, a previous result, only speeds the fit up."""
    return _style_fit(len(votes.models), *_style_rows(votes), weights, prior_games, start)


def _style_rows(votes: Votes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per vote: its (a, b) cell of an n x n matrix, its style columns, and A's score (1, 0, or 0.5)."""
    y = np.select([votes.outcome == A_WON, votes.outcome == B_WON], [1.0, 0.0], 0.5)
    z = np.ascontiguousarray(style_design(votes)[0].T)  # one row per feature
    return votes.a.astype(np.int64) * len(votes.models) + votes.b, z, y


def _style_fit(n, cell, z, y, weights, prior_games, start):
    if weights is not None:  # votes drawn 0 times weigh nothing: leave them out
        drawn = np.flatnonzero(weights)
        cell, z, y, w = cell[drawn], z[:, drawn], y[drawn], np.asarray(weights, dtype=float)[drawn]
    else:
        w = np.ones(len(cell))

    def per_cell(values):
        return np.bincount(cell, values, n * n).reshape(n, n)

    group = _groups(per_cell(w) > 0, (per_cell(w * y) > 0) | (per_cell(w * (1 - y)).T > 0), prior_games)

    def objective(x):
        theta, beta = x[:n], x[n:]
        eta = (theta[:, None] - theta[None, :]).ravel()[cell]
        for f, column in enumerate(z):
            eta += beta[f] * column
        soft = np.logaddexp(0.0, eta)
        p = np.exp(eta - soft)
        r, h = w * (p - y), w * p * (1 - p)
        prior_loss, prior_grad, prior_hess = _prior(theta, prior_games)
        g = per_cell(r)
        hess = np.zeros((len(x), len(x)))
        hess[:n, :n] = _laplacian(per_cell(h)) + np.diag(np.broadcast_to(prior_hess, n))
        for f, column in enumerate(z):  # einsum's own loops: no BLAS threads for a dot product
            m = per_cell(h * column)
            hess[:n, n + f] = hess[n + f, :n] = m.sum(1) - m.sum(0)
            hess[n + f, n:] = [np.einsum("i,i,i->", h, column, other) for other in z]
        grad = np.concatenate([g.sum(1) - g.sum(0) + prior_grad, [np.einsum("i,i->", r, column) for column in z]])
        return float(np.einsum("i,i->", w, soft - y * eta)) + prior_loss, grad, hess

    x = np.zeros(n + len(z)) if start is None else np.concatenate([(start[0] - ANCHOR) / ELO_PER_LOGIT, start[1]])
    x = _newton(objective, x, None if prior_games else group)
    return _centre(x[:n], group), x[n:]


def style_bootstrap(votes: Votes, rounds: int, *, seed: int = 0, prior_games: float = 1.0,
                    start: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(Elo scores, coefficients), one row per round, refitted on `rounds` resamples of the votes: round
    r counts each vote as often as the r-th rng.multinomial(N, uniform) of default_rng(seed) draws it.
    The style columns keep the scale of the votes given. `start` (the point estimate) only speeds the
    refits up."""
    rng = np.random.default_rng(seed)
    rows = _style_rows(votes)
    uniform = np.full(len(votes), 1.0 / max(len(votes), 1))
    fits = [_style_fit(len(votes.models), *rows, rng.multinomial(len(votes), uniform), prior_games, start)
            for _ in range(rounds)]
    return (np.array([f[0] for f in fits]).reshape(rounds, len(votes.models)),
            np.array([f[1] for f in fits]).reshape(rounds, len(rows[1])))


@dataclass(frozen=True)
class Standing:
    """One model's line on the board. `ties` counts ties and both-bad votes; `win_rate` is
    (wins + ties / 2) / battles. Without a bootstrap the interval is None."""

    model: str
    elo: float
    ci_low: float | None
    ci_high: float | None
    rank: int
    battles: int
    wins: int
    ties: int
    losses: int
    win_rate: float


@dataclass(frozen=True)
class Coefficient:
    """A style coefficient: log-odds of winning per root mean square of the feature's difference."""

    feature: str
    value: float | None  # None: the feature was 0 on every vote
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class Board:
    """Standings best first; `win_rates[r][c]`: the r-th model's (wins + ties / 2) / battles against the
    c-th, None without battles; `groups`: models linked by battles (scores compare only within one)."""

    standings: tuple[Standing, ...]
    win_rates: tuple[tuple[float | None, ...], ...]
    groups: tuple[tuple[str, ...], ...]
    coefficients: tuple[Coefficient, ...] = ()

    def standing(self, model: str) -> Standing:
        return next(s for s in self.standings if s.model == model)


def _interval(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The percentile interval of each column of the bootstrap samples; None without samples."""
    if not len(samples):
        return None
    return tuple(np.percentile(samples, [(100 - LEVEL) / 2, (100 + LEVEL) / 2], axis=0))


def _board(t: Tally, elo: np.ndarray, samples: np.ndarray, coefficients=()) -> Board:
    """Standings, win rates and groups of the models with battles, ranked among themselves."""
    n, c = len(t.models), t.counts
    half_wins = np.zeros((n, n))  # [i, j]: i's wins + ties / 2 against j
    battles = np.zeros((n, n))
    half_wins[t.i, t.j] = c[:, A_WON] + 0.5 * (c[:, TIE] + c[:, BOTH_BAD])
    half_wins[t.j, t.i] = c[:, B_WON] + 0.5 * (c[:, TIE] + c[:, BOTH_BAD])
    battles[t.i, t.j] = battles[t.j, t.i] = c.sum(1)
    wins = np.bincount(t.i, c[:, A_WON], n) + np.bincount(t.j, c[:, B_WON], n)
    ties = np.bincount(t.i, c[:, TIE] + c[:, BOTH_BAD], n) + np.bincount(t.j, c[:, TIE] + c[:, BOTH_BAD], n)
    played = battles.sum(1)
    order = sorted(np.flatnonzero(played).tolist(), key=lambda k: (-elo[k], t.models[k]))
    interval = _interval(samples[:, order])
    low, high = interval or (elo[order], elo[order])  # without intervals, rank by the scores themselves
    rank = 1 + (low[None, :] > high[:, None]).sum(1)
    standings = tuple(
        Standing(t.models[k], float(elo[k]), float(low[r]) if interval else None,
                 float(high[r]) if interval else None, int(rank[r]), int(played[k]), int(wins[k]), int(ties[k]),
                 int(played[k] - wins[k] - ties[k]), float(half_wins[k].sum() / played[k]))
        for r, k in enumerate(order))
    rates = tuple(tuple(float(half_wins[r, col] / battles[r, col]) if battles[r, col] else None for col in order)
                  for r in order)
    reach = _reach(battles > 0)
    groups = tuple(dict.fromkeys(tuple(t.models[k] for k in order if reach[r, k]) for r in order))
    return Board(standings, rates, groups, tuple(coefficients))


def board(votes: Votes | Iterable[Vote], *, bootstrap: int = 100, seed: int = 0,
          prior_games: float = 1.0) -> Board:
    """The arena board: Bradley–Terry Elo with bootstrap intervals (`bootstrap` rounds; 0 for none)."""
    t = tally(_as_votes(votes))
    if not t.models:
        return Board((), (), ())
    elo = bt_scores(t, prior_games=prior_games)
    return _board(t, elo, bt_bootstrap(t, bootstrap, seed=seed, prior_games=prior_games, start=elo))


def style_board(votes: Votes | Iterable[Vote], *, bootstrap: int = 100, seed: int = 0,
                prior_games: float = 1.0) -> Board:
    """The board with style control: Elo scores net of length and Markdown, with the style coefficients
    and their intervals. Each bootstrap round costs about one style fit (see the module docstring)."""
    votes = _as_votes(votes)
    if not votes.models:
        return Board((), (), ())
    elo, beta = style_scores(votes, prior_games=prior_games)
    samples, beta_samples = style_bootstrap(votes, bootstrap, seed=seed, prior_games=prior_games, start=(elo, beta))
    interval = _interval(beta_samples)
    coefficients = [Coefficient(name, None, None, None) for name in STYLE_FEATURES]
    for k, f in enumerate(style_design(votes)[1]):
        low, high = (float(interval[0][k]), float(interval[1][k])) if interval else (None, None)
        coefficients[f] = Coefficient(STYLE_FEATURES[f], float(beta[k]), low, high)
    return _board(tally(votes), elo, samples, coefficients)


_FENCED_CODE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[ \t]*$|\Z)", re.M | re.S)
_HEADER = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)", re.M)
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S", re.M)
_BOLD = re.compile(r"\*\*(?=\S).+?(?<=\S)\*\*|__(?=\S).+?(?<=\S)__")


def markdown_density(text: str) -> float:
    """Markdown elements per 1000 characters of `text`: fenced code blocks, then (outside them)
    ATX headers (`# ...`), list items (`- `, `* `, `+ `, `1. `, `1) ` at a line's start) and bold spans
    (`**...**`, `__...__`). A plain regex count, the style signal LMSYS uses, not a parser."""
    if not text:
        return 0.0
    blocks = len(_FENCED_CODE.findall(text))
    rest = _FENCED_CODE.sub("", text)
    elements = blocks + len(_HEADER.findall(rest)) + len(_LIST_ITEM.findall(rest)) + len(_BOLD.findall(rest))
    return 1000.0 * elements / len(text)


def arena_bench(n_models: int = 100, n_votes: int = 1_000_000, bootstrap: int = 100, seed: int = 0,
                style_bootstrap_rounds: int = 10) -> dict:
    """Seconds each stage takes on synthetic votes (strengths ~ N(0, 1) in log-odds, a length effect of
    0.3 per RMS, 15% ties and 5% both bad): tally, fit, bootstrap, style fit, and a style bootstrap of
    `style_bootstrap_rounds` rounds (it costs about one style fit per round)."""
    rng = np.random.default_rng(seed)
    strength = rng.normal(0.0, 1.0, n_models)
    a = rng.integers(0, n_models, n_votes)
    b = (a + rng.integers(1, n_models, n_votes)) % n_models
    length = normalized_difference(rng.lognormal(6, 0.7, n_votes), rng.lognormal(6, 0.7, n_votes))
    md = normalized_difference(rng.gamma(2.0, 3.0, n_votes), rng.gamma(2.0, 3.0, n_votes))
    p = 1.0 / (1.0 + np.exp(-(strength[a] - strength[b] + 0.3 * length / np.sqrt((length**2).mean()))))
    u = rng.random(n_votes)
    outcome = np.where(u < 0.15, TIE, np.where(u < 0.2, BOTH_BAD, np.where(rng.random(n_votes) < p, A_WON, B_WON)))
    votes = Votes(tuple(f"model-{k}" for k in range(n_models)), a, b, outcome, np.column_stack([length, md]))
    clock = [time.perf_counter()]

    def lap():
        clock.append(time.perf_counter())
        return round(clock[-1] - clock[-2], 3)

    t = tally(votes)
    timings = {"models": n_models, "votes": n_votes, "tally_s": lap()}
    elo = bt_scores(t)
    timings["fit_s"] = lap()
    bt_bootstrap(t, bootstrap, seed=seed, start=elo)
    timings[f"bootstrap_{bootstrap}_s"] = lap()
    styled = style_scores(votes)
    timings["style_fit_s"] = lap()
    style_bootstrap(votes, style_bootstrap_rounds, seed=seed, start=styled)
    timings[f"style_bootstrap_{style_bootstrap_rounds}_s"] = lap()
    return timings
