"""Each board carries how alike people's ratings and the automatic score rank the answers here: its JSON
(`validity.ratings`, `validity.ratings_text`), its CSV (the `ratings_*` columns) and the line under its
table, in plain words ("How alike people's ratings and the automatic score rank answers here: 0.42
[0.21-0.60] over 57 rated answers ..."), or "Not enough ratings yet" below the threshold. The indexed
tables stand for the chain's events (each answer's length for its evidence record's)."""

from __future__ import annotations

import csv
import io
import re
from html import unescape

import pytest

from apps.annotate.site_validity import rating_figures, rating_line
from apps.chain.models import LedgerInteraction
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.registry import ModelFields, register_model
from apps.leaderboard import boards
from apps.leaderboard.models import BoardEntry
from lib.reputation import GLOBAL_CONTEXT_ID, WAD
from lib.weighted import MIN_HUMAN
from tests.chat.factories import make_contexts
from tests.personas import developer, user

pytestmark = pytest.mark.django_db
RATING_COLUMNS = [f"ratings_{key}" for key in boards.RATING_KEYS]


@pytest.fixture
def rated(settings, tmp_path):
    """A context with a model on its board, and a way to add rated answers to it: Sh follows Sa but for
    every fifth answer, and the longer answers are rated lower."""
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    ctx, = make_contexts("coding")
    alice = user()
    model = register_model(developer(), ModelFields(name="m-7b", provider="t", endpoint_url="http://m.test/v1",
                                                    endpoint_model="m"))
    conversation = start_conversation(alice, model, ctx)
    BoardEntry.objects.create(model_id=model.model_id, context_id=ctx.context_id, name="m-7b", ra=WAD // 2,
                              rh=WAD // 2, r=WAD // 2, n_auto=3, n_human=3, block_number=1)
    made = []

    def add(count: int) -> None:
        for _ in range(count):
            k = len(made)
            turn = begin_interaction(alice, conversation, "Q?")
            finish_interaction(turn, "w " * (60 - k))
            sh = (k + (7 if k % 5 == 0 else 0)) / 60
            LedgerInteraction.objects.create(
                interaction_id=turn.interaction_id, model_id=model.model_id, context_id=ctx.context_id, user="0x0",
                has_reference=True, sa=int(k / 60 * WAD), wa=0, evidence_cid="bafy", auto_tx="0x", auto_block=1,
                sh=int(sh * WAD), answer_chars=len("w " * (60 - k)))
            made.append(turn.interaction_id)

    return ctx, add


def line_of(client, context_id: str) -> str:
    html = client.get(f"/boards/{context_id}/validity").content.decode()
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_below_the_threshold_the_board_says_not_enough_ratings_yet_and_still_serves_the_count(client, rated):
    ctx, add = rated
    add(MIN_HUMAN - 18)
    data = client.get(f"/api/boards/{ctx.context_id}").json()["validity"]
    r = data["ratings"]
    assert r["n"] == MIN_HUMAN - 18 and not r["enough"] and r["spearman"] is not None
    sentence = (f"Not enough ratings yet to compare people's ratings with the automatic score here: {MIN_HUMAN - 18} "
                f"rated answers with an automatic score, {MIN_HUMAN} needed.")
    assert data["ratings_text"] == sentence
    assert sentence in line_of(client, ctx.context_id)


def test_a_board_with_enough_ratings_carries_the_rank_agreement_in_json_csv_and_its_plain_line(client, rated):
    ctx, add = rated
    add(MIN_HUMAN + 10)
    data = client.get(f"/api/boards/{ctx.context_id}").json()["validity"]
    r = data["ratings"]
    assert r == rating_figures(ctx.context_id) and r["n"] == MIN_HUMAN + 10 and r["enough"]
    assert r["spearman"] > 0.9 and r["length_spearman"] < -0.9
    assert r["spearman_ci_low"] <= r["spearman"] <= r["spearman_ci_high"]
    sentence = (f"How alike people's ratings and the automatic score rank answers here: {r['spearman']:.2f} "
                f"[{r['spearman_ci_low']:.2f}-{r['spearman_ci_high']:.2f}] over {MIN_HUMAN + 10} rated answers (1 "
                f"would be the same order, 0 unrelated); ranking them by length instead: {r['length_spearman']:.2f}.")
    assert data["ratings_text"] == sentence
    line = line_of(client, ctx.context_id)
    assert sentence in line and "Spearman" not in line and "S_h" not in line

    table = list(csv.reader(io.StringIO(client.get(f"/api/boards/{ctx.context_id}.csv").content.decode())))
    assert table[0] == boards.CSV_HEADER and table[0][-len(RATING_COLUMNS):] == RATING_COLUMNS
    row = dict(zip(table[0], table[1]))
    assert row["ratings_n"] == str(MIN_HUMAN + 10)
    assert [float(row[c]) for c in RATING_COLUMNS[1:]] == [r["spearman"], r["spearman_ci_low"],
                                                           r["spearman_ci_high"], r["length_spearman"]]

    # The global board counts every context's ratings.
    assert client.get(f"/api/boards/{GLOBAL_CONTEXT_ID}").json()["validity"]["ratings"]["n"] == MIN_HUMAN + 10


def test_the_line_reads_a_negative_end_as_a_range_and_says_when_the_ratings_cannot_be_compared():
    base = {"n": 57, "enough": True, "spearman": 0.42, "spearman_ci_low": 0.21, "spearman_ci_high": 0.6,
            "length_spearman": 0.3}
    assert rating_line(base) == ("How alike people's ratings and the automatic score rank answers here: 0.42 "
                                 "[0.21-0.60] over 57 rated answers (1 would be the same order, 0 unrelated); "
                                 "ranking them by length instead: 0.30.")
    assert "0.12 [-0.10 to 0.35] over 57" in rating_line({**base, "spearman": 0.12, "spearman_ci_low": -0.1,
                                                          "spearman_ci_high": 0.35})
    assert rating_line({**base, "spearman": None, "spearman_ci_low": None, "spearman_ci_high": None}) == (
        "People's ratings and the automatic score cannot be compared here: over the 57 rated answers, one of the "
        "two gives every answer the same value.")
    assert rating_line({**base, "n": 1, "enough": False}).startswith(
        "Not enough ratings yet to compare people's ratings with the automatic score here: 1 rated answer with")
