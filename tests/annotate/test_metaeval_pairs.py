"""`manage.py metaeval pairs FILE --evaluator NAME`: an evaluator's verdicts on pairs of answers
against human labels, with accuracy on non-tie pairs, agreement counting ties, per category and
system level (ScaleEval §3.3); bad files are refused by line, printing no JSON."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from lib.evaluators import Evaluator, register_evaluator
from tests.evaluator_registry import isolated_evaluator_registry  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.django_db  # each run is saved (apps/annotate/metaeval_runs.py)


def pair(id, human, a, b, category="math", **extra) -> dict:
    return {"id": id, "question": "Which is better?", "category": category, "answer_a": a, "answer_b": b,
            "human": human, **extra}


# the length baseline's verdict in the comment; ✓ where it matches the human label
PAIRS = [
    pair("p1", "a", "one two three", "one"),  # a ✓
    pair("p2", "b", "x y", "x"),  # a ✗
    pair("p3", "tie", "x", "y"),  # tie ✓ (counts only with ties)
    pair("p4", "a", "x y", "x", category="writing"),  # a ✓
    pair("p5", "tie", "x", "y", category="writing"),  # tie ✓
    pair("p6", "b", "x", "x y z", category="writing"),  # b ✓
]


def write(tmp_path, rows, name="pairs.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def run(path: str, evaluator: str = "length") -> tuple[str, dict]:
    out = io.StringIO()
    call_command("metaeval", "pairs", path, "--evaluator", evaluator, stdout=out)
    return out.getvalue(), json.loads(out.getvalue().strip().splitlines()[-1])


def test_accuracy_leaves_human_ties_out_and_agreement_counts_them(tmp_path):
    text, data = run(write(tmp_path, PAIRS))
    assert data["evaluator"] == "length"
    assert (data["n"], data["human_ties"], data["non_tie"]) == (6, 2, 4)
    assert (data["agreed_non_tie"], data["accuracy_non_tie"]) == (3, 0.75)
    assert (data["agreed_with_ties"], data["agreement_with_ties"]) == (5, 0.8333)
    assert data["undecided"] == 0 and data["evaluator_ties"] == 2
    assert data["system_level"] is None  # no pair names its systems
    assert "0.750 (3/4)" in text and "0.833 (5/6)" in text


def test_each_category_gets_the_same_figures(tmp_path):
    _, data = run(write(tmp_path, PAIRS))
    math, writing = data["per_category"]["math"], data["per_category"]["writing"]
    assert (math["accuracy_non_tie"], math["agreement_with_ties"]) == (0.5, 0.6667)
    assert (writing["accuracy_non_tie"], writing["agreement_with_ties"]) == (1.0, 1.0)


class Abstains(Evaluator):
    """Decides only pairs whose answers differ in length."""

    name = "abstains"

    def compare(self, items):
        return [None if len(i["answer_a"]) == len(i["answer_b"]) else "a" for i in items]


def test_undecided_verdicts_count_as_wrong_and_are_reported(tmp_path):
    register_evaluator("abstains", Abstains)
    _, data = run(write(tmp_path, PAIRS), "abstains")
    # decided: p1 a ✓, p2 a ✗, p4 a ✓, p6 a ✗; p3 and p5 undecided, though humans tied there
    assert data["undecided"] == 2
    assert (data["accuracy_non_tie"], data["agreement_with_ties"]) == (0.5, 0.3333)


def test_system_level_compares_the_most_frequent_preference_per_system_pair(tmp_path):
    rows = [
        pair("q1", "a", "x y", "x", model_a="X", model_b="Y"),  # human X, length X
        pair("q2", "b", "x y", "x", model_a="Y", model_b="X"),  # human X, length Y
        pair("q3", "b", "x", "x y", model_a="Y", model_b="X"),  # human X, length X
        pair("q4", "a", "x", "x y", model_a="X", model_b="Z"),  # human X, length Z
        pair("q5", "b", "x", "x y", model_a="X", model_b="Z"),  # human Z, length Z: the human mode is tied
    ]
    text, data = run(write(tmp_path, rows))
    level = data["system_level"]
    assert (level["agreed"], level["compared"], level["undefined"], level["rate"]) == (1, 1, 1, 1.0)
    xy = next(p for p in level["pairs"] if p["systems"] == ["X", "Y"])
    assert (xy["n"], xy["human_mode"], xy["evaluator_mode"], xy["agreed"]) == (3, "X", "X", 1)
    xz = next(p for p in level["pairs"] if p["systems"] == ["X", "Z"])
    assert (xz["human_mode"], xz["evaluator_mode"], xz["agreed"]) == (None, "Z", None)
    assert data["per_category"]["math"]["system_compared"] == 1
    assert "X vs Y" in text


@pytest.mark.parametrize(("bad", "message"), [
    ('{"id": "p9", "question": "Q"', r"line 2: not JSON"),
    ('["a list"]', r"line 2: expected a JSON object"),
    (json.dumps({k: v for k, v in pair("p9", "a", "x", "y").items() if k != "answer_b"}), r"line 2: .*`answer_b`"),
    (json.dumps(pair("p9", "A", "x", "y")), r"line 2: `human` must be \"a\", \"b\" or \"tie\", got 'A'"),
    (json.dumps(pair("p1", "a", "x", "y")), r"line 2: duplicate id 'p1' \(first on line 1\)"),
    (json.dumps(pair("p9", "a", "x", "y", model_a="X")), r"line 2: give both `model_a` and `model_b`"),
    (json.dumps(pair("p9", "a", "x", "y", reference=3)), r"line 2: `reference` must be a string"),
])
def test_a_bad_line_is_refused_by_number_and_prints_no_json(tmp_path, bad, message):
    out = io.StringIO()
    with pytest.raises(CommandError, match=message):
        call_command("metaeval", "pairs", write(tmp_path, [PAIRS[0], bad]), "--evaluator", "length", stdout=out)
    assert out.getvalue() == ""


def test_an_unknown_evaluator_is_refused_with_the_available_ones(tmp_path):
    with pytest.raises(CommandError,
                       match=r"unknown evaluator 'bleu'; available: bertscore-lc, bertscore-ref, (.*, )?length\b"):
        run(write(tmp_path, PAIRS), "bleu")


def test_bertscore_ref_on_pairs_without_a_reference_is_refused(tmp_path):
    out = io.StringIO()
    with pytest.raises(CommandError, match="bertscore-ref: .*`reference`.*p1"):
        call_command("metaeval", "pairs", write(tmp_path, PAIRS), "--evaluator", "bertscore-ref", stdout=out)
    assert out.getvalue() == ""


def test_a_missing_or_empty_file_is_refused(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run(str(tmp_path / "absent.jsonl"))
    with pytest.raises(CommandError, match="no pairs"):
        run(write(tmp_path, ["", "  "]))


def test_blank_lines_are_skipped_and_line_numbers_still_count_them(tmp_path):
    with pytest.raises(CommandError, match="line 3: duplicate id 'p1'"):
        run(write(tmp_path, [PAIRS[0], "", PAIRS[0]]))
