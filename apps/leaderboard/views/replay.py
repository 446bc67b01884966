"""The MT-Bench replay's line on the boards: how far it is while it runs, then what its rows are.

A fragment the board page loads and refreshes (the boards themselves are cached by version, this line
is not); once the replay is done it answers 286, htmx's "stop polling".
"""

from django.shortcuts import render

from apps.oracle.replay import replay_progress

STOP_POLLING = 286


def replay_line(request):
    progress = replay_progress()
    response = render(request, "leaderboard/_replay_progress.html", {"progress": progress})
    if progress["done"] >= progress["total"]:
        response.status_code = STOP_POLLING
    response["Cache-Control"] = "no-store"
    return response
