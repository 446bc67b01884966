"""/verify/: this site's board of one context next to the same board rebuilt from the chain alone, both
at the block the served board was folded up to."""

from __future__ import annotations

import hashlib
import logging
import pickle

from django.conf import settings
from django.core.cache import cache
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from apps.chain import relay
from apps.chain.background import cached_read
from apps.chain.client import ChainClient, ChainError
from apps.chain.health import reachable
from apps.chain.indexer import cursor_name
from apps.chain.ledger import Ledger
from lib.reputation import GLOBAL_CONTEXT_ID

from .. import boards
from ..verify import VerifyError, check_at_block, served_at_block

log = logging.getLogger(__name__)
# The page waits this long at most for a check not made yet (a rebuild from the chain takes longer on
# a long history); it then says it is checking, and reloads itself.
WAIT_S = 0.6
RPC_TIMEOUT_S = 20
# The differences the page names in words above the table, at most; the others are counted there,
# and every one is highlighted in the table.
NAMED_SHOWN = 12


def _background_check(url: str, poa: bool, deployment, context_id: str, served, block: int) -> dict:
    ledger = Ledger(ChainClient(url, poa=poa, timeout=RPC_TIMEOUT_S, retries=0), deployment)
    try:
        return check_at_block(ledger, context_id, served, block)
    except (ChainError, VerifyError) as exc:
        log.warning("verify: the chain cannot be read: %s", exc)  # the node's address stays in the log
        return {"error": True}


def verify(request):
    """The check of `?context=`: the served board at the block it was folded up to, against the chain
    rebuilt at that very block, so that evaluations landing meanwhile never show as a difference. The
    rebuild runs in the background (shared by every visitor of that block and board): the page never
    waits on the node; until the check is made it says so and reloads itself. 503 when the node cannot
    be read."""
    try:
        context_id = boards.parse_context_id(request.GET.get("context"))
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))
    deployment = relay.deployment()
    if deployment is None:
        return render(request, "leaderboard/verify.html", {"error": True}, status=503)
    block, served = served_at_block(context_id, cursor_name(Ledger(None, deployment)))
    if block is None:
        return render(request, "leaderboard/verify.html", {"checking": True, "checked_block": None})
    served_key = hashlib.sha256(pickle.dumps(served)).hexdigest()[:32]  # a board changed behind the indexer's back
    key = f"verify:check:{deployment.chainId}:{deployment.reputation.lower()}:{context_id}:{block}:{served_key}"
    url, poa = settings.LLMCHAIN_RPC_URL, settings.LLMCHAIN_POA
    # With the node known to be down, a check not made yet cannot be made now: no wait for it.
    checked = cached_read(key, lambda: _background_check(url, poa, deployment, context_id, served, block),
                          fresh_s=None, wait_s=WAIT_S if reachable() else 0, keep_s=600)
    if checked is None:
        return render(request, "leaderboard/verify.html", {"checking": True, "checked_block": block,
                                                          "unreachable": not reachable()})
    if checked.get("error"):
        cache.delete(key)  # tried again on the next visit
        return render(request, "leaderboard/verify.html", {"error": True}, status=503)
    if checked.get("unknown"):
        raise Http404(f"No context with id {context_id}, neither on the chain nor on this site.")
    named = checked["report"].named
    return render(request, "leaderboard/verify.html", {
        **checked, "checked_block": block, "columns": checked["chain"].columns,
        "named": named[:NAMED_SHOWN], "named_more": max(len(named) - NAMED_SHOWN, 0),
        "lambda_text": boards.format_lambda(checked["chain"].lambda_wad) if checked["chain"].lambda_wad else "",
        "deployment": deployment, "global_id": GLOBAL_CONTEXT_ID,
        "site_url": request.build_absolute_uri("/").rstrip("/")})
