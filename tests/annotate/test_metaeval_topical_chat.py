"""The meta-evaluation commands on the real Topical-Chat USR data (../shared/data): the derived
pairs file, `metaeval pairs` with the length and BERTScore baselines, `metaeval scores` with the
length baseline. Skips when the data is absent; the figures are those the data gives."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command

DATA = Path(os.environ.get("LLMCHAIN_TOPICAL_CHAT",
                           Path(__file__).resolve().parents[3] / "shared" / "data" / "topical_chat_usr.json"))
pytestmark = [pytest.mark.skipif(not DATA.is_file(),
                                 reason=f"Topical-Chat USR absent ({DATA}): see ../shared/data/README.md"),
              pytest.mark.django_db]  # each run is saved


def command(*args) -> tuple[str, dict | None]:
    out = io.StringIO()
    call_command("metaeval", *args, stdout=out)
    last = out.getvalue().strip().splitlines()[-1]
    return out.getvalue(), json.loads(last) if last.startswith("{") else None


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("topical") / "pairs.jsonl"
    command("topical-pairs", "--data", str(DATA), "--out", str(path))
    return str(path)


def test_the_derived_file_pairs_every_two_systems_of_each_context(pairs_file):
    pairs = [json.loads(line) for line in Path(pairs_file).read_text().splitlines()]
    assert len(pairs) == 60 * 15 and len({p["id"] for p in pairs}) == 900
    assert Counter(p["human"] for p in pairs) == {"a": 420, "b": 414, "tie": 66}
    assert set(Counter(p["model_a"] for p in pairs).values()) == {150}  # each system in slot a as often


def test_the_length_baseline_on_topical_chat_pairs(pairs_file):
    _, data = command("pairs", pairs_file, "--evaluator", "length")
    assert (data["n"], data["human_ties"], data["undecided"]) == (900, 66, 0)
    assert (data["agreed_non_tie"], data["accuracy_non_tie"]) == (514, 0.6163)
    assert (data["agreed_with_ties"], data["agreement_with_ties"]) == (521, 0.5789)
    assert (data["system_level"]["agreed"], data["system_level"]["compared"]) == (13, 14)


@pytest.mark.slow
def test_bertscore_against_the_knowledge_on_topical_chat_pairs(pairs_file):
    pytest.importorskip("torch")
    _, data = command("pairs", pairs_file, "--evaluator", "bertscore-ref")
    assert data["n"] == 900 and data["undecided"] == 0
    assert data["accuracy_non_tie"] == pytest.approx(0.669, abs=0.005)  # 558/834 on CPU
    assert data["agreement_with_ties"] == pytest.approx(0.621, abs=0.005)  # 559/900


def test_length_correlates_with_human_scores_per_criterion():
    text, data = command("scores", str(DATA), "--evaluator", "length", "--criterion", "all")
    overall = data["criteria"]["overall"]
    assert data["n"] == 360 and overall["unscored"] == 0
    assert overall["pooled"] == {"pearson": 0.3343, "spearman": 0.3009, "kendall": 0.2149}
    assert overall["per_context"]["spearman"] == 0.3263 and overall["per_context"]["contexts"] == 60
    assert data["criteria"]["engagingness"]["pooled"]["spearman"] == 0.4089
    assert set(data["criteria"]) == {"understandability", "naturalness", "coherence", "engagingness",
                                     "groundedness", "overall"}
    assert text.splitlines()[0].startswith("criterion")


def test_one_criterion_can_be_asked_for():
    _, data = command("scores", str(DATA), "--evaluator", "length", "--criterion", "groundedness")
    assert list(data["criteria"]) == ["groundedness"]
