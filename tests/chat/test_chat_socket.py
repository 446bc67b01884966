"""Chatting over the socket with a replay model: the answer streams as escaped htmx fragments,
and the finished answer is saved together with its evaluation job."""

import json

import pytest
from channels.testing import WebsocketCommunicator

from apps.chat.consumers import ChatConsumer
from apps.chat.conversations import start_conversation
from apps.chat.models import Interaction
from apps.chat.replay import import_mtbench
from apps.oracle.models import EvaluationJob
from tests.personas import outsider, user

from .factories import make_contexts, write_mtbench

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "Write a haiku about <b>ledgers</b>."
FOLLOW_UP = "Now make it rhyme."
ANSWER_1 = "Blocks fall like <script>alert(1)</script> snow"
ANSWER_2 = "Ledgers <img src=x onerror=alert(2)> glow"


@pytest.fixture
def replay_model(tmp_path, settings):
    settings.LLMCHAIN_IPFS_DIR = tmp_path / "ipfs"
    root = write_mtbench(tmp_path / "mt_bench", {1: ("writing", [QUESTION, FOLLOW_UP])},
                         {"poet-1b": {1: [ANSWER_1, ANSWER_2]}})
    contexts = make_contexts("writing", "coding")
    counts = import_mtbench(root, contexts=contexts, progress=lambda _: None)
    assert counts == {"models": 1, "answers": 2, "skipped": 0}
    from apps.chat.models import RegisteredModel
    return RegisteredModel.objects.get(name="poet-1b"), contexts[0]


async def ask(conversation, owner, prompt):
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = owner
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_to(text_data=json.dumps({"prompt": prompt, "HEADERS": {}}))
    frames = []
    while True:
        frame = await communicator.receive_from(timeout=10)
        frames.append(frame)
        if 'outerHTML:#turn-' in frame or 'innerHTML:#chat-error"><p' in frame:
            break
    await communicator.disconnect()
    return frames


async def test_the_answer_streams_piece_by_piece_escaped_and_is_saved_with_its_job(replay_model):
    from asgiref.sync import sync_to_async
    model, writing = replay_model
    alice = await sync_to_async(user)("alice")
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    frames = await ask(conversation, alice, QUESTION)
    pieces = [f for f in frames if "beforeend:#answer-text-" in f]
    assert len(pieces) >= 5  # token by token, not one block
    html = "".join(frames)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    interaction = await sync_to_async(Interaction.objects.get)(conversation=conversation)
    assert interaction.status == "done" and interaction.answer == ANSWER_1
    job = await sync_to_async(EvaluationJob.objects.get)(interaction=interaction)
    assert job.status == "queued"
    # The follow-up is answered with the recorded second turn, the conversation as history.
    frames = await ask(conversation, alice, FOLLOW_UP)
    assert "<img src=x" not in "".join(frames)
    second = await sync_to_async(Interaction.objects.filter(conversation=conversation).last)()
    assert second.answer == ANSWER_2


async def test_a_replay_model_says_plainly_it_cannot_answer_other_prompts(replay_model):
    """A question it has no recorded answer to fails with the reason: no answer is saved, so nothing is
    evaluated, put on-chain or offered for rating (a refusal is never an answer)."""
    from asgiref.sync import sync_to_async
    model, writing = replay_model
    alice = await sync_to_async(user)("alice")
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    frames = await ask(conversation, alice, "What is the capital of France?")
    assert "answers only its recorded MT-Bench questions" in "".join(frames)
    interaction = await sync_to_async(Interaction.objects.get)(conversation=conversation)
    assert (interaction.status, interaction.answer) == ("failed", "")
    assert "answers only its recorded MT-Bench questions" in interaction.error
    # A follow-up asked out of order is not a known turn either.
    await ask(conversation, alice, FOLLOW_UP)
    second = await sync_to_async(Interaction.objects.filter(conversation=conversation).last)()
    assert (second.status, second.answer) == ("failed", "")
    assert not await sync_to_async(EvaluationJob.objects.exists)()


async def test_empty_prompts_and_strangers_are_refused(replay_model):
    from asgiref.sync import sync_to_async
    model, writing = replay_model
    alice = await sync_to_async(user)("alice")
    mallory = await sync_to_async(outsider)()
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    frames = await ask(conversation, alice, "   ")
    assert "Write a message first" in frames[-1]
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = mallory
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    connected, code = await communicator.connect()
    assert not connected and code == 4403
    assert not await sync_to_async(Interaction.objects.exists)()


async def test_the_first_message_renames_the_page_heading_without_a_reload(replay_model):
    """The conversation is named by its first message: the socket's first frame carries the new heading
    (escaped) for htmx to swap in; later messages, and a conversation its owner named, leave it be."""
    from asgiref.sync import sync_to_async
    from django.test import Client
    from django.urls import reverse

    from apps.chat.conversations import rename_conversation
    model, writing = replay_model
    alice = await sync_to_async(user)("alice")
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    client = Client()
    await sync_to_async(client.force_login)(alice)
    page = await sync_to_async(client.get)(reverse("conversation", args=[conversation.pk]))
    assert f'<h1 id="conversation-heading">{model.name} · writing</h1>' in page.content.decode()

    heading = '<h1 id="conversation-heading" hx-swap-oob="true">'
    frames = await ask(conversation, alice, QUESTION)
    assert [f for f in frames if heading in f] == [frames[0]]
    assert f"{heading}Write a haiku about &lt;b&gt;ledgers&lt;/b&gt;.</h1>" in frames[0]
    assert heading not in "".join(await ask(conversation, alice, FOLLOW_UP))

    named = await sync_to_async(start_conversation)(alice, model, writing)
    await sync_to_async(rename_conversation)(alice, named, "Haiku practice")
    assert heading not in "".join(await ask(named, alice, QUESTION))
