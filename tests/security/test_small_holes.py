"""The smaller holes, tried as a hostile or unlucky user would: a suspended account's open chat
socket, the context suggestion box (whose prompts it compares with, how often), the live token
count (how often it reaches the model's endpoint), and the conversation search (whose messages it
reads, and how many)."""

from __future__ import annotations

import asyncio
import json
import re
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
from tests.chat.factories import make_contexts
from tests.chat.test_chat_limits import endpoint_model
from tests.openai_endpoint import OpenAIEndpoint
from tests.personas import user

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
