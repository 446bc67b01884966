"""MT-Bench model answers (../shared/data/mt_bench) as pairs of texts for the metric's baseline
and benchmark. Pure: the folder is an argument; nothing here is copied into the project."""

from __future__ import annotations

import json
import random
from pathlib import Path

from . import MetricError


def load_answers(root: str | Path, turn: int = 0) -> dict[int, dict[str, str]]:
    """{question_id: {model_id: answer text of turn ``turn`` (0 = first)}} from model_answer/*.jsonl.

    Blank answers are left out (one in the data: llama-13b on question 127): neither a natural
    text for the baseline nor something plain bert_score 0.3.13 can score under transformers 5."""
    folder = Path(root) / "model_answer"
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise MetricError(f"no MT-Bench answers under {folder} (expected model_answer/*.jsonl)")
    answers: dict[int, dict[str, str]] = {}
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            turns = row["choices"][0]["turns"]
            if turn < len(turns) and isinstance(turns[turn], str) and turns[turn].strip():
                answers.setdefault(int(row["question_id"]), {})[str(row["model_id"])] = turns[turn]
    return answers


def load_categories(root: str | Path) -> dict[int, str]:
    """{question_id: category} from question.jsonl ({} when the file is absent)."""
    path = Path(root) / "question.jsonl"
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            out[int(q["question_id"])] = str(q.get("category", ""))
    return out


def unrelated_pairs(answers: dict[int, dict[str, str]], n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` random (candidate, reference) pairs of answers to two *different* questions, by
    random models (uniform over the answers), fixed by ``seed``: the baseline's unrelated texts."""
    flat = [(q, m, text) for q in sorted(answers) for m, text in sorted(answers[q].items())]
    if len({q for q, _, _ in flat}) < 2:
        raise MetricError("unrelated pairs need answers to at least two questions")
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < n:
        (q1, _, a), (q2, _, b) = rng.choice(flat), rng.choice(flat)
        if q1 != q2:
            pairs.append((a, b))
    return pairs


def oracle_pairs(answers: dict[int, dict[str, str]], categories: dict[int, str], n: int, k: int = 3,
                 seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (answer, reference) pairs as the oracle sees them: an interaction is one model's answer
    to a question; its references are the answers of the top-``k`` *other* models of the question's
    context (category), ranked by a reputation order fixed per context by ``seed``. So the top
    models' answers recur as references of every other model on the same question, as they do
    on the oracle. Interactions are drawn at random (without repetition) across all questions."""
    rng = random.Random(seed)
    models = sorted({m for per_q in answers.values() for m in per_q})
    ranking: dict[str, list[str]] = {}
    for cat in sorted({categories.get(q, "") for q in answers}):
        order = list(models)
        rng.shuffle(order)
        ranking[cat] = order
    interactions = [(q, m) for q in sorted(answers) for m in sorted(answers[q])]
    rng.shuffle(interactions)
    pairs: list[tuple[str, str]] = []
    for q, m in interactions:
        refs = [r for r in ranking[categories.get(q, "")] if r != m and r in answers[q]][:k]
        for r in refs:
            pairs.append((answers[q][m], answers[q][r]))
        if len(pairs) >= n:
            return pairs[:n]
    if len(pairs) < n:
        raise MetricError(f"the data give only {len(pairs)} pairs, fewer than the {n} asked for")
    return pairs
