"""python manage.py import_mtbench PATH: MT-Bench answer files become replay models."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ...replay import ImportError_, ensure_contexts, import_mtbench, mtbench_root


class Command(BaseCommand):
    help = ("Register the models of PATH/model_answer/*.jsonl as replay models answering the 80 "
            "MT-Bench questions; the 8 categories become contexts. Needs the ledger worker running.")

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path, help="the MT-Bench folder (question.jsonl, model_answer/), or the "
                                                    "folder that holds it as mt_bench/")
        parser.add_argument("--models", nargs="*", help="only these answer files (by name)")
        parser.add_argument("--wait", type=float, default=120, help="seconds to wait for the contexts on-chain")

    def handle(self, *args, path, models=None, wait=120, **opts):
        try:
            root = mtbench_root(path)  # a wrong folder is said at once, not after waiting for the contexts
            contexts = ensure_contexts(wait_s=wait)
            counts = import_mtbench(root, contexts=contexts, models=models, progress=self.stdout.write)
        except ImportError_ as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(counts))
