"""A user rates an answer: humEval from their own address, then updateReputation; the contract's
Rh and R equal REPUTATION.md computed by hand from the block timestamps."""

from __future__ import annotations

import math

import pytest

from apps.chain import indexer
from apps.chain.models import LedgerInteraction
from apps.chain.models import Registration
from apps.chat.models import Rating
from apps.chat.ratings import queue_waiting_ratings, reputation_moves, submit_rating
from apps.oracle import jobs
from apps.oracle.worker import load_metric
from lib.ids import b32

from .conftest import QUESTIONS, chat, drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain, pytest.mark.slow]

ANSWERS = {"reliability": 5, "completeness": 4, "utility": 4, "familiarity": 3, "trust": 4, "uncertainty": 2}
PSI, XI, THETA, LAMBDA = 1 / 3, 2 / 3, 2 / 3, 1e-3


def update(rx, s, w, threshold):
    rate = PSI if s >= threshold else XI
    return (1 - rate * w) * rx + rate * w * s


def block_time(ledger, tx_hash):
    receipt = ledger.client.request("eth_getTransactionReceipt", [tx_hash])
    block = ledger.client.request("eth_getBlockByNumber", [receipt["blockNumber"], False])
    return int(block["timestamp"], 16)


def test_a_rating_moves_rh_and_r_exactly_as_the_spec_says(replay_world):
    ledger, submitter = replay_world["ledger"], replay_world["submitter"]
    interaction, = chat(replay_world, "alpha-7b", [QUESTIONS[0][1]])
    metric = load_metric()
    jobs.process(jobs.claim(8), metric)
    rating = submit_rating(replay_world["alice"], interaction, {k: str(v) for k, v in ANSWERS.items()})
    assert queue_waiting_ratings() == 1  # the worker's pass
    rating.refresh_from_db()
    assert rating.status == "queued"
    drain(submitter)
    indexer.index_until_head(ledger)
    rating.refresh_from_db()
    assert rating.hum_item.status == rating.update_item.status == "confirmed"

    job = interaction.evaluation
    job.refresh_from_db()
    sa, wa = int(job.sa) / 1e18, int(job.wa) / 1e18
    # alpha is the first model of the context: its REP starts at 0.5 (REPUTATION.md), and so do the means.
    ra = update(0.5, sa, wa, 0.5)
    sh = ((ANSWERS["reliability"] - 1) / 4 + (ANSWERS["completeness"] - 1) / 4 + (ANSWERS["utility"] - 1) / 4) / 3
    wh_user = ((ANSWERS["familiarity"] - 1) / 4 + (ANSWERS["trust"] - 1) / 4 + 1 - (ANSWERS["uncertainty"] - 1) / 4) / 3
    registered = Registration.objects.get(address=replay_world["alice"].profile.address).registered_at
    d = min((block_time(ledger, rating.hum_item.transaction.tx_hash) - registered) / 60, 1440)
    fd = (1 - math.exp(-LAMBDA * d)) / (1 + math.exp(-LAMBDA * d))
    wh = wh_user * fd
    rh = update(0.5, sh, wh, 0.5)
    s_theta, w_theta = THETA * sh + (1 - THETA) * sa, THETA * wh + (1 - THETA) * wa
    r = update(0.5, s_theta, w_theta, 0.5)

    model, context = interaction.conversation.model.model_id, interaction.conversation.context.context_id
    for ctx in (context, "0x" + "00" * 32):
        got_ra, got_rh, got_r, n_auto, n_human = ledger.reputation(b32(model), b32(ctx))
        assert abs(got_ra / 1e18 - ra) < 1e-9 and abs(got_rh / 1e18 - rh) < 1e-9 and abs(got_r / 1e18 - r) < 1e-9
        assert (n_auto, n_human) == (1, 1)
    row = LedgerInteraction.objects.get(interaction_id=interaction.interaction_id)
    assert abs(int(row.d_minutes) / 1e18 - d) < 1e-9 and abs(row.wh / 1e18 - wh) < 1e-9
    moves = {m["context"]: m for m in reputation_moves(interaction)}
    before_rh, after_rh = moves["writing"]["rh"]
    assert before_rh == 5 * 10**17 and abs(after_rh / 1e18 - rh) < 1e-9  # what the page shows
    assert moves["writing"]["r"][0] == 5 * 10**17 and abs(moves["writing"]["r"][1] / 1e18 - r) < 1e-9
    assert moves["writing"]["done"] and set(moves) == {"writing", "global"}
    assert Rating.objects.get().status == "queued"  # refreshed lazily by the page
