"""The MT-Bench replay's line on the boards: how far it is while it runs, then what its rows are.

A fragment the board page loads and refreshes (the boards themselves are cached by version, this line
is not); once the replay is done it answers 286, htmx's "stop polling".
"""

from django.shortcuts import render
from django_htmx.http import HTMX_STOP_POLLING

from apps.oracle.replay import replay_progress


def replay_line(request):
    progress = replay_progress()
    response = render(request, "leaderboard/_replay_progress.html", {"progress": progress})
    if progress["done"] >= progress["total"]:
        response.status_code = HTMX_STOP_POLLING
    response["Cache-Control"] = "no-store"
    return response
