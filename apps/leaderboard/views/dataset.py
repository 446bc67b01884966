"""/dataset/: the public dataset, for the site's staff to export (apps/leaderboard/dataset.py)."""

from __future__ import annotations

import json

from django.contrib.admin.views.decorators import staff_member_required
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from ..dataset import records, shared_interactions


@staff_member_required
def dataset(request):
    """What the export holds (counts), how to get it as a Hugging Face folder, and the JSONL download."""
    return render(request, "leaderboard/dataset.html", {"answers": shared_interactions().count()})


@staff_member_required
def dataset_jsonl(request):
    """The whole export as one JSONL file, streamed as it is read (a long export never holds memory)."""
    lines = (json.dumps(r, ensure_ascii=False) + "\n" for r in records())
    response = StreamingHttpResponse(lines, content_type="application/jsonl; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="llmchain-{timezone.now():%Y%m%d}.jsonl"'
    return response
