"""Where the ledger stands, for pages and operators: is the node reachable, how far behind its head
are the indexed tables, what waits to be sent, and which sender lanes cannot progress (and why).

Pages ask `chain_health()`, which never waits on the node: it answers from the last probe (kept in
the cache for every process that shares it), and when that is older than HEALTH_TTL_S a background
thread of this process probes again with a short timeout while the page goes on with what it has.
A paused or vanished node thus costs a page nothing; it shows as unreachable within a probe's
timeout plus HEALTH_TTL_S.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db.models import Count

from . import relay
from .background import cached_read
from .client import ChainClient, ChainError, chain_time
from .indexer import cursor_name
from .keys import oracle_addresses, relayer_addresses
from .ledger import Deployment, Ledger
from .models import ChainTransaction, IndexerCursor, OutboxItem, Sender

log = logging.getLogger(__name__)
HEALTH_TTL_S = 5
PROBE_TIMEOUT_S = 1.0
# The first page a process serves waits this long at most for the first probe (a dead port answers at
# once; a paused node does not, and then the page goes on without the answer).
FIRST_WAIT_S = 0.3


def probe_node(timeout: float = PROBE_TIMEOUT_S, *, url: str | None = None, deployment=None) -> dict:
    """The node's head and last final block (the RPC part of a probe; this site's node and deployment
    unless given): never raises."""
    out = {"reachable": False, "error": "", "head": None, "final": None}
    try:
        deployment = Deployment.load(deployment or settings.LLMCHAIN_DEPLOYMENT)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        out["error"] = f"no deployment: {exc}"
        return out
    client = ChainClient(url or settings.LLMCHAIN_RPC_URL, poa=settings.LLMCHAIN_POA, timeout=timeout, retries=0)
    try:
        out["head"], out["final"] = Ledger(client, deployment).head_and_final()
        # How far the chain's clock runs ahead of this machine's (a development node may skip days).
        out["clock_offset"] = client.clock_offset()
        out["reachable"] = True
    except (ChainError, KeyError, TypeError, ValueError):
        out["error"] = "the chain node does not answer"  # the URL stays out of pages
    return out


def with_cursor(found: dict) -> dict:
    """`found` (a node probe) with the indexer's cursor and how far behind the head it is."""
    out = {**found, "indexed": None}
    try:
        deployment = relay.deployment()
    except (ValueError, KeyError):
        deployment = None
    if deployment is None:
        return out
    cursor = IndexerCursor.objects.filter(name=cursor_name(Ledger(None, deployment))).first()
    out["indexed"] = cursor.last_block if cursor else None
    if out["reachable"] and out["indexed"] is not None:
        # The probe is cached and the indexer keeps reading: a head older than what was already indexed
        # (final, so also below the head) is the probe's age, not the chain's.
        out["head"] = max(out["head"], out["indexed"])
        out["final"] = max(out["final"], out["indexed"])
        out["behind"] = max(out["head"] - out["indexed"], 0)
        out["not_final"] = max(out["head"] - out["final"], 0)
    return out


def probe(timeout: float = PROBE_TIMEOUT_S) -> dict:
    """The node's head and last final block, and the indexer's cursor: never raises (it waits for the
    node up to `timeout`: for commands, not pages)."""
    return with_cursor(probe_node(timeout))


def _last() -> dict:
    """The last probe's answer about the node (probed again in the background once HEALTH_TTL_S old);
    "reachable" is None before any probe answered."""
    url, path = settings.LLMCHAIN_RPC_URL, settings.LLMCHAIN_DEPLOYMENT  # as the page has them now
    # Per node and deployment: a site (or a test) moved to another node does not inherit an answer.
    found = cached_read(f"chain:health:{url}:{path}", lambda: probe_node(url=url, deployment=path),
                        fresh_s=HEALTH_TTL_S, wait_s=FIRST_WAIT_S)
    return found or {"reachable": None, "error": "not probed yet", "head": None, "final": None}


def chain_health() -> dict:
    """Whether the node answers and how far behind it the indexed tables are, without waiting on the
    node (one query: the indexer's cursor)."""
    return with_cursor(_last())


def reachable() -> bool:
    """False only when the node's last probe failed: no query, no wait."""
    return _last()["reachable"] is not False


def chain_now() -> int:
    """The chain's clock (unix seconds) as of the last probe, without waiting on the node: this
    machine's clock plus how far the chain's latest block was ahead of it (client.chain_time)."""
    return chain_time(_last().get("clock_offset"))


def status() -> dict:
    """Everything `chain status` prints: the probe, the outbox and transactions by status, and the
    lanes that cannot progress with their reasons."""
    report = probe(timeout=5.0)
    report["outbox"] = dict(OutboxItem.objects.values_list("status").annotate(n=Count("id")))
    report["transactions"] = dict(ChainTransaction.objects.values_list("status").annotate(n=Count("id")))
    report["senders"] = {"oracle": list(oracle_addresses()), "relayer": list(relayer_addresses())}
    report["stuck_lanes"] = [{"address": a, "reason": r, "since": s.isoformat() if s else None}
                             for a, r, s in Sender.objects.exclude(stuck_reason="")
                             .values_list("address", "stuck_reason", "stuck_since")]
    return report
