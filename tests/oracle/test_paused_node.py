"""With the chain node paused (SIGSTOP: a stalled node or network looks like this), every page and form
answers within a second and the pages say at the top that the chain is not answering; once the node
resumes, the rating given meanwhile reaches the chain, exactly once."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.test import Client
from django.urls import reverse

from apps.chain import indexer
from apps.chain.indexer import fetch_all
from apps.chain.models import OutboxItem
from apps.chat import arena
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.ratings import queue_waiting_ratings
from lib.ids import hex32
from tests.chain.conftest import drain
from tests.chat.test_ratings import GOOD, auto_eval_queued
from tests.personas import PASSWORD

from .conftest import QUESTIONS, chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain]
LIMIT_S = 1.0


def timed(call, *args, **kwargs):
    started = time.monotonic()
    response = call(*args, **kwargs)
    return response, time.monotonic() - started


def test_with_the_node_paused_every_page_answers_within_a_second_and_the_rating_lands_once_after(
        replay_world, ledger_node, monkeypatch):
    w = replay_world
    ledger, submitter, alice = w["ledger"], w["submitter"], w["alice"]
    rated, = chat(w, "alpha-7b", [QUESTIONS[0][1]])
    auto_eval_queued(rated)
    drain(submitter)
    indexer.index_until_head(ledger)
    # A battle whose two answers are in, ready for a vote.
    models = list(w["models"].values())[:2]
    monkeypatch.setattr(arena, "candidates", lambda user, context: models)
    battle = arena.start_battle(alice, w["writing"])
    for side in (battle.conversation_a, battle.conversation_b):
        finish_interaction(begin_interaction(alice, side, QUESTIONS[1][1]), "An answer.")
    other = start_conversation(alice, models[1], w["writing"])
    client = Client()
    assert client.login(username=alice.username, password=PASSWORD)
    pages = {"conversation": reverse("conversation", args=[rated.conversation_id]),
             "board": f"/?context={w['writing'].context_id}", "global board": "/",
             "verify": f"/verify/?context={w['writing'].context_id}", "arena": reverse("arena"),
             "another conversation": reverse("conversation", args=[other.pk])}
    for path in pages.values():
        client.get(path)  # what a process reads once, read while the node answers

    os.kill(ledger_node.proc.pid, signal.SIGSTOP)
    try:
        took = {}
        for name, path in pages.items():
            response, took[name] = timed(client.get, path)
            assert response.status_code in (200, 503), (name, response.status_code)
        response, took["rating"] = timed(client.post, reverse("rating", args=[rated.pk]), GOOD,
                                         HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and "Your rating" in response.content.decode()
        response, took["vote"] = timed(client.post, reverse("arena-vote", args=[battle.pk]), {"outcome": "a"},
                                       HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and "Your vote" in response.content.decode()
        print("with the node paused (s):", {name: round(s, 3) for name, s in took.items()})
        slow = {name: round(s, 2) for name, s in took.items() if s >= LIMIT_S}
        assert not slow, f"waited on the paused node: {slow}"

        # Within a probe's timeout and its refresh, every page says it at the top, each still at once.
        deadline = time.monotonic() + 15
        while True:
            page, s = timed(client.get, pages["another conversation"])
            assert s < LIMIT_S, s
            html = page.content.decode()
            if "chain-banner" in html:
                break
            assert time.monotonic() < deadline, "the pages never said the chain is not answering"
            time.sleep(0.5)
        assert html.index("chain-banner") < html.index("<h1>"), "said at the top"
        assert "saved here and sent when it is back" in html
        status, s = timed(client.get, reverse("chain-status"))
        assert s < LIMIT_S and "not answering" in status.content.decode()
    finally:
        os.kill(ledger_node.proc.pid, signal.SIGCONT)

    # The worker's passes once the node is back: the rating goes out, once.
    assert queue_waiting_ratings() == 1 and queue_waiting_ratings() == 0
    drain(submitter)
    indexer.index_until_head(ledger)
    assert OutboxItem.objects.filter(function="humEval").count() == 1
    landed = [e for e in fetch_all(ledger, ledger.deployment.deployBlock, ledger.client.block_number())
              if e["event"] == "HumanEvaluated" and hex32(e["args"]["interactionId"]) == rated.interaction_id]
    assert len(landed) == 1
    deadline = time.monotonic() + 15
    while "chain-banner" in client.get(pages["another conversation"]).content.decode():
        assert time.monotonic() < deadline, "the pages still say the chain is not answering"
        time.sleep(0.5)
