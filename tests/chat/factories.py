"""Contexts as the indexer would have written them, and MT-Bench folders as the replay import reads
them (the people are in tests/personas.py)."""

from __future__ import annotations

import json
from pathlib import Path

from apps.chain.demo import context_id
from apps.chain.models import Context


def make_contexts(*names: str) -> list[Context]:
    return [Context.objects.get_or_create(context_id=context_id(n), defaults={"name": n, "block_number": 1})[0]
            for n in names]


def write_mtbench(root: Path, questions: dict[int, tuple[str, list[str]]],
                  answers: dict[str, dict[int, list[str]]]) -> Path:
    """A small MT-Bench folder as `import_mtbench` reads it: questions {id: (category, turns)},
    answers {model: {question id: turns}}."""
    (root / "model_answer").mkdir(parents=True)
    (root / "question.jsonl").write_text("".join(
        json.dumps({"question_id": qid, "category": category, "turns": turns}) + "\n"
        for qid, (category, turns) in questions.items()))
    for model, by_question in answers.items():
        (root / "model_answer" / f"{model}.jsonl").write_text("".join(
            json.dumps({"question_id": qid, "model_id": model, "choices": [{"index": 0, "turns": turns}]}) + "\n"
            for qid, turns in by_question.items()))
    return root
