"""python manage.py oracle {work,status}: the automatic-evaluation worker."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from ...models import EvaluationJob
from ...worker import load_metric, run_forever, run_once


class Command(BaseCommand):
    help = "Run the oracle: score every answer against the top-k other models and queue autoEval."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("work", help="process jobs until Ctrl-C or SIGTERM (also runs health checks)")
        p.add_argument("--once", action="store_true", help="one pass, then exit")
        p.add_argument("--no-health", action="store_true")
        sub.add_parser("status", help="jobs by status")

    def handle(self, *args, action, **opts):
        if action == "status":
            counts = {s: EvaluationJob.objects.filter(status=s).count() for s in EvaluationJob.Status.values}
            self.stdout.write(json.dumps(counts))
            return
        metric = load_metric()
        if opts.get("once"):
            self.stdout.write(json.dumps({"moved": run_once(metric)}))
            return
        self.stdout.write(f"oracle worker: metric {metric.name} (Ctrl-C stops it)")
        run_forever(metric, health=not opts.get("no_health"))
