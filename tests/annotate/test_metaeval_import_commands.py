"""The command paths from a published labelled set to its validity figures: `manage.py metaeval
import-pandalm` and `import-llmbar` write the pairs file, and `metaeval pairs` on it prints, as its last
line, the JSON carrying the figures every evaluator is measured by (accuracy on decided pairs with its
interval, the length rule on the same pairs, the margin with its interval, n and the weight). Small
files in the published formats first; then the real sets in ../shared/data, skipped when absent. The
evaluator is the length rule: it runs in milliseconds, and its own figures are known."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = pytest.mark.django_db  # `pairs` saves its run unless told not to

DATA = Path(os.environ.get("LLMCHAIN_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data"))
LONG = "The capital of France is Paris, a city on the Seine."
SHORT = "Paris."
FIGURES = ("accuracy_non_tie", "accuracy_ci_low", "accuracy_ci_high", "length_accuracy_non_tie", "margin_over_length",
           "margin_over_length_ci_low", "margin_over_length_ci_high", "pairs_non_tie", "weight")


def command(*args) -> str:
    out = io.StringIO()
    call_command("metaeval", *args, stdout=out)
    return out.getvalue()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def panda(idx: int, r1: str, r2: str, labels: tuple[int, int, int], key: str = "llama-7b_opt-7b",
          instruction: str = "Name the capital of France.") -> dict:
    return {"idx": idx, "motivation_app": "test", "cmp_key": key, "instruction": instruction, "input": "",
            "response1": r1, "response2": r2, "annotator1": labels[0], "annotator2": labels[1],
            "annotator3": labels[2]}


def test_import_pandalm_writes_the_majority_labels_and_pairs_prints_the_figures_as_its_last_json_line(tmp_path):
    rows = [panda(0, LONG, SHORT, (1, 1, 2)),  # a, the longer: the length rule right
            panda(1, SHORT, LONG, (1, 1, 0)),  # a, the shorter: the rule wrong
            panda(2, LONG, SHORT, (0, 0, 1)),  # a tie by majority
            panda(3, LONG, SHORT, (1, 2, 0)),  # no majority: a tie
            panda(4, SHORT, LONG, (2, 2, 2), key="bloom-7b_pythia-6.9b")]  # b, the longer: right
    source = tmp_path / "testset-v1.json"
    source.write_text(json.dumps(rows))
    out = tmp_path / "pandalm.jsonl"
    assert command("import-pandalm", str(source), "--out", str(out)).strip() == f"wrote 5 pairs (2 human ties) to {out}"
    pairs = read_jsonl(out)
    assert [(p["id"], p["human"]) for p in pairs] == [("pandalm-0", "a"), ("pandalm-1", "a"), ("pandalm-2", "tie"),
                                                     ("pandalm-3", "tie"), ("pandalm-4", "b")]
    assert (pairs[0]["model_a"], pairs[0]["model_b"], pairs[0]["category"]) == ("llama-7b", "opt-7b", "PandaLM")
    assert pairs[0]["references"] == [SHORT, LONG]  # the other models' answers to the same instruction

    data = last_json(command("pairs", str(out), "--evaluator", "length", "--no-save"))
    assert set(FIGURES) <= set(data)
    assert (data["pairs_non_tie"], data["accuracy_non_tie"], data["length_accuracy_non_tie"]) == (3, 0.6667, 0.6667)
    assert data["accuracy_ci_low"] <= data["accuracy_non_tie"] <= data["accuracy_ci_high"]
    # The length rule measured against itself: no margin, so no weight.
    assert (data["margin_over_length"], data["margin_over_length_ci_low"], data["margin_over_length_ci_high"],
            data["weight"]) == (0, 0, 0, 0)


def test_import_llmbar_names_the_set_by_its_folders_and_pairs_takes_a_limit(tmp_path):
    folder = tmp_path / "llmbar" / "Adversarial" / "GPTInst"
    folder.mkdir(parents=True)
    rows = [{"input": f"Name the capital {i}.", "output_1": SHORT if i % 3 else LONG,
             "output_2": LONG if i % 3 else SHORT, "label": 1} for i in range(6)]  # the shorter wins 4 of 6
    (folder / "dataset.json").write_text(json.dumps(rows))
    out = tmp_path / "gptinst.jsonl"
    assert command("import-llmbar", str(folder), "--out", str(out)).strip() == f"wrote 6 pairs (0 human ties) to {out}"
    pairs = read_jsonl(out)
    assert pairs[0]["id"] == "llmbar-adversarial-gptinst-0" and pairs[0]["category"] == "Adversarial/GPTInst"
    assert pairs[0]["reference"] == pairs[0]["question"] == "Name the capital 0."  # its stand-in reference

    data = last_json(command("pairs", str(out), "--evaluator", "length", "--no-save"))
    assert (data["pairs_non_tie"], data["accuracy_non_tie"]) == (6, 0.3333) and set(FIGURES) <= set(data)
    limited = last_json(command("pairs", str(out), "--evaluator", "length", "--no-save", "--limit", "4"))
    assert limited["pairs_non_tie"] == 4 and limited["pairs_in_file"] == 6 and limited["sample_seed"] == 0


def test_a_file_that_is_not_the_set_it_is_imported_as_is_refused_and_nothing_is_written(tmp_path):
    source = tmp_path / "dataset.json"
    source.write_text(json.dumps([{"input": "x", "output_1": "a", "output_2": "b", "label": 3}]))
    out = tmp_path / "out.jsonl"
    with pytest.raises(CommandError, match="item 0: an LLMBar pair needs"):
        command("import-llmbar", str(source), "--out", str(out))
    with pytest.raises(CommandError, match="item 0: not a PandaLM pair"):
        command("import-pandalm", str(source), "--out", str(out))
    assert not out.exists()


# The real sets: the length rule's figures on them are the ones in docs/metaeval.md's table (to 3 decimals).
REAL = [("import-pandalm", "pandalm/testset-v1.json", 999, 894, 0.646),
        ("import-llmbar", "llmbar/Natural", 100, 100, 0.52),
        ("import-llmbar", "llmbar/Adversarial/GPTInst", 92, 92, 0.141)]


@pytest.mark.parametrize(("importer", "relative", "pairs", "decided", "length_accuracy"), REAL,
                         ids=[r[1] for r in REAL])
def test_the_real_sets_import_and_the_length_rule_gives_the_documented_figures(tmp_path, importer, relative, pairs,
                                                                               decided, length_accuracy):
    source = DATA / relative
    if not source.exists():
        pytest.skip(f"{source} absent: see ../shared/data/README.md")
    out = tmp_path / "pairs.jsonl"
    assert command(importer, str(source), "--out", str(out)).startswith(f"wrote {pairs} pairs (")
    assert len(read_jsonl(out)) == pairs
    data = last_json(command("pairs", str(out), "--evaluator", "length", "--no-save"))
    assert set(FIGURES) <= set(data)
    assert data["pairs_non_tie"] == decided and data["accuracy_non_tie"] == pytest.approx(length_accuracy, abs=5e-4)
    sample = last_json(command("pairs", str(out), "--evaluator", "length", "--no-save", "--limit", "20"))
    assert sample["pairs_in_file"] == pairs and sample["n"] == 20 and set(FIGURES) <= set(sample)
