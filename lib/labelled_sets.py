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
- MT-Bench human judgements (lmsys/mt_bench_human_judgments, split `human`): one record per judge,
  question, turn and pair of models; see `mtbench_pairs`.
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


# --- MT-Bench human judgements (lmsys/mt_bench_human_judgments, split `human`) ----------------------

MTBENCH_WINNERS = {"model_a": "a", "model_b": "b", "tie": "tie"}
MTBENCH_PEOPLE = ("expert", "author")  # the split's judges: "expert_12", "author_3"
MTBENCH_FIELDS = ("question_id", "model_a", "model_b", "winner", "judge", "conversation_a", "conversation_b", "turn")


def _records(path: Path) -> list[tuple[str, object]]:
    """(where, value) of each record of a JSON list or a JSONL file; `where` names the line of a
    JSONL record and the index of a list's item, so a message can point into a 17 MB file. Parquet (the dataset's other published form) is refused by
    name: reading it needs pyarrow, which the project does not depend on."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LabelledSetError(f"cannot read {path}: {exc.strerror or exc}") from None
    if raw[:4] == b"PAR1":
        raise LabelledSetError(f"{path} is a parquet file: give the dataset's human_judgments.json, or the split "
                               f"written as JSON Lines (datasets' Dataset.to_json)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LabelledSetError(f"{path} is not UTF-8 text: {exc}") from None
    if not text.lstrip().startswith("["):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((f"{path} line {number}", json.loads(line)))
                except ValueError as exc:
                    raise LabelledSetError(f"{path} line {number}: not JSON ({exc})") from None
        return rows
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LabelledSetError(f"{path} line {exc.lineno}: not JSON ({exc.msg})") from None
    rows = [(f"{path} item {i}", value) for i, value in enumerate(items)]
    return rows


def _exchanges(conversation, turn: int, where: str, field: str) -> list[tuple[str, str]]:
    """The (question, answer) exchanges of a conversation (user, assistant, user, ...): the first
    `turn` are required; a turn-1 record usually carries the second exchange too, which is kept
    when it is whole (it gives the other pairs their `references`) and never refused."""
    if not isinstance(conversation, list):
        raise LabelledSetError(f"{where}: `{field}` must be a list of messages")
    if len(conversation) < 2 * turn:
        raise LabelledSetError(f"{where}: `{field}` has {len(conversation)} messages, a turn-{turn} "
                               f"judgement needs {2 * turn}")

    def fits(i: int) -> bool:  # message i is the user's (even) or the assistant's (odd), with text
        message = conversation[i]
        return (isinstance(message, dict) and message.get("role") == ("user" if i % 2 == 0 else "assistant")
                and isinstance(message.get("content"), str))

    for i in range(2 * turn):
        if not fits(i):
            raise LabelledSetError(f"{where}: `{field}` message {i} must be {{\"role\": "
                                   f"\"{'user' if i % 2 == 0 else 'assistant'}\", \"content\": <text>}}")
    ends = 2 * turn
    while ends + 2 <= min(len(conversation), 4) and fits(ends) and fits(ends + 1):
        ends += 2
    return [(conversation[i]["content"], conversation[i + 1]["content"]) for i in range(0, ends, 2)]


def _judgement(row, where: str) -> dict:
    """One record of the human split, checked field by field."""
    if not isinstance(row, dict):
        raise LabelledSetError(f"{where}: expected a JSON object")
    missing = [k for k in MTBENCH_FIELDS if k not in row]
    if missing:
        raise LabelledSetError(f"{where}: missing {', '.join(f'`{k}`' for k in missing)}")
    qid, turn, winner, judge = row["question_id"], row["turn"], row["winner"], row["judge"]
    if not isinstance(qid, int) or isinstance(qid, bool):
        raise LabelledSetError(f"{where}: `question_id` must be an integer, got {qid!r}")
    if turn not in (1, 2) or isinstance(turn, bool):
        raise LabelledSetError(f"{where}: `turn` must be 1 or 2, got {turn!r}")
    for k in ("model_a", "model_b"):
        if not isinstance(row[k], str) or not row[k].strip():
            raise LabelledSetError(f"{where}: `{k}` must be a model's name")
    if row["model_a"] == row["model_b"]:
        raise LabelledSetError(f"{where}: `model_a` and `model_b` are the same model")
    # "tie (bothbad)" and the like are ties with a reason, as FastChat's agreement script reads them.
    label = None
    if isinstance(winner, str):
        label = "tie" if winner.startswith("tie (") else MTBENCH_WINNERS.get(winner)
    if label is None:
        raise LabelledSetError(f"{where}: `winner` must be \"model_a\", \"model_b\" or \"tie\", got {winner!r}")
    # GPT-4's verdicts (the gpt4_pair split) in a pairs file would be read as human labels.
    if not isinstance(judge, str) or not judge.startswith(MTBENCH_PEOPLE):
        raise LabelledSetError(f"{where}: `judge` {judge!r} is not one of the human split's people (expert_N, "
                               f"author_N): this importer reads the `human` split only")
    a = _exchanges(row["conversation_a"], turn, where, "conversation_a")
    b = _exchanges(row["conversation_b"], turn, where, "conversation_b")
    if [q for q, _ in a[:turn]] != [q for q, _ in b[:turn]]:
        raise LabelledSetError(f"{where}: `conversation_a` and `conversation_b` ask different questions")
    return {"qid": qid, "turn": turn, "models": (row["model_a"], row["model_b"]), "label": label, "a": a, "b": b}


def _mtbench_question(j: dict) -> str:
    """Turn 1: the question. Turn 2: the first question, each model's own first answer and the second
    question, laid out as MT-Bench's multi-turn pair prompt shows the two conversations."""
    (q1, a1), (q2, _) = j["a"][0], j["a"][j["turn"] - 1]
    if j["turn"] == 1:
        return q1
    b1 = j["b"][0][1]
    return (f"### User:\n{q1}\n\n### Assistant A:\n{a1}\n\n### Assistant B:\n{b1}\n\n### User:\n{q2}" if a1 != b1
            else f"### User:\n{q1}\n\n### Assistant:\n{a1}\n\n### User:\n{q2}")


def _jsonl_by_id(path: Path, what: str) -> dict[int, dict]:
    rows = {}
    for where, row in _records(path):
        if not isinstance(row, dict) or not isinstance(row.get("question_id"), int):
            raise LabelledSetError(f"{where}: not an MT-Bench {what} (no integer `question_id`)")
        rows[row["question_id"]] = row
    return rows


def mtbench_pairs(path: str | Path, questions: str | Path | None = None) -> tuple[list[dict], dict]:
    """The human split of MT-Bench's judgements (a JSON list or JSONL of records) as pairs, one per
    question, turn and pair of models, and what was read (`judgements`, `pairs_judged_more_than_once`,
    `pairs_disagreed`).

    `human` is the most frequent label among the pair's judges, a tie when two labels are equally
    frequent: PandaLM's majority rule (lib/labelled_sets.py `pandalm_pairs`) for any number of judges.
    The pair keeps the order of its first judgement; later ones with the models swapped are read
    swapped. `question` is the question for turn 1; for turn 2 it is the first question, the first
    answer of each model and the second question (`_mtbench_question`); the answers are the judged
    turn's. With `questions` (question.jsonl), the category is the question's and `reference` the
    turn's GPT-4 reference answer from reference_answer/gpt-4.jsonl beside it, where one exists;
    without, the category is "MT-Bench". `references`: the other models' answers to the same
    question and turn anywhere in the file (a record carries whole conversations, so a turn-1
    judgement usually gives its models' second answers too)."""
    path = Path(path)
    categories, references = {}, {}
    if questions is not None:
        questions = Path(questions)
        categories = {qid: str(q.get("category") or "MT-Bench")
                      for qid, q in _jsonl_by_id(questions, "question").items()}
        answers_file = questions.parent / "reference_answer" / "gpt-4.jsonl"
        if answers_file.exists():
            for qid, row in _jsonl_by_id(answers_file, "reference answer").items():
                try:
                    references[qid] = list(row["choices"][0]["turns"])
                except (KeyError, IndexError, TypeError):
                    raise LabelledSetError(f"{answers_file}: question {qid} has no `choices[0].turns`") from None
    rows = _records(path)
    if not rows:
        raise LabelledSetError(f"{path}: no judgements")
    groups: dict[tuple, dict] = {}
    answers: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)  # (question, turn) -> model -> answer
    for where, row in rows:
        j = _judgement(row, where)
        if categories and j["qid"] not in categories:
            raise LabelledSetError(f"{where}: `question_id` {j['qid']} is not in {questions}")
        (ma, mb), turn = j["models"], j["turn"]
        for model, exchanges in ((ma, j["a"]), (mb, j["b"])):
            for t, (_, answer) in enumerate(exchanges, start=1):
                answers[j["qid"], t].setdefault(model, answer)
        key = (j["qid"], turn, frozenset(j["models"]))
        group = groups.setdefault(key, {"first": j, "labels": []})
        swapped = group["first"]["models"] != j["models"]
        group["labels"].append({"a": "b", "b": "a"}.get(j["label"], j["label"]) if swapped else j["label"])
    pairs = []
    for (qid, turn, _), group in groups.items():
        j, top = group["first"], Counter(group["labels"]).most_common()
        human = top[0][0] if len(top) == 1 or top[0][1] > top[1][1] else "tie"
        (ma, mb) = j["models"]
        pair = {"id": f"mtbench-{qid}-turn{turn}-{ma}-vs-{mb}", "question": _mtbench_question(j),
                "category": categories.get(qid, "MT-Bench"), "answer_a": j["a"][turn - 1][1],
                "answer_b": j["b"][turn - 1][1], "human": human, "model_a": ma, "model_b": mb}
        ref = references.get(qid, [])
        if len(ref) >= turn and isinstance(ref[turn - 1], str) and ref[turn - 1].strip():
            pair["reference"] = ref[turn - 1]
        others = [t for m, t in sorted(answers[qid, turn].items()) if m not in (ma, mb) and t.strip()]
        if others:
            pair["references"] = others
        pairs.append(pair)
    several = [g["labels"] for g in groups.values() if len(g["labels"]) > 1]
    return pairs, {"judgements": len(rows), "pairs_judged_more_than_once": len(several),
                   "pairs_disagreed": sum(1 for labels in several if len(set(labels)) > 1)}
