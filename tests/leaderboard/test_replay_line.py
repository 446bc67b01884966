"""The boards' replay line: while the MT-Bench replay runs it says how far it is (and the page keeps
asking); once it is done it says what the replay rows are and tells htmx to stop polling."""

from __future__ import annotations

import pytest

from apps.oracle.models import EvaluationJob
from apps.oracle.replay import queue_mtbench
from tests.oracle.test_replay_subset import root  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def test_the_board_page_asks_for_the_replay_line(client):
    assert b'hx-get="/boards/replay-progress"' in client.get("/").content


def test_without_a_replay_the_line_is_empty_and_the_polling_stops(client):
    response = client.get("/boards/replay-progress")
    assert response.status_code == 286 and response.content.strip() == b""


def test_while_the_replay_runs_the_line_counts_what_is_on_chain(client, root):  # noqa: F811
    ids, _ = queue_mtbench(root, turns=1)
    EvaluationJob.objects.filter(interaction_id=ids[0]).update(status=EvaluationJob.Status.ONCHAIN)
    response = client.get("/boards/replay-progress")
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    text = response.content.decode()
    assert "Demo data." in text and f"1 of {len(ids)}</span> recorded answers evaluated and on-chain" in text


def test_once_the_replay_is_done_the_line_says_what_its_rows_are_and_the_polling_stops(client, root):  # noqa: F811
    ids, _ = queue_mtbench(root, turns=1)
    EvaluationJob.objects.filter(interaction_id__in=ids).update(status=EvaluationJob.Status.ONCHAIN)
    response = client.get("/boards/replay-progress")
    assert response.status_code == 286
    text = response.content.decode()
    assert "Demo data." in text and f"({len(ids)} evaluated)" in text and "<progress" not in text
