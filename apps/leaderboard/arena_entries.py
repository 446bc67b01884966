"""Keep the arena's tables (ArenaEntry, ArenaBoard) in step with the indexed votes (apps.chain ArenaBattle).

Inside the indexer's transaction (`on_folded`) the boards whose votes changed, and the global one, are
only marked stale (their `generation` moves): a refit of 1,000,000 votes takes seconds (`bench boards`
measures it), too long to hold the database's write lock that the chat, the workers and the indexer
share. Right after the commit (`transaction.on_commit`; or in a process of its own, `leaderboard arena
--follow`, with LLMCHAIN_ARENA_REFIT=worker) `refresh_stale` refits every stale board from the
ArenaBattle rows through `arena.compute` and writes its entries in one short transaction, then moves
the board's version, so its cached pages re-render. A crash in between leaves the mark: the next
refresh, or `leaderboard rebuild`, does the work. Votes folded during a refit leave the board stale for
the next one, so a burst of votes costs one refit per pass, not one per vote.

The style covariates need each answer's text: read once per answer (AnswerStyle) from the chat's
Interaction, or else from this site's own copy of the evidence record (no network in a refresh).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from apps.chain import indexer
from apps.chain.evidence import evidence_answer, local_store
from apps.chain.models import ArenaBattle, LedgerInteraction
from apps.chat.models import Interaction
from lib.reputation import GLOBAL_CONTEXT_ID

from . import arena, entries
from .models import AnswerStyle, ArenaBoard, ArenaEntry

log = logging.getLogger(__name__)

ENTRY_FIELDS = ["elo", "ci_low", "ci_high", "rank", "battles", "wins", "ties", "losses", "win_rate", "style_elo",
                "style_ci_low", "style_ci_high", "style_rank"]
CHUNK = 500  # ids per IN (...) query


# --- the answers' style ------------------------------------------------------------------------------

def measure_answers(interaction_ids: set[str]) -> dict[str, tuple[int, float]]:
    """The style of these answers, measured and stored (AnswerStyle) for the ones whose text is found."""
    found: dict[str, tuple[str, str]] = {}  # id -> (text, source)
    ids = sorted(interaction_ids)
    for k in range(0, len(ids), CHUNK):
        for iid, text in Interaction.objects.filter(
                interaction_id__in=ids[k:k + CHUNK], status=Interaction.Status.DONE).values_list(
                "interaction_id", "answer"):
            found[iid] = (text, AnswerStyle.Source.CHAT)
    rest = [i for i in ids if i not in found]
    if rest:
        store = local_store()
        for k in range(0, len(rest), CHUNK):
            for iid, cid in LedgerInteraction.objects.filter(interaction_id__in=rest[k:k + CHUNK]).values_list(
                    "interaction_id", "evidence_cid"):
                text = evidence_answer(cid, iid, store)
                if text is not None:
                    found[iid] = (text, AnswerStyle.Source.EVIDENCE)
    measured = {iid: arena.answer_style(text) for iid, (text, _) in found.items()}
    AnswerStyle.objects.bulk_create([AnswerStyle(interaction_id=iid, length=measured[iid][0], markdown=measured[iid][1],
                                                 source=source) for iid, (_, source) in found.items()],
                                    ignore_conflicts=True, batch_size=CHUNK)
    return measured


# --- the votes -------------------------------------------------------------------------------------------
#
# A refit at every vote must not read a million rows each time: this process keeps each context's counted
# votes in memory as numpy columns (each battle id as four big-endian 64-bit words, so that numpy sorts
# them as the hex strings sort; each model as its number in this process's list of models) and reads only
# the votes folded since (`vote_block` above the highest it holds: the indexer folds whole blocks). The
# count and block sum of the voted rows, read from the (context_id, vote_block) index, must then match
# what it holds; a rollback (a reorg), a reset or any other difference makes it read the context again.
# `reload=True` reads from scratch (`leaderboard rebuild`).

@dataclass
class _ContextVotes:
    """One context's votes as this process read them, in the order read."""

    voted: int  # rows with a vote, counted or not
    blocks: int  # the sum of their vote blocks
    watermark: int  # the highest vote block read
    battle: np.ndarray  # (n, 4) words
    a: np.ndarray  # the models' numbers in _models
    b: np.ndarray
    outcome: np.ndarray
    vote_block: np.ndarray
    style: np.ndarray  # (n, 4): len_a, md_a, len_b, md_b; NaN: not known yet
    unknown: dict[int, tuple[str, str]] = field(default_factory=dict)  # row -> its interactions, style not known

    @classmethod
    def empty(cls) -> _ContextVotes:
        none = np.zeros(0, np.int64)
        return cls(0, 0, -1, np.zeros((0, 4), dtype=np.uint64), none, none, none, none, np.zeros((0, 4)))


_votes: dict[str, _ContextVotes] = {}
_models: list[str] = []  # every model id met, numbered in the order met
_model_numbers: dict[str, int] = {}


def _numbers(model_ids: list[str]) -> np.ndarray:
    for m in model_ids:
        if m not in _model_numbers:
            _model_numbers[m] = len(_models)
            _models.append(m)
    return np.fromiter(map(_model_numbers.__getitem__, model_ids), dtype=np.int64, count=len(model_ids))


def _words(hex_ids: list[str]) -> np.ndarray:
    """0x-hex 32-byte ids as rows of four big-endian 64-bit words."""
    return np.frombuffer(b"".join(bytes.fromhex(h[2:]) for h in hex_ids), dtype=">u8").astype(np.uint64).reshape(
        len(hex_ids), 4)




def _voted_count(context_id: str) -> tuple[int, int]:
    """(rows with a vote, the sum of their vote blocks): read from the (context_id, vote_block) index alone."""
    found = ArenaBattle.objects.filter(context_id=context_id, vote_block__isnull=False).aggregate(
        n=Count("vote_block"), blocks=Sum("vote_block"))
    return found["n"], found["blocks"] or 0


def _read(context_id: str, held: _ContextVotes) -> _ContextVotes:
    """`held` and the votes folded after its watermark; the counted ones with their answers' style."""
    qn = connection.ops.quote_name
    battle, style = qn(ArenaBattle._meta.db_table), qn(AnswerStyle._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT b.battle_id, b.model_a, b.model_b, b.outcome, b.vote_block, b.interaction_a, b.interaction_b, "
            f"b.counted, sa.length, sa.markdown, sb.length, sb.markdown FROM {battle} b "
            f"LEFT JOIN {style} sa ON sa.interaction_id = b.interaction_a "
            f"LEFT JOIN {style} sb ON sb.interaction_id = b.interaction_b "
            f"WHERE b.context_id = %s AND b.vote_block > %s", [context_id, held.watermark])
        rows = cursor.fetchall()
    if not rows:
        return held
    counted = [r for r in rows if r[7] and r[3] is not None]
    missing = {r[5 + k] for r in counted for k in (0, 1) if r[8 + 2 * k] is None}
    measured = measure_answers(missing) if missing else {}
    unknown = dict(held.unknown)
    values = np.full((len(counted), 4), np.nan)
    for k, r in enumerate(counted):
        sa = r[8:10] if r[8] is not None else measured.get(r[5])
        sb = r[10:12] if r[10] is not None else measured.get(r[6])
        if sa and sb:
            values[k] = (*sa, *sb)
        else:
            unknown[len(held.battle) + k] = (r[5], r[6])

    return _ContextVotes(
        voted=held.voted + len(rows), blocks=held.blocks + sum(r[4] for r in rows),
        watermark=max(held.watermark, max(r[4] for r in rows)),
        battle=np.concatenate([held.battle, _words([r[0] for r in counted])]),
        a=np.concatenate([held.a, _numbers([r[1] for r in counted])]),
        b=np.concatenate([held.b, _numbers([r[2] for r in counted])]),
        outcome=np.concatenate([held.outcome, np.array([r[3] for r in counted], dtype=np.int64)]),
        vote_block=np.concatenate([held.vote_block, np.array([r[4] for r in counted], dtype=np.int64)]),
        style=np.concatenate([held.style, values]), unknown=unknown)


def _fill_unknown(held: _ContextVotes) -> None:
    """Try again the answers whose style was not known (their evidence may be readable now)."""
    if not held.unknown:
        return
    wanted = sorted({i for pair in held.unknown.values() for i in pair})
    found = {}
    for k in range(0, len(wanted), CHUNK):
        found.update((i, (n, m)) for i, n, m in AnswerStyle.objects.filter(interaction_id__in=wanted[k:k + CHUNK])
                     .values_list("interaction_id", "length", "markdown"))
    found.update(measure_answers(set(wanted) - set(found)))
    for row, (ia, ib) in list(held.unknown.items()):
        if ia in found and ib in found:
            held.style[row] = (*found[ia], *found[ib])
            del held.unknown[row]


def context_votes(context_id: str, *, reload: bool = False) -> _ContextVotes:
    """One context's counted votes, as up to date as the database (see above)."""
    held = None if reload else _votes.get(context_id)
    if held is not None:
        _fill_unknown(held)
        held = _read(context_id, held)
        if (held.voted, held.blocks) != _voted_count(context_id):
            held = None  # rolled back, or changed behind the indexer's back: read it again
    if held is None:
        held = _read(context_id, _ContextVotes.empty())
    _votes[context_id] = held
    return held


def forget_votes(contexts: set[str] | None = None) -> None:
    """Drop what this process holds of these contexts' votes (all: None)."""
    for context_id in list(_votes) if contexts is None else contexts:
        _votes.pop(context_id, None)


def load_votes(context_id: str, *, reload: bool = False) -> arena.VoteColumns:
    """The board's counted votes in battle id order, with their answers' style: a context's, or for the
    global board every context's."""
    if context_id == GLOBAL_CONTEXT_ID:
        contexts = sorted(set(ArenaBattle.objects.filter(vote_block__isnull=False).values_list(
            "context_id", flat=True).distinct()))
        forget_votes(set(_votes) - set(contexts))
    else:
        contexts = [context_id]
    parts = [context_votes(c, reload=reload) for c in contexts] or [_ContextVotes.empty()]
    battle = np.concatenate([p.battle for p in parts])
    order = np.argsort(battle[:, 0], kind="stable")  # the ids' order, unless two share their first 8 bytes
    if len(order) > 1 and (np.diff(battle[order, 0]) == 0).any():
        order = np.lexsort(battle.T[::-1])  # by the first word, then the second, ...

    def column(name):
        return np.concatenate([getattr(p, name) for p in parts])[order]

    a, b = column("a"), column("b")
    met = np.unique(np.concatenate([a, b]))
    models = sorted(_models[k] for k in met)
    position = np.zeros(len(_models), dtype=np.int64)
    position[[_model_numbers[m] for m in models]] = np.arange(len(models))
    style, blocks = column("style"), column("vote_block")
    return arena.VoteColumns(tuple(models), position[a], position[b], column("outcome").astype(np.int64),
                             style[:, 0], style[:, 1], style[:, 2], style[:, 3],
                             int(blocks.max()) if len(blocks) else None)


# --- the refresh ----------------------------------------------------------------------------------------

def rounds() -> tuple[int, int]:
    return settings.LLMCHAIN_ARENA_BOOTSTRAP, settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP


def refresh_board(context_id: str, *, reload: bool = False) -> arena.ArenaResult:
    """Refit one board from its votes and store it, unless a refresh of a newer generation already did.
    `reload`: read the votes from scratch, not from what this process holds."""
    started = time.perf_counter()
    generation = ArenaBoard.objects.filter(context_id=context_id).values_list("generation", flat=True).first() or 0
    bootstrap, style_bootstrap = rounds()
    result = arena.compute(context_id, load_votes(context_id, reload=reload), bootstrap=bootstrap,
                           style_bootstrap=style_bootstrap)
    fields = dict(votes=result.votes, style_votes=result.style_votes, last_vote_block=result.last_vote_block,
                  seed=result.seed, bootstrap=result.bootstrap, style_bootstrap=result.style_bootstrap,
                  ranking=[x.model_id for x in result.lines], win_rates=[list(r) for r in result.win_rates],
                  coefficients=list(result.coefficients), style_problem=result.style_problem[:300],
                  style_failed=result.style_failed,
                  computed_at=timezone.now(), seconds=round(time.perf_counter() - started, 3))
    with transaction.atomic():
        ArenaBoard.objects.get_or_create(context_id=context_id)
        if not ArenaBoard.objects.filter(context_id=context_id, computed_generation__lte=generation).update(
                computed_generation=generation, **fields):
            return result  # a newer refit is stored already
        ArenaEntry.objects.filter(context_id=context_id).exclude(
            model_id__in=[x.model_id for x in result.lines]).delete()
        ArenaEntry.objects.bulk_create(
            [ArenaEntry(model_id=x.model_id, context_id=context_id, **{f: getattr(x, f) for f in ENTRY_FIELDS})
             for x in result.lines], batch_size=CHUNK, update_conflicts=True,
            unique_fields=["context_id", "model_id"], update_fields=ENTRY_FIELDS)
        entries.bump({context_id})
    return result


def refresh_stale(*, reload: bool = False) -> list[str]:
    """Refit every stale board (the global one last); returns their context ids."""
    stale = sorted(ArenaBoard.objects.filter(generation__gt=F("computed_generation"))
                   .values_list("context_id", flat=True), key=lambda c: (c == GLOBAL_CONTEXT_ID, c))
    for context_id in stale:
        result = refresh_board(context_id, reload=reload and context_id != GLOBAL_CONTEXT_ID)
        log.info("arena of %s refitted: %d votes, %d models", context_id, result.votes, len(result.lines))
    return stale


def _next_generation(context_id: str) -> None:
    """Move the board's generation on, creating its row at 1 if it has none. Two processes may both
    find no row (the indexer and a rebuild, say): the second one's insert fails inside its savepoint
    and it moves the row the first created instead of failing its whole transaction."""
    if ArenaBoard.objects.filter(context_id=context_id).update(generation=F("generation") + 1):
        return
    try:
        with transaction.atomic():
            ArenaBoard.objects.create(context_id=context_id, generation=1)
    except IntegrityError:
        ArenaBoard.objects.filter(context_id=context_id).update(generation=F("generation") + 1)


def mark_stale(contexts: set[str]) -> None:
    """Within the indexer's transaction: these boards' votes changed (and so the global board's)."""
    for context_id in sorted(set(contexts) | {GLOBAL_CONTEXT_ID}):
        _next_generation(context_id)
    if settings.LLMCHAIN_ARENA_REFIT == "after-fold":  # else the `leaderboard arena --follow` worker refits
        transaction.on_commit(refresh_stale, robust=True)  # a failure is logged; the mark stays for the next pass


def rebuild() -> int:
    """Refit every board that has votes (and forget the arena of those that have none); returns boards."""
    voted = set(ArenaBattle.objects.filter(counted=True, outcome__isnull=False)
                .values_list("context_id", flat=True).distinct())
    if voted:
        voted.add(GLOBAL_CONTEXT_ID)
    with transaction.atomic():
        gone = list(ArenaBoard.objects.exclude(context_id__in=voted).values_list("context_id", flat=True))
        ArenaEntry.objects.exclude(context_id__in=voted).delete()
        ArenaBoard.objects.exclude(context_id__in=voted).delete()
        if gone:
            entries.bump(set(gone))
        for context_id in voted:
            _next_generation(context_id)
    forget_votes()
    return len(refresh_stale(reload=True))


def clear() -> None:
    ArenaEntry.objects.all().delete()
    ArenaBoard.objects.all().delete()
    forget_votes()


def on_folded(sender, arena=(), **kwargs) -> None:
    if arena:
        if sender is not indexer.fold:  # a rollback: votes went back, read those contexts again
            forget_votes(set(arena))
        mark_stale(set(arena))


def on_cleared(sender, **kwargs) -> None:
    clear()
