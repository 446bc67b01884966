"""`bench markdown`: the render time of a model answer and its stages, printed (never asserted)."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from bench.markdown import answer
from lib.markdown import render


def test_the_bench_times_every_stage_of_the_same_answer_and_prints_them():
    out = StringIO()
    call_command("bench", "markdown", "--size", "3000", "--repeat", "3", stdout=out)
    lines = out.getvalue().strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["characters"] == 3000 and summary["repeat"] == 3
    for stage in ("parse_only", "to_html", "sanitize_only", "render"):
        assert 0 < summary[f"{stage}_best_ms"] <= summary[f"{stage}_median_ms"]
        assert any(line.startswith(stage) for line in lines)
    assert summary["render_kb_per_s"] > 0


def test_the_bench_answer_holds_what_answers_hold():
    html = render(answer(2000))
    assert "<h2>" in html and "<strong>" in html and "<table>" in html and 'class="code-block"' in html
    assert 'rel="nofollow noopener"' in html


def test_bad_sizes_are_refused():
    with pytest.raises(CommandError, match="positive"):
        call_command("bench", "markdown", "--size", "0", stdout=StringIO())
