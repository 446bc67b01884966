"""`python manage.py bench chain` on a tiny sweep: its last line is the JSON of headline figures,
and every call it offered was confirmed exactly once (in the outbox and on-chain)."""

import io
import json

import pytest
from django.core.management import call_command

from apps.chain.models import ChainTransaction, OutboxItem, Sender, SigningKey

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]


def test_bench_chain_prints_its_figures_and_confirms_every_call_once():
    out = io.StringIO()
    call_command("bench", "chain", "--rates", "20", "--duration", "2", "--users", "3", "--ceiling-duration", "1",
                 stdout=out)
    lines = out.getvalue().strip().splitlines()

    result = json.loads(lines[-1])
    assert {"functions", "node_ceiling_tx_per_s", "ratio", "batch", "duration_s", "rates"} <= result.keys()
    assert result["rates"] == [20] and result["duration_s"] == 2 and result["batch"] >= 1
    assert result["node_ceiling_tx_per_s"] > 0
    assert set(result["functions"]) == {"addModel", "autoEval", "humEval"}
    for function, figures in result["functions"].items():
        assert {"peak_per_s", "p95_ms_at_peak"} <= figures.keys()
        assert figures["offered"] == figures["confirmed"] == 40  # 20/s for 2 s, each confirmed
        assert 0 < figures["peak_per_s"] <= 40 and figures["p95_ms_at_peak"] > 0
        assert result["ratio"][function] == pytest.approx(
            figures["peak_per_s"] / result["node_ceiling_tx_per_s"], abs=0.001)
    assert result["unconfirmed"] == result["failed"] == result["duplicates"] == 0
    assert result["on_chain_ok"] is True  # the node holds each confirmed call's event exactly once

    rows = [line.split() for line in lines if line.split()[:1] in (["addModel"], ["autoEval"], ["humEval"])]
    assert [(r[0], r[1]) for r in rows] == [("addModel", "20"), ("autoEval", "20"), ("humEval", "20")]

    # the bench cleans up after itself
    assert not OutboxItem.objects.exists() and not ChainTransaction.objects.exists()
    assert not Sender.objects.exists() and not SigningKey.objects.exists()
