"""The arena board: which model's answer people prefer when two anonymous models answer one prompt.

Each board (a context's, and the global one over every context's votes) is fitted from its counted
votes (a `Voted` event with counted = true: a battle where an answer named its own model is kept but
not counted) with lib.arena: Bradley–Terry Elo with a 95% bootstrap interval, the rank that accounts
for the intervals, battles and win rates, the pairwise win-rate matrix, and the Elo with style control
(the answers' length in characters and Markdown density as covariates).

This module is the one recipe both sides follow, so they get the same numbers: the site
(`arena_entries`, from its tables) and `verify` (from the chain's events and the evidence records on
IPFS) hand `compute` the same columns in the same order:

- the votes in battle id order (the style bootstrap draws per vote, so their order matters);
- the seed of both bootstraps, `seed_for`: the first 8 bytes of sha256 of "llmchain-arena:<context
  id>:<counted votes>:<block of the last one>" (63 bits), so each new vote draws anew and anyone
  recomputes the same intervals;
- the rounds: the served board says how many it used (LLMCHAIN_ARENA_BOOTSTRAP, _STYLE_BOOTSTRAP);
- one virtual game per model (lib.arena's prior), which keeps every score finite.

A vote enters the style fit only when the text of both its answers is known. The style coefficients
have no prior, so on few votes a resample can be explained perfectly by style (a coefficient runs to
infinity): such a round is left out of the interval and counted (`style_failed`, shown on the board),
rather than failing the whole board; with more than half the rounds failing, or the fit on the votes
themselves, there are no style-controlled scores and the board says why. Otherwise the draws are
lib.arena.style_board's own. lib.arena works under one BLAS thread here (OpenBLAS threads its small
solves, which on a busy 2-core machine made the bootstrap 15 times slower).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from lib import arena

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # comes with scikit-learn; without it numpy keeps its own threads
    threadpool_limits = None

PRIOR_GAMES = 1.0
OUTCOME_NAMES = {1: "A better", 2: "B better", 3: "tie", 4: "both bad"}  # Reputation.vote's outcomes


def one_blas_thread():
    return threadpool_limits(1) if threadpool_limits is not None else nullcontext()


def seed_for(context_id: str, votes: int, last_block: int | None) -> int:
    digest = hashlib.sha256(f"llmchain-arena:{context_id.lower()}:{votes}:{last_block}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # fits a signed 64-bit column


def answer_style(text: str) -> tuple[int, float]:
    """(length in characters, Markdown elements per 1000 characters) of an answer."""
    return len(text), arena.markdown_density(text)


@dataclass(frozen=True, eq=False)
class VoteColumns:
    """The counted votes of one board, in battle id order: `a` and `b` index `models` (the model ids in
    sorted order), `outcome` as on-chain (1 A better, 2 B better, 3 tie, 4 both bad); `len_*` and `md_*`
    the answers' lengths and Markdown densities, NaN where an answer's text is not known; `last_block`
    the block of the latest vote (None without votes)."""

    models: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    outcome: np.ndarray
    len_a: np.ndarray
    md_a: np.ndarray
    len_b: np.ndarray
    md_b: np.ndarray
    last_block: int | None

    def __post_init__(self):
        if list(self.models) != sorted(set(self.models)):
            raise ValueError("the models are listed once each, in sorted order")
        if len(self.outcome) and (self.outcome.min() < 1 or self.outcome.max() > 4):
            raise ValueError("a vote's outcome is 1 (A better), 2 (B better), 3 (tie) or 4 (both bad)")

    def __len__(self) -> int:
        return len(self.a)

    @classmethod
    def of(cls, rows: Iterable[Sequence]) -> VoteColumns:
        """From rows (model_a, model_b, outcome, len_a, md_a, len_b, md_b, vote_block), in battle id
        order; a style value of None is unknown."""
        rows = list(rows)
        columns = list(zip(*rows)) if rows else [()] * 8

        def floats(values) -> np.ndarray:
            return np.array([math.nan if v is None else v for v in values], dtype=float)

        models = sorted(set(columns[0]) | set(columns[1]))
        index = {m: i for i, m in enumerate(models)}
        n = len(rows)
        return cls(tuple(models), np.fromiter(map(index.__getitem__, columns[0]), np.int64, n),
                   np.fromiter(map(index.__getitem__, columns[1]), np.int64, n),
                   np.array(columns[2], dtype=np.int64), floats(columns[3]), floats(columns[4]), floats(columns[5]),
                   floats(columns[6]), max(columns[7]) if rows else None)

    def style_known(self) -> np.ndarray:
        return ~(np.isnan(self.len_a) | np.isnan(self.len_b) | np.isnan(self.md_a) | np.isnan(self.md_b))


@dataclass(frozen=True)
class ArenaLine:
    """One model's arena columns on a board."""

    model_id: str
    elo: float
    ci_low: float
    ci_high: float
    rank: int
    battles: int
    wins: int
    ties: int  # ties and both-bad votes
    losses: int
    win_rate: float
    style_elo: float | None = None
    style_ci_low: float | None = None
    style_ci_high: float | None = None
    style_rank: int | None = None


@dataclass(frozen=True)
class ArenaResult:
    """A board's arena: lines best first, `win_rates[r][c]` the r-th model's (wins + ties / 2) / battles
    against the c-th (None without battles), and what it was computed from."""

    votes: int
    style_votes: int
    last_vote_block: int | None
    seed: int | None
    bootstrap: int
    style_bootstrap: int
    lines: tuple[ArenaLine, ...] = ()
    win_rates: tuple[tuple[float | None, ...], ...] = ()
    coefficients: tuple[dict, ...] = ()
    style_problem: str = ""
    style_failed: int = 0  # style bootstrap rounds left out: no finite fit on that resample

    def line(self, model_id: str) -> ArenaLine | None:
        return next((x for x in self.lines if x.model_id == model_id), None)


def _votes(columns: VoteColumns, keep: np.ndarray | None = None, style: np.ndarray | None = None) -> arena.Votes:
    a, b, outcome = columns.a, columns.b, columns.outcome - 1
    if keep is not None:
        a, b, outcome = a[keep], b[keep], outcome[keep]
    return arena.Votes(columns.models, a, b, outcome, np.zeros((len(a), 2)) if style is None else style)


@dataclass(frozen=True)
class StyleFit:
    """The style-controlled fit: Elo of the votes' models (those with style votes in `played`), their
    interval and rank, the coefficients of STYLE_FEATURES (None: the feature was 0 on every vote)."""

    elo: np.ndarray
    low: np.ndarray
    high: np.ndarray
    rank: dict[int, int]
    coefficients: tuple[dict, ...]
    failed: int


def style_fit(votes: arena.Votes, rounds: int, seed: int) -> StyleFit:
    """lib.arena.style_board's fit and bootstrap (round r counts each vote as often as the r-th
    rng.multinomial(N, uniform) of default_rng(seed) draws it, refitted from the point estimate), except
    that a round with no finite fit is left out and counted. Raises arena.NoFiniteScores when the fit on
    the votes themselves, or more than half the rounds, have no finite scores."""
    elo, beta = arena.style_scores(votes, prior_games=PRIOR_GAMES)
    rng = np.random.default_rng(seed)
    n = len(votes)
    uniform = np.full(n, 1.0 / n)
    samples, betas, failed = [], [], 0
    for _ in range(rounds):
        weights = rng.multinomial(n, uniform)
        try:
            e, b = arena.style_scores(votes, weights=weights, prior_games=PRIOR_GAMES, start=(elo, beta))
        except arena.NoFiniteScores:
            failed += 1
            continue
        samples.append(e)
        betas.append(b)
    if failed * 2 > rounds:
        raise arena.NoFiniteScores(f"{failed} of {rounds} resamples of the votes have no finite fit: too few votes")
    level = [(100 - arena.LEVEL) / 2, (100 + arena.LEVEL) / 2]
    low, high = np.percentile(np.array(samples), level, axis=0) if samples else (elo, elo)
    played = np.flatnonzero(np.bincount(np.concatenate([votes.a, votes.b]), minlength=len(votes.models)))
    rank = {int(k): 1 + int((low[played] > high[k]).sum()) for k in played}
    coefficients = [{"feature": name, "value": None, "ci_low": None, "ci_high": None} for name in arena.STYLE_FEATURES]
    b_low, b_high = np.percentile(np.array(betas), level, axis=0) if betas else (beta, beta)
    for k, f in enumerate(arena.style_design(votes)[1]):
        coefficients[f].update(value=float(beta[k]), ci_low=float(b_low[k]) if betas else None,
                               ci_high=float(b_high[k]) if betas else None)
    return StyleFit(elo, low, high, rank, tuple(coefficients), failed)


def compute(context_id: str, columns: VoteColumns, *, bootstrap: int, style_bootstrap: int) -> ArenaResult:
    """The arena of one board from its counted votes (see the module docstring for what must match)."""
    if bootstrap < 0 or style_bootstrap < 0:
        raise ValueError("bootstrap rounds cannot be negative")
    n = len(columns)
    if not n:
        return ArenaResult(0, 0, None, None, bootstrap, style_bootstrap)
    seed = seed_for(context_id, n, columns.last_block)
    index = {m: i for i, m in enumerate(columns.models)}
    known = columns.style_known()
    with one_blas_thread():
        plain = arena.board(_votes(columns), bootstrap=bootstrap, seed=seed, prior_games=PRIOR_GAMES)
        styled, problem = None, ""
        if not known.any():
            problem = "no vote has the text of both its answers known yet"
        else:
            style = np.column_stack([
                arena.normalized_difference(columns.len_a[known], columns.len_b[known]),
                arena.normalized_difference(columns.md_a[known], columns.md_b[known])])
            try:
                styled = style_fit(_votes(columns, known, style), style_bootstrap, seed)
            except arena.NoFiniteScores as exc:
                problem = f"the style fit has no finite scores on these votes ({exc})"
    lines = []
    for s in plain.standings:
        k = index[s.model]
        st = styled is not None and k in styled.rank
        lines.append(ArenaLine(
            s.model, s.elo, s.ci_low if s.ci_low is not None else s.elo, s.ci_high if s.ci_high is not None else s.elo,
            s.rank, s.battles, s.wins, s.ties, s.losses, s.win_rate,
            style_elo=float(styled.elo[k]) if st else None, style_ci_low=float(styled.low[k]) if st else None,
            style_ci_high=float(styled.high[k]) if st else None, style_rank=styled.rank[k] if st else None))
    return ArenaResult(n, int(known.sum()), columns.last_block, seed, bootstrap, style_bootstrap, tuple(lines),
                       plain.win_rates, styled.coefficients if styled else (), problem,
                       styled.failed if styled else 0)


def arena_text(bootstrap: int, style_bootstrap: int) -> str:
    """What the arena columns mean, in plain words."""
    return (
        "Arena: a user asks one question, two anonymous models answer it side by side, and the user votes "
        "for the better answer (or a tie, or both bad). Arena Elo turns those votes into one score per model, "
        "on the Elo scale of chess ratings: a model 400 points above another is expected to win "
        "10 votes for every one it loses, 100 points above about 64 of 100; ties and both-bad votes count as "
        "half a win for each side, and the models linked by battles average 1000. "
        f"The 95% interval: we draw as many votes as there are again at random from the votes (one may "
        f"come up twice), refit, do this {bootstrap} times, and keep the middle 95% of the scores; a wide "
        f"interval means few or split votes. "
        "The arena rank accounts for the intervals: a model's rank is 1 plus the number of models whose whole "
        "interval lies above its own, so models whose intervals overlap can share a rank, and a model "
        "is ranked below another only when the votes clearly say so (as Chatbot Arena shows it). "
        "Style-controlled Elo: people tend to prefer longer answers and answers with more formatting, "
        "whatever they say. This score fits the difference in length (characters) and in Markdown "
        "(headers, lists, bold, code blocks per 1000 characters) between the two answers of each vote "
        "alongside the models, so what is left is the preference style does not explain "
        f"(its interval from {style_bootstrap} redraws, since each refit reads every vote; only votes whose "
        "two answers' texts are known count; on few votes a redraw can be explained by style alone, with no "
        "finite score: such redraws are left out, and the board says how many). "
        "Battles counts the model's counted votes, and its win rate is its wins plus half its ties, over "
        "them. Votes where an answer gave away its model's name are kept but not counted. The draws are "
        "seeded by the board, its number of votes and the block of the last vote, so anyone rebuilding the "
        "arena from the chain's records of battles and votes gets the same numbers: the verify page checks them.")
