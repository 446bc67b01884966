"""The weighted score (lib/weighted.py): people's signals are the reference, the automatic score counts
only the weight it earned against people's votes here, a model needs a signal from people, ties follow
the board's band rule; and the board serves it (page, JSON, CSV) with the figures behind the weight."""

from __future__ import annotations

import csv
import io
import json
import secrets

import pytest

from apps.chain.models import ArenaBattle, Context, LedgerInteraction
from apps.leaderboard import boards, entries
from apps.leaderboard.models import ArenaEntry, BoardEntry
from lib import weighted
from lib.metaeval import validity_factor_wad
from lib.weighted import MIN_HUMAN, Signal, VoteCounts

WAD = 10**18
CTX = "0x" + "ab" * 32


def row(ra=0.5, rh=0.5, r=0.5, band=None, arena=None):
    return {"ra": int(ra * WAD), "rh": int(rh * WAD), "r": int(r * WAD), "band_lo": band[0] if band else None,
            "band_hi": band[1] if band else None, "arena_elo": arena[0] if arena else None,
            "arena_ci_low": arena[1] if arena else None, "arena_ci_high": arena[2] if arena else None}


def test_an_automatic_score_that_has_not_beaten_the_length_rule_weighs_nothing():
    # 40 votes: the score picks the voted answer 24 times, the longer answer 28 times.
    counts = VoteCounts(both=20, score_only=4, length_only=8, neither=8, votes=40)
    v = weighted.vote_validity(counts)
    assert (v["pairs_non_tie"], v["accuracy_non_tie"], v["length_accuracy_non_tie"], v["enough"]) == (40, 0.6, 0.7,
                                                                                                       True)
    assert v["margin_over_length"] == -0.1 and v["margin_over_length_ci_low"] < 0 and v["weight"] == 0
    # Then Ra adds nothing: the weighted score is people's alone.
    alone = weighted.weigh([row(ra=0.9, rh=0.4, r=0.5, band=(0.45, 0.55))], v["weight"])[0]
    assert (alone.score, alone.low, alone.high) == (0.4, 0.35, 0.45)


def test_a_score_that_beats_the_length_rule_earns_the_share_of_its_errors_it_is_shown_to_fix():
    counts = VoteCounts(both=50, score_only=30, length_only=5, neither=15, votes=110, unscored=10)
    v = weighted.vote_validity(counts)
    assert (v["votes"], v["votes_without_scores"], v["accuracy_non_tie"], v["length_accuracy_non_tie"]) == (
        110, 10, 0.8, 0.55)
    low = round(v["margin_over_length_ci_low"] * 100)  # a count out of the 100 votes
    assert 0 < low < 25 and int(v["weight_wad"]) == validity_factor_wad(low, 100, 55)
    assert v["weight"] == pytest.approx(low / 45, abs=1e-6)
    assert v["accuracy_ci_low"] < 0.8 < v["accuracy_ci_high"]
    assert weighted.vote_validity(counts) == v  # seeded: anyone gets the same interval


def test_below_the_minimum_of_votes_nothing_is_said_and_nothing_weighs():
    v = weighted.vote_validity(VoteCounts(both=MIN_HUMAN - 1, votes=MIN_HUMAN - 1))
    assert not v["enough"] and v["accuracy_non_tie"] is None and v["weight"] == 0
    assert v["pairs_non_tie"] == MIN_HUMAN - 1


def test_the_weighted_mean_of_ratings_votes_and_the_earned_automatic_part():
    # Rh 0.6 with the R band [0.45, 0.55] around R 0.5 moved to it; arena 1000 [900, 1100]; Ra 0.9 at 0.5.
    found = weighted.signals(**row(ra=0.9, rh=0.6, r=0.5, band=(0.45, 0.55), arena=(1000.0, 900.0, 1100.0)),
                             ra_weight=0.5)
    share_low, share_high = 1 / (1 + 10 ** 0.25), 1 / (1 + 10 ** -0.25)
    assert found == [Signal(0.6, 0.55, 0.65, 1.0), Signal(0.5, share_low, share_high, 1.0),
                     Signal(0.9, 0.9, 0.9, 0.5)]
    score, low, high = weighted.combine(found)
    assert score == pytest.approx((0.6 + 0.5 + 0.5 * 0.9) / 2.5, abs=1e-6)
    assert low == pytest.approx((0.55 + share_low + 0.45) / 2.5, abs=1e-6)
    assert high == pytest.approx((0.65 + share_high + 0.45) / 2.5, abs=1e-6)
    assert weighted.arena_share(1400.0) == pytest.approx(10 / 11)


def test_without_a_signal_from_people_there_is_no_weighted_score_however_good_the_automatic_one():
    assert weighted.signals(**row(ra=0.99), ra_weight=1.0) == []
    assert weighted.weigh([row(ra=0.99)], 1.0)[0] == weighted.Weighted()


def test_ranks_follow_the_band_rule_models_whose_ranges_overlap_share_one():
    rows = [row(rh=0.8, r=0.8, band=(0.75, 0.85)), row(rh=0.78, r=0.78, band=(0.7, 0.86)),
            row(rh=0.5, r=0.5, band=(0.45, 0.55)), row(ra=0.9)]
    found = weighted.weigh(rows, 0.0)
    assert [(w.rank, w.tied) for w in found] == [(1, True), (1, True), (3, False), (None, False)]


# --- the board ------------------------------------------------------------------------------------------

def entry(k: int, *, ra: float, rh: float, r: float, band=None):
    BoardEntry.objects.create(model_id="0x" + f"{k:02x}" * 32, context_id=CTX, name=f"model-{k}",
                              ra=int(ra * WAD), rh=int(rh * WAD), r=int(r * WAD), n_auto=9, n_human=3 if band else 0,
                              block_number=5, band_lo=band[0] if band else None, band_hi=band[1] if band else None,
                              band_n=3 if band else 0)


@pytest.fixture
def math_board():
    """The `math` context, its two models, and a way to add an answer of one of them (chat and chain)."""
    from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
    from apps.chat.registry import ModelFields, register_model
    from tests.personas import developer, user

    context = Context.objects.create(context_id=CTX, name="math", block_number=1)
    model = register_model(developer(), ModelFields(name="w-7b", provider="t", endpoint_url="http://w.test/v1",
                                                    endpoint_model="w"))
    conversation = start_conversation(user(), model, context)

    def answer(text: str, sa: float, model_id: str) -> str:
        i = begin_interaction(conversation.user, conversation, "Q?")
        finish_interaction(i, text)
        i.refresh_from_db()
        LedgerInteraction.objects.create(interaction_id=i.interaction_id, model_id=model_id, context_id=CTX,
                                         user="0x0", has_reference=True, sa=int(sa * WAD), wa=0, evidence_cid="bafy",
                                         auto_tx="0x", auto_block=1, answer_chars=len(text))
        return i.interaction_id

    return answer


@pytest.mark.django_db
def test_a_board_without_people_says_so_and_sorting_by_the_weighted_score_falls_back_to_the_automatic_one(
        client, math_board):
    entry(1, ra=0.3, rh=0.5, r=0.5)
    entry(2, ra=0.8, rh=0.5, r=0.5)
    entries.bump()
    board = boards.build_board(CTX, "weighted")
    assert [r.name for r in board.rows] == ["model-2", "model-1"] and all(r.weighted is None for r in board.rows)
    assert "No model has ratings or votes from people here yet" in board.weighted_text
    assert "falls back to the automatic score" in board.weighted_text
    data = json.loads(client.get(f"/api/boards/{CTX}?sort=weighted").content)
    ra = data["validity"]["columns"]["ra"]
    assert (ra["status"], ra["accuracy_non_tie"], ra["weight"], ra["pairs_non_tie"]) == (
        "not_enough_human_signal", None, 0.0, 0)
    assert data["validity"]["columns"]["rh"]["status"] == "reference"
    assert data["validity"]["text"].startswith("Not enough human signal yet to check the automatic score against people here: 0")
    assert [r["weighted"] for r in data["provisional"]] == [None, None]
    page = client.get(f"/?context={CTX}&sort=weighted").content.decode()
    assert "falls back to the automatic score" in page, page[page.find("<main"):][:3000]
    # Beside each column, one plain line: what it is checked against here and what it counts for.
    said = dict((c["column"], c["line"]) for c in data["validity"]["column_lines"])
    assert list(said) == ["R", "Weighted", "Arena Elo", "Ratings and Rₕ", "Auto scores and Rₐ",
                          "Style-controlled Elo", "Debate Elo", "Peer Elo"]
    assert said["Auto scores and Rₐ"].startswith("the automatic score: too few of people's votes here")
    assert "not checked against people here" in said["Debate Elo"]
    assert 'id="board-columns"' in page and "<dt>Peer Elo</dt>" in page
    assert 'data-sort="weighted"' in page


@pytest.mark.django_db
def test_the_board_weighs_ra_by_its_agreement_with_the_votes_here_in_json_csv_and_sort(client, math_board):
    m1, m2 = "0x" + "01" * 32, "0x" + "02" * 32
    entry(1, ra=0.9, rh=0.5, r=0.5, band=(0.45, 0.55))
    entry(2, ra=0.1, rh=0.55, r=0.55, band=(0.50, 0.60))
    ArenaEntry.objects.create(model_id=m1, context_id=CTX, elo=1000.0, ci_low=990.0, ci_high=1010.0, rank=1,
                              battles=40, wins=20, ties=0, losses=20, win_rate=0.5)
    # 40 votes: the voted answer always has the higher Sa; it is the longer one half the time.
    for k in range(40):
        long_first = k % 2 == 0
        a = math_board("a long answer" if long_first else "short", 0.9, m1)
        b = math_board("short" if long_first else "a long answer", 0.2, m2)
        ArenaBattle.objects.create(battle_id="0x" + secrets.token_hex(32), context_id=CTX, model_a=m1, model_b=m2,
                                   interaction_a=a, interaction_b=b, user="0x0", voided=False, block_number=1,
                                   tx="0x", outcome=1, counted=True)
    entries.bump()
    data = json.loads(client.get(f"/api/boards/{CTX}?sort=weighted").content)
    ra = data["validity"]["columns"]["ra"]
    assert (ra["status"], ra["accuracy_non_tie"], ra["length_accuracy_non_tie"], ra["pairs_non_tie"]) == (
        "measured", 1.0, 0.5, 40)
    assert ra["weight"] > 0.5
    assert data["validity"]["text"].startswith("The automatic score agrees with people's votes here 100% [")
    rows = {r["model_id"]: r for r in data["ranked"]}
    w = ra["weight"]
    assert rows[m1]["weighted"] == pytest.approx((0.5 + 0.5 + w * 0.9) / (2 + w), abs=1e-6)
    assert rows[m2]["weighted"] == pytest.approx((0.55 + w * 0.1) / (1 + w), abs=1e-6)
    assert [r["model_id"] for r in data["ranked"]] == [m1, m2]  # by the weighted score: Ra lifts model 1
    assert "the automatic score counts" in data["validity"]["weighted_text"]
    auto = next(c["line"] for c in data["validity"]["column_lines"] if c["column"] == "Auto scores and Rₐ")
    assert auto == (f"the automatic score, checked against 40 of people's votes here (the line above): in the "
                    f"weighted score it weighs {w:.2f} where each of people's signals weighs 1.")
    table = list(csv.DictReader(io.StringIO(client.get(f"/api/boards/{CTX}.csv?sort=weighted").content.decode())))
    assert float(table[0]["weighted"]) == pytest.approx(rows[m1]["weighted"], abs=1e-6)
    assert table[0]["weighted_rank"] == str(rows[m1]["weighted_rank"])
