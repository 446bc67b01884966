"""A queued contract call wakes the submitter's background worker (`runworker chain-submit`) once it
is committed, through the Redis channel layer; the outbox row stays the truth."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import transaction

from apps.chain import outbox
from apps.chain.keys import new_key
from apps.chain.models import OutboxItem
from apps.chain.node import DEV_KEYS
from apps.chain.work import WAKE
from tests.wake import REDIS_URL, next_message, redis_layer, redis_layer_settings  # noqa: F401  (fixture)

from .conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)
REPO = Path(__file__).resolve().parents[2]


def register(admin) -> OutboxItem:
    return outbox.enqueue("register", admin.address, {"account": new_key("someone").address, "role": "user"})


def test_a_queued_call_wakes_the_submitter_once_it_is_committed_and_not_before(redis_layer, admin):
    with transaction.atomic():
        register(admin)
        assert next_message(redis_layer, outbox.CHANNEL, timeout=0.5) is None  # not before the commit
    assert next_message(redis_layer, outbox.CHANNEL) == WAKE


def test_a_call_queued_again_or_rolled_back_wakes_nobody(redis_layer, admin):
    item = register(admin)
    assert next_message(redis_layer, outbox.CHANNEL) == WAKE
    outbox.enqueue(item.function, item.sender_address, item.payload)  # the same call: the same row
    with pytest.raises(RuntimeError), transaction.atomic():
        register(admin)
        raise RuntimeError("the view failed after queuing")
    assert next_message(redis_layer, outbox.CHANNEL, timeout=0.5) is None


def test_with_the_in_memory_layer_nothing_is_sent(settings, admin):
    from channels.layers import get_channel_layer

    settings.REDIS_URL = ""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    register(admin)
    assert next_message(get_channel_layer(), outbox.CHANNEL, timeout=0.2) is None


@pytest.mark.chain
@pytest.mark.slow
def test_the_worker_woken_after_a_long_idle_sends_the_call_and_confirms_it(ledger_node, ledger, admin, settings,
                                                                          tmp_path):
    redis_layer_settings(settings)  # the site's own configuration: the worker process reads the same
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": REDIS_URL, "LLMCHAIN_RPC_URL": ledger_node.url,
           "LLMCHAIN_DEPLOYMENT": str(ledger_node.deployment_file), "LLMCHAIN_ORACLE_KEY": DEV_KEYS[1]}
    log = tmp_path / "runworker.log"
    worker = subprocess.Popen([sys.executable, "manage.py", "runworker", outbox.CHANNEL], cwd=REPO, env=env,
                              stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(7)  # idle longer than one blocking receive from Redis (5 s): the worker must stay up
        assert worker.poll() is None, log.read_text()
        item = register(admin)  # nothing else here runs a submitter
        deadline = time.monotonic() + 60
        while OutboxItem.objects.get(pk=item.pk).status != OutboxItem.Status.CONFIRMED:
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"not confirmed within 60 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)
