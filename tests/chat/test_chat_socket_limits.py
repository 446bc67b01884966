"""The chat socket's limits: a cap on open sockets per user, kept in the shared cache;
evaluations pushed once they commit instead of every socket reading the database every second, with a
slow look at the rows only where the channel layer cannot carry a worker's push (the in-memory one)."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from django.db import transaction

from apps.chat import consumers
from apps.chat.consumers import CLOSE_TOO_MANY, ChatConsumer
from apps.chat.conversations import start_conversation
from apps.chat.models import Interaction
from apps.oracle.models import EvaluationJob
from tests.personas import user

from .test_chat_socket import replay_model  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


async def connect(conversation, owner):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = owner
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    connected, _ = await communicator.connect()
    assert connected
    return communicator


@pytest.fixture
def chat(replay_model):  # noqa: F811
    model, writing = replay_model
    alice = user("alice")
    return start_conversation(alice, model, writing), alice


async def test_a_user_may_hold_only_so_many_sockets_and_a_closed_one_frees_its_place(chat, settings):
    settings.LLMCHAIN_CHAT_SOCKETS_PER_USER = 2
    conversation, alice = chat
    first, second = await connect(conversation, alice), await connect(conversation, alice)
    third = await connect(conversation, alice)
    refused = await third.receive_from(timeout=5)
    assert "You already have 2 chats open" in refused and "Close one of them" in refused
    assert (await third.receive_output(timeout=5)) == {"type": "websocket.close", "code": CLOSE_TOO_MANY}
    # Another user is not held back by Alice's sockets.
    bob = await sync_to_async(user)("bob")
    bobs = await sync_to_async(start_conversation)(bob, conversation.model, conversation.context)
    theirs = await connect(bobs, bob)
    assert await theirs.receive_nothing(timeout=0.2)
    await first.disconnect()
    fourth = await connect(conversation, alice)
    assert await fourth.receive_nothing(timeout=0.2)  # accepted: no refusal came
    taken = [await cache.aget(f"chat-socket:{alice.id}:{n}") for n in range(2)]
    assert all(taken) and len(set(taken)) == 2
    for c in (second, fourth, theirs):
        await c.disconnect()
    assert [await cache.aget(f"chat-socket:{alice.id}:{n}") for n in range(2)] == [None, None]


async def test_evaluations_are_pushed_on_commit(chat):
    conversation, alice = chat
    socket = await connect(conversation, alice)
    interaction = await sync_to_async(Interaction.objects.create)(
        conversation=conversation, prompt="Hi", answer="Hello", status="done", interaction_id="0x" + "ef" * 32)

    def move_on():
        from apps.oracle.jobs import _save
        job = EvaluationJob.objects.get(interaction=interaction) if EvaluationJob.objects.filter(
            interaction=interaction).exists() else EvaluationJob.objects.create(interaction=interaction)
        with transaction.atomic():
            _save(job, status=EvaluationJob.Status.SCORED, sa=str(7 * 10**17), wa=str(10**18))
    await sync_to_async(move_on)()
    pushed = await socket.receive_from(timeout=2)
    assert f"outerHTML:#evaluation-{interaction.pk}" in pushed and 'data-status="scored"' in pushed
    await socket.disconnect()


@pytest.mark.parametrize("local, looks", [(True, True), (False, False)])
async def test_only_the_in_memory_layer_makes_a_socket_look_at_the_rows(chat, monkeypatch, local, looks):
    conversation, alice = chat
    monkeypatch.setattr(consumers, "FALLBACK_POLL_S", 0.05)
    monkeypatch.setattr(consumers, "SLOT_REFRESH_S", 0.05)
    monkeypatch.setattr(ChatConsumer, "_layer_is_local", lambda self: local)
    reads = []

    async def counting(self):
        reads.append(1)
        return {}
    monkeypatch.setattr(ChatConsumer, "_evaluation_states", counting)
    socket = await connect(conversation, alice)
    await asyncio.sleep(0.6)
    await socket.disconnect()
    assert (len(reads) >= 5) is looks and (len(reads) == 0) is (not looks)
