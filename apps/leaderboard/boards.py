"""Reputation boards: one context's indexed reputations, ranked, as the page, the JSON and the CSV show them.

`build_board` is the single domain function: it resolves the context, names each model from the
registry (or its short on-chain id), splits the models without enough evidence off as not yet ranked
(`has_evidence`), ranks the others by their R band (`interval_ranks`: models whose bands overlap share
a rank), and orders both lists by the requested column. Beside
R each row carries the model's arena columns (Bradley–Terry Elo from the users' votes between two
anonymous answers, with its interval, rank, battles and the style-controlled Elo: apps/leaderboard/arena.py,
precomputed in ArenaEntry and rebuilt by /verify from the chain's events), the model's debate rating in
the context (apps.annotate.outcomes), and its Elo in the context's latest peer self-evaluation
(apps.oracle.selfeval, stored by `manage.py selfeval --save`), the last two the site's own and not on-chain.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from apps.annotate.outcomes import debate_ratings
from apps.chain.models import Context
from apps.oracle.selfeval import peer_ratings
from lib.boardstats import BAND_LEVEL, BAND_MIN_HUMAN, BAND_RESAMPLES
from lib.ids import is_hex32
from lib.reputation import GLOBAL_CONTEXT_ID, WAD, decay_factor
from lib.weighted import VoteCounts, rating_validity, vote_validity

from . import arena, entries, weighting
from .entries import short_id
from .models import ArenaBoard, ArenaEntry, BoardEntry

GLOBAL_NAME = "Global"

# Sort keys, their labels, and the direction a first click sorts in.
SORT_KEYS = ("r", "ra", "rh", "n_auto", "n_human", "name", "block", "arena_elo", "style_elo", "battles", "debate_elo",
             "peer_elo", "weighted")
DEFAULT_SORT = "r"
DIRECTIONS = ("asc", "desc")


def default_direction(sort: str) -> str:
    return "asc" if sort == "name" else "desc"


class BoardError(ValueError):
    """A malformed request: a context id that is not 0x + 64 hex digits, an unknown sort or direction."""


class UnknownContext(LookupError):
    """A well-formed context id that no indexed context has."""


def min_evaluations() -> int:
    return settings.LLMCHAIN_BOARD_MIN_EVALUATIONS


def min_rated() -> int:
    """Rated answers (people's ratings that moved R) a model needs in a context to be ranked."""
    return max(settings.LLMCHAIN_BOARD_MIN_RATED, BAND_MIN_HUMAN)


BAND_TEXT = (
    f"The band under R is a {round(BAND_LEVEL * 100)}% bootstrap interval. R moves only when someone rates an "
    f"answer, so we take the model's rated answers in this context, draw the same number of them again at random "
    f"(the same one may come up twice), and replay that draw through the contract's update rule from the model's "
    f"starting R, each rating keeping the score, weight and rate it had on-chain. We do this {BAND_RESAMPLES} "
    f"times; the band spans the middle {round(BAND_LEVEL * 100)}% of the replayed R values. A wide band means R "
    f"rests on few or disagreeing ratings. Models with fewer than {BAND_MIN_HUMAN} rated answers have no band. "
    f"The draws are seeded by the model, the context and the number of ratings, so anyone recomputing the band "
    f"from the chain gets the same one.")


def _weight_after(lambda_wad: int) -> str:
    after = {label: decay_factor(minutes * WAD, lambda_wad) / WAD
             for label, minutes in (("a minute", 1), ("an hour", 60), ("a day", 1440))}
    return ", ".join(f"{label} after the last counts for {fd:.3f}" for label, fd in after.items())


def weight_text(lambda_wad: int) -> str:
    """How much a rating weighs with time, under the deployment's lambda, in words (no formula)."""
    return (f"A rating counts for more the longer its rater waited since their previous one, so that many "
            f"ratings in a row count for little: a rating {_weight_after(lambda_wad)} of its full weight, which "
            f"the rater's familiarity with the subject, trust and certainty set.")


def weight_formula_text(lambda_wad: int, from_chain: bool = True) -> str:
    """The same with its formula, for the page that explains the symbols."""
    where = ("fixed in the Reputation contract when it was deployed (its lambdaWad)" if from_chain else
             "the value this site deploys with (the chain could not be read just now)")
    return (f"A rating's weight is w<sub>h</sub> = W<sub>h</sub> · F<sub>D</sub>. The time factor F<sub>D</sub> "
            f"grows with D, the minutes since the rater's previous rating (or since they signed up; at most a "
            f"day), so that many ratings in a row count for little: F<sub>D</sub> = (1 − e<sup>−λD</sup>) / "
            f"(1 + e<sup>−λD</sup>), with λ = {format_lambda(lambda_wad)} per minute, {where}. A rating "
            f"{_weight_after(lambda_wad)} of its full weight.")


def format_lambda(lambda_wad: int) -> str:
    return f"{Decimal(lambda_wad) / WAD:f}".rstrip("0").rstrip(".")


DEBATE_TEXT = (
    "Debate Elo is a rating on the Elo scale, as in chess (a model with no debates would stand at 1000; one 400 "
    "points above another is expected to win 10 debates for each it loses), fitted to the debates held on this "
    "site between models' answers in this context: the AI judges' verdict when they agreed, else the experts' "
    "majority verdict. It is the site's own, not on-chain, so the verify page does not check it.")


def peer_text(context_id: str, computed_at: datetime | None, prompts: int) -> str:
    if context_id == GLOBAL_CONTEXT_ID:
        return ("Peer Elo is rated within one context (a run's ratings only compare the models it compared), "
                "so the global board has none: see a context's board.")
    if computed_at is None:
        return "Peer Elo: no peer self-evaluation has been run in this context yet."
    noun = "prompt" if prompts == 1 else "prompts"
    return (f"Peer Elo is computed by this site from the models' answers to the same {prompts} {noun} in this "
            f"context: of each pair of answers, the one closer in meaning to a third model's answer wins, and "
            f"the wins make an Elo rating; computed {computed_at.strftime('%Y-%m-%d %H:%M')} UTC. It is the site's "
            f"own, not on-chain, so the verify page does not check it.")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def rule_text(minimum: int, rated: int | None = None) -> str:
    """Why a model is ranked or not, in words."""
    rated = min_rated() if rated is None else rated
    return (f"A model is ranked once people have rated at least {rated} of its answers here and it has at least "
            f"{_plural(minimum, 'evaluation')} in all: R moves only when a person rates an answer, so before that "
            f"it is still about its starting value. Models with less are listed apart, not ranked.")


def order_text(ranked: list, unranked: int, rated: int) -> str:
    """The one sentence that says what orders the board and how sure it is."""
    if not ranked:
        below = "the model below is" if unranked == 1 else f"the {unranked} models below are"
        return (f"No model is ranked here yet: a rank needs at least {rated} answers rated by people "
                f"(R moves only with their ratings); {below} listed unranked.")
    widths = [row.band_hi - row.band_lo for row in ranked]
    tied = sum(1 for row in ranked if row.tied)
    ties = (f"{tied} of the {len(ranked)} ranked models share one" if tied else "no two ranked models share one")
    return (f"Ranked by R, the reputation people's ratings give a model here; models whose 95% bands overlap share "
            f"a rank (=), and here the bands are {sum(widths) / len(widths):.3f} wide on average (R runs from 0 "
            f"to 1), so {ties}.")


# A row's arena columns and the ArenaEntry / arena.ArenaLine attribute each comes from.
ARENA_FIELDS = {"arena_elo": "elo", "arena_ci_low": "ci_low", "arena_ci_high": "ci_high", "arena_rank": "rank",
                "battles": "battles", "arena_wins": "wins", "arena_ties": "ties", "arena_losses": "losses",
                "arena_win_rate": "win_rate", "style_elo": "style_elo", "style_ci_low": "style_ci_low",
                "style_ci_high": "style_ci_high", "style_rank": "style_rank"}


def arena_fields(line) -> dict:
    """A BoardRow's arena columns from an ArenaEntry or an arena.ArenaLine; none (no battles) for None."""
    return {key: getattr(line, attr) for key, attr in ARENA_FIELDS.items()} if line is not None else {}


@dataclass(frozen=True)
class BoardRow:
    model_id: str
    name: str
    r: int
    ra: int
    rh: int
    n_auto: int
    n_human: int
    block_number: int
    changed_at: datetime | None = None
    spark: tuple = ()
    band_lo: float | None = None
    band_hi: float | None = None
    band_n: int = 0
    rank: int | None = None  # None: not ranked (too little evidence)
    tied: bool = False  # another ranked model has the same rank
    debate_elo: float | None = None  # None: no settled debate in this context
    debate_games: int = 0
    peer_elo: float | None = None  # None: not in the context's latest peer self-evaluation
    peer_record: tuple[int, int, int] | None = None  # (wins, ties, losses) of its comparisons
    # The arena (None and 0: no counted vote in this board's arena). The style columns are None also
    # when the board's style fit could not be made.
    arena_elo: float | None = None
    arena_ci_low: float | None = None
    arena_ci_high: float | None = None
    arena_rank: int | None = None  # 1 + the models whose whole interval lies above this one's
    battles: int = 0
    arena_wins: int = 0
    arena_ties: int = 0  # ties and both-bad votes
    arena_losses: int = 0
    arena_win_rate: float | None = None  # (wins + ties / 2) / battles
    style_elo: float | None = None
    style_ci_low: float | None = None
    style_ci_high: float | None = None
    style_rank: int | None = None
    # The weighted score (apps/leaderboard/weighting.py): None without a signal from people here.
    weighted: float | None = None
    weighted_low: float | None = None
    weighted_high: float | None = None
    weighted_rank: int | None = None  # 1 + the models whose whole weighted band lies above this one's
    weighted_tied: bool = False
    # What the views derive from the row (its table row, its JSON), kept with it: one version of a board
    # has one set of rows, shared by all its views (`standing`). Not part of the row's value; a copy
    # (`replace`) starts empty.
    memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def from_entry(cls, e: BoardEntry, debate: tuple[float, int] | None = None, peer=None,
                   arena_entry: ArenaEntry | None = None) -> "BoardRow":
        return cls(model_id=e.model_id, name=e.name, r=e.r, ra=e.ra, rh=e.rh, n_auto=e.n_auto, n_human=e.n_human,
                   block_number=e.block_number, changed_at=e.changed_at, spark=tuple(e.spark), band_lo=e.band_lo,
                   band_hi=e.band_hi, band_n=e.band_n, debate_elo=debate[0] if debate else None,
                   debate_games=debate[1] if debate else 0, peer_elo=peer.elo if peer else None,
                   peer_record=(peer.wins, peer.ties, peer.losses) if peer else None, **arena_fields(arena_entry))

    @property
    def evaluations(self) -> int:
        return self.n_auto + self.n_human

    @property
    def rank_text(self) -> str:
        """The rank as shown: "=2" when shared, "–" when not ranked."""
        if self.rank is None:
            return "–"
        return f"={self.rank}" if self.tied else str(self.rank)

    @property
    def weighted_rank_text(self) -> str:
        if self.weighted_rank is None:
            return ""
        return f"={self.weighted_rank}" if self.weighted_tied else str(self.weighted_rank)

    @property
    def short_id(self) -> str:
        return short_id(self.model_id)

    @property
    def url(self) -> str:
        return reverse("model-reputation", args=[self.model_id])

    def value(self, sort: str):
        return {"r": self.r, "ra": self.ra, "rh": self.rh, "n_auto": self.n_auto, "n_human": self.n_human,
                "block": self.block_number, "name": self.name.casefold(), "debate_elo": self.debate_elo,
                "peer_elo": self.peer_elo, "arena_elo": self.arena_elo, "style_elo": self.style_elo,
                "battles": self.battles or None,
                # By the weighted rank (its ties as the board's ranks), then the score.
                "weighted": None if self.weighted is None else (-self.weighted_rank, self.weighted)}[sort]


@dataclass(frozen=True)
class ArenaSummary:
    """A board's arena as a whole: what it rests on, and the pairwise win-rate matrix."""

    votes: int
    style_votes: int
    bootstrap: int
    style_bootstrap: int
    seed: int | None
    last_vote_block: int | None
    stale: bool  # votes were folded since the last refit, which is on its way
    computed_at: datetime | None
    models: tuple[tuple[str, str], ...]  # (model id, name), best first: the matrix's rows and columns
    win_rates: tuple[tuple[float | None, ...], ...]
    coefficients: tuple[dict, ...]
    style_problem: str
    style_failed: int = 0  # style bootstrap rounds left out: no finite fit on that resample

    @classmethod
    def of(cls, state: ArenaBoard, names: dict[str, str]) -> "ArenaSummary":
        return cls(votes=state.votes, style_votes=state.style_votes, bootstrap=state.bootstrap,
                   style_bootstrap=state.style_bootstrap, seed=state.seed, last_vote_block=state.last_vote_block,
                   stale=state.stale, computed_at=state.computed_at,
                   models=tuple((m, names.get(m) or short_id(m)) for m in state.ranking),
                   win_rates=tuple(tuple(r) for r in state.win_rates), coefficients=tuple(state.coefficients),
                   style_problem=state.style_problem, style_failed=state.style_failed)

    @property
    def text(self) -> str:
        return arena.arena_text(self.bootstrap, self.style_bootstrap)


def arena_text() -> str:
    """What the arena columns mean, under this site's rounds (for a board without an arena yet)."""
    return arena.arena_text(settings.LLMCHAIN_ARENA_BOOTSTRAP, settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP)


@dataclass(frozen=True)
class Board:
    context_id: str
    context_name: str
    sort: str
    direction: str
    min_evaluations: int
    ranked: list[BoardRow]
    provisional: list[BoardRow]  # not ranked: too little evidence
    min_rated: int = BAND_MIN_HUMAN
    generated_at: datetime = field(default_factory=timezone.now)
    peer_computed_at: datetime | None = None  # when the context's latest peer self-evaluation ran
    peer_prompts: int = 0
    arena: ArenaSummary | None = None  # None: no vote was ever folded into this board's arena
    # The automatic score against people's votes here (lib.weighted.vote_validity); none by default.
    votes: dict = field(default_factory=lambda: vote_validity(VoteCounts()))
    # And against people's ratings here (lib.weighted.rating_validity); none by default.
    ratings: dict = field(default_factory=lambda: rating_validity([]))
    version: str = ""  # the board's version its rows were read at ("": none yet)

    @property
    def validity(self) -> dict:
        """Per column, how far it agrees with people here and its weight in the weighted score."""
        return weighting.columns(self.votes)

    @property
    def column_lines(self) -> list[tuple[str, str]]:
        """Per column, what it is checked against here, in one plain line."""
        return weighting.column_lines(self.votes)

    @property
    def votes_text(self) -> str:
        return weighting.votes_text(self.votes)

    @property
    def ratings_text(self) -> str:
        return weighting.ratings_text(self.ratings)

    @property
    def weighted_text(self) -> str:
        return weighting.weighted_text(self.votes, sum(1 for row in self.rows if row.weighted is not None),
                                       self.context_id)

    @property
    def arena_text(self) -> str:
        return self.arena.text if self.arena else arena_text()

    @property
    def rule(self) -> str:
        return rule_text(self.min_evaluations, self.min_rated)

    @property
    def order_text(self) -> str:
        return order_text(self.ranked, len(self.provisional), self.min_rated)

    @property
    def unranked_order_text(self) -> str:
        """How the models not yet ranked are listed, in the board's order by R: by their automatic score
        (Ra), or by name when it does not tell them apart (a score that earned no weight leaves Ra where
        it started), said so rather than shown as if it were an order of merit."""
        if self.sort != "r" or not self.provisional:
            return ""
        if len({row.ra for row in self.provisional}) > 1:
            return "Listed by their automatic score (Ra)."
        return ("Listed by name: their automatic scores (Ra) are all the same, so nothing here sets them "
                "apart yet.")

    @property
    def peer_text(self) -> str:
        return peer_text(self.context_id, self.peer_computed_at, self.peer_prompts)

    @property
    def rows(self) -> list[BoardRow]:
        """Ranked first, then provisional."""
        return self.ranked + self.provisional


def wad_float(value: int) -> float:
    return int(value) / WAD


def parse_context_id(raw: str | None) -> str:
    """A context id in canonical form (lowercase 0x + 64 hex); the global context when absent."""
    if raw is None or raw == "":
        return GLOBAL_CONTEXT_ID
    if not is_hex32(raw):
        raise BoardError("A context id is 0x followed by 64 hexadecimal digits.")
    return raw.lower()


def parse_sort(sort: str | None, direction: str | None, *, strict: bool) -> tuple[str, str]:
    """(sort, direction) from query parameters. strict: bad values raise BoardError; else fall back to defaults."""
    if sort in (None, ""):
        sort = DEFAULT_SORT
    elif sort not in SORT_KEYS:
        if strict:
            raise BoardError(f"sort must be one of {', '.join(SORT_KEYS)}.")
        sort = DEFAULT_SORT
    if direction in (None, ""):
        direction = default_direction(sort)
    elif direction not in DIRECTIONS:
        if strict:
            raise BoardError("dir must be asc or desc.")
        direction = default_direction(sort)
    return sort, direction


def context_name(context_id: str) -> str:
    """The context's indexed name; raises UnknownContext when nothing is indexed under this id."""
    if context_id == GLOBAL_CONTEXT_ID:
        return GLOBAL_NAME
    ctx = Context.objects.filter(context_id=context_id).first()
    if ctx is not None:
        return ctx.name
    if BoardEntry.objects.filter(context_id=context_id).exists():  # indexed reputations, name not (yet) known
        return short_id(context_id)
    raise UnknownContext(f"No context with id {context_id} has been indexed.")


def _order(rows: list[BoardRow], sort: str, direction: str) -> list[BoardRow]:
    """Rows ordered by one column; ties always broken by name (A→Z), then model id; rows without a value
    in the column (no debate rating) last either way."""
    rows = sorted(rows, key=lambda row: (row.name.casefold(), row.model_id))
    valued = [row for row in rows if row.value(sort) is not None]
    rest = [row for row in rows if row.value(sort) is None]
    if sort == "weighted":  # without a weighted score: by the automatic score, as the board lists the unranked
        rest = _order(rest, "ra", direction)
    return sorted(valued, key=lambda row: row.value(sort), reverse=direction == "desc") + rest  # stable


def has_evidence(row: BoardRow, minimum: int, rated: int) -> bool:
    """Enough to rank a model: `minimum` evaluations in all and `rated` of them rated by people (the
    only evaluations that move R), hence an R band."""
    return row.evaluations >= minimum and row.band_n >= rated and row.band_lo is not None


def interval_ranks(rows: list[BoardRow]) -> list[BoardRow]:
    """Each row ranked 1 + the number of rows whose whole band lies above its own, so that models whose
    bands overlap share a rank; ordered by rank, then R, then name."""
    ranks = [1 + sum(1 for other in rows if other.band_lo > row.band_hi) for row in rows]
    counts = {rank: ranks.count(rank) for rank in ranks}
    ranked = [replace(row, rank=rank, tied=counts[rank] > 1) for row, rank in zip(rows, ranks)]
    return sorted(ranked, key=lambda row: (row.rank, -row.r, row.name.casefold(), row.model_id))


def split_rows(rows: list[BoardRow], minimum: int, rated: int | None = None) -> tuple[list, list]:
    """(ranked, unranked): rows with enough evidence (`has_evidence`) ranked by their R bands
    (`interval_ranks`, in the ranks' order), the others as they came."""
    rated = min_rated() if rated is None else rated
    eligible = [row for row in rows if has_evidence(row, minimum, rated)]
    unranked = [row for row in rows if not has_evidence(row, minimum, rated)]
    return interval_ranks(eligible), unranked


def order_rows(ranked: list[BoardRow], unranked: list[BoardRow], sort: str, direction: str) -> tuple[list, list]:
    """Both lists of `split_rows` in the requested order (by R: the ranks' order; the unranked by their
    automatic score, since their R has not moved). The rows themselves are not copied."""
    if sort == "r":
        return (ranked[::-1] if direction == "asc" else list(ranked)), _order(unranked, "ra", direction)
    return _order(ranked, sort, direction), _order(unranked, sort, direction)


def rank_rows(rows: list[BoardRow], sort: str, direction: str, minimum: int,
              rated: int | None = None) -> tuple[list, list]:
    """(ranked, unranked) of `split_rows`, both in the requested order (`order_rows`)."""
    return order_rows(*split_rows(rows, minimum, rated), sort, direction)


@dataclass(frozen=True)
class Standing:
    """A board before any order: its rows, ranked by their R bands or not yet ranked, and what the board
    rests on. Built once per version of the board (`standing`) and shared by every sort, direction and
    export of it, so that their rows are the same objects (what the views derive from a row, they derive
    once: `BoardRow.memo`)."""

    context_id: str
    context_name: str
    ranked: list[BoardRow]  # in the ranks' order
    unranked: list[BoardRow]
    min_evaluations: int
    min_rated: int
    generated_at: datetime  # when its rows were read
    peer_computed_at: datetime | None
    peer_prompts: int
    arena: ArenaSummary | None
    votes: dict
    ratings: dict
    version: str = ""  # the board's version when its rows were read ("": none yet, not kept)
    built: float = 0.0  # time.monotonic() then


# The latest standing of each board in this process.
_standings: dict[str, Standing] = {}
_standing_locks: dict[str, threading.Lock] = {}


def reuse_within() -> float:
    """How long the board views (page, exports) go on using a board's standing after its version moved:
    half of LLMCHAIN_BOARD_MAX_STALE_S, so that while the indexer moves a board's version every second or
    two its views are built from one standing, not one each. The answer says which version it shows."""
    return settings.LLMCHAIN_BOARD_MAX_STALE_S / 2


def standing(context_id: str, *, within: float = 0.0, kept: bool = True) -> Standing:
    """The board's standing at its current version, or one kept from an earlier version built less than
    `within` seconds ago: built from the entries on the first request that needs it in this process (one
    build at a time per board) and kept for the next ones. Without a version (nothing derived yet), or
    not `kept`, it is built from the table as it is now (and not kept)."""
    minimum, rated = min_evaluations(), min_rated()

    def usable(found: Standing | None, version: str | None = None) -> bool:
        """Built under these thresholds, and at `version` or within `within` (None: the version unread)."""
        return found is not None and (found.min_evaluations, found.min_rated) == (minimum, rated) and (
            found.version == version or time.monotonic() - found.built < within)

    found = _standings.get(context_id)
    if kept and usable(found):  # built within `within`: usable whatever the version now, so none is read
        return found
    version = entries.version(context_id)  # read before the rows: they are at least as new as this version
    if not version or not kept:
        return _build_standing(context_id, minimum, rated, version)
    if usable(found, version):
        return found
    with _standing_locks.setdefault(context_id, threading.Lock()):
        found = _standings.get(context_id)
        if usable(found, version):  # another thread built it meanwhile
            return found
        built = _build_standing(context_id, minimum, rated, version)
        _standings[context_id] = built
        return built


def current_standing(context_id: str) -> tuple[str, float] | None:
    """Bring this process's standing of the board to its current version before its views are rendered
    again together (board_renders.refresh): (that version, the wall-clock time before it was read, from
    when the views built on it are current), or None for a board without one (unknown, or nothing derived
    yet). Its views then reuse it (`reuse_within`) instead of showing an older one."""
    since = time.time()
    try:
        found = standing(context_id)
    except (BoardError, UnknownContext):
        return None
    return (found.version, since) if found.version else None


def forget_standings() -> None:
    """Drop the standings this process keeps (tests: a fresh database may reuse a version)."""
    _standings.clear()


def _build_standing(context_id: str, minimum: int, rated: int, version: str) -> Standing:
    name = context_name(context_id)
    generated_at, built = timezone.now(), time.monotonic()
    # One fit per board version, shared by every sort, direction and export of the board.
    debates = cached_under(f"debate-elo:{version}:{context_id}", lambda: debate_ratings(context_id), version)
    peers = cached_under(f"peer-elo:{version}:{context_id}", lambda: peer_ratings(context_id), version)
    lines = {a.model_id: a for a in ArenaEntry.objects.filter(context_id=context_id)}
    rows = [BoardRow.from_entry(e, debates.get(e.model_id), peers.get(e.model_id), lines.get(e.model_id))
            for e in BoardEntry.objects.filter(context_id=context_id).defer("history")]
    state = ArenaBoard.objects.filter(context_id=context_id).first()
    # The validity figures rest on the board's counted votes and their answers' automatic scores and
    # lengths: the votes change only with the arena's generation, which the indexer moves in the
    # transaction that folds them, and an answer's score is on-chain before any battle can name it
    # (openBattle needs both interactions recorded). So the figures are kept per generation, not per
    # version: an evaluation folded elsewhere on the board does not query every vote again.
    everywhere = version.split(".")[0]
    generation = state.generation if state else 0
    votes = cached_under(f"validity:{everywhere}:{generation}:{context_id}", lambda: weighting.site_votes(context_id),
                         version)
    # The figures of people's ratings read every rated answer of the board (0.3 s globally at 100,000
    # ratings): kept per ratings generation, which moves only when a rating or its answer's length is
    # folded or rolled back, not with every evaluation.
    ratings = cached_under(f"ratings:{everywhere}:{entries.ratings_generation(context_id)}:{context_id}",
                           lambda: weighting.site_ratings(context_id), version)
    rows = weighting.weigh_rows(rows, votes["weight"])
    ranked, unranked = split_rows(rows, minimum, rated)
    run = next(iter(peers.values()), None)  # every row of a context comes from its latest run
    return Standing(context_id=context_id, context_name=name, ranked=ranked, unranked=unranked,
                    min_evaluations=minimum, min_rated=rated, generated_at=generated_at,
                    peer_computed_at=run.computed_at if run else None, peer_prompts=run.prompts if run else 0,
                    arena=ArenaSummary.of(state, {row.model_id: row.name for row in rows}) if state else None,
                    votes=votes, ratings=ratings, version=version, built=built)


def build_board(context_id: str | None, sort: str | None = None, direction: str | None = None, *,
                strict: bool = False, within: float = 0.0, kept: bool = True) -> Board:
    """The board of one context, from the precomputed entries (its `standing`, in the requested order):
    at its current version, or `within` seconds older; not `kept`: from the table as it is now (see
    `standing`). Raises BoardError (malformed input) or UnknownContext."""
    context_id = parse_context_id(context_id)
    sort, direction = parse_sort(sort, direction, strict=strict)
    return board_from(standing(context_id, within=within, kept=kept), sort, direction)


def board_from(s: Standing, sort: str, direction: str) -> Board:
    """The board of a standing in one order (`sort` and `direction` as `parse_sort` gives them)."""
    ranked, provisional = order_rows(s.ranked, s.unranked, sort, direction)
    return Board(context_id=s.context_id, context_name=s.context_name, sort=sort, direction=direction,
                 min_evaluations=s.min_evaluations, min_rated=s.min_rated, ranked=ranked, provisional=provisional,
                 generated_at=s.generated_at, peer_computed_at=s.peer_computed_at, peer_prompts=s.peer_prompts,
                 arena=s.arena, votes=s.votes, ratings=s.ratings, version=s.version)


def board_contexts() -> list[Context]:
    """The contexts to switch between (the global one is listed apart)."""
    return list(Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name"))


def board_index() -> list[tuple[str, str, int]]:
    """(context id, name, models with a REP there) of every board: the global one first."""
    counts = dict(BoardEntry.objects.values_list("context_id").annotate(n=Count("id")).values_list("context_id", "n"))
    items = [(GLOBAL_CONTEXT_ID, GLOBAL_NAME)] + [(c.context_id, c.name) for c in board_contexts()]
    return [(cid, name, counts.get(cid, 0)) for cid, name in items]


# The board's figures of people's ratings against the automatic score, repeated on every CSV row (the same
# for the whole board) under "ratings_<key>".
RATING_KEYS = ("n", "spearman", "spearman_ci_low", "spearman_ci_high", "length_spearman")

CSV_HEADER = ["rank", "status", "model_id", "name", "r", "ra", "rh", "r_decimal", "ra_decimal", "rh_decimal",
              "r_band_low", "r_band_high", "n_auto", "n_human", "evaluations", "block_number", "changed_at",
              "debate_elo", "debate_games", "peer_elo", "peer_wins", "peer_ties", "peer_losses",
              "arena_rank", "arena_elo", "arena_ci_low", "arena_ci_high", "battles", "arena_wins", "arena_ties",
              "arena_losses", "arena_win_rate", "style_elo", "style_ci_low", "style_ci_high", "style_rank",
              "weighted", "weighted_low", "weighted_high", "weighted_rank",
              *(f"ratings_{key}" for key in RATING_KEYS)]


def _number(value, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _csv_safe(text: str) -> str:
    """Neutralise spreadsheet formulas in free text."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_rows(board: Board) -> list[list]:
    out = [CSV_HEADER]
    ratings = [board.ratings["n"], *(_number(board.ratings[key], 4) for key in RATING_KEYS[1:])]
    for row in board.rows:
        out.append([row.rank if row.rank is not None else "", "ranked" if row.rank is not None else "provisional",
                    row.model_id, _csv_safe(row.name), str(row.r), str(row.ra), str(row.rh),
                    f"{wad_float(row.r):.6f}", f"{wad_float(row.ra):.6f}", f"{wad_float(row.rh):.6f}",
                    "" if row.band_lo is None else f"{row.band_lo:.6f}",
                    "" if row.band_hi is None else f"{row.band_hi:.6f}",
                    row.n_auto, row.n_human, row.evaluations, row.block_number,
                    row.changed_at.isoformat() if row.changed_at else "",
                    "" if row.debate_elo is None else f"{row.debate_elo:.1f}", row.debate_games,
                    "" if row.peer_elo is None else f"{row.peer_elo:.1f}",
                    *(row.peer_record if row.peer_record else ("", "", "")),
                    "" if row.arena_rank is None else row.arena_rank, _number(row.arena_elo),
                    _number(row.arena_ci_low), _number(row.arena_ci_high), row.battles, row.arena_wins,
                    row.arena_ties, row.arena_losses, _number(row.arena_win_rate), _number(row.style_elo),
                    _number(row.style_ci_low), _number(row.style_ci_high),
                    "" if row.style_rank is None else row.style_rank, _number(row.weighted),
                    _number(row.weighted_low), _number(row.weighted_high), "" if row.weighted_rank is None else row.weighted_rank,
                    *ratings])
    return out


CACHE_SECONDS = 300
# Whether `cached` keeps each view's output. The board renderers' processes (board_renders.Renderer) do
# not: they render each view once per version, so a kept copy is never read, and with Redis as the cache
# the copies of every view at every version for CACHE_SECONDS grew it by ~0.8 GB in a 5-minute bench run.
keep_views = True


# The response header that says which version of the board an answer shows (apps/leaderboard/fastpath.py
# keeps the answer under it).
VERSION_HEADER = "X-Board-Version"


def cached(kind: str, context_id: str, sort: str, direction: str, produce, version: str | None = None):
    """`produce()` for this board view, cached under the board's version (by default its current one):
    every change the indexer folds into a board moves its version (entries.bump), so a cached board is
    never staler than the version it is cached under."""
    if not keep_views:
        return produce()
    version = entries.version(context_id or None) if version is None else version
    return cached_under(f"board:{version}:{min_evaluations()}:{min_rated()}:{kind}:{context_id}:{sort}:{direction}",
                        produce, version)


def cached_under(key: str, produce, version: str):
    """`produce()` cached under `key`, which names every version it depends on; nothing is cached while
    `version` is "" (no board derived yet)."""
    if not version:
        return produce()
    value = cache.get(key)
    if value is None:
        value = produce()
        cache.set(key, value, CACHE_SECONDS)
    return value
