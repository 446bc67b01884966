"""/annotate/report/: the meta-evaluation report, open to every visitor."""

from __future__ import annotations

from django.shortcuts import render

from ..queue import agreement_by_scenario
from ..report import DEBATE, debates_report


def report(request):
    """Agreement of each single judge and of the debate with the experts, per scenario and criterion,
    and how far the experts agree among themselves."""
    result = debates_report()
    rows = [{"scenario": cell.scenario, "criterion": cell.criterion, "debates": cell.debates, "gold": cell.gold,
             "ties": cell.gold_ties, "scores": [(name, cell.scores.get(name)) for name in result.evaluators]}
            for cell in result.cells]
    rows.append({"overall": True, "debates": sum(c.debates for c in result.cells),
                 "gold": sum(c.gold for c in result.cells), "ties": sum(c.gold_ties for c in result.cells),
                 "scores": [(name, result.overall.get(name)) for name in result.evaluators]})
    return render(request, "annotate/report.html", {"report": result, "rows": rows, "debate_name": DEBATE,
                                                    "agreement": agreement_by_scenario()})
