"""The site measures itself: per context, how often the automatic score Sa agrees with the people of
that context, next to "the longer answer wins" on the same items, from what the chain recorded (the
indexed tables of its events).

- Arena votes: a counted vote between two answers to one prompt that preferred one of them, where
  both answers have an automatic score: Sa agrees when the voted answer has the higher Sa. The length
  rule picks the longer answer (in characters, the arena's own measure); both are scored on the same
  votes, with the paired bootstrap of lib/metaeval.py.
- The questionnaire: over the interactions that have both Sh (the user's rating) and Sa, Spearman's
  rank correlation of Sa with Sh, with a bootstrap interval, next to that of the answer's length.

Until a context has MIN_HUMAN items of a kind, its figures are given with `enough: false`: there is
not enough human signal there yet to say anything, and nothing is made up in its place.
"""

from __future__ import annotations

import random

from apps.chain.models import ArenaBattle, Context
from apps.chain.models import LedgerInteraction
from apps.chat.models import Interaction
from lib.metaeval import correlations, outcome_validity, percentile_bounds
from lib.reputation import GLOBAL_CONTEXT_ID

MIN_HUMAN = 30
CORRELATION_ROUNDS = 500
GLOBAL_NAME = "Global"


def _lengths(ids: set[str]) -> dict[str, int]:
    return {iid: len(text) for iid, text in Interaction.objects.filter(interaction_id__in=ids).values_list(
        "interaction_id", "answer")}


def _prefer(x: float, y: float) -> str:
    return "a" if x > y else "b" if y > x else "tie"


def vote_figures(context_id: str | None) -> dict:
    """Sa against the counted arena votes of a context (None: every context, the global board)."""
    battles = ArenaBattle.objects.filter(counted=True, voided=False, outcome__in=[1, 2])
    if context_id is not None:
        battles = battles.filter(context_id=context_id)
    rows = list(battles.order_by("battle_id").values_list("interaction_a", "interaction_b", "outcome"))
    ids = {i for a, b, _ in rows for i in (a, b)}
    sa = dict(LedgerInteraction.objects.filter(interaction_id__in=ids, has_reference=True).values_list(
        "interaction_id", "sa"))
    lengths = _lengths(ids)
    outcomes, unscored = [], 0
    for a, b, outcome in rows:
        if a not in sa or b not in sa or a not in lengths or b not in lengths:
            unscored += 1
            continue
        human = "a" if outcome == 1 else "b"
        outcomes.append((int(_prefer(sa[a], sa[b]) == human), int(_prefer(lengths[a], lengths[b]) == human)))
    figures = outcome_validity(outcomes)
    figures.pop("bootstrap")
    return {**figures, "votes": len(rows), "votes_without_scores": unscored, "enough": len(outcomes) >= MIN_HUMAN}


def rating_figures(context_id: str | None) -> dict:
    """Spearman of Sa and of the answer's length with Sh, over the interactions that have both scores."""
    rated = LedgerInteraction.objects.filter(has_reference=True, sh__isnull=False)
    if context_id is not None:
        rated = rated.filter(context_id=context_id)
    rows = list(rated.order_by("interaction_id").values_list("interaction_id", "sa", "sh"))
    lengths = _lengths({iid for iid, _, _ in rows})
    rows = [(sa, sh, lengths[iid]) for iid, sa, sh in rows if iid in lengths]
    n = len(rows)

    def rho(items, k):
        return correlations([r[k] for r in items], [r[1] for r in items])["spearman"]

    out = {"n": n, "enough": n >= MIN_HUMAN, "spearman": None, "spearman_ci_low": None, "spearman_ci_high": None,
           "length_spearman": None}
    if n < 3:
        return out
    rng = random.Random(0)
    draws = [rho([rows[i] for i in rng.choices(range(n), k=n)], 0) for _ in range(CORRELATION_ROUNDS)]
    draws = [d for d in draws if d is not None]
    low, high = percentile_bounds(draws) if draws else (None, None)
    out.update(spearman=_r(rho(rows, 0)), length_spearman=_r(rho(rows, 2)), spearman_ci_low=_r(low),
               spearman_ci_high=_r(high))
    return out


def _r(x):
    return None if x is None else round(x, 4)


def site_validity(context_id: str | None = "all") -> dict[str, dict]:
    """{context id: {"name", "votes": vote_figures, "ratings": rating_figures}} for one context, or for
    the global board and every context ("all")."""
    names = {GLOBAL_CONTEXT_ID: GLOBAL_NAME, **dict(Context.objects.values_list("context_id", "name"))}
    chosen = list(names) if context_id == "all" else [context_id]
    return {c: {"name": names.get(c, c), "votes": vote_figures(None if c == GLOBAL_CONTEXT_ID else c),
                "ratings": rating_figures(None if c == GLOBAL_CONTEXT_ID else c)} for c in chosen}


def plain_line(f: dict) -> str:
    """One line a visitor reads: how often Sa agrees with people's votes here, or that it cannot be said yet."""
    v = f["votes"]
    if not v["enough"]:
        return (f"The automatic score cannot be checked against people here yet: {v['pairs_non_tie']} arena votes "
                f"between two scored answers, {MIN_HUMAN} needed.")

    def pct(x):
        return f"{round(100 * x)}%"

    return (f"The automatic score agrees with people's votes here {pct(v['accuracy_non_tie'])} "
            f"[{pct(v['accuracy_ci_low'])}-{pct(v['accuracy_ci_high'])}] of {v['pairs_non_tie']}; preferring the "
            f"longer answer: {pct(v['length_accuracy_non_tie'])}.")
