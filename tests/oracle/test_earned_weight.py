"""The automatic score's weight is earned (LLMCHAIN_AUTO_WEIGHT): under `validated`, wA is the mean R
of the references times the factor the metric's qualification earned against the length rule: 0
on-chain where it has not beaten the rule. `chain audit` and `leaderboard verify` rebuild every wA
from the chain and IPFS alone, and catch one that its records do not give. Real anvil, real replay
models, the real BERTScore metric."""

from __future__ import annotations

import pytest

from apps.chain import indexer
from apps.chain.audit import run_audit
from apps.chain.evidence import default_store
from apps.chain.models import LedgerInteraction
from apps.chain.models import Reputation
from apps.leaderboard.verify import default_reader, rebuild_from_chain
from apps.oracle import jobs
from apps.oracle.models import EvaluationJob
from lib import records
from lib.reputation import WAD

from .conftest import QUESTIONS, chat, drain, evaluate, qualified_as, with_references

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain, pytest.mark.slow]



def test_where_bertscore_has_not_beaten_the_length_rule_wa_is_zero_on_chain_and_audit_and_verify_agree(
        world, metric, settings):
    settings.LLMCHAIN_AUTO_WEIGHT = "validated"
    q = qualified_as("bertscore-ref", right=120, length_right=130)  # worse than preferring the longer answer
    assert q.factor == "0"
    done = evaluate(world, metric, "alpha-7b", QUESTIONS[:2]) + \
        evaluate(world, metric, "beta-13b", QUESTIONS[:1])
    for job in done:
        onchain = LedgerInteraction.objects.get(interaction_id=job.interaction.interaction_id)
        assert onchain.has_reference and onchain.wa == 0 and int(job.sa) > 0
        w = records.parse(default_store().get(job.evidence_cid))["weighting"]
        assert (w["rule"], w["factor"], w["qualification"], w["evaluator"]) == ("validated", "0", q.cid,
                                                                                 "bertscore-ref")
        assert int(w["meanR"]) > 0 and "has not shown it beats preferring the longer answer" in w["reason"]
    context = world["writing"].context_id
    assert set(Reputation.objects.filter(context_id=context).values_list("ra", flat=True)) == {WAD // 2}
    audit = run_audit(world["ledger"])
    assert audit.ok and audit.weights.checked == with_references() == 3 and not audit.weights.issues
    chain = rebuild_from_chain(world["ledger"], default_reader(), style=False)
    assert chain.ok and chain.weights.checked == 3


def test_under_paper_wa_is_the_mean_r_of_the_references_and_audit_agrees(world, metric, settings):
    settings.LLMCHAIN_AUTO_WEIGHT = "paper"
    job, = evaluate(world, metric, "alpha-7b", QUESTIONS[:1])
    assert int(job.wa) == WAD // 2 and job.weighting["rule"] == "paper" and job.weighting["factor"] == str(WAD)
    audit = run_audit(world["ledger"])
    assert audit.ok and audit.weights.checked == with_references()


def test_a_qualified_metric_weighs_by_its_factor_and_a_wa_its_records_do_not_give_is_caught(  # last: it leaves
        # a wA on the module's chain that its records do not give
        world, metric, settings):
    settings.LLMCHAIN_AUTO_WEIGHT = "validated"
    q = qualified_as("bertscore-ref", right=170, length_right=110)
    factor = int(q.factor)
    assert 0 < factor < WAD
    first, = evaluate(world, metric, "alpha-7b", QUESTIONS[:1])
    w = first.weighting
    assert int(first.wa) == int(w["meanR"]) * factor // WAD > 0
    # an oracle that records a wA its evidence does not give
    interaction, = chat(world, "beta-13b", [QUESTIONS[1][1]])
    job = EvaluationJob.objects.get(interaction=interaction)
    jobs.collect_references(job)
    jobs.score_jobs([job], metric)
    EvaluationJob.objects.filter(pk=job.pk).update(wa=str(int(job.wa) + 1))
    job.refresh_from_db()
    jobs.pin_evidence(job, metric)
    jobs.submit(job)
    drain(world["submitter"])
    indexer.index_until_head(world["ledger"])
    audit = run_audit(world["ledger"])
    assert not audit.ok and audit.weights.checked == with_references()
    issue, = audit.weights.issues
    assert issue["interaction"] == interaction.interaction_id and "its evidence and qualification give" in issue["text"]
    chain = rebuild_from_chain(world["ledger"], default_reader(), style=False)
    assert any("its evidence and qualification give" in i.text for i in chain.issues)
