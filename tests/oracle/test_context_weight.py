"""The automatic score's weight comes from the context's own people once it has enough of them: from 30
counted arena votes between two scored answers, wA is the mean R of the references times the factor
those votes give (a qualification record of the labelled sets' schema, pinned), whatever the labelled
sets gave; below, the labelled sets' factor as before. `chain audit` rebuilds every wA from the records,
and the context's board shows the same weight. Real anvil, real replay models, the real BERTScore metric;
the votes are indexed rows (a context with 30 votes on-chain would need 60 answers evaluated first)."""

from __future__ import annotations

import pytest

from apps.annotate import vote_qualification
from apps.annotate.models import VoteQualification
from apps.chain.audit import run_audit
from apps.chain.evidence import default_store
from apps.chain.models import LedgerInteraction, Reputation
from apps.leaderboard import boards
from apps.oracle import weights
from lib import records
from lib.reputation import WAD
from lib.weighted import MIN_HUMAN
from lib.weighting import parse_qualification
from tests.annotate.vote_factories import mixed, seed_votes

from .conftest import QUESTIONS, evaluate, qualified_as, with_references

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain, pytest.mark.slow]


@pytest.fixture
def world(world, settings):
    """The oracle tests' replay world (tests/oracle/conftest.py) under `validated`, whatever the
    deployment's default."""
    settings.LLMCHAIN_AUTO_WEIGHT = "validated"
    return world


def onchain(job) -> LedgerInteraction:
    return LedgerInteraction.objects.get(interaction_id=job.interaction.interaction_id)


def weighting_of(job) -> dict:
    return records.parse(default_store().get(job.evidence_cid))["weighting"]


def audited_without_weight_issues(world) -> None:
    audit = run_audit(world["ledger"])
    assert audit.ok and not audit.weights.issues and audit.weights.unreadable == 0
    assert audit.weights.checked == with_references() > 0


def test_where_sa_loses_to_length_on_the_context_s_own_votes_wa_is_zero_though_the_labelled_sets_earned_more(
        world, metric):
    labelled = qualified_as("bertscore-ref", right=170, length_right=110)
    assert int(labelled.factor) > 0  # the labelled sets alone would have weighed it
    context = world["writing"].context_id
    seed_votes(context, mixed(both=8, score_only=4, length_only=22, neither=6))  # Sa 12 of 40, length 30
    job, = evaluate(world, metric, "alpha-7b", QUESTIONS[:1])
    own = VoteQualification.objects.get(context_id=context)
    assert own.factor == "0" and own.judged == 40
    assert onchain(job).has_reference and onchain(job).wa == 0 and int(job.sa) > 0
    w = weighting_of(job)
    assert (w["factor"], w["qualification"], w["evaluator"]) == ("0", own.cid, "bertscore-ref")
    assert int(w["meanR"]) > 0 and own.cid != labelled.cid
    assert w["reason"].startswith("bertscore-ref has not shown it beats preferring the longer answer with this "
                                  "context's people: on this context's own 40 arena votes")
    assert set(Reputation.objects.filter(context_id=context).values_list("ra", flat=True)) == {WAD // 2}
    audited_without_weight_issues(world)
    board = boards.build_board(context, kept=False)
    assert board.votes["weight_wad"] == "0" and "weighs nothing either" in board.weighted_text


def test_below_thirty_votes_of_its_own_a_context_weighs_by_the_labelled_sets(world, metric):
    labelled = qualified_as("bertscore-ref", right=170, length_right=110)
    context = world["writing"].context_id
    seed_votes(context, [(1, 0)] * (MIN_HUMAN - 1), unscored=4)  # Sa right on every one, but 29 are too few
    job, = evaluate(world, metric, "beta-13b", QUESTIONS[1:2])
    assert not VoteQualification.objects.exists()
    w = weighting_of(job)
    assert (w["factor"], w["qualification"]) == (labelled.factor, labelled.cid)
    assert onchain(job).wa == int(w["meanR"]) * int(labelled.factor) // WAD > 0
    assert w["reason"].startswith("bertscore-ref beat preferring the longer answer on ")
    assert w["reason"].endswith(f"; this context has not enough votes of its own yet ({MIN_HUMAN - 1} arena votes "
                                f"between two scored answers, {MIN_HUMAN} needed), so the weight comes from the "
                                "human-labelled sets")
    audited_without_weight_issues(world)
    board = boards.build_board(context, kept=False)
    assert not board.votes["enough"] and "weighs in R what its metric earned on human-labelled pairs" in board.weighted_text


def test_where_the_context_s_votes_show_sa_beats_length_they_give_the_weight_audit_and_the_board_agree(
        world, metric, monkeypatch, settings):
    labelled = qualified_as("bertscore-ref", right=120, length_right=130)
    assert labelled.factor == "0"  # the labelled sets alone would have weighed nothing
    context = world["writing"].context_id
    seed_votes(context, mixed(both=18, score_only=18, length_only=2, neither=2))  # Sa 36 of 40, length 20
    reads, built = [], []
    real_outcomes, real_record = vote_qualification.vote_outcomes, vote_qualification.qualification_record
    monkeypatch.setattr(vote_qualification, "vote_outcomes", lambda c: reads.append(c) or real_outcomes(c))
    monkeypatch.setattr(vote_qualification, "qualification_record", lambda **kw: built.append(kw) or real_record(**kw))
    done = evaluate(world, metric, "alpha-7b", QUESTIONS[:2])  # one batch, two jobs in the context
    assert (reads, len(built)) == ([context], 1)  # the votes read once for the batch, bootstrapped once
    own = VoteQualification.objects.get(context_id=context)
    factor = int(own.factor)
    assert 0 < factor < WAD and own.judged == 40
    record = parse_qualification(default_store().get(own.cid))  # pinned, and its figures what its outcomes give
    assert record["sets"][0]["name"] == "site votes: writing" and len(record["outcomes"]) == 40
    for job in done:
        w = weighting_of(job)
        assert (w["rule"], w["factor"], w["qualification"], w["evaluator"]) == ("validated", own.factor, own.cid,
                                                                                "bertscore-ref")
        assert onchain(job).wa == int(w["meanR"]) * factor // WAD > 0
        assert w["reason"].startswith("bertscore-ref is weighed by this context's people: on this context's own 40 "
                                      "arena votes between two scored answers it picked the voted answer 90.0% of "
                                      "the time, the longer answer 50.0% (margin 40.0%, lower end ")
    audited_without_weight_issues(world)
    # The board of the context shows, for the same votes, the factor the evidence carries.
    board = boards.build_board(context, kept=False)
    assert board.votes["weight_wad"] == own.factor == weighting_of(done[0])["factor"]
    assert f"a new automatic score here weighs {factor / WAD:.2f} times the mean R" in board.weighted_text
    # The next batch, the votes unchanged: the record kept is used, nothing is bootstrapped or pinned again.
    later, = evaluate(world, metric, "gamma-3b", QUESTIONS[2:])
    assert len(built) == 1 and weighting_of(later)["qualification"] == own.cid
    assert VoteQualification.objects.count() == 1
    # Under `paper` the votes change nothing.
    settings.LLMCHAIN_AUTO_WEIGHT = "paper"
    assert weights.earned(metric, context)[:2] == (WAD, None)
