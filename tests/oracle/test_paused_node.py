"""With the chain node paused for a full minute (SIGSTOP: a stalled node or network looks like this),
no page or form calls the node or the IPFS node while it is served (only background threads do), and
each answers at once (within a second on a quiet machine; the test allows PAGE_LIMIT_S, below every
timeout a page could wait out, so that a loaded machine's slow render is not taken for a wait), both
at the start of the pause and after 55 s of it,
once every timeout of the site's clients has run out (a background read of a stalled node then fails
where it was only slow before), and the pages say at the top that the chain is not answering; verify,
whose check needs the node, says it is waiting for it or cannot read it, never a verdict. Once the
node resumes, each rating given meanwhile reaches the chain, exactly once, and verify checks again."""

from __future__ import annotations

import inspect
import os
import signal
import threading
import time

import pytest
from django.test import Client
from django.urls import reverse

from apps.chain import indexer
from apps.chain.client import ChainClient
from apps.chain.ipfs import KuboClient
from apps.chain.indexer import cursor_name, fetch_all
from apps.chain.models import IndexerCursor, OutboxItem
from apps.chat import arena
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.ratings import queue_waiting_ratings
from apps.leaderboard.views import verify as verify_view
from lib.ids import hex32
from tests.chain.conftest import drain
from tests.chat.test_ratings import GOOD, auto_eval_queued
from tests.personas import PASSWORD

from .conftest import QUESTIONS, chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chain]
# What the test allows a page under the suite's load. Waiting on the paused node would cost at least a
# client's timeout: the probe's 1 s is caught by the watch on calls below, every other (the IPFS
# node's, verify's, a ChainClient's) is 5 s or more; the probe's first wait (0.3 s) and verify's
# (0.6 s) are bounded joins, by design.
PAGE_LIMIT_S = 3.0
PAUSE_S = 60
# The second round of pages: past the longest timeout a client of the node has (a ChainClient's
# default; the verify check's RPC_TIMEOUT_S and the probe's are shorter), so every read the pages
# started in the background has failed by then, not just hung.
LATE_S = 55
VISIT_EVERY_S = 5  # between the two rounds, a few pages now and then, as visitors keep coming


_serving = threading.Event()
CALLS_WHILE_SERVING: list[str] = []  # the node calls made by the thread that serves a page


def watch_node_calls(monkeypatch) -> None:
    """Every call to the chain node or the IPFS node made by the test's own thread while it is served
    a page (Django's test client runs the view in the calling thread) is noted in CALLS_WHILE_SERVING."""
    for cls in (ChainClient, KuboClient):
        original = cls._post

        def noted(self, *args, _original=original, _name=cls.__name__, **kwargs):
            if _serving.is_set() and threading.current_thread() is threading.main_thread():
                CALLS_WHILE_SERVING.append(f"{_name}: {args[0] if args else kwargs}"[:200])
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(cls, "_post", noted)


def timed(call, *args, **kwargs):
    started = time.monotonic()
    _serving.set()
    try:
        response = call(*args, **kwargs)
    finally:
        _serving.clear()
    return response, time.monotonic() - started


def ready_battle(alice, models, writing):
    """A battle whose two answers are in, ready for a vote."""
    battle = arena.start_battle(alice, writing)
    for side in (battle.conversation_a, battle.conversation_b):
        finish_interaction(begin_interaction(alice, side, QUESTIONS[1][1]), "An answer.")
    return battle


def round_of(client, pages: dict[str, str], rated, battle) -> tuple[dict[str, float], str, str]:
    """Every page, a rating of `rated` and a vote on `battle`: the seconds each took to answer, the
    conversation page, and what verify said."""
    took, answers = {}, {}
    for name, path in pages.items():
        answers[name], took[name] = timed(client.get, path)
        assert answers[name].status_code in (200, 503), (name, answers[name].status_code)
    response, took["rating"] = timed(client.post, reverse("rating", args=[rated.pk]), GOOD, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "Your rating" in response.content.decode()
    response, took["vote"] = timed(client.post, reverse("arena-vote", args=[battle.pk]), {"outcome": "a"},
                                   HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "Your vote" in response.content.decode()
    response, took["chain status"] = timed(client.get, reverse("chain-status"))
    assert response.status_code == 200
    return took, answers["conversation"].content.decode(), verify_says(answers["verify"])


def verify_says(response) -> str:
    """What /verify/ told the visitor: its verdict, that it is checking (and whether it says the chain
    is not answering), or that the chain cannot be read."""
    html = response.content.decode()
    if response.status_code == 503:
        assert "The chain cannot be read" in html
        return "cannot read the chain"
    if 'id="checking"' in html:
        return "checking, the chain not answering" if "the chain is not answering right now" in html else "checking"
    assert 'id="verdict"' in html, html[:500]
    return "verdict"


def indexed_block(ledger) -> int:
    return IndexerCursor.objects.get(name=cursor_name(ledger)).last_block


def rounded(took: dict[str, float]) -> dict[str, float]:
    return {name: round(s, 3) for name, s in took.items()}


def slow(took: dict[str, float]) -> dict[str, float]:
    """The answers that took longer than a page may (PAGE_LIMIT_S), or that called a node."""
    assert not CALLS_WHILE_SERVING, f"a page called the node while it was served: {CALLS_WHILE_SERVING}"
    return {name: s for name, s in rounded(took).items() if s >= PAGE_LIMIT_S}


def test_with_the_node_paused_a_minute_every_page_answers_within_a_second_and_each_rating_lands_once_after(
        replay_world, ledger_node, monkeypatch):
    w = replay_world
    watch_node_calls(monkeypatch)
    CALLS_WHILE_SERVING.clear()
    ledger, submitter, alice = w["ledger"], w["submitter"], w["alice"]
    # Two answers, one rated at the start of the pause and one at its end.
    early, late = chat(w, "alpha-7b", [QUESTIONS[0][1], QUESTIONS[2][1]])
    for answer in (early, late):
        auto_eval_queued(answer)
    drain(submitter)
    indexer.index_until_head(ledger)
    models = list(w["models"].values())[:2]
    monkeypatch.setattr(arena, "candidates", lambda user, context: models)
    battle = ready_battle(alice, models, w["writing"])
    other = start_conversation(alice, models[1], w["writing"])
    client = Client()
    assert client.login(username=alice.username, password=PASSWORD)
    pages = {"conversation": reverse("conversation", args=[early.conversation_id]),
             "board": f"/?context={w['writing'].context_id}", "global board": "/",
             "verify": f"/verify/?context={w['writing'].context_id}", "arena": reverse("arena"),
             "another conversation": reverse("conversation", args=[other.pk])}
    for path in pages.values():
        client.get(path)  # what a process reads once, read while the node answers
    # The indexer reads a few more blocks just before the node stalls: the board served now is at a
    # block verify has not checked, and checking it needs the node.
    checked = indexed_block(ledger)
    deadline = time.monotonic() + 30
    while indexed_block(ledger) == checked:
        assert time.monotonic() < deadline, "no new final block to index"
        time.sleep(0.5)
        indexer.index_until_head(ledger)
    assert LATE_S > inspect.signature(ChainClient).parameters["timeout"].default > verify_view.RPC_TIMEOUT_S

    os.kill(ledger_node.proc.pid, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        first, _, said = round_of(client, pages, early, battle)
        print("\nat the start of the pause, answered in (s):", rounded(first))
        assert not slow(first), f"waited on the paused node: {slow(first)}"

        # Within a probe's timeout and its refresh, every page says it at the top, each still at once.
        while True:
            page, s = timed(client.get, pages["another conversation"])
            assert not slow({"another conversation": s})
            html = page.content.decode()
            if "chain-banner" in html:
                break
            assert time.monotonic() - paused < 15, "the pages never said the chain is not answering"
            time.sleep(0.5)
        print(f"noticed {time.monotonic() - paused:.1f} s after the pause")
        assert html.index("chain-banner") < html.index("<h1"), "said at the top"
        assert "saved here and sent when it is back" in html

        # Visitors keep coming: the probes time out again and again, verify's background check hangs
        # on the node until its own timeout, fails, and is started again.
        battle = ready_battle(alice, models, w["writing"])  # the next battle, voted on in the late round
        meanwhile, verify_said = {}, [(0, said)]  # the first round, made at once
        while time.monotonic() - paused < LATE_S - VISIT_EVERY_S:
            for name in ("conversation", "verify", "another conversation"):
                response, s = timed(client.get, pages[name])
                meanwhile[name] = max(meanwhile.get(name, 0), s)
                if name == "verify":
                    verify_said.append((round(time.monotonic() - paused), verify_says(response)))
            time.sleep(VISIT_EVERY_S)
        print("meanwhile, the slowest answers (s):", rounded(meanwhile))
        assert not slow(meanwhile), f"waited on the paused node: {slow(meanwhile)}"

        time.sleep(max(0.0, LATE_S - (time.monotonic() - paused)))
        at = time.monotonic() - paused
        last, html, said = round_of(client, pages, late, battle)
        verify_said.append((round(at), said))
        print(f"after {at:.1f} s of pause, answered in (s):", rounded(last))
        print("verify said, by second of the pause:", verify_said)
        assert not slow(last), f"waited on the paused node: {slow(last)}"
        # Never a verdict without the node; once the site knows it is down, it says so.
        assert {what for _, what in verify_said} <= {"checking", "checking, the chain not answering",
                                                     "cannot read the chain"}, verify_said
        assert all(what != "checking" for _, what in verify_said[1:]), verify_said
        assert html.index("chain-banner") < html.index("<h1"), "still said at the top"
        assert "not answering" in client.get(reverse("chain-status")).content.decode()
        time.sleep(max(0.0, PAUSE_S - (time.monotonic() - paused)))
    finally:
        os.kill(ledger_node.proc.pid, signal.SIGCONT)
        print(f"resumed after {time.monotonic() - paused:.1f} s")
    assert time.monotonic() - paused >= PAUSE_S

    # The worker's passes once the node is back: each rating goes out, once.
    assert queue_waiting_ratings() == 2 and queue_waiting_ratings() == 0
    drain(submitter)
    indexer.index_until_head(ledger)
    assert OutboxItem.objects.filter(function="humEval").count() == 2
    events = fetch_all(ledger, ledger.deployment.deployBlock, ledger.client.block_number())
    for answer in (early, late):
        landed = [e for e in events if e["event"] == "HumanEvaluated"
                  and hex32(e["args"]["interactionId"]) == answer.interaction_id]
        assert len(landed) == 1, (answer.pk, landed)
    deadline = time.monotonic() + 15
    while "chain-banner" in client.get(pages["another conversation"]).content.decode():
        assert time.monotonic() < deadline, "the pages still say the chain is not answering"
        time.sleep(0.5)
    # With the node back, verify makes its check (at the block now indexed) and gives its verdict.
    deadline = time.monotonic() + 60
    while (said := verify_says(client.get(pages["verify"]))) != "verdict":
        assert time.monotonic() < deadline, f"verify still says {said!r} with the node back"
        time.sleep(1)
