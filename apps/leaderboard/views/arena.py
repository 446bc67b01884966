"""/boards/arena-matrix: a board's pairwise arena win rates, loaded when the board's matrix is opened
(100 models are 10,000 cells: too many to send with every view and sort of the board)."""

from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe
from django.views.decorators.vary import vary_on_headers

from .. import boards


@vary_on_headers("HX-Request")
def arena_matrix(request):
    """The matrix of `?context=` (the global board by default): the fragment for htmx, else a page."""
    try:
        context_id = boards.parse_context_id(request.GET.get("context"))
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))

    def produce():
        board = boards.build_board(context_id)
        return {"name": board.context_name, "context_id": board.context_id,
                "html": render_to_string("leaderboard/_arena_matrix.html", {"arena": board.arena})}

    try:
        part = boards.cached("arena-matrix", context_id, "", "", produce)
    except boards.UnknownContext as exc:
        raise Http404(str(exc)) from exc
    if request.htmx and not request.htmx.history_restore_request:
        return HttpResponse(part["html"])
    return render(request, "leaderboard/arena_matrix.html", {**part, "matrix_html": mark_safe(part["html"])})
