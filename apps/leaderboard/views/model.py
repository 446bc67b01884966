"""/reputation/<model id>/: one model's reputation page."""

from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from ..model_page import LATEST_EVALUATIONS, MalformedModelId, UnknownModel, model_report


def model_reputation(request, model_id):
    """The model's metadata, REP per context with its chart, latest evaluations."""
    try:
        report = model_report(model_id)
    except MalformedModelId as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
    except UnknownModel as exc:
        raise Http404(str(exc)) from exc
    return render(request, "leaderboard/model.html", {"report": report, "chart_data": report.chart_data(),
                                                      "latest_max": LATEST_EVALUATIONS})
