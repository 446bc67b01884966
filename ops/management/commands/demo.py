"""python manage.py demo: the demo's background part, started by `up` (make run) unless --no-demo."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from ...demo import fill


class Command(BaseCommand):
    help = ("Fill the site with the demo data (what `make run` starts in the background): the recorded ScaleEval "
            "debates in the expert queue, the MT-Bench replay of a representative subset, an example "
            "meta-evaluation run and the other replay models. Idempotent: run again, it adds only what is "
            "missing. Needs the ledger and oracle workers (make run starts them).")

    def handle(self, *args, **opts):
        if fill(lambda line: self.stdout.write(line)):
            raise CommandError("demo: some parts failed (see above); `make run` again resumes them")
        self.stdout.write("demo: all queued; the boards fill as the oracle and the chain work through it")
