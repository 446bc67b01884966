"""python manage.py metaeval debates

`debates`: per scenario and criterion, the example-level agreement rate (seed 003 eq. 2) of the
debate and of each single judge with the experts' verdicts, with the system-level agreement
(eq. 3) as agreed/compared system pairs. Prints a table, then, as its last line, one JSON object
with every figure the table shows (apps/annotate/report.py defines them).
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from ...report import DEBATE, debates_report


def printable(text: str) -> str:
    """Names come from imported files: never let one send control sequences to the terminal."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def _cell(score) -> str:
    if score is None or not score.example.n:
        return "—"
    ex = score.example
    text = f"{ex.rate:.3f} ({ex.agreed}/{ex.n}"
    if ex.unparseable:
        text += f", {ex.unparseable}?"
    text += f"; sys {score.system_agreed}/{score.system_compared})"
    return text


class Command(BaseCommand):
    help = "Meta-evaluation reports: how well evaluators agree with the experts."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("debates", help="agreement of each single judge and of the debate with the experts' verdicts")

    def handle(self, *args, action, **opts):
        return getattr(self, f"do_{action}")(**opts)

    def do_debates(self, **_):
        report = debates_report()
        head = ["scenario", "criterion", "debates", "gold", "ties", *report.evaluators]
        rows = [[printable(c.scenario) or "(none)", printable(c.criterion), str(c.debates), str(c.gold),
                 str(c.gold_ties), *(_cell(c.scores.get(name)) for name in report.evaluators)]
                for c in report.cells]
        rows.append(["overall", "", str(sum(c.debates for c in report.cells)), str(sum(c.gold for c in report.cells)),
                     str(sum(c.gold_ties for c in report.cells)),
                     *(_cell(report.overall.get(name)) for name in report.evaluators)])
        head = [printable(h) for h in head]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        for row in [head, *rows]:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        self.stdout.write(f"rate (agreed/gold items[, unparseable?]; sys agreed/compared system pairs). "
                          f"{report.expert_verdicts} expert verdicts; '{DEBATE}' is scored only where it reached "
                          f"consensus; judges by their independent round-0 verdict.")
        self.stdout.write(json.dumps(report.as_json(), sort_keys=True))
