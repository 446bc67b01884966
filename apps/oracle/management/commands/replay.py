"""python manage.py replay mtbench [PATH]: fill the boards with the MT-Bench replay models."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.chat.replay import ImportError_

from ...replay import progress, queue_mtbench


def bar(done: int, total: int, width: int = 40) -> str:
    filled = int(width * done / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


class Command(BaseCommand):
    help = ("Ask every MT-Bench question of every imported replay model through the real pipeline "
            "(oracle, evidence, chain); resumable. Needs the oracle and ledger workers (make run), "
            "or --work to run them in this process.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="dataset", required=True)
        p = sub.add_parser("mtbench")
        p.add_argument("path", nargs="?", type=Path, default=None, help="MT-Bench folder (default: LLMCHAIN_MTBENCH_DIR)")
        p.add_argument("--models", nargs="*", help="only these replay models")
        p.add_argument("--turns", type=int, choices=(1, 2), default=2)
        p.add_argument("--per-category", type=int, metavar="N",
                       help="only the first N questions of each category (a representative subset)")
        p.add_argument("--work", action="store_true", help="run the oracle and ledger workers in this process")
        p.add_argument("--no-wait", action="store_true", help="queue and return")
        p.add_argument("--timeout", type=float, default=3600)

    def handle(self, *args, dataset, path=None, models=None, turns=2, per_category=None, work=False, no_wait=False,
               timeout=3600, **_):
        path = path or Path(settings.LLMCHAIN_MTBENCH_DIR)
        if per_category is not None and per_category < 1:
            raise CommandError(f"--per-category must be at least 1, not {per_category}")
        try:
            ids, new = queue_mtbench(path, models=models, turns=turns, per_category=per_category)
        except ImportError_ as exc:
            raise CommandError(str(exc)) from exc
        if not ids:
            raise CommandError("no replay model to ask: run `manage.py import_mtbench PATH` first")
        self.stdout.write(f"{len(ids)} interactions ({new} new) in the pipeline")
        if no_wait:
            return
        step = self._worker() if work else None
        deadline = time.monotonic() + timeout
        while True:
            if step:
                step()
            counts = progress(ids)
            done = counts["onchain"] + counts["failed"]
            sys.stdout.write(f"\r{bar(done, len(ids))}  " + " ".join(f"{k}={v}" for k, v in counts.items() if v))
            sys.stdout.flush()
            if done == len(ids):
                break
            if time.monotonic() > deadline:
                self.stdout.write("")
                raise CommandError("timed out; run the command again to resume")
            if not step:
                time.sleep(1)
        self.stdout.write("")
        self.stdout.write(json.dumps(counts))

    def _worker(self):
        from apps.chain import indexer
        from apps.chain.ledger import default_ledger
        from apps.chain.submitter import Submitter

        from ...worker import load_metric, run_once

        metric, ledger = load_metric(), default_ledger()
        submitter = Submitter(ledger)

        def step():
            moved = run_once(metric)
            sent = submitter.run_once()
            indexer.index_until_head(ledger)
            if not moved and not sent:
                time.sleep(0.3)

        return step
