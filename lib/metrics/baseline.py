"""The BERTScore baseline b of the calibration ``clip((F1 - b) / (1 - b), 0, 1)``.

bert-score computes its published baselines as the mean score of random pairs of unrelated
sentences (Common Crawl); it ships none for all-MiniLM-L6-v2. The project's baseline is the same
statistic over unrelated natural texts of the kind the oracle scores: answers of the MT-Bench
models to two *different* questions, ``pairs`` random pairs fixed by ``seed``. Written by
``python manage.py oracle_baseline`` to ``apps/oracle/baselines/<encoder>.json``.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from . import mtbench
from .bertscore import (ENCODER_ID, ENCODER_NAME, ENCODER_PACKAGE, REPO_ROOT, BERTScore, default_model_path,
                        package_version)


def _shown(path: Path) -> str:
    """A path as it is worth recording: relative to the repository's parent when under it."""
    path = path.resolve()
    for base, prefix in ((REPO_ROOT, ""), (REPO_ROOT.parent, "../")):
        if path.is_relative_to(base):
            return prefix + str(path.relative_to(base))
    return str(path)


def compute_baseline(data: Path, pairs: int = 3000, seed: int = 0, turn: int = 1, check_pairs: int = 0,
                     out: Callable[[str], None] = print) -> dict:
    """The baseline record: mean raw P, R, F1 of ``pairs`` unrelated answer pairs.

    ``turn``: which answer of each MT-Bench conversation (1 = the answer to the first prompt).
    ``check_pairs``: also score the first N pairs with plain ``bert_score.score`` and record the
    largest raw difference (slow; 0 = skip)."""
    if pairs < 2 or turn < 1 or check_pairs < 0:
        raise ValueError("--pairs must be at least 2, --turn at least 1, --check-pairs at least 0")
    answers = mtbench.load_answers(data, turn=turn - 1)
    the_pairs = mtbench.unrelated_pairs(answers, pairs, seed)
    n_answers = sum(len(v) for v in answers.values())
    models = sorted({m for v in answers.values() for m in v})
    out(f"baseline: {pairs} pairs of answers to different questions (seed {seed}) among {n_answers} answers "
        f"of {len(models)} models to {len(answers)} questions")
    scorer = BERTScore(num_layers=6, baseline=0.0, cache_size=0)
    t0 = time.perf_counter()
    raw = scorer.raw_scores(the_pairs)
    seconds = time.perf_counter() - t0
    out(f"scored in {seconds:.1f} s ({scorer.stats['texts_encoded']} distinct texts encoded)")
    cols = {"P": [x[0] for x in raw], "R": [x[1] for x in raw], "F": [x[2] for x in raw]}
    record = {
        "metric": "bertscore",
        "encoder": ENCODER_NAME,
        "encoder_source": f"{ENCODER_ID}, from PyPI {ENCODER_PACKAGE}=={package_version(ENCODER_PACKAGE)}",
        "num_layers": 6,
        "idf": False,
        "max_tokens": 512,
        "baseline": {k: round(statistics.fmean(v), 6) for k, v in cols.items()},
        "std": {k: round(statistics.pstdev(v), 6) for k, v in cols.items()},
        "quantiles_f": {q: round(v, 6) for q, v in zip(("p05", "p50", "p95"),
                                                       [sorted(cols["F"])[int(f * (len(raw) - 1))]
                                                        for f in (0.05, 0.5, 0.95)])},
        "computed": {
            "command": f"python manage.py oracle_baseline --pairs {pairs} --seed {seed} --turn {turn}"
                       + (f" --check-pairs {check_pairs}" if check_pairs else ""),
            "data": f"{_shown(Path(data))}/model_answer/*.jsonl: MT-Bench model answers (lm-sys/FastChat, copy "
                    "kept in ku-nlp/ja-vicuna-qa-benchmark, Apache-2.0)",
            "turn": turn,
            "answers": n_answers,
            "questions": len(answers),
            "models": len(models),
            "pairing": "candidate and reference drawn uniformly at random (with replacement) among all answers, "
                       "kept only when they answer different questions",
            "pairs": pairs,
            "seed": seed,
            "statistic": "mean raw P, R, F1 (bert_score with idf=False), as bert-score's own baselines",
            "date": dt.date.today().isoformat(),
            "seconds": round(seconds, 1),
            "versions": {name: package_version(name) for name in
                         ("bert-score", "torch", "transformers", "tokenizers", ENCODER_PACKAGE)},
        },
    }
    if check_pairs:
        import bert_score

        sub = the_pairs[:check_pairs]
        P, R, F = bert_score.score([c for c, _ in sub], [r for _, r in sub], model_type=str(default_model_path()),
                                   num_layers=6, idf=False, lang="en")
        diff = max(abs(a[2] - b) for a, b in zip(raw, F.tolist()))
        record["computed"]["agreement_with_bert_score"] = {"pairs": len(sub), "max_abs_diff_f1": float(f"{diff:.3g}")}
        out(f"plain bert_score on the first {len(sub)} pairs: max |diff F1| {diff:.2e}")
    return record


def write_baseline(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
