"""The questionnaire under an answer: one rating per interaction, by its user only, each item
1..5; it waits for the interaction to be on-chain, then humEval and updateReputation are queued."""

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from apps.chain import outbox
from apps.chain.keys import oracle_address
from apps.chain.models import LedgerInteraction, OutboxItem
from apps.chat.conversations import begin_interaction, finish_interaction, start_conversation
from apps.chat.models import Profile, Rating
from apps.chat.ratings import queue_waiting, queue_waiting_ratings, refresh, settle_ratings, submit_rating
from apps.chat.registry import ModelFields, register_model
from apps.oracle.models import EvaluationJob
from tests.personas import developer, outsider, user

from .factories import make_contexts

pytestmark = pytest.mark.django_db

GOOD = {"reliability": "4", "completeness": "5", "utility": "3", "familiarity": "2", "trust": "4", "uncertainty": "1"}


@pytest.fixture
def answered(settings, tmp_path):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    coding, = make_contexts("coding")
    model = register_model(developer(), ModelFields(name="m", provider="p", endpoint_url="http://127.0.0.1:9/v1",
                                                    endpoint_model="m"))
    alice = user("alice")
    conv = start_conversation(alice, model, coding)
    interaction = begin_interaction(alice, conv, "What is 2+2?")
    finish_interaction(interaction, "4")
    return alice, interaction


def auto_eval_queued(interaction):
    """What the oracle does when it has scored the answer."""
    item = outbox.enqueue("autoEval", oracle_address(), {
        "interactionId": interaction.interaction_id, "modelId": interaction.conversation.model.model_id,
        "contextId": interaction.conversation.context.context_id,
        "user": Profile.objects.get(user_id=interaction.conversation.user_id).rating_address,
        "hasReference": False, "sA": "0", "wA": "0", "evidenceCid": "bafkreitest"})
    EvaluationJob.objects.filter(interaction=interaction).update(outbox_item=item, status="submitted")
    return item


def test_a_rating_before_the_interaction_is_on_chain_waits_and_is_not_lost(answered):
    alice, interaction = answered
    rating = submit_rating(alice, interaction, GOOD)
    assert rating.status == "waiting" and not OutboxItem.objects.filter(function="humEval").exists()
    auto = auto_eval_queued(interaction)
    queue_waiting(interaction)
    rating.refresh_from_db()
    assert rating.status == "queued"
    hum, update = rating.hum_item, rating.update_item
    assert hum.function == "humEval" and hum.sender_address == alice.profile.address  # the user's own key
    assert hum.payload == {"interactionId": interaction.interaction_id, "reliability": 4, "completeness": 5,
                           "utility": 3, "familiarity": 2, "trust": 4, "uncertainty": 1}
    assert hum.depends_on == auto and update.depends_on == hum
    assert update.function == "updateReputation" and update.payload == {"interactionId": interaction.interaction_id}


def test_a_rating_is_only_saved_when_sent_and_the_worker_queues_it_on_its_next_pass(answered):
    alice, interaction = answered
    auto_eval_queued(interaction)
    rating = submit_rating(alice, interaction, GOOD)
    assert rating.status == "waiting" and not OutboxItem.objects.filter(function="humEval").exists()
    assert queue_waiting_ratings() == 1 and queue_waiting_ratings() == 0
    rating.refresh_from_db()
    assert rating.status == "queued" and rating.hum_item.depends_on.function == "autoEval"


@pytest.mark.parametrize("changes, field", [
    ({"reliability": "0"}, "reliability"), ({"utility": "6"}, "utility"), ({"trust": "3.5"}, "trust"),
    ({"familiarity": ""}, "familiarity"), ({"uncertainty": "x"}, "uncertainty"), ({"completeness": None}, "completeness"),
])
def test_out_of_range_or_missing_answers_are_refused_and_change_nothing(answered, changes, field):
    alice, interaction = answered
    answers = {k: v for k, v in {**GOOD, **changes}.items() if v is not None}
    with pytest.raises(ValidationError) as err:
        submit_rating(alice, interaction, answers)
    assert field in err.value.message_dict
    assert not Rating.objects.exists() and not OutboxItem.objects.filter(function="humEval").exists()


def test_a_second_rating_is_refused(answered):
    alice, interaction = answered
    submit_rating(alice, interaction, GOOD)
    with pytest.raises(ValidationError, match="already rated"):
        submit_rating(alice, interaction, {**GOOD, "utility": "1"})
    assert Rating.objects.get().utility == 3


def test_nobody_else_can_rate_an_interaction(answered, client):
    alice, interaction = answered
    mallory = outsider()
    with pytest.raises(PermissionError):
        submit_rating(mallory, interaction, GOOD)
    client.force_login(mallory)
    assert client.post(f"/chat/interactions/{interaction.pk}/rating", GOOD).status_code == 403
    assert not Rating.objects.exists()


def test_an_unfinished_answer_cannot_be_rated(answered):
    alice, interaction = answered
    streaming = begin_interaction(alice, interaction.conversation, "And 3+3?")
    with pytest.raises(ValidationError, match="finished"):
        submit_rating(alice, streaming, GOOD)


def test_the_form_page_shows_every_item_with_its_meaning_and_posts_a_rating(answered, client):
    alice, interaction = answered
    client.force_login(alice)
    form = client.get(f"/chat/interactions/{interaction.pk}/rating").content.decode()
    for phrase in ("reliable", "complete", "useful", "familiar", "trust", "unsure", "1 = very sure"):
        assert phrase in form
    bad = client.post(f"/chat/interactions/{interaction.pk}/rating", {**GOOD, "trust": "9"})
    assert bad.status_code == 400 and "Choose an answer from 1 to 5" in bad.content.decode()
    ok = client.post(f"/chat/interactions/{interaction.pk}/rating", GOOD)
    assert ok.status_code == 200 and "saved; waiting for the answer to be recorded" in ok.content.decode()
    assert Rating.objects.get().reliability == 4


def test_a_forged_post_without_the_csrf_token_is_refused(answered):
    alice, interaction = answered
    forger = Client(enforce_csrf_checks=True)
    forger.force_login(alice)
    response = forger.post(f"/chat/interactions/{interaction.pk}/rating", GOOD)
    assert response.status_code == 403
    assert not Rating.objects.exists()


def test_the_api_takes_one_rating_and_reports_its_progress(answered):
    from rest_framework.test import APIClient

    alice, interaction = answered
    api = APIClient()
    api.force_authenticate(alice)
    url = f"/api/interactions/{interaction.pk}/rating"
    assert api.get(url).status_code == 404  # not rated yet
    bad = api.post(url, {**{k: int(v) for k, v in GOOD.items()}, "trust": 7}, format="json")
    assert bad.status_code == 400 and "trust" in bad.json()
    ok = api.post(url, {k: int(v) for k, v in GOOD.items()}, format="json")
    assert ok.status_code == 201 and ok.json()["status"] == "waiting" and ok.json()["hum_tx"] is None
    assert api.post(url, {k: int(v) for k, v in GOOD.items()}, format="json").status_code == 400
    assert api.get(url).json()["reliability"] == 4
    mallory = outsider()
    api.force_authenticate(mallory)
    assert api.post(url, {k: int(v) for k, v in GOOD.items()}, format="json").status_code == 404
    assert Rating.objects.count() == 1


def test_confirmed_ratings_are_on_chain_once_indexed_and_settled_in_one_read_of_the_index(answered,
                                                                                          django_assert_num_queries):
    alice, first = answered
    turns = [first]
    for k in range(2):
        turns.append(begin_interaction(alice, first.conversation, f"And {k}?"))
        finish_interaction(turns[-1], str(k))
    for turn in turns:
        auto_eval_queued(turn)
        submit_rating(alice, turn, GOOD)
    queue_waiting_ratings()
    OutboxItem.objects.filter(function__in=["humEval", "updateReputation"]).update(status="confirmed")
    for k, turn in enumerate(turns):  # the indexer has the last one's humEval, not yet its updateReputation
        LedgerInteraction.objects.create(
            interaction_id=turn.interaction_id, model_id="m", context_id="c", user=alice.profile.rating_address,
            has_reference=False, sa=0, wa=0, evidence_cid="bafkreitest", auto_tx="0x1", auto_block=1, sh=0, wh=0,
            human_tx="0x2", human_block=2, reputation_tx="" if k == 2 else "0x3", reputation_block=3)
    ratings = list(Rating.objects.select_related("interaction", "hum_item", "update_item").order_by("pk"))
    indexed = {row.interaction_id: row for row in LedgerInteraction.objects.all()}
    with django_assert_num_queries(0):  # a page passes the rows it read for all its turns
        assert [refresh(r, indexed).status for r in ratings] == ["onchain", "onchain", "queued"]
    assert refresh(Rating.objects.get(interaction=turns[0])).status == "onchain"  # read for itself
    with django_assert_num_queries(4):  # the ratings, the index, and a write for each that changed
        assert settle_ratings() == 2
    assert list(Rating.objects.order_by("pk").values_list("status", flat=True)) == ["onchain", "onchain", "queued"]
