"""Killing the oracle worker mid-run and starting it again finishes every job exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apps.chain.models import LedgerInteraction
from apps.chain.models import OutboxItem
from apps.oracle.models import EvaluationJob

from .conftest import QUESTIONS, chat, database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def start(args, env, log):
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=REPO, env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_until(condition, timeout, what, logs=()):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s; logs:\n" + "\n".join(
                p.read_text(errors="replace")[-3000:] for p in logs if p.exists()))
        time.sleep(0.2)


def test_a_killed_worker_loses_nothing_and_repeats_nothing(replay_world, ledger_node, settings, tmp_path):
    env = {**os.environ, "DATABASE_URL": database_url(), "LLMCHAIN_RPC_URL": ledger_node.url,
           "LLMCHAIN_DEPLOYMENT": str(ledger_node.deployment_file), "LLMCHAIN_ORACLE_KEY": settings.LLMCHAIN_ORACLE_KEY,
           "LLMCHAIN_IPFS_DIR": str(settings.LLMCHAIN_IPFS_DIR), "LLMCHAIN_ORACLE_LEASE_S": "2",
           "LLMCHAIN_ORACLE_BATCH": "2", "PYTHONUNBUFFERED": "1"}
    interactions = []
    for name in ("alpha-7b", "beta-13b", "gamma-3b"):
        interactions += chat(replay_world, name, [q for _, q, _ in QUESTIONS])
    logs = [tmp_path / "oracle.log", tmp_path / "chain.log"]
    chain = start(["chain", "work"], env, logs[1])
    oracle = start(["oracle", "work", "--no-health"], env, logs[0])
    try:
        # Kill the worker as soon as it has done part of the work, and start it again.
        wait_until(lambda: EvaluationJob.objects.exclude(status="queued").exists(), 120, "a job started", logs)
        os.killpg(oracle.pid, signal.SIGKILL)
        oracle.wait()
        done_at_kill = EvaluationJob.objects.filter(status__in=("submitted", "onchain")).count()
        assert done_at_kill < len(interactions)  # the kill really happened mid-run
        oracle = start(["oracle", "work", "--no-health"], env, logs[0])
        wait_until(lambda: EvaluationJob.objects.filter(status="onchain").count() == len(interactions), 180,
                   "every job on-chain", logs)
    finally:
        for proc in (oracle, chain):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
    for interaction in interactions:
        key = f"autoEval:{interaction.interaction_id}"
        assert OutboxItem.objects.filter(key=key).count() == 1
        job = EvaluationJob.objects.get(interaction=interaction)
        assert LedgerInteraction.objects.filter(interaction_id=interaction.interaction_id).count() == 1
        assert LedgerInteraction.objects.get(interaction_id=interaction.interaction_id).evidence_cid == job.evidence_cid
