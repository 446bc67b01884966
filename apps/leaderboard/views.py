from django.shortcuts import render

from apps.chain.models import Context, Reputation
from lib.reputation import GLOBAL_CONTEXT

GLOBAL_HEX = "0x" + GLOBAL_CONTEXT.hex()


def board(request):
    """The reputation board of one context (the global one by default), from indexed tables."""
    context_id = request.GET.get("context", GLOBAL_HEX)
    contexts = list(Context.objects.exclude(context_id=GLOBAL_HEX).order_by("name"))
    rows = Reputation.objects.filter(context_id=context_id).order_by("-r", "model_id")
    current = next((c.name for c in contexts if c.context_id == context_id), "Global")
    return render(request, "leaderboard/board.html",
                  {"rows": rows, "contexts": contexts, "context_id": context_id, "current": current,
                   "global_id": GLOBAL_HEX})
