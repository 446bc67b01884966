"""Agreement statistics for meta-evaluation (seed 003 §3.3, §6): pure functions, no Django.

Verdicts are the debate's numbering (lib/debate.py): 1 = submission 1 better, 2 = submission 2
better, 0 = neither. None stands for a verdict that could not be read.

Definitions (seed 003):
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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

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
