"""`python manage.py bench chain` on a tiny sweep: its last line is the JSON of headline figures,
every call it offered (relayed ratings and complete evaluations included) was confirmed exactly
once, in the outbox and on-chain; and the bench's fast request signer signs as the site does."""

import io
import json
import math
import random

import pytest
from django.core.management import call_command
from eth_account import Account

from apps.chain import metatx
from apps.chain.models import ChainTransaction, OutboxItem, Sender, SigningKey
from bench.chain import SATURATED_SHARE, RequestSigner, sustained_rate

FUNCTIONS = ["autoEval", "humEval", "updateReputation", "complete"]


@pytest.mark.chain
@pytest.mark.django_db(transaction=True)
def test_bench_chain_prints_its_figures_and_confirms_every_call_once():
    out = io.StringIO()
    call_command("bench", "chain", "--rates", "20", "--duration", "2", "--users", "3", "--ceiling-duration", "1",
                 stdout=out)
    lines = out.getvalue().strip().splitlines()

    result = json.loads(lines[-1])
    assert {"functions", "complete_per_s", "node_ceiling_tx_per_s", "ratio", "batch", "duration_s", "rates",
            "on_chain_ok", "forwarder_nonces_ok"} <= result.keys()
    assert result["rates"] == [20] and result["duration_s"] == 2 and result["batch"] >= 1
    assert result["node_ceiling_tx_per_s"] > 0
    assert list(result["functions"]) == FUNCTIONS, "the default functions, in order"
    for function, figures in result["functions"].items():
        assert {"peak_per_s", "saturated", "p95_ms_at_peak", "e2e_per_s_at_peak"} <= figures.keys()
        # 20/s for 2 s (complete: 40 interactions, three calls each), each confirmed
        assert figures["offered"] == figures["confirmed"] == 40, function
        assert figures["peak_per_s"] > 0 and figures["p95_ms_at_peak"] > 0
        assert isinstance(figures["saturated"], bool)
        # each function on a fresh node of its own, its ratio to that node's ceiling
        assert result["ratio"][function] == pytest.approx(
            figures["peak_per_s"] / result["node_ceiling_by_function"][function], abs=0.001)
    assert result["one_node"] is False and result["nodes"] == "step"
    assert set(result["node_ceiling_by_function"]) == set(FUNCTIONS)
    assert result["node_ceiling_tx_per_s"] == min(result["node_ceiling_by_function"].values())
    assert [line.split(":")[0] for line in lines if line.startswith("--- ")] == [f"--- {f} at 20/s" for f in FUNCTIONS]
    assert sum(line.startswith("chain bench:") for line in lines) == 1, "the full header once"
    assert sum(line.startswith("node ceiling:") for line in lines) == len(FUNCTIONS), "each node's ceiling"
    assert result["complete_per_s"] == result["functions"]["complete"]["peak_per_s"]
    # a complete evaluation waits for three confirmations in a row: slower than any one call
    assert result["functions"]["complete"]["p95_ms_at_peak"] > result["functions"]["humEval"]["p95_ms_at_peak"]
    assert result["unconfirmed"] == result["failed"] == result["duplicates"] == 0
    assert result["on_chain_ok"] is True, "each step's calls are on-chain exactly once"
    assert result["forwarder_nonces_ok"] is True, "each rater's forwarder nonce = their confirmed requests"

    rows = [line.split() for line in lines if line.split()[:1] in ([f] for f in FUNCTIONS)]
    assert [(r[0], r[1]) for r in rows] == [(f, "20") for f in FUNCTIONS]
    assert all(r[-1] == "ok" for r in rows), "the on-chain count of every step equals its confirmed calls"
    for r in rows:  # kept up with: the rate actually offered (actual/s) of its one step, unless saturated
        kept_up = result["functions"][r[0]]["kept_up_per_s"]
        assert kept_up == (pytest.approx(float(r[2]), abs=0.51) if r[-2] == "no" else 0.0), r

    # the bench cleans up after itself
    assert not OutboxItem.objects.exists() and not ChainTransaction.objects.exists()
    assert not Sender.objects.exists() and not SigningKey.objects.exists()


@pytest.mark.chain
@pytest.mark.django_db(transaction=True)
def test_each_rate_of_a_sweep_runs_on_a_fresh_node_and_a_function_on_one_node_when_asked():
    def run(*args):
        out = io.StringIO()
        # The submitter as a thread of this process (the test above runs the default, two `chain submit`
        # processes per node): this test is about the nodes, and its three nodes spared six processes'
        # Django starts (about 1.5 CPU-s each).
        call_command("bench", "chain", "--functions", "autoEval", "--rates", "10,20", "--duration", "1", "--users",
                     "2", "--ceiling-duration", "1", "--full-sweep", "--submitter", "thread", *args,
                     stdout=out)  # both rates, saturated or not
        lines = out.getvalue().strip().splitlines()
        return json.loads(lines[-1]), [line.split(":")[0] for line in lines if line.startswith(("--- ", "node ceiling"))]

    result, marks = run()
    assert marks == ["--- autoEval at 10/s", "node ceiling", "--- autoEval at 20/s", "node ceiling"]
    assert (result["nodes"], result["one_node"]) == ("step", False)
    assert result["functions"]["autoEval"]["offered"] == result["functions"]["autoEval"]["confirmed"] == 30
    assert result["on_chain_ok"] is True
    result, marks = run("--nodes", "function")
    assert marks == ["node ceiling"] and (result["nodes"], result["one_node"]) == ("function", True)
    assert result["functions"]["autoEval"]["confirmed"] == 30 and result["on_chain_ok"] is True


def test_the_bench_signs_a_rating_request_exactly_as_the_site_does():
    rater, forwarder, reputation = Account.create(), Account.create().address, Account.create().address
    request = metatx.ForwardRequest(sender=rater.address, to=reputation, gas=200_000, nonce=7,
                                    deadline=1_900_000_000, data=bytes(range(228)))
    site = metatx.sign_request(request, rater.key, 31337, forwarder)

    fast = RequestSigner(31337, forwarder).sign(request, bytes(rater.key))

    assert fast.signature == site.signature  # RFC 6979 both: the very same bytes
    assert metatx.recover_signer(fast, 31337, forwarder) == rater.address
    assert metatx.recover_signer(RequestSigner(1, forwarder).sign(request, bytes(rater.key)), 31337,
                                 forwarder) != rater.address, "the chain id is part of what is signed"


def _bunched(times: list[float], every: float) -> list[float]:
    """Confirmation times as a submitter sees them: in passes, each at the next multiple of `every`."""
    return [math.ceil(t / every) * every for t in times]


def test_the_sustained_rate_is_read_from_every_call_not_from_where_a_few_passes_fall():
    rng = random.Random(21)
    offered, duration = 1500, 10.0
    enqueued = sorted(rng.uniform(0, duration) for _ in range(int(offered * duration)))
    # Kept up: each call final about one latency (6 s, give or take a block) after it was enqueued,
    # confirmed by passes 1.3 s apart: the rate sustained is the rate offered, never more.
    kept = _bunched([t + 6 + rng.uniform(0, 1) for t in enqueued], 1.3)
    per_s, slope = sustained_rate(enqueued, kept, offered)
    assert per_s == offered and 0.9 < slope < 1.1
    # Saturated at 1,000/s: the i-th call final at i/1000 s (plus the latency), the backlog growing all
    # step long; read within 3% whatever the passes' phase, where counting the calls of the passes
    # between the first and the last swings with it.
    for phase in (0.0, 0.4, 0.9):
        saturated = _bunched([6 + i / 1000 + phase for i in range(len(enqueued))], 1.3)
        per_s, slope = sustained_rate(enqueued, saturated, offered)
        assert abs(per_s - 1000) / 1000 < 0.03 and per_s < SATURATED_SHARE * offered, (phase, per_s)
    # Too few calls, or all enqueued at one instant: nothing to read.
    assert all(math.isnan(v) for v in sustained_rate([1.0, 2.0], [7.0, 8.0], offered))
    assert all(math.isnan(v) for v in sustained_rate([1.0] * 5, [7.0] * 5, offered))
