"""Reputation boards: one context's indexed reputations, ranked, as the page, the JSON and the CSV show them.

`build_board` is the single domain function: it resolves the context, names each model from the
registry (or its short on-chain id), splits the models with too few evaluations off as provisional,
ranks the others by R (ties broken by name), and orders both lists by the requested column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from apps.chain.models import Context, Reputation
from apps.chat.models import RegisteredModel
from lib.reputation import GLOBAL_CONTEXT_ID, WAD

GLOBAL_NAME = "Global"
CONTEXT_ID = re.compile(r"^0x[0-9a-fA-F]{64}$")

# Sort keys, their labels, and the direction a first click sorts in.
SORT_KEYS = ("r", "ra", "rh", "n_auto", "n_human", "name", "block")
DEFAULT_SORT = "r"
DIRECTIONS = ("asc", "desc")


def default_direction(sort: str) -> str:
    return "asc" if sort == "name" else "desc"


class BoardError(ValueError):
    """A malformed request: a context id that is not 0x + 64 hex digits, an unknown sort or direction."""


class UnknownContext(LookupError):
    """A well-formed context id that no indexed context has."""


def min_evaluations() -> int:
    return int(getattr(settings, "LLMCHAIN_BOARD_MIN_EVALUATIONS", 5))


def rule_text(minimum: int) -> str:
    noun = "evaluation" if minimum == 1 else "evaluations"
    return (f"A model needs at least {minimum} {noun} (automatic and human together) in this context "
            f"to be ranked; models with fewer are listed apart as provisional.")


@dataclass(frozen=True)
class BoardRow:
    model_id: str
    name: str
    registered_pk: int | None
    r: int
    ra: int
    rh: int
    n_auto: int
    n_human: int
    block_number: int
    rank: int | None = None  # None: provisional

    @property
    def evaluations(self) -> int:
        return self.n_auto + self.n_human

    @property
    def short_id(self) -> str:
        return short_id(self.model_id)

    @property
    def url(self) -> str | None:
        return reverse("model", args=[self.registered_pk]) if self.registered_pk is not None else None

    def value(self, sort: str):
        return {"r": self.r, "ra": self.ra, "rh": self.rh, "n_auto": self.n_auto, "n_human": self.n_human,
                "block": self.block_number, "name": self.name.casefold()}[sort]


@dataclass(frozen=True)
class Board:
    context_id: str
    context_name: str
    sort: str
    direction: str
    min_evaluations: int
    ranked: list[BoardRow]
    provisional: list[BoardRow]
    generated_at: datetime = field(default_factory=timezone.now)

    @property
    def rule(self) -> str:
        return rule_text(self.min_evaluations)

    @property
    def rows(self) -> list[BoardRow]:
        """Ranked first, then provisional."""
        return self.ranked + self.provisional


def short_id(model_id: str) -> str:
    return model_id[:10] + "…" if len(model_id) > 10 else model_id


def wad_float(value: int) -> float:
    return int(value) / WAD


def parse_context_id(raw: str | None) -> str:
    """A context id in canonical form (lowercase 0x + 64 hex); the global context when absent."""
    if raw is None or raw == "":
        return GLOBAL_CONTEXT_ID
    if not CONTEXT_ID.match(raw):
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
    if Reputation.objects.filter(context_id=context_id).exists():  # indexed reputations, name not (yet) known
        return short_id(context_id)
    raise UnknownContext(f"No context with id {context_id} has been indexed.")


def _order(rows: list[BoardRow], sort: str, direction: str) -> list[BoardRow]:
    """Rows ordered by one column; ties always broken by name (A→Z), then model id."""
    rows = sorted(rows, key=lambda row: (row.name.casefold(), row.model_id))
    return sorted(rows, key=lambda row: row.value(sort), reverse=direction == "desc")  # stable


def build_board(context_id: str | None, sort: str | None = None, direction: str | None = None, *,
                strict: bool = False) -> Board:
    """The board of one context. Raises BoardError (malformed input) or UnknownContext."""
    context_id = parse_context_id(context_id)
    sort, direction = parse_sort(sort, direction, strict=strict)
    name = context_name(context_id)
    reps = list(Reputation.objects.filter(context_id=context_id))
    registered = {m.model_id.lower(): m for m in
                  RegisteredModel.objects.filter(model_id__in=[r.model_id for r in reps]).only("pk", "name",
                                                                                                "model_id")}
    minimum = min_evaluations()
    rows = []
    for rep in reps:
        model = registered.get(rep.model_id.lower())
        rows.append(BoardRow(model_id=rep.model_id, name=model.name if model else short_id(rep.model_id),
                             registered_pk=model.pk if model else None, r=rep.r, ra=rep.ra, rh=rep.rh,
                             n_auto=rep.n_auto, n_human=rep.n_human, block_number=rep.block_number))
    eligible = [row for row in rows if row.evaluations >= minimum]
    provisional = [row for row in rows if row.evaluations < minimum]
    ranked = [BoardRow(**{**row.__dict__, "rank": i})
              for i, row in enumerate(_order(eligible, "r", "desc"), start=1)]
    return Board(context_id=context_id, context_name=name, sort=sort, direction=direction, min_evaluations=minimum,
                 ranked=_order(ranked, sort, direction), provisional=_order(provisional, sort, direction))


def board_contexts() -> list[Context]:
    """The contexts to switch between (the global one is listed apart)."""
    return list(Context.objects.exclude(context_id=GLOBAL_CONTEXT_ID).order_by("name"))


CSV_HEADER = ["rank", "status", "model_id", "name", "r", "ra", "rh", "r_decimal", "ra_decimal", "rh_decimal",
              "n_auto", "n_human", "evaluations", "block_number"]


def _csv_safe(text: str) -> str:
    """Neutralise spreadsheet formulas in free text."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_rows(board: Board) -> list[list]:
    out = [CSV_HEADER]
    for row in board.rows:
        out.append([row.rank if row.rank is not None else "", "ranked" if row.rank is not None else "provisional",
                    row.model_id, _csv_safe(row.name), str(row.r), str(row.ra), str(row.rh),
                    f"{wad_float(row.r):.6f}", f"{wad_float(row.ra):.6f}", f"{wad_float(row.rh):.6f}",
                    row.n_auto, row.n_human, row.evaluations, row.block_number])
    return out
