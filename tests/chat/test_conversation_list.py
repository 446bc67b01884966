"""The conversation list: search, rename and delete, each only by the conversation's owner,
and deletion refused while an answer's evaluation or rating is still on its way to the chain."""

import secrets

from django.utils.html import escape

import pytest
from django.urls import reverse

from apps.chat import conversations
from apps.chat.conversations import DELETION_NOTE, start_conversation
from apps.chat.models import Conversation, Interaction, Rating
from apps.oracle.models import EvaluationJob
from tests.personas import PASSWORD, user

from .test_chat_socket import replay_model  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def turn(conversation, prompt, answer, *, job=None, rating=None):
    i = Interaction.objects.create(conversation=conversation, prompt=prompt, answer=answer,
                                   status=Interaction.Status.DONE, interaction_id="0x" + secrets.token_hex(32))
    if job:
        EvaluationJob.objects.filter(interaction=i).delete()
        EvaluationJob.objects.create(interaction=i, status=job)
    if rating:
        Rating.objects.create(interaction=i, user=conversation.user, status=rating, reliability=3, completeness=3, utility=3,
                              familiarity=3, trust=3, uncertainty=3)
    return i


@pytest.fixture
def world(replay_model, client):  # noqa: F811
    model, writing = replay_model
    alice, bob = user("alice"), user("bob")
    poems = start_conversation(alice, model, writing, "Poems about the sea")
    turn(poems, "Write a haiku about tides", "Water leaves and comes", job="onchain")
    taxes = start_conversation(alice, model, writing, "Letters")
    turn(taxes, "Draft a letter to my landlord", "Dear landlord, the boiler", job="onchain")
    theirs = start_conversation(bob, model, writing, "Bob's tides")
    turn(theirs, "tides again", "tides", job="onchain")
    client.login(username="alice", password=PASSWORD)
    return {"poems": poems, "letters": taxes, "bobs": theirs, "alice": alice}


def listed(response) -> list[str]:
    return [c.title for c in response.context["conversations"]]


def test_search_finds_titles_prompts_and_answers_of_ones_own_conversations_only(world, client):
    url = reverse("chat-conversations")
    assert listed(client.get(url, {"q": "haiku"})) == ["Poems about the sea"]  # a prompt
    assert listed(client.get(url, {"q": "BOILER"})) == ["Letters"]  # an answer, any case
    assert listed(client.get(url, {"q": "letters"})) == ["Letters"]  # the name
    assert sorted(listed(client.get(url, {"q": "poet-1b"}))) == ["Letters", "Poems about the sea"]  # the model
    assert listed(client.get(url, {"q": "tides"})) == ["Poems about the sea"]  # not Bob's
    nothing = client.get(url, {"q": "volcano"})
    assert listed(nothing) == [] and "No conversation matches “volcano”" in nothing.content.decode()
    page = client.get(reverse("chat"), {"q": "haiku"}).content.decode()
    assert "1 conversation matches “haiku”" in page and "Letters" not in page


def test_rename_trims_and_refuses_an_empty_or_long_name_or_someone_elses(world, client):
    poems = world["poems"]
    r = client.post(reverse("conversation-rename", args=[poems.pk]), {"title": "  Sea   poems "})
    assert r.status_code == 302 and Conversation.objects.get(pk=poems.pk).title == "Sea poems"
    for bad, says in (("   ", "Give the conversation a name."), ("x" * 201, "Keep the name under 200 characters")):
        r = client.post(reverse("conversation-rename", args=[poems.pk]), {"title": bad}, follow=True)
        assert says in r.content.decode()
        assert Conversation.objects.get(pk=poems.pk).title == "Sea poems"
    r = client.post(reverse("conversation-rename", args=[world["bobs"].pk]), {"title": "mine now"})
    assert r.status_code == 403 and Conversation.objects.get(pk=world["bobs"].pk).title == "Bob's tides"


def test_delete_says_what_it_cannot_remove_then_removes_the_conversation(world, client):
    letters = world["letters"]
    page = client.get(reverse("conversation-delete", args=[letters.pk])).content.decode()
    assert escape(DELETION_NOTE) in page and "on-chain records" in page and "IPFS" in page
    r = client.post(reverse("conversation-delete", args=[letters.pk]), follow=True)
    assert r.status_code == 200 and "cannot remove what is already public" in r.content.decode()
    assert not Conversation.objects.filter(pk=letters.pk).exists()
    assert not Interaction.objects.filter(conversation_id=letters.pk).exists()
    assert client.post(reverse("conversation-delete", args=[world["bobs"].pk])).status_code == 403
    assert Conversation.objects.filter(pk=world["bobs"].pk).exists()


@pytest.mark.parametrize("job, rating", [("queued", None), ("pinned", None), ("submitted", None),
                                         ("onchain", "waiting"), ("onchain", "queued")])
def test_delete_waits_for_evaluations_and_ratings_on_their_way_to_the_chain(world, client, job, rating):
    poems = world["poems"]
    turn(poems, "another", "answer", job=job, rating=rating)
    r = client.post(reverse("conversation-delete", args=[poems.pk]))
    assert r.status_code == 400
    assert "still being evaluated or recorded on-chain" in r.content.decode()
    assert Conversation.objects.get(pk=poems.pk).interactions.count() == 2


def test_a_streaming_answer_also_holds_the_deletion(world):
    poems = world["poems"]
    Interaction.objects.create(conversation=poems, prompt="wait", interaction_id="0x" + "ab" * 32)
    with pytest.raises(conversations.ValidationError):
        conversations.delete_conversation(world["alice"], poems)
    assert Conversation.objects.filter(pk=poems.pk).exists()


def test_the_api_searches_renames_and_deletes_with_the_same_rules(world):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(world["alice"])
    assert [c["title"] for c in api.get("/api/conversations", {"q": "boiler"}).json()] == ["Letters"]
    poems, bobs = world["poems"], world["bobs"]
    assert api.patch(f"/api/conversations/{poems.pk}", {"title": "Tides"}, format="json").json()["title"] == "Tides"
    assert api.patch(f"/api/conversations/{poems.pk}", {"title": " "}, format="json").status_code == 400
    assert api.patch(f"/api/conversations/{bobs.pk}", {"title": "x"}, format="json").status_code == 404
    turn(poems, "more", "text", job="submitted")
    refused = api.delete(f"/api/conversations/{poems.pk}")
    assert refused.status_code == 400 and "still being evaluated" in refused.json()["conversation"][0]
    assert api.delete(f"/api/conversations/{world['letters'].pk}").status_code == 204
    assert api.delete(f"/api/conversations/{bobs.pk}").status_code == 404
    assert sorted(Conversation.objects.values_list("title", flat=True)) == ["Bob's tides", "Tides"]


def test_a_conversation_is_named_by_its_first_message_unless_its_owner_named_it(replay_model):  # noqa: F811
    model, writing = replay_model
    alice = user("alice")
    unnamed = start_conversation(alice, model, writing)
    assert unnamed.title == conversations.default_title(model, writing)
    conversations.begin_interaction(alice, unnamed, "  How do I\tcount the words in a file?\nWith Python, please.")
    assert Conversation.objects.get(pk=unnamed.pk).title == "How do I count the words in a file?"
    Interaction.objects.filter(conversation=unnamed).update(status=Interaction.Status.DONE)
    conversations.begin_interaction(alice, unnamed, "And in a folder?")
    assert Conversation.objects.get(pk=unnamed.pk).title == "How do I count the words in a file?", "the first only"

    long = start_conversation(alice, model, writing)
    conversations.begin_interaction(alice, long, "Write a sonnet about the harbour at dawn, with gulls, nets and "
                                                 "the smell of tar, in the manner of a sailor")
    assert Conversation.objects.get(pk=long.pk).title == "Write a sonnet about the harbour at dawn, with gulls, nets…"

    named = start_conversation(alice, model, writing, "Poems about the sea")
    conversations.begin_interaction(alice, named, "Write a haiku about tides")
    assert Conversation.objects.get(pk=named.pk).title == "Poems about the sea"
    renamed = start_conversation(alice, model, writing)
    conversations.rename_conversation(alice, renamed, "My own name")
    conversations.begin_interaction(alice, renamed, "Write a haiku about tides")
    assert Conversation.objects.get(pk=renamed.pk).title == "My own name"
