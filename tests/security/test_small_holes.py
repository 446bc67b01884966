"""The smaller holes, tried as a hostile or unlucky user would: a suspended account's open chat
socket, the context suggestion box (whose prompts it compares with, how often), the live token
count (how often it reaches the model's endpoint), and the conversation search (whose messages it
reads, and how many)."""

from __future__ import annotations

import json
import re
import secrets
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.chat import accounts, moderation
from apps.chat.consumers import ChatConsumer
from apps.chat.conversations import search_conversations, start_conversation
from apps.chat.models import Interaction
from apps.chat.suggest import suggest
from lib.ids import hex32
from tests.chat.factories import make_contexts
from tests.chat.test_chat_limits import endpoint_model
from tests.openai_endpoint import OpenAIEndpoint
from tests.personas import PASSWORD, developer, expert, user

CLOSED_FOR_THE_ACCOUNT = 4403  # the close code of a socket its account may not hold
LONG_ANSWER = " ".join(f"word{n}" for n in range(400))


# --- a suspended account's sockets ---------------------------------------------------------------------

async def _open_socket(conversation, owner) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = owner
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    assert (await communicator.connect())[0]
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_suspending_an_account_ends_its_open_socket_at_once_even_while_an_answer_streams(settings):
    with OpenAIEndpoint(answer=LONG_ANSWER, delay=0.05) as endpoint:  # 400 words over some 20 s
        settings.LLMCHAIN_OUTBOUND_ALLOW = endpoint.url.split("/")[2]
        writing, = await sync_to_async(make_contexts)("writing")
        model = await sync_to_async(endpoint_model)(endpoint.url, "tiny")
        alice = await sync_to_async(user)("alice")
        conversation = await sync_to_async(start_conversation)(alice, model, writing)
        socket = await _open_socket(conversation, alice)
        await socket.send_to(text_data=json.dumps({"prompt": "Tell me a long story"}))
        pieces = 0
        while pieces < 3:  # the answer is streaming
            pieces += "beforeend:#answer-text-" in await socket.receive_from(timeout=10)

        await sync_to_async(moderation.suspend_account)(alice, "abuse")
        suspended_at = time.monotonic()
        frames = []
        while True:
            output = await socket.receive_output(timeout=3)
            if output["type"] == "websocket.close":
                break
            frames.append(output.get("text", ""))
        assert time.monotonic() - suspended_at < 3
        assert output["code"] == CLOSED_FOR_THE_ACCOUNT
        assert "suspended" in frames[-1]
        await socket.wait()
    interaction = await sync_to_async(Interaction.objects.get)(conversation=conversation)
    assert interaction.status == Interaction.Status.FAILED  # the answer stopped with what had come
    assert len(interaction.answer.split()) < 200


@pytest.mark.django_db(transaction=True)
async def test_a_socket_opened_before_the_suspension_takes_no_prompt_after_it_even_if_its_close_was_lost(
        monkeypatch):
    writing, = await sync_to_async(make_contexts)("writing")
    model = await sync_to_async(endpoint_model)("http://tiny.example/v1", "tiny")
    alice = await sync_to_async(user)("alice")
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    socket = await _open_socket(conversation, alice)
    # The close goes through the channel layer; one that loses it (the in-memory layer of another
    # process) must not leave the socket usable.
    monkeypatch.setattr(moderation, "end_open_sockets", lambda user_id: None)
    await sync_to_async(moderation.suspend_account)(alice, "abuse")
    await socket.send_to(text_data=json.dumps({"prompt": "Hello"}))
    assert "suspended" in await socket.receive_from(timeout=5)
    assert (await socket.receive_output(timeout=5)) == {"type": "websocket.close", "code": CLOSED_FOR_THE_ACCOUNT}
    assert not await sync_to_async(Interaction.objects.exists)()


# --- the context suggestion ------------------------------------------------------------------------

PRIVATE = "Draft my letter to Margaret about selling the lake house in Duluth before the divorce"


def _suggested(client, prompt: str) -> list[str]:
    """The contexts the box offers, closest first (it shows names only, no scores)."""
    html = client.get(reverse("chat-suggest"), {"prompt": prompt}).content.decode()
    return re.findall(r'class="suggested" href="[^"]*">(\w+)</a>', html)


def _score(prompt: str, name: str) -> float:
    return next(score for context, score in suggest(prompt) if context.name == name)


@pytest.mark.django_db
def test_the_suggestion_box_compares_with_shared_prompts_only(client):
    _, coding = make_contexts("writing", "coding")
    bob = user("bob")
    conversation = start_conversation(bob, endpoint_model("http://tiny.example/v1", "tiny"), coding)
    Interaction.objects.create(conversation=conversation, prompt=PRIVATE, answer="...", status="done",
                               interaction_id="0x" + "ab" * 32)
    client.force_login(user("mallory"), backend="apps.chat.limits.AccountBackend")
    # Bob does not share his prompts: nothing tells how close a guess comes to his, not even the order.
    assert _suggested(client, PRIVATE)[0] == "writing"
    assert _score(PRIVATE, "coding") < 0.9
    accounts.set_share_prompts(bob, True)  # now his prompts are public: the box may use them
    assert _suggested(client, PRIVATE)[0] == "coding"
    assert _score(PRIVATE, "coding") > 0.99


@pytest.mark.django_db
def test_suggestions_past_their_rate_pause_and_say_so(client, settings, monkeypatch):
    make_contexts("writing", "coding")
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "suggestions", "2/min")
    client.force_login(user("mallory"), backend="apps.chat.limits.AccountBackend")
    for _ in range(2):
        assert _suggested(client, "Fix my Python script")
    paused = client.get(reverse("chat-suggest"), {"prompt": "Fix my Python script"}).content.decode()
    assert "Suggestions pause for" in paused and 'class="suggested"' not in paused


# --- the live token count ----------------------------------------------------------------------------

@pytest.fixture
def counting(settings):
    with OpenAIEndpoint() as endpoint:
        settings.LLMCHAIN_OUTBOUND_ALLOW = endpoint.url.split("/")[2]
        writing, = make_contexts("writing")
        alice = user("alice")
        yield start_conversation(alice, endpoint_model(endpoint.url, "tiny"), writing), alice, endpoint


def _asked(endpoint) -> int:
    return len(endpoint.requests)


@pytest.mark.django_db
def test_the_token_count_asks_the_model_s_endpoint_once_per_text_and_not_past_its_rate(
        client, counting, settings, monkeypatch):
    conversation, alice, endpoint = counting
    monkeypatch.setitem(settings.LLMCHAIN_RATES, "counts", "5/min")
    client.force_login(alice, backend="apps.chat.limits.AccountBackend")
    url = reverse("conversation-count", args=[conversation.pk])
    assert client.post(url, {"prompt": "Hello there"}).status_code == 200
    asked = _asked(endpoint)
    assert asked >= 1
    for _ in range(3):  # the same text, and an endpoint that said it has no tokenizer: asked no more
        assert client.post(url, {"prompt": "Hello there"}).status_code == 200
        assert client.post(url, {"prompt": "Hello there, again"}).status_code == 200
    assert _asked(endpoint) == asked
    paused = client.post(url, {"prompt": "Hello there"}).content.decode()
    assert "11 characters" in paused and "pauses for" in paused


# --- the conversation search -----------------------------------------------------------------------------

def _turn(conversation, text: str) -> Interaction:
    return Interaction.objects.create(conversation=conversation, prompt=text, answer="fine", status="done",
                                      interaction_id=hex32(secrets.token_bytes(32)))


@pytest.mark.django_db
def test_the_conversation_search_reads_only_the_user_s_own_latest_messages(settings):
    writing, = make_contexts("writing")
    model = endpoint_model("http://tiny.example/v1", "tiny")
    alice, bob = user("alice"), user("bob")
    bobs = start_conversation(bob, model, writing)
    for n in range(5):
        _turn(bobs, f"bob's note {n} about heron")
    old, new = start_conversation(alice, model, writing), start_conversation(alice, model, writing)
    _turn(old, "an old heron sighting")
    for n in range(3):
        _turn(new, f"a new heron sighting {n}")
    settings.LLMCHAIN_SEARCH_MESSAGES = 3
    with CaptureQueriesContext(connection) as queries:
        found = list(search_conversations(alice, "heron"))
    assert found == [new]  # the old message is past the latest three
    sql, = [q["sql"] for q in queries.captured_queries]
    messages_read = sql[sql.index('FROM "chat_interaction"'):]  # the LIKE's rows: hers, the latest three
    assert f'"user_id" = {alice.pk}' in messages_read and "LIMIT 3" in messages_read, messages_read


@pytest.mark.django_db
def test_a_long_search_query_is_cut_before_it_reaches_the_database():
    alice = user("alice")
    with CaptureQueriesContext(connection) as queries:
        list(search_conversations(alice, "x" * 10_000))
    assert all("x" * 101 not in q["sql"] for q in queries.captured_queries)


# --- logging in -------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_suspended_account_is_told_so_with_its_right_password_and_a_guesser_learns_nothing(client):
    alice = user("alice")
    moderation.suspend_account(alice, "stuffing ratings")
    right = client.post(reverse("login"), {"username": "alice", "password": PASSWORD}).content.decode()
    assert "This account is suspended" in right and "didn&#x27;t match" not in right
    assert "stuffing" not in right  # the operator's reason is not the page's to tell
    assert "_auth_user_id" not in client.session
    wrong = client.post(reverse("login"), {"username": "alice", "password": "a guess"}, REMOTE_ADDR="192.0.2.7")
    assert "didn&#x27;t match" in wrong.content.decode() and "suspended" not in wrong.content.decode()
    token = client.post("/api/token", {"username": "alice", "password": PASSWORD}, REMOTE_ADDR="192.0.2.8")
    assert token.status_code == 403 and "This account is suspended" in token.json()["detail"]
    guessed = client.post("/api/token", {"username": "alice", "password": "a guess"}, REMOTE_ADDR="192.0.2.8")
    assert guessed.status_code == 400 and "suspended" not in guessed.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("persona, lands_on", [(user, "chat"), (expert, "annotate"), (developer, "models")])
def test_each_role_lands_where_its_work_is_after_logging_in(client, persona, lands_on):
    account = persona()
    response = client.post(reverse("login"), {"username": account.username, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == reverse(lands_on)
    client.post(reverse("logout"))
    asked = client.post(reverse("login") + "?next=/models/",
                        {"username": account.username, "password": PASSWORD, "next": "/models/"})
    assert asked["Location"] == "/models/"  # a page asked for still wins
