"""/verify/: this site's board of one context next to the same board rebuilt from the chain alone."""

from __future__ import annotations

import logging

from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from apps.chain.client import ChainError
from apps.chain.ledger import default_ledger
from apps.chat.limits import RebuildLimited, cached_build, rebuild_allowance, retry_after
from lib.reputation import GLOBAL_CONTEXT_ID

from .. import boards, entries
from ..verify import SiteBoards, VerifyError, cached_chain_boards, check_board

log = logging.getLogger(__name__)


def _check(ledger, context_id: str) -> dict:
    """The chain's rebuild (shared between visitors of the same block) and the served board of
    `context_id` compared with it, taken together."""
    chain = cached_chain_boards(ledger)
    served = SiteBoards().board(context_id)
    if served.context_name is None and context_id not in chain.contexts:
        return {"unknown": True}
    contexts = [(c, name) for c, name in chain.contexts.items() if c != GLOBAL_CONTEXT_ID]
    return {"report": check_board(context_id, served, chain), "chain": chain,
            "contexts": sorted(contexts, key=lambda c: c[1].casefold())}


def verify(request):
    """The check of `?context=`, kept per chain block and board version: visitors of the same block
    and board share one; an anonymous address may start a new one only LLMCHAIN_RATES["rebuilds"]
    often (it is shown the previous one meanwhile, with the block it was made at); 503 when the node
    cannot be read, 429 with Retry-After when there is no earlier check to show."""
    try:
        context_id = boards.parse_context_id(request.GET.get("context"))
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))
    try:
        ledger = default_ledger()
        head = ledger.client.block_number()
        d = ledger.deployment
        checked, stale = cached_build(
            f"verify:page:{d.chainId}:{d.reputation.lower()}:{context_id}",
            f"{head}:{entries.version(context_id)}", lambda: _check(ledger, context_id),
            rebuild_allowance(request), timeout=600)
    except RebuildLimited as exc:
        return retry_after(render(request, "leaderboard/verify.html", {"limited": str(exc)}, status=429), exc.wait)
    except (ChainError, VerifyError, FileNotFoundError) as exc:
        log.warning("verify: the chain cannot be read: %s", exc)  # the node's address stays in the log
        return render(request, "leaderboard/verify.html", {"error": True}, status=503)
    if checked.get("unknown"):
        raise Http404(f"No context with id {context_id}, neither on the chain nor on this site.")
    return render(request, "leaderboard/verify.html", {
        **checked, "stale": stale, "current_head": head, "columns": checked["chain"].columns,
        "lambda_text": boards.format_lambda(checked["chain"].lambda_wad) if checked["chain"].lambda_wad else "",
        "deployment": ledger.deployment, "global_id": GLOBAL_CONTEXT_ID,
        "site_url": request.build_absolute_uri("/").rstrip("/")})
