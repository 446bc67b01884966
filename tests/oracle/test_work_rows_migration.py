"""Upgrading to the job machine (oracle 0006 adds next_attempt_at) keeps every queued job workable."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.oracle import debates

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("oracle", "0005_peer_rating")]


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor


def test_a_debate_queued_before_the_upgrade_is_claimed_after_it():
    old = migrate(BEFORE).loader.project_state(BEFORE).apps.get_model("oracle", "DebateJob")
    queued = old.objects.create(key="live:same-prompt:a:b:helpfulness", criterion="helpfulness", question="Q?",
                                submission_1="A", submission_2="B", judges=[1, 2], seed=7)
    executor = MigrationExecutor(connection)
    migrate(executor.loader.graph.leaf_nodes())
    claimed, = debates.claim(1, lease_s=60)
    assert claimed.pk == queued.pk and claimed.attempts == 1 and claimed.next_attempt_at <= claimed.claimed_until
