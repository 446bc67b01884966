from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from lib.reputation import GLOBAL_CONTEXT_ID

from . import boards

TABLE_TARGET = "board-table"


def board(request):
    """The reputation board of one context (the global one by default), from indexed tables.

    A plain request gets the whole page; an htmx request gets the board (context switch) or, when it
    targets #board-table (a column header), only the table.
    """
    try:
        board = boards.build_board(request.GET.get("context"), request.GET.get("sort"), request.GET.get("dir"))
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))
    except boards.UnknownContext as exc:
        raise Http404(str(exc)) from exc
    template = "leaderboard/board.html"
    if request.headers.get("HX-Request") and not request.headers.get("HX-History-Restore-Request"):
        template = ("leaderboard/_table.html" if request.headers.get("HX-Target") == TABLE_TARGET
                    else "leaderboard/_board.html")
    response = render(request, template, {"board": board, "contexts": boards.board_contexts(),
                                          "global_id": GLOBAL_CONTEXT_ID})
    response["Vary"] = "HX-Request, HX-Target"
    return response
