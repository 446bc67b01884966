"""Where the ledger stands, for pages and operators: is the node reachable, how far behind its head
are the indexed tables, what waits to be sent, and which sender lanes cannot progress (and why).

Pages ask `chain_health()`, which probes the node with a short timeout at most once every
HEALTH_TTL_S per process (the answer is cached), so an outage costs a page one second at most and
never a probe per request.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count

from .client import ChainClient, ChainError
from .indexer import cursor_name
from .ledger import Deployment, Ledger
from .models import ChainTransaction, IndexerCursor, OutboxItem, Sender

log = logging.getLogger(__name__)
HEALTH_TTL_S = 5
_CACHE_KEY = "chain:health"


def probe(timeout: float = 1.0) -> dict:
    """The node's head and last final block, and the indexer's cursor: never raises."""
    out = {"reachable": False, "error": "", "head": None, "final": None, "indexed": None}
    try:
        deployment = Deployment.load(settings.LLMCHAIN_DEPLOYMENT)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        out["error"] = f"no deployment: {exc}"
        return out
    client = ChainClient(settings.LLMCHAIN_RPC_URL, poa=settings.LLMCHAIN_POA, timeout=timeout, retries=0)
    ledger = Ledger(client, deployment)
    try:
        out["head"], out["final"] = ledger.head_and_final()
        out["reachable"] = True
    except ChainError:
        out["error"] = "the chain node does not answer"  # the URL stays out of pages
    cursor = IndexerCursor.objects.filter(name=cursor_name(ledger)).first()
    out["indexed"] = cursor.last_block if cursor else None
    if out["reachable"] and out["indexed"] is not None:
        out["behind"] = max(out["head"] - out["indexed"], 0)
        out["not_final"] = max(out["head"] - out["final"], 0)
    return out


def chain_health() -> dict:
    """`probe()`, cached for HEALTH_TTL_S in this process's cache."""
    found = cache.get(_CACHE_KEY)
    if found is None:
        found = probe()
        cache.set(_CACHE_KEY, found, HEALTH_TTL_S)
    return found


def status() -> dict:
    """Everything `chain status` prints: the probe, the outbox and transactions by status, and the
    lanes that cannot progress with their reasons."""
    report = probe(timeout=5.0)
    report["outbox"] = dict(OutboxItem.objects.values_list("status").annotate(n=Count("id")))
    report["transactions"] = dict(ChainTransaction.objects.values_list("status").annotate(n=Count("id")))
    report["stuck_lanes"] = [{"address": a, "reason": r, "since": s.isoformat() if s else None}
                             for a, r, s in Sender.objects.exclude(stuck_reason="")
                             .values_list("address", "stuck_reason", "stuck_since")]
    return report
