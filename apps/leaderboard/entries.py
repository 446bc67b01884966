"""Keep the boards' table (BoardEntry) in step with the indexed chain tables.

`refresh` recomputes the entries of the given pairs from ReputationChange and LedgerInteraction rows
through the pure `lib.boardstats.summarize`; the indexer calls it (through its `folded` signal)
inside the transaction that folds each chunk, so the boards never lag their sources and never
recompute on request. `rebuild` recomputes every entry (after a migration, or to repair).
"""

from __future__ import annotations

import logging
import time
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import F, Q

from apps.chain import evidence
from apps.chain.models import LedgerInteraction, LedgerModel, Reputation, ReputationChange
from lib.boardstats import Change, Evaluation, summarize
from lib.reputation import GLOBAL_CONTEXT_ID

from .metadata import read_metadata
from .models import BoardEntry, BoardState

log = logging.getLogger(__name__)

ENTRY_FIELDS = ["name", "ra", "rh", "r", "n_auto", "n_human", "block_number", "changed_at", "spark", "history",
                "band_lo", "band_hi", "band_n"]


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
    changes = [Change(*row) for row in ReputationChange.objects.filter(model_id=model_id, context_id=context_id)
               .order_by("block_number", "log_index")
               .values_list("interaction_id", "ra", "rh", "r", "n_auto", "n_human", "block_number", "timestamp")]
    rated = LedgerInteraction.objects.filter(model_id=model_id, sh__isnull=False)
    if context_id != GLOBAL_CONTEXT_ID:
        rated = rated.filter(context_id=context_id)
    evaluations = {iid: Evaluation(iid, ref, int(sa), int(wa), int(sh), int(wh)) for iid, ref, sa, wa, sh, wh in
                   rated.values_list("interaction_id", "has_reference", "sa", "wa", "sh", "wh")}
    return changes, evaluations


def entry_for(model_id: str, context_id: str, name: str) -> BoardEntry | None:
    changes, evaluations = pair_history(model_id, context_id)
    s = summarize(model_id, context_id, changes, evaluations)
    if s is None:
        return None
    return BoardEntry(model_id=model_id, context_id=context_id, name=name, ra=s.ra, rh=s.rh, r=s.r,
                      n_auto=s.n_auto, n_human=s.n_human, block_number=s.block, changed_at=s.changed_at,
                      spark=s.spark, history=s.history, band_lo=s.band_lo, band_hi=s.band_hi, band_n=s.band_n)


def refresh(pairs: set[tuple[str, str]], models: set[str] = frozenset(), contexts: set[str] = frozenset()) -> int:
    """Recompute the entries of `pairs`, and the names of `models` everywhere; returns entries written.
    `contexts`: contexts just added (every board lists them: all boards' versions move)."""
    pairs = set(pairs)
    if models:
        pairs |= set(Reputation.objects.filter(model_id__in=models).values_list("model_id", "context_id"))
        pairs |= set(BoardEntry.objects.filter(model_id__in=models).values_list("model_id", "context_id"))
    if contexts:
        bump()
    if not pairs:
        return 0
    names = model_names({m for m, _ in pairs})
    computed = {(m, c): entry_for(m, c, names[m]) for m, c in sorted(pairs)}
    rows = [e for e in computed.values() if e is not None]
    with transaction.atomic():
        BoardEntry.objects.bulk_create(rows, batch_size=500, update_conflicts=True,
                                       unique_fields=["context_id", "model_id"], update_fields=ENTRY_FIELDS)
        gone = [Q(model_id=m, context_id=c) for (m, c), entry in computed.items() if entry is None]
        if gone:  # their changes were rolled back (a reorg): no row on the board
            BoardEntry.objects.filter(reduce(or_, gone)).delete()
        bump({c for _, c in pairs})
    return len(rows)


def rebuild() -> int:
    """Recompute every entry from the indexed tables."""
    pairs = set(Reputation.objects.values_list("model_id", "context_id"))
    with transaction.atomic():
        BoardEntry.objects.all().delete()
        bump()
        return refresh(pairs) if pairs else 0


def clear() -> None:
    BoardEntry.objects.all().delete()
    bump()


def bump(contexts: set[str] | None = None) -> None:
    """New versions for the boards' caches: of these contexts' boards, or of every board (None).
    A new row starts from the clock, so a version is never reused after the table is emptied (a
    cache would otherwise serve a board from before)."""
    scopes = [BoardState.ALL] if contexts is None else sorted(contexts)
    if contexts is not None:  # the "*" row must exist for anything to be cached
        BoardState.objects.get_or_create(scope=BoardState.ALL, defaults={"version": time.time_ns() // 1000})
    for scope in scopes:
        if not BoardState.objects.filter(scope=scope).update(version=F("version") + 1):
            BoardState.objects.get_or_create(scope=scope, defaults={"version": time.time_ns() // 1000})


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


def on_folded(sender, pairs=(), models=(), contexts=(), **kwargs) -> None:
    refresh(set(pairs), set(models), set(contexts))


def on_cleared(sender, **kwargs) -> None:
    clear()


def on_boards_changed(sender, contexts=(), **kwargs) -> None:
    """New versions for these boards once the sender's transaction commits (at once outside one)."""
    contexts = set(contexts)
    transaction.on_commit(lambda: bump(contexts))
