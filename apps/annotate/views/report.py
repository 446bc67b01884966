"""/annotate/report/: the meta-evaluation report, open to every visitor."""

from __future__ import annotations

from django.db.models import Count, Max
from django.shortcuts import render

from apps.chat.limits import RebuildLimited, cached_build, rebuild_allowance, retry_after

from ..models import Debate, DebateTurn, ExpertVerdict
from ..queue import agreement_by_scenario
from ..report import DEBATE, debates_report


def data_version() -> str:
    """What the report is computed from, in a few numbers: it changes with every debate, turn and
    expert verdict added, changed or removed."""
    parts = [model.objects.aggregate(n=Count("id"), last=Max("id")) for model in (Debate, DebateTurn, ExpertVerdict)]
    settled = Debate.objects.exclude(consensus=None).count()
    return ":".join(f"{p['n']}.{p['last'] or 0}" for p in parts) + f":{settled}"


def _build() -> dict:
    result = debates_report()
    rows = [{"scenario": cell.scenario, "criterion": cell.criterion, "debates": cell.debates, "gold": cell.gold,
             "ties": cell.gold_ties, "scores": [(name, cell.scores.get(name)) for name in result.evaluators]}
            for cell in result.cells]
    rows.append({"overall": True, "debates": sum(c.debates for c in result.cells),
                 "gold": sum(c.gold for c in result.cells), "ties": sum(c.gold_ties for c in result.cells),
                 "scores": [(name, result.overall.get(name)) for name in result.evaluators]})
    return {"report": result, "rows": rows, "agreement": agreement_by_scenario()}


def report(request):
    """Agreement of each single judge and of the debate with the experts, per scenario and criterion,
    and how far the experts agree among themselves. Computed once per version of its data and shared;
    an anonymous address may start a recomputation only LLMCHAIN_RATES["rebuilds"] often (shown the
    previous one meanwhile; 429 with Retry-After when there is none)."""
    try:
        built, stale = cached_build("annotate:report", data_version(), _build, rebuild_allowance(request))
    except RebuildLimited as exc:
        return retry_after(render(request, "annotate/report_limited.html", {"limited": str(exc)}, status=429), exc.wait)
    return render(request, "annotate/report.html", {**built, "stale": stale, "debate_name": DEBATE})
