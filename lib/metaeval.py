"""Agreement statistics for meta-evaluation (ScaleEval §3.3, §6): pure functions, no Django.

Verdicts are the debate's numbering (lib/debate.py): 1 = submission 1 better, 2 = submission 2
better, 0 = neither. None stands for a verdict that could not be read.

Definitions (ScaleEval, Chern et al. 2024):
- Example-level agreement rate, eq. (2): META(E) = (1/n) sum_i delta(E_i, G_i) over the n examples
  that have a gold verdict G_i. An evaluator's unreadable verdict (None) is counted as a
  disagreement, never dropped, so an evaluator cannot gain by failing to answer.
- System-level agreement, eq. (3): META(E) = delta(mode(E), mode(G)) in {0, 1}: whether the
  evaluator and the gold standard name the same most frequent outcome ("which LLMs produce the
  best responses", §6) over the same examples. Verdicts are compared as preferences between the
  two *systems* (who wrote which submission), since the submissions' order varies per example;
  callers pass outcomes already mapped to a system (see `system_preference`). When the most
  frequent value is tied, mode is undefined and so is the agreement (None); unreadable verdicts
  take no part in the evaluator's mode.
- Fleiss' kappa for several raters per item; see `fleiss_kappa` for items rated by different
  numbers of raters.

Against human labels: `read_pairs` and `pairs_report` score an evaluator's pairwise
verdicts ("a", "b", "tie") with the same two definitions; `score_correlations` gives Pearson,
Spearman and Kendall of absolute scores (G-Eval-Dialogue, Cavaliere et al.).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

NEITHER, FIRST, SECOND = 0, 1, 2
CATEGORIES = (NEITHER, FIRST, SECOND)


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa of items rated into categories: counts[i][j] is the number of raters who put
    item i in category j (all rows the same length).

    Items may have different numbers of raters n_i (experts answer different items). Each item's
    observed agreement P_i = sum_j n_ij (n_ij - 1) / (n_i (n_i - 1)) is averaged over the items;
    the category shares p_j pool all ratings, p_j = sum_i n_ij / sum_i n_i, and P_e = sum_j p_j^2.
    With equal n_i this is exactly Fleiss (1971). Items with fewer than two ratings carry no
    agreement information and are left out. None when undefined: no item with two ratings, or
    every rating in one category (P_e = 1).
    """
    rows = [list(row) for row in counts if sum(row) >= 2]
    if not rows:
        return None
    width = len(rows[0])
    if any(len(row) != width for row in rows) or any(c < 0 for row in rows for c in row):
        raise ValueError("every item needs one non-negative count per category")
    p_bar = sum(sum(c * (c - 1) for c in row) / (sum(row) * (sum(row) - 1)) for row in rows) / len(rows)
    total = sum(sum(row) for row in rows)
    p_e = sum((sum(row[j] for row in rows) / total) ** 2 for j in range(width))
    if p_e >= 1.0:
        return None
    return (p_bar - p_e) / (1.0 - p_e)


def category_counts(verdicts: Sequence[int], categories: Sequence[int] = CATEGORIES) -> list[int]:
    """One item's row for `fleiss_kappa`: how many raters gave each category."""
    tally = Counter(verdicts)
    return [tally[c] for c in categories]


def majority(verdicts: Sequence[int]) -> int | None:
    """The verdict most raters gave; None when there is none or the top is tied (no gold)."""
    ranked = Counter(verdicts).most_common()
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def mode(values: Sequence[Hashable | None]) -> Hashable | None:
    """The value appearing most often (eq. 3's mode), ignoring None; None when empty or tied."""
    return majority([v for v in values if v is not None])


@dataclass(frozen=True)
class ExampleAgreement:
    n: int  # examples with a gold verdict
    agreed: int
    unparseable: int  # of the n, how many the evaluator gave no readable verdict for

    @property
    def rate(self) -> float | None:
        return self.agreed / self.n if self.n else None


def example_agreement(pairs: Sequence[tuple[int | None, int]]) -> ExampleAgreement:
    """Eq. (2) over (evaluator verdict, gold verdict) pairs; an unreadable verdict (None) disagrees."""
    agreed = sum(1 for e, g in pairs if e is not None and e == g)
    return ExampleAgreement(n=len(pairs), agreed=agreed, unparseable=sum(1 for e, _ in pairs if e is None))


def system_agreement(pairs: Sequence[tuple[Hashable | None, Hashable]]) -> int | None:
    """Eq. (3) over (evaluator outcome, gold outcome) pairs: 1 when both modes are the same
    value, 0 when they differ, None when either mode is undefined (no values or a tie)."""
    e_mode = mode([e for e, _ in pairs])
    g_mode = mode([g for _, g in pairs])
    if e_mode is None or g_mode is None:
        return None
    return int(e_mode == g_mode)


def system_preference(verdict: int | None, system_1: str, system_2: str) -> str | None:
    """A verdict as a preference between systems: the better system's name, "tie" for neither,
    None when unreadable. Lets examples whose submissions came in either order be counted together."""
    if verdict is None:
        return None
    return {FIRST: system_1, SECOND: system_2, NEITHER: "tie"}[verdict]


# --- pairwise meta-evaluation against human labels -----------------------------------
#
# A pairs file is JSONL, one pair per line: `id`, `question`, `category`, `answer_a`, `answer_b`,
# `human` ("a", "b" or "tie"), optionally `reference`, `references` (a list of reference answers,
# e.g. other models' answers to the same prompt, as the oracle uses them), `model_a` and `model_b`. Verdicts "a",
# "b", "tie" are the numbering above as FIRST, SECOND, NEITHER; an evaluator's None (undecided)
# disagrees with everything, as an unreadable verdict does in eq. (2).

PAIR_VERDICTS = {"a": FIRST, "b": SECOND, "tie": NEITHER}
PAIR_REQUIRED = ("id", "question", "category", "answer_a", "answer_b", "human")
PAIR_OPTIONAL = ("reference", "model_a", "model_b")
PAIR_ANSWERS = ("answer_a", "answer_b")  # may be empty: a model that answered nothing is judged on it


class PairsFileError(ValueError):
    """A pairs file line that cannot be used; the message names the line."""


def read_pairs(lines, source: str = "pairs file") -> list[dict]:
    """The pairs of a JSONL text (an iterable of lines), checked: every required field a non-empty
    string (the answers may be empty) (an integer `id` is read as its text), `human` one of a/b/tie, optional fields strings
    or absent (null counts as absent), `model_a` and `model_b` both or neither and different, no
    id twice. Blank lines are skipped. Raises PairsFileError naming the first bad line."""
    pairs: list[dict] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise PairsFileError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise PairsFileError(f"{where}: expected a JSON object")
        if isinstance(row.get("id"), int) and not isinstance(row["id"], bool):
            row["id"] = str(row["id"])
        missing = [k for k in PAIR_REQUIRED if not isinstance(row.get(k), str)
                   or (k not in PAIR_ANSWERS and not row[k].strip())]
        if missing:
            raise PairsFileError(f"{where}: missing or empty {', '.join(f'`{k}`' for k in missing)}")
        if row["human"] not in PAIR_VERDICTS:
            raise PairsFileError(f"{where}: `human` must be \"a\", \"b\" or \"tie\", got {row['human']!r}")
        pair = {k: row[k] for k in PAIR_REQUIRED}
        for k in PAIR_OPTIONAL:
            if row.get(k) is None:
                continue
            if not isinstance(row[k], str):
                raise PairsFileError(f"{where}: `{k}` must be a string")
            pair[k] = row[k]
        refs = row.get("references")
        if refs is not None:
            if not isinstance(refs, list) or not all(isinstance(r, str) and r.strip() for r in refs):
                raise PairsFileError(f"{where}: `references` must be a list of non-empty strings")
            if refs:
                pair["references"] = refs
        if ("model_a" in pair) != ("model_b" in pair):
            raise PairsFileError(f"{where}: give both `model_a` and `model_b` or neither")
        if "model_a" in pair and pair["model_a"] == pair["model_b"]:
            raise PairsFileError(f"{where}: `model_a` and `model_b` are the same system")
        if pair["id"] in first_line:
            raise PairsFileError(f"{where}: duplicate id {pair['id']!r} (first on line {first_line[pair['id']]})")
        first_line[pair["id"]] = number
        pairs.append(pair)
    if not pairs:
        raise PairsFileError(f"{source}: no pairs")
    return pairs


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _agreement(rows: Sequence[tuple[dict, str | None]]) -> dict:
    """Eq. (2) twice: on the pairs humans did not tie (accuracy) and on all (ties count when both tie)."""
    coded = [(PAIR_VERDICTS.get(v) if v is not None else None, PAIR_VERDICTS[p["human"]]) for p, v in rows]
    with_ties = example_agreement(coded)
    non_tie = example_agreement([(e, g) for e, g in coded if g != NEITHER])
    return {"n": with_ties.n, "human_ties": with_ties.n - non_tie.n, "non_tie": non_tie.n,
            "agreed_non_tie": non_tie.agreed, "accuracy_non_tie": _round(non_tie.rate),
            "agreed_with_ties": with_ties.agreed, "agreement_with_ties": _round(with_ties.rate),
            "undecided": with_ties.unparseable, "evaluator_ties": sum(1 for _, v in rows if v == "tie")}


def pairs_report(pairs: Sequence[dict], verdicts: Sequence[str | None]) -> dict:
    """An evaluator's verdicts on `pairs` against the human labels.

    Overall and per category: `accuracy_non_tie` (eq. 2 over pairs humans did not tie; an
    evaluator tie there is wrong), `agreement_with_ties` (eq. 2 over all pairs; a tie agrees with a
    human tie), `undecided` (None verdicts, counted wrong). `system_level`: eq. (3) per category and
    system pair (pairs with `model_a`/`model_b`; either order counts alike), as in
    apps/annotate/report.py; a group whose human or evaluator mode is tied is `undefined`; None when
    no pair names its systems."""
    if len(verdicts) != len(pairs):
        raise ValueError(f"{len(verdicts)} verdicts for {len(pairs)} pairs")
    bad = [v for v in verdicts if v is not None and v not in PAIR_VERDICTS]
    if bad:
        raise ValueError(f"verdicts must be 'a', 'b', 'tie' or None, got {bad[0]!r}")
    rows = list(zip(pairs, verdicts))
    categories = sorted({p["category"] for p in pairs})
    report = _agreement(rows)
    report["per_category"] = {c: _agreement([r for r in rows if r[0]["category"] == c]) for c in categories}

    groups: dict[tuple[str, tuple[str, str]], list] = {}
    for p, v in rows:
        if "model_a" not in p:
            continue
        key = (p["category"], tuple(sorted((p["model_a"], p["model_b"]))))
        e = system_preference(PAIR_VERDICTS.get(v) if v is not None else None, p["model_a"], p["model_b"])
        g = system_preference(PAIR_VERDICTS[p["human"]], p["model_a"], p["model_b"])
        groups.setdefault(key, []).append((e, g))
    if not groups:
        report["system_level"] = None
        return report
    system_pairs = []
    for (category, systems), prefs in sorted(groups.items()):
        system_pairs.append({"category": category, "systems": list(systems), "n": len(prefs),
                             "human_mode": mode([g for _, g in prefs]), "evaluator_mode": mode([e for e, _ in prefs]),
                             "agreed": system_agreement(prefs)})
    for c in categories:
        results = [s["agreed"] for s in system_pairs if s["category"] == c and s["agreed"] is not None]
        if any(s["category"] == c for s in system_pairs):
            report["per_category"][c].update(system_agreed=sum(results), system_compared=len(results))
    decided = [s["agreed"] for s in system_pairs if s["agreed"] is not None]
    report["system_level"] = {"agreed": sum(decided), "compared": len(decided),
                              "rate": _round(sum(decided) / len(decided) if decided else None),
                              "undefined": len(system_pairs) - len(decided), "pairs": system_pairs}
    return report


# --- correlation with absolute human scores (G-Eval-Dialogue §4.4, §6) --------------------------------
#
# Pearson r, Spearman rho and Kendall tau-b (ties handled; scipy's defaults). G-Eval-Dialogue reports one
# figure per criterion; its own experiment (E3) pools all 360 Topical-Chat responses, while it says
# G-Eval's original setting correlates the 6 responses of each dialogue. Both are given: `pooled`,
# and `per_context`, the mean over contexts of each context's correlation (contexts where it is
# undefined, a constant side or fewer than three scored items, are left out and counted). Two points
# always correlate at +1 or -1, so a correlation over two says nothing and is not given.

MIN_CORRELATION_N = 3

CORRELATIONS = ("pearson", "spearman", "kendall")


def correlations(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float | None]:
    """{pearson, spearman, kendall} of two equally long samples; None where undefined (fewer than
    MIN_CORRELATION_N values, or one side constant)."""
    if len(xs) != len(ys):
        raise ValueError("correlations need samples of the same length")
    if len(xs) < MIN_CORRELATION_N or len(set(xs)) < 2 or len(set(ys)) < 2:
        return dict.fromkeys(CORRELATIONS)
    from scipy import stats

    found = {"pearson": stats.pearsonr(xs, ys)[0], "spearman": stats.spearmanr(xs, ys)[0],
             "kendall": stats.kendalltau(xs, ys)[0]}  # tau-b
    return {k: None if math.isnan(v) else float(v) for k, v in found.items()}


def score_correlations(human: Sequence[float], scores: Sequence[float | None],
                       groups: Sequence[Hashable] | None = None) -> dict:
    """How an evaluator's scores correlate with human scores: `pooled` over every scored item and,
    with `groups` (e.g. the dialogue context of each item), `per_context` averaged over groups.
    Items the evaluator could not score (None) are left out and counted as `unscored`."""
    if len(scores) != len(human) or (groups is not None and len(groups) != len(human)):
        raise ValueError("human scores, evaluator scores and groups must be equally long")
    keep = [i for i, s in enumerate(scores) if s is not None]
    out = {"n": len(keep), "unscored": len(scores) - len(keep),
           "pooled": {k: _round(v) for k, v in correlations([scores[i] for i in keep],
                                                             [human[i] for i in keep]).items()}}
    if groups is not None:
        by_group: dict[Hashable, list[int]] = {}
        for i in keep:
            by_group.setdefault(groups[i], []).append(i)
        per = [correlations([scores[i] for i in idx], [human[i] for i in idx]) for idx in by_group.values()]
        out["per_context"] = {}
        for k in CORRELATIONS:
            defined = [c[k] for c in per if c[k] is not None]
            out["per_context"][k] = _round(sum(defined) / len(defined) if defined else None)
        out["per_context"]["contexts"] = len(by_group)
        out["per_context"]["undefined"] = {k: sum(1 for c in per if c[k] is None) for k in CORRELATIONS}
    return out


# --- position bias and calibration ---------------------------------------------------
#
# MT-Bench's swap ("Judging LLM-as-a-judge", Zheng et al. 2023): a judge asked a pair in both orders
# gives two verdicts in the pair's own numbering; when they differ (the verdict flips with the
# order, or one order ties), the pair counts as a tie; an unreadable verdict makes it unreadable.

def swap_rule(verdict: int | None, swapped_verdict: int | None) -> int | None:
    """The verdict of a judge asked both orders (both given in the pair's numbering): the common
    verdict when they agree, NEITHER when they differ, None when either is unreadable."""
    if verdict is None or swapped_verdict is None:
        return None
    return verdict if verdict == swapped_verdict else NEITHER


def position_bias(asked: Sequence[tuple[int | None, int | None]]) -> dict:
    """A judge's position bias from pairs asked in both orders: each item is (verdict with the pair
    in its order, verdict with the pair swapped), both *as the judge gave them* (1 = what it was
    shown first).

    - `consistency`: over the pairs with both verdicts readable, the share whose two verdicts
      name the same submission (MT-Bench's consistency);
    - `first_position_win_rate`: over every readable verdict of either order that names a winner
      (ties left out), the share that chose the submission shown first (0.5: no position bias).
    """
    both = [(a, b) for a, b in asked if a is not None and b is not None]
    consistent = sum(1 for a, b in both if a == (b if b == NEITHER else 3 - b))
    decided = [v for pair in asked for v in pair if v in (FIRST, SECOND)]
    first = sum(1 for v in decided if v == FIRST)
    return {"pairs": len(asked), "both_readable": len(both), "consistent": consistent,
            "consistency": _round(consistent / len(both)) if both else None,
            "decided_verdicts": len(decided), "first_position_wins": first,
            "first_position_win_rate": _round(first / len(decided)) if decided else None}


def expected_calibration_error(predictions: Sequence[tuple[dict, Hashable]], bins: int = 10) -> dict:
    """Expected calibration error of probabilistic verdicts against gold labels.

    Each prediction is (distribution over the allowed values, gold value). Its confidence is the
    highest probability and it is correct when that value is the gold one (a tie between the top
    values takes the first in the distribution's order). Confidences fall into `bins` equal-width
    bins over [0, 1] (a confidence of exactly 1 in the last); ECE = sum_b (n_b / N) |acc_b - conf_b|,
    acc_b and conf_b being the bin's accuracy and mean confidence (Guo et al. 2017). None when there
    is no prediction."""
    if bins < 1:
        raise ValueError("bins must be at least 1")
    rows = []
    for dist, gold in predictions:
        if not dist:
            raise ValueError("a prediction needs a distribution")
        best = max(dist, key=lambda v: dist[v])
        rows.append((float(dist[best]), best == gold))
    table = [[] for _ in range(bins)]
    for confidence, correct in rows:
        table[min(bins - 1, int(confidence * bins))].append((confidence, correct))
    ece = sum(len(b) / len(rows) * abs(sum(c for _, c in b) / len(b) - sum(p for p, _ in b) / len(b))
              for b in table if b) if rows else None
    return {"n": len(rows), "bins": bins, "ece": _round(ece),
            "accuracy": _round(sum(c for _, c in rows) / len(rows)) if rows else None,
            "mean_confidence": _round(sum(p for p, _ in rows) / len(rows)) if rows else None}


# --- validity: accuracy against the length rule, with intervals ----------------------------------
#
# Humans favour longer answers partly out of bias, so an evaluator is worth trusting only where it
# beats "the longer answer wins" on the same decided pairs (the pairs humans did not tie). Both are
# scored the same way (a tie or no verdict is wrong). Intervals are percentile bootstraps over the
# decided pairs with `random.Random(seed)` draws: anyone holding the per-pair outcomes rebuilds the
# same interval, so a weight derived from it can be checked. The margin's interval is paired: each
# resample draws pairs, and both rules are scored on the same draw.

BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_SEED = 0
MIN_BOOTSTRAP_ROUNDS = 200
BOOTSTRAP_DRAWS = 20_000_000  # resampled pairs a computation of the arena votes' figures draws, from 10,000 on


def bootstrap_rounds(n: int) -> int:
    """The bootstrap rounds of n decided arena votes (a board's figures and the factor of a context's
    votes, lib.weighting.count_figures): 2,000 up to 10,000 votes, then BOOTSTRAP_DRAWS // n, at least
    MIN_BOOTSTRAP_ROUNDS. A fixed function of n, written into the votes' qualification record
    (`bootstrap.rounds`), so the board, the oracle and whoever checks either use the same rounds.

    A round draws n pairs, so 2,000 rounds cost 2,000 n draws (14 s of CPU at a million votes); at a
    bounded number of draws the cost is bounded whatever n. Fewer rounds are enough where there are
    more votes: the interval's width shrinks as 1/sqrt(n) (a share's standard error is sqrt(v / n), v
    the per-vote variance, at most 1 for the margin), while the Monte Carlo error of a percentile bound
    estimated from R rounds is about 2.7 / sqrt(R) of that standard error (the 2.5% quantile's
    sqrt(0.025 * 0.975 / R) over the normal density there). At R = BOOTSTRAP_DRAWS / n that error is
    2.7 sqrt(v / BOOTSTRAP_DRAWS) of n: the same share of the votes at every n from 10,000 on, what
    2,000 rounds give at 10,000 votes (under 0.06% of n), where the interval itself is a few percent
    wide. Above 100,000 votes the floor of 200 rounds takes over (a bound's error 0.19 of its standard
    error, shrinking with n, and the cost growing with it again: 200 n draws). Labelled sets keep 2,000
    rounds (apps/annotate/qualify.py): their n is a few thousand, where this gives 2,000 anyway."""
    return min(BOOTSTRAP_ROUNDS, max(MIN_BOOTSTRAP_ROUNDS, BOOTSTRAP_DRAWS // max(n, 1)))


def decided_outcomes(pairs: Sequence[dict], verdicts: Sequence[str | None],
                     baseline: Sequence[str | None]) -> list[tuple[int, int]]:
    """(evaluator right, baseline right) as 0/1 for each pair humans did not tie, in order."""
    if not (len(pairs) == len(verdicts) == len(baseline)):
        raise ValueError("pairs, verdicts and baseline verdicts must be equally long")
    return [(int(v == p["human"]), int(b == p["human"])) for p, v, b in zip(pairs, verdicts, baseline)
            if p["human"] != "tie"]


def percentile_bounds(draws: Sequence[float]) -> tuple:
    """The 95% percentile interval of bootstrap draws (at least one)."""
    ordered = sorted(draws)
    cut = int(len(ordered) * 0.025)
    return ordered[cut], ordered[len(ordered) - 1 - cut]


def bootstrap_counts(outcomes: Sequence[tuple[int, int]], rounds: int = BOOTSTRAP_ROUNDS,
                     seed: int = BOOTSTRAP_SEED) -> dict:
    """Integer bounds of the 95% percentile bootstrap, over `rounds` resamples of the outcomes:
    `right` (evaluator right) and `margin` (evaluator right minus baseline right), each as counts
    out of n = len(outcomes); n = 0 gives None bounds.

    Each resample is the n pairs `random.Random(seed).choices(range(n), k=n)` draws, round after round
    from one generator: that is the definition anyone rebuilds. The draws are made here by numpy's
    Mersenne Twister started in the same state, turning its 53-bit doubles into positions as `choices`
    does (floor(u * n)), so the positions are the same, bit for bit, at a few nanoseconds each
    (tests/lib/test_validity.py holds the two equal)."""
    n = len(outcomes)
    if rounds < 40:
        raise ValueError("a 95% interval needs at least 40 bootstrap rounds")
    if not n:
        return {"n": 0, "right": (None, None), "margin": (None, None)}
    pairs = [(int(e), int(b)) for e, b in outcomes]
    starts = [i for i in range(n) if i == 0 or pairs[i] != pairs[i - 1]]
    if len(starts) <= FEW_RUNS:  # a few runs of equal outcomes (a board's votes, grouped): counted by run
        return bootstrap_runs([(pairs[s], t - s) for s, t in zip(starts, starts[1:] + [n])], rounds, seed)
    right_sums, diff_sums = _gathered_sums([(e, e - b) for e, b in pairs], rounds, seed)
    return {"n": n, "right": percentile_bounds(right_sums), "margin": percentile_bounds(diff_sums)}


def bootstrap_runs(runs: Sequence[tuple[tuple[int, int], int]], rounds: int = BOOTSTRAP_ROUNDS,
                   seed: int = BOOTSTRAP_SEED) -> dict:
    """`bootstrap_counts` of outcomes listed run after run, `runs` = ((evaluator right, baseline right),
    how many in a row) in their order: the same draws and bounds, without listing the n outcomes (a
    board's votes, grouped by outcome). Counting the draws that fall below each run's start gives every
    run's count per round, so nothing is gathered."""
    runs = [(outcome, int(k)) for outcome, k in runs if k]
    n = sum(k for _, k in runs)
    if rounds < 40:
        raise ValueError("a 95% interval needs at least 40 bootstrap rounds")
    if not n:
        return {"n": 0, "right": (None, None), "margin": (None, None)}
    starts = [0]
    for _, k in runs[:-1]:
        starts.append(starts[-1] + k)
    counts = _run_counts(_python_random(seed), n, starts, rounds)
    sums = counts @ np.array([(int(e), int(e) - int(b)) for (e, b), _ in runs], dtype=np.int64)
    return {"n": n, "right": percentile_bounds(sums[:, 0].tolist()), "margin": percentile_bounds(sums[:, 1].tolist())}


BOOTSTRAP_CHUNK = 1 << 16  # drawn positions held at once: small enough to stay in a core's cache
FEW_RUNS = 16  # outcomes in at most this many runs of equal rows are counted by run, not gathered


def _gathered_sums(rows: list[tuple[int, int]], rounds: int, seed: int) -> tuple[list[int], list[int]]:
    """Per resample, the sums of both columns of `rows` over the positions drawn."""
    n = len(rows)
    draws = _python_random(seed)
    columns = np.array(rows, dtype=np.int64).T
    per_chunk = max(1, BOOTSTRAP_CHUNK // n)
    buffer = np.empty(min(per_chunk, rounds) * n)
    right_sums: list[int] = []
    diff_sums: list[int] = []
    for start in range(0, rounds, per_chunk):
        k = min(per_chunk, rounds - start)
        x = buffer[:k * n]
        draws.random(out=x)
        x *= float(n)
        drawn = np.floor(x).astype(np.intp).reshape(k, n)
        right_sums += columns[0][drawn].sum(axis=1).tolist()
        diff_sums += columns[1][drawn].sum(axis=1).tolist()
    return right_sums, diff_sums


def _run_counts(draws: np.random.Generator, n: int, starts: list[int], rounds: int) -> np.ndarray:
    """(rounds, runs): how many of each round's n drawn positions fall in each run [starts[j], starts[j+1]).

    `choices` makes a position floor(u * n) of a double u, and floor(u * n) < s exactly when u is below
    the threshold `position_threshold(s, n)`, so the draws are compared as they come, with no product
    and no floor. Rounds of more than BOOTSTRAP_CHUNK positions are drawn in pieces, in order."""
    thresholds = [position_threshold(s, n) for s in starts[1:]]
    below = np.zeros((rounds, len(starts) + 1), dtype=np.int64)
    below[:, -1] = n
    per_chunk = max(1, BOOTSTRAP_CHUNK // n)
    size = min(per_chunk * n, rounds * n) if n <= BOOTSTRAP_CHUNK else BOOTSTRAP_CHUNK
    buffer, mask = np.empty(size), np.empty(size, dtype=bool)
    if n <= BOOTSTRAP_CHUNK:
        for start in range(0, rounds, per_chunk):
            k = min(per_chunk, rounds - start)
            x, m = buffer[:k * n].reshape(k, n), mask[:k * n].reshape(k, n)
            draws.random(out=buffer[:k * n])
            for j, t in enumerate(thresholds, start=1):
                np.less(x, t, out=m)
                below[start:start + k, j] = np.count_nonzero(m, axis=1)
    else:
        for r in range(rounds):
            for start in range(0, n, BOOTSTRAP_CHUNK):
                piece = min(BOOTSTRAP_CHUNK, n - start)
                x, m = buffer[:piece], mask[:piece]
                draws.random(out=x)
                for j, t in enumerate(thresholds, start=1):
                    below[r, j] += np.count_nonzero(np.less(x, t, out=m))
    return np.diff(below, axis=1)


def position_threshold(s: int, n: int) -> float:
    """The least double u that `random()` can return (a multiple of 2**-53) with floor(u * n) >= s, the
    product rounded as Python and numpy round it: so `u < position_threshold(s, n)` exactly when the
    position `choices` makes of u is below s (0 < s < n)."""
    step, scale = 2.0 ** -53, float(n)
    k = (s << 53) // n  # k * n / 2**53 <= s: at or just below the threshold, before rounding
    while k > 0 and (k - 1) * step * scale >= s:
        k -= 1
    while k * step * scale < s:
        k += 1
    return k * step


def _python_random(seed: int) -> np.random.Generator:
    """A numpy generator in the state `random.Random(seed)` starts in: both are MT19937, and both make a
    double of two 32-bit outputs as ((a >> 5) * 2**26 + (b >> 6)) / 2**53."""
    _version, state, _gauss = random.Random(seed).getstate()
    generator = np.random.MT19937()
    generator.state = {"bit_generator": "MT19937",
                       "state": {"key": np.array(state[:-1], dtype=np.uint32), "pos": state[-1]}}
    return np.random.Generator(generator)


def validity_factor_wad(margin_low: int | None, n: int, baseline_right: int) -> int:
    """The weight an automatic score earns, as an 18-decimal fixed-point share of 1 (WAD = 10**18).

    0 while the lower end of the evaluator's 95% margin over the length rule is not above 0 (it has
    not shown it beats the rule). Above that, the share of the length rule's errors the evaluator is
    shown to fix at that lower end: margin_low / (n - baseline_right), both out of the same n decided
    pairs, capped at 1. It grows with the margin, reaches 1 only for an evaluator shown to be right
    wherever the rule is wrong, and costs a strong rule's set more to beat (on PandaLM, where people
    side with the longer answer two times in three, a 10-point lower bound earns about 0.3; on an
    LLMBar adversarial set, where the rule is mostly wrong, the same lower bound earns about 0.13).
    Integer arithmetic, so every verifier gets the same number."""
    if margin_low is None or margin_low <= 0 or n <= baseline_right:
        return 0
    return min(10 ** 18, margin_low * 10 ** 18 // (n - baseline_right))


def prefers_longer(pairs: Sequence[dict], verdicts: Sequence[str | None]) -> dict:
    """How often an evaluator's decided verdicts pick the longer answer (in words), over the pairs
    whose answers differ in length: 0.5 is blind to length, 1.0 is the length rule."""
    from lib.evaluators import words

    longer = decided = 0
    for p, v in zip(pairs, verdicts):
        la, lb = words(p["answer_a"]), words(p["answer_b"])
        if v in ("a", "b") and la != lb:
            decided += 1
            longer += (v == "a") == (la > lb)
    return {"decided": decided, "longer": longer, "rate": _round(longer / decided) if decided else None}


def validity(pairs: Sequence[dict], verdicts: Sequence[str | None], baseline: Sequence[str | None], *,
             rounds: int = BOOTSTRAP_ROUNDS, seed: int = BOOTSTRAP_SEED) -> dict:
    """An evaluator against the length rule on the same decided pairs: its accuracy with a 95%
    bootstrap interval, the rule's accuracy, the margin (evaluator minus rule) with its paired
    interval, n, and the weight it earns (`validity_factor_wad`, as a number in [0, 1])."""
    return {**outcome_validity(decided_outcomes(pairs, verdicts, baseline), rounds=rounds, seed=seed),
            "prefers_longer": prefers_longer(pairs, verdicts)}


def outcome_validity(outcomes: Sequence[tuple[int, int]], *, rounds: int = BOOTSTRAP_ROUNDS,
                     seed: int = BOOTSTRAP_SEED) -> dict:
    """`validity`'s figures from (evaluator right, length rule right) per decided pair."""
    n = len(outcomes)
    right = sum(e for e, _ in outcomes)
    base = sum(b for _, b in outcomes)
    boot = bootstrap_counts(outcomes, rounds, seed)
    factor = validity_factor_wad(boot["margin"][0], n, base)

    def share(count):
        return None if count is None or not n else _round(count / n)

    return {"pairs_non_tie": n, "accuracy_non_tie": share(right), "accuracy_ci_low": share(boot["right"][0]),
            "accuracy_ci_high": share(boot["right"][1]), "length_accuracy_non_tie": share(base),
            "margin_over_length": share(right - base) if n else None,
            "margin_over_length_ci_low": share(boot["margin"][0]),
            "margin_over_length_ci_high": share(boot["margin"][1]),
            "weight": _round(factor / 10 ** 18), "weight_wad": str(factor),
            "bootstrap": {"rounds": rounds, "seed": seed, "right": right, "length_right": base,
                          "margin_low_count": boot["margin"][0]}}
