"""What a board shows of one (model, context) pair beyond its current REP: the history behind it
(for the sparkline and the model page's chart) and an uncertainty band on R.

Everything here is a pure function of the pair's chain history: its ReputationUpdated events in
chain order and the scores its AutoEvaluated / HumanEvaluated events carry. The indexer feeds it
rows from the database; `leaderboard verify` feeds it the same history read from a node; both
must get the same numbers.

The band (REPUTATION.md is silent on it; this is the project's definition):
  R moves only when a human evaluation arrives. Take the pair's human-rated evaluations, each
  with the combined score S and weight w the contract used and the rate it applied (psi or xi,
  read back exactly from the R before and after). Redraw as many of them as there are, at random
  with replacement, and replay the redraw through the same update from the pair's starting R;
  do this BAND_RESAMPLES times. The band is the range holding the middle BAND_LEVEL of the
  replayed R values (percentile bootstrap). The random draws are seeded by the pair and its
  number of evaluations, so anyone recomputing it gets the same band.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from dataclasses import dataclass, field

import numpy as np

from .reputation import WAD, combine, update

BAND_RESAMPLES = 200
BAND_LEVEL = 0.95
BAND_MIN_HUMAN = 2  # fewer human-rated evaluations: no band
HISTORY_POINTS = 200  # the chart's series are thinned to at most this many points
SPARK_POINTS = 32


@dataclass(frozen=True)
class Change:
    """One ReputationUpdated event of the pair (values in 1e18 fixed point)."""

    interaction_id: str
    ra: int
    rh: int
    r: int
    n_auto: int
    n_human: int
    block: int
    timestamp: int | None = None  # the block's timestamp (seconds)


@dataclass(frozen=True)
class Evaluation:
    """The scores one interaction carried on-chain; sh/wh are None until its human evaluation."""

    interaction_id: str
    has_reference: bool
    sa: int
    wa: int
    sh: int | None = None
    wh: int | None = None

    def combined(self) -> tuple[int, int] | None:
        """(S_theta, w_theta) as updateReputation uses them, or None without a human part."""
        if self.sh is None or self.wh is None:
            return None
        if self.has_reference:
            return combine(self.sh, self.sa), combine(self.wh, self.wa)
        return self.sh, self.wh


@dataclass(frozen=True)
class PairSummary:
    ra: int
    rh: int
    r: int
    n_auto: int
    n_human: int
    block: int
    timestamp: int | None
    history: dict = field(default_factory=dict)  # {"i": [...], "ra": [...], "rh": [...], "r": [...]}
    spark: list = field(default_factory=list)  # R, thinned to SPARK_POINTS values
    band_lo: float | None = None
    band_hi: float | None = None
    band_n: int = 0  # human-rated evaluations the band rests on

    @property
    def changed_at(self) -> datetime | None:
        """The last change's block time (UTC)."""
        return datetime.fromtimestamp(self.timestamp, tz=timezone.utc) if self.timestamp is not None else None


def stride(n: int, points: int) -> int:
    """The step between the points `thin` keeps of a series of n: the smallest power of two whose
    multiples below n, with the last index, number at most `points`. It never falls as n grows."""
    if points < 2:
        raise ValueError("a thinned series keeps at least its first and last points")
    step = 1
    while n > 1 and -(-(n - 1) // step) + 1 > points:
        step *= 2
    return step


def thin(n: int, points: int) -> list[int]:
    """At most `points` indexes into range(n), evenly spread, always the first and the last: every
    `stride(n, points)`-th index, and the last one. Growing n only drops points (every other one when
    the stride doubles) or adds new ones at the end, so a thinned series can be extended from the
    points it kept without reading the whole series again (`extend`)."""
    if n <= 0:
        return []
    step = stride(n, points)
    keep = list(range(0, n, step))
    if keep[-1] != n - 1:
        keep.append(n - 1)
    return keep


def _f(x: int) -> float:
    return round(x / WAD, 6)


@dataclass(frozen=True)
class Step:
    """One recorded move of R: its score, weight and the rate (thirds: 1 = psi, 2 = xi) applied."""

    s: int
    w: int
    thirds: int


def moves_r(prev: Change, ch: Change) -> bool:
    """Whether change `ch` (following `prev`) is an updateReputation: it moves neither counter."""
    return ch.n_auto == prev.n_auto and ch.n_human == prev.n_human


def step_of(prev: Change, ch: Change, evaluations: dict[str, Evaluation]) -> Step | None:
    """The move of R that change `ch` (following `prev`) records, or None when it moved a counter
    instead (an autoEval or a humEval). Raises ValueError when no rate explains it."""
    if not moves_r(prev, ch):
        return None
    ev = evaluations.get(ch.interaction_id)
    sw = ev.combined() if ev is not None else None
    if sw is None:
        raise ValueError(f"interaction {ch.interaction_id} moved R without a human evaluation on record")
    s, w = sw
    good, bad = update(prev.r, s, w, 0), update(prev.r, s, w, WAD + 1)
    if ch.r == good:
        return Step(s, w, 1)
    if ch.r == bad:
        return Step(s, w, 2)
    raise ValueError(f"interaction {ch.interaction_id}: R went from {prev.r} to {ch.r}, which neither rate gives")


def recorded_steps(changes: list[Change], evaluations: dict[str, Evaluation]) -> tuple[int, list[Step]]:
    """(starting R, the human-rated steps in chain order) of one pair.

    A pair's first event is its first autoEval (which creates it and never moves R); after that
    autoEval moves nAuto, humEval moves nHuman, so an event that moves neither counter is an
    updateReputation: the only call that moves R. Its rate is read back from the R before and
    after: of psi and xi, the one the contract's own integer update maps R to R' with (when both
    do, S = R or w is too small to move R, and psi is kept: it cannot matter there)."""
    if not changes:
        return 0, []
    steps = [st for prev, ch in zip(changes, changes[1:]) if (st := step_of(prev, ch, evaluations)) is not None]
    return changes[0].r, steps


def seed_of(model_id: str, context_id: str, n: int) -> int:
    digest = hashlib.sha256(f"{model_id.lower()}:{context_id.lower()}:{n}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def r_band(start: int, steps: list[Step], seed: int, resamples: int = BAND_RESAMPLES,
           level: float = BAND_LEVEL) -> tuple[float, float] | None:
    """The percentile bootstrap band of R (floats in [0, 1]); None below BAND_MIN_HUMAN steps.

    R after steps a_1..a_m (a = rate*w) from R0 is R0*prod(1-a) + sum_i a_i*S_i*prod_{j>i}(1-a_j):
    computed for all resamples at once with cumulative sums of log(1-a)."""
    m = len(steps)
    if m < BAND_MIN_HUMAN:
        return None
    s = np.array([st.s / WAD for st in steps])
    a = np.array([st.w / WAD * st.thirds / 3 for st in steps])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, m, size=(resamples, m))
    sa, aa = s[idx], a[idx]
    logs = np.log1p(-np.minimum(aa, 1 - 1e-12))
    after = np.cumsum(logs[:, ::-1], axis=1)[:, ::-1] - logs  # sum of log(1-a_j) for j > i
    r = start / WAD * np.exp(logs.sum(axis=1)) + (aa * sa * np.exp(after)).sum(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(r, [tail, 100 - tail])
    return round(float(lo), 6), round(float(hi), 6)


@dataclass(frozen=True)
class Tail:
    """What extending a pair's summary with its later changes needs besides the summary itself."""

    n: int  # changes summarized
    start: int  # R of the first one
    steps: tuple[Step, ...] | None  # the human-rated steps, in chain order (none once broken); None: not
    # read (enough to extend over changes that hold no move of R)
    broken: bool  # some change no rate explains: no band, whatever follows
    last: Change


def summarize(model_id: str, context_id: str, changes: list[Change],
              evaluations: dict[str, Evaluation]) -> PairSummary | None:
    """The board's view of one pair from its history (changes in chain order); None without any."""
    done = summarize_with_tail(model_id, context_id, changes, evaluations)
    return done[0] if done else None


def summarize_with_tail(model_id: str, context_id: str, changes: list[Change],
                        evaluations: dict[str, Evaluation]) -> tuple[PairSummary, Tail] | None:
    """`summarize`, with what `extend` needs to carry it forward."""
    if not changes:
        return None
    last = changes[-1]
    keep = thin(len(changes), HISTORY_POINTS)
    history = {"i": [k + 1 for k in keep], "ra": [_f(changes[k].ra) for k in keep],
               "rh": [_f(changes[k].rh) for k in keep], "r": [_f(changes[k].r) for k in keep]}
    spark = [_f(changes[k].r) for k in thin(len(changes), SPARK_POINTS)]
    broken = False
    try:
        start, steps = recorded_steps(changes, evaluations)
    except ValueError:  # a history no rate explains (not from a consistent chain): no band rather than a wrong one
        start, steps, broken = changes[0].r, [], True
    band = r_band(start, steps, seed_of(model_id, context_id, len(steps)))
    summary = PairSummary(ra=last.ra, rh=last.rh, r=last.r, n_auto=last.n_auto, n_human=last.n_human,
                          block=last.block, timestamp=last.timestamp, history=history, spark=spark,
                          band_lo=band[0] if band else None, band_hi=band[1] if band else None, band_n=len(steps))
    return summary, Tail(len(changes), start, tuple(steps), broken, last)


def extend(model_id: str, context_id: str, summary: PairSummary, tail: Tail, new: list[Change],
           evaluations: dict[str, Evaluation]) -> tuple[PairSummary, Tail]:
    """The summary of the pair's history followed by the changes `new` (in chain order), from its
    summary and tail alone: exactly what `summarize` gives on the whole history, in time and memory
    proportional to the new changes and the kept points (the band, when a new human-rated step
    changes it, is recomputed from the steps kept in the tail). `evaluations` needs to hold only the
    interactions of the new changes. Raises ValueError when `summary` was not thinned as `thin` does."""
    if not new:
        return summary, tail
    if tail.n < 1:
        raise ValueError("nothing to extend: summarize the history instead")
    n_old, n = tail.n, tail.n + len(new)
    hist = summary.history
    if not hist or len(hist["i"]) != len(hist["r"]) or [i - 1 for i in hist["i"]] != thin(n_old, HISTORY_POINTS):
        raise ValueError("the summary's history is not thinned as thin() does")
    spark_at = thin(n_old, SPARK_POINTS)
    if len(summary.spark) != len(spark_at):
        raise ValueError("the summary's sparkline is not thinned as thin() does")
    old = {i - 1: (ra, rh, r) for i, ra, rh, r in zip(hist["i"], hist["ra"], hist["rh"], hist["r"])}
    old_spark = dict(zip(spark_at, summary.spark))

    def point(k: int) -> tuple[float, float, float]:
        if k < n_old:
            return old[k]  # every kept index below n_old was kept before (the stride only doubles)
        ch = new[k - n_old]
        return _f(ch.ra), _f(ch.rh), _f(ch.r)

    keep = thin(n, HISTORY_POINTS)
    points = [point(k) for k in keep]
    history = {"i": [k + 1 for k in keep], "ra": [p[0] for p in points], "rh": [p[1] for p in points],
               "r": [p[2] for p in points]}
    spark = [old_spark[k] if k < n_old else _f(new[k - n_old].r) for k in thin(n, SPARK_POINTS)]

    added: list[Step] = []
    broken = tail.broken
    if not broken:
        prev = tail.last
        try:
            for ch in new:
                step = step_of(prev, ch, evaluations)
                if step is not None:
                    added.append(step)
                prev = ch
        except ValueError:
            broken = True
    steps = tail.steps
    if broken:
        steps, band, band_n = (), None, 0
    elif added:
        if steps is None:
            raise ValueError("the new changes move R: extending needs the tail's steps")
        steps = (*steps, *added)
        band, band_n = r_band(tail.start, list(steps), seed_of(model_id, context_id, len(steps))), len(steps)
    else:  # the same steps: the same band
        band, band_n = ((summary.band_lo, summary.band_hi) if summary.band_lo is not None else None), summary.band_n
    last = new[-1]
    extended = PairSummary(ra=last.ra, rh=last.rh, r=last.r, n_auto=last.n_auto, n_human=last.n_human,
                           block=last.block, timestamp=last.timestamp, history=history, spark=spark,
                           band_lo=band[0] if band else None, band_hi=band[1] if band else None, band_n=band_n)
    return extended, Tail(n, tail.start, steps, broken, last)
