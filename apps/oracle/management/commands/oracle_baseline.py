"""python manage.py oracle_baseline [--data DIR] [--pairs N] [--seed S]: rebuild the BERTScore
baseline file (apps/oracle/baselines/all-MiniLM-L6-v2.json) the oracle's metric calibrates with."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = ("Compute the BERTScore baseline (mean raw P, R, F1 of random pairs of MT-Bench answers to different "
            "questions) and write it where the metric reads it.")

    def add_arguments(self, parser):
        parser.add_argument("--data", type=Path, default=None,
                            help=f"MT-Bench folder (default: LLMCHAIN_MTBENCH_DIR, {settings.LLMCHAIN_MTBENCH_DIR})")
        parser.add_argument("--pairs", type=int, default=3000, help="random pairs (default 3000)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the pairs (default 0)")
        parser.add_argument("--turn", type=int, default=1,
                            help="which answer of each conversation: 1 = to the first prompt (default 1)")
        parser.add_argument("--check-pairs", type=int, default=0,
                            help="also score the first N pairs with plain bert_score.score and record the largest "
                                 "difference (default 0: skip)")
        parser.add_argument("--out", type=Path, default=None,
                            help="where to write (default apps/oracle/baselines/all-MiniLM-L6-v2.json)")

    def handle(self, *args, data=None, pairs=3000, seed=0, turn=1, check_pairs=0, out=None, **opts):
        from lib.metrics import MetricError
        from lib.metrics.baseline import compute_baseline, write_baseline
        from lib.metrics.bertscore import default_baseline_path

        data = Path(data) if data is not None else Path(settings.LLMCHAIN_MTBENCH_DIR)
        if not (data / "model_answer").is_dir():
            raise CommandError(f"no MT-Bench answers under {data} (expected model_answer/*.jsonl)")
        target = Path(out) if out is not None else default_baseline_path()

        def say(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            record = compute_baseline(data, pairs=pairs, seed=seed, turn=turn, check_pairs=check_pairs, out=say)
        except (MetricError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        write_baseline(record, target)
        say(f"wrote {target}")
        self.stdout.write(json.dumps({"baseline": record["baseline"], "pairs": pairs, "seed": seed,
                                      "path": str(target)}))
