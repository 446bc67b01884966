"""`manage.py import_mtbench PATH`: the folder a user is likely to give, whichever it is."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.chain.demo import DEMO_CONTEXTS
from apps.chat.models import RegisteredModel
from apps.chat.replay import import_mtbench, mtbench_root

from .factories import make_contexts, write_mtbench

pytestmark = pytest.mark.django_db

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture
def data_root(tmp_path) -> Path:
    """A data folder holding mt_bench/ as the shared data does: two models, one writing question."""
    write_mtbench(tmp_path / "data" / "mt_bench", {1: ("writing", ["Q1", "Q2"])},
                  {"poet-1b": {1: ["A1", "A2"]}, "bard-2b": {1: ["B1", "B2"]}})
    return tmp_path / "data"


@pytest.mark.parametrize("given", ["data", "data/mt_bench", "data/mt_bench/model_answer"])
def test_the_mt_bench_folder_its_parent_or_its_answers_folder_import_the_same_models(data_root, given):
    writing, = make_contexts("writing")
    root = data_root.parent / given
    assert mtbench_root(root) == data_root / "mt_bench"
    counts = import_mtbench(root, contexts=[writing], progress=lambda _: None)
    assert counts == {"models": 2, "answers": 4, "skipped": 0}
    assert sorted(RegisteredModel.objects.values_list("name", flat=True)) == ["bard-2b", "poet-1b"]


def test_the_command_takes_the_parent_folder(data_root):
    make_contexts(*DEMO_CONTEXTS)  # on-chain already: nothing to wait for
    out = io.StringIO()
    call_command("import_mtbench", str(data_root), stdout=out)
    assert out.getvalue().splitlines()[-1] == '{"models": 2, "answers": 4, "skipped": 0}'


def test_a_folder_without_questions_is_refused_at_once_without_waiting_for_the_contexts(tmp_path):
    started = time.monotonic()
    with pytest.raises(CommandError, match=r"no question.jsonl in .*: PATH must be the MT-Bench folder"):
        call_command("import_mtbench", str(tmp_path), "--wait", "60")
    assert time.monotonic() - started < 5
    assert not RegisteredModel.objects.exists()


@pytest.mark.skipif(not (SHARED / "mt_bench" / "question.jsonl").is_file(),
                    reason=f"the MT-Bench data is not at {SHARED / 'mt_bench'} (it lives outside the project)")
def test_the_shared_data_folder_and_its_mt_bench_folder_are_the_same_import():
    assert mtbench_root(SHARED) == mtbench_root(SHARED / "mt_bench") == SHARED / "mt_bench"
