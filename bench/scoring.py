"""`python manage.py bench scoring`: the project's BERTScore scorer against the plain
``bert_score.score(...)`` call, on the same (answer, reference) pairs, in the same process.

The pairs are those the oracle would score (see ``mtbench.oracle_pairs``): each interaction's
answer against the answers of the top-k other models of its context, so the top models'
answers recur as references. Both sides get the same torch threads. Each side is warmed up once
on a few pairs (not timed); the timed bert_score call is one call over all pairs with its
default batch size (it loads its model inside the call, as every caller of the plain function
pays; that load is timed apart and shown); the project's scorer starts every timed run with an
empty cache (the model stays loaded, as in the oracle worker). Raw F1 must agree within
``TOLERANCE`` (before calibration).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from lib.metrics import mtbench
from lib.metrics.bertscore import BERTScore, default_model_path, load_encoder, package_version

from .common import Out

TOLERANCE = 1e-3


def run_scoring_bench(data: Path, pairs: int = 600, k: int = 3, seed: int = 0, repeat: int = 1,
                      threads: int | None = None, out: Out = print) -> dict:
    if not (data / "model_answer").is_dir():
        raise ValueError(f"no MT-Bench answers under {data} (expected model_answer/*.jsonl)")
    import bert_score
    import torch
    from bert_score.utils import get_model, get_tokenizer

    if pairs < 1 or repeat < 1 or k < 1:
        raise ValueError("--pairs, --repeat and --k must be at least 1")
    if threads is not None:
        if threads < 1:
            raise ValueError("--threads must be at least 1")
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    answers = mtbench.load_answers(data)
    the_pairs = mtbench.oracle_pairs(answers, mtbench.load_categories(data), pairs, k=k, seed=seed)
    cands = [c for c, _ in the_pairs]
    refs = [r for _, r in the_pairs]
    distinct = len({t.strip() for pair in the_pairs for t in pair})
    path = default_model_path()
    kwargs = dict(model_type=str(path), num_layers=6, idf=False, lang="en")

    def plain():
        return bert_score.score(cands, refs, **kwargs)

    def project():
        scorer = BERTScore(model_path=path, num_layers=6, baseline=0.0)  # a fresh, empty cache
        return scorer, scorer.raw_scores(the_pairs)

    out(f"bench scoring: {len(the_pairs)} pairs ({distinct} distinct texts, k={k}, seed {seed}) from {data}; "
        f"torch threads {threads}, repeat {repeat}")
    warm = min(8, len(the_pairs))  # warm-up, not timed
    bert_score.score(cands[:warm], refs[:warm], **kwargs)
    load_encoder(path, 6)
    BERTScore(model_path=path, baseline=0.0).raw_scores(the_pairs[:warm])
    t0 = time.perf_counter()
    get_tokenizer(str(path)), get_model(str(path), 6)
    load_s = time.perf_counter() - t0

    times: dict[str, list[float]] = {"bert_score": [], "project": []}
    cpu: dict[str, list[float]] = {"bert_score": [], "project": []}
    plain_result = project_result = scorer = None
    for r in range(repeat):
        for side in (("bert_score", "project") if r % 2 == 0 else ("project", "bert_score")):
            t0, c0 = time.perf_counter(), time.process_time()
            if side == "bert_score":
                plain_result = plain()
            else:
                scorer, project_result = project()
            times[side].append(time.perf_counter() - t0)
            cpu[side].append(time.process_time() - c0)

    P, R, F = (t.tolist() for t in plain_result)
    diffs = {name: max(abs(a - b) for a, b in zip(ours, theirs))
             for name, ours, theirs in (("P", [x[0] for x in project_result], P),
                                        ("R", [x[1] for x in project_result], R),
                                        ("F1", [x[2] for x in project_result], F))}
    # Means over the rounds: with the A B / B A order a steady drift of the machine's load (others'
    # work on the same cores) weighs on both sides alike.
    mean = {side: statistics.fmean(v) for side, v in times.items()}
    mean_cpu = {side: statistics.fmean(v) for side, v in cpu.items()}
    rate = {side: len(the_pairs) / mean[side] for side in mean}
    rounds = [a / b for a, b in zip(times["bert_score"], times["project"])]
    stats = scorer.stats
    out(f"{'':<34}{'wall s':>9}{'cpu s':>9}{'pairs/s':>10}")
    out(f"{'bert_score.score (one call, bs 64)':<34}{mean['bert_score']:>9.2f}{mean_cpu['bert_score']:>9.2f}"
        f"{rate['bert_score']:>10.2f}")
    out(f"{'project scorer (empty cache)':<34}{mean['project']:>9.2f}{mean_cpu['project']:>9.2f}"
        f"{rate['project']:>10.2f}")
    out(f"bert_score's model load inside its call: ~{load_s:.2f} s; runs (wall s): "
        + "; ".join(f"{side} " + ", ".join(f"{t:.2f}" for t in v) for side, v in times.items())
        + "; ratio per round: " + ", ".join(f"{x:.2f}" for x in rounds)
        + f"; cpu-time ratio {mean_cpu['bert_score'] / mean_cpu['project']:.2f}")
    out(f"project: {stats['texts_encoded']} texts encoded in {stats['forward_passes']} passes, "
        f"{stats['tokens']} tokens padded to {stats['padded_tokens']}")
    out("max |diff| before calibration: " + ", ".join(f"{n} {d:.2e}" for n, d in diffs.items())
        + f" (tolerance {TOLERANCE:g})")
    return {
        "pairs": len(the_pairs),
        "distinct_texts": distinct,
        "baseline_pairs_per_s": round(rate["bert_score"], 3),
        "project_pairs_per_s": round(rate["project"], 3),
        "ratio": round(rate["project"] / rate["bert_score"], 3),
        "max_abs_diff": diffs["F1"],
        "max_abs_diff_p_r": max(diffs["P"], diffs["R"]),
        "ok": diffs["F1"] <= TOLERANCE,
        "threads": threads,
        "repeat": repeat,
        "versions": {"bert_score": package_version("bert-score"), "torch": package_version("torch"),
                     "transformers": package_version("transformers")},
    }


def failures(summary: dict) -> list[str]:
    """Why a run's figures cannot stand: the project's raw F1 is not bert_score's."""
    if summary["ok"]:
        return []
    return [f"raw F1 differs from bert_score by {summary['max_abs_diff']:.2e} > 1e-3"]
