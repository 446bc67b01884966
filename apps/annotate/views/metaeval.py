"""/metaeval/ and /metaeval/<id>/: the saved meta-evaluation runs, open to every visitor."""

from __future__ import annotations

from django.shortcuts import get_object_or_404, render

from ..metaeval_runs import PAIRS_TEXT, SCORES_TEXT, context_names, headline, run_page
from ..models import MetaEvalRun


def run_list(request):
    """Every saved run, newest first, with its headline figure."""
    runs = list(MetaEvalRun.objects.all())
    names = context_names({r.context_id for r in runs})
    rows = [{"run": r, "headline": headline(r), "context_name": names.get(r.context_id, "")} for r in runs]
    return render(request, "annotate/metaeval_list.html", {"rows": rows, "pairs_text": PAIRS_TEXT,
                                                           "scores_text": SCORES_TEXT})


def run_detail(request, pk: int):
    """One run: its full table, a chart of the same figures, what each figure means, how to reproduce it."""
    page = run_page(get_object_or_404(MetaEvalRun, pk=pk))
    return render(request, "annotate/metaeval_run.html", {"page": page, "run": page.run, "chart": page.chart})
