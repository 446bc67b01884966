"""Each answer is scored against the top-k other models of its context, its evidence pinned and
autoEval confirmed on-chain; a job interrupted at any step resumes without repeating work."""

from __future__ import annotations

import itertools

import pytest
from eth_account import Account

from apps.chain import indexer
from apps.chain.deploy import grant_oracle_roles
from apps.chain.evidence import default_store
from apps.chain.keys import oracle_address, oracle_addresses
from apps.chain.models import LedgerInteraction
from apps.chain.models import ChainTransaction, OutboxItem
from apps.chain.node import DEV_KEYS
from apps.oracle import jobs
from apps.oracle.models import EvaluationJob
from apps.oracle.worker import load_metric
from lib import records
from lib.reputation import WAD

from .conftest import MODELS, QUESTIONS, chat, drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain, pytest.mark.slow]


@pytest.fixture(scope="module")
def metric():
    return load_metric()


def run_all(metric):
    while True:
        claimed = jobs.claim(16)
        if not claimed:
            return
        jobs.process(claimed, metric)


def test_an_answer_is_scored_against_the_three_other_models_and_lands_on_chain(replay_world, metric, settings):
    settings.LLMCHAIN_ORACLE_K = 3
    settings.LLMCHAIN_AUTO_WEIGHT = "paper"  # the paper's wA (tests/oracle/test_earned_weight.py: validated)
    interaction, = chat(replay_world, "alpha-7b", [QUESTIONS[0][1]])
    run_all(metric)
    job = EvaluationJob.objects.get(interaction=interaction)
    assert job.status == "submitted"
    assert sorted(r["name"] for r in job.references) == sorted(MODELS[1:])
    assert all(r["text"] in QUESTIONS[0][2] for r in job.references)
    scores = metric.score_pairs([(interaction.answer, r["text"]) for r in job.references])
    assert int(job.sa) == sum(round(s * WAD) for s in scores) // 3
    assert int(job.wa) == WAD // 2  # no reference model has a REP in the context yet
    record = records.parse(default_store().get(job.evidence_cid))
    assert record["answer"]["text"] == interaction.answer and record["hasReference"] is True
    assert record["scores"] == {"sA": job.sa, "wA": job.wa}
    drain(replay_world["submitter"])
    indexer.index_until_head(replay_world["ledger"])
    assert jobs.confirm_onchain() == 1
    job.refresh_from_db()
    assert job.status == "onchain"
    onchain = LedgerInteraction.objects.get(interaction_id=interaction.interaction_id)
    assert (onchain.sa, onchain.wa, onchain.evidence_cid, onchain.has_reference) == (
        int(job.sa), int(job.wa), job.evidence_cid, True)


def test_k_limits_the_references_and_ranks_them_by_reputation(replay_world, metric, settings):
    settings.LLMCHAIN_ORACLE_K = 3
    first = chat(replay_world, "beta-13b", [q for _, q, _ in QUESTIONS])
    run_all(metric)
    drain(replay_world["submitter"])
    indexer.index_until_head(replay_world["ledger"])
    settings.LLMCHAIN_ORACLE_K = 1
    interaction, = chat(replay_world, "alpha-7b", [QUESTIONS[1][1]])
    run_all(metric)
    job = EvaluationJob.objects.get(interaction=interaction)
    assert [r["name"] for r in job.references] == ["beta-13b"]  # the only model with a REP ranks first
    assert len(first) == 3


def test_a_prompt_no_other_model_can_answer_has_no_reference(replay_world, metric):
    interaction, = chat(replay_world, "gamma-3b", ["What is the capital of France?"])
    run_all(metric)
    job = EvaluationJob.objects.get(interaction=interaction)
    assert all(r["text"] is None and "no recorded answer" in r["error"] for r in job.references)
    item = OutboxItem.objects.get(key=f"autoEval:{interaction.interaction_id}")
    assert item.payload["hasReference"] is False and item.payload["sA"] == "0"


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["collect_references", "score_jobs", "pin_evidence", "submit"])
def test_a_job_interrupted_at_any_step_resumes_without_asking_or_queueing_twice(replay_world, metric, monkeypatch,
                                                                             settings, step):
    settings.LLMCHAIN_ORACLE_LEASE_S = 0  # a crashed worker's claim expires at once
    interaction, = chat(replay_world, "delta-30b", [QUESTIONS[2][1]])
    asked = []
    real_ask = jobs._ask

    async def counting_ask(model, messages, timeout):
        asked.append(model.name)
        return await real_ask(model, messages, timeout)

    monkeypatch.setattr(jobs, "_ask", counting_ask)
    real = getattr(jobs, step)

    def crash_after(*args, **kwargs):
        real(*args, **kwargs)
        raise Crash(step)  # the worker dies right after this step's writes

    monkeypatch.setattr(jobs, step, crash_after)
    with pytest.raises(Crash):
        jobs.process(jobs.claim(16), metric)
    monkeypatch.setattr(jobs, step, real)
    run_all(metric)
    job = EvaluationJob.objects.get(interaction=interaction)
    assert job.status == "submitted"
    assert sorted(asked) == sorted(MODELS[:3])  # each reference model was asked exactly once
    assert OutboxItem.objects.filter(function="autoEval", key=f"autoEval:{interaction.interaction_id}").count() == 1
    assert job.attempts == (1 if step == "submit" else 2)  # taken again only when unfinished


def test_with_two_oracle_keys_each_answer_goes_out_through_the_key_its_id_picks(replay_world, metric, settings,
                                                                                admin):
    """LLMCHAIN_ORACLE_KEY with two keys: the admin grants ORACLE_ROLE to the one that lacks it, and an
    answer's autoEval is sent by the key its interaction id picks (its number modulo two)."""
    first = Account.from_key(DEV_KEYS[1])
    second = next(a for a in iter(Account.create, None) if int(a.address, 16) % 2 != int(first.address, 16) % 2)
    settings.LLMCHAIN_ORACLE_KEY = f"{DEV_KEYS[1]}, 0x{bytes(second.key).hex()}"
    ledger = replay_world["ledger"]
    assert oracle_addresses() == (first.address, second.address) and oracle_address() == first.address
    assert grant_oracle_roles(ledger.client, ledger.deployment, admin, oracle_addresses()) == [second.address]
    assert grant_oracle_roles(ledger.client, ledger.deployment, admin, oracle_addresses()) == [], "held now"
    # Answers until both ids' parities are among them (ids are random: a few answers).
    asked = itertools.islice(itertools.cycle([(m, q) for m in MODELS for _, q, _ in QUESTIONS]), 40)
    interactions = []
    for model, prompt in asked:
        interactions += chat(replay_world, model, [prompt])
        if len({int(i.interaction_id, 16) % 2 for i in interactions}) == 2:
            break
    run_all(metric)
    senders = {}
    for i in interactions:
        item = OutboxItem.objects.get(key=f"autoEval:{i.interaction_id}")
        assert item.sender_address == [first, second][int(i.interaction_id, 16) % 2].address
        senders[item.sender_address] = senders.get(item.sender_address, 0) + 1
    assert set(senders) == {first.address, second.address}, senders
    drain(replay_world["submitter"])
    indexer.index_until_head(ledger)
    assert jobs.confirm_onchain() == len(interactions)
    for oracle in (first.address, second.address):
        assert ChainTransaction.objects.filter(sender__address=oracle, status="confirmed").exists(), oracle
    assert LedgerInteraction.objects.filter(interaction_id__in=[i.interaction_id for i in interactions]).count() == len(
        interactions)
