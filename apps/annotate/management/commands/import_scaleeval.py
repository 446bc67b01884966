"""python manage.py import_scaleeval PATH: ScaleEval's recorded debates, their disagreements queued for experts."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ...scaleeval import FileReport, ScaleEvalError, import_scaleeval

COLUMNS = (("file", 78), ("debates", 7), ("new", 5), ("skipped", 7), ("queued", 6), ("unread turns", 12),
           ("no systems", 10), ("no agents", 9))


class Command(BaseCommand):
    help = ("Import the recorded three-agent debates of PATH/results/*/*/multiagent_score/*.jsonl with their "
            "transcripts; debates whose agents still disagree go to the expert queue. Running it again adds "
            "nothing. Prints a table and, last, one JSON line of counts; exits non-zero if a file was refused.")

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path,
                            help="the scaleeval folder (results/, and responses/ to name the systems), "
                                 "or its results/ folder")

    def handle(self, *args, path, **opts):
        try:
            report = import_scaleeval(path)
        except ScaleEvalError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(_row([name for name, _ in COLUMNS]))
        for f in report.files:
            self.stdout.write(_row(_cells(f)))
        totals = FileReport("total", **{n: report.total(n) for n in ("debates", "imported", "skipped", "queued",
                                                                      "unparseable_turns", "systems_unknown",
                                                                      "agents_unknown")})
        self.stdout.write(_row(_cells(totals)))
        for f in report.failed:
            self.stderr.write(f"refused {f.error}")
        self.stdout.write(json.dumps(report.summary()))
        if report.failed:
            raise CommandError(f"{len(report.failed)} file(s) refused, nothing imported from them (see above)")


def _cells(f: FileReport) -> list:
    if f.error:
        return [f.path, "refused", "", "", "", "", "", ""]
    return [f.path, f.debates, f.imported, f.skipped, f.queued, f.unparseable_turns, f.systems_unknown,
            f.agents_unknown]


def _row(cells: list) -> str:
    out = []
    for (name, width), cell in zip(COLUMNS, cells):
        text = str(cell)
        out.append(text.ljust(width) if name == "file" else text.rjust(width))
    return "  ".join(out)
