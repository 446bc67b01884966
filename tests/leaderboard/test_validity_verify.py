"""`leaderboard verify` and /verify/ rebuild how far the automatic score agrees with people here (the
board's validity figures) and the weighted score from the chain alone: the voted answers' Sa from their
AutoEvaluated events, their lengths from their evidence records on IPFS. After real votes on a node the
served board matches; a tampered validity figure and a tampered weighted score are each named in plain
words."""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command

from apps.chain import outbox
from apps.chain.evidence import LocalBlobStore
from apps.chain.models import ArenaBattle, Context, LedgerInteraction, OutboxItem
from apps.chain.submitter import Submitter
from apps.leaderboard.verify import (WEIGHTED_COLUMNS, CidReader, RemoteSite, SiteBoards, check_board,
                                     rebuild_from_chain, verify_boards)
from lib import records
from lib.reputation import GLOBAL_CONTEXT_ID
from lib.weighted import MIN_HUMAN
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, reindex, world  # noqa: F401  (fixtures)
from tests.leaderboard.test_rating_validity_verify import delete_conversation
from tests.leaderboard.test_verify import checked, metadata

pytestmark = pytest.mark.chain
WAD = 10**18
VOTES = MIN_HUMAN + 4
# The voted answer has the higher Sa in all but every sixth vote, and is the longer one every other vote:
# the automatic score beats the length rule here (agreement 29/34 against 17/34), so it earns a weight.
DISAGREE = {k for k in range(VOTES) if k % 6 == 5}


@pytest.fixture(autouse=True)
def _few_redraws(settings):  # the cache is cleared around every test by tests/conftest.py
    settings.LLMCHAIN_ARENA_BOOTSTRAP = 30
    settings.LLMCHAIN_ARENA_STYLE_BOOTSTRAP = 5


@pytest.fixture(scope="module")
def ipfs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("validity-ipfs")


@pytest.fixture
def voted_world(world, ledger, ledger_node, settings, ipfs_dir, django_capture_on_commit_callbacks):  # noqa: F811
    """Two models answer a user's prompts in this site's chat; each answer scored against a reference
    (its Sa on-chain, its evidence on IPFS) and every pair voted on: VOTES decided votes, indexed."""
    from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
    from apps.chat.registry import ModelFields, register_model
    from tests.personas import developer, user

    settings.LLMCHAIN_IPFS_DIR = ipfs_dir
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    store = LocalBlobStore(ipfs_dir)
    dev = OutboxItem.objects.get(key=f"register:{world.developer}")
    models = {name: rand_id() for name in ("alpha", "beta")}
    for name, model in models.items():
        outbox.enqueue("addModel", world.developer, {"modelId": model, "metadataCid": store.put(
            metadata(name, world.developer))}, depends_on=dev)
    submitter = Submitter(ledger)
    drain(submitter)
    reindex(ledger)
    chat_model = register_model(developer(), ModelFields(name="w-7b", provider="t", endpoint_url="http://w.test/v1",
                                                         endpoint_model="w"))
    conversation = start_conversation(user(), chat_model, Context.objects.get(context_id=world.context))
    voter = world.users[0]

    def answer(name: str, text: str, sa: float):
        turn = begin_interaction(conversation.user, conversation, "What is 40 + 2?")
        finish_interaction(turn, text)
        iid = turn.interaction_id
        record = records.interaction_evidence(
            interaction_id=iid, context_id=world.context, context_name="reasoning", prompt="What is 40 + 2?",
            model_id=models[name], answer=text, references=[{"model": rand_id(), "text": "42", "score": 0}],
            metric={"name": "test"}, sa=int(sa * WAD), wa=0)
        auto = outbox.enqueue("autoEval", world.oracle, {
            "interactionId": iid, "modelId": models[name], "contextId": world.context, "user": voter,
            "hasReference": True, "sA": str(int(sa * WAD)), "wA": "0", "evidenceCid": store.put(records.canonical(record))})
        return iid, auto

    for k in range(VOTES):
        long_text, short_text = f"Forty-two, as {k} sums show at length.", "42"
        win_long = k % 2 == 0
        win_sa, lose_sa = (0.3, 0.8) if k in DISAGREE else (0.8 + k / 1000, 0.3)
        (ia, _), (ib, auto_b) = (answer("alpha", long_text if win_long else short_text, win_sa),
                                 answer("beta", short_text if win_long else long_text, lose_sa))
        battle_id = rand_id()
        opened = outbox.enqueue("openBattle", world.oracle, {"battleId": battle_id, "interactionA": ia,
                                                             "interactionB": ib, "voided": False}, depends_on=auto_b)
        outbox.enqueue("vote", voter, {"battleId": battle_id, "outcome": 1}, depends_on=opened)
    drain(submitter)
    with django_capture_on_commit_callbacks(execute=True):
        reindex(ledger)
    return {"ledger": ledger, "context": world.context, "models": models, "store": store,
            "conversation": conversation}


def chain_side(w, **kw):
    return rebuild_from_chain(w["ledger"], CidReader(w["store"]), **kw)


def differing(report) -> list[tuple[str, str]]:
    return [(r.model_id, c.column) for r in report.rows for c in r.cells if not c.equal] + [
        ("figure", f.key) for f in report.figures if not f.equal]


@pytest.mark.django_db
def test_the_validity_figures_and_the_weighted_score_rebuilt_from_the_chain_match_and_tampers_are_named(
        voted_world, django_db_blocker, client):
    w = voted_world
    ctx, alpha, beta = w["context"], w["models"]["alpha"], w["models"]["beta"]
    assert ArenaBattle.objects.filter(context_id=ctx, counted=True).count() == VOTES
    with django_db_blocker.block():  # the chain side reads the node and IPFS only
        chain = chain_side(w)
    report, = verify_boards(chain, SiteBoards(), [ctx])
    assert report.ok, (report.verdict, differing(report))
    figures = {f.key: f for f in report.figures}
    assert figures["status"].chain == "measured" and figures["pairs_non_tie"].chain == VOTES
    assert figures["accuracy_non_tie"].chain == round((VOTES - len(DISAGREE)) / VOTES, 4)
    assert figures["length_accuracy_non_tie"].chain == 0.5 and figures["weight"].chain > 0
    cells = {(r.model_id, c.column): c for r in report.rows for c in r.cells}
    assert {key for _, key in cells} >= {key for key, _ in WEIGHTED_COLUMNS}
    assert cells[(alpha, "weighted")].chain is not None and cells[(alpha, "weighted_rank")].chain == 1
    assert cells[(beta, "weighted")].chain < cells[(alpha, "weighted")].chain
    assert any(n.startswith(f"How far the automatic score agrees with people here: rebuilt from the {VOTES} counted")
               for n in report.notes)
    assert report.named == []
    # The global board holds the same votes.
    glob, = verify_boards(chain, SiteBoards(), [GLOBAL_CONTEXT_ID])
    assert glob.ok and {f.key: f.chain for f in glob.figures}["pairs_non_tie"] >= VOTES

    # The served JSON, read as another site's board, matches too.
    served = RemoteSite.served_board(ctx, client.get(f"/api/boards/{ctx}").json())
    assert check_board(ctx, served, chain).ok

    # A tampered weighted score: that cell, named.
    site = SiteBoards().board(ctx)
    shown = next(r.weighted for r in site.rows if r.model_id == alpha)
    bad = replace(site, rows=[replace(r, weighted=r.weighted + 0.05) if r.model_id == alpha else r for r in site.rows])
    tampered = check_board(ctx, bad, chain)
    assert differing(tampered) == [(alpha, "weighted")]
    assert tampered.named == [f"the weighted score of alpha in reasoning differs: served {shown + 0.05:.4f}, "
                              f"rebuilt {shown:.4f}"]

    # A tampered validity figure, as another site might serve it: named in plain words.
    served = RemoteSite.served_board(ctx, client.get(f"/api/boards/{ctx}").json())
    agreement = served.validity["accuracy_non_tie"]
    tampered = check_board(ctx, replace(served, validity={**served.validity, "accuracy_non_tie": 0.99}), chain)
    assert differing(tampered) == [("figure", "accuracy_non_tie")]
    assert tampered.named == [f"the agreement figure of the automatic score in reasoning differs: served 99%, "
                              f"rebuilt {100 * agreement:.0f}%"]

    # In the site's own tables: one voted answer's Sa turned around (the voted one now scored lower), so the
    # board's figures and its weight move. Every figure that moved is named, and the weighted scores with them.
    voted = ArenaBattle.objects.filter(context_id=ctx, counted=True).values_list("interaction_a", flat=True)
    turned = LedgerInteraction.objects.filter(interaction_id__in=list(voted), sa__gt=WAD // 2).order_by("sa").first()
    LedgerInteraction.objects.filter(pk=turned.pk).update(sa=0)
    cache.clear()
    report, = verify_boards(chain, SiteBoards(), [ctx])
    assert not report.ok and ("figure", "accuracy_non_tie") in differing(report)
    assert all(m == "figure" or column in dict(WEIGHTED_COLUMNS) for m, column in differing(report)), differing(report)
    named = report.named
    assert any(s.startswith("the agreement figure of the automatic score in reasoning differs: served ") for s in named)
    assert any(s.startswith("the weight of the automatic score in the weighted score in reasoning differs")
               for s in named), named

    out = StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("leaderboard", "verify", "--context", ctx, stdout=out)
    assert exit_.value.code == 1
    text = out.getvalue()
    assert " * the agreement figure of the automatic score in reasoning differs: served " in text, text
    assert "*   Agreement with people's votes: " in text
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("leaderboard", "verify", "--context", ctx, "--json", stdout=out)
    board = json.loads(out.getvalue())["boards"][0]
    assert any(f["figure"] == "accuracy_non_tie" and not f["equal"] for f in board["figures"])
    assert board["named"] == named

    html = checked(client, context=ctx).content.decode()
    assert "The agreement figure of the automatic score in reasoning differs: served " in html, html[:4000]
    assert 'data-figure="accuracy_non_tie" data-ok="false"' in html

    # Put back, the board matches again; without the answers' texts the figures are not checked, and said so.
    LedgerInteraction.objects.filter(pk=turned.pk).update(sa=turned.sa)
    cache.clear()
    assert verify_boards(chain, SiteBoards(), [ctx])[0].ok
    plain = verify_boards(replace(chain, style_checked=False), SiteBoards(), [ctx])[0]
    assert plain.ok and not plain.figures
    assert any("were not checked (they need every voted answer's length from IPFS)" in n for n in plain.notes)

    # The user deletes the conversation of the voted answers: the figures, served and rebuilt, stay.
    served = client.get(f"/api/boards/{ctx}").json()["validity"]["columns"]["ra"]
    delete_conversation(client, w["conversation"])
    assert client.get(f"/api/boards/{ctx}").json()["validity"]["columns"]["ra"] == served
    assert served["pairs_non_tie"] == VOTES
    report, = verify_boards(chain, SiteBoards(), [ctx])
    assert report.ok, differing(report)
