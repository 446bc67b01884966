"""A context's own people qualify the oracle's metric: from MIN_HUMAN counted votes between two scored
answers, the votes become a qualification record of the labelled sets' schema, pinned once per set of
votes, and its factor is the weight the context's board shows for the same votes. The indexed tables
stand for the chain's events."""

from __future__ import annotations

import hashlib

import pytest

from apps.annotate import vote_qualification
from apps.annotate.models import VoteQualification
from apps.annotate.site_validity import vote_figures, vote_outcomes
from apps.chain.evidence import default_store
from apps.leaderboard import boards
from lib import metaeval, records
from lib.weighted import MIN_HUMAN, OUTCOME_ORDER
from lib.weighting import check_qualification, parse_qualification, qualification_record
from tests.chat.factories import make_contexts

from .vote_factories import mixed, seed_votes

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    return make_contexts("busy")[0]


def test_a_context_with_enough_votes_pins_a_record_of_them_whose_factor_its_board_shows(busy):
    battles = seed_votes(busy.context_id, mixed(both=20, score_only=16, length_only=2, neither=2), unscored=3)
    own = vote_qualification.own_votes("bertscore-ref", busy.context_id)
    assert own.enough and (own.judged, own.votes) == (40, 43)
    record = parse_qualification(default_store().get(own.qualification.cid))
    # One row per scored vote, the battle id as the pair, grouped by outcome and by battle id within.
    assert sorted(r[0] for r in record["outcomes"]) == sorted(battles[:40])
    assert [(e, b) for _, e, b in record["outcomes"]] == sorted(
        [(e, b) for _, e, b in record["outcomes"]], key=OUTCOME_ORDER.index)
    assert record["outcomes"] == sorted(record["outcomes"], key=lambda r: (OUTCOME_ORDER.index((r[1], r[2])), r[0]))
    assert record["evaluator"] == "bertscore-ref" and record["params"]["context"] == busy.context_id
    digest = hashlib.sha256(records.canonical(record["outcomes"])).hexdigest()
    assert record["sets"] == [{"name": "site votes: busy", "sha256": digest, "pairs": 43, "judged": 40}]
    assert own.qualification.outcomes_sha256 == digest
    assert record["bootstrap"] == {"rounds": 2000, "seed": 0}  # 40 votes: the full rounds
    f = record["figures"]
    assert (f["n"], f["right"], f["length_right"]) == (40, 36, 22) and f["margin_low"] > 0
    assert int(f["factor"]) > 0 and own.qualification.factor == f["factor"]
    # The board's weight for the same votes is the record's factor, to the last of its 18 decimals.
    figures = vote_figures(busy.context_id)
    assert figures["weight_wad"] == f["factor"]
    assert figures["margin_over_length_ci_low"] == round(f["margin_low"] / 40, 4)
    board = boards.build_board(busy.context_id, kept=False)
    assert board.votes["weight_wad"] == f["factor"]
    assert f"weighs {int(f['factor']) / 10**18:.2f} times the mean R of its reference models" in board.weighted_text
    assert "votes between two scored answers" in vote_qualification.reason("bertscore-ref", own)
    assert "is weighed by this context's people: on this context's own 40" in vote_qualification.reason(
        "bertscore-ref", own)


def test_the_same_votes_are_pinned_once_and_a_new_vote_gives_a_new_record(busy, monkeypatch):
    seed_votes(busy.context_id, mixed(both=20, score_only=16, length_only=2, neither=2))
    first = vote_qualification.own_votes("bertscore-ref", busy.context_id).qualification
    built = []
    real = vote_qualification.qualification_record
    monkeypatch.setattr(vote_qualification, "qualification_record", lambda **kw: built.append(kw) or real(**kw))
    again = vote_qualification.own_votes("bertscore-ref", busy.context_id).qualification
    assert again.pk == first.pk and built == []  # nothing bootstrapped or pinned again
    seed_votes(busy.context_id, [(0, 1)])
    moved = vote_qualification.own_votes("bertscore-ref", busy.context_id).qualification
    assert len(built) == 1 and moved.pk != first.pk and moved.cid != first.cid and moved.judged == 41
    assert VoteQualification.objects.count() == 2
    # Another evaluator on the same votes has a record of its own.
    other = vote_qualification.own_votes("geval:judge", busy.context_id).qualification
    assert other.cid != moved.cid and check_qualification(
        parse_qualification(default_store().get(other.cid)))["evaluator"] == "geval:judge"


def test_where_sa_loses_to_length_on_its_own_votes_the_record_earns_nothing(busy):
    seed_votes(busy.context_id, mixed(both=10, score_only=2, length_only=22, neither=6))
    own = vote_qualification.own_votes("bertscore-ref", busy.context_id)
    assert own.enough and own.qualification.factor == "0"
    assert vote_figures(busy.context_id)["weight_wad"] == "0"
    why = vote_qualification.reason("bertscore-ref", own)
    assert why.startswith("bertscore-ref has not shown it beats preferring the longer answer with this context's "
                          "people: on this context's own 40 arena votes between two scored answers it picked the "
                          "voted answer 30.0% of the time, the longer answer 80.0%")


def test_below_the_minimum_nothing_is_pinned_and_the_counts_are_said(busy):
    seed_votes(busy.context_id, [(1, 0)] * (MIN_HUMAN - 1), unscored=5)
    own = vote_qualification.own_votes("bertscore-ref", busy.context_id)
    assert not own.enough and (own.judged, own.votes) == (MIN_HUMAN - 1, MIN_HUMAN + 4)
    assert not VoteQualification.objects.exists()
    assert vote_qualification.not_enough(own) == (
        f"this context has not enough votes of its own yet ({MIN_HUMAN - 1} arena votes between two scored answers, "
        f"{MIN_HUMAN} needed), so the weight comes from the human-labelled sets")


def test_the_per_vote_rows_are_what_the_board_counts(busy):
    seed_votes(busy.context_id, mixed(both=5, score_only=4, length_only=3, neither=2), unscored=2)
    rows, votes = vote_outcomes(busy.context_id)
    figures = vote_figures(busy.context_id)
    assert (len(rows), votes) == (figures["pairs_non_tie"], figures["votes"]) == (14, 16)
    assert [sum(1 for _, e, b in rows if (e, b) == o) for o in OUTCOME_ORDER] == [5, 4, 3, 2]


def test_where_the_votes_are_many_enough_for_fewer_rounds_the_record_says_them_and_the_board_uses_them(
        busy, monkeypatch):
    # The rule's numbers scaled down, so that 40 votes are "many": 60 rounds for them, as for 600,000.
    monkeypatch.setattr(metaeval, "BOOTSTRAP_DRAWS", 40 * 60)
    monkeypatch.setattr(metaeval, "MIN_BOOTSTRAP_ROUNDS", 50)
    assert metaeval.bootstrap_rounds(40) == 60
    seed_votes(busy.context_id, mixed(both=20, score_only=16, length_only=2, neither=2))
    own = vote_qualification.own_votes("bertscore-ref", busy.context_id)
    record = parse_qualification(default_store().get(own.qualification.cid))  # rebuilt from its own rounds
    assert record["bootstrap"] == {"rounds": 60, "seed": 0}
    figures = vote_figures(busy.context_id)
    assert figures["weight_wad"] == record["figures"]["factor"] == own.qualification.factor
    assert figures["margin_over_length_ci_low"] == round(record["figures"]["margin_low"] / 40, 4)
    # A record of the same votes pinned with 2,000 rounds, before the rule, still checks: its own rounds rebuild it.
    older = qualification_record(evaluator="bertscore-ref", params=record["params"], sets=record["sets"],
                                 outcomes=[tuple(r) for r in record["outcomes"]], rounds=2000)
    assert parse_qualification(records.canonical(older))["bootstrap"] == {"rounds": 2000, "seed": 0}
