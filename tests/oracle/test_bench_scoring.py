"""`python manage.py bench scoring`: the project's scorer against plain bert_score on the pairs the
oracle would score; the last line is one JSON object with the headline figures."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

pytest.importorskip("bert_score")

pytestmark = pytest.mark.slow


def mt_bench() -> Path:
    root = Path(settings.LLMCHAIN_MTBENCH_DIR)
    if not (root / "model_answer").is_dir():
        pytest.skip(f"MT-Bench data absent ({root}/model_answer): see ../shared/data/README.md")
    return root


def test_bench_scoring_prints_its_figures_as_a_last_json_line():
    root = mt_bench()
    buf = io.StringIO()
    call_command("bench", "scoring", "--pairs", "40", "--data", str(root), stdout=buf)
    lines = buf.getvalue().strip().splitlines()
    summary = json.loads(lines[-1])
    assert {"pairs", "baseline_pairs_per_s", "project_pairs_per_s", "ratio", "max_abs_diff"} <= set(summary)
    assert summary["pairs"] == 40
    assert summary["max_abs_diff"] <= 1e-3 and summary["ok"] is True
    assert summary["baseline_pairs_per_s"] > 0 and summary["project_pairs_per_s"] > 0
    assert summary["ratio"] == pytest.approx(summary["project_pairs_per_s"] / summary["baseline_pairs_per_s"],
                                             rel=1e-2)
    assert summary["distinct_texts"] < 80  # references recur, as on the oracle
    assert any("bert_score.score" in line for line in lines[:-1])  # the table


def test_bench_scoring_refuses_a_folder_without_answers(tmp_path):
    with pytest.raises(CommandError, match="no MT-Bench answers"):
        call_command("bench", "scoring", "--pairs", "4", "--data", str(tmp_path), stdout=io.StringIO())
