"""/metaeval/ and /metaeval/<id>/: the saved meta-evaluation runs, open to every visitor."""

from __future__ import annotations

from django.shortcuts import get_object_or_404, render

from ..metaeval_runs import PAIRS_TEXT, SCORES_TEXT, context_names, headline, run_page
from apps.chain.models import Context

from ..models import MetaEvalRun, Qualification


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


def judge_qualification(request, pk: int):
    """The model page's part on judging: whether the model, as a judge, has beaten preferring the
    longer answer on the human-labelled sets (loaded after the page, from the database alone). Until a
    qualification has finished it says what is queued or running, or what failed, and for the built-in
    model what the project measured of it earlier."""
    from apps.chat.models import RegisteredModel

    from ..qualify import judge_evaluator, latest, measured_text, refusal, waiting_text

    model = get_object_or_404(RegisteredModel, pk=pk)
    evaluator = judge_evaluator(model.name)
    rows = Qualification.objects.filter(evaluator=evaluator)
    waiting = rows.filter(status__in=[Qualification.Status.PENDING, Qualification.Status.RUNNING]).first()
    newest = rows.first()
    done = latest(evaluator)
    return render(request, "annotate/_judge_qualification.html", {
        "model": model, "is_judge": model.is_judge, "done": done, "waiting": waiting,
        "waiting_text": waiting_text(waiting) if waiting else "",
        "failed": newest if newest and newest.status == Qualification.Status.FAILED else None,
        "measured_text": "" if done else measured_text(evaluator),
        "refusal": refusal(evaluator) if done else "", "evaluator": evaluator,
        "sets": list((done.figures.get("per_set") or {}).items()) if done else []})


def board_validity(request, context_id: str):
    """The board's line on how often the automatic score agrees with this board's people, loaded after
    the board (the figures take a bootstrap): kept for a minute per board and count of human signals."""
    from django.core.cache import cache
    from django.http import Http404

    from apps.chain.models import ArenaBattle
    from apps.chain.models import LedgerInteraction
    from lib.reputation import GLOBAL_CONTEXT_ID

    from ..site_validity import plain_line, rating_line, site_validity

    context_id = context_id.lower()
    scoped = {} if context_id == GLOBAL_CONTEXT_ID else {"context_id": context_id}
    if scoped and not Context.objects.filter(context_id=context_id).exists():
        raise Http404("no such board")
    signals = (ArenaBattle.objects.filter(counted=True, **scoped).count(),
               LedgerInteraction.objects.filter(sh__isnull=False, **scoped).count())
    key = f"board-validity:{context_id}:{signals[0]}:{signals[1]}"
    found = cache.get(key)
    if found is None:
        found = site_validity(context_id)[context_id]
        cache.set(key, found, 60)
    return render(request, "annotate/_board_validity.html", {"line": plain_line(found), "figures": found,
                                                            "rating_line": rating_line(found["ratings"])})
