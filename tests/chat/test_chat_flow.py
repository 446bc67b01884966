"""The chat's flow over the socket: the answer rendered as Markdown while it streams, Stop, a second
message refused while an answer streams, Regenerate and Edit-and-resend (both answers kept and
evaluated, the model's history holding the latest attempt)."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from apps.chat import consumers, conversations
from apps.chat.consumers import ChatConsumer
from apps.chat.conversations import history, start_conversation
from apps.chat.models import Interaction
from apps.oracle.models import EvaluationJob
from tests.personas import user

from .test_chat_socket import replay_model  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

MARKDOWN = "Here is **bold** and code:\n\n```python\nprint('<hi>')\n```\n"


@pytest.fixture
def model_says(monkeypatch):
    """The model streams the given pieces, `delay` seconds apart; it records the messages it was sent."""
    asked = []

    def says(pieces, delay=0.0):
        async def stream(model, messages, gateway=None, **params):
            asked.append(messages)
            for piece in pieces:
                await asyncio.sleep(delay)
                yield piece
        monkeypatch.setattr(conversations, "stream_answer", stream)
        return asked
    return says


async def open_chat(replay_model):  # noqa: F811
    model, writing = replay_model
    alice = await sync_to_async(user)("alice")
    conversation = await sync_to_async(start_conversation)(alice, model, writing)
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), f"/ws/chat/{conversation.pk}/")
    communicator.scope["user"] = alice
    communicator.scope["url_route"] = {"kwargs": {"pk": conversation.pk}}
    connected, _ = await communicator.connect()
    assert connected
    return communicator, conversation


async def until(communicator, marker: str, timeout: float = 10) -> list[str]:
    frames = []
    while True:
        frames.append(await communicator.receive_from(timeout=timeout))
        if marker in frames[-1]:
            return frames


async def send(communicator, **data):
    await communicator.send_to(text_data=json.dumps({**data, "HEADERS": {}}))


async def test_the_answer_is_rendered_as_markdown_while_it_streams_and_when_done(
        replay_model, model_says, monkeypatch):  # noqa: F811
    monkeypatch.setattr(consumers, "RENDER_EVERY_S", 0)
    model_says([MARKDOWN[i:i + 8] for i in range(0, len(MARKDOWN), 8)], delay=0.05)
    communicator, conversation = await open_chat(replay_model)
    await send(communicator, prompt="Show me")
    frames = await until(communicator, "outerHTML:#turn-")
    renders = [f for f in frames if "innerHTML:#answer-text-" in f]
    assert len(renders) >= 3  # progressively, not only at the end
    assert "<strong>bold</strong>" in renders[-1] and 'class="copy-code"' in renders[-1]
    assert "<strong>bold</strong>" in frames[-1] and "&lt;hi&gt;" in frames[-1]
    interaction = await sync_to_async(Interaction.objects.get)(conversation=conversation)
    assert interaction.answer == MARKDOWN  # the raw text is what is saved and evaluated
    await communicator.disconnect()


async def test_stop_keeps_what_came_and_nothing_is_evaluated(replay_model, model_says):  # noqa: F811
    model_says([f"word{n} " for n in range(200)], delay=0.02)
    communicator, conversation = await open_chat(replay_model)
    await send(communicator, prompt="Talk for a long time")
    await until(communicator, "beforeend:#answer-text-")
    await send(communicator, action="stop")
    frames = await until(communicator, "outerHTML:#turn-")
    assert "Stopped by you" in frames[-1] and "not evaluated" in frames[-1]
    interaction = await sync_to_async(Interaction.objects.get)(conversation=conversation)
    assert interaction.status == "stopped"
    assert interaction.answer.startswith("word0 ") and len(interaction.answer.split()) < 200
    assert not await sync_to_async(EvaluationJob.objects.exists)()
    # The conversation goes on: the next message is answered.
    model_says(["Fine."])
    await send(communicator, prompt="Short, then")
    await until(communicator, "outerHTML:#turn-")
    last = await sync_to_async(Interaction.objects.filter(conversation=conversation).last)()
    assert (last.status, last.answer) == ("done", "Fine.")
    await communicator.disconnect()


async def test_a_second_message_while_an_answer_streams_is_refused_not_queued(replay_model, model_says):  # noqa: F811
    model_says([f"w{n} " for n in range(30)], delay=0.02)
    communicator, conversation = await open_chat(replay_model)
    await send(communicator, prompt="First")
    await until(communicator, "beforeend:#answer-text-")
    await send(communicator, prompt="Second")
    frames = await until(communicator, 'innerHTML:#chat-error"><p')
    assert "Wait for the current answer to finish" in frames[-1]
    await until(communicator, "outerHTML:#turn-")
    assert await sync_to_async(list)(Interaction.objects.values_list("prompt", "status")) == [("First", "done")]
    await communicator.disconnect()


async def test_regenerate_and_edit_keep_every_answer_and_evaluate_each(replay_model, model_says):  # noqa: F811
    asked = model_says(["One."])
    communicator, conversation = await open_chat(replay_model)
    await send(communicator, prompt="Name a number")
    await until(communicator, "outerHTML:#turn-")
    first = await sync_to_async(Interaction.objects.get)(conversation=conversation)

    model_says(["Two."])
    await send(communicator, action="regenerate", interaction=first.pk)
    await until(communicator, "outerHTML:#turn-")
    model_says(["Three."])
    second = await sync_to_async(Interaction.objects.last)()
    await send(communicator, action="edit", interaction=second.pk, prompt="Name an odd number")
    await until(communicator, "outerHTML:#turn-")

    turns = await sync_to_async(list)(Interaction.objects.order_by("id").values_list(
        "prompt", "answer", "status", "replaces"))
    assert turns == [("Name a number", "One.", "done", None), ("Name a number", "Two.", "done", first.pk),
                     ("Name an odd number", "Three.", "done", first.pk)]
    assert await sync_to_async(EvaluationJob.objects.count)() == 3
    # Each attempt was asked with the same history: none of the answers it replaces.
    assert [m[-1]["content"] for m in asked] == ["Name a number", "Name a number", "Name an odd number"]
    assert all(len(m) == 1 for m in asked)

    # A later turn sees only the latest attempt; an earlier turn cannot be asked again.
    model_says(["Four."])
    await send(communicator, prompt="And another")
    await until(communicator, "outerHTML:#turn-")
    last = await sync_to_async(Interaction.objects.last)()
    assert await sync_to_async(history)(last) == [
        {"role": "user", "content": "Name an odd number"}, {"role": "assistant", "content": "Three."},
        {"role": "user", "content": "And another"}]
    await send(communicator, action="regenerate", interaction=first.pk)
    frames = await until(communicator, 'innerHTML:#chat-error"><p')
    assert "Only the last message can be asked again" in frames[-1]
    await communicator.disconnect()
