"""Every main page costs a fixed number of queries, whatever the number of turns, ratings, battles or
models it shows: each page is built at two sizes and held to the same bound. No page writes to the
database on a GET either."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.annotate.models import ExpertVerdict, QueueItem
from apps.chain import outbox
from apps.chain.keys import oracle_address
from apps.chain.ledger import Deployment
from apps.chain.models import IndexerCursor, LedgerInteraction, LedgerModel, OutboxItem
from apps.chat import arena
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Profile, Rating
from apps.chat.ratings import queue_waiting_ratings, submit_rating
from apps.chat.registry import ModelFields, register_model
from apps.leaderboard.models import BoardEntry
from apps.oracle.models import EvaluationJob
from lib.reputation import GLOBAL_CONTEXT_ID
from tests.annotate.queue_factories import disagreement
from tests.chat.factories import make_contexts
from tests.personas import developer, expert, user

pytestmark = pytest.mark.django_db
WAD = 10**18
SIZES = (2, 7)
ANSWERS = {"reliability": "4", "completeness": "5", "utility": "3", "familiarity": "2", "trust": "4",
           "uncertainty": "1"}
# The bound of each page (queries), the same at every size.
BOUNDS = {"home": 13, "board": 15, "reputation": 8, "model": 10, "conversation": 18, "arena": 8, "battle": 15,
          "queue": 14, "verify": 15, "account": 7}


@pytest.fixture(params=SIZES, ids=lambda n: f"{n} of each")
def site(request, settings, tmp_path):
    """`n` models on the boards, a conversation of `n` answered turns (every other one rated, each
    rating queued and its calls confirmed, not yet indexed as on-chain), `n` arena battles, `n`
    disagreements in the expert queue (all but one answered by two experts), with a deployment and an
    indexed block."""
    n = request.param
    settings.LLMCHAIN_IPFS_BACKEND = "local"
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    deployment = Deployment(31337, "0x" + "11" * 20, "0x" + "22" * 20, "0x" + "33" * 20, 1)
    deployment.save(tmp_path / "deployment.json")
    settings.LLMCHAIN_DEPLOYMENT = tmp_path / "deployment.json"
    settings.LLMCHAIN_RPC_URL = "http://127.0.0.1:9"  # no node: no page may need one
    coding, = make_contexts("coding")
    dave, alice = developer(), user("alice")
    expert("erin")
    models = [register_model(dave, ModelFields(name=f"m{k}", provider="p", endpoint_url="http://127.0.0.1:9/v1",
                                               endpoint_model="m")) for k in range(max(n, 2))]
    for k, model in enumerate(models):
        LedgerModel.objects.create(model_id=model.model_id, owner=dave.profile.address, metadata_cid="bafy",
                                   block_number=2)
        for context in (coding.context_id, GLOBAL_CONTEXT_ID):
            BoardEntry.objects.create(model_id=model.model_id, context_id=context, name=model.name, ra=WAD // 2,
                                      rh=WAD // 2, r=WAD // 2 + k, n_auto=6, n_human=1, block_number=3,
                                      spark=[0.5, 0.5])
    IndexerCursor.objects.create(name="reputation:" + deployment.reputation.lower(), last_block=3)
    conv = start_conversation(alice, models[0], coding)
    for k in range(n):
        turn = begin_interaction(alice, conv, f"question {k}")
        finish_interaction(turn, f"answer {k}")
        item = outbox.enqueue("autoEval", oracle_address(), {
            "interactionId": turn.interaction_id, "modelId": models[0].model_id, "contextId": coding.context_id,
            "user": Profile.objects.get(user=alice).rating_address, "hasReference": False, "sA": "0", "wA": "0",
            "evidenceCid": "bafkreitest"})
        EvaluationJob.objects.filter(interaction=turn).update(outbox_item=item, status="submitted")
        if k % 2 == 0:
            submit_rating(alice, turn, ANSWERS)
    queue_waiting_ratings()
    for rating in Rating.objects.filter(status=Rating.Status.QUEUED).select_related("interaction"):
        # Confirmed: the indexer has its humEval, not yet its updateReputation.
        OutboxItem.objects.filter(pk__in=[rating.hum_item_id, rating.update_item_id]).update(status="confirmed")
        LedgerInteraction.objects.create(
            interaction_id=rating.interaction.interaction_id, model_id=models[0].model_id,
            context_id=coding.context_id, user=alice.profile.rating_address, has_reference=False, sa=0, wa=0,
            evidence_cid="bafkreitest", auto_tx="0x" + "aa" * 32, auto_block=2, sh=WAD // 2, wh=WAD,
            human_tx="0x" + "bb" * 32, human_block=3)
    frank, gina = expert("frank"), expert("gina")
    for k in range(n):
        item = disagreement(k, required=2)
        if k < n - 1:
            for who, verdict in ((frank, 1), (gina, 1 + k % 2)):
                ExpertVerdict.objects.create(item=item, expert=who, verdict=verdict)
            QueueItem.objects.filter(pk=item.pk).update(status="resolved", resolved_at=timezone.now())
    battles = []
    for k in range(n):  # one battle waits for its vote at a time: the others are abandoned
        battles.append(arena.start_battle(alice, coding))
        if k < n - 1:
            arena.abandon(alice, battles[-1])
    return {"n": n, "alice": alice, "conversation": conv, "model": models[0], "battle": battles[-1],
            "context": coding}


def pages(site) -> dict[str, tuple[str, str | None]]:
    """name -> (path, who is logged in)."""
    return {"home": ("/", None), "board": (f"/?context={site['context'].context_id}", None),
            "reputation": (f"/reputation/{site['model'].model_id}/", None),
            "model": (f"/models/{site['model'].pk}/", "alice"),
            "conversation": (f"/chat/{site['conversation'].pk}/", "alice"), "arena": ("/arena/", "alice"),
            "battle": (f"/arena/{site['battle'].pk}/", "alice"), "queue": ("/annotate/", "erin"),
            "verify": (f"/verify/?context={site['context'].context_id}", None), "account": ("/account/", "alice")}


@pytest.mark.parametrize("page", list(BOUNDS))
def test_each_main_page_costs_a_fixed_number_of_queries_and_writes_nothing(site, page, django_assert_max_num_queries,
                                                                           settings):
    from django.contrib.auth.models import User

    settings.LLMCHAIN_BOARD_FASTPATH = False
    path, who = pages(site)[page]
    client = Client()
    if who:
        client.force_login(User.objects.get(username=who))
    client.get(path)  # once, so that what a process reads once (the chain's health, the lambda) is read
    with django_assert_max_num_queries(BOUNDS[page]), CaptureQueriesContext(connection) as seen:
        response = client.get(path)
    assert response.status_code in (200, 503), (page, response.status_code)
    writes = [q["sql"] for q in seen.captured_queries
              if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
              and "django_session" not in q["sql"] and "axes_" not in q["sql"]]
    assert not writes, writes
