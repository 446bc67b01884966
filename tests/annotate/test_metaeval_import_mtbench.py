"""`manage.py metaeval import-mtbench FILE --out PAIRS`: MT-Bench's human judgements (the Hugging Face
dataset lmsys/mt_bench_human_judgments, split `human`) as a pairs file that `metaeval pairs` reads.

The set itself is not on this machine, so the files here are written in its published format: one
record per judgement with `question_id`, `model_a`, `model_b`, `winner`, `judge`, `conversation_a`,
`conversation_b` (whole two-turn conversations of {role, content}) and `turn`, as a JSON list (the
dataset's human_judgments.json) or JSON Lines (datasets' to_json). The questions and answers are
MT-Bench's real ones from ../shared/data/mt_bench; the votes are MADE UP for these tests and say
nothing about the models."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.core.management.base import CommandError

from lib.evaluators import words
from tests.annotate.test_metaeval_import_commands import command, read_jsonl

pytestmark = pytest.mark.django_db  # `pairs` without --no-save would save its run

DATA = Path(os.environ.get("LLMCHAIN_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data"))
MTBENCH = DATA / "mt_bench"
# Five of the six models the human split compares whose answers ../shared/data keeps (it has
# vicuna-13b-v1.3, not the v1.2 the judges saw).
MODELS = ("gpt-4", "gpt-3.5-turbo", "claude-v1", "alpaca-13b", "llama-13b")
# MADE-UP votes, not MT-Bench's: (question_id, turn, model_a, model_b, winner, judge).
VOTES = [
    (81, 1, "gpt-4", "alpaca-13b", "model_a", "expert_0"),          # one judge: gpt-4
    (81, 1, "claude-v1", "llama-13b", "tie", "author_1"),           # one judge: a tie
    (81, 2, "gpt-4", "llama-13b", "model_b", "expert_7"),           # turn 2: llama-13b
    (101, 2, "gpt-3.5-turbo", "llama-13b", "model_a", "expert_3"),  # three judges, two for gpt-3.5-turbo,
    (101, 2, "llama-13b", "gpt-3.5-turbo", "model_b", "expert_4"),  # this one with the models swapped,
    (101, 2, "gpt-3.5-turbo", "llama-13b", "model_b", "author_2"),  # one for llama-13b: gpt-3.5-turbo wins
    (101, 1, "gpt-4", "claude-v1", "model_a", "expert_5"),          # two judges disagreeing: a tie
    (101, 1, "gpt-4", "claude-v1", "model_b", "expert_6"),
]
FIGURES = ("accuracy_non_tie", "accuracy_ci_low", "accuracy_ci_high", "length_accuracy_non_tie", "margin_over_length",
           "pairs_non_tie", "weight")


def by_id(path: Path) -> dict[int, dict]:
    return {row["question_id"]: row for row in read_jsonl(path)}


@pytest.fixture(scope="module")
def mtbench():
    if not (MTBENCH / "question.jsonl").exists():
        pytest.skip(f"{MTBENCH} absent: see ../shared/data/README.md")
    answers = {m: {qid: row["choices"][0]["turns"]
                   for qid, row in by_id(MTBENCH / "model_answer" / f"{m}.jsonl").items()} for m in MODELS}
    return {"questions": by_id(MTBENCH / "question.jsonl"), "answers": answers,
            "references": {qid: row["choices"][0]["turns"]
                           for qid, row in by_id(MTBENCH / "reference_answer" / "gpt-4.jsonl").items()}}


def conversation(mtbench, qid: int, model: str) -> list[dict]:
    """The whole two-turn conversation, as the dataset gives it whichever turn was judged."""
    turns = zip(mtbench["questions"][qid]["turns"], mtbench["answers"][model][qid])
    return [m for q, a in turns for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]


def record(mtbench, qid, turn, model_a, model_b, winner, judge) -> dict:
    return {"question_id": qid, "model_a": model_a, "model_b": model_b, "winner": winner, "judge": judge,
            "conversation_a": conversation(mtbench, qid, model_a),
            "conversation_b": conversation(mtbench, qid, model_b), "turn": turn}


def write(path: Path, rows: list, form: str) -> Path:
    if form == "json":  # human_judgments.json is one JSON list
        path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_the_human_split_becomes_one_pair_per_question_turn_and_models_that_pairs_reads(mtbench, tmp_path, form,
                                                                                      settings):
    settings.LLMCHAIN_MTBENCH_DIR = MTBENCH  # the default --questions
    source = write(tmp_path / f"human.{form}", [record(mtbench, *v) for v in VOTES], form)
    out = tmp_path / "mtbench.jsonl"
    printed = command("import-mtbench", str(source), "--out", str(out))
    assert printed.splitlines()[0] == f"wrote 5 pairs (2 human ties) to {out}"
    assert "from 8 judgements; 2 pairs judged more than once, 2 of them with the judges disagreeing" in printed
    pairs = {p["id"]: p for p in read_jsonl(out)}
    assert {i: p["human"] for i, p in pairs.items()} == {
        "mtbench-81-turn1-gpt-4-vs-alpaca-13b": "a", "mtbench-81-turn1-claude-v1-vs-llama-13b": "tie",
        "mtbench-81-turn2-gpt-4-vs-llama-13b": "b", "mtbench-101-turn2-gpt-3.5-turbo-vs-llama-13b": "a",
        "mtbench-101-turn1-gpt-4-vs-claude-v1": "tie"}
    q81, q101 = mtbench["questions"][81]["turns"], mtbench["questions"][101]["turns"]
    answers = mtbench["answers"]

    first = pairs["mtbench-81-turn1-gpt-4-vs-alpaca-13b"]
    assert (first["question"], first["category"], first["model_a"], first["model_b"]) == (
        q81[0], "writing", "gpt-4", "alpaca-13b")
    assert (first["answer_a"], first["answer_b"]) == (answers["gpt-4"][81][0], answers["alpaca-13b"][81][0])
    assert "reference" not in first  # MT-Bench has no reference answer to a writing question
    # The other models' first answers to question 81, from the other records' conversations.
    assert first["references"] == [answers["claude-v1"][81][0], answers["llama-13b"][81][0]]

    # Turn 2: the first question, each model's own first answer and the second question; the
    # answers judged are the second ones; the reference is GPT-4's reference to the second question.
    second = pairs["mtbench-101-turn2-gpt-3.5-turbo-vs-llama-13b"]
    assert second["question"] == (f"### User:\n{q101[0]}\n\n### Assistant A:\n{answers['gpt-3.5-turbo'][101][0]}\n\n"
                                  f"### Assistant B:\n{answers['llama-13b'][101][0]}\n\n### User:\n{q101[1]}")
    assert (second["answer_a"], second["answer_b"]) == (answers["gpt-3.5-turbo"][101][1], answers["llama-13b"][101][1])
    assert (second["category"], second["reference"]) == ("reasoning", mtbench["references"][101][1])
    assert second["references"] == [answers["claude-v1"][101][1], answers["gpt-4"][101][1]]
    assert pairs["mtbench-101-turn1-gpt-4-vs-claude-v1"]["reference"] == mtbench["references"][101][0]

    data = json.loads(command("pairs", str(out), "--evaluator", "length", "--no-save").strip().splitlines()[-1])
    assert set(FIGURES) <= set(data) and (data["n"], data["pairs_non_tie"]) == (5, 3)
    decided = [p for p in pairs.values() if p["human"] != "tie"]
    longer_right = sum((words(p["answer_a"]) > words(p["answer_b"])) == (p["human"] == "a") for p in decided)
    assert data["accuracy_non_tie"] == data["length_accuracy_non_tie"] == round(longer_right / 3, 4)


def test_without_a_questions_file_the_category_is_mt_bench_and_there_is_no_reference(mtbench, tmp_path, settings):
    settings.LLMCHAIN_MTBENCH_DIR = tmp_path / "no-mt-bench-here"
    source = write(tmp_path / "human.jsonl", [record(mtbench, *v) for v in VOTES[3:6]], "jsonl")
    out = tmp_path / "out.jsonl"
    assert "categories from nowhere" in command("import-mtbench", str(source), "--out", str(out))
    pair, = read_jsonl(out)
    assert (pair["category"], pair["human"], "reference" in pair) == ("MT-Bench", "a", False)
    # Given explicitly, the questions file (and the reference answers beside it) come back.
    command("import-mtbench", str(source), "--out", str(out), "--questions", str(MTBENCH / "question.jsonl"))
    pair, = read_jsonl(out)
    assert (pair["category"], pair["reference"]) == ("reasoning", mtbench["references"][101][1])


GOOD = {"question_id": 81, "model_a": "gpt-4", "model_b": "alpaca-13b", "winner": "model_a", "judge": "expert_0",
        "conversation_a": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                           {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}],
        "conversation_b": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "B1"},
                           {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "B2"}],
        "turn": 1}


@pytest.mark.parametrize(("bad", "message"), [
    ({"winner": "model_c"},
     r"human\.jsonl line 3: `winner` must be \"model_a\", \"model_b\" or \"tie\", got 'model_c'"),
    ({"turn": 3}, r"line 3: `turn` must be 1 or 2, got 3"),
    ({"question_id": "81"}, r"line 3: `question_id` must be an integer, got '81'"),
    ({"conversation_b": None}, r"line 3: missing `conversation_b`"),
    ({"turn": 2, "conversation_b": GOOD["conversation_b"][:2]},
     r"line 3: `conversation_b` has 2 messages, a turn-2 judgement needs 4"),
    ({"judge": ["gpt-4", "pair-v2"]}, r"line 3: `judge` \['gpt-4', 'pair-v2'\] is not one of the human split's people"),
], ids=["winner", "turn", "question_id", "conversation", "short-conversation", "gpt4-judge"])
def test_a_malformed_record_is_refused_by_its_line_and_field_and_nothing_is_written(tmp_path, bad, message):
    wrong = {k: v for k, v in {**GOOD, **bad}.items() if v is not None}
    source = tmp_path / "human.jsonl"
    source.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(wrong) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    with pytest.raises(CommandError, match=message):
        command("import-mtbench", str(source), "--out", str(out))
    assert not out.exists()


def test_a_json_list_names_the_item_and_parquet_is_refused_by_name(tmp_path):
    out = tmp_path / "out.jsonl"
    source = tmp_path / "human_judgments.json"
    source.write_text(json.dumps([GOOD, {**GOOD, "model_b": "gpt-4"}], indent=2), encoding="utf-8")
    with pytest.raises(CommandError, match=r"human_judgments\.json item 1: `model_a` and `model_b` are "
                                           r"the same model"):
        command("import-mtbench", str(source), "--out", str(out))
    source.write_text(json.dumps([GOOD, GOOD], indent=2)[:-3], encoding="utf-8")  # cut short
    with pytest.raises(CommandError, match=r"human_judgments\.json line \d+: not JSON"):
        command("import-mtbench", str(source), "--out", str(out))
    source.write_text(json.dumps([GOOD]), encoding="utf-8")
    with pytest.raises(CommandError, match=r"cannot read .*absent\.jsonl"):  # a --questions given must be there
        command("import-mtbench", str(source), "--out", str(out), "--questions", str(tmp_path / "absent.jsonl"))
    source.write_bytes(b"PAR1\x15\x04")
    with pytest.raises(CommandError, match="is a parquet file: give the dataset's human_judgments.json"):
        command("import-mtbench", str(source), "--out", str(out))
    assert not out.exists()


def test_a_tie_with_its_reason_is_a_tie_and_a_turn_1_record_may_stop_after_its_exchange(tmp_path):
    # FastChat's agreement script reads any winner starting "tie" as a tie ("tie (bothbad)").
    short = {**GOOD, "winner": "tie (bothbad)", "conversation_b": GOOD["conversation_b"][:2]}
    source = tmp_path / "human.jsonl"
    source.write_text(json.dumps(short) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    command("import-mtbench", str(source), "--out", str(out), "--questions", str(write_questions(tmp_path)))
    pair, = read_jsonl(out)
    assert (pair["human"], pair["question"], pair["answer_a"], pair["answer_b"], pair["category"]) == (
        "tie", "Q1", "A1", "B1", "writing")


def write_questions(folder: Path) -> Path:
    path = folder / "question.jsonl"
    path.write_text(json.dumps({"question_id": 81, "category": "writing", "turns": ["Q1", "Q2"]}) + "\n")
    return path
