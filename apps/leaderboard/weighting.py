"""How far each of a board's columns agrees with the people of its context, and the weighted score that
counts each signal only as far as it does (the formula and its reasons: lib/weighted.py).

The figures come from the board's counted arena votes (`apps.annotate.site_validity.vote_figures` on
this site; `verify` rebuilds them from the chain's events and the answers on IPFS): the automatic score
is the column they measure, and their weight is the factor the oracle weighs a context's new automatic
scores by (apps/oracle/weights.py): both come from the same votes through lib.weighting.count_figures.
People's ratings and votes are the reference. R mixes the automatic part and people's part, which are
weighed apart; the style-controlled Elo rests on the same votes as the arena Elo, counted once; the
debate and peer ratings are the site's own, not on-chain, and are not measured against the votes here,
so they count 0.

Beside the votes, the board gives how alike people's ratings and the automatic score rank the answers
here (`apps.annotate.site_validity.rating_figures`, rebuilt by `verify` too): a figure to read, not a
weight, since people's ratings already count fully through Rh.
"""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings

from lib import weighted
from lib.reputation import GLOBAL_CONTEXT_ID
from lib.weighted import MIN_HUMAN

MEASURED = "measured"
NOT_ENOUGH = "not_enough_human_signal"
REFERENCE = "reference"
NOT_WEIGHED = "not_weighed"
NOT_MEASURED = "not_measured"

# The figures `verify` compares, as (key in the automatic score's entry, label, what it is in plain words,
# how it reads: "count", "share", "weight" or "status").
FIGURES = (("votes", "Votes preferring one answer", "the number of people's votes that preferred one answer", "count"),
           ("pairs_non_tie", "Votes with both answers scored",
            "the number of those votes where both answers have an automatic score", "count"),
           ("status", "Status", "whether the automatic score could be checked against people", "status"),
           ("accuracy_non_tie", "Agreement with people's votes", "the agreement figure of the automatic score",
            "share"),
           ("accuracy_ci_low", "Agreement, low end", "the low end of the automatic score's agreement", "share"),
           ("accuracy_ci_high", "Agreement, high end", "the high end of the automatic score's agreement", "share"),
           ("length_accuracy_non_tie", "The longer answer's agreement",
            "the agreement figure of preferring the longer answer", "share"),
           ("margin_over_length", "Margin over the longer answer",
            "the automatic score's margin over preferring the longer answer", "share"),
           ("margin_over_length_ci_low", "Margin, low end", "the low end of that margin", "share"),
           ("margin_over_length_ci_high", "Margin, high end", "the high end of that margin", "share"),
           ("weight", "Weight in the weighted score", "the weight of the automatic score in the weighted score",
            "weight"))

# People's ratings against the automatic score, compared by `verify` too, as (the figure's key, its key in
# the board's `ratings` entry, label, what it is in plain words, how it reads: "count" or "correlation").
RATING_FIGURES = (
    ("ratings_n", "n", "Rated answers with an automatic score",
     "the number of rated answers with an automatic score", "count"),
    ("ratings_spearman", "spearman", "Rank agreement with people's ratings",
     "the rank agreement of the automatic score with people's ratings", "correlation"),
    ("ratings_spearman_ci_low", "spearman_ci_low", "Rank agreement, low end",
     "the low end of the automatic score's rank agreement with people's ratings", "correlation"),
    ("ratings_spearman_ci_high", "spearman_ci_high", "Rank agreement, high end",
     "the high end of the automatic score's rank agreement with people's ratings", "correlation"),
    ("ratings_length_spearman", "length_spearman", "The answers' lengths against people's ratings",
     "the rank agreement of the answers' lengths with people's ratings", "correlation"))


def columns(votes: dict) -> dict[str, dict]:
    """Per column of the board: what kind of signal it is, how it was checked against people here, and
    its weight in the weighted score. `votes`: the vote figures of lib.weighted.vote_validity."""
    ra = {"kind": "automatic", "human_signal": "arena votes",
          "status": MEASURED if votes["enough"] else NOT_ENOUGH, **votes}
    return {
        "ra": ra,
        "rh": {"kind": "people", "status": REFERENCE, "weight": weighted.HUMAN_WEIGHT},
        "arena_elo": {"kind": "people", "status": REFERENCE, "weight": weighted.HUMAN_WEIGHT},
        "r": {"kind": "mixed", "status": NOT_WEIGHED, "weight": 0.0,
              "reason": "R mixes the automatic part and people's part, which are weighed apart."},
        "style_elo": {"kind": "people", "status": NOT_WEIGHED, "weight": 0.0,
                      "reason": "The same votes as the arena Elo, which counts them once."},
        "debate_elo": {"kind": "automatic", "status": NOT_MEASURED, "weight": 0.0,
                       "reason": "The site's own rating, not on-chain: not measured against people's votes here."},
        "peer_elo": {"kind": "automatic", "status": NOT_MEASURED, "weight": 0.0,
                     "reason": "The site's own rating, not on-chain: not measured against people's votes here."},
    }


# Per column of the board, in the board's order: its header, its key in `columns`, and how it stands
# against people here in one plain line; the automatic score's ("ra") depends on the votes (column_lines).
COLUMN_LINES = (
    ("R", "r", "people's ratings and the automatic score together; its two parts are checked apart, "
               "so R itself is not weighed."),
    ("Weighted", "weighted", "each signal counted only as far as it agrees with people here."),
    ("Arena Elo", "arena_elo", "people's blind votes here: one of the two signals the others are checked "
                               "against."),
    ("Ratings and Rₕ", "rh", "people's own ratings here: the other signal the others are checked against."),
    ("Auto scores and Rₐ", "ra", None),
    ("Style-controlled Elo", "style_elo", "the same votes as the arena Elo, counted once there."),
    ("Debate Elo", "debate_elo", "models judging models, not recorded on-chain: not checked against "
                                 "people here, so it counts for nothing in the weighted score."),
    ("Peer Elo", "peer_elo", "models rating each other, not recorded on-chain: not checked against "
                             "people here, so it counts for nothing in the weighted score."),
)


def column_lines(votes: dict) -> list[tuple[str, str]]:
    """(header, one plain line) per column of the board: what it is checked against here and what it
    counts for; the automatic score's line says whether it has been checked yet and how it did."""
    ra = columns(votes)["ra"]
    if ra["status"] == MEASURED:
        auto = (f"the automatic score, checked against {ra['pairs_non_tie']} of people's votes here "
                f"(the line above): in the weighted score it weighs {ra['weight']:.2f} where each of "
                "people's signals weighs 1.")
    else:
        auto = ("the automatic score: too few of people's votes here to check it yet (the line above), so "
                "it counts for nothing in the weighted score.")
    return [(header, auto if key == "ra" else line) for header, key, line in COLUMN_LINES]


def votes_text(votes: dict) -> str:
    """The automatic score against people's votes here, in one plain line (the board page's own)."""
    from apps.annotate.site_validity import plain_line

    return plain_line({"votes": votes})


def ratings_text(ratings: dict) -> str:
    """People's ratings against the automatic score here, in one plain line (the board page's own)."""
    from apps.annotate.site_validity import rating_line

    return rating_line(ratings)


def weighted_text(votes: dict, scored: int, context_id: str | None = None) -> str:
    """The weighted column in plain words: what it weighs, and what it falls back to without people; on a
    context's board, what the same votes do to the automatic score's weight in R."""
    if not scored:
        return ("Weighted: weighted by how well each signal agrees with people here. No model has ratings or "
                "votes from people here yet, so no model has a weighted score, and sorting by it falls back to "
                "the automatic score, which has not been checked against people here." + oracle_text(votes, context_id))
    if not votes["enough"]:
        auto = (f"the automatic score counts for nothing until it can be checked against at least {MIN_HUMAN} "
                f"votes here")
    elif votes["weight"] <= 0:
        auto = ("the automatic score counts for nothing: here it has not shown it agrees with people's votes "
                "better than preferring the longer answer")
    else:
        auto = (f"the automatic score counts {votes['weight']:.2f} as much, as far as it agrees with people's "
                f"votes here beyond preferring the longer answer")
    return (f"Weighted: weighted by how well each signal agrees with people here. People's ratings and votes "
            f"count fully; {auto}. Models without a rating or a vote from people have no weighted score; "
            f"models whose ranges overlap share a rank (=)." + oracle_text(votes, context_id))


def oracle_text(votes: dict, context_id: str | None) -> str:
    """What the oracle weighs a new automatic score by in this context (apps/oracle/weights.py), in one
    sentence: from MIN_HUMAN votes on, the factor of these votes, the board's own weight; nothing on the
    global board, where nothing is evaluated."""
    if context_id is None or context_id == GLOBAL_CONTEXT_ID:
        return ""
    if settings.LLMCHAIN_AUTO_WEIGHT == "paper":
        return (" In R, a new automatic score here weighs the paper's weight, the mean R of its reference models, "
                "whatever these votes say.")
    if not votes["enough"]:
        return (f" Until this board has {MIN_HUMAN} such votes, a new automatic score here weighs in R what its "
                f"metric earned on human-labelled pairs elsewhere.")
    if votes["weight"] <= 0:
        return " In R, a new automatic score here weighs nothing either: its weight comes from these votes."
    return (f" In R, a new automatic score here weighs {votes['weight']:.2f} times the mean R of its reference "
            f"models: the same weight, from these votes.")


def weigh_rows(rows: list, ra_weight: float) -> list:
    """The rows (BoardRow) with their weighted score, band and rank on this board."""
    found = weighted.weigh([{"ra": row.ra, "rh": row.rh, "r": row.r, "band_lo": row.band_lo, "band_hi": row.band_hi,
                             "arena_elo": row.arena_elo, "arena_ci_low": row.arena_ci_low,
                             "arena_ci_high": row.arena_ci_high} for row in rows], ra_weight)
    return [replace(row, weighted=w.score, weighted_low=w.low, weighted_high=w.high, weighted_rank=w.rank,
                    weighted_tied=w.tied) for row, w in zip(rows, found)]


def site_votes(context_id: str) -> dict:
    """This site's vote figures of a board, from its indexed tables."""
    from apps.annotate.site_validity import vote_figures

    return vote_figures(None if context_id == GLOBAL_CONTEXT_ID else context_id)


def site_ratings(context_id: str) -> dict:
    """This site's figures of people's ratings against the automatic score on a board, from its tables."""
    from apps.annotate.site_validity import rating_figures

    return rating_figures(None if context_id == GLOBAL_CONTEXT_ID else context_id)
