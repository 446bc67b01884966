"""`leaderboard verify` and /verify/ rebuild how alike people's ratings and the automatic score rank the
answers of a board from the chain alone: each rated answer's Sa from its AutoEvaluated event, its Sh from
its HumanEvaluated event (the questionnaire the user answered on-chain), its length from its evidence
record on IPFS. After real ratings on a node the served board matches; a tampered figure, served or in
the site's own tables, is named in plain words."""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command

from apps.annotate.site_validity import rating_figures
from apps.chain import outbox
from apps.chain.evidence import LocalBlobStore
from apps.chain.models import Context, LedgerInteraction
from apps.chain.submitter import Submitter
from apps.leaderboard import boards
from apps.leaderboard.verify import CidReader, RemoteSite, SiteBoards, check_board, rebuild_from_chain, verify_boards
from lib import records
from lib.reputation import GLOBAL_CONTEXT_ID
from lib.weighted import MIN_HUMAN
from tests.chain.conftest import drain, ledger, ledger_node, rand_id, reindex, world  # noqa: F401  (fixtures)
from tests.leaderboard.test_verify import checked

pytestmark = pytest.mark.chain
WAD = 10**18
RATED = MIN_HUMAN + 4
QUESTIONS = ("reliability", "completeness", "utility", "familiarity", "trust", "uncertainty")


@pytest.fixture(scope="module")
def ipfs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratings-ipfs")


@pytest.fixture
def rated_world(world, ledger, ledger_node, settings, ipfs_dir, django_capture_on_commit_callbacks):  # noqa: F811
    """A model answers in this site's chat; each answer is scored against references (Sa on-chain, the
    evidence on IPFS) and rated on-chain by its user: RATED answers whose questionnaire's answers rise
    with Sa, but for every fourth one, indexed."""
    from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
    from apps.chat.registry import ModelFields, register_model
    from tests.personas import developer, user

    settings.LLMCHAIN_IPFS_DIR = ipfs_dir
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_RPC_URL = ledger_node.url
    settings.LLMCHAIN_DEPLOYMENT = ledger_node.deployment_file
    store = LocalBlobStore(ipfs_dir)
    reindex(world.ledger)  # the context, for the chat
    chat_model = register_model(developer(), ModelFields(name="w-7b", provider="t", endpoint_url="http://w.test/v1",
                                                         endpoint_model="w"))
    conversation = start_conversation(user(), chat_model, Context.objects.get(context_id=world.context))
    for k in range(RATED):
        rater = world.users[k % len(world.users)]
        text = "Forty-two" + ", indeed" * (k % 7)
        turn = begin_interaction(conversation.user, conversation, "What is 40 + 2?")
        finish_interaction(turn, text)
        iid, sa = turn.interaction_id, (k + 1) * WAD // (RATED + 1)
        record = records.interaction_evidence(
            interaction_id=iid, context_id=world.context, context_name="reasoning", prompt="What is 40 + 2?",
            model_id=world.model, answer=text, references=[{"model": rand_id(), "text": "42", "score": 0}],
            metric={"name": "test"}, sa=sa, wa=0)
        auto = outbox.enqueue("autoEval", world.oracle, {
            "interactionId": iid, "modelId": world.model, "contextId": world.context, "user": rater,
            "hasReference": True, "sA": str(sa), "wA": "0", "evidenceCid": store.put(records.canonical(record))})
        level = 1 + (4 * k) // RATED if k % 4 != 3 else 5 - (4 * k) // RATED
        outbox.enqueue("humEval", rater, {"interactionId": iid, **dict(zip(QUESTIONS, (level, level, level, 3, 3, 3)))},
                       depends_on=auto)
    drain(Submitter(world.ledger))
    with django_capture_on_commit_callbacks(execute=True):
        reindex(world.ledger)
    return {"ledger": world.ledger, "context": world.context, "store": store, "conversation": conversation}


def delete_conversation(client, conversation) -> None:
    """Its user deletes the conversation on the site, once the oracle has recorded each of its evaluations
    on-chain (the site keeps a conversation until then): the chat's rows of its answers are gone, the
    chain's records and the evidence stay."""
    from apps.chat.models import Interaction
    from apps.oracle.models import EvaluationJob

    EvaluationJob.objects.filter(interaction__conversation=conversation).update(status=EvaluationJob.Status.ONCHAIN)
    client.force_login(conversation.user)
    assert client.post(f"/chat/{conversation.pk}/delete").status_code == 302
    assert not Interaction.objects.filter(conversation_id=conversation.pk).exists()
    client.logout()
    cache.clear()
    boards.forget_standings()


def differing(report) -> list[tuple[str, str]]:
    return [(r.model_id, c.column) for r in report.rows for c in r.cells if not c.equal] + [
        ("figure", f.key) for f in report.figures if not f.equal]


@pytest.mark.django_db
def test_the_rating_figures_rebuilt_from_the_chain_match_and_a_tampered_one_is_named(rated_world, django_db_blocker,
                                                                                     client):
    w = rated_world
    ctx = w["context"]
    assert LedgerInteraction.objects.filter(context_id=ctx, sh__isnull=False).count() == RATED
    with django_db_blocker.block():  # the chain side reads the node and IPFS only
        chain = rebuild_from_chain(w["ledger"], CidReader(w["store"]))
    report, = verify_boards(chain, SiteBoards(), [ctx])
    assert report.ok, (report.verdict, differing(report))
    figures = {f.key: f for f in report.figures}
    site = rating_figures(ctx)
    assert figures["ratings_n"].chain == RATED == site["n"]
    assert figures["ratings_spearman"].chain == site["spearman"] > 0.3
    assert figures["ratings_spearman_ci_low"].chain == site["spearman_ci_low"] is not None
    assert figures["ratings_length_spearman"].chain == site["length_spearman"]
    assert any(n.startswith(f"How alike people's ratings and the automatic score rank answers here: rebuilt from the "
                            f"{RATED} rated answers") for n in report.notes), report.notes
    glob, = verify_boards(chain, SiteBoards(), [GLOBAL_CONTEXT_ID])
    assert glob.ok and {f.key: f.chain for f in glob.figures}["ratings_n"] >= RATED

    # The served JSON, read as another site's board, matches too; a tampered figure there is named.
    served = RemoteSite.served_board(ctx, client.get(f"/api/boards/{ctx}").json())
    assert check_board(ctx, served, chain).ok
    tampered = check_board(ctx, replace(served, ratings={**served.ratings, "spearman": 0.99}), chain)
    assert differing(tampered) == [("figure", "ratings_spearman")]
    assert tampered.named == [f"the rank agreement of the automatic score with people's ratings in reasoning differs: "
                              f"served 0.99, rebuilt {site['spearman']:.2f}"]

    # In the site's own tables: one answer's rating turned to the lowest. Each figure that moved is named.
    top = LedgerInteraction.objects.filter(context_id=ctx).order_by("-sa").first()
    LedgerInteraction.objects.filter(pk=top.pk).update(sh=0)
    cache.clear()
    report, = verify_boards(chain, SiteBoards(), [ctx])
    assert not report.ok and ("figure", "ratings_spearman") in differing(report)
    assert all(kind == "figure" and key.startswith("ratings_") for kind, key in differing(report)), differing(report)
    assert any(s.startswith("the rank agreement of the automatic score with people's ratings in reasoning differs: "
                            "served ") for s in report.named)
    out = StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("leaderboard", "verify", "--context", ctx, stdout=out)
    assert exit_.value.code == 1
    text = out.getvalue()
    assert " * the rank agreement of the automatic score with people's ratings in reasoning differs: served " in text
    assert "*   Rank agreement with people's ratings: " in text
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("leaderboard", "verify", "--context", ctx, "--json", stdout=out)
    board = json.loads(out.getvalue())["boards"][0]
    assert any(f["figure"] == "ratings_spearman" and not f["equal"] for f in board["figures"])
    html = checked(client, context=ctx).content.decode()
    assert "The rank agreement of the automatic score with people&#x27;s ratings in reasoning differs" in html
    assert 'data-figure="ratings_spearman" data-ok="false"' in html

    # Put back, it matches again; without the answers' texts the figures are not checked, and said so.
    LedgerInteraction.objects.filter(pk=top.pk).update(sh=top.sh)
    cache.clear()
    assert verify_boards(chain, SiteBoards(), [ctx])[0].ok
    plain = verify_boards(replace(chain, style_checked=False), SiteBoards(), [ctx])[0]
    assert plain.ok and not plain.figures
    assert any("rank answers here was not checked (it needs every rated answer's length from IPFS)" in n
               for n in plain.notes)

    # The user deletes the conversation: the figures, served and rebuilt, stay as they were.
    served = client.get(f"/api/boards/{ctx}").json()["validity"]["ratings"]
    delete_conversation(client, w["conversation"])
    assert rating_figures(ctx) == site and site["unread"] == 0
    assert client.get(f"/api/boards/{ctx}").json()["validity"]["ratings"] == served
    report, = verify_boards(chain, SiteBoards(), [ctx])
    assert report.ok and {f.key: f.served for f in report.figures}["ratings_n"] == RATED, differing(report)
