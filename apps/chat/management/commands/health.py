"""python manage.py health [--follow]: connectivity checks of every enabled endpoint model."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.chain.work import run_worker

from ...health import run_checks


class Command(BaseCommand):
    help = "Check every enabled model endpoint; failing models leave the running list until they answer."

    def add_arguments(self, parser):
        parser.add_argument("--follow", action="store_true", help="repeat every LLMCHAIN_HEALTH_INTERVAL_S")
        parser.add_argument("--interval", type=float, default=None)

    def handle(self, *args, follow=False, interval=None, **opts):
        run_worker(self.check_models, idle_sleep=interval or settings.LLMCHAIN_HEALTH_INTERVAL_S, until=lambda: not follow,
                   name="health checks")

    def check_models(self) -> None:  # not `check`: BaseCommand.check runs the system checks
        results = run_checks()
        down = {name: error for name, error in results.items() if error}
        self.stdout.write(json.dumps({"checked": len(results), "down": down}))
