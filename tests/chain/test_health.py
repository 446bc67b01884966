"""Pages say where the ledger stands: how far behind the head the boards are, and plainly when the
chain is unreachable (a rating given meanwhile is saved and will be sent)."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from apps.chain import indexer
from apps.chain.ledger import Deployment
from apps.chain.node import free_port
from apps.chat.models import Rating
from tests.chat.test_ratings import GOOD, answered  # noqa: F401  (fixture)

pytestmark = [pytest.mark.django_db]


@pytest.mark.chain
def test_the_boards_say_how_far_behind_the_head_they_are(ledger, ledger_node, settings, client):
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    settings.LLMCHAIN_FINALITY = "3"
    indexer.index_until_head(ledger)
    cursor = indexer.IndexerCursor.objects.get(name=indexer.cursor_name(ledger))
    page = client.get("/").content.decode()
    assert 'hx-get="/chain/status"' in page  # the cached board loads the line, which is never cached
    resp = client.get("/chain/status")
    text = resp.content.decode()
    assert resp["Cache-Control"] == "no-store"
    assert f"final blocks up to block {cursor.last_block}" in text
    head = int(text.split("its head is block ")[1].split()[0].rstrip("."))
    assert head - cursor.last_block >= 3 and "behind: a block counts once it is final" in text


def test_while_the_chain_is_unreachable_the_rating_says_it_is_saved_and_will_be_sent(answered, settings,  # noqa: F811
                                                                                       tmp_path):
    alice, interaction = answered
    Deployment(31337, "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20, 1).save(tmp_path / "deployment.json")
    settings.LLMCHAIN_DEPLOYMENT = tmp_path / "deployment.json"
    dead = f"http://127.0.0.1:{free_port()}"
    settings.LLMCHAIN_RPC_URL = dead
    client = Client()
    client.force_login(alice)
    form = client.get(f"/chat/interactions/{interaction.pk}/rating").content.decode()
    assert "The chain is unreachable right now; your rating will be saved when you send it" in form
    sent = client.post(f"/chat/interactions/{interaction.pk}/rating", GOOD).content.decode()
    assert Rating.objects.get(interaction=interaction).status == "waiting"  # accepted and kept
    assert "The chain is unreachable right now; your rating is saved and will be sent." in sent
    status = client.get("/chain/status").content.decode()
    assert "is not answering right now" in status and "saved here and sent when it is back" in status
    top = client.get(reverse("conversation", args=[interaction.conversation.pk])).content.decode()
    assert top.index("chain-banner") < top.index('class="rating"'), "said at the top, not only under the form"
    assert dead not in status and dead not in sent  # the node's address stays out of pages


def test_when_the_chain_answers_nothing_is_said(answered, settings, tmp_path, monkeypatch):  # noqa: F811
    from apps.chain import health

    alice, interaction = answered
    monkeypatch.setattr(health, "probe_node", lambda timeout=1.0, **where: {"reachable": True, "head": 9, "final": 9,
                                                                           "error": ""})
    cache.clear()
    client = Client()
    client.force_login(alice)
    form = client.get(f"/chat/interactions/{interaction.pk}/rating").content.decode()
    assert "unreachable" not in form


def test_a_cached_probe_older_than_the_indexer_never_puts_the_head_below_the_indexed_block(monkeypatch):
    from apps.chain import health
    from apps.chain.models import IndexerCursor

    deployment = Deployment(chainId=31337, identity="0x" + "11" * 20, access="0x" + "22" * 20,
                            reputation="0x" + "33" * 20, deployBlock=1)
    monkeypatch.setattr(health.relay, "deployment", lambda: deployment)
    IndexerCursor.objects.create(name=indexer.cursor_name(health.Ledger(None, deployment)), last_block=21)
    found = health.with_cursor({"reachable": True, "head": 17, "final": 14})
    assert (found["head"], found["final"], found["indexed"], found["behind"]) == (21, 21, 21, 0)
    fresh = health.with_cursor({"reachable": True, "head": 30, "final": 27})
    assert (fresh["head"], fresh["final"], fresh["behind"]) == (30, 27, 9)
