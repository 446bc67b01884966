"""/verify/: this site's board of one context next to the same board rebuilt from the chain alone."""

from __future__ import annotations

import logging

from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from apps.chain.client import ChainError
from apps.chain.ledger import default_ledger
from lib.reputation import GLOBAL_CONTEXT_ID

from .. import boards
from ..verify import COLUMNS, SiteBoards, VerifyError, cached_chain_boards, check_board

log = logging.getLogger(__name__)


def verify(request):
    """Rebuild the boards from this site's node (shared between visitors of the same block) and
    show the served board of `?context=` cell by cell against it; 503 when the node cannot be read."""
    try:
        context_id = boards.parse_context_id(request.GET.get("context"))
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))
    try:
        ledger = default_ledger()
        chain = cached_chain_boards(ledger)
    except (ChainError, VerifyError, FileNotFoundError) as exc:
        log.warning("verify: the chain cannot be read: %s", exc)  # the node's address stays in the log
        return render(request, "leaderboard/verify.html", {"error": True}, status=503)
    served = SiteBoards().board(context_id)
    if served.context_name is None and context_id not in chain.contexts:
        raise Http404(f"No context with id {context_id}, neither on the chain nor on this site.")
    report = check_board(context_id, served, chain)
    contexts = [(c, name) for c, name in chain.contexts.items() if c != GLOBAL_CONTEXT_ID]
    return render(request, "leaderboard/verify.html", {
        "report": report, "chain": chain, "columns": COLUMNS, "rpc_url": ledger.client.url,
        "deployment": ledger.deployment, "global_id": GLOBAL_CONTEXT_ID,
        "contexts": sorted(contexts, key=lambda c: c[1].casefold()),
        "site_url": request.build_absolute_uri("/").rstrip("/")})
