"""Keep the boards' table (BoardEntry) in step with the indexed chain tables.

`refresh` carries the entries of the given pairs forward over their new ReputationChange rows through
the pure `lib.boardstats.extend`, from each entry and its EntryState (the count and last of the
changes it summarizes, the band's steps): the cost of a fold follows the new changes, not the
pairs' histories. A pair without a usable state (new, rolled back by a reorg, an entry from before
the states) is recomputed from its whole history through `lib.boardstats.summarize`, which both
paths equal. The indexer calls `refresh` (through its `folded` signal) inside the transaction that
folds each chunk, so the boards never lag their sources and never recompute on request. `rebuild`
recomputes every entry from scratch (after a migration, to repair, and what audits compare with).
"""

from __future__ import annotations

import logging
import time
from functools import reduce
from operator import or_

from django.db import connection, transaction
from django.db.models import F, Q

from apps.chain import evidence
from apps.chain.models import LedgerInteraction, LedgerModel, Reputation, ReputationChange
from lib.boardstats import Change, Evaluation, PairSummary, Step, Tail, extend, moves_r, summarize_with_tail
from lib.reputation import GLOBAL_CONTEXT_ID

from .metadata import read_metadata
from .models import BoardEntry, BoardState, EntryState

log = logging.getLogger(__name__)

ENTRY_FIELDS = ["name", "ra", "rh", "r", "n_auto", "n_human", "block_number", "changed_at", "spark", "history",
                "band_lo", "band_hi", "band_n"]
STATE_FIELDS = ["changes", "last_block", "last_log_index", "last_interaction", "last_timestamp", "start_r", "steps",
                "broken"]
PAIRS_PER_QUERY = 100  # pairs whose new changes one query reads (3 parameters each)
CHANGE_COLUMNS = ("interaction_id", "ra", "rh", "r", "n_auto", "n_human", "block_number", "timestamp")


def short_id(model_id: str) -> str:
    return model_id[:10] + "…" if len(model_id) > 10 else model_id


def metadata_name(cid: str, store=None) -> str | None:
    """The `name` of the model-metadata record under `cid` (checked against the CID), or None when
    the record cannot be had or is not model metadata."""
    try:
        metadata = read_metadata(cid, store)
    except Exception as exc:  # an IPFS outage must not stop the indexer: the name is retried on the next change
        log.warning("metadata %s unreadable: %s", cid, exc)
        return None
    if not metadata.verified:
        log.warning("metadata %s unreadable: %s", cid, metadata.problem)
        return None
    return metadata.record["name"]


def model_names(model_ids: set[str]) -> dict[str, str]:
    """A display name per model: its latest on-chain metadata record's name. When that record cannot
    be read right now (an IPFS outage), the name the boards already show is kept rather than replaced
    by the short id; a model never named yet gets its short id."""
    cids = dict(LedgerModel.objects.filter(model_id__in=model_ids).values_list("model_id", "metadata_cid"))
    store = evidence.default_store() if cids else None
    known = dict(BoardEntry.objects.filter(model_id__in=model_ids).values_list("model_id", "name"))
    names = {}
    for m in model_ids:
        read = metadata_name(cids[m], store) if m in cids else None
        names[m] = read or known.get(m) or short_id(m)
    return names


def pair_history(model_id: str, context_id: str) -> tuple[list[Change], dict[str, Evaluation]]:
    """The pair's ReputationChange rows in chain order and the human-rated interactions behind them."""
    changes, _, evaluations = _pair_history(model_id, context_id)
    return changes, evaluations


def _pair_history(model_id: str, context_id: str) -> tuple[list[Change], list[int], dict[str, Evaluation]]:
    changes, logs = _changes(ReputationChange.objects.filter(model_id=model_id, context_id=context_id))
    rated = LedgerInteraction.objects.filter(model_id=model_id, sh__isnull=False)
    if context_id != GLOBAL_CONTEXT_ID:
        rated = rated.filter(context_id=context_id)
    evaluations = {iid: Evaluation(iid, ref, int(sa), int(wa), int(sh), int(wh)) for iid, ref, sa, wa, sh, wh in
                   rated.values_list("interaction_id", "has_reference", "sa", "wa", "sh", "wh")}
    return changes, logs, evaluations


def _changes(rows) -> tuple[list[Change], list[int]]:
    """Changes in chain order from a ReputationChange queryset, with their log indexes."""
    found = rows.order_by("block_number", "log_index").values_list(*CHANGE_COLUMNS, "log_index")
    return [Change(*row[:-1]) for row in found], [row[-1] for row in found]


def _entry(model_id: str, context_id: str, name: str, s: PairSummary) -> BoardEntry:
    return BoardEntry(model_id=model_id, context_id=context_id, name=name, ra=s.ra, rh=s.rh, r=s.r,
                      n_auto=s.n_auto, n_human=s.n_human, block_number=s.block, changed_at=s.changed_at,
                      spark=s.spark, history=s.history, band_lo=s.band_lo, band_hi=s.band_hi, band_n=s.band_n)


def _state(model_id: str, context_id: str, tail: Tail, log_index: int) -> EntryState:
    last = tail.last
    steps = None if tail.steps is None else [x for st in tail.steps for x in (st.s, st.w, st.thirds)]
    return EntryState(model_id=model_id, context_id=context_id, changes=tail.n, last_block=last.block,
                      last_log_index=log_index, last_interaction=last.interaction_id, last_timestamp=last.timestamp,
                      start_r=tail.start, steps=steps, broken=tail.broken)


def _summary(e: BoardEntry) -> PairSummary:
    return PairSummary(ra=e.ra, rh=e.rh, r=e.r, n_auto=e.n_auto, n_human=e.n_human, block=e.block_number,
                       timestamp=None, history=e.history, spark=e.spark, band_lo=e.band_lo, band_hi=e.band_hi,
                       band_n=e.band_n)


def _last(e: BoardEntry, st: EntryState) -> Change:
    return Change(st.last_interaction, e.ra, e.rh, e.r, e.n_auto, e.n_human, st.last_block, st.last_timestamp)


def _tail(e: BoardEntry, st: EntryState, steps: list[int] | None) -> Tail:
    return Tail(st.changes, st.start_r, None if steps is None else
                tuple(Step(*steps[k:k + 3]) for k in range(0, len(steps), 3)), st.broken, _last(e, st))


def computed_for(model_id: str, context_id: str, name: str) -> tuple[BoardEntry, EntryState] | None:
    """The pair's entry and state from its whole history; None when it has no change."""
    changes, logs, evaluations = _pair_history(model_id, context_id)
    done = summarize_with_tail(model_id, context_id, changes, evaluations)
    if done is None:
        return None
    summary, tail = done
    return _entry(model_id, context_id, name, summary), _state(model_id, context_id, tail, logs[-1])


def entry_for(model_id: str, context_id: str, name: str) -> BoardEntry | None:
    """The pair's entry computed from its whole history (what `rebuild` writes)."""
    done = computed_for(model_id, context_id, name)
    return done[0] if done else None


def _rows_since(since: dict[tuple[str, str], int]) -> dict[tuple[str, str], list[tuple]]:
    """Each pair's ReputationChange rows from block `since[pair]` on, in chain order, as
    (*CHANGE_COLUMNS, log_index): one query per PAIRS_PER_QUERY pairs, each term an index range
    (written out rather than through the ORM, whose compiling of a hundred-term filter would cost
    more than the query)."""
    meta = ReputationChange._meta
    qn = connection.ops.quote_name
    column = {name: qn(meta.get_field(name).column) for name in (*CHANGE_COLUMNS, "log_index", "model_id",
                                                                  "context_id")}
    select = ", ".join(column[name] for name in (*CHANGE_COLUMNS, "log_index", "model_id", "context_id"))
    term = f"({column['model_id']} = %s AND {column['context_id']} = %s AND {column['block_number']} >= %s)"
    found: dict[tuple[str, str], list[tuple]] = {pair: [] for pair in since}
    pairs = sorted(since)
    with connection.cursor() as cursor:
        for start in range(0, len(pairs), PAIRS_PER_QUERY):
            chunk = pairs[start:start + PAIRS_PER_QUERY]
            cursor.execute(f"SELECT {select} FROM {qn(meta.db_table)} WHERE {' OR '.join([term] * len(chunk))} "
                           f"ORDER BY {column['block_number']}, {column['log_index']}",
                           [x for m, c in chunk for x in (m, c, since[(m, c)])])
            for row in cursor.fetchall():
                found[(row[-2], row[-1])].append(row[:-2])
    return found


def _new_changes(e: BoardEntry, st: EntryState, rows: list[tuple]) -> tuple[list[Change], int] | None:
    """The pair's changes after the last one its entry summarizes (from `rows`: the pair's changes
    from that one's block on), and the log index of the newest; None when that last one is no longer
    there as summarized (rolled back): recompute the pair."""
    if e.block_number != st.last_block:
        return None
    k = next((k for k, row in enumerate(rows) if (row[6], row[-1]) >= (st.last_block, st.last_log_index)), None)
    if k is None:
        return None
    interaction, ra, rh, r, n_auto, n_human, block, _, log_index = rows[k]
    if (block, log_index, interaction, ra, rh, r, n_auto, n_human) != (
            st.last_block, st.last_log_index, st.last_interaction, e.ra, e.rh, e.r, e.n_auto, e.n_human):
        return None
    return [Change(*row[:-1]) for row in rows[k + 1:]], rows[-1][-1]


def _evaluations(wanted: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], dict[str, Evaluation]]:
    """The human-rated interactions behind the given pairs' new steps (as `pair_history` reads them)."""
    ids = sorted(set().union(*wanted.values())) if wanted else []
    found: dict[tuple[str, str], dict[str, Evaluation]] = {pair: {} for pair in wanted}
    for start in range(0, len(ids), 500):
        for iid, model, ctx, ref, sa, wa, sh, wh in LedgerInteraction.objects.filter(
                interaction_id__in=ids[start:start + 500], sh__isnull=False).values_list(
                    "interaction_id", "model_id", "context_id", "has_reference", "sa", "wa", "sh", "wh"):
            for pair in ((model, ctx), (model, GLOBAL_CONTEXT_ID)):
                if iid in wanted.get(pair, ()):
                    found[pair][iid] = Evaluation(iid, ref, int(sa), int(wa), int(sh), int(wh))
    return found


def _pairs_q(pairs) -> Q:
    return reduce(or_, [Q(model_id=m, context_id=c) for m, c in pairs])


def refresh(pairs: set[tuple[str, str]], models: set[str] = frozenset(), contexts: set[str] = frozenset(), *,
            recompute: bool = False) -> int:
    """Bring the entries of `pairs` up to their indexed changes, and the names of `models` everywhere;
    returns entries written. `contexts`: contexts just added (every board lists them: all boards'
    versions move). `recompute`: from each pair's whole history (after a reorg rolled changes back)."""
    pairs = set(pairs)
    if models:
        pairs |= set(Reputation.objects.filter(model_id__in=models).values_list("model_id", "context_id"))
        pairs |= set(BoardEntry.objects.filter(model_id__in=models).values_list("model_id", "context_id"))
    if contexts:
        bump()
    if not pairs:
        return 0
    ordered = sorted(pairs)
    current, states = {}, {}
    if not recompute:
        # The rows' ids first (models x contexts, without their JSON), then the rows of these pairs only.
        models_in, contexts_in = {m for m, _ in pairs}, {c for _, c in pairs}
        for table, found, deferred in ((BoardEntry, current, ()), (EntryState, states, ("steps",))):
            ids = [i for i, m, c in table.objects.filter(model_id__in=models_in, context_id__in=contexts_in)
                   .values_list("id", "model_id", "context_id") if (m, c) in pairs]
            for start in range(0, len(ids), 500):
                found.update({(x.model_id, x.context_id): x for x in
                              table.objects.filter(id__in=ids[start:start + 500]).defer(*deferred)})
    # A name is read from the model's metadata record when it may have changed (the model's metadata
    # moved), when the pair has no entry yet, or when the entry shows the short id (never read: retried).
    read = {m for m, c in pairs if m in models or (m, c) not in current or current[(m, c)].name == short_id(m)}
    names = model_names(read) if read else {}

    def name_of(m: str, c: str) -> str:
        return names.get(m) or current[(m, c)].name

    written: dict[tuple[str, str], tuple[BoardEntry, EntryState]] = {}
    gone: list[tuple[str, str]] = []
    carried: dict[tuple[str, str], tuple[list[Change], int]] = {}
    tails = _rows_since({pair: states[pair].last_block for pair in ordered if pair in current and pair in states})
    for pair in ordered:
        e, st = current.get(pair), states.get(pair)
        new = _new_changes(e, st, tails[pair]) if pair in tails else None
        if new is None:
            done = computed_for(*pair, name_of(*pair))
            if done is None:
                gone.append(pair)
            else:
                written[pair] = done
        else:
            carried[pair] = new
    # Only the pairs whose new changes hold a move of R need their band's steps and evaluations.
    stepping = {pair: {ch.interaction_id for prev, ch in zip([_last(current[pair], states[pair]), *new], new)
                       if moves_r(prev, ch)} for pair, (new, _) in carried.items()}
    stepping = {pair: iids for pair, iids in stepping.items() if iids}
    steps = dict(((s.model_id, s.context_id), s.steps) for s in EntryState.objects.filter(
        id__in=[states[pair].id for pair in stepping]).only("model_id", "context_id", "steps")) if stepping else {}
    evaluations = _evaluations(stepping)
    renamed: list[BoardEntry] = []
    for pair, (new, log_index) in carried.items():
        e, st = current[pair], states[pair]
        if not new:  # nothing new (a rename, or a pair sent twice): the entry as it is
            if e.name != name_of(*pair):
                e.name = name_of(*pair)
                renamed.append(e)
            continue
        try:
            summary, tail = extend(*pair, _summary(e), _tail(e, st, steps.get(pair)), new, evaluations.get(pair, {}))
        except ValueError:  # an entry thinned otherwise (written before the states were kept): from scratch
            done = computed_for(*pair, name_of(*pair))
            if done is not None:
                written[pair] = done
            continue
        written[pair] = _entry(*pair, name_of(*pair), summary), _state(*pair, tail, log_index)
    rows = [entry for entry, _ in written.values()]
    with transaction.atomic():
        BoardEntry.objects.bulk_create(rows, batch_size=500, update_conflicts=True,
                                       unique_fields=["context_id", "model_id"], update_fields=ENTRY_FIELDS)
        BoardEntry.objects.bulk_update(renamed, ["name"], batch_size=500)
        with_steps = [st for _, st in written.values() if st.steps is not None]
        without = [st for _, st in written.values() if st.steps is None]
        for st in without:
            st.steps = []  # not written: the row exists, and its steps stay as they are
        EntryState.objects.bulk_create(with_steps, batch_size=500, update_conflicts=True,
                                       unique_fields=["context_id", "model_id"], update_fields=STATE_FIELDS)
        # States whose steps did not change (and were not read): everything else.
        EntryState.objects.bulk_create(without, batch_size=500, update_conflicts=True,
                                       unique_fields=["context_id", "model_id"],
                                       update_fields=[f for f in STATE_FIELDS if f != "steps"])
        if gone:  # their changes were rolled back (a reorg): no row on the board
            for start in range(0, len(gone), 200):
                BoardEntry.objects.filter(_pairs_q(gone[start:start + 200])).delete()
                EntryState.objects.filter(_pairs_q(gone[start:start + 200])).delete()
        bump({c for _, c in pairs})
    return len(rows) + len(renamed)


def rebuild() -> int:
    """Recompute every entry from the indexed tables."""
    pairs = set(Reputation.objects.values_list("model_id", "context_id"))
    with transaction.atomic():
        BoardEntry.objects.all().delete()
        EntryState.objects.all().delete()
        bump()
        return refresh(pairs, recompute=True) if pairs else 0


def clear() -> None:
    BoardEntry.objects.all().delete()
    EntryState.objects.all().delete()
    bump()


def bump(contexts: set[str] | None = None) -> None:
    """New versions for the boards' caches: of these contexts' boards, or of every board (None).
    A new row starts from the clock, so a version is never reused after the table is emptied (a
    cache would otherwise serve a board from before)."""
    scopes = [BoardState.ALL] if contexts is None else sorted(contexts)
    if contexts is not None:  # the "*" row must exist for anything to be cached
        BoardState.objects.get_or_create(scope=BoardState.ALL, defaults={"version": time.time_ns() // 1000})
    if BoardState.objects.filter(scope__in=scopes).update(version=F("version") + 1) == len(scopes):
        return
    have = set(BoardState.objects.filter(scope__in=scopes).values_list("scope", flat=True))
    for scope in scopes:
        if scope not in have:
            BoardState.objects.get_or_create(scope=scope, defaults={"version": time.time_ns() // 1000})


def bump_ratings(contexts: set[str] | None = None) -> None:
    """A new `ratings` generation, and a new version, for these contexts' boards and the global one
    (None: every board's): what their figures of people's ratings rest on changed, and the boards show
    them. A board without a row yet gets one (its version from the clock, as `bump` makes them)."""
    rows = BoardState.objects.all() if contexts is None else BoardState.objects.filter(
        scope__in=set(contexts) | {GLOBAL_CONTEXT_ID})
    rows.update(ratings=F("ratings") + 1, version=F("version") + 1)
    if contexts is not None:
        for scope in set(contexts) | {GLOBAL_CONTEXT_ID}:
            BoardState.objects.get_or_create(scope=scope, defaults={"version": time.time_ns() // 1000, "ratings": 1})


def ratings_generation(context_id: str) -> int:
    """The board's `ratings` generation (0 before any)."""
    return BoardState.objects.filter(scope=context_id).values_list("ratings", flat=True).first() or 0


def version(context_id: str | None = None) -> str:
    """The version a cached board of `context_id` is keyed by ("" when nothing was ever derived: then
    nothing is cached)."""
    scopes = [BoardState.ALL] + ([context_id] if context_id else [])
    return version_key(dict(BoardState.objects.filter(scope__in=scopes).values_list("scope", "version")),
                       context_id)


def all_versions() -> dict[str, int]:
    return dict(BoardState.objects.values_list("scope", "version"))


def version_key(found: dict[str, int], context_id: str | None = None) -> str:
    """The key of a board's version among the versions `found` (scope -> version): every board's and
    this one's; "" while the every-board row does not exist."""
    if BoardState.ALL not in found:
        return ""
    return ".".join(str(found.get(s, 0)) for s in [BoardState.ALL] + ([context_id] if context_id else []))


def on_folded(sender, pairs=(), models=(), contexts=(), rated=(), **kwargs) -> None:
    # A rollback (reorg) removed the pairs' latest changes: recompute them from what is left. (Each
    # pair's state also checks its last change is still there, so nothing depends on this.)
    rolled_back = getattr(sender, "__name__", "") == "rollback"
    refresh(set(pairs), set(models), set(contexts), recompute=rolled_back)
    if rated:
        bump_ratings(set(rated))


def on_cleared(sender, **kwargs) -> None:
    clear()


def on_boards_changed(sender, contexts=(), rated=(), **kwargs) -> None:
    """New versions for these boards once the sender's transaction commits (at once outside one), and a
    new `ratings` generation for those of `rated`."""
    contexts, rated = set(contexts), set(rated)

    def moved():
        with transaction.atomic():
            bump(contexts)
            if rated:
                bump_ratings(rated)

    transaction.on_commit(moved)
