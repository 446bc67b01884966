"""/metaeval/ and /metaeval/<id>/: each `manage.py metaeval pairs|scores` run is saved with the JSON it
printed, shown with its figures, a chart of the same figures and the command that reproduces it, and
linked from the board of the context it speaks for."""

from __future__ import annotations

import hashlib
import html
import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.annotate.metaeval_runs import record_run
from apps.annotate.models import MetaEvalRun
from apps.chain.models import Context
from apps.leaderboard import entries
from lib.reputation import GLOBAL_CONTEXT_ID

from .test_metaeval_pairs import PAIRS, pair, write

pytestmark = pytest.mark.django_db

CODING = "0x" + "c0" * 32
HOSTILE = '<script>alert("x")</script>'


def metaeval(*args) -> dict:
    out = io.StringIO()
    call_command("metaeval", *args, stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def chart_data(page: str) -> dict:
    found = re.search(r'<script id="metaeval-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


@pytest.fixture
def coding():
    return Context.objects.create(context_id=CODING, name="Coding", block_number=1)


def test_a_pairs_run_is_saved_with_the_json_it_printed(tmp_path):
    path = write(tmp_path, PAIRS)
    printed = metaeval("pairs", path, "--evaluator", "length")
    run = MetaEvalRun.objects.get()
    assert printed["run"] == run.pk
    assert run.result == printed
    assert (run.kind, run.evaluator, run.source, run.context_id) == ("pairs", "length", path, "")
    assert run.source_sha256 == hashlib.sha256((tmp_path / "pairs.jsonl").read_bytes()).hexdigest()
    assert run.command == f"python manage.py metaeval pairs {path} --evaluator length"


def test_saving_adds_only_the_run_id_to_the_printed_json(tmp_path):
    path = write(tmp_path, PAIRS)
    saved, unsaved = metaeval("pairs", path, "--evaluator", "length"), metaeval("pairs", path, "--evaluator",
                                                                                 "length", "--no-save")
    assert "run" not in unsaved
    assert {k: v for k, v in saved.items() if k not in ("run", "seconds")} == \
        {k: v for k, v in unsaved.items() if k != "seconds"}


def test_no_save_saves_nothing(tmp_path):
    metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length", "--no-save")
    assert not MetaEvalRun.objects.exists()


def test_an_unknown_context_is_refused_before_anything_runs(tmp_path, coding):
    with pytest.raises(CommandError, match="--context: 'Cooking' is no context; known: Global, Coding"):
        metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length", "--context", "Cooking")
    assert not MetaEvalRun.objects.exists()


def test_the_list_shows_each_run_with_its_headline_figures(client, tmp_path, coding):
    metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length", "--label", "Coding questions",
             "--context", "coding")
    run = MetaEvalRun.objects.get()
    page = client.get("/metaeval/").content.decode()
    assert f'href="/metaeval/{run.pk}/"' in page
    assert "accuracy 0.7500, agreement 0.8333" in page
    assert "Coding questions" in page and f'href="/?context={CODING}"' in page


def test_the_run_page_shows_every_category_and_the_overall_figures(client, tmp_path):
    metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length")
    run = MetaEvalRun.objects.get()
    page = client.get(f"/metaeval/{run.pk}/").content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "math 3 1 0.5000 (1/2) 0.6667 (2/3)" in text
    assert "writing 3 1 1.0000 (2/2) 1.0000 (3/3)" in text
    assert "overall 6 2 0.7500 (3/4) 0.8333 (5/6) 0 2" in text
    assert "python manage.py metaeval pairs" in page and "Accuracy (non-tie): of the pairs" in page
    assert "vendor/chart.js/chart.umd.min.js" in page and "cdn" not in page.lower()


def test_the_chart_data_is_the_runs_figures(client, tmp_path):
    metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length")
    run = MetaEvalRun.objects.get()
    chart = chart_data(client.get(f"/metaeval/{run.pk}/").content.decode())
    r = run.result
    assert chart["labels"] == ["math", "writing", "overall"]
    assert chart["datasets"][0]["data"] == [r["per_category"]["math"]["accuracy_non_tie"],
                                            r["per_category"]["writing"]["accuracy_non_tie"], r["accuracy_non_tie"]]
    assert chart["datasets"][1]["data"] == [0.6667, 1.0, 0.8333]


def test_system_level_rows_are_shown(client, tmp_path):
    rows = [pair("q1", "a", "x y", "x", model_a="X", model_b="Y"),
            pair("q2", "a", "x y", "x", model_a="X", model_b="Y")]
    metaeval("pairs", write(tmp_path, rows), "--evaluator", "length")
    page = client.get(f"/metaeval/{MetaEvalRun.objects.get().pk}/").content.decode()
    assert 'id="metaeval-systems"' in page and "X vs Y" in page


def test_names_from_files_are_escaped(client, tmp_path):
    run = record_run("pairs", metaeval("pairs", write(tmp_path, [pair("p1", "a", "x y", "x", category=HOSTILE)]),
                                       "--evaluator", "length", "--no-save") | {"evaluator": HOSTILE},
                     str(tmp_path / "pairs.jsonl"), label=HOSTILE)
    for url in ("/metaeval/", f"/metaeval/{run.pk}/"):
        page = client.get(url).content.decode()
        assert HOSTILE not in page
        assert html.escape(HOSTILE) in page or "&lt;script&gt;" in page
    assert chart_data(client.get(f"/metaeval/{run.pk}/").content.decode())["labels"][0] == HOSTILE


def test_a_scores_run_shows_each_criterion_and_its_correlations(client, tmp_path):
    result = {"evaluator": "length", "evaluator_params": {}, "data": "usr.json", "n": 4, "seconds": 0.1,
              "reference": "knowledge fact (`context`)",
              "criteria": {"overall": {"n": 4, "unscored": 0,
                                       "pooled": {"pearson": 0.3343, "spearman": 0.3009, "kendall": 0.2149},
                                       "per_context": {"pearson": 0.1, "spearman": None, "kendall": -0.05},
                                       "judge": {"scored": 3, "unusable": 1, "mean_digit_mass": 0.81234,
                                                 "min_digit_mass": 0.4, "methods": ["logprobs"], "threshold": 0.5}}}}
    (tmp_path / "usr.json").write_text("{}")
    run = record_run("scores", result, str(tmp_path / "usr.json"))
    assert run.command == "python manage.py metaeval scores usr.json --evaluator length --criterion overall"
    assert "Spearman ρ 0.3009" in client.get("/metaeval/").content.decode()
    page = client.get(f"/metaeval/{run.pk}/").content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "overall 4 0 0.3343 0.3009 0.2149 0.1000 — -0.0500" in text
    assert "overall 3 1 0.812 0.400 logprobs" in text  # the judge's digit mass and unusable responses
    chart = chart_data(page)
    assert chart["labels"] == ["overall"]
    assert {d["key"]: d["data"] for d in chart["datasets"]} == {
        "pooled_pearson": [0.3343], "pooled_spearman": [0.3009], "pooled_kendall": [0.2149],
        "per_context_pearson": [0.1], "per_context_spearman": [None], "per_context_kendall": [-0.05]}


def test_an_unknown_run_is_not_found(client):
    assert client.get("/metaeval/999/").status_code == 404
    assert client.get("/api/metaeval/999").status_code == 404


def test_the_api_returns_the_run(client, tmp_path):
    printed = metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length")
    data = client.get(f"/api/metaeval/{printed['run']}").json()
    assert data["result"] == printed and data["kind"] == "pairs" and data["evaluator"] == "length"


def test_the_board_links_to_the_runs_attached_to_its_context(client, tmp_path, coding,
                                                             django_capture_on_commit_callbacks):
    entries.bump()  # boards are cached from here on: attaching a run must move the board's version
    assert 'href="/metaeval/"' in client.get(f"/?context={CODING}").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length", "--context", CODING,
                 "--label", "Coding questions")
    run = MetaEvalRun.objects.get()
    board = client.get(f"/?context={CODING}").content.decode()
    assert f'href="/metaeval/{run.pk}/"' in board and "length on Coding questions" in board
    assert f'href="/metaeval/{run.pk}/"' not in client.get("/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        metaeval("pairs", write(tmp_path, PAIRS), "--evaluator", "length", "--context", "global")
    assert f'/metaeval/{MetaEvalRun.objects.get(context_id=GLOBAL_CONTEXT_ID).pk}/' in client.get("/").content.decode()


def test_the_report_and_the_runs_link_to_each_other(client):
    assert 'href="/metaeval/"' in client.get("/annotate/report/").content.decode()
    assert 'href="/annotate/report/"' in client.get("/metaeval/").content.decode()
