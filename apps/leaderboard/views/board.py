"""/: the reputation board of one context, as a page or, for htmx, as the part a click swaps."""

from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe
from django.views.decorators.vary import vary_on_headers

from apps.annotate.metaeval_runs import runs_for_context
from apps.chain.ledger import deployment_lambda
from lib.reputation import GLOBAL_CONTEXT_ID

from .. import boards

TABLE_TARGET = "board-table"
# The request headers `board_part` reads (through request.htmx): the answer varies on them.
HTMX_HEADERS = ("HX-Request", "HX-Target", "HX-History-Restore-Request")


def board_part(htmx) -> str:
    """What a board request asks for, from its `request.htmx`: the whole "page" (a plain request or an
    htmx history restore), the "board" (a context link) or only the "table" (a column header)."""
    if not htmx or htmx.history_restore_request:
        return "page"
    return "table" if htmx.target == TABLE_TARGET else "board"


def beside(board: boards.Board) -> dict:
    """What the board's page shows beside the board: the contexts to switch to and this context's
    meta-evaluation runs. Kept per version of the board (a new context moves every board's, a run saved
    its context's), as every sort and direction of it shows the same."""
    def read():
        return {"contexts": [{"context_id": c.context_id, "name": c.name} for c in boards.board_contexts()],
                "metaeval_runs": [{"pk": r.pk, "evaluator": r.evaluator, "label": r.label}
                                  for r in runs_for_context(board.context_id)]}

    return boards.cached_under(f"board-beside:{board.version}:{board.context_id}", read, board.version)


@vary_on_headers(*HTMX_HEADERS)
def board(request):
    """The reputation board of one context (the global one by default), from the precomputed entries.

    The board part is rendered once per version of the board and served from the cache after that.
    """
    try:
        context_id = boards.parse_context_id(request.GET.get("context"))
        sort, direction = boards.parse_sort(request.GET.get("sort"), request.GET.get("dir"), strict=False)
    except boards.BoardError as exc:
        return HttpResponseBadRequest(str(exc))
    part = board_part(request.htmx)
    kind = "table" if part == "table" else "board"
    try:
        # The board as shown: while the indexer moves it every second or two, its views share one
        # standing for a while (boards.reuse_within), and each answer says which version it shows.
        shown = boards.standing(context_id, within=boards.reuse_within())
    except boards.UnknownContext as exc:
        raise Http404(str(exc)) from exc
    version = shown.version

    def produce():
        board = boards.board_from(shown, sort, direction)
        html = render_to_string(f"leaderboard/_{kind}.html", {
            "board": board, "global_id": GLOBAL_CONTEXT_ID, "band_text": boards.BAND_TEXT,
            "debate_text": boards.DEBATE_TEXT, "weight_text": boards.weight_text(deployment_lambda()[0]),
            **beside(board)})
        return {"name": board.context_name, "html": html}

    fragment = boards.cached(kind, context_id, sort, direction, produce, version=version)
    if part != "page":
        response = HttpResponse(fragment["html"])
    else:
        response = render(request, "leaderboard/board.html", {"context_name": fragment["name"],
                                                              "context_id": context_id,
                                                              "board_html": mark_safe(fragment["html"])})
    if version:
        response[boards.VERSION_HEADER] = version
    return response
