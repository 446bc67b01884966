"""The site measures itself: per context, how often the automatic score Sa agrees with the people of
that context, next to "the longer answer wins" on the same items, from what the chain recorded (the
indexed tables of its events).

- Arena votes: a counted vote between two answers to one prompt that preferred one of them, where
  both answers have an automatic score: Sa agrees when the voted answer has the higher Sa. The length
  rule picks the longer answer (in characters, the arena's own measure, of the answer its evidence record
  holds: LedgerInteraction.answer_chars, as `verify` reads it, so that a conversation deleted changes
  nothing here; an answer whose record is not read yet counts as unscored); both are scored on the same
  votes, with the paired bootstrap of lib/weighted.py (the board's JSON carries the same figures, and
  weighs the automatic score by them).
- The questionnaire: over the interactions that have both Sh (the user's rating) and Sa, Spearman's
  rank correlation of Sa with Sh, with a bootstrap interval, next to that of the answer's length (the
  same); an answer whose record is not read yet is left out and counted (`unread`).

Until a context has MIN_HUMAN items of a kind, its figures are given with `enough: false` (the votes'
figures then null but their counts): there is not enough human signal there yet to say anything, and
nothing is made up in its place.
"""

from __future__ import annotations

from django.db import connection

from apps.chain.models import ArenaBattle, Context, LedgerInteraction
from lib.reputation import GLOBAL_CONTEXT_ID
from lib.weighted import MIN_HUMAN, VoteCounts, ordered_votes, rating_validity, vote_outcome, vote_validity

GLOBAL_NAME = "Global"


def _in_context(column: str, context_id: str | None) -> tuple[str, list[str]]:
    """The SQL condition (appended with AND) and its parameters that keep one context's rows; none for
    every context."""
    return ("", []) if context_id is None else (f" AND {column} = %s", [context_id])


def _votes(columns: str, context_id: str | None, tail: str = "") -> list[tuple]:
    """Rows of `columns` over the counted votes of a context (None: every context) that preferred one
    answer, each battle `b` joined to its answers' ledger rows `la` and `lb` (NULL where the answer has no
    Sa against references): one query."""
    qn = connection.ops.quote_name
    battle, ledger = (qn(m._meta.db_table) for m in (ArenaBattle, LedgerInteraction))
    where, params = _in_context("b.context_id", context_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {battle} b "
            f"LEFT JOIN {ledger} la ON la.interaction_id = b.interaction_a AND la.has_reference "
            f"LEFT JOIN {ledger} lb ON lb.interaction_id = b.interaction_b AND lb.has_reference "
            f"WHERE b.counted AND NOT b.voided AND b.outcome IN (1, 2){where}{tail}", params)
        return cursor.fetchall()


def vote_counts(context_id: str | None) -> VoteCounts:
    """The counted votes of a context (None: every context) that preferred one answer, counted by whether Sa
    and the length rule picked the voted answer: one query, however many votes (the join reads each
    answer's Sa, only with a reference, and its length in characters)."""
    rows = _votes("b.outcome, la.sa, lb.sa, la.answer_chars, lb.answer_chars, COUNT(*)", context_id,
                  " GROUP BY b.outcome, la.sa, lb.sa, la.answer_chars, lb.answer_chars")
    outcomes, votes, unscored = [], 0, 0
    for outcome, sa, sb, la, lb, k in rows:
        votes += k
        if None in (sa, sb, la, lb):
            unscored += k
        else:
            outcomes += [vote_outcome(outcome, sa, sb, la, lb)] * k
    return VoteCounts.of(outcomes, votes, unscored)


def vote_outcomes(context_id: str) -> tuple[list[tuple[str, int, int]], int]:
    """(battle id, Sa right, length rule right) of each counted vote of a context that preferred one of
    two scored answers, in lib.weighted.OUTCOME_ORDER (what `vote_counts` counts, vote by vote), and how
    many votes preferred one answer in all."""
    rows = _votes("b.battle_id, b.outcome, la.sa, lb.sa, la.answer_chars, lb.answer_chars", context_id)
    scored = [(battle, *vote_outcome(outcome, sa, sb, la, lb)) for battle, outcome, sa, sb, la, lb in rows
              if None not in (sa, sb, la, lb)]
    return ordered_votes(scored), len(rows)


def vote_figures(context_id: str | None) -> dict:
    """Sa against the counted arena votes of a context (None: every context, the global board)."""
    return vote_validity(vote_counts(context_id))


def rating_rows(context_id: str | None) -> tuple[list[tuple[str, int, int, int]], int]:
    """(interaction id, Sa, Sh, the answer's length in characters) of every answer of a context (None:
    every context) with a rating and an automatic score against references whose length is known, and
    how many more there are whose evidence record is not read yet: one query."""
    qn = connection.ops.quote_name
    where, params = _in_context("li.context_id", context_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT li.interaction_id, li.sa, li.sh, li.answer_chars FROM {qn(LedgerInteraction._meta.db_table)} li "
            f"WHERE li.has_reference AND li.sh IS NOT NULL{where}", params)
        found = cursor.fetchall()
    rows = [(iid, int(sa), int(sh), int(length)) for iid, sa, sh, length in found if length is not None]
    return rows, len(found) - len(rows)


def rating_figures(context_id: str | None) -> dict:
    """Spearman of Sa and of the answer's length with Sh, over the answers that have both scores
    (lib.weighted.rating_validity, which `verify` runs on the same answers rebuilt from the chain), and
    `unread`: the rated answers left out because their evidence record is not read yet."""
    rows, unread = rating_rows(context_id)
    return {**rating_validity(rows), "unread": unread}


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
        return (f"Not enough human signal yet to check the automatic score against people here: "
                f"{v['pairs_non_tie']} arena votes between two scored answers, {MIN_HUMAN} needed.")

    def pct(x):
        return f"{round(100 * x)}%"

    return (f"The automatic score agrees with people's votes here {pct(v['accuracy_non_tie'])} "
            f"[{pct(v['accuracy_ci_low'])}-{pct(v['accuracy_ci_high'])}] of {v['pairs_non_tie']}; preferring the "
            f"longer answer: {pct(v['length_accuracy_non_tie'])}.")


def _rho(x: float) -> str:
    return f"{x:.2f}"


def rating_line(r: dict) -> str:
    """One line a visitor reads: how alike people's ratings and the automatic score rank the answers
    here, next to ranking them by length, or that it cannot be said yet; and how many rated answers are
    left out until their records can be read."""
    return _rating_sentence(r) + _unread(r)


def _rating_sentence(r: dict) -> str:
    n = r["n"]
    if not r["enough"]:
        return (f"Not enough ratings yet to compare people's ratings with the automatic score here: {n} rated "
                f"answer{'' if n == 1 else 's'} with an automatic score, {MIN_HUMAN} needed.")
    if r["spearman"] is None:
        return (f"People's ratings and the automatic score cannot be compared here: over the {n} rated answers, "
                f"one of the two gives every answer the same value.")
    low, high = r["spearman_ci_low"], r["spearman_ci_high"]
    interval = "" if low is None else f" [{_rho(low)}{'-' if low >= 0 else ' to '}{_rho(high)}]"
    length = "" if r["length_spearman"] is None else f"; ranking them by length instead: {_rho(r['length_spearman'])}"
    return (f"How alike people's ratings and the automatic score rank answers here: {_rho(r['spearman'])}{interval} "
            f"over {n} rated answers (1 would be the same order, 0 unrelated){length}.")


def _unread(r: dict) -> str:
    """What a rating line adds for the rated answers left out until their records are read."""
    k = r.get("unread", 0)
    if not k:
        return ""
    return (f" {k} more rated answer{' is' if k == 1 else 's are'} left out until "
            f"{'its record' if k == 1 else 'their records'} can be read.")
