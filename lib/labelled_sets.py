"""Importers of published human-labelled answer pairs into the pairs-file format (lib/metaeval.py
`read_pairs`): pure, no Django. Each returns the pairs as dicts; the caller writes them as JSONL.

- PandaLM testset-v1 (WeOpenML/PandaLM): 999 pairs of two open models' answers to one instruction,
  each labelled by three people (1: the first answer better, 2: the second, 0: a tie). The pair's
  `human` is the majority label; with no majority (three different labels) it is a tie. The models
  come from `cmp_key` ("bloom-7b_llama-7b"). `references`: the answers the *other* models gave to the
  same instruction in other pairs, as the oracle's references are the other models' answers to the
  same prompt.
- LLMBar (princeton-nlp/LLMBar): pairs where exactly one output follows the instruction (`label` 1
  or 2), no ties. LLMBar has no reference answers: `reference` is the instruction itself, so a
  reference-based evaluator there measures how close each output stays to what was asked.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

PANDALM_MODELS = ("bloom-7b", "cerebras-gpt-6.7B", "llama-7b", "opt-7b", "pythia-6.9b")
LABELS = {1: "a", 2: "b", 0: "tie"}


class LabelledSetError(ValueError):
    """A file that is not the published set it is imported as; the message says where."""


def _load(path: str | Path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LabelledSetError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise LabelledSetError(f"{path} is not JSON: {exc}") from None


def _prompt(instruction: str, given: str) -> str:
    return f"{instruction.strip()}\n\n{given.strip()}" if given and given.strip() else instruction.strip()


def _text(value, where: str) -> str:
    """An answer as text: six of PandaLM's answers are the JSON literal true (the model said "True")."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    raise LabelledSetError(f"{where}: an answer is neither text nor a number")


def _split_models(key: str, where: str) -> tuple[str, str]:
    for first in PANDALM_MODELS:
        if key.startswith(first + "_") and key[len(first) + 1:] in PANDALM_MODELS:
            return first, key[len(first) + 1:]
    raise LabelledSetError(f"{where}: cmp_key {key!r} does not name two PandaLM models")


def pandalm_pairs(path: str | Path) -> list[dict]:
    """PandaLM's testset-v1.json as pairs (see the module docstring)."""
    rows = _load(path)
    if not isinstance(rows, list) or not rows:
        raise LabelledSetError(f"{path}: expected a JSON list of pairs")
    answers: dict[str, dict[str, str]] = defaultdict(dict)  # prompt -> model -> answer
    parsed = []
    for i, row in enumerate(rows):
        where = f"{path} item {i}"
        try:
            labels = [row[f"annotator{k}"] for k in (1, 2, 3)]
            prompt = _prompt(row["instruction"], row.get("input") or "")
            a, b = _text(row["response1"], where), _text(row["response2"], where)
            model_a, model_b = _split_models(row["cmp_key"], where)
        except (KeyError, TypeError):
            raise LabelledSetError(f"{where}: not a PandaLM pair") from None
        if any(label not in LABELS for label in labels):
            raise LabelledSetError(f"{where}: annotator labels must be 0, 1 or 2")
        answers[prompt].setdefault(model_a, a)
        answers[prompt].setdefault(model_b, b)
        top = Counter(labels).most_common()
        human = LABELS[top[0][0]] if top[0][1] >= 2 else "tie"
        parsed.append((row.get("idx", i), prompt, a, b, model_a, model_b, human))
    pairs = []
    for idx, prompt, a, b, model_a, model_b, human in parsed:
        pair = {"id": f"pandalm-{idx}", "question": prompt, "category": "PandaLM", "answer_a": a, "answer_b": b,
                "human": human, "model_a": model_a, "model_b": model_b}
        refs = [text for m, text in sorted(answers[prompt].items()) if m not in (model_a, model_b) and text.strip()]
        if refs:
            pair["references"] = refs
        pairs.append(pair)
    return pairs


def llmbar_pairs(path: str | Path) -> list[dict]:
    """One LLMBar set (its dataset.json, or the folder holding it) as pairs; the category is the
    set's name as the folders give it ("Natural", "Adversarial/GPTInst")."""
    path = Path(path)
    if path.is_dir():
        path = path / "dataset.json"
    name = path.parent.name if path.parent.parent.name != "Adversarial" else f"Adversarial/{path.parent.name}"
    rows = _load(path)
    if not isinstance(rows, list) or not rows:
        raise LabelledSetError(f"{path}: expected a JSON list of pairs")
    pairs = []
    for i, row in enumerate(rows):
        where = f"{path} item {i}"
        if not isinstance(row, dict) or row.get("label") not in (1, 2) or not all(
                isinstance(row.get(k), str) and row[k].strip() for k in ("input", "output_1", "output_2")):
            raise LabelledSetError(f"{where}: an LLMBar pair needs input, output_1, output_2 and label 1 or 2")
        pairs.append({"id": f"llmbar-{name.replace('/', '-').lower()}-{i}", "question": row["input"],
                      "category": name, "answer_a": row["output_1"], "answer_b": row["output_2"],
                      "human": LABELS[row["label"]], "reference": row["input"]})
    return pairs
