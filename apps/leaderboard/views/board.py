from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from apps.annotate.metaeval_runs import runs_for_context
from lib.reputation import GLOBAL_CONTEXT_ID

from . import boards

TABLE_TARGET = "board-table"


def board(request):
    """The reputation board of one context (the global one by default), from the precomputed entries.

    A plain request gets the whole page; an htmx request gets the board (context switch) or, when it
    targets #board-table (a column header), only the table. The board part is rendered once per
    version of the boards' table and served from the cache after that.
    """
    try:
        context_id = boards.parse_context_id(request.GET.get("context"))
        sort, direction = boards.parse_sort(request.GET.get("sort"), request.GET.get("dir"), strict=False)
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))
    htmx = bool(request.headers.get("HX-Request")) and not request.headers.get("HX-History-Restore-Request")
    part = "table" if htmx and request.headers.get("HX-Target") == TABLE_TARGET else "board"

    def produce():
        board = boards.build_board(context_id, sort, direction)
        template = "leaderboard/_table.html" if part == "table" else "leaderboard/_board.html"
        html = render_to_string(template, {"board": board, "contexts": boards.board_contexts(),
                                           "global_id": GLOBAL_CONTEXT_ID, "band_text": boards.BAND_TEXT,
                                           "debate_text": boards.DEBATE_TEXT,
                                           "metaeval_runs": runs_for_context(board.context_id)})
        return {"name": board.context_name, "html": html}

    try:
        fragment = boards.cached(part, context_id, sort, direction, produce)
    except boards.UnknownContext as exc:
        raise Http404(str(exc)) from exc
    if htmx:
        response = HttpResponse(fragment["html"])
    else:
        response = render(request, "leaderboard/board.html", {"context_name": fragment["name"],
                                                              "board_html": mark_safe(fragment["html"])})
    response["Vary"] = "HX-Request, HX-Target"
    return response
